-- Key rotation is one transaction (issue 26); the SQLite twin is sql/sqlite/0009_key_rotation.sql.
--
-- `replaced_by` names the key a rotation made to replace this one. Rotation sets it with a
-- conditional UPDATE (only on a key not yet replaced, not revoked, not expired), so of two
-- concurrent rotations of one key exactly one succeeds, and a key in its grace period cannot
-- be rotated again (its replacement is). A key replaces at most one other.
ALTER TABLE api_keys ADD COLUMN replaced_by TEXT REFERENCES api_keys (id);
CREATE UNIQUE INDEX api_keys_replaced_by_idx ON api_keys (replaced_by);

-- Keys rotated before this column existed: their latest audited rotation whose replacement
-- exists names it.
UPDATE api_keys k SET replaced_by = r.new_key
FROM (
    SELECT DISTINCT ON (a.target) a.target, n.id AS new_key
    FROM audit_log a JOIN api_keys n ON n.id = a.after_json::jsonb ->> 'new_key'
    WHERE a.action = 'key.rotate'
    ORDER BY a.target, a.at DESC, a.id DESC
) r
WHERE r.target = k.id;
