-- tollgate schema v1, PostgreSQL dialect (the SQLite twin is sql/sqlite/0001_init.sql).
--
-- Money is exact: amounts are BIGINT pico-USD (1e-12 USD), prices BIGINT micro-USD per
-- 1M tokens. Timestamps are TIMESTAMPTZ (microsecond precision).
--
-- Change feed: every insert/update/delete of a key, workspace, balance or catalog row appends
-- to change_log, and so does every statement inserting usage records (kind 'spend', one row
-- per key); every change_log row is announced with NOTIFY tollgate_changes (payload: its seq).
-- NOTIFY is delivered at commit, so a listener never sees uncommitted changes.
--
-- Billing: usage_records and ledger_entries are append-only (the database refuses UPDATE,
-- DELETE and TRUNCATE). balances and key_spend are derived caches of them, updated in the
-- same transaction, and checkable against the sums at any time (`ledger verify`).

CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE api_keys (
    id                TEXT PRIMARY KEY,
    workspace_id      TEXT NOT NULL REFERENCES workspaces (id),
    name              TEXT,
    secret_hash       TEXT NOT NULL UNIQUE,
    hint              TEXT NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    expires_at        TIMESTAMPTZ,
    revoked_at        TIMESTAMPTZ,
    spend_limit_pico  BIGINT CHECK (spend_limit_pico >= 0),
    limit_reset       TEXT CHECK (limit_reset IN ('daily', 'weekly', 'monthly')),
    -- Target of usage_records' (key_id, workspace_id) reference: a record's key belongs to
    -- its workspace.
    UNIQUE (id, workspace_id)
);
CREATE INDEX api_keys_workspace_idx ON api_keys (workspace_id);

CREATE TABLE models (
    id                       TEXT PRIMARY KEY,
    provider                 TEXT NOT NULL,
    family                   TEXT NOT NULL,
    kind                     TEXT NOT NULL CHECK (kind IN ('chat', 'embedding')),
    upstream_model           TEXT NOT NULL,
    profile                  TEXT NOT NULL DEFAULT '',
    input_price_micro        BIGINT NOT NULL CHECK (input_price_micro >= 0),
    output_price_micro       BIGINT NOT NULL CHECK (output_price_micro >= 0),
    cache_read_price_micro   BIGINT CHECK (cache_read_price_micro >= 0),
    cache_write_price_micro  BIGINT CHECK (cache_write_price_micro >= 0),
    -- JSON array of strings, e.g. ["tools","vision"].
    capabilities             TEXT NOT NULL DEFAULT '[]',
    -- BIGINT so that every u32 fits.
    max_output_tokens        BIGINT CHECK (max_output_tokens >= 0),
    active                   BOOLEAN NOT NULL DEFAULT TRUE
);

-- Parameter profiles: which request fields a model forwards, its thinking controls.
-- `spec` is the profile as JSON (see src/catalog/profile.rs).
CREATE TABLE profiles (
    name TEXT PRIMARY KEY NOT NULL,
    spec TEXT NOT NULL
);

CREATE TABLE routes (
    -- Insertion order, so a model's routes load back in the order they were imported.
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model_id   TEXT NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL,
    base_url   TEXT,
    region     TEXT,
    priority   INTEGER NOT NULL DEFAULT 0,
    active     BOOLEAN NOT NULL DEFAULT TRUE
);
CREATE INDEX routes_model_idx ON routes (model_id, seq);

-- One row per successful request, written once (id = the completion id) and never changed.
-- The prices are those in force when the request was made; cost_pico is exactly
-- tokens × prices (a cached bucket without its own price is billed at the input price), and
-- the CHECK below makes the database refuse a record whose cost disagrees with its own
-- tokens and prices. output_tokens includes reasoning_tokens.
CREATE TABLE usage_records (
    id                       TEXT PRIMARY KEY,
    -- Insertion order: the tie-break between records with the same finished_at.
    seq                      BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    -- (key_id, workspace_id) references the key below, which implies the workspace exists.
    workspace_id             TEXT NOT NULL,
    key_id                   TEXT NOT NULL,
    model_id                 TEXT NOT NULL,
    route                    TEXT NOT NULL,
    endpoint                 TEXT NOT NULL CHECK (endpoint IN ('chat', 'embeddings')),
    stream                   BOOLEAN NOT NULL,
    input_tokens             BIGINT NOT NULL CHECK (input_tokens >= 0),
    cache_read_tokens        BIGINT NOT NULL CHECK (cache_read_tokens >= 0),
    cache_write_tokens       BIGINT NOT NULL CHECK (cache_write_tokens >= 0),
    output_tokens            BIGINT NOT NULL CHECK (output_tokens >= 0),
    reasoning_tokens         BIGINT NOT NULL CHECK (reasoning_tokens >= 0),
    input_price_micro        BIGINT NOT NULL CHECK (input_price_micro >= 0),
    output_price_micro       BIGINT NOT NULL CHECK (output_price_micro >= 0),
    cache_read_price_micro   BIGINT CHECK (cache_read_price_micro >= 0),
    cache_write_price_micro  BIGINT CHECK (cache_write_price_micro >= 0),
    cost_pico                BIGINT NOT NULL CHECK (cost_pico >= 0),
    outcome                  TEXT NOT NULL
        CHECK (outcome IN ('complete', 'client_disconnected', 'upstream_failed')),
    started_at               TIMESTAMPTZ NOT NULL,
    finished_at              TIMESTAMPTZ NOT NULL,
    upstream_latency_us      BIGINT CHECK (upstream_latency_us >= 0),
    ttft_us                  BIGINT CHECK (ttft_us >= 0),
    -- Start of the key's spend window the cost was added to (NULL: the key has no limit).
    spend_window_start       TIMESTAMPTZ,
    FOREIGN KEY (key_id, workspace_id) REFERENCES api_keys (id, workspace_id),
    CONSTRAINT usage_records_reasoning_in_output CHECK (reasoning_tokens <= output_tokens),
    -- BIGINT arithmetic raises on overflow, so this is exact or an error.
    CONSTRAINT usage_records_cost_exact CHECK (cost_pico =
        input_tokens * input_price_micro
        + cache_read_tokens * COALESCE(cache_read_price_micro, input_price_micro)
        + cache_write_tokens * COALESCE(cache_write_price_micro, input_price_micro)
        + output_tokens * output_price_micro)
);
CREATE INDEX usage_records_workspace_idx ON usage_records (workspace_id, finished_at, seq);

CREATE TABLE ledger_entries (
    id            TEXT PRIMARY KEY,
    -- Insertion order: the tie-break between entries with the same created_at.
    seq           BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    kind          TEXT NOT NULL CHECK (kind IN ('credit', 'debit')),
    amount_pico   BIGINT NOT NULL,
    note          TEXT,
    created_at    TIMESTAMPTZ NOT NULL,
    -- A debit charges exactly one usage record, and a usage record is charged at most once
    -- (UNIQUE); credits reference none.
    usage_id      TEXT UNIQUE REFERENCES usage_records (id),
    CHECK ((kind = 'credit' AND amount_pico > 0) OR (kind = 'debit' AND amount_pico <= 0)),
    CHECK ((kind = 'debit') = (usage_id IS NOT NULL))
);
CREATE INDEX ledger_entries_workspace_idx ON ledger_entries (workspace_id, created_at, seq);

-- Usage records and the ledger are append-only: the database itself refuses UPDATE, DELETE
-- and TRUNCATE (statement-level, so even a statement matching no row is refused).
CREATE FUNCTION tollgate_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;
CREATE TRIGGER ledger_entries_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_append_only();
CREATE TRIGGER usage_records_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON usage_records
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_append_only();

-- Derived cache: balance_pico = the sum of the workspace's ledger entries. May be negative
-- (bounded overdraft: requests in flight when the credit runs out still complete).
CREATE TABLE balances (
    workspace_id  TEXT PRIMARY KEY REFERENCES workspaces (id),
    balance_pico  BIGINT NOT NULL
);

-- Derived cache: a key's spend in one window (window_start from billing::window) = the sum of
-- cost_pico of its usage records with that spend_window_start.
CREATE TABLE key_spend (
    key_id        TEXT NOT NULL REFERENCES api_keys (id),
    window_start  TIMESTAMPTZ NOT NULL,
    spend_pico    BIGINT NOT NULL CHECK (spend_pico >= 0),
    PRIMARY KEY (key_id, window_start)
);

CREATE TABLE change_log (
    seq         BIGSERIAL PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('key', 'workspace', 'balance', 'catalog', 'spend')),
    ref_id      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Row trigger: TG_ARGV[0] is the change kind, TG_ARGV[1] the column holding the ref id.
-- An update that moves a row to another id logs both ids.
CREATE FUNCTION tollgate_log_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    old_ref TEXT;
    new_ref TEXT;
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        old_ref := to_jsonb(OLD) ->> TG_ARGV[1];
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        new_ref := to_jsonb(NEW) ->> TG_ARGV[1];
        INSERT INTO change_log (kind, ref_id) VALUES (TG_ARGV[0], new_ref);
    END IF;
    IF old_ref IS NOT NULL AND old_ref IS DISTINCT FROM new_ref THEN
        INSERT INTO change_log (kind, ref_id) VALUES (TG_ARGV[0], old_ref);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_log_change AFTER INSERT OR UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION tollgate_log_change('key', 'id');
CREATE TRIGGER workspaces_log_change AFTER INSERT OR UPDATE OR DELETE ON workspaces
    FOR EACH ROW EXECUTE FUNCTION tollgate_log_change('workspace', 'id');
CREATE TRIGGER balances_log_change AFTER INSERT OR UPDATE OR DELETE ON balances
    FOR EACH ROW EXECUTE FUNCTION tollgate_log_change('balance', 'workspace_id');
CREATE TRIGGER models_log_change AFTER INSERT OR UPDATE OR DELETE ON models
    FOR EACH ROW EXECUTE FUNCTION tollgate_log_change('catalog', 'id');
CREATE TRIGGER routes_log_change AFTER INSERT OR UPDATE OR DELETE ON routes
    FOR EACH ROW EXECUTE FUNCTION tollgate_log_change('catalog', 'model_id');

CREATE TRIGGER profiles_log_change AFTER INSERT OR UPDATE OR DELETE ON profiles
    FOR EACH ROW EXECUTE FUNCTION tollgate_log_change('catalog', 'name');

-- Statement trigger over the inserted rows: one 'spend' change per key per statement, not
-- one per record, so a batch of 500 records announces each key once.
CREATE FUNCTION tollgate_log_spend() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO change_log (kind, ref_id)
        SELECT DISTINCT 'spend', key_id FROM inserted ORDER BY 2;
    RETURN NULL;
END
$$;
CREATE TRIGGER usage_records_log_spend AFTER INSERT ON usage_records
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_log_spend();

CREATE FUNCTION tollgate_notify_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tollgate_changes', NEW.seq::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER change_log_notify AFTER INSERT ON change_log
    FOR EACH ROW EXECUTE FUNCTION tollgate_notify_change();
