//! What the `logging` phase does with a finished request: its usage record for the ledger,
//! and its one access event.

use std::time::Instant;

use pingora_error::{Error, ErrorSource};

use super::ctx::Ctx;
use super::Gateway;
use crate::api::{GatewayError, Operation};

impl Gateway {
    /// Hands a finished request's usage record to the ledger. Billed: requests the upstream
    /// answered (complete), streams the client left early (what was received), and streams
    /// the upstream broke after producing tokens (what was received). Not billed: anything
    /// that failed before the upstream answered, and answers without usage.
    pub(super) fn bill(&self, e: Option<&Error>, ctx: &Ctx) {
        use crate::store::{UsageEndpoint, UsageOutcome};
        let Some(a) = ctx.admitted.as_ref() else {
            return;
        };
        let outcome = match (&ctx.error, e) {
            (None, None) => UsageOutcome::Complete,
            (None, Some(err)) if matches!(err.esource(), ErrorSource::Downstream) => {
                UsageOutcome::ClientDisconnected
            }
            (Some(GatewayError::Upstream { status: 200, .. }), _) => UsageOutcome::UpstreamFailed,
            _ => return,
        };
        if ctx.usage.is_zero() {
            return;
        }
        let micros = |from: Instant, to: Option<Instant>| to.map(|t| (t - from).as_micros() as u64);
        let charge = crate::billing::record::Charge {
            id: &a.response_cx.id,
            key: &a.key,
            model: &a.model,
            route: a.route.kind.as_str(),
            endpoint: match a.op {
                Operation::Chat => UsageEndpoint::Chat,
                Operation::Embeddings => UsageEndpoint::Embeddings,
            },
            stream: a.stream,
            usage: ctx.usage,
            outcome,
            started_at: ctx.started_at,
            finished_at: chrono::Utc::now(),
            upstream_latency_us: ctx.upstream_at.and_then(|u| micros(u, ctx.first_byte_at)),
            ttft_us: micros(ctx.started, ctx.first_body_at),
        };
        match crate::billing::record::usage_record(charge) {
            Ok(record) => self.ledger.submit(record),
            Err(err) => tracing::error!(id = %a.response_cx.id, "cannot price usage: {err}"),
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
                request_id = a.map_or("", |a| &a.response_cx.id),
                key = a.map_or("", |a| &a.key.id),
                model = a.map_or("", |a| &a.model.id),
                route = a.map_or("", |a| a.route.kind.as_str()),
                stream = a.is_some_and(|a| a.stream),
                upstream_status = ctx.upstream_status,
                ttfb_ms,
                total_ms,
                input = u.input,
                cache_read = u.cache_read,
                cache_write = u.cache_write,
                output = u.output,
                reasoning = u.reasoning,
            )
        };
    }
    match blame {
        None | Some(crate::api::error::Blame::Client) => event!(info),
        Some(crate::api::error::Blame::Upstream) => event!(warn),
        Some(crate::api::error::Blame::Gateway) => event!(error),
    }
}
