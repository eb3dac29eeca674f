-- The Responses front door (`POST /v1/responses`): the answers it keeps so that a later request
-- can continue them with `previous_response_id`, and its usage records.
--
-- responses: one row per kept answer, written once (`ON CONFLICT (id) DO NOTHING`: a replayed
-- id is skipped) and deleted by its owner (`DELETE /v1/responses/{id}`) or once `expires_at` has
-- passed (the gateway's hourly purge, by expires_at's index). `items` is the conversation the
-- answer continued (a JSON array), `response` the response object (JSON); both as text, read
-- back byte for byte. A response is read by its id and its workspace together, so another
-- workspace's id reads as absent; the primary key finds the row, no other index is needed for
-- it. Never a credential: the key is named by its id.
--
-- usage_records.endpoint: a record may be a `POST /v1/responses` request ('responses'). The
-- CHECK is swapped as 0011 swapped it, validated against the stored records in the same
-- transaction (every one is 'chat', 'embeddings' or 'messages', so all pass).
CREATE TABLE responses (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    -- The key that made it (NULL when unknown); a key of the same workspace.
    key_id        TEXT,
    model         TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    expires_at    TIMESTAMPTZ NOT NULL,
    items         TEXT NOT NULL,
    response      TEXT NOT NULL,
    FOREIGN KEY (key_id, workspace_id) REFERENCES api_keys (id, workspace_id),
    CHECK (expires_at > created_at)
);
CREATE INDEX responses_expires_idx ON responses (expires_at);

ALTER TABLE usage_records
    DROP CONSTRAINT usage_records_endpoint_check,
    ADD CONSTRAINT usage_records_endpoint_check
        CHECK (endpoint IN ('chat', 'embeddings', 'messages', 'responses'));
