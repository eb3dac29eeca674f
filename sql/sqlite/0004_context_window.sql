-- The model's context window in tokens; see sql/postgres/0004_context_window.sql.
ALTER TABLE models ADD COLUMN context_window INTEGER CHECK (context_window > 0);
