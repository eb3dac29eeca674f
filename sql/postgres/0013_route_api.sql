-- The upstream API a route calls (catalog field `api`): 'chat' (Chat Completions, every route
-- so far) or 'responses' (an OpenAI-compatible server that speaks the Responses API, to which
-- the Responses front door passes its requests through untranslated). That only `openai`
-- routes may say 'responses' is checked by the catalog import, which sees the model's family.
ALTER TABLE routes ADD COLUMN api TEXT NOT NULL DEFAULT 'chat'
    CHECK (api IN ('chat', 'responses'));
