-- How many routes a request tried before the one that answered it (failover), so that an
-- operator can see failing routes in the ledger too. Older records tried one.
ALTER TABLE usage_records ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1 CHECK (attempts >= 1);
