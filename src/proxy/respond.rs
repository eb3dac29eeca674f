//! Answers the gateway writes itself: local endpoints and every gateway-made error.

use bytes::Bytes;
use pingora_core::protocols::http::ServerSession as Session;
use pingora_http::ResponseHeader;

use crate::api::error::stream_error_frame;
use crate::api::{Door, GatewayError};

use super::timing::Stamp;

/// Writes a complete JSON response (every answer names its request and the gateway's time,
/// errors included).
pub async fn json(
    session: &mut Session,
    stamp: &Stamp,
    status: u16,
    body: Bytes,
    extra: &[(&'static str, &str)],
) -> pingora_error::Result<()> {
    let mut header = new_header(status, 4 + extra.len())?;
    header.insert_header("content-type", "application/json")?;
    header.insert_header("content-length", body.len().to_string())?;
    stamped(&mut header, stamp)?;
    for (name, value) in extra {
        header.insert_header(*name, *value)?;
    }
    session.write_response_header(Box::new(header)).await?;
    session.write_response_body(body, true).await
}

/// The client's header for an upstream answer: the status kept, the body re-framed as chunked
/// (its length changes in translation), only the headers the gateway vouches for.
pub fn answer_header(
    status: u16,
    streaming: bool,
    retry_after: Option<&http::HeaderValue>,
    stamp: &Stamp,
) -> pingora_error::Result<ResponseHeader> {
    let mut fresh = new_header(status, 6)?;
    let content_type = if streaming {
        "text/event-stream"
    } else {
        "application/json"
    };
    fresh.insert_header("content-type", content_type)?;
    fresh.insert_header("transfer-encoding", "chunked")?;
    if streaming {
        fresh.insert_header("cache-control", "no-cache")?;
    }
    if let Some(retry_after) = retry_after {
        fresh.insert_header("retry-after", retry_after.clone())?;
    }
    stamped(&mut fresh, stamp)?;
    Ok(fresh)
}

/// An answer's header with room for `ours` headers and the two Pingora adds (`date`,
/// `connection`), so that it never grows. Without Pingora's second map of each name's case as
/// given (its own spelling of a standard name, `Content-Type`, does as well on the wire): a
/// stream holds its header to its end, and the map was 1.2 KB more.
fn new_header(status: u16, ours: usize) -> pingora_error::Result<ResponseHeader> {
    ResponseHeader::build_no_case(status, Some(ours + 2))
}

/// The headers every answer carries: `x-request-id` and `server-timing`.
fn stamped(header: &mut ResponseHeader, stamp: &Stamp) -> pingora_error::Result<()> {
    header.insert_header("x-request-id", &*stamp.request_id)?;
    header.insert_header("server-timing", stamp.timing.header_value())
}

/// Writes the error in `door`'s shape with its status there, `Allow` on a 405, and the
/// upstream's `Retry-After` when it gave one.
pub async fn error(
    session: &mut Session,
    door: Door,
    stamp: &Stamp,
    e: &GatewayError,
    retry_after: Option<&str>,
) -> pingora_error::Result<()> {
    let allow = e.allow().map(|a| ("allow", a));
    let wait = retry_after.map(|a| ("retry-after", a));
    let extra: Vec<_> = allow.into_iter().chain(wait).collect();
    let (status, body) = (e.status_in(door), e.envelope_in(door));
    json(session, stamp, status, body, &extra).await
}

/// Ends a stream whose 200 is already out with `frame` (else `door`'s error frame), and a
/// clean end.
pub async fn stream_error(
    session: &mut Session,
    door: Door,
    e: &GatewayError,
    frame: Option<Bytes>,
) -> pingora_error::Result<()> {
    let frame = frame.unwrap_or_else(|| stream_error_frame(door, &e.to_string()));
    session.write_response_body(frame, true).await?;
    session.finish_body().await.map(|_| ())
}
