//! Gemini explicit context caching: a `cache_control` breakpoint on the system message turns
//! the cacheable prefix (system instruction and tools) into a `cachedContents` resource,
//! created once per prefix and reused until shortly before its TTL ends, so later requests pay
//! the cached-token price.
//!
//! Keyed by the adapter's hash of (route, model, prefix). Creation is single-flight (concurrent
//! requests with the same prefix wait for one creation) and happens while the request is
//! admitted, as part of the upstream work of the request that first needs it. A failed creation is not cached:
//! that request falls back to implicit caching and the next one tries again. The request whose
//! call created the cache is told so ([`Named::created`]): it is billed the creation tokens
//! and their storage for the TTL; the requests that reuse it pay the cached-token price.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use moka::future::Cache;

use crate::billing::record::CacheCreation;
use crate::catalog::Endpoint;
use crate::providers::{CacheStep, UpstreamRequest};

/// Stop reusing a cache this long before the upstream expires it (a tenth of a short TTL, so
/// a cache of 30 s or less is still reused rather than re-created per request).
const MARGIN: Duration = Duration::from_secs(30);
const MAX_ENTRIES: u64 = 10_000;

#[derive(Clone)]
struct Entry {
    name: Arc<str>,
    reuse_until: Instant,
}

struct ByTtl;

impl moka::Expiry<String, Entry> for ByTtl {
    fn expire_after_create(&self, _key: &String, entry: &Entry, now: Instant) -> Option<Duration> {
        Some(entry.reuse_until.saturating_duration_since(now))
    }
}

/// A cache to name in the request, and its creation when this request made it.
#[derive(Debug, Clone)]
pub struct Named {
    pub name: Arc<str>,
    pub created: Option<CacheCreation>,
}

pub struct ContextCaches {
    client: reqwest::Client,
    entries: Cache<String, Entry>,
}

impl Default for ContextCaches {
    fn default() -> Self {
        Self::new(Duration::from_secs(10), None)
    }
}

impl ContextCaches {
    /// `tls`: the upstream client's configuration (its roots: `tollgate.upstream.ca_file`),
    /// else reqwest's own.
    pub fn new(timeout: Duration, tls: Option<rustls::ClientConfig>) -> Self {
        let builder = reqwest::Client::builder().timeout(timeout);
        let builder = match tls {
            Some(tls) => builder.use_preconfigured_tls(tls),
            None => builder,
        };
        let client = builder.build().unwrap_or_default();
        let entries = Cache::builder()
            .max_capacity(MAX_ENTRIES)
            .expire_after(ByTtl)
            .build();
        ContextCaches { client, entries }
    }

    /// The request to send for a planned `request` and its cache `step` on `endpoint`: its body
    /// names the workspace's cache for the step's prefix, created first when there is none. If
    /// creation failed (or there is no step) it goes as planned, its prefix inline. A cache this
    /// request made is added to `created`, which may already hold one an earlier route made.
    /// Caches are the workspace's own: never shared across workspaces.
    pub async fn request_for(
        &self,
        workspace_id: &str,
        endpoint: &Endpoint,
        mut request: UpstreamRequest,
        step: Option<CacheStep>,
        created: &mut Option<CacheCreation>,
    ) -> UpstreamRequest {
        let Some(step) = step else {
            return request;
        };
        let key = format!("{workspace_id} {}", step.key);
        // Boxed: the cache's future is large and rare, and every request's future would
        // otherwise reserve room for it for its whole life (an open stream included).
        let named = Box::pin(self.name_for(&key, endpoint, step.ttl, step.create)).await;
        if let Some(named) = named {
            request.body = (step.body_using)(&named.name);
            if let Some(made) = named.created {
                // A failed-over request may have made a cache on an earlier route: both are
                // the upstream's charges, so both are billed.
                *created = Some(created.map_or(made, |before| before.and(made)));
            }
        }
        request
    }

    /// The cache's resource name for `key`, creating it with `request` (sent to `endpoint`)
    /// when there is none. `None` when creation failed: send the request uncached.
    async fn name_for(
        &self,
        key: &str,
        endpoint: &Endpoint,
        ttl: Duration,
        request: UpstreamRequest,
    ) -> Option<Named> {
        // Set only by the one caller whose creation ran (the others waited for it).
        let created = OnceLock::new();
        let made = self
            .entries
            .try_get_with(key.to_owned(), async {
                let (name, tokens) = self.create(endpoint, request).await?;
                let _ = created.set(tokens);
                let reuse_until = Instant::now() + ttl.saturating_sub(MARGIN.min(ttl / 10));
                Ok::<_, String>(Entry { name, reuse_until })
            })
            .await;
        match made {
            Ok(entry) => Some(Named {
                name: entry.name,
                created: created.into_inner().map(|tokens| CacheCreation {
                    tokens,
                    ttl_secs: ttl.as_secs(),
                }),
            }),
            Err(e) => {
                tracing::warn!("context cache creation failed, sending uncached: {e}");
                None
            }
        }
    }

    /// Creates the cache: its name and the tokens the upstream counted in it.
    async fn create(
        &self,
        endpoint: &Endpoint,
        request: UpstreamRequest,
    ) -> Result<(Arc<str>, u64), String> {
        let mut call = self
            .client
            .post(endpoint.url(&request.path))
            .body(request.body);
        for (name, value) in request.headers {
            call = call.header(name, value);
        }
        let response = call.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
        let tokens = body
            .pointer("/usageMetadata/totalTokenCount")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        match body.get("name").and_then(|n| n.as_str()) {
            Some(name) if status.is_success() => Ok((name.into(), tokens)),
            _ => Err(format!("upstream answered {status}: {body}")),
        }
    }
}
