-- Who asked, and the upstream's own id for the call it answered, so an operator can find a
-- client's requests behind a load balancer and quote a request to Google or Anthropic:
-- client_addr is the client's IP address as text (the peer, or the client a trusted proxy
-- names: `Forwarded`, `X-Forwarded-For`, the PROXY protocol); upstream_request_id is
-- Anthropic's `request-id` header, Gemini's `responseId` or Google's trace id. NULL on
-- records written before, and where either is unknown.
ALTER TABLE usage_records ADD COLUMN client_addr TEXT
    CHECK (length(client_addr) BETWEEN 1 AND 64);
ALTER TABLE usage_records ADD COLUMN upstream_request_id TEXT
    CHECK (length(upstream_request_id) BETWEEN 1 AND 128);
