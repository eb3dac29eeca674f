-- Every dimension the upstreams price (see README "Billing"):
--
-- models: a 1-hour cache-write price (Anthropic), an audio-input price (Gemini), a cache
-- storage price (micro-USD per 1M tokens per hour: Gemini explicit caches), and an optional
-- long-context tier: above `long_context_threshold` prompt tokens the whole request is billed
-- at the long_* prices (a long_* cache price left NULL falls back to the tier's input price).
--
-- usage_records: the tokens of those dimensions, the prices applied (the tier's when the
-- request fell in it) and a cost CHECK that covers them. Storage is billed in token-seconds
-- (tokens × TTL) rounded up to the pico-dollar.
ALTER TABLE models
    ADD COLUMN cache_write_1h_price_micro      BIGINT CHECK (cache_write_1h_price_micro >= 0),
    ADD COLUMN audio_input_price_micro         BIGINT CHECK (audio_input_price_micro >= 0),
    ADD COLUMN cache_storage_price_micro       BIGINT CHECK (cache_storage_price_micro >= 0),
    ADD COLUMN long_context_threshold          BIGINT CHECK (long_context_threshold > 0),
    ADD COLUMN long_input_price_micro          BIGINT CHECK (long_input_price_micro >= 0),
    ADD COLUMN long_output_price_micro         BIGINT CHECK (long_output_price_micro >= 0),
    ADD COLUMN long_cache_read_price_micro     BIGINT CHECK (long_cache_read_price_micro >= 0),
    ADD COLUMN long_cache_write_price_micro    BIGINT CHECK (long_cache_write_price_micro >= 0),
    ADD COLUMN long_cache_write_1h_price_micro BIGINT CHECK (long_cache_write_1h_price_micro >= 0),
    ADD CONSTRAINT models_long_context_whole CHECK (
        (long_context_threshold IS NULL) = (long_input_price_micro IS NULL)
        AND (long_context_threshold IS NULL) = (long_output_price_micro IS NULL));

ALTER TABLE usage_records
    ADD COLUMN audio_input_tokens          BIGINT NOT NULL DEFAULT 0 CHECK (audio_input_tokens >= 0),
    ADD COLUMN cache_write_1h_tokens       BIGINT NOT NULL DEFAULT 0 CHECK (cache_write_1h_tokens >= 0),
    ADD COLUMN cache_storage_token_seconds BIGINT NOT NULL DEFAULT 0
        CHECK (cache_storage_token_seconds >= 0),
    ADD COLUMN audio_input_price_micro     BIGINT CHECK (audio_input_price_micro >= 0),
    ADD COLUMN cache_write_1h_price_micro  BIGINT CHECK (cache_write_1h_price_micro >= 0),
    ADD COLUMN cache_storage_price_micro   BIGINT CHECK (cache_storage_price_micro >= 0),
    DROP CONSTRAINT usage_records_cost_exact,
    ADD CONSTRAINT usage_records_cost_exact CHECK (cost_pico =
        input_tokens * input_price_micro
        + audio_input_tokens * COALESCE(audio_input_price_micro, input_price_micro)
        + cache_read_tokens * COALESCE(cache_read_price_micro, input_price_micro)
        + cache_write_tokens * COALESCE(cache_write_price_micro, input_price_micro)
        + cache_write_1h_tokens * COALESCE(cache_write_1h_price_micro, input_price_micro)
        + output_tokens * output_price_micro
        + (cache_storage_token_seconds * COALESCE(cache_storage_price_micro, 0) + 3599) / 3600);
