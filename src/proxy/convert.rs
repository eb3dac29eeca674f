//! Pingora values turned into the gateway's plain ones: the request head admission reads, and
//! the one mapping of a Pingora failure to a [`GatewayError`] and to who is to blame.

use pingora_error::{Error, ErrorSource, ErrorType};
use pingora_proxy::Session;

use crate::admission::RequestHead;
use crate::api::error::{Blame, Transport};
use crate::api::GatewayError;

/// The head fields admission needs, borrowed from the session (no header map copy).
pub fn head(session: &Session) -> RequestHead<'_> {
    let req = session.req_header();
    RequestHead {
        method: &req.method,
        path: req.uri.path(),
        authorization: req
            .headers
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes()),
    }
}

/// Who made a Pingora operation fail.
pub fn blame(e: &Error) -> Blame {
    match e.esource() {
        ErrorSource::Downstream => Blame::Client,
        ErrorSource::Upstream => Blame::Upstream,
        ErrorSource::Internal | ErrorSource::Unset => Blame::Gateway,
    }
}

/// A Pingora failure before any response byte reached the client, as the gateway's error.
pub fn before_answer(e: &Error) -> GatewayError {
    use ErrorType::*;
    let detail = e.etype().as_str();
    match e.etype() {
        ConnectTimedout | ReadTimedout | WriteTimedout => {
            GatewayError::transport(Transport::Timeout, Some(detail))
        }
        ConnectRefused | ConnectNoRoute | ConnectError | TLSHandshakeFailure
        | ConnectProxyFailure => GatewayError::transport(Transport::Connect, Some(detail)),
        HTTPStatus(code) => GatewayError::Upstream {
            status: *code,
            message: format!("upstream failed: {detail}").into(),
        },
        _ => match blame(e) {
            Blame::Upstream => GatewayError::transport(Transport::Broken, Some(detail)),
            // Client failures are answered by nobody (the client is gone); keep it total.
            Blame::Client => GatewayError::invalid(format!("client request failed: {detail}")),
            Blame::Gateway => GatewayError::Internal(format!("gateway failed: {detail}").into()),
        },
    }
}

/// A Pingora failure after the client's 200 went out.
pub fn mid_stream(e: &Error) -> GatewayError {
    GatewayError::MidStream(format!("upstream failed mid-response: {}", e.etype().as_str()).into())
}
