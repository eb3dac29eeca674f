-- The admin API (issue 13); see sql/postgres/0007_admin.sql.
--
-- Pages are newest first by (time, id) and continue from a cursor, so each listing has an
-- index in that order (a deep page is one range scan, never an OFFSET).
CREATE INDEX workspaces_created_idx ON workspaces (created_at, id);
CREATE INDEX api_keys_page_idx ON api_keys (workspace_id, created_at, id);
CREATE INDEX ledger_entries_page_idx ON ledger_entries (workspace_id, created_at, id);
-- Every usage record pays for each index on insert (the ledger writer's main cost), so the
-- record pages take the place of the (workspace, finished_at, seq) index rather than add to
-- it, and only the key filter gets its own; a model filter walks the workspace's index.
DROP INDEX usage_records_workspace_idx;
CREATE INDEX usage_records_page_idx ON usage_records (workspace_id, finished_at, id);
CREATE INDEX usage_records_key_page_idx ON usage_records (workspace_id, key_id, finished_at, id);

-- Who changed what, kept forever: the database refuses UPDATE and DELETE.
CREATE TABLE audit_log (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    at            INTEGER NOT NULL,
    actor         TEXT NOT NULL,
    action        TEXT NOT NULL,
    workspace_id  TEXT,
    target        TEXT NOT NULL,
    before_json   TEXT,
    after_json    TEXT
) STRICT;
CREATE INDEX audit_log_page_idx ON audit_log (at, id);
CREATE INDEX audit_log_workspace_page_idx ON audit_log (workspace_id, at, id);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only: UPDATE refused');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only: DELETE refused');
END;

-- Usage per workspace, UTC day and model: a derived cache like balances, updated by
-- record_usage in the same transaction as the records it sums (one upsert per group of a
-- batch), so charts never scan usage_records. Not in the change feed. `day` is 'YYYY-MM-DD'
-- text in both dialects. Existing records are summed here once.
CREATE TABLE usage_daily (
    workspace_id   TEXT NOT NULL,
    day            TEXT NOT NULL,
    model_id       TEXT NOT NULL,
    requests       INTEGER NOT NULL,
    input_tokens   INTEGER NOT NULL,
    output_tokens  INTEGER NOT NULL,
    cost_pico      INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, day, model_id)
) STRICT;
INSERT INTO usage_daily (workspace_id, day, model_id, requests, input_tokens, output_tokens,
                         cost_pico)
SELECT workspace_id, date(finished_at / 1000000, 'unixepoch'), model_id, COUNT(*),
       SUM(input_tokens + cache_read_tokens + cache_write_tokens + cache_write_1h_tokens
           + audio_input_tokens),
       SUM(output_tokens), SUM(cost_pico)
FROM usage_records GROUP BY 1, 2, 3;

-- Alerts: where a workspace's signed webhooks go and what fires them; which alerts have fired
-- (claimed once across replicas); every delivery attempt.
CREATE TABLE alert_settings (
    workspace_id        TEXT PRIMARY KEY NOT NULL REFERENCES workspaces (id),
    webhook_url         TEXT NOT NULL,
    secret              TEXT NOT NULL,
    low_balance_pico    INTEGER CHECK (low_balance_pico > 0),
    key_limit_percents  TEXT NOT NULL DEFAULT '[]'
) STRICT;
CREATE TABLE alert_claims (
    workspace_id  TEXT NOT NULL,
    alert_key     TEXT NOT NULL,
    claimed_at    INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, alert_key)
) STRICT;
CREATE TABLE webhook_deliveries (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    workspace_id  TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    event         TEXT NOT NULL,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    at            INTEGER NOT NULL,
    status        INTEGER,
    error         TEXT,
    delivered     INTEGER NOT NULL CHECK (delivered IN (0, 1))
) STRICT;
CREATE INDEX webhook_deliveries_page_idx ON webhook_deliveries (workspace_id, at, id);
