-- Key rotation is one transaction; see sql/postgres/0009_key_rotation.sql.
ALTER TABLE api_keys ADD COLUMN replaced_by TEXT REFERENCES api_keys (id);
CREATE UNIQUE INDEX api_keys_replaced_by_idx ON api_keys (replaced_by);

-- Keys rotated before this column existed: their latest audited rotation whose replacement
-- exists names it.
UPDATE api_keys SET replaced_by = (
    SELECT n.id FROM audit_log a JOIN api_keys n ON n.id = json_extract(a.after_json, '$.new_key')
    WHERE a.action = 'key.rotate' AND a.target = api_keys.id
    ORDER BY a.at DESC, a.id DESC LIMIT 1
)
WHERE id IN (SELECT target FROM audit_log WHERE action = 'key.rotate');
