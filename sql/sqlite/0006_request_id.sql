-- The request's id; see sql/postgres/0006_request_id.sql.
ALTER TABLE usage_records ADD COLUMN request_id TEXT CHECK (length(request_id) BETWEEN 1 AND 128);
