//! Requests the gateway sends itself: a fan-out (an adapter asked for several upstream calls,
//! e.g. Gemini embeddings batches) and every buffered answer (a fan-out of one call, so that
//! the answer is read, bounded and translated before its status is chosen). Answered from
//! `request_filter` through the shared
//! [`FanOutClient`](crate::upstream::fan_out::FanOutClient), leaving in the context what a
//! proxied request leaves for `logging` (the decision, upstream status, usage or error).

use std::time::Instant;

use pingora_proxy::Session;

use super::ctx::Ctx;
use super::{respond, Gateway};
use crate::admission::{Admission, Admitted};
use crate::api::error::Transport;
use crate::api::GatewayError;
use crate::catalog::Route;
use crate::providers::{buffered_join, Adapter, FanOut, Joiner, Plan, UpstreamRequest};
use crate::upstream::fan_out::PartFailure;

impl Gateway {
    /// Sends a fan-out's calls, joins their answers and answers the client.
    pub(super) async fn run_fan_out(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        admitted: Admitted,
        plan: FanOut,
    ) {
        ctx.upstream_at = Some(Instant::now());
        let answers = self.fan_out.run(&admitted.route.endpoint, plan.calls).await;
        self.answer_calls(session, ctx, admitted, answers, plan.join)
            .await;
    }

    /// Sends a buffered request and answers the client; while an attempt fails before
    /// answering (no connection, timeout, 429, 5xx), fails over to the request's other routes,
    /// `upstream.max_attempts` attempts in all. When every attempt failed and one was
    /// throttled, the client gets that 429 (the shortest `Retry-After`), as the upstreams would.
    pub(super) async fn run_buffered(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        admission: &Admission<'_>,
        mut admitted: Admitted,
        mut request: UpstreamRequest,
        body: &[u8],
    ) {
        ctx.upstream_at = Some(Instant::now());
        let mut fallbacks: Option<std::vec::IntoIter<Route>> = None;
        let mut reported: Option<PartFailure> = None;
        let answers = loop {
            let answer = self
                .fan_out
                .run(&admitted.route.endpoint, vec![request])
                .await;
            let Err(failure) = &answer else {
                break answer;
            };
            if !failure.worth_another_route() || ctx.attempts >= self.upstream.max_attempts {
                break answer;
            }
            let routes =
                fallbacks.get_or_insert_with(|| admission.fallbacks(&admitted, body).into_iter());
            let Some((route, next, cache)) =
                routes.find_map(|route| match admission.replan(&admitted, body, &route) {
                    Ok(Plan::Proxy { request, cache }) => Some((route, request, cache)),
                    _ => None,
                })
            else {
                break answer;
            };
            if let Err(f) = answer {
                reported = Some(PartFailure::to_report(reported, f));
            }
            tracing::info!(
                request_id = %admitted.response_cx.id,
                from = admitted.route.kind.as_str(),
                to = route.kind.as_str(),
                "failing over"
            );
            // A context cache the failed attempt created stays on the record (Google bills
            // it); one created for the next route replaces it there (not yet summed).
            admitted.route = route;
            request = self.use_cache(next, cache, &mut admitted).await;
            ctx.attempts += 1;
        };
        let answers = answers.map_err(|last| PartFailure::to_report(reported, last));
        let join = buffered_join(admitted.adapter);
        self.answer_calls(session, ctx, admitted, answers, join)
            .await;
    }

    /// Answers the client from the calls' answers; records in `ctx` what a proxied request
    /// records (the decision, upstream status, usage or error).
    async fn answer_calls(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        admitted: Admitted,
        answers: Result<Vec<bytes::Bytes>, PartFailure>,
        join: Joiner,
    ) {
        ctx.first_byte_at = Some(Instant::now());
        let mut retry_after = None;
        let outcome = match answers {
            Ok(bodies) => {
                ctx.upstream_status = Some(200);
                join(&bodies, &admitted.response_cx).map_err(|e| GatewayError::Upstream {
                    status: 502,
                    message: e.to_string().into(),
                })
            }
            Err(failure) => {
                if let PartFailure::Status { status, .. } = &failure {
                    ctx.upstream_status = Some(*status);
                }
                let (e, after) = part_failure(admitted.adapter, failure);
                retry_after = after;
                Err(e)
            }
        };
        let id = admitted.response_cx.id.clone();
        ctx.admitted = Some(admitted);
        let mut headers = vec![("x-request-id", id.as_ref())];
        let written = match outcome {
            Ok(t) => {
                ctx.usage = t.usage;
                ctx.first_body_at = Some(Instant::now());
                respond::json(session, 200, t.body, &headers).await
            }
            Err(e) => {
                if let Some(after) = retry_after.as_deref() {
                    headers.push(("retry-after", after));
                }
                let written = respond::json(session, e.status(), e.envelope(), &headers).await;
                ctx.error = Some(e);
                written
            }
        };
        if let Err(e) = written {
            tracing::debug!("writing fan-out answer failed: {e}");
        }
    }
}

/// A failed fan-out call as the gateway's error (the transport wording of every upstream call),
/// and the `Retry-After` the upstream asked for.
fn part_failure(adapter: &dyn Adapter, failure: PartFailure) -> (GatewayError, Option<String>) {
    match failure {
        PartFailure::Status {
            status,
            body,
            retry_after,
        } => (
            GatewayError::Upstream {
                status,
                message: adapter.upstream_error_message(status, &body).into(),
            },
            retry_after,
        ),
        PartFailure::Timeout => (GatewayError::transport(Transport::Timeout, None), None),
        PartFailure::Connect => (GatewayError::transport(Transport::Connect, None), None),
        PartFailure::TooLarge { limit } => (
            GatewayError::Upstream {
                status: 502,
                message: format!("upstream answer exceeds the limit of {limit} bytes").into(),
            },
            None,
        ),
        PartFailure::Broken => (GatewayError::transport(Transport::Broken, None), None),
    }
}
