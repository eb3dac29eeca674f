-- The carried-forward totals of archived months (issue 33); the PostgreSQL twin is
-- sql/postgres/0018_partitions.sql, which also partitions usage_records by month. SQLite has
-- no partitions: an archived month's records are deleted by the archive's transaction, the
-- one path allowed around the append-only trigger (it drops the trigger, deletes the month's
-- rows and re-creates the trigger in one transaction).
--
-- ledger_entries.usage_id no longer references usage_records: the records of an archived month
-- are gone while their debits stay in the ledger. SQLite changes a constraint only by
-- rebuilding the table (foreign keys are off while a migration runs).
CREATE TABLE ledger_entries_v18 (
    -- Insertion order: the tie-break between entries with the same created_at. (The entry id
    -- is the logical key; it is UNIQUE NOT NULL.)
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    kind          TEXT NOT NULL CHECK (kind IN ('credit', 'refund', 'debit')),
    amount_pico   INTEGER NOT NULL,
    note          TEXT,
    created_at    INTEGER NOT NULL,
    -- A debit charges exactly one usage record, and a usage record is charged at most once
    -- (UNIQUE); credits and refunds reference none. The record may have been archived.
    usage_id      TEXT UNIQUE,
    CHECK ((kind = 'credit' AND amount_pico > 0) OR (kind = 'refund' AND amount_pico < 0)
           OR (kind = 'debit' AND amount_pico <= 0)),
    CHECK ((kind = 'debit') = (usage_id IS NOT NULL)),
    CHECK (kind <> 'refund' OR note IS NOT NULL)
) STRICT;

INSERT INTO ledger_entries_v18 (seq, id, workspace_id, kind, amount_pico, note, created_at,
    usage_id)
SELECT seq, id, workspace_id, kind, amount_pico, note, created_at, usage_id
FROM ledger_entries ORDER BY seq;

DROP TABLE ledger_entries;
ALTER TABLE ledger_entries_v18 RENAME TO ledger_entries;

CREATE INDEX ledger_entries_workspace_idx ON ledger_entries (workspace_id, created_at, seq);
CREATE INDEX ledger_entries_page_idx ON ledger_entries (workspace_id, created_at, id);
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger_entries is append-only: UPDATE refused');
END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger_entries is append-only: DELETE refused');
END;

-- What an archived month leaves behind: per workspace, its records' count and cost, so
-- `ledger verify` still checks the debits (which stay in the ledger) against the records
-- plus these. Written in the transaction that deletes the month's records; a restore removes
-- the month's rows in the transaction that loads its records back. `month` is 'YYYY-MM'.
CREATE TABLE archived_totals (
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    month         TEXT NOT NULL CHECK (month GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]'),
    records       INTEGER NOT NULL CHECK (records > 0),
    cost_pico     INTEGER NOT NULL CHECK (cost_pico >= 0),
    archived_at   INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, month)
) STRICT;
