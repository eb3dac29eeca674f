-- Model aliases and the Anthropic Messages front door.
--
-- models.aliases: the other ids clients call a model by (catalog field `aliases`), such as the
-- upstream's own names Claude Code sends (`claude-sonnet-4-5`, `claude-sonnet-4-5-20250929`
-- for `anthropic/claude-sonnet-4-5`). A JSON array of strings, as `capabilities`. That an alias
-- names one model only (no other model's id or alias) is checked by the catalog import, which
-- sees the whole catalog; a snapshot resolves an id before an alias.
--
-- usage_records.endpoint: a record may be a `POST /v1/messages` request ('messages'). The
-- inline CHECK of 0001 is named usage_records_endpoint_check (PostgreSQL's default name); it
-- is dropped and added again with the new value, validated against the stored records in the
-- same transaction (every one is 'chat' or 'embeddings', so all pass).
ALTER TABLE models ADD COLUMN aliases TEXT NOT NULL DEFAULT '[]';
ALTER TABLE usage_records
    DROP CONSTRAINT usage_records_endpoint_check,
    ADD CONSTRAINT usage_records_endpoint_check
        CHECK (endpoint IN ('chat', 'embeddings', 'messages'));
