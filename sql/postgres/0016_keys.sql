-- Per-key model allowlists and workspace-scoped management keys (issue 32, items 4 and 5); the
-- SQLite twin is sql/sqlite/0016_keys.sql.
--
-- api_keys.allowed_models: the model id patterns a key may call, as a JSON array of strings
-- (`*` matches any run of characters); `[]` allows every model. An update of the column is a
-- change of the key, so the change feed's trigger on api_keys carries it to every gateway.
ALTER TABLE api_keys ADD COLUMN allowed_models TEXT NOT NULL DEFAULT '[]';

-- management_keys: credentials of the admin API limited to one workspace (its API keys, usage
-- and balance). Like API keys, only the hex SHA-256 of the secret is stored. Not in the change
-- feed: the admin API reads this table on each call made with one, so a revocation holds at
-- once on every replica.
CREATE TABLE management_keys (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    name          TEXT,
    secret_hash   TEXT NOT NULL UNIQUE,
    hint          TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    expires_at    TIMESTAMPTZ,
    revoked_at    TIMESTAMPTZ,
    CHECK (length(secret_hash) = 64)
);
CREATE INDEX management_keys_workspace_idx ON management_keys (workspace_id, created_at, id);
