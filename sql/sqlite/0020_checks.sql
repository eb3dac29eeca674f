-- The same three tables with every CHECK `col IN (a, b…)` written `col = a OR col = b OR …`.
-- SQLite runs an IN list in a CHECK by building a temporary b-tree each time the check runs:
-- seven such checks run for every usage record the ledger writer inserts (its endpoint,
-- stream, outcome, usage source and waiver; its debit's kind; the change_log row its trigger
-- writes), and a profile saw about four b-trees built per record, about 1.4 µs each. SQLite
-- changes a constraint only by rebuilding its table (foreign keys are off while a migration
-- runs); nothing else changes. The PostgreSQL twin has nothing to do.

-- Other tables' triggers write to change_log: while it is rebuilt they name a table that is
-- briefly gone, which a rename checks unless in its legacy mode (switched back at the end).
PRAGMA legacy_alter_table = ON;
DROP TRIGGER usage_records_log_spend;

-- change_log
CREATE TABLE change_log_v20 (
    -- AUTOINCREMENT: a seq is never reused, even after old rows are pruned.
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL CHECK (kind = 'key' OR kind = 'workspace' OR kind = 'balance' OR kind = 'catalog' OR kind = 'spend'),
    ref_id      TEXT NOT NULL,
    created_at  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER))
) STRICT;

INSERT INTO change_log_v20 (seq, kind, ref_id, created_at)
SELECT seq, kind, ref_id, created_at
FROM change_log ORDER BY seq;

-- AUTOINCREMENT's high-water mark carries over: a pruned seq is never handed out again.
UPDATE sqlite_sequence
SET seq = MAX(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'change_log'), 0))
WHERE name = 'change_log_v20';

DROP TABLE change_log;
ALTER TABLE change_log_v20 RENAME TO change_log;


-- ledger_entries
CREATE TABLE ledger_entries_v20 (
    -- Insertion order: the tie-break between entries with the same created_at. (The entry id
    -- is the logical key; it is UNIQUE NOT NULL.)
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    kind          TEXT NOT NULL CHECK (kind = 'credit' OR kind = 'refund' OR kind = 'debit'),
    amount_pico   INTEGER NOT NULL,
    note          TEXT,
    created_at    INTEGER NOT NULL,
    -- A debit charges exactly one usage record, and a usage record is charged at most once
    -- (UNIQUE); credits and refunds reference none. The record may have been archived.
    usage_id      TEXT UNIQUE,
    CHECK ((kind = 'credit' AND amount_pico > 0) OR (kind = 'refund' AND amount_pico < 0)
           OR (kind = 'debit' AND amount_pico <= 0)),
    CHECK ((kind = 'debit') = (usage_id IS NOT NULL)),
    CHECK (kind <> 'refund' OR note IS NOT NULL)
) STRICT;

INSERT INTO ledger_entries_v20 (seq, id, workspace_id, kind, amount_pico, note, created_at, usage_id)
SELECT seq, id, workspace_id, kind, amount_pico, note, created_at, usage_id
FROM ledger_entries ORDER BY seq;

DROP TABLE ledger_entries;
ALTER TABLE ledger_entries_v20 RENAME TO ledger_entries;

CREATE INDEX ledger_entries_workspace_idx ON ledger_entries (workspace_id, created_at, seq);
CREATE INDEX ledger_entries_page_idx ON ledger_entries (workspace_id, created_at, id);
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger_entries is append-only: UPDATE refused');
END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger_entries is append-only: DELETE refused');
END;

-- usage_records
CREATE TABLE usage_records_v20 (
    seq                          INTEGER PRIMARY KEY,
    id                           TEXT NOT NULL UNIQUE,
    workspace_id                 TEXT NOT NULL,
    key_id                       TEXT NOT NULL,
    model_id                     TEXT NOT NULL,
    route                        TEXT NOT NULL,
    endpoint                     TEXT NOT NULL
        CHECK (endpoint = 'chat' OR endpoint = 'embeddings' OR endpoint = 'messages' OR endpoint = 'responses'),
    stream                       INTEGER NOT NULL CHECK (stream = 0 OR stream = 1),
    input_tokens                 INTEGER NOT NULL CHECK (input_tokens >= 0),
    cache_read_tokens            INTEGER NOT NULL CHECK (cache_read_tokens >= 0),
    cache_write_tokens           INTEGER NOT NULL CHECK (cache_write_tokens >= 0),
    output_tokens                INTEGER NOT NULL CHECK (output_tokens >= 0),
    reasoning_tokens             INTEGER NOT NULL CHECK (reasoning_tokens >= 0),
    input_price_micro            INTEGER NOT NULL CHECK (input_price_micro >= 0),
    output_price_micro           INTEGER NOT NULL CHECK (output_price_micro >= 0),
    cache_read_price_micro       INTEGER CHECK (cache_read_price_micro >= 0),
    cache_write_price_micro      INTEGER CHECK (cache_write_price_micro >= 0),
    cost_pico                    INTEGER NOT NULL CHECK (cost_pico >= 0),
    outcome                      TEXT NOT NULL
        CHECK (outcome = 'complete' OR outcome = 'client_disconnected' OR outcome = 'upstream_failed'),
    started_at                   INTEGER NOT NULL,
    finished_at                  INTEGER NOT NULL,
    upstream_latency_us          INTEGER CHECK (upstream_latency_us >= 0),
    ttft_us                      INTEGER CHECK (ttft_us >= 0),
    spend_window_start           INTEGER,
    usage_source                 TEXT NOT NULL DEFAULT 'reported'
        CHECK (usage_source = 'reported' OR usage_source = 'estimated'),
    audio_input_tokens           INTEGER NOT NULL DEFAULT 0 CHECK (audio_input_tokens >= 0),
    cache_write_1h_tokens        INTEGER NOT NULL DEFAULT 0 CHECK (cache_write_1h_tokens >= 0),
    cache_storage_token_seconds  INTEGER NOT NULL DEFAULT 0
        CHECK (cache_storage_token_seconds >= 0),
    audio_input_price_micro      INTEGER CHECK (audio_input_price_micro >= 0),
    cache_write_1h_price_micro   INTEGER CHECK (cache_write_1h_price_micro >= 0),
    cache_storage_price_micro    INTEGER CHECK (cache_storage_price_micro >= 0),
    attempts                     INTEGER NOT NULL DEFAULT 1 CHECK (attempts >= 1),
    request_id                   TEXT CHECK (length(request_id) BETWEEN 1 AND 128),
    review                       TEXT CHECK (length(review) BETWEEN 1 AND 1024),
    client_addr                  TEXT CHECK (length(client_addr) BETWEEN 1 AND 64),
    upstream_request_id          TEXT CHECK (length(upstream_request_id) BETWEEN 1 AND 128),
    -- The request produced no output and failed, and the operator waives such requests
    -- (`tollgate.waive_empty_failures`): its tokens and prices are kept, its cost is 0.
    waived                       INTEGER NOT NULL DEFAULT 0 CHECK (waived = 0 OR waived = 1),
    FOREIGN KEY (key_id, workspace_id) REFERENCES api_keys (id, workspace_id),
    CONSTRAINT usage_records_reasoning_in_output CHECK (reasoning_tokens <= output_tokens),
    -- An overflowing product turns into a REAL, which is never equal to the INTEGER cost.
    CONSTRAINT usage_records_cost_exact CHECK (cost_pico = CASE WHEN waived THEN 0 ELSE
        input_tokens * input_price_micro
        + audio_input_tokens * COALESCE(audio_input_price_micro, input_price_micro)
        + cache_read_tokens * COALESCE(cache_read_price_micro, input_price_micro)
        + cache_write_tokens * COALESCE(cache_write_price_micro, input_price_micro)
        + cache_write_1h_tokens * COALESCE(cache_write_1h_price_micro, input_price_micro)
        + output_tokens * output_price_micro
        + (cache_storage_token_seconds * COALESCE(cache_storage_price_micro, 0) + 3599) / 3600
        END),
    CONSTRAINT usage_records_waived_empty CHECK (NOT waived OR output_tokens = 0)
) STRICT;

INSERT INTO usage_records_v20 (seq, id, workspace_id, key_id, model_id, route, endpoint, stream, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens, input_price_micro, output_price_micro, cache_read_price_micro, cache_write_price_micro, cost_pico, outcome, started_at, finished_at, upstream_latency_us, ttft_us, spend_window_start, usage_source, audio_input_tokens, cache_write_1h_tokens, cache_storage_token_seconds, audio_input_price_micro, cache_write_1h_price_micro, cache_storage_price_micro, attempts, request_id, review, client_addr, upstream_request_id, waived)
SELECT seq, id, workspace_id, key_id, model_id, route, endpoint, stream, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens, input_price_micro, output_price_micro, cache_read_price_micro, cache_write_price_micro, cost_pico, outcome, started_at, finished_at, upstream_latency_us, ttft_us, spend_window_start, usage_source, audio_input_tokens, cache_write_1h_tokens, cache_storage_token_seconds, audio_input_price_micro, cache_write_1h_price_micro, cache_storage_price_micro, attempts, request_id, review, client_addr, upstream_request_id, waived
FROM usage_records ORDER BY seq;

DROP TABLE usage_records;
ALTER TABLE usage_records_v20 RENAME TO usage_records;

CREATE INDEX usage_records_page_idx ON usage_records (workspace_id, finished_at, id);
CREATE INDEX usage_records_key_page_idx ON usage_records (workspace_id, key_id, finished_at, id);
CREATE TRIGGER usage_records_no_update BEFORE UPDATE ON usage_records
BEGIN
    SELECT RAISE(ABORT, 'usage_records is append-only: UPDATE refused');
END;
CREATE TRIGGER usage_records_no_delete BEFORE DELETE ON usage_records
BEGIN
    SELECT RAISE(ABORT, 'usage_records is append-only: DELETE refused');
END;
CREATE TRIGGER usage_records_log_spend AFTER INSERT ON usage_records
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('spend', NEW.key_id);
END;

PRAGMA legacy_alter_table = OFF;
