-- tollgate schema v1, SQLite dialect (the PostgreSQL twin is sql/postgres/0001_init.sql).
--
-- Money is exact: amounts are INTEGER pico-USD (1e-12 USD), prices INTEGER micro-USD per
-- 1M tokens. Timestamps are INTEGER microseconds since the Unix epoch (UTC). Booleans are
-- INTEGER 0/1. Tables are STRICT, so a value of the wrong type (for instance a REAL produced
-- by an overflowing integer sum) is refused instead of stored.
--
-- Change feed: every insert/update/delete of a key, workspace, balance or catalog row appends
-- to change_log, and so does every inserted usage record (kind 'spend', ref: its key). SQLite
-- has no NOTIFY; followers poll change_log.
--
-- Billing: usage_records and ledger_entries are append-only (triggers refuse UPDATE and
-- DELETE). balances and key_spend are derived caches of them, updated in the same
-- transaction, and checkable against the sums at any time (`ledger verify`).

CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY NOT NULL,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE api_keys (
    id                TEXT PRIMARY KEY NOT NULL,
    workspace_id      TEXT NOT NULL REFERENCES workspaces (id),
    name              TEXT,
    secret_hash       TEXT NOT NULL UNIQUE,
    hint              TEXT NOT NULL,
    created_at        INTEGER NOT NULL,
    expires_at        INTEGER,
    revoked_at        INTEGER,
    spend_limit_pico  INTEGER CHECK (spend_limit_pico >= 0),
    limit_reset       TEXT CHECK (limit_reset IN ('daily', 'weekly', 'monthly')),
    -- Target of usage_records' (key_id, workspace_id) reference: a record's key belongs to
    -- its workspace.
    UNIQUE (id, workspace_id)
) STRICT;
CREATE INDEX api_keys_workspace_idx ON api_keys (workspace_id);

CREATE TABLE models (
    id                       TEXT PRIMARY KEY NOT NULL,
    provider                 TEXT NOT NULL,
    family                   TEXT NOT NULL,
    kind                     TEXT NOT NULL CHECK (kind IN ('chat', 'embedding')),
    upstream_model           TEXT NOT NULL,
    profile                  TEXT NOT NULL DEFAULT '',
    input_price_micro        INTEGER NOT NULL CHECK (input_price_micro >= 0),
    output_price_micro       INTEGER NOT NULL CHECK (output_price_micro >= 0),
    cache_read_price_micro   INTEGER CHECK (cache_read_price_micro >= 0),
    cache_write_price_micro  INTEGER CHECK (cache_write_price_micro >= 0),
    -- JSON array of strings, e.g. ["tools","vision"].
    capabilities             TEXT NOT NULL DEFAULT '[]',
    max_output_tokens        INTEGER CHECK (max_output_tokens >= 0),
    active                   INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1))
) STRICT;

-- Parameter profiles: which request fields a model forwards, its thinking controls.
-- `spec` is the profile as JSON (see src/catalog/profile.rs).
CREATE TABLE profiles (
    name TEXT PRIMARY KEY NOT NULL,
    spec TEXT NOT NULL
) STRICT;

CREATE TABLE routes (
    -- Explicit INTEGER PRIMARY KEY (a rowid alias VACUUM never renumbers): insertion order,
    -- so a model's routes load back in the order they were imported.
    seq        INTEGER PRIMARY KEY,
    model_id   TEXT NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL,
    base_url   TEXT,
    region     TEXT,
    priority   INTEGER NOT NULL DEFAULT 0,
    active     INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1))
) STRICT;
CREATE INDEX routes_model_idx ON routes (model_id, seq);

-- One row per successful request, written once (id = the completion id) and never changed.
-- The prices are those in force when the request was made; cost_pico is exactly
-- tokens × prices (a cached bucket without its own price is billed at the input price), and
-- the CHECK below makes the database refuse a record whose cost disagrees with its own
-- tokens and prices. output_tokens includes reasoning_tokens.
CREATE TABLE usage_records (
    -- Insertion order: the tie-break between records with the same finished_at. (The record
    -- id is the logical key; it is UNIQUE NOT NULL.)
    seq                      INTEGER PRIMARY KEY,
    id                       TEXT NOT NULL UNIQUE,
    -- (key_id, workspace_id) references the key below, which implies the workspace exists.
    workspace_id             TEXT NOT NULL,
    key_id                   TEXT NOT NULL,
    model_id                 TEXT NOT NULL,
    route                    TEXT NOT NULL,
    endpoint                 TEXT NOT NULL CHECK (endpoint IN ('chat', 'embeddings')),
    stream                   INTEGER NOT NULL CHECK (stream IN (0, 1)),
    input_tokens             INTEGER NOT NULL CHECK (input_tokens >= 0),
    cache_read_tokens        INTEGER NOT NULL CHECK (cache_read_tokens >= 0),
    cache_write_tokens       INTEGER NOT NULL CHECK (cache_write_tokens >= 0),
    output_tokens            INTEGER NOT NULL CHECK (output_tokens >= 0),
    reasoning_tokens         INTEGER NOT NULL CHECK (reasoning_tokens >= 0),
    input_price_micro        INTEGER NOT NULL CHECK (input_price_micro >= 0),
    output_price_micro       INTEGER NOT NULL CHECK (output_price_micro >= 0),
    cache_read_price_micro   INTEGER CHECK (cache_read_price_micro >= 0),
    cache_write_price_micro  INTEGER CHECK (cache_write_price_micro >= 0),
    cost_pico                INTEGER NOT NULL CHECK (cost_pico >= 0),
    outcome                  TEXT NOT NULL
        CHECK (outcome IN ('complete', 'client_disconnected', 'upstream_failed')),
    started_at               INTEGER NOT NULL,
    finished_at              INTEGER NOT NULL,
    upstream_latency_us      INTEGER CHECK (upstream_latency_us >= 0),
    ttft_us                  INTEGER CHECK (ttft_us >= 0),
    -- Start of the key's spend window the cost was added to (NULL: the key has no limit).
    spend_window_start       INTEGER,
    FOREIGN KEY (key_id, workspace_id) REFERENCES api_keys (id, workspace_id),
    CONSTRAINT usage_records_reasoning_in_output CHECK (reasoning_tokens <= output_tokens),
    -- An overflowing product turns into a REAL, which is never equal to the INTEGER cost.
    CONSTRAINT usage_records_cost_exact CHECK (cost_pico =
        input_tokens * input_price_micro
        + cache_read_tokens * COALESCE(cache_read_price_micro, input_price_micro)
        + cache_write_tokens * COALESCE(cache_write_price_micro, input_price_micro)
        + output_tokens * output_price_micro)
) STRICT;
CREATE INDEX usage_records_workspace_idx ON usage_records (workspace_id, finished_at, seq);

-- Usage records are append-only: the database itself refuses UPDATE and DELETE.
CREATE TRIGGER usage_records_no_update BEFORE UPDATE ON usage_records
BEGIN
    SELECT RAISE(ABORT, 'usage_records is append-only: UPDATE refused');
END;
CREATE TRIGGER usage_records_no_delete BEFORE DELETE ON usage_records
BEGIN
    SELECT RAISE(ABORT, 'usage_records is append-only: DELETE refused');
END;

CREATE TABLE ledger_entries (
    -- Insertion order: the tie-break between entries with the same created_at. (The entry id
    -- is the logical key; it is UNIQUE NOT NULL.)
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    kind          TEXT NOT NULL CHECK (kind IN ('credit', 'debit')),
    amount_pico   INTEGER NOT NULL,
    note          TEXT,
    created_at    INTEGER NOT NULL,
    -- A debit charges exactly one usage record, and a usage record is charged at most once
    -- (UNIQUE); credits reference none.
    usage_id      TEXT UNIQUE REFERENCES usage_records (id),
    CHECK ((kind = 'credit' AND amount_pico > 0) OR (kind = 'debit' AND amount_pico <= 0)),
    CHECK ((kind = 'debit') = (usage_id IS NOT NULL))
) STRICT;
CREATE INDEX ledger_entries_workspace_idx ON ledger_entries (workspace_id, created_at, seq);

-- The ledger is append-only: the database itself refuses UPDATE and DELETE.
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger_entries is append-only: UPDATE refused');
END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger_entries is append-only: DELETE refused');
END;

-- Derived cache: balance_pico = the sum of the workspace's ledger entries. May be negative
-- (bounded overdraft: requests in flight when the credit runs out still complete).
CREATE TABLE balances (
    workspace_id  TEXT PRIMARY KEY NOT NULL REFERENCES workspaces (id),
    balance_pico  INTEGER NOT NULL
) STRICT;

-- Derived cache: a key's spend in one window (window_start from billing::window, Unix µs) =
-- the sum of cost_pico of its usage records with that spend_window_start.
CREATE TABLE key_spend (
    key_id        TEXT NOT NULL REFERENCES api_keys (id),
    window_start  INTEGER NOT NULL,
    spend_pico    INTEGER NOT NULL CHECK (spend_pico >= 0),
    PRIMARY KEY (key_id, window_start)
) STRICT;

CREATE TABLE change_log (
    -- AUTOINCREMENT: a seq is never reused, even after old rows are pruned.
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL CHECK (kind IN ('key', 'workspace', 'balance', 'catalog', 'spend')),
    ref_id      TEXT NOT NULL,
    created_at  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER))
) STRICT;

-- api_keys -> 'key'
CREATE TRIGGER api_keys_log_insert AFTER INSERT ON api_keys
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('key', NEW.id);
END;
CREATE TRIGGER api_keys_log_update AFTER UPDATE ON api_keys
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('key', NEW.id);
    INSERT INTO change_log (kind, ref_id) SELECT 'key', OLD.id WHERE OLD.id IS NOT NEW.id;
END;
CREATE TRIGGER api_keys_log_delete AFTER DELETE ON api_keys
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('key', OLD.id);
END;

-- workspaces -> 'workspace'
CREATE TRIGGER workspaces_log_insert AFTER INSERT ON workspaces
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('workspace', NEW.id);
END;
CREATE TRIGGER workspaces_log_update AFTER UPDATE ON workspaces
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('workspace', NEW.id);
    INSERT INTO change_log (kind, ref_id) SELECT 'workspace', OLD.id WHERE OLD.id IS NOT NEW.id;
END;
CREATE TRIGGER workspaces_log_delete AFTER DELETE ON workspaces
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('workspace', OLD.id);
END;

-- balances -> 'balance' (ref: workspace id)
CREATE TRIGGER balances_log_insert AFTER INSERT ON balances
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('balance', NEW.workspace_id);
END;
CREATE TRIGGER balances_log_update AFTER UPDATE ON balances
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('balance', NEW.workspace_id);
    INSERT INTO change_log (kind, ref_id)
        SELECT 'balance', OLD.workspace_id WHERE OLD.workspace_id IS NOT NEW.workspace_id;
END;
CREATE TRIGGER balances_log_delete AFTER DELETE ON balances
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('balance', OLD.workspace_id);
END;

-- models -> 'catalog' (ref: model id)
CREATE TRIGGER models_log_insert AFTER INSERT ON models
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('catalog', NEW.id);
END;
CREATE TRIGGER models_log_update AFTER UPDATE ON models
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('catalog', NEW.id);
    INSERT INTO change_log (kind, ref_id) SELECT 'catalog', OLD.id WHERE OLD.id IS NOT NEW.id;
END;
CREATE TRIGGER models_log_delete AFTER DELETE ON models
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('catalog', OLD.id);
END;

-- routes -> 'catalog' (ref: model id)
CREATE TRIGGER routes_log_insert AFTER INSERT ON routes
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('catalog', NEW.model_id);
END;
CREATE TRIGGER routes_log_update AFTER UPDATE ON routes
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('catalog', NEW.model_id);
    INSERT INTO change_log (kind, ref_id)
        SELECT 'catalog', OLD.model_id WHERE OLD.model_id IS NOT NEW.model_id;
END;
CREATE TRIGGER routes_log_delete AFTER DELETE ON routes
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('catalog', OLD.model_id);
END;

-- profiles -> 'catalog' (ref: profile name)
CREATE TRIGGER profiles_log_insert AFTER INSERT ON profiles
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('catalog', NEW.name);
END;
CREATE TRIGGER profiles_log_update AFTER UPDATE ON profiles
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('catalog', NEW.name);
END;
CREATE TRIGGER profiles_log_delete AFTER DELETE ON profiles
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('catalog', OLD.name);
END;

-- usage_records -> 'spend' (ref: key id). SQLite has no statement triggers: one row per
-- record. (Inserts only: the table refuses updates and deletes.)
CREATE TRIGGER usage_records_log_spend AFTER INSERT ON usage_records
BEGIN
    INSERT INTO change_log (kind, ref_id) VALUES ('spend', NEW.key_id);
END;
