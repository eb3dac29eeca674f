//! Requests proxied through a subrequest: bodies larger than Pingora's 64 KiB replay buffer,
//! and streams.
//!
//! Pingora can only replay a body read in `request_filter` from that buffer; above it the
//! request would hang. So the parent request hands its whole routing decision (with the
//! already-rewritten upstream body) to a subrequest created without a body: the subrequest
//! skips admission, injects the body in `request_body_filter`, proxies and translates as usual,
//! and does the accounting; the parent pipes its output to the client.
//!
//! Streams go the same way for another reason: when a client leaves, Pingora drops the
//! upstream of a plain proxied request, and with it the final usage event (Anthropic counts its
//! output, Vertex Gemini all its tokens, only at the end). A subrequest does not see its
//! parent's client leave: the parent marks the request as left and keeps draining the pipe, for
//! `drain_after_disconnect` at most, so the subrequest reads the upstream to its end and bills
//! the upstream's own counts. The subrequest API is marked alpha in Pingora 0.9; this is its
//! only user, kept to one file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pingora_core::protocols::http::HttpTask;
use pingora_proxy::subrequest::pipe::{pipe_subrequest, InputBody, InputBodyType};
use pingora_proxy::subrequest::{BodyMode, Ctx as SubrequestCtx};
use pingora_proxy::Session;
use tokio::sync::mpsc;

use super::ctx::Proxied;
use super::{convert, respond};
use crate::api::GatewayError;

/// Runs `proxied` as a subrequest and pipes its response to the client; if the client leaves,
/// lets the subrequest go on for `drain` at most.
pub async fn hand_off(
    session: &mut Session,
    mut proxied: Proxied,
    drain: Duration,
) -> pingora_error::Result<()> {
    let stream = proxied.admitted.stream;
    let client_left = Arc::new(AtomicBool::new(false));
    proxied.client_left = Some(client_left.clone());
    let sub_ctx = SubrequestCtx::builder()
        .user_ctx(Box::new(Some(proxied)))
        .body_mode(BodyMode::NoBody)
        .build();
    let Some(spawner) = session.subrequest_spawner.as_ref() else {
        let e = GatewayError::Internal("subrequests are not enabled".into());
        return respond::error(session, &e).await;
    };
    let (prepared, handle) = spawner.create_subrequest(session.as_downstream(), sub_ctx);
    // The subrequest takes its input channel closing for its client leaving: kept open here
    // so that, if the real client leaves, the subrequest does not learn it and reads on.
    let input = handle.tx.clone();
    let piped = pipe_subrequest(
        session,
        prepared,
        handle,
        |task| Ok(Some(task)),
        InputBodyType::Preset(InputBody::NoBody),
    )
    .await;
    let Err(mut failure) = piped else {
        return Ok(());
    };
    if !failure.from_subreq {
        // Writing to the client failed: it is gone.
        client_left.store(true, Ordering::Relaxed);
        if let Some(pipe) = failure.state.pipe_rx.take() {
            tokio::spawn(drain_pipe(pipe, input, drain));
        }
        return Err(failure.error);
    }
    // The subrequest failed; it has done its own accounting. Pingora may report the failure
    // before forwarding what the subrequest wrote just before it: send that on first (it was
    // counted as delivered), then finish the client's response.
    let mut header_received = failure.state.header_received;
    if let Some(pipe) = failure.state.pipe_rx.as_mut() {
        let pending = pending_output(pipe);
        header_received |= pending.iter().any(|t| matches!(t, HttpTask::Header(..)));
        if !pending.is_empty() {
            session.write_response_tasks(pending).await?;
        }
    }
    if !header_received {
        return respond::error(session, &convert::before_answer(&failure.error)).await;
    }
    if stream {
        respond::stream_error(session, &convert::mid_stream(&failure.error)).await
    } else {
        session.finish_body().await.map(|_| ())
    }
}

/// The response header and body the subrequest had queued in the pipe, without waiting.
fn pending_output(pipe: &mut mpsc::Receiver<HttpTask>) -> Vec<HttpTask> {
    let mut out = Vec::new();
    while let Ok(task) = pipe.try_recv() {
        if let HttpTask::Header(..) | HttpTask::Body(_, false) = task {
            out.push(task);
        }
    }
    out
}

/// Reads and discards what the subrequest still sends, for `bound` at most, holding its input
/// open; then dropping both ends the subrequest (which bills what it had read).
async fn drain_pipe(
    mut pipe: mpsc::Receiver<HttpTask>,
    _input: mpsc::Sender<HttpTask>,
    bound: Duration,
) {
    let _ = tokio::time::timeout(bound, async { while pipe.recv().await.is_some() {} }).await;
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
