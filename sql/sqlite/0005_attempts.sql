-- Routes tried for the request; see sql/postgres/0005_attempts.sql.
ALTER TABLE usage_records ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1 CHECK (attempts >= 1);
