-- Monthly partitions of usage_records, and the carried-forward totals of archived months
-- (issue 33); the SQLite twin is sql/sqlite/0018_partitions.sql (no partitions there).
--
-- usage_records becomes PARTITION BY RANGE (finished_at), one partition per UTC calendar
-- month named usage_records_YYYY_MM, so a month of records is archived by detaching and
-- dropping one table (no DELETE, no VACUUM) and old months cost nothing to writers. A
-- partitioned table's unique keys must hold the partition key: the primary key becomes
-- (id, finished_at). A replayed record is identical (same finished_at), so it still collides
-- and is skipped (writers insert with ON CONFLICT DO NOTHING, no conflict target), and
-- ledger_entries.usage_id stays UNIQUE, so a record is still debited at most once.
--
-- ledger_entries.usage_id no longer references usage_records: the records of an archived month
-- are gone while their debits stay in the ledger.
--
-- seq (the insertion order, UNIQUE) is dropped: nothing has read it since 0007 (pages and
-- lookups order by (finished_at, id)), and a UNIQUE on it alone is not possible any more.
--
-- In place: the old table is renamed, the partitioned one created with the same columns and
-- CHECKs, a partition made for every month its rows cover (plus this month and the next
-- two), the rows copied, and the old table dropped (the append-only trigger refuses DELETE,
-- not DROP).
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_usage_id_fkey;

ALTER TABLE usage_records RENAME TO usage_records_v17;
ALTER TABLE usage_records_v17 DROP CONSTRAINT usage_records_pkey;
ALTER TABLE usage_records_v17 DROP CONSTRAINT usage_records_seq_key;
DROP INDEX usage_records_page_idx;
DROP INDEX usage_records_key_page_idx;

CREATE TABLE usage_records (LIKE usage_records_v17 INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (finished_at);
ALTER TABLE usage_records DROP COLUMN seq;
ALTER TABLE usage_records
    ADD CONSTRAINT usage_records_pkey PRIMARY KEY (id, finished_at),
    ADD CONSTRAINT usage_records_key_id_workspace_id_fkey
        FOREIGN KEY (key_id, workspace_id) REFERENCES api_keys (id, workspace_id);
-- Defined on the parent, so every partition has them: the pages (workspace, finished_at, id)
-- and (workspace, key, finished_at, id); /v1/generation by (id, finished_at) — the primary
-- key — with the time range its id encodes.
CREATE INDEX usage_records_page_idx ON usage_records (workspace_id, finished_at, id);
CREATE INDEX usage_records_key_page_idx ON usage_records (workspace_id, key_id, finished_at, id);

-- The month partition holding `month` (any time in it, UTC), created when missing, with its
-- own append-only trigger: a statement trigger on the parent fires only for statements on
-- the parent, so a DELETE or TRUNCATE naming a partition would pass it. Returns whether it
-- created one. Creating it fails if the default partition holds rows of that month (they
-- would break the new partition's bound): the default partition is a safety net that must
-- stay empty, and this refusal makes a row there loud rather than silently kept.
CREATE FUNCTION tollgate_usage_partition(month TIMESTAMPTZ) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    lo   TIMESTAMP := date_trunc('month', month AT TIME ZONE 'UTC');
    name TEXT := 'usage_records_' || to_char(lo, 'YYYY_MM');
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN FALSE;
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF usage_records FOR VALUES FROM (%L) TO (%L)',
                   name, (lo AT TIME ZONE 'UTC'), ((lo + interval '1 month') AT TIME ZONE 'UTC'));
    EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE OR TRUNCATE ON %I '
                   'FOR EACH STATEMENT EXECUTE FUNCTION tollgate_append_only()',
                   name || '_append_only', name);
    RETURN TRUE;
END
$$;

-- The partitions of the month of `at` and of the `ahead` months after it; how many it made.
CREATE FUNCTION tollgate_usage_partitions_ahead(at TIMESTAMPTZ, ahead INTEGER) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    made INTEGER := 0;
BEGIN
    FOR i IN 0..ahead LOOP
        IF tollgate_usage_partition(at + make_interval(months => i)) THEN
            made := made + 1;
        END IF;
    END LOOP;
    RETURN made;
END
$$;

SELECT tollgate_usage_partition(m)
FROM (SELECT DISTINCT date_trunc('month', finished_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS m
      FROM usage_records_v17) months
ORDER BY m;
SELECT tollgate_usage_partitions_ahead(now(), 2);
CREATE TABLE usage_records_default PARTITION OF usage_records DEFAULT;
CREATE TRIGGER usage_records_default_append_only BEFORE UPDATE OR DELETE OR TRUNCATE
    ON usage_records_default FOR EACH STATEMENT EXECUTE FUNCTION tollgate_append_only();

INSERT INTO usage_records (id, workspace_id, key_id, model_id, route, endpoint, stream,
    input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
    input_price_micro, output_price_micro, cache_read_price_micro, cache_write_price_micro,
    cost_pico, outcome, started_at, finished_at, upstream_latency_us, ttft_us,
    spend_window_start, usage_source, audio_input_tokens, cache_write_1h_tokens,
    cache_storage_token_seconds, audio_input_price_micro, cache_write_1h_price_micro,
    cache_storage_price_micro, attempts, request_id, review, client_addr,
    upstream_request_id, waived)
SELECT id, workspace_id, key_id, model_id, route, endpoint, stream,
    input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
    input_price_micro, output_price_micro, cache_read_price_micro, cache_write_price_micro,
    cost_pico, outcome, started_at, finished_at, upstream_latency_us, ttft_us,
    spend_window_start, usage_source, audio_input_tokens, cache_write_1h_tokens,
    cache_storage_token_seconds, audio_input_price_micro, cache_write_1h_price_micro,
    cache_storage_price_micro, attempts, request_id, review, client_addr,
    upstream_request_id, waived
FROM usage_records_v17;
DROP TABLE usage_records_v17;

-- The parent's triggers, as 0001 made them (the old table's went with it).
CREATE TRIGGER usage_records_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON usage_records
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_append_only();
CREATE TRIGGER usage_records_log_spend AFTER INSERT ON usage_records
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_log_spend();

-- What an archived month leaves behind: per workspace, its records' count and cost, so
-- `ledger verify` still checks the debits (which stay in the ledger) against the records
-- plus these. Written in the transaction that drops the month's partition; a restore removes
-- the month's rows in the transaction that loads its records back. `month` is 'YYYY-MM'.
CREATE TABLE archived_totals (
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    month         TEXT NOT NULL CHECK (month ~ '^[0-9]{4}-[0-9]{2}$'),
    records       BIGINT NOT NULL CHECK (records > 0),
    cost_pico     BIGINT NOT NULL CHECK (cost_pico >= 0),
    archived_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (workspace_id, month)
);
