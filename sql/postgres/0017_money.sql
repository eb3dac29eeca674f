-- Money a reseller can build on (the SQLite twin is sql/sqlite/0017_money.sql): refunds, the
-- credited total behind `GET /v1/credits`, idempotency keys for credit movements, and usage
-- records waived under `tollgate.waive_empty_failures`.
--
-- ledger_entries.kind 'refund': credit taken back, a negative amount whose reason is its note.
-- 0001's inline kind CHECK and its sign CHECK (PostgreSQL's default names
-- ledger_entries_kind_check and ledger_entries_check) are swapped for ones that accept it,
-- validated against the stored entries in the same transaction (all pass: none is a refund).
ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_kind_check,
    DROP CONSTRAINT ledger_entries_check,
    ADD CONSTRAINT ledger_entries_kind_check CHECK (kind IN ('credit', 'refund', 'debit')),
    ADD CONSTRAINT ledger_entries_amount_sign CHECK (
        (kind = 'credit' AND amount_pico > 0)
        OR (kind = 'refund' AND amount_pico < 0)
        OR (kind = 'debit' AND amount_pico <= 0)),
    ADD CONSTRAINT ledger_entries_refund_reason CHECK (kind <> 'refund' OR note IS NOT NULL);

-- balances.credited_pico: a derived cache like balance_pico, the sum of the workspace's credit
-- and refund entries (credit granted less credit refunded), moved in the same statement as the
-- balance. What was charged is then credited_pico - balance_pico; `ledger verify` checks it
-- against the ledger. Existing rows are summed here once.
ALTER TABLE balances ADD COLUMN credited_pico BIGINT NOT NULL DEFAULT 0;
UPDATE balances b SET credited_pico = c.total
FROM (SELECT workspace_id, SUM(amount_pico)::bigint AS total FROM ledger_entries
      WHERE kind = 'credit' GROUP BY workspace_id) c
WHERE c.workspace_id = b.workspace_id;

-- Idempotency keys of credit movements (the `Idempotency-Key` header, `--idempotency-key`):
-- one row per (workspace, operation, key), claimed in the movement's own transaction before
-- the ledger entry is written, so of two concurrent requests with one key the second waits
-- for the first's commit and then finds its row. request_hash is the hex SHA-256 of what the
-- request asked (a key reused for another request is refused), answer the JSON answered
-- (NULL only inside the claiming transaction). Kept 24 hours (expires_at); expired rows are
-- deleted by the next idempotent movement, found through expires_at's index.
CREATE TABLE idempotency_keys (
    workspace_id     TEXT NOT NULL REFERENCES workspaces (id),
    operation        TEXT NOT NULL CHECK (operation IN ('credit.add', 'credit.refund')),
    idempotency_key  TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_hash     TEXT NOT NULL CHECK (length(request_hash) = 64),
    answer           TEXT,
    created_at       TIMESTAMPTZ NOT NULL,
    expires_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (workspace_id, operation, idempotency_key),
    CHECK (expires_at > created_at)
);
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);

-- usage_records.waived: the request produced no output and failed, and the operator waives
-- such requests (`tollgate.waive_empty_failures`): the record keeps its tokens and prices, its
-- cost is 0 (and so is its debit). The cost CHECK is swapped for one that says so, and a
-- record with output is never waived.
ALTER TABLE usage_records
    ADD COLUMN waived BOOLEAN NOT NULL DEFAULT FALSE,
    DROP CONSTRAINT usage_records_cost_exact,
    ADD CONSTRAINT usage_records_cost_exact CHECK (cost_pico = CASE WHEN waived THEN 0 ELSE
        input_tokens * input_price_micro
        + audio_input_tokens * COALESCE(audio_input_price_micro, input_price_micro)
        + cache_read_tokens * COALESCE(cache_read_price_micro, input_price_micro)
        + cache_write_tokens * COALESCE(cache_write_price_micro, input_price_micro)
        + cache_write_1h_tokens * COALESCE(cache_write_1h_price_micro, input_price_micro)
        + output_tokens * output_price_micro
        + (cache_storage_token_seconds * COALESCE(cache_storage_price_micro, 0) + 3599) / 3600
        END),
    ADD CONSTRAINT usage_records_waived_empty CHECK (NOT waived OR output_tokens = 0);
