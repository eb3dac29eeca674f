-- The admin API (issue 13); the SQLite twin is sql/sqlite/0007_admin.sql.
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
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    at            TIMESTAMPTZ NOT NULL,
    actor         TEXT NOT NULL,
    action        TEXT NOT NULL,
    workspace_id  TEXT,
    target        TEXT NOT NULL,
    before_json   TEXT,
    after_json    TEXT
);
CREATE INDEX audit_log_page_idx ON audit_log (at, id);
CREATE INDEX audit_log_workspace_page_idx ON audit_log (workspace_id, at, id);
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_append_only();

-- Usage per workspace, UTC day and model: a derived cache like balances, updated by
-- record_usage in the same transaction as the records it sums (one upsert per group of a
-- batch), so charts never scan usage_records. Not in the change feed. `day` is 'YYYY-MM-DD'
-- text in both dialects. Existing records are summed here once.
CREATE TABLE usage_daily (
    workspace_id   TEXT NOT NULL,
    day            TEXT NOT NULL,
    model_id       TEXT NOT NULL,
    requests       BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    cost_pico      BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, day, model_id)
);
INSERT INTO usage_daily (workspace_id, day, model_id, requests, input_tokens, output_tokens,
                         cost_pico)
SELECT workspace_id, to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), model_id,
       COUNT(*),
       SUM(input_tokens + cache_read_tokens + cache_write_tokens + cache_write_1h_tokens
           + audio_input_tokens)::BIGINT,
       SUM(output_tokens)::BIGINT, SUM(cost_pico)::BIGINT
FROM usage_records GROUP BY 1, 2, 3;

-- Alerts: where a workspace's signed webhooks go and what fires them; which alerts have fired
-- (claimed once across replicas); every delivery attempt.
CREATE TABLE alert_settings (
    workspace_id        TEXT PRIMARY KEY REFERENCES workspaces (id),
    webhook_url         TEXT NOT NULL,
    secret              TEXT NOT NULL,
    low_balance_pico    BIGINT CHECK (low_balance_pico > 0),
    key_limit_percents  TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE alert_claims (
    workspace_id  TEXT NOT NULL,
    alert_key     TEXT NOT NULL,
    claimed_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (workspace_id, alert_key)
);
CREATE TABLE webhook_deliveries (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    workspace_id  TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    event         TEXT NOT NULL,
    attempt       BIGINT NOT NULL CHECK (attempt >= 1),
    at            TIMESTAMPTZ NOT NULL,
    status        BIGINT,
    error         TEXT,
    delivered     BOOLEAN NOT NULL
);
CREATE INDEX webhook_deliveries_page_idx ON webhook_deliveries (workspace_id, at, id);
