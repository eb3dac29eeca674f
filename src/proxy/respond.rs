//! Answers the gateway writes itself: local endpoints and every gateway-made error.

use bytes::Bytes;
use http::header::{
    HeaderName, HeaderValue, InvalidHeaderValue, ALLOW, CACHE_CONTROL, CONTENT_LENGTH,
    CONTENT_TYPE, RETRY_AFTER, TRANSFER_ENCODING,
};
use http::StatusCode;
use pingora_core::protocols::http::ServerSession as Session;
use pingora_error::{ErrorType, OrErr};
use pingora_http::ResponseHeader;

use crate::api::error::stream_error_frame;
use crate::api::{Door, GatewayError};

use super::timing::Stamp;

// The gateway's own header names, made once (`from_static`: neither parsed nor allocated).
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");
pub const X_TOLLGATE_COST: HeaderName = HeaderName::from_static("x-tollgate-cost");
pub const X_TOLLGATE_GENERATION_ID: HeaderName =
    HeaderName::from_static("x-tollgate-generation-id");

/// Writes a complete JSON response (every answer names its request and the gateway's time,
/// errors included).
pub async fn json(
    session: &mut Session,
    stamp: &Stamp,
    status: u16,
    body: Bytes,
    extra: &[(HeaderName, &str)],
) -> pingora_error::Result<()> {
    let mut head = Head::new(status, 4 + extra.len())?;
    head.put(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    head.put(CONTENT_LENGTH, HeaderValue::from(body.len()));
    head.stamped(stamp)?;
    for (name, value) in extra {
        head.text(name.clone(), *value)?;
    }
    session.write_response_header(Box::new(head.into())).await?;
    session.write_response_body(body, true).await
}

/// The client's header for an upstream answer: the status kept, the body re-framed as chunked
/// (its length changes in translation), only the headers the gateway vouches for.
pub fn answer_header(
    status: u16,
    streaming: bool,
    retry_after: Option<&HeaderValue>,
    stamp: &Stamp,
) -> pingora_error::Result<ResponseHeader> {
    let mut head = Head::new(status, 6)?;
    let content_type = if streaming {
        "text/event-stream"
    } else {
        "application/json"
    };
    head.put(CONTENT_TYPE, HeaderValue::from_static(content_type));
    head.put(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
    if streaming {
        head.put(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    if let Some(retry_after) = retry_after {
        head.put(RETRY_AFTER, retry_after.clone());
    }
    head.stamped(stamp)?;
    Ok(head.into())
}

/// An answer's head, built on `http`'s own types: named by constants and valued from static
/// text where it can be. Pingora's `insert_header` parses each name and copies each value into
/// an allocation of its own: about 860 instructions a header, six headers an answer.
struct Head(http::response::Parts);

impl Head {
    /// Room for `ours` headers and the two Pingora adds (`date`, `connection`), so that the map
    /// never grows. Without Pingora's second map of each name's case as given (its own
    /// spelling of a standard name, `Content-Type`, does as well on the wire): a stream holds
    /// its header to its end, and that map was 1.2 KB more.
    fn new(status: u16, ours: usize) -> pingora_error::Result<Head> {
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status =
            StatusCode::from_u16(status).or_err(ErrorType::InvalidHTTPHeader, "invalid status")?;
        parts.headers.reserve(ours + 2);
        Ok(Head(parts))
    }

    fn put(&mut self, name: HeaderName, value: HeaderValue) {
        self.0.headers.insert(name, value);
    }

    /// A header whose value is text made at run time (a `String` is taken, not copied).
    fn text(
        &mut self,
        name: HeaderName,
        value: impl TryInto<HeaderValue, Error = InvalidHeaderValue>,
    ) -> pingora_error::Result<()> {
        let value = value
            .try_into()
            .or_err(ErrorType::InvalidHTTPHeader, "invalid header value")?;
        self.put(name, value);
        Ok(())
    }

    /// The headers every answer carries: `x-request-id` and `server-timing`.
    fn stamped(&mut self, stamp: &Stamp) -> pingora_error::Result<()> {
        self.text(X_REQUEST_ID, &*stamp.request_id)?;
        self.text(SERVER_TIMING, stamp.timing.header_value())
    }
}

impl From<Head> for ResponseHeader {
    fn from(head: Head) -> ResponseHeader {
        ResponseHeader::from(head.0)
    }
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
    let allow = e.allow().map(|a| (ALLOW, a));
    let wait = retry_after.map(|a| (RETRY_AFTER, a));
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
