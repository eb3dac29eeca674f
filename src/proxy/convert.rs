//! Between Pingora's values and the gateway's plain ones: the request head admission reads, and
//! who is to blame for a Pingora failure.

use pingora_core::protocols::http::ServerSession as Session;
use pingora_error::{Error, ErrorSource};

use crate::admission::RequestHead;
use crate::api::error::Blame;

/// The head fields admission needs, borrowed from the session (no header map copy).
pub fn head(session: &Session) -> RequestHead<'_> {
    let req = session.req_header();
    RequestHead {
        method: &req.method,
        path: req.uri.path(),
        query: req.uri.query(),
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

/// Who made a Pingora operation fail.
pub fn blame(e: &Error) -> Blame {
    match e.esource() {
        ErrorSource::Downstream => Blame::Client,
        ErrorSource::Upstream => Blame::Upstream,
        ErrorSource::Internal | ErrorSource::Unset => Blame::Gateway,
    }
}
