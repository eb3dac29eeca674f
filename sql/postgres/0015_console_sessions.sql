-- Console sessions in the store (the SQLite twin is sql/sqlite/0015_console_sessions.sql), so
-- a graceful upgrade or a restart signs no operator out, and every replica knows every session.
--
-- id_hash: the hex SHA-256 of the session id the browser holds in its cookie; the id itself is
-- never stored, so a copy of this table signs no one in. name: a short, non-secret name the
-- audit log gives the session. csrf: the token the console sends back on every change (useless
-- without the cookie). A session ends `tollgate.console.session_idle` after `last_seen` or at
-- `expires_at` (created_at + `session_max`), whichever comes first; the gateway deletes it on
-- sign-out, when it is found expired, and at each sign-in (with the oldest past 1,024 rows).
-- Not in the change feed: every replica reads this table on each console request.
CREATE TABLE console_sessions (
    id_hash     TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    csrf        TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    last_seen   TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    CHECK (length(id_hash) = 64),
    CHECK (expires_at > created_at)
);
