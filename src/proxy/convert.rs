//! Between Pingora's values and the gateway's plain ones: the request head admission reads; the
//! peer and the fresh request header of a planned upstream request; and the one mapping of a
//! Pingora failure to a [`GatewayError`] and to who is to blame.

use std::time::Duration;

use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorSource, ErrorType};
use pingora_http::RequestHeader;
use pingora_proxy::{FailToProxy, Session};

use crate::admission::{Admitted, RequestHead};
use crate::api::error::{Blame, Transport};
use crate::api::GatewayError;
use crate::catalog::Route;
use crate::config::UpstreamConf;
use crate::providers::UpstreamRequest;

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
        header_count: req.headers.len(),
        header_bytes: req
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len())
            .sum(),
    }
}

/// The route's resolved upstream, with the configured timeouts.
pub fn peer(route: &Route, conf: &UpstreamConf) -> pingora_error::Result<HttpPeer> {
    let Some(addr) = route.addr else {
        return Err(Error::explain(
            ErrorType::ConnectNoRoute,
            "upstream host unresolved",
        ));
    };
    let mut peer = HttpPeer::new(addr, route.endpoint.tls, route.endpoint.host.clone());
    let o = &mut peer.options;
    o.connection_timeout = Some(conf.connect_timeout);
    o.total_connection_timeout = Some(conf.connect_timeout * 2);
    o.read_timeout = Some(conf.read_timeout);
    o.write_timeout = Some(conf.write_timeout);
    o.idle_timeout = Some(Duration::from_secs(60));
    Ok(peer)
}

/// A fresh header for the planned request: nothing of the client's (its key, cookies,
/// encodings) leaks upstream.
pub fn upstream_header(a: &Admitted, up: &UpstreamRequest) -> pingora_error::Result<RequestHeader> {
    let mut fresh = RequestHeader::build("POST", up.path.as_bytes(), Some(up.headers.len() + 4))?;
    fresh.insert_header("host", a.route.endpoint.authority())?;
    fresh.insert_header("content-length", up.body.len().to_string())?;
    let accept = if a.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    fresh.insert_header("accept", accept)?;
    fresh.insert_header(
        "user-agent",
        concat!("tollgate/", env!("CARGO_PKG_VERSION")),
    )?;
    for (name, value) in &up.headers {
        fresh.insert_header(name.clone(), value.clone())?;
    }
    Ok(fresh)
}

/// How `fail_to_proxy` leaves the client connection: closed, with `code` logged (0: none).
pub fn closed(code: u16) -> FailToProxy {
    FailToProxy {
        error_code: code,
        can_reuse_downstream: false,
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
