-- The model's context window in tokens (catalog field `context_window`): requests whose
-- estimated input exceeds it are refused before the gates (README "Limits"). NULL: no bound
-- but the body size.
ALTER TABLE models ADD COLUMN context_window BIGINT CHECK (context_window > 0);
