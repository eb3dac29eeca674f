//! Requests the gateway sends itself: a fan-out (an adapter asked for several upstream calls,
//! e.g. Gemini embeddings batches) and every buffered answer (a fan-out of one call, so that
//! the answer is read, bounded and translated before its status is chosen). Answered through
//! the shared [`UpstreamClient`](crate::upstream::client::UpstreamClient), leaving in the
//! context what `logging` needs (the decision, upstream status, usage or error).

use std::time::Instant;

use pingora_core::protocols::http::ServerSession as Session;

use super::ctx::Ctx;
use super::failover::Failover;
use super::{respond, Gateway};
use crate::admission::{Admission, Admitted};
use crate::api::error::Transport;
use crate::api::GatewayError;
use crate::providers::{buffered_join, Credentials, FanOut, Joiner, UpstreamRequest};
use crate::upstream::client::CallFailure;

impl Gateway {
    /// Sends a fan-out's calls, joins their answers and answers the client; when a call fails
    /// before answering, every call goes again to the next route (`failover.rs`).
    pub(super) async fn run_fan_out(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        admission: &Admission<'_>,
        mut admitted: Admitted,
        mut plan: FanOut,
        body: &[u8],
    ) {
        ctx.upstream_at = Some(Instant::now());
        let mut failover = Failover::new(admission, body, &self.upstream);
        // Each route's plan has its own joiner (Vertex and the Developer API answer apart).
        let (answers, join) = loop {
            let FanOut { calls, join } = plan;
            match self.client.run(&admitted.route.endpoint, calls).await {
                Ok(answers) => {
                    admitted.route.health.succeeded();
                    break (Ok(answers), join);
                }
                Err(failure) => match failover.next_fan_out(ctx, &mut admitted, failure) {
                    Ok(next) => plan = next,
                    Err(report) => break (Err(report), join),
                },
            }
        };
        self.answer_calls(session, ctx, admitted, answers, join)
            .await;
    }

    /// Sends a buffered request and answers the client, failing over (`failover.rs`) while an
    /// attempt fails before answering.
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
        let mut failover = Failover::new(admission, body, &self.upstream);
        let answers = loop {
            let endpoint = &admitted.route.endpoint;
            match self.client.run(endpoint, vec![request]).await {
                Ok(answers) => {
                    admitted.route.health.succeeded();
                    break Ok(answers);
                }
                Err(failure) => match failover.next(self, ctx, &mut admitted, failure).await {
                    Ok(next) => request = next,
                    Err(report) => break Err(report),
                },
            }
        };
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
        answers: Result<Vec<bytes::Bytes>, CallFailure>,
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
                if let CallFailure::Status { status, .. } = &failure {
                    ctx.upstream_status = Some(*status);
                }
                let (e, after) = call_failure(&admitted, &self.credentials, failure);
                retry_after = after;
                Err(e)
            }
        };
        ctx.admitted = Some(admitted);
        let id = ctx.request_id.clone();
        let written = match outcome {
            Ok(t) => {
                ctx.usage = t.usage;
                ctx.first_body_at = Some(Instant::now());
                respond::json(session, &id, 200, t.body, &[]).await
            }
            Err(e) => {
                let written = respond::error(session, &id, &e, retry_after.as_deref()).await;
                ctx.error = Some(e);
                written
            }
        };
        if let Err(e) = written {
            tracing::debug!("writing fan-out answer failed: {e}");
        }
    }
}

/// A failed call as the gateway's error (the transport wording of every upstream call, for
/// every family), and the `Retry-After` the upstream asked for. An upstream's answer is worded
/// by its family's adapter, scrubbed, and rid of this gateway's credentials; when it refused
/// those credentials, its words go to the log and the client is told only that.
pub(super) fn call_failure(
    admitted: &Admitted,
    credentials: &Credentials,
    failure: CallFailure,
) -> (GatewayError, Option<String>) {
    match failure {
        CallFailure::Status {
            status,
            body,
            retry_after,
        } => {
            let message = admitted.adapter.upstream_error_message(status, &body);
            let message = credentials.redact(&message);
            let e = GatewayError::upstream_answer(status, &message);
            if let GatewayError::UpstreamCredentials { .. } = e {
                tracing::warn!(
                    request_id = %admitted.request_id,
                    route = admitted.route.kind.as_str(),
                    upstream = %message,
                    "the upstream refused the gateway's credentials"
                );
            }
            (e, retry_after)
        }
        CallFailure::Timeout => (GatewayError::transport(Transport::Timeout, None), None),
        CallFailure::Connect => (GatewayError::transport(Transport::Connect, None), None),
        CallFailure::TooLarge { limit } => (
            GatewayError::Upstream {
                status: 502,
                message: format!("upstream answer exceeds the limit of {limit} bytes").into(),
            },
            None,
        ),
        CallFailure::Broken => (GatewayError::transport(Transport::Broken, None), None),
        CallFailure::EarlyEnd { message } => (
            GatewayError::Upstream {
                status: 502,
                message: message.into(),
            },
            None,
        ),
    }
}
