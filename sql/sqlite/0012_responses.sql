-- The Responses front door: the answers it keeps for `previous_response_id`, and its usage
-- records; see sql/postgres/0012_responses.sql.
--
-- SQLite cannot change a table's CHECK in place, so usage_records is rebuilt to accept
-- endpoint 'responses', exactly as 0011 rebuilt it (create, copy, drop, rename; the migrator
-- runs with foreign keys off and checks them before it commits, and ledger_entries' reference
-- to usage_records (id) names the table, so it holds the rebuilt one): every column of 0011's
-- table in the same order with the same constraints, and every index and trigger created
-- again (0007's two page indexes, 0001's append-only and change-feed triggers).
CREATE TABLE responses (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    -- The key that made it (NULL when unknown); a key of the same workspace.
    key_id        TEXT,
    model         TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    items         TEXT NOT NULL,
    response      TEXT NOT NULL,
    FOREIGN KEY (key_id, workspace_id) REFERENCES api_keys (id, workspace_id),
    CHECK (expires_at > created_at)
) STRICT;
CREATE INDEX responses_expires_idx ON responses (expires_at);

CREATE TABLE usage_records_v12 (
    seq                          INTEGER PRIMARY KEY,
    id                           TEXT NOT NULL UNIQUE,
    workspace_id                 TEXT NOT NULL,
    key_id                       TEXT NOT NULL,
    model_id                     TEXT NOT NULL,
    route                        TEXT NOT NULL,
    endpoint                     TEXT NOT NULL
        CHECK (endpoint IN ('chat', 'embeddings', 'messages', 'responses')),
    stream                       INTEGER NOT NULL CHECK (stream IN (0, 1)),
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
        CHECK (outcome IN ('complete', 'client_disconnected', 'upstream_failed')),
    started_at                   INTEGER NOT NULL,
    finished_at                  INTEGER NOT NULL,
    upstream_latency_us          INTEGER CHECK (upstream_latency_us >= 0),
    ttft_us                      INTEGER CHECK (ttft_us >= 0),
    spend_window_start           INTEGER,
    usage_source                 TEXT NOT NULL DEFAULT 'reported'
        CHECK (usage_source IN ('reported', 'estimated')),
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
    FOREIGN KEY (key_id, workspace_id) REFERENCES api_keys (id, workspace_id),
    CONSTRAINT usage_records_reasoning_in_output CHECK (reasoning_tokens <= output_tokens),
    -- An overflowing product turns into a REAL, which is never equal to the INTEGER cost.
    CONSTRAINT usage_records_cost_exact CHECK (cost_pico =
        input_tokens * input_price_micro
        + audio_input_tokens * COALESCE(audio_input_price_micro, input_price_micro)
        + cache_read_tokens * COALESCE(cache_read_price_micro, input_price_micro)
        + cache_write_tokens * COALESCE(cache_write_price_micro, input_price_micro)
        + cache_write_1h_tokens * COALESCE(cache_write_1h_price_micro, input_price_micro)
        + output_tokens * output_price_micro
        + (cache_storage_token_seconds * COALESCE(cache_storage_price_micro, 0) + 3599) / 3600)
) STRICT;

INSERT INTO usage_records_v12 (seq, id, workspace_id, key_id, model_id, route, endpoint,
    stream, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
    reasoning_tokens, input_price_micro, output_price_micro, cache_read_price_micro,
    cache_write_price_micro, cost_pico, outcome, started_at, finished_at, upstream_latency_us,
    ttft_us, spend_window_start, usage_source, audio_input_tokens, cache_write_1h_tokens,
    cache_storage_token_seconds, audio_input_price_micro, cache_write_1h_price_micro,
    cache_storage_price_micro, attempts, request_id, review)
SELECT seq, id, workspace_id, key_id, model_id, route, endpoint,
    stream, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
    reasoning_tokens, input_price_micro, output_price_micro, cache_read_price_micro,
    cache_write_price_micro, cost_pico, outcome, started_at, finished_at, upstream_latency_us,
    ttft_us, spend_window_start, usage_source, audio_input_tokens, cache_write_1h_tokens,
    cache_storage_token_seconds, audio_input_price_micro, cache_write_1h_price_micro,
    cache_storage_price_micro, attempts, request_id, review
FROM usage_records ORDER BY seq;

DROP TABLE usage_records;
ALTER TABLE usage_records_v12 RENAME TO usage_records;

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
