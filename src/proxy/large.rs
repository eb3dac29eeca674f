//! Bodies larger than Pingora's 64 KiB replay buffer.
//!
//! Pingora can only replay a body read in `request_filter` from that buffer; above it the
//! request would hang. So the parent request hands its whole routing decision (with the
//! already-rewritten upstream body) to a subrequest created without a body: the subrequest
//! skips admission, injects the body in `request_body_filter`, proxies and translates as usual,
//! and does the accounting; the parent pipes its output to the client. The subrequest API is
//! marked alpha in Pingora 0.9; this is its only user, kept to one file.

use pingora_proxy::subrequest::pipe::{pipe_subrequest, InputBody, InputBodyType};
use pingora_proxy::subrequest::{BodyMode, Ctx as SubrequestCtx};
use pingora_proxy::Session;

use super::ctx::Proxied;
use super::{convert, respond};
use crate::api::GatewayError;

/// Runs `proxied` as a subrequest and pipes its response to the client.
pub async fn hand_off(session: &mut Session, proxied: Proxied) -> pingora_error::Result<()> {
    let stream = proxied.admitted.stream;
    let sub_ctx = SubrequestCtx::builder()
        .user_ctx(Box::new(Some(proxied)))
        .body_mode(BodyMode::NoBody)
        .build();
    let Some(spawner) = session.subrequest_spawner.as_ref() else {
        let e = GatewayError::Internal("subrequests are not enabled".into());
        return respond::error(session, &e).await;
    };
    let (prepared, handle) = spawner.create_subrequest(session.as_downstream(), sub_ctx);
    let piped = pipe_subrequest(
        session,
        prepared,
        handle,
        |task| Ok(Some(task)),
        InputBodyType::Preset(InputBody::NoBody),
    )
    .await;
    let Err(failure) = piped else {
        return Ok(());
    };
    // The subrequest failed; it has done its own accounting. Finish the client's response.
    if !failure.state.header_received {
        return respond::error(session, &convert::before_answer(&failure.error)).await;
    }
    if stream {
        respond::stream_error(session, &convert::mid_stream(&failure.error)).await
    } else {
        session.finish_body().await.map(|_| ())
    }
}

/// In a subrequest: the request its parent handed over, if any.
pub fn take_handoff(session: &mut Session) -> Option<Proxied> {
    session
        .subrequest_ctx
        .as_mut()?
        .user_ctx_mut()?
        .downcast_mut::<Option<Proxied>>()?
        .take()
}
