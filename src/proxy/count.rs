//! `POST /v1/messages/count_tokens` (the Messages door): one call to the counting endpoint of
//! the model's best route, answered `{"input_tokens": N}`. Authenticated, but neither gated
//! by credit nor billed, and not failed over: counting is advice, and its client retries.

use bytes::Bytes;
use pingora_core::protocols::http::ServerSession as Session;

use super::ctx::Ctx;
use super::failover::{upstream_failure, Outbound};
use super::respond;
use crate::admission::{Admission, Counting};
use crate::api::GatewayError;
use crate::auth::ModelAllowlist;

/// Counts the body's input tokens upstream and answers the client; `Err`: the error to answer
/// with (written by the caller, in the door's shape).
pub(super) async fn answer(
    session: &mut Session,
    ctx: &mut Ctx,
    admission: &Admission<'_>,
    outbound: Outbound<'_>,
    models: &ModelAllowlist,
    body: &[u8],
) -> Result<(), GatewayError> {
    let Counting {
        route,
        adapter,
        request,
    } = admission.count_tokens(models, body)?;
    ctx.upstream_at = Some(std::time::Instant::now());
    let answered = outbound.client.run(&route.endpoint, vec![request]).await;
    ctx.first_byte_at = Some(std::time::Instant::now());
    ctx.upstream_status = answered.as_ref().map_or_else(|f| f.status(), |_| Some(200));
    let answer = match answered {
        Ok(answered) => {
            ctx.upstream_request_id = answered.request_id;
            answered.bodies.into_iter().next().unwrap_or_default()
        }
        Err(failure) => {
            ctx.upstream_request_id = failure.request_id().map(Into::into);
            let request_id = &ctx.request_id;
            let (e, _) =
                upstream_failure(adapter, &route, request_id, outbound.credentials, failure);
            return Err(e);
        }
    };
    let tokens = adapter
        .read_count(&answer)
        .map_err(|e| GatewayError::Upstream {
            status: 502,
            message: e.to_string().into(),
        })?;
    let body = Bytes::from(format!("{{\"input_tokens\":{tokens}}}"));
    if let Err(e) = respond::json(session, &ctx.stamp(), 200, body, &[]).await {
        tracing::debug!("writing a token count failed: {e}");
    }
    Ok(())
}
