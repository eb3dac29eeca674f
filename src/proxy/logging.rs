//! What the `logging` phase does with a finished request: its usage record for the ledger,
//! and its one access event.

use std::time::Instant;

use super::ctx::Ctx;
use super::Gateway;
use crate::admission::outcome::{usage_record_for, Ending, Produced, Timings};
use crate::api::error::Blame;
use crate::api::GatewayError;

impl Gateway {
    /// Hands a finished request's usage record to the ledger, when
    /// [`outcome`](crate::admission::outcome) says it is billed.
    pub(super) fn bill(&self, proxy_failure: Option<Blame>, ctx: &Ctx) {
        let Some(a) = ctx.admitted.as_ref() else {
            return;
        };
        let stopped = proxy_failure.or(ctx.stopped);
        let ending = Ending::of(ctx.error.as_ref(), stopped, ctx.client_left);
        let since = |from: Option<Instant>, to: Option<Instant>| Some(to? - from?);
        let timings = Timings {
            started_at: ctx.started_at,
            finished_at: chrono::Utc::now(),
            upstream_latency: since(ctx.upstream_at, ctx.first_byte_at),
            ttft: since(Some(ctx.started), ctx.first_body_at),
        };
        let produced = Produced {
            reported: ctx.usage,
            delivered: ctx.delivered,
            cache_created: a.cache_created,
            attempts: ctx.attempts,
        };
        match usage_record_for(a, ending, produced, timings) {
            None => {}
            Some(Ok(record)) => self.ledger.submit(record),
            Some(Err(err)) => tracing::error!(id = %a.response_cx.id, "cannot price usage: {err}"),
        }
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
