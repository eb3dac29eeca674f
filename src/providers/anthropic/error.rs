//! Anthropic error bodies → one readable line for the client's error envelope.
//!
//! Anthropic answers `{"type":"error","error":{"type","message"},"request_id"}`
//! (`docs/wire.md#anthropic-errors`), also inside a 200 stream as an `error` event; on Vertex,
//! quota and auth failures come in Google's shape `{"error":{"code","message","status"}}`
//! instead — both are read. The line keeps the error type (`overloaded_error`,
//! `rate_limit_error` …) or Google's status and the request id; anything else falls back to the
//! trimmed body.
//! Fixtures: `tests/fixtures/anthropic-error-*.json`.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::providers::common::{quote, scrub, upstream_message, Str, QUOTE_LIMIT};

/// How much of a body that is in neither shape is quoted back.

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    error: ErrorIn<'a>,
    #[serde(borrow, default)]
    request_id: Option<Str<'a>>,
}

/// Anthropic's `error` (`type`, `message`) or Google's (`message`, `status`).
#[derive(Deserialize)]
struct ErrorIn<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    message: Option<Str<'a>>,
    #[serde(borrow, default)]
    status: Option<Str<'a>>,
}

/// `upstream answered HTTP 529: Overloaded (overloaded_error; request req_…)`.
pub(super) fn upstream_error_message(status: u16, body: &[u8]) -> String {
    upstream_message(status, &parse(body).unwrap_or_else(|| quote(body)))
}

/// The line for the `error` object of an in-stream `error` event.
pub(super) fn in_stream_message(error: &RawValue) -> String {
    let line = match serde_json::from_str::<ErrorIn>(error.get()) {
        Ok(e) => describe(&e, None),
        Err(_) => error.get().chars().take(QUOTE_LIMIT).collect(),
    };
    scrub(&line)
}

fn parse(body: &[u8]) -> Option<String> {
    // Vertex sometimes wraps Google's error in a one-element array.
    let envelope = if body.trim_ascii_start().starts_with(b"[") {
        serde_json::from_slice::<[Envelope; 1]>(body)
            .ok()
            .map(|[e]| e)?
    } else {
        serde_json::from_slice::<Envelope>(body).ok()?
    };
    Some(describe(&envelope.error, envelope.request_id.as_deref()))
}

fn describe(e: &ErrorIn, request_id: Option<&str>) -> String {
    let mut line = e.message.as_deref().unwrap_or("").trim().to_owned();
    let mut notes: Vec<String> = Vec::new();
    if let Some(kind) = e.kind.as_deref().or(e.status.as_deref()) {
        if !kind.is_empty() {
            notes.push(kind.to_owned());
        }
    }
    if let Some(id) = request_id.filter(|id| !id.is_empty()) {
        notes.push(format!("request {id}"));
    }
    if !notes.is_empty() {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push('(');
        line.push_str(&notes.join("; "));
        line.push(')');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fixture;
    use super::*;

    #[test]
    fn anthropic_and_google_shapes() {
        assert_eq!(
            upstream_error_message(404, &fixture("anthropic-error-404-not-found.json")),
            "upstream answered HTTP 404: model: claude-does-not-exist (not_found_error; request req_011CVEA3SF7rnb3DuBZytqQa)"
        );
        let m = upstream_error_message(400, &fixture("anthropic-error-400-invalid-effort.json"));
        assert!(
            m.starts_with(
                "upstream answered HTTP 400: This model does not support effort level 'xhigh'."
            ),
            "{m}"
        );
        assert!(
            m.ends_with("(invalid_request_error; request req_011Ca7jT9AHpgXgdv8igm4z9)"),
            "{m}"
        );
        let m = upstream_error_message(400, &fixture("anthropic-error-400-invalid-request.json"));
        assert!(
            m.contains("unexpected `tool_use_id`") && m.contains("invalid_request_error"),
            "{m}"
        );
        assert_eq!(
            upstream_error_message(
                529,
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            "upstream answered HTTP 529: Overloaded (overloaded_error)"
        );
        assert_eq!(
            upstream_error_message(429, br#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED"}}"#),
            "upstream answered HTTP 429: Quota exceeded (RESOURCE_EXHAUSTED)"
        );
        assert_eq!(
            upstream_error_message(429, br#"[{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED"}}]"#),
            "upstream answered HTTP 429: Quota exceeded (RESOURCE_EXHAUSTED)"
        );
        assert_eq!(
            upstream_error_message(502, b""),
            "upstream answered HTTP 502"
        );
        assert_eq!(
            upstream_error_message(500, b" oops \n"),
            "upstream answered HTTP 500: oops"
        );
    }
}
