-- See sql/postgres/0010_model_lifecycle.sql.
ALTER TABLE models ADD COLUMN shutdown_on TEXT
    CHECK (shutdown_on IS NULL OR shutdown_on GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]');
ALTER TABLE models ADD COLUMN source TEXT;
ALTER TABLE routes ADD COLUMN upstream_model TEXT;
