//! Small response builders shared by every surface: JSON bodies, SSE bodies, and the
//! per-request latency override that `main` applies before the headers go out.
//!
//! Rules: JSON bodies are serialised once into a `Bytes` (no intermediate `Value` on the hot
//! path); SSE responses are `text/event-stream`, chunked, never `Content-Length`.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;

/// Attached to a response when a `[sim:latency=MS]` marker overrides `--latency-ms`.
#[derive(Clone, Copy, Debug)]
pub struct LatencyOverride(pub u64);

pub const JSON_GOOGLE: &str = "application/json; charset=UTF-8";
pub const JSON_PLAIN: &str = "application/json";

/// A response with a body already rendered.
pub fn raw(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response {
    let mut resp = Response::new(Body::from(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// `resp` with its JSON body written without whitespace between tokens, as Google answers with
/// `prettyPrint=false`. Bodies of unknown length (streams, and faults that cut or stall a body)
/// are left as they are.
pub async fn compacted(resp: Response) -> Response {
    let json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    let whole = axum::body::HttpBody::size_hint(resp.body())
        .exact()
        .is_some();
    if !json || !whole {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return internal("unreadable body");
    };
    Response::from_parts(parts, Body::from(compact(&bytes)))
}

/// `json` without the whitespace between its tokens (strings kept as they are).
pub fn compact(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
            continue;
        }
        out.push(b);
    }
    out
}

/// Serialises `value` compactly.
pub fn json<T: Serialize>(status: StatusCode, content_type: &'static str, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(b) => raw(status, content_type, b),
        Err(e) => internal(&e.to_string()),
    }
}

/// Serialises `value` with two-space indentation (Google's error style).
pub fn json_pretty<T: Serialize>(
    status: StatusCode,
    content_type: &'static str,
    value: &T,
) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(b) => raw(status, content_type, b),
        Err(e) => internal(&e.to_string()),
    }
}

/// The simulator's own failure (never a simulated provider error).
pub fn internal(msg: &str) -> Response {
    raw(
        StatusCode::INTERNAL_SERVER_ERROR,
        "text/plain; charset=utf-8",
        format!("tollgate-sim internal error: {msg}"),
    )
}

/// A streaming `text/event-stream` response around `body`.
pub fn sse(body: Body) -> Response {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// A non-SSE streamed body (used by buffered-request faults).
pub fn streamed(status: StatusCode, content_type: &'static str, body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// Adds a header when the value is valid.
pub fn with_header(mut resp: Response, name: &'static str, value: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
    resp
}

/// Records a latency override on the response for `main` to honour.
pub fn with_latency(mut resp: Response, latency: Option<u64>) -> Response {
    if let Some(ms) = latency {
        resp.extensions_mut().insert(LatencyOverride(ms));
    }
    resp
}

/// One SSE `data:` event in compact JSON (OpenAI style), `\n\n`-terminated.
pub fn sse_data<T: Serialize>(value: &T, sep: &str) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    if serde_json::to_writer(&mut buf, value).is_err() {
        buf.extend_from_slice(b"{}");
    }
    buf.extend_from_slice(sep.as_bytes());
    Bytes::from(buf)
}

/// Google's SSE JSON style, byte-for-byte as in `gemini-stream-*.sse`: `": "` after keys,
/// no space after commas.
struct GoogleFormatter;

impl serde_json::ser::Formatter for GoogleFormatter {
    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

/// One Gemini SSE event: `data: {"candidates": […],…}\r\n\r\n`.
pub fn sse_data_google<T: Serialize>(value: &T) -> Bytes {
    let mut buf = Vec::with_capacity(512);
    buf.extend_from_slice(b"data: ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, GoogleFormatter);
    if value.serialize(&mut ser).is_err() {
        buf.extend_from_slice(b"{}");
    }
    buf.extend_from_slice(b"\r\n\r\n");
    Bytes::from(buf)
}

/// One Anthropic-style event: `event: NAME\ndata: JSON\n\n`.
pub fn sse_event<T: Serialize>(name: &str, value: &T) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    if serde_json::to_writer(&mut buf, value).is_err() {
        buf.extend_from_slice(b"{}");
    }
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// Inserts `pad` spaces before the closing brace of an event's JSON, as the first-party
/// Anthropic API does (fixture `anthropic-stream-thinking.sse`: `…"index":0      }`).
pub fn pad_event(ev: Bytes, pad: usize) -> Bytes {
    let Some(body) = ev.strip_suffix(b"}\n\n") else {
        return ev;
    };
    let mut buf = Vec::with_capacity(ev.len() + pad);
    buf.extend_from_slice(body);
    buf.resize(buf.len() + pad, b' ');
    buf.extend_from_slice(b"}\n\n");
    Bytes::from(buf)
}

#[cfg(test)]
mod compact_tests {
    use super::compact;

    #[test]
    fn only_whitespace_between_tokens_goes() {
        let pretty = b"{\n  \"a b\": [ 1,\t2 ],\r\n  \"q\": \"say \\\"hi\\\" , ok \\\\\",\n  \"e\": \"\\\\\"\n}";
        assert_eq!(
            String::from_utf8(compact(pretty)).unwrap(),
            r#"{"a b":[1,2],"q":"say \"hi\" , ok \\","e":"\\"}"#
        );
    }
}
