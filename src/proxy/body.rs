//! Reading a client body whole, bounded in size and time: before routing (bounded by
//! `max_request_body`), and on the admin listener.
//!
//! The gateway sends upstream bodies itself, so the client's body is read whole, once, here
//! (Pingora's 64 KiB replay buffer is not involved). `Expect: 100-continue` is answered here,
//! since we read the body ourselves.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora_core::protocols::http::ServerSession as Session;

use crate::api::GatewayError;

/// The whole body, at most `max` bytes, arrived within `deadline` (a slow upload would
/// otherwise hold its connection as long as each read beat Pingora's per-read timeout). Both
/// listeners read bodies through this.
pub async fn read_within(
    session: &mut Session,
    max: u64,
    deadline: Duration,
) -> Result<Bytes, GatewayError> {
    tokio::time::timeout(deadline, read_bounded(session, max))
        .await
        .map_err(|_| GatewayError::BodyTimeout {
            secs: deadline.as_secs(),
        })?
}

async fn read_bounded(session: &mut Session, max: u64) -> Result<Bytes, GatewayError> {
    let declared = content_length(session)?;
    if declared.is_some_and(|n| n > max) {
        return Err(GatewayError::BodyTooLarge { limit: max });
    }
    if expects_continue(session) {
        session
            .write_continue_response()
            .await
            .map_err(|e| GatewayError::Internal(format!("writing 100 Continue: {e}").into()))?;
    }
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(max) as usize);
    while let Some(chunk) = session
        .read_request_body()
        .await
        .map_err(|e| GatewayError::invalid(format!("failed to read request body: {e}")))?
    {
        if (buf.len() + chunk.len()) as u64 > max {
            return Err(GatewayError::BodyTooLarge { limit: max });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

fn content_length(session: &Session) -> Result<Option<u64>, GatewayError> {
    match session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
    {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .map(Some)
            .ok_or_else(|| GatewayError::invalid("invalid Content-Length header")),
    }
}

fn expects_continue(session: &Session) -> bool {
    session
        .req_header()
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}
