-- The client's address and the upstream's request id; see sql/postgres/0014_client_addr.sql.
ALTER TABLE usage_records ADD COLUMN client_addr TEXT
    CHECK (length(client_addr) BETWEEN 1 AND 64);
ALTER TABLE usage_records ADD COLUMN upstream_request_id TEXT
    CHECK (length(upstream_request_id) BETWEEN 1 AND 128);
