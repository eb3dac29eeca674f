-- Nothing to change on SQLite: sql/postgres/0019_ledger_writer.sql makes PostgreSQL's
-- per-row foreign-key checks per statement. SQLite's checks are in-process index probes, and
-- its ledger writer is not the bound (docs/benchmarks.md); the version exists in both
-- dialects because every version does.
SELECT 1;
