-- Routing and failover (README "Routing and failover").
-- How many routes a request tried, the answering one included, so that an operator sees
-- failover in the ledger too. Older records tried one.
ALTER TABLE usage_records ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1 CHECK (attempts >= 1);
-- A route's share of the load among the model's routes of equal priority.
ALTER TABLE routes ADD COLUMN weight INTEGER NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000);
