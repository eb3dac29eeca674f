//! What the `logging` phase does with a finished request: its usage record for the ledger,
//! its metrics, and its one access event.

use std::time::{Duration, Instant};

use super::ctx::{Ctx, Journaled};
use crate::admission::outcome::{usage_record_for, Ending, Produced, Timings, Traced};
use crate::admission::Admitted;
use crate::api::error::Blame;
use crate::api::GatewayError;
use crate::billing::writer::LedgerSink;
use crate::metrics::{Finished, METRICS};
use crate::store::UsageRecord;

/// Hands a finished request's usage record to the ledger, when
/// [`outcome`](crate::admission::outcome) says it is billed; returns its tokens and cost for
/// the metrics. `proxy_failure`: who made writing the gateway's own answer fail.
///
/// A record journaled before the answer's end is the one billed, unless the request ended
/// otherwise after all (its last write failed): then the record of that ending is, under the
/// same id and journal entry (the journal's copy only matters if the process dies first).
pub(super) fn bill(
    ledger: &LedgerSink,
    proxy_failure: Option<Blame>,
    ctx: &mut Ctx,
) -> Option<Billed> {
    let journaled = ctx.journaled.take();
    let a = ctx.admitted.as_ref()?;
    let ending = ending(ctx, proxy_failure);
    let (record, entry) = match journaled {
        Some(j) if j.ending == ending => (Some(j.record), j.entry),
        Some(j) => (record_for(ctx, a, ending).or(Some(j.record)), j.entry),
        None => (record_for(ctx, a, ending), None),
    };
    let record = record?;
    if let Some(review) = &record.review {
        tracing::error!(id = %record.id, model = %record.model_id, "{review}");
        METRICS.usage_unpriced(&record.model_id);
    }
    let billed = Billed::of(&record);
    ledger.submit(record, entry);
    Some(billed)
}

/// Journals the record of the request `a` as it stands (about to end as it is ending now).
pub(super) fn journal(ledger: &LedgerSink, ctx: &mut Ctx, a: &Admitted) {
    let ending = ending(ctx, None);
    let Some(record) = record_for(ctx, a, ending) else {
        return;
    };
    let entry = ledger.journal(&record);
    ctx.journaled = Some(Box::new(Journaled {
        record,
        ending,
        entry,
    }));
}

fn ending(ctx: &Ctx, proxy_failure: Option<Blame>) -> Ending {
    let stopped = proxy_failure.or(ctx.stopped);
    Ending::of(ctx.error.as_ref(), stopped, ctx.client_left)
}

/// The usage record of request `a` ending so, if it is billed.
fn record_for(ctx: &Ctx, a: &Admitted, ending: Ending) -> Option<UsageRecord> {
    let timings = Timings {
        started_at: ctx.started_at,
        finished_at: chrono::Utc::now(),
        upstream_latency: ctx.upstream_time(),
        ttft: between(Some(ctx.started), ctx.first_body_at),
    };
    let produced = Produced {
        reported: ctx.usage,
        delivered: ctx.delivered,
        cache_created: a.cache_created,
        attempts: ctx.attempts,
    };
    let traced = Traced {
        client_addr: ctx.client_addr,
        upstream_request_id: ctx.upstream_request_id.as_deref(),
    };
    match usage_record_for(a, ending, produced, timings, traced)? {
        Ok(record) => Some(record),
        Err(err) => {
            // Admission refuses a worst case that cannot be priced, so this is a bug.
            tracing::error!(id = %a.response_cx.id, "cannot price even the worst case: {err}");
            METRICS.usage_unpriced(&a.model.id);
            None
        }
    }
}

/// The time from `from` to `to`, when both happened (in that order).
fn between(from: Option<Instant>, to: Option<Instant>) -> Option<Duration> {
    to?.checked_duration_since(from?)
}

/// What a usage record says to the metrics.
pub(super) struct Billed {
    tokens: [(&'static str, u64); 7],
    cost_usd: f64,
}

impl Billed {
    fn of(r: &UsageRecord) -> Self {
        Billed {
            tokens: [
                ("input", r.input_tokens),
                ("output", r.output_tokens),
                ("reasoning", r.reasoning_tokens),
                ("cache_read", r.cache_read_tokens),
                ("cache_write", r.cache_write_tokens),
                ("cache_write_1h", r.extra.cache_write_1h_tokens),
                ("audio_input", r.extra.audio_input_tokens),
            ],
            // Dashboards only: the ledger keeps the exact amount.
            cost_usd: r.cost.pico() as f64 / 1e12,
        }
    }
}

/// A finished request into the metrics.
pub(super) fn count(path: &str, status: u16, ctx: &Ctx, billed: Option<Billed>) {
    let a = ctx.admitted.as_ref();
    let upstream = ctx.upstream_time();
    let first_byte = between(Some(ctx.started), ctx.first_body_at);
    let (tokens, cost_usd) = billed.map_or(([("", 0); 7], 0.0), |b| (b.tokens, b.cost_usd));
    METRICS.finished(&Finished {
        endpoint: endpoint(path),
        model: a.map_or("", |a| &a.model.id),
        route: a.map_or("", |a| a.route.kind.as_str()),
        status,
        code: ctx.error.as_ref().map_or("", GatewayError::code),
        refused: ctx
            .error
            .as_ref()
            .is_some_and(|e| e.blame() == Blame::Client),
        gateway_added: ctx.gateway_time,
        upstream_latency: upstream,
        first_token: first_byte.filter(|_| a.is_some()),
        attempts: if ctx.upstream_at.is_some() {
            ctx.attempts
        } else {
            0
        },
        tokens,
        cost_usd,
    });
}

/// The metrics' endpoint label: known paths only (a client cannot mint labels).
fn endpoint(path: &str) -> &'static str {
    match path {
        "/v1/chat/completions" => "chat",
        "/v1/embeddings" => "embeddings",
        "/v1/messages" => "messages",
        "/v1/messages/count_tokens" => "count_tokens",
        "/v1/responses" => "responses",
        stored if stored.starts_with("/v1/responses/") => "stored_response",
        "/v1/models" => "models",
        "/v1/key" => "key",
        "/v1/credits" => "credits",
        "/v1/generation" => "generation",
        "/health" => "health",
        _ => "other",
    }
}

/// Exactly one access event per request, at a level set by who was to blame.
pub(super) fn access_log(path: &str, status: u16, ctx: &Ctx) {
    let a = ctx.admitted.as_ref();
    let total_ms = ctx.started.elapsed().as_secs_f64() * 1e3;
    let ttfb_ms = ctx
        .first_byte_at
        .map(|t| (t - ctx.started).as_secs_f64() * 1e3);
    let code = ctx.error.as_ref().map_or("", GatewayError::code);
    let blame = ctx.error.as_ref().map(GatewayError::blame);
    let u = ctx.usage;
    macro_rules! event {
        ($level:ident) => {
            tracing::$level!(
                target: "tollgate::access",
                path,
                status,
                code,
                request_id = &*ctx.request_id,
                client_addr = ctx.client_addr.map(tracing::field::display),
                upstream_request_id = ctx.upstream_request_id.as_deref(),
                id = a.map_or("", |a| &a.response_cx.id),
                key = a.map_or("", |a| &a.key.id),
                model = a.map_or("", |a| &a.model.id),
                route = a.map_or("", |a| a.route.kind.as_str()),
                attempts = ctx.attempts,
                stream = a.is_some_and(|a| a.stream),
                upstream_status = ctx.upstream_status,
                ttfb_ms,
                total_ms,
                input = u.input,
                cache_read = u.cache_read,
                cache_write = u.cache_write,
                cache_write_1h = u.cache_write_1h,
                audio_input = u.audio_input,
                output = u.output,
                reasoning = u.reasoning,
            )
        };
    }
    match blame {
        None | Some(Blame::Client) => event!(info),
        Some(Blame::Upstream) => event!(warn),
        Some(Blame::Gateway) => event!(error),
    }
}
