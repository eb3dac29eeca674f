-- Routing and failover; see sql/postgres/0005_routing.sql.
ALTER TABLE usage_records ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1 CHECK (attempts >= 1);
ALTER TABLE routes ADD COLUMN weight INTEGER NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000);
