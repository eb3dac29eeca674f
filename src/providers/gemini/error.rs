//! Google error bodies → one readable line for the client's error envelope.
//!
//! Both surfaces answer `{"error":{"code","message","status","details"}}`
//! (`docs/wire.md#gemini-errors`);
//! Vertex sometimes wraps it in a one-element array. The line keeps Google's `status` (it says
//! more than the HTTP code: `RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`…) and, when a `RetryInfo`
//! detail is present, the delay Google asks for. Anything else falls back to the trimmed body.
//! Fixtures: `tests/fixtures/gemini-error-*.json`, `gemini-stream-error-mid-stream-vertex.txt`.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::Str;
use crate::providers::common::{quote, scrub, upstream_message, QUOTE_LIMIT};

/// How much of a body that is not Google's error shape is quoted back.

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    error: GoogleError<'a>,
}

#[derive(Deserialize)]
struct GoogleError<'a> {
    #[serde(borrow, default)]
    message: Option<Str<'a>>,
    #[serde(borrow, default)]
    status: Option<Str<'a>>,
    #[serde(borrow, default)]
    details: Vec<Detail<'a>>,
}

#[derive(Deserialize)]
struct Detail<'a> {
    #[serde(rename = "@type", borrow, default)]
    kind: Option<Str<'a>>,
    #[serde(rename = "retryDelay", borrow, default)]
    retry_delay: Option<Str<'a>>,
}

/// `upstream answered HTTP 429: <message> (RESOURCE_EXHAUSTED); retry after 34.4s`.
pub(super) fn upstream_error_message(status: u16, body: &[u8]) -> String {
    upstream_message(status, &parse(body).unwrap_or_else(|| quote(body)))
}

/// The line for an `error` object met inside a stream (no HTTP status to report).
pub(super) fn in_stream_message(error: &RawValue) -> String {
    let line = match serde_json::from_str::<GoogleError>(error.get()) {
        Ok(e) => describe(&e),
        Err(_) => error.get().chars().take(QUOTE_LIMIT).collect(),
    };
    scrub(&line)
}

fn parse(body: &[u8]) -> Option<String> {
    // Serde would read a struct from an array positionally: decide by the first byte.
    let envelope = if body.trim_ascii_start().starts_with(b"[") {
        serde_json::from_slice::<[Envelope; 1]>(body)
            .ok()
            .map(|[e]| e)?
    } else {
        serde_json::from_slice::<Envelope>(body).ok()?
    };
    Some(describe(&envelope.error))
}

fn describe(e: &GoogleError) -> String {
    let mut line = e.message.as_deref().unwrap_or("").trim().to_owned();
    if let Some(status) = e.status.as_deref().filter(|s| !s.is_empty()) {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push('(');
        line.push_str(status);
        line.push(')');
    }
    let retry = e.details.iter().find_map(|d| {
        let is_retry = d.kind.as_deref().is_some_and(|k| k.ends_with("RetryInfo"));
        is_retry.then_some(d.retry_delay.as_deref()).flatten()
    });
    if let Some(delay) = retry {
        line.push_str("; retry after ");
        line.push_str(delay);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fixture;
    use super::*;

    #[test]
    fn google_errors_name_status_and_retry_delay() {
        let cases = [
            (
                "gemini-error-429-retryinfo-devapi.json",
                429,
                "upstream answered HTTP 429: You exceeded your current quota, please check your plan. (RESOURCE_EXHAUSTED); retry after 34.4s",
            ),
            (
                "gemini-error-400-penalty-not-enabled.json",
                400,
                "upstream answered HTTP 400: Penalty is not enabled for models/gemini-2.5-flash (INVALID_ARGUMENT)",
            ),
            (
                "gemini-error-400-thinking-level-minimal-unsupported.json",
                400,
                "upstream answered HTTP 400: Thinking level MINIMAL is not supported for this model. Please retry with other thinking level. (INVALID_ARGUMENT)",
            ),
        ];
        for (name, status, want) in cases {
            assert_eq!(
                upstream_error_message(status, &fixture(name)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn every_error_fixture_yields_its_message_and_status() {
        for name in [
            "gemini-error-400-api-key-invalid-devapi.json",
            "gemini-error-400-batch-embed-limit.json",
            "gemini-error-403-permission-denied-vertex.json",
            "gemini-error-404-model-not-found-devapi.json",
            "gemini-error-404-embed-model-not-found.json",
            "gemini-error-429-resource-exhausted.json",
        ] {
            let body = fixture(name);
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let line = upstream_error_message(418, &body);
            let message = v["error"]["message"].as_str().unwrap().trim();
            let status = v["error"]["status"].as_str().unwrap();
            assert_eq!(
                line,
                format!("upstream answered HTTP 418: {} ({status})", scrub(message)),
                "{name}"
            );
            assert!(!line.contains("test-project-id-1234"), "{line}");
        }
    }

    #[test]
    fn arrays_and_foreign_bodies() {
        assert_eq!(
            upstream_error_message(503, br#"[{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}]"#),
            "upstream answered HTTP 503: The model is overloaded. (UNAVAILABLE)"
        );
        assert_eq!(
            upstream_error_message(502, b"  <html>bad gateway</html>\n"),
            "upstream answered HTTP 502: <html>bad gateway</html>"
        );
        assert_eq!(
            upstream_error_message(500, b""),
            "upstream answered HTTP 500"
        );
        let raw: Box<RawValue> = serde_json::from_str(
            r#"{"code":499,"message":"The operation was cancelled.","status":"CANCELLED"}"#,
        )
        .unwrap();
        assert_eq!(
            in_stream_message(&raw),
            "The operation was cancelled. (CANCELLED)"
        );
    }
}
