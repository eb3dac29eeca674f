-- Nothing to change on PostgreSQL: 0019 already dropped `ledger_entries_workspace_idx`
-- (sql/sqlite/0022_ledger_index.sql drops SQLite's). The version exists in both dialects because
-- every version does.
SELECT 1;
