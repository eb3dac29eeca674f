//! A finished request's bill: its usage record, with the prices in force and the exact cost.

use chrono::{DateTime, Utc};

use super::cost::{cost, CostError};
use super::window::window_start;
use crate::api::Usage;
use crate::catalog::Model;
use crate::store::{ApiKey, UsageEndpoint, UsageOutcome, UsageRecord, UsageSource};

/// What `usage_record` needs to know about a finished request.
pub struct Charge<'a> {
    pub id: &'a str,
    pub key: &'a ApiKey,
    pub model: &'a Model,
    pub route: &'a str,
    pub endpoint: UsageEndpoint,
    pub stream: bool,
    pub usage: Usage,
    pub outcome: UsageOutcome,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub upstream_latency_us: Option<u64>,
    pub ttft_us: Option<u64>,
    pub usage_source: UsageSource,
}

/// The usage record of `c`, priced with the model's prices now (stored on the record).
/// A key with a spend limit counts the cost towards the window the request started in.
pub fn usage_record(c: Charge<'_>) -> Result<UsageRecord, CostError> {
    let p = &c.model.pricing;
    Ok(UsageRecord {
        id: c.id.to_owned(),
        workspace_id: c.key.workspace_id.clone(),
        key_id: c.key.id.clone(),
        model_id: c.model.id.to_string(),
        route: c.route.to_owned(),
        endpoint: c.endpoint,
        stream: c.stream,
        input_tokens: c.usage.input,
        cache_read_tokens: c.usage.cache_read,
        cache_write_tokens: c.usage.cache_write,
        output_tokens: c.usage.output,
        reasoning_tokens: c.usage.reasoning,
        input_price: p.input,
        output_price: p.output,
        cache_read_price: p.cache_read,
        cache_write_price: p.cache_write,
        cost: cost(&c.usage, p)?,
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
    })
}
