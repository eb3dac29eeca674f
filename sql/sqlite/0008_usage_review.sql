-- Usage records flagged for review; see sql/postgres/0008_usage_review.sql.
ALTER TABLE usage_records ADD COLUMN review TEXT CHECK (length(review) BETWEEN 1 AND 1024);
