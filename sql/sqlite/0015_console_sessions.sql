-- Console sessions in the store; see sql/postgres/0015_console_sessions.sql.
CREATE TABLE console_sessions (
    id_hash     TEXT PRIMARY KEY NOT NULL,
    name        TEXT NOT NULL,
    csrf        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    CHECK (length(id_hash) = 64),
    CHECK (expires_at > created_at)
) STRICT;
