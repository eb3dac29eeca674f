-- The request's id (`x-request-id`: the client's, or one the gateway made up), so a client's
-- trace id finds its record. NULL on records written before.
ALTER TABLE usage_records ADD COLUMN request_id TEXT CHECK (length(request_id) BETWEEN 1 AND 128);
