-- The upstream API a route calls; see sql/postgres/0013_route_api.sql.
ALTER TABLE routes ADD COLUMN api TEXT NOT NULL DEFAULT 'chat'
    CHECK (api IN ('chat', 'responses'));
