-- The change feed's `spend` rows come from the ledger writer, one per key and batch
-- (`apply_totals` in src/store/sqlite.rs), as PostgreSQL's statement-level trigger writes them.
-- SQLite's triggers run once per row: this one wrote a change_log row (and bumped its
-- AUTOINCREMENT counter) for every usage record, about a tenth of the writer's work per record,
-- and followers re-read a key's spend once however many rows name it.
DROP TRIGGER usage_records_log_spend;
