-- A model's lifecycle and provenance (catalog fields `shutdown` and `source`): the day its
-- provider stops serving it, warned about at start within 30 days, and where its prices were
-- read. A route may call an id of its own (Vertex names older Claude models `name@date`).
ALTER TABLE models ADD COLUMN shutdown_on TEXT
    CHECK (shutdown_on IS NULL OR shutdown_on ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}$');
ALTER TABLE models ADD COLUMN source TEXT;
ALTER TABLE routes ADD COLUMN upstream_model TEXT;
