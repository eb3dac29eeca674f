-- Nothing to change on PostgreSQL: its `usage_records_log_spend` trigger already runs once per
-- statement, one `spend` row per key (sql/sqlite/0021_spend_log.sql makes SQLite's writer do the
-- same). The version exists in both dialects because every version does.
SELECT 1;
