-- Per-key model allowlists and workspace-scoped management keys; see
-- sql/postgres/0016_keys.sql.
ALTER TABLE api_keys ADD COLUMN allowed_models TEXT NOT NULL DEFAULT '[]';

CREATE TABLE management_keys (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    name          TEXT,
    secret_hash   TEXT NOT NULL UNIQUE,
    hint          TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER,
    revoked_at    INTEGER,
    CHECK (length(secret_hash) = 64)
) STRICT;
CREATE INDEX management_keys_workspace_idx ON management_keys (workspace_id, created_at, id);
