-- Why a usage record needs an operator's review; NULL for an ordinary record. Set when the
-- usage the upstream reported could not be priced (its cost overflows i64 pico-USD): the record
-- then bills the request's reserved worst case instead (its counts and cost still obey the
-- exact-cost CHECK), marked `usage_source = 'estimated'`, and this says what was reported.
ALTER TABLE usage_records ADD COLUMN review TEXT CHECK (length(review) BETWEEN 1 AND 1024);
