-- Nothing to change on PostgreSQL: sql/sqlite/0020_checks.sql rewrites SQLite's CHECKs whose
-- IN lists cost a temporary b-tree on every insert; PostgreSQL compares an IN list in place.
-- The version exists in both dialects because every version does.
SELECT 1;
