-- Whether a usage record's token counts are the upstream's own ('reported') or the gateway's
-- estimate ('estimated': a stream the client left, or the upstream broke, before the upstream
-- reported final counts; see README "Billing").
ALTER TABLE usage_records
    ADD COLUMN usage_source TEXT NOT NULL DEFAULT 'reported'
    CHECK (usage_source IN ('reported', 'estimated'));
