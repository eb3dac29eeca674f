-- `ledger()`'s (workspace_id, created_at, seq) index, which every debit maintained beside the
-- page index (workspace_id, created_at, id) that serves the same range: its ties on created_at
-- are sorted by seq on the way out, on a listing read by operators, not on the ledger writer's
-- path. PostgreSQL dropped it in 0019; on SQLite it was one b-tree insert of the nine a usage
-- record and its debit make.
DROP INDEX ledger_entries_workspace_idx;
