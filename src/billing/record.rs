//! A finished request's bill: its usage record, with the prices in force and the exact cost.

use chrono::{DateTime, Utc};

use super::cost::{cost, CostError};
use super::window::window_start;
use crate::api::Usage;
use crate::catalog::Model;
use crate::store::{ApiKey, ExtraUsage, UsageEndpoint, UsageOutcome, UsageRecord, UsageSource};

/// An explicit (Gemini) cache the gateway created for a request: the upstream bills its
/// tokens once, at creation, and their storage for the whole TTL; both go on the creating
/// request's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheCreation {
    pub tokens: u64,
    pub ttl_secs: u64,
}

impl CacheCreation {
    /// Two creations billed as one: their tokens together, stored for the longer life (never
    /// less storage than either paid for).
    pub fn and(self, other: CacheCreation) -> CacheCreation {
        CacheCreation {
            tokens: self.tokens.saturating_add(other.tokens),
            ttl_secs: self.ttl_secs.max(other.ttl_secs),
        }
    }

    /// `usage` with the creation added: its tokens as cache writes, its storage as
    /// token-seconds.
    pub fn add_to(self, usage: Usage) -> Usage {
        Usage {
            cache_write: usage.cache_write.saturating_add(self.tokens),
            cache_storage_token_seconds: usage
                .cache_storage_token_seconds
                .saturating_add(self.tokens.saturating_mul(self.ttl_secs)),
            ..usage
        }
    }
}

/// What `usage_record` needs to know about a finished request.
pub struct Charge<'a> {
    pub id: &'a str,
    pub key: &'a ApiKey,
    pub model: &'a Model,
    pub route: &'a str,
    pub endpoint: UsageEndpoint,
    pub stream: bool,
    /// What the upstream reported (or the gateway estimated) for the request itself.
    pub usage: Usage,
    /// A cache created on the request's behalf, billed on top.
    pub cache_created: Option<CacheCreation>,
    pub outcome: UsageOutcome,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub upstream_latency_us: Option<u64>,
    pub ttft_us: Option<u64>,
    pub usage_source: UsageSource,
    /// Routes tried, the answering one included.
    pub attempts: u32,
    /// The request's `x-request-id`.
    pub request_id: &'a str,
}

/// The usage record of `c`, priced with the model's prices now (stored on the record), at the
/// tier the request's own prompt falls in (a cache created for it does not move it into a
/// dearer tier). A key with a spend limit counts the cost towards the window the request
/// started in.
pub fn usage_record(c: Charge<'_>) -> Result<UsageRecord, CostError> {
    let rates = c.model.pricing.rates_for(c.usage.prompt_tokens());
    let usage = match c.cache_created {
        Some(created) => created.add_to(c.usage),
        None => c.usage,
    };
    Ok(UsageRecord {
        id: c.id.to_owned(),
        workspace_id: c.key.workspace_id.clone(),
        key_id: c.key.id.clone(),
        model_id: c.model.id.to_string(),
        route: c.route.to_owned(),
        endpoint: c.endpoint,
        stream: c.stream,
        input_tokens: usage.input,
        cache_read_tokens: usage.cache_read,
        cache_write_tokens: usage.cache_write,
        output_tokens: usage.output,
        // A breakdown of the output, never more (the database refuses more, which would leave
        // the request unbilled).
        reasoning_tokens: usage.reasoning.min(usage.output),
        input_price: rates.input,
        output_price: rates.output,
        cache_read_price: rates.cache_read,
        cache_write_price: rates.cache_write,
        extra: ExtraUsage {
            audio_input_tokens: usage.audio_input,
            cache_write_1h_tokens: usage.cache_write_1h,
            cache_storage_token_seconds: usage.cache_storage_token_seconds,
            audio_input_price: rates.audio_input,
            cache_write_1h_price: rates.cache_write_1h,
            cache_storage_price: rates.cache_storage,
        },
        cost: cost(&usage, rates)?,
        outcome: c.outcome,
        started_at: c.started_at,
        finished_at: c.finished_at,
        upstream_latency_us: c.upstream_latency_us,
        ttft_us: c.ttft_us,
        spend_window_start: c
            .key
            .limit_reset
            .filter(|_| c.key.spend_limit.is_some())
            .map(|r| window_start(r, c.started_at)),
        usage_source: c.usage_source,
        attempts: c.attempts.max(1),
        request_id: Some(c.request_id.to_owned()),
        review: None,
        client_addr: None,
        upstream_request_id: None,
        waived: false,
    })
}
