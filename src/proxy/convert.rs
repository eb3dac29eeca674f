//! Between Pingora's values and the gateway's plain ones: the request head admission reads, and
//! who is to blame for a Pingora failure.

use pingora_core::protocols::http::ServerSession as Session;
use pingora_error::{Error, ErrorSource};

use crate::admission::RequestHead;
use crate::api::error::Blame;
use crate::doors::forward::AnthropicHeaders;

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
        api_key: req.headers.get("x-api-key").map(|v| v.as_bytes()),
        header_count: req.headers.len(),
        header_bytes: req
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len())
            .sum(),
    }
}

/// The client's `anthropic-version` and every `anthropic-beta` it sent (one header or several).
pub fn anthropic_headers(session: &Session) -> AnthropicHeaders {
    let headers = &session.req_header().headers;
    let text = |v: &http::HeaderValue| v.to_str().ok().map(str::to_owned);
    let betas: Vec<&str> = headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    AnthropicHeaders {
        version: headers.get("anthropic-version").and_then(text),
        betas: betas.join(","),
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
