//! Requests that arrive in the Messages API's own dialect (the Messages door) and go to a Claude
//! route: passed through, not translated (`docs/wire.md#anthropic-native-pass-through`).
//!
//! - the body is the client's, rebuilt from its top-level raw slices: every field byte for
//!   byte except `model` (the route's upstream id), `service_tier` (left out: the gateway, not
//!   the client, decides how a route is served) and a body `anthropic_version` (the surface's
//!   own field: absent on the Messages API, `"vertex-2023-10-16"` on Vertex, where `model`
//!   goes too, the model being in the URL);
//! - headers: the route's credential and surface (`transport`, shared with the chat adapter),
//!   plus what the door forwards ([`Target::forward`]): the client's `anthropic-version` on the
//!   Messages API (else the configured one; never as a header on Vertex, where the version is
//!   the body's) and its `anthropic-beta`s (a header on both surfaces);
//! - the answer passes through with its `id` and `model` replaced by the gateway's; its usage is
//!   read exactly as the chat adapter reads it (`response.rs`, `stream.rs`);
//! - a stream is forwarded event by event, complete events only, the `message_start` ids
//!   rewritten. Events before the first content (`message_start`, `ping`, block starts) are
//!   held back, so that an upstream error there ends the attempt before the client saw
//!   anything and the next route can answer (the proxy's first-frame rule); after content an
//!   `error` event is passed through and ends the stream. `message_stop` waits for the
//!   upstream's end of stream, so that the request's usage record is journaled before the
//!   client reads its last event (`billing::journal`);
//! - counting: the body reduced to the fields the count endpoint takes, on the surface's count
//!   endpoint (Vertex: `…/models/count-tokens:rawPredict`, the model in the body);
//!   `{"input_tokens": N}` back.

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::response::UsageIn;
use super::stream::EventIn;
use super::{chat_only, error, header, transport, Call, VERTEX_VERSION};
use crate::api::error::stream_error_frame;
use crate::api::request::{object_fields, write_object};
use crate::api::{Door, GatewayError, RawRequest, Usage};
use crate::catalog::RouteKind;
use crate::providers::common::compact;
use crate::providers::sse::{SseEvent, SseFramer};
use crate::providers::{
    Adapter, Credentials, Plan, ResponseCx, StreamTranslator, Target, TranslateError, Translated,
    UpstreamRequest,
};

/// The top-level fields Anthropic's count endpoint takes that a count request keeps (API
/// reference, "Count tokens in a Message"; anything else — `max_tokens`, `stream`, sampling —
/// is refused there as an extra input). `speed` and the deprecated `output_format` are
/// accepted there too but change no input count, so they are left out like the rest.
pub const COUNT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "mcp_servers",
    "context_management",
    "output_config",
    "cache_control",
];

/// Header names the adapter writes itself: a forwarded header never replaces them.
const OWN_HEADERS: &[&str] = &[
    "content-type",
    "x-api-key",
    "authorization",
    "anthropic-version",
];

/// The most bytes of events held back before the first content: past it they are forwarded
/// (a `message_start` and a few block starts are far smaller).
const HOLD_LIMIT: usize = 64 * 1024;

/// The adapter for Messages API requests to Claude routes (the Messages API and Vertex AI).
pub struct AnthropicNative;

impl Adapter for AnthropicNative {
    fn plan(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<Plan, GatewayError> {
        chat_only(target)?;
        let call = Call::Message { stream: req.stream };
        Ok(Plan::single(request(req, target, creds, call)?))
    }

    fn translate_buffered(
        &self,
        body: &[u8],
        cx: &ResponseCx,
    ) -> Result<Translated, TranslateError> {
        let mut out = Vec::with_capacity(body.len() + 64);
        let usage = with_gateway_ids(body, cx, &mut out)
            .map_err(|e| TranslateError::Json(e.to_string()))?;
        let mut counts = Usage::default();
        let usage = usage
            .map(|raw| serde_json::from_str::<Option<UsageIn>>(raw.get()))
            .transpose()
            .map_err(|e| TranslateError::Shape(format!("usage: {e}")))?
            .flatten();
        if let Some(u) = usage {
            u.apply(&mut counts);
        }
        Ok(Translated {
            body: Bytes::from(out),
            usage: counts,
            upstream_id: None,
            usage_close: None, // as the upstream wrote it
        })
    }

    fn stream_translator(&self, cx: ResponseCx) -> Box<dyn StreamTranslator> {
        Box::new(NativeStream::new(cx))
    }

    fn upstream_error_message(&self, status: u16, body: &[u8]) -> String {
        error::upstream_error_message(status, body)
    }

    fn count_tokens(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<UpstreamRequest, GatewayError> {
        request(req, target, creds, Call::CountTokens)
    }

    fn read_count(&self, body: &[u8]) -> Result<u64, TranslateError> {
        #[derive(Deserialize)]
        struct Count {
            input_tokens: u64,
        }
        // serde would read a struct from an array too.
        if !body.trim_ascii_start().starts_with(b"{") {
            return Err(TranslateError::Shape(
                "count_tokens answer: expected a JSON object".into(),
            ));
        }
        serde_json::from_slice::<Count>(body)
            .map(|c| c.input_tokens)
            .map_err(|e| TranslateError::Shape(format!("count_tokens answer: {e}")))
    }
}

/// The upstream request of `call`: the client's body on the route's surface, its credential and
/// the forwarded headers.
fn request(
    req: &RawRequest<'_>,
    target: &Target<'_>,
    creds: &Credentials,
    call: Call,
) -> Result<UpstreamRequest, GatewayError> {
    let vertex = target.route.kind == RouteKind::VertexAnthropic;
    let version = target
        .forward
        .iter()
        .find(|(n, _)| !vertex && n.as_str() == "anthropic-version")
        .map(|(_, v)| v);
    let mut headers: Vec<(HeaderName, HeaderValue)> =
        vec![header("content-type", "application/json")?];
    let path = transport(target, creds, call, version, &mut headers)?;
    headers.extend(
        target
            .forward
            .iter()
            .filter(|(n, _)| !OWN_HEADERS.contains(&n.as_str()))
            .cloned(),
    );
    Ok(UpstreamRequest {
        path,
        headers,
        body: body(req, target, vertex, call)?,
    })
}

/// The client's body for the route's surface, rebuilt from its raw fields (module doc).
fn body(
    req: &RawRequest<'_>,
    target: &Target<'_>,
    vertex: bool,
    call: Call,
) -> Result<Bytes, GatewayError> {
    let count = call == Call::CountTokens;
    let model = serde_json::to_string(target.upstream_model())
        .map_err(|e| GatewayError::Internal(format!("serialising the model id: {e}").into()))?;
    let version = format!("\"{VERTEX_VERSION}\"");
    let mut fields: Vec<(&str, &str)> = Vec::with_capacity(16);
    if vertex {
        fields.push(("anthropic_version", &version));
    }
    for (name, raw) in req.fields() {
        match name {
            // Vertex takes the model in the URL, except when counting (then in the body).
            "model" if vertex && !count => {}
            "model" => fields.push(("model", &model)),
            "anthropic_version" | "service_tier" => {}
            _ if count && !COUNT_FIELDS.contains(&name) => {}
            _ => fields.push((name, raw.get())),
        }
    }
    let mut out = Vec::with_capacity(req.fields().map(|(k, v)| k.len() + v.get().len() + 4).sum());
    write_object(&mut out, fields);
    Ok(Bytes::from(out))
}

/// Writes `object` with its `id` and `model` replaced by the gateway's (`cx`), every other
/// field byte for byte; returns its raw `usage`, if any.
fn with_gateway_ids<'a>(
    object: &'a [u8],
    cx: &ResponseCx,
    out: &mut Vec<u8>,
) -> Result<Option<&'a RawValue>, serde_json::Error> {
    let fields = object_fields(object)?;
    let id = serde_json::to_string(&*cx.id)?;
    let model = serde_json::to_string(&*cx.model_id)?;
    let mut usage = None;
    let rewritten = fields.iter().map(|(name, raw)| match name.as_ref() {
        "id" => ("id", id.as_str()),
        "model" => ("model", model.as_str()),
        name => {
            if name == "usage" {
                usage = Some(*raw);
            }
            (name, raw.get())
        }
    });
    write_object(out, rewritten);
    Ok(usage)
}

/// Forwards a Messages API stream (module doc).
pub(super) struct NativeStream {
    cx: ResponseCx,
    framer: SseFramer,
    usage: Usage,
    /// Complete events not forwarded yet: everything before the first content.
    held: BytesMut,
    /// Something went to the client: nothing is held back any more.
    committed: bool,
    error: Option<String>,
    /// Bytes of model output forwarded (`StreamTranslator::delivered`).
    delivered: u64,
    /// `message_delta` and `message_stop`, sent when the upstream ends.
    terminal: BytesMut,
}

impl NativeStream {
    pub fn new(cx: ResponseCx) -> Self {
        Self {
            cx,
            framer: SseFramer::default(),
            usage: Usage::default(),
            held: BytesMut::new(),
            committed: false,
            error: None,
            delivered: 0,
            terminal: BytesMut::new(),
        }
    }

    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) {
        if self.error.is_some() {
            return;
        }
        // An event without data carries nothing for the client.
        if ev.data.trim_ascii().is_empty() {
            return;
        }
        // serde_json does not check the UTF-8 of what it skips; the client gets only text.
        let Ok(text) = std::str::from_utf8(&ev.data) else {
            return self.fail("upstream sent an event that is not UTF-8".into(), out);
        };
        let parsed: EventIn = match serde_json::from_str(text) {
            Ok(parsed) => parsed,
            Err(e) => return self.fail(format!("upstream sent malformed JSON: {e}"), out),
        };
        parsed.apply_usage(&mut self.usage);
        // Anthropic names each event after its data's `type`: the name is written from that
        // (a plain word), never copied from the upstream's `event:` line.
        let kind: &str = &parsed.kind;
        if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return;
        }
        match kind {
            "error" => {
                self.error = Some(parsed.error_line());
                // Before any content the attempt ends unseen (the next route may answer);
                // after it the client gets the upstream's error event.
                if self.committed {
                    write_event(out, kind, &ev.data);
                } else {
                    self.held.clear();
                }
            }
            "message_start" => {
                let mut data = Vec::with_capacity(ev.data.len() + 32);
                match rewrite_start(&ev.data, &self.cx, &mut data) {
                    Ok(()) => self.forward(kind, &data, true, out),
                    Err(e) => self.fail(format!("upstream sent malformed JSON: {e}"), out),
                }
            }
            // The end is held until the upstream's body ends (the record is journaled then),
            // `message_delta` too: its usage is where the gateway writes the request's cost.
            "message_delta" | "message_stop" => {
                let mut terminal = std::mem::take(&mut self.terminal);
                self.forward(kind, &ev.data, false, &mut terminal);
                self.terminal = terminal;
            }
            kind => {
                let prelude = matches!(kind, "ping" | "content_block_start");
                self.delivered += parsed.output_bytes();
                self.forward(kind, &ev.data, prelude, out);
            }
        }
    }

    /// Writes one event; `prelude` events wait (held) until something else comes.
    fn forward(&mut self, name: &str, data: &[u8], prelude: bool, out: &mut BytesMut) {
        if !self.committed && prelude && self.held.len() < HOLD_LIMIT {
            write_event(&mut self.held, name, data);
            return;
        }
        self.release(out);
        write_event(out, name, data);
    }

    /// Sends what was held back; from here everything goes straight through.
    fn release(&mut self, out: &mut BytesMut) {
        self.committed = true;
        out.extend_from_slice(&self.held.split());
    }

    /// The stream cannot be read on: an Anthropic `error` event if the client has seen the
    /// stream, else nothing (the attempt ends before its first content).
    fn fail(&mut self, message: String, out: &mut BytesMut) {
        if self.committed {
            out.extend_from_slice(&stream_error_frame(Door::Messages, &message));
        } else {
            self.held.clear();
        }
        self.error = Some(message);
    }
}

/// `message_start`'s data with `message.id` and `message.model` replaced (`with_gateway_ids`).
fn rewrite_start(data: &[u8], cx: &ResponseCx, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    let fields = object_fields(data)?;
    let mut message = Vec::new();
    if let Some((_, raw)) = fields.iter().find(|(k, _)| k == "message") {
        with_gateway_ids(raw.get().as_bytes(), cx, &mut message)?;
    }
    // `write_object` joins `str`s only, so the rewritten message is UTF-8.
    let message = std::str::from_utf8(&message).unwrap_or("{}");
    write_object(
        out,
        fields.iter().map(|(k, raw)| match k.as_ref() {
            "message" => ("message", message),
            k => (k, raw.get()),
        }),
    );
    Ok(())
}

/// Appends one SSE event: its name, its data on one `data:` line (JSON the upstream spread over
/// several lines is compacted: outside strings a newline is only whitespace), a blank line.
fn write_event(out: &mut BytesMut, name: &str, data: &[u8]) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    match std::str::from_utf8(data) {
        Ok(text) if text.contains('\n') => out.extend_from_slice(compact(text).as_bytes()),
        _ => out.extend_from_slice(data),
    }
    out.extend_from_slice(b"\n\n");
}

impl StreamTranslator for NativeStream {
    fn feed(&mut self, chunk: &[u8], out: &mut BytesMut) {
        self.framer.push(chunk);
        while let Some(ev) = self.framer.next_event() {
            self.on_event(&ev, out);
        }
    }

    /// The upstream ended: a last unterminated event counts, what was held back goes out, and
    /// nothing is added (the upstream's `message_stop` was the end, or there is none to give).
    fn finish(&mut self, out: &mut BytesMut) {
        if let Some(ev) = self.framer.finish() {
            self.on_event(&ev, out);
        }
        if self.error.is_none() {
            if !self.held.is_empty() {
                self.release(out);
            }
            out.extend_from_slice(&self.terminal.split());
        }
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn failed(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn delivered(&self) -> u64 {
        self.delivered
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use http::{HeaderName, HeaderValue};
    use serde_json::{json, Value};

    use super::super::test_support::{creds, cx, fixture, model, route, run_stream};
    use super::AnthropicNative;
    use crate::api::{GatewayError, Operation, RawRequest, Usage};
    use crate::catalog::RouteKind;
    use crate::providers::{Adapter, Credentials, Target, TranslateError, UpstreamRequest};

    /// What the Messages door forwards by default: the client's version and two betas.
    fn forward() -> Vec<(HeaderName, HeaderValue)> {
        [
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "interleaved-thinking-2025-05-14"),
            ("anthropic-beta", "context-management-2025-06-27"),
        ]
        .into_iter()
        .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
        .collect()
    }

    enum Op {
        Plan,
        Count,
    }

    fn build(
        body: &str,
        kind: RouteKind,
        region: Option<&str>,
        forward: &[(HeaderName, HeaderValue)],
        upstream_model: Option<&str>,
        op: Op,
    ) -> Result<UpstreamRequest, GatewayError> {
        let raw = RawRequest::parse(body.as_bytes(), Operation::Chat)?;
        let m = model(Some(64000));
        let mut r = route(kind, region);
        r.upstream_model = upstream_model.map(str::to_owned);
        let t = Target {
            model: &m,
            route: &r,
            op: Operation::Chat,
            stream: raw.stream,
            max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
            forward,
        };
        match op {
            Op::Plan => AnthropicNative
                .plan(&raw, &t, &creds())
                .map(crate::providers::test_support::single),
            Op::Count => AnthropicNative.count_tokens(&raw, &t, &creds()),
        }
    }

    fn headers(up: &UpstreamRequest) -> Vec<(String, String)> {
        up.headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    fn text(up: &UpstreamRequest) -> &str {
        std::str::from_utf8(&up.body).unwrap()
    }

    const CLIENT: &str = r#"{"model":"anthropic/claude-test","max_tokens":1024,"messages":[{"role":"user","content":[{"type":"text","text":"hi \u00e9","cache_control":{"type":"ephemeral"}}]}], "system" : "be brief","service_tier":"auto","anthropic_version":"2023-06-01","tools":[{"name":"f","input_schema":{"type":"object"},"defer_loading":true}],"thinking":{"type":"adaptive"},"output_config":{"effort":"high"},"metadata":{"user_id":"u1"},"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]},"temperature":1,"stream":true}"#;

    #[test]
    fn direct_body_is_the_clients_with_the_upstream_model() {
        let up = build(
            CLIENT,
            RouteKind::Anthropic,
            None,
            &forward(),
            None,
            Op::Plan,
        )
        .unwrap();
        assert_eq!(up.path, "/base/v1/messages");
        // Byte for byte: escapes and spacing inside values kept, service_tier and the body
        // version gone, the model replaced in place.
        assert_eq!(
            text(&up),
            r#"{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":[{"type":"text","text":"hi \u00e9","cache_control":{"type":"ephemeral"}}]}],"system":"be brief","tools":[{"name":"f","input_schema":{"type":"object"},"defer_loading":true}],"thinking":{"type":"adaptive"},"output_config":{"effort":"high"},"metadata":{"user_id":"u1"},"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]},"temperature":1,"stream":true}"#
        );
        assert_eq!(
            headers(&up),
            [
                ("content-type", "application/json"),
                ("x-api-key", "ak-test"),
                ("anthropic-version", "2023-06-01"),
                ("anthropic-beta", "interleaved-thinking-2025-05-14"),
                ("anthropic-beta", "context-management-2025-06-27"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn direct_version_is_the_clients_else_the_configured_one() {
        let newer = [(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static("2099-01-01"),
        )];
        let up = build(CLIENT, RouteKind::Anthropic, None, &newer, None, Op::Plan).unwrap();
        let versions: Vec<_> = headers(&up)
            .into_iter()
            .filter(|(k, _)| k == "anthropic-version")
            .collect();
        assert_eq!(
            versions,
            [("anthropic-version".into(), "2099-01-01".into())]
        );
        let up = build(CLIENT, RouteKind::Anthropic, None, &[], None, Op::Plan).unwrap();
        assert!(headers(&up).contains(&("anthropic-version".into(), "2023-06-01".into())));
        assert!(!headers(&up).iter().any(|(k, _)| k == "anthropic-beta"));
    }

    #[test]
    fn forwarded_headers_never_replace_the_credential() {
        let sneaky = [
            (
                HeaderName::from_static("x-api-key"),
                HeaderValue::from_static("client-key"),
            ),
            (
                HeaderName::from_static("authorization"),
                HeaderValue::from_static("Bearer client"),
            ),
            (
                HeaderName::from_static("content-type"),
                HeaderValue::from_static("text/plain"),
            ),
        ];
        for kind in [RouteKind::Anthropic, RouteKind::VertexAnthropic] {
            let up = build(CLIENT, kind, None, &sneaky, None, Op::Plan).unwrap();
            let h = headers(&up);
            assert!(!h.iter().any(|(_, v)| v.contains("client")), "{h:?}");
            assert_eq!(
                h.iter().filter(|(k, _)| k == "content-type").count(),
                1,
                "{h:?}"
            );
        }
    }

    #[test]
    fn vertex_body_has_the_version_and_no_model() {
        let up = build(
            CLIENT,
            RouteKind::VertexAnthropic,
            Some("us-east5"),
            &forward(),
            Some("claude-test@20260101"),
            Op::Plan,
        )
        .unwrap();
        assert_eq!(
            up.path,
            "/base/v1/projects/proj/locations/us-east5/publishers/anthropic/models/claude-test@20260101:streamRawPredict"
        );
        assert_eq!(
            text(&up),
            r#"{"anthropic_version":"vertex-2023-10-16","max_tokens":1024,"messages":[{"role":"user","content":[{"type":"text","text":"hi \u00e9","cache_control":{"type":"ephemeral"}}]}],"system":"be brief","tools":[{"name":"f","input_schema":{"type":"object"},"defer_loading":true}],"thinking":{"type":"adaptive"},"output_config":{"effort":"high"},"metadata":{"user_id":"u1"},"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]},"temperature":1,"stream":true}"#
        );
        // Betas are headers on Vertex too; the version is the body's alone.
        assert_eq!(
            headers(&up),
            [
                ("content-type", "application/json"),
                ("authorization", "Bearer vtok"),
                ("anthropic-beta", "interleaved-thinking-2025-05-14"),
                ("anthropic-beta", "context-management-2025-06-27"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        let buffered =
            r#"{"model":"x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let up = build(
            buffered,
            RouteKind::VertexAnthropic,
            None,
            &[],
            None,
            Op::Plan,
        )
        .unwrap();
        assert_eq!(
            up.path,
            "/base/v1/projects/proj/locations/global/publishers/anthropic/models/claude-test:rawPredict"
        );
        assert_eq!(
            text(&up),
            r#"{"anthropic_version":"vertex-2023-10-16","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#
        );
    }

    #[test]
    fn direct_route_model_override_and_refusals() {
        let body = r#"{"model":"x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let up = build(
            body,
            RouteKind::Anthropic,
            None,
            &[],
            Some("claude-test-20260101"),
            Op::Plan,
        )
        .unwrap();
        assert_eq!(
            text(&up),
            r#"{"model":"claude-test-20260101","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#
        );
        let raw = RawRequest::parse(body.as_bytes(), Operation::Chat).unwrap();
        let m = model(None);
        let r = route(RouteKind::Anthropic, None);
        let t = Target {
            model: &m,
            route: &r,
            op: Operation::Embeddings,
            stream: false,
            max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
            forward: &[],
        };
        assert!(matches!(
            AnthropicNative.plan(&raw, &t, &creds()),
            Err(GatewayError::EmbeddingsUnsupported(_))
        ));
        for kind in [RouteKind::Anthropic, RouteKind::VertexAnthropic] {
            let r = route(kind, None);
            let t = Target {
                route: &r,
                op: Operation::Chat,
                ..t
            };
            for result in [
                AnthropicNative
                    .plan(&raw, &t, &Credentials::default())
                    .map(|_| ()),
                AnthropicNative
                    .count_tokens(&raw, &t, &Credentials::default())
                    .map(|_| ()),
            ] {
                assert!(matches!(result, Err(GatewayError::MissingCredentials(_))));
            }
        }
    }

    #[test]
    fn count_keeps_only_what_the_count_endpoint_takes() {
        let up = build(
            CLIENT,
            RouteKind::Anthropic,
            None,
            &forward(),
            None,
            Op::Count,
        )
        .unwrap();
        assert_eq!(up.path, "/base/v1/messages/count_tokens");
        assert_eq!(
            text(&up),
            r#"{"model":"claude-test","messages":[{"role":"user","content":[{"type":"text","text":"hi \u00e9","cache_control":{"type":"ephemeral"}}]}],"system":"be brief","tools":[{"name":"f","input_schema":{"type":"object"},"defer_loading":true}],"thinking":{"type":"adaptive"},"output_config":{"effort":"high"},"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}"#
        );
        assert!(headers(&up).contains(&(
            "anthropic-beta".into(),
            "context-management-2025-06-27".into()
        )));
        assert!(headers(&up).contains(&("x-api-key".into(), "ak-test".into())));
        let up = build(
            CLIENT,
            RouteKind::VertexAnthropic,
            Some("europe-west1"),
            &forward(),
            Some("claude-test@20260101"),
            Op::Count,
        )
        .unwrap();
        assert_eq!(
            up.path,
            "/base/v1/projects/proj/locations/europe-west1/publishers/anthropic/models/count-tokens:rawPredict"
        );
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        assert_eq!(
            body["model"], "claude-test@20260101",
            "in the body on Vertex"
        );
        assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
        let mut keys: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "anthropic_version",
                "context_management",
                "messages",
                "model",
                "output_config",
                "system",
                "thinking",
                "tools"
            ]
        );
        assert!(!headers(&up).iter().any(|(k, _)| k == "anthropic-version"));
        assert!(headers(&up).contains(&(
            "anthropic-beta".into(),
            "interleaved-thinking-2025-05-14".into()
        )));
    }

    #[test]
    fn reads_the_count() {
        assert_eq!(
            AnthropicNative.read_count(br#"{"input_tokens":2095}"#),
            Ok(2095)
        );
        for bad in [&b"{}"[..], br#"{"input_tokens":-1}"#, b"nope", b"[5]"] {
            assert!(matches!(
                AnthropicNative.read_count(bad),
                Err(TranslateError::Shape(_))
            ));
        }
    }

    // ----- answers ---------------------------------------------------------------------------

    fn buffered(body: &[u8]) -> (Value, Usage, String) {
        let t = AnthropicNative.translate_buffered(body, &cx()).unwrap();
        let text = String::from_utf8(t.body.to_vec()).unwrap();
        (serde_json::from_str(&text).unwrap(), t.usage, text)
    }

    #[test]
    fn buffered_messages_pass_through_with_the_gateways_ids() {
        for (name, want) in [
            (
                "anthropic-message-text.json",
                Usage {
                    input: 12,
                    output: 29,
                    ..Usage::default()
                },
            ),
            (
                "anthropic-message-cache-read-and-write.json",
                Usage {
                    input: 3,
                    cache_read: 1111,
                    cache_write: 418,
                    output: 33,
                    ..Usage::default()
                },
            ),
            (
                "anthropic-message-thinking.json",
                Usage {
                    input: 69,
                    output: 33,
                    ..Usage::default()
                },
            ),
        ] {
            let upstream = fixture(name);
            let (out, usage, _) = buffered(&upstream);
            let mut expected: Value = serde_json::from_slice(&upstream).unwrap();
            assert_ne!(expected["id"], "chatcmpl-gw7");
            expected["id"] = json!("chatcmpl-gw7");
            expected["model"] = json!("anthropic/claude-test");
            assert_eq!(out, expected, "{name}");
            assert_eq!(usage, want, "{name}");
        }
    }

    #[test]
    fn buffered_usage_splits_the_hour_long_writes() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":7,"cache_creation_input_tokens":1000,"cache_read_input_tokens":20,"cache_creation":{"ephemeral_5m_input_tokens":300,"ephemeral_1h_input_tokens":700},"output_tokens":9,"output_tokens_details":{"thinking_tokens":4}}}"#;
        let (_, usage, text) = buffered(body);
        assert_eq!(
            usage,
            Usage {
                input: 7,
                cache_read: 20,
                cache_write: 300,
                cache_write_1h: 700,
                output: 9,
                reasoning: 4,
                ..Usage::default()
            }
        );
        assert_eq!(
            text,
            String::from_utf8(body.to_vec())
                .unwrap()
                .replace(r#""id":"msg_1""#, r#""id":"chatcmpl-gw7""#)
                .replace(
                    r#""model":"claude-x""#,
                    r#""model":"anthropic/claude-test""#
                ),
            "everything else byte for byte"
        );
        let (_, usage, _) = buffered(br#"{"id":"m","content":[]}"#);
        assert_eq!(usage, Usage::default());
        assert!(matches!(
            AnthropicNative.translate_buffered(b"{oops", &cx()),
            Err(TranslateError::Json(_))
        ));
        assert!(matches!(
            AnthropicNative.translate_buffered(br#"{"usage":{"input_tokens":"x"}}"#, &cx()),
            Err(TranslateError::Shape(_))
        ));
    }

    // ----- streams ---------------------------------------------------------------------------

    const STREAMS: &[&str] = &[
        "anthropic-stream-thinking.sse",
        "anthropic-stream-thinking.chunks.jsonl",
        "anthropic-stream-tool-use.chunks.jsonl",
        "anthropic-stream-prompt-cache-server-tool.chunks.jsonl",
        "anthropic-vertex-stream-cache-write.sse",
        "anthropic-vertex-stream-cache-hit.sse",
    ];

    fn stream_bytes(name: &str) -> Vec<u8> {
        crate::providers::test_support::stream_fixture(name, true, "\n\n")
    }

    /// (event name, data as JSON) of every event, parsed independently of the translator.
    fn events(bytes: &[u8]) -> Vec<(String, Value)> {
        let text = std::str::from_utf8(bytes).unwrap();
        let mut out = Vec::new();
        let mut name = String::new();
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(d) = line.strip_prefix("data: ") {
                out.push((std::mem::take(&mut name), serde_json::from_str(d).unwrap()));
            }
        }
        out
    }

    fn run(input: &[u8], cuts: &[usize]) -> Vec<u8> {
        run_stream(&AnthropicNative, cx(), input, cuts)
    }

    /// Usage and delivered bytes as a reader of the events computes them.
    fn expected_counts(evs: &[(String, Value)]) -> (u64, u64, u64, u64, u64) {
        let data = |kind: &'static str| {
            evs.iter()
                .map(|(_, d)| d)
                .filter(move |d| d["type"] == kind)
        };
        let start = &data("message_start").next().unwrap()["message"]["usage"];
        let delta = &data("message_delta").next_back().unwrap()["usage"];
        let pick = |k: &str| delta[k].as_u64().or(start[k].as_u64()).unwrap_or(0);
        let delivered = data("content_block_delta")
            .map(|d| {
                let d = &d["delta"];
                ["text", "thinking", "partial_json"]
                    .iter()
                    .filter_map(|f| d[*f].as_str())
                    .map(|s| s.len() as u64)
                    .sum::<u64>()
            })
            .sum();
        (
            pick("input_tokens"),
            pick("cache_read_input_tokens"),
            pick("cache_creation_input_tokens"),
            pick("output_tokens"),
            delivered,
        )
    }

    #[test]
    fn every_fixture_passes_through_the_same_at_every_split() {
        for name in STREAMS {
            let input = stream_bytes(name);
            let whole = run(&input, &[]);
            for cut in 0..=input.len() {
                assert_eq!(run(&input, &[cut]), whole, "{name} split at {cut}");
            }
            let bytewise: Vec<usize> = (1..input.len()).collect();
            assert_eq!(run(&input, &bytewise), whole, "{name} fed byte by byte");
            let (got, want) = (events(&whole), events(&input));
            assert_eq!(got.len(), want.len(), "{name}: nothing added or lost");
            for (i, ((gn, gd), (wn, wd))) in got.iter().zip(&want).enumerate() {
                assert_eq!(gn, wn, "{name} event {i}");
                if wd["type"] == "message_start" {
                    let mut w = wd.clone();
                    assert_ne!(w["message"]["id"], "chatcmpl-gw7");
                    w["message"]["id"] = json!("chatcmpl-gw7");
                    w["message"]["model"] = json!("anthropic/claude-test");
                    assert_eq!(gd, &w, "{name} message_start");
                } else {
                    assert_eq!(gd, wd, "{name} event {i}");
                }
            }
            // Data lines other than message_start's are the upstream's bytes.
            let lines = |b: &[u8]| -> Vec<String> {
                std::str::from_utf8(b)
                    .unwrap()
                    .lines()
                    .filter(|l| l.starts_with("data: ") && !l.contains("message_start"))
                    .map(str::to_owned)
                    .collect()
            };
            assert_eq!(lines(&whole), lines(&input), "{name}");
            assert!(whole.ends_with(b"\n\n"), "{name}");

            let mut t = AnthropicNative.stream_translator(cx());
            let mut out = BytesMut::new();
            t.feed(&input, &mut out);
            t.finish(&mut out);
            let (input_tokens, read, write, output, delivered) = expected_counts(&want);
            let u = t.usage();
            assert_eq!(
                (
                    u.input,
                    u.cache_read,
                    u.cache_write + u.cache_write_1h,
                    u.output
                ),
                (input_tokens, read, write, output),
                "{name}"
            );
            assert_eq!(t.delivered(), delivered, "{name}");
            assert!(delivered > 0, "{name}");
            assert_eq!(t.failed(), None, "{name}");
        }
    }

    #[test]
    fn known_stream_counts() {
        let mut t = AnthropicNative.stream_translator(cx());
        let mut out = BytesMut::new();
        t.feed(
            &stream_bytes("anthropic-vertex-stream-cache-write.sse"),
            &mut out,
        );
        t.finish(&mut out);
        assert_eq!(
            t.usage(),
            Usage {
                input: 10,
                cache_write: 28804,
                output: 4,
                ..Usage::default()
            },
            "Vertex's message_delta carries output_tokens only"
        );
        assert_eq!(t.delivered(), 3, "\"ack\"");
        let mut t = AnthropicNative.stream_translator(cx());
        t.feed(
            &stream_bytes("anthropic-stream-prompt-cache-server-tool.chunks.jsonl"),
            &mut out,
        );
        let u = t.usage();
        assert_eq!(
            (u.input, u.cache_read, u.cache_write, u.output),
            (6, 6289, 3337, 198)
        );
    }

    const START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_up\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n";
    const BLOCK: &str = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n";
    const DELTA: &str = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
    const ERROR: &str = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";

    #[test]
    fn message_stop_waits_for_the_upstreams_end() {
        let stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let mut t = AnthropicNative.stream_translator(cx());
        let mut out = BytesMut::new();
        t.feed(format!("{START}{BLOCK}{DELTA}{stop}").as_bytes(), &mut out);
        let fed = events(&out);
        assert_eq!(
            fed.last().map(|(n, _)| n.as_str()),
            Some("content_block_delta")
        );
        let mut end = BytesMut::new();
        t.finish(&mut end);
        let names: Vec<_> = events(&end).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["message_stop"], "released by the end of the stream");
    }

    #[test]
    fn nothing_goes_out_before_the_first_content() {
        let mut t = AnthropicNative.stream_translator(cx());
        let mut out = BytesMut::new();
        t.feed(START.as_bytes(), &mut out);
        t.feed(BLOCK.as_bytes(), &mut out);
        assert!(out.is_empty(), "held: {out:?}");
        assert_eq!(t.usage().input, 5, "counted while held");
        t.feed(DELTA.as_bytes(), &mut out);
        let got = events(&out);
        assert_eq!(
            got.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta"
            ]
        );
        assert_eq!(got[0].1["message"]["id"], "chatcmpl-gw7");
        assert_eq!(got[0].1["message"]["model"], "anthropic/claude-test");
        // A stream of no content at all still goes out, at its end, with nothing added.
        let input = format!("{START}event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":3}}}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n");
        let out = run(input.as_bytes(), &[]);
        assert_eq!(events(&out).len(), 3);
        assert!(std::str::from_utf8(&out)
            .unwrap()
            .ends_with("data: {\"type\":\"message_stop\"}\n\n"));
    }

    #[test]
    fn an_error_before_content_ends_the_attempt_unseen() {
        let input = format!("{START}{BLOCK}{ERROR}{DELTA}");
        for cut in 0..=input.len() {
            let mut t = AnthropicNative.stream_translator(cx());
            let mut out = BytesMut::new();
            t.feed(&input.as_bytes()[..cut], &mut out);
            t.feed(&input.as_bytes()[cut..], &mut out);
            t.finish(&mut out);
            assert!(out.is_empty(), "split at {cut}: {out:?}");
            assert_eq!(t.failed(), Some("Overloaded (overloaded_error)"));
            assert_eq!(t.usage().input, 5);
            assert_eq!(t.delivered(), 0);
        }
    }

    #[test]
    fn an_error_after_content_is_passed_through_and_ends_the_stream() {
        let input = format!("{START}{BLOCK}{DELTA}{ERROR}{DELTA}");
        let whole = run(input.as_bytes(), &[]);
        for cut in 0..=input.len() {
            assert_eq!(run(input.as_bytes(), &[cut]), whole, "split at {cut}");
        }
        let got = events(&whole);
        assert_eq!(got.len(), 5, "{got:?}");
        assert_eq!(got[4].0, "error");
        assert_eq!(
            got[4].1,
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})
        );
        let mut t = AnthropicNative.stream_translator(cx());
        let mut out = BytesMut::new();
        t.feed(input.as_bytes(), &mut out);
        assert_eq!(t.failed(), Some("Overloaded (overloaded_error)"));
        assert_eq!(
            t.delivered(),
            2,
            "the delta after the error is not forwarded"
        );
    }

    #[test]
    fn a_cut_short_stream_gets_nothing_added() {
        let full = stream_bytes("anthropic-stream-thinking.sse");
        let text = std::str::from_utf8(&full).unwrap();
        let cut = text.find("event: message_delta").unwrap();
        let out = run(&full[..cut], &[]);
        assert_eq!(events(&out), events(&run(&full, &[]))[..events(&out).len()]);
        assert!(!std::str::from_utf8(&out).unwrap().contains("message_stop"));
        let mut t = AnthropicNative.stream_translator(cx());
        let mut buf = BytesMut::new();
        t.feed(&full[..cut], &mut buf);
        t.finish(&mut buf);
        assert_eq!(t.failed(), None);
    }

    #[test]
    fn events_are_named_by_their_type_on_one_data_line_and_empty_ones_dropped() {
        let start = r#"{"type":"message_start","message":{"id":"up","type":"message","role":"assistant","model":"claude-x","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}"#;
        let delta =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#;
        let input = format!(
            "event: message_start\ndata: {start}\n\n\
             event: content_block_deltata: {delta}\ndata: \n\n\
             event: lies\ndata: {delta}\n\n\
             event: content_block_delta\ndata: \ndata: {delta}\n\n"
        );
        let mut t = AnthropicNative.stream_translator(cx());
        let mut out = BytesMut::new();
        t.feed(input.as_bytes(), &mut out);
        t.finish(&mut out);
        let text = std::str::from_utf8(&out).unwrap();
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 3, "{text}");
        for event in events {
            let (name, data) = event.split_once('\n').unwrap();
            assert!(!data.contains('\n'), "one data line: {text}");
            let name = name.strip_prefix("event: ").unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], name, "{text}");
        }
    }

    #[test]
    fn garbled_events_fail() {
        // After content: an Anthropic error event the client's SDK understands.
        let input = format!("{START}{BLOCK}{DELTA}data: {{nope\n\n{DELTA}");
        let out = run(input.as_bytes(), &[]);
        let got = events(&out);
        assert_eq!(got.len(), 5);
        assert_eq!(got[4].0, "error");
        assert_eq!(got[4].1["type"], "error");
        assert_eq!(got[4].1["error"]["type"], "api_error");
        assert!(got[4].1["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("upstream sent malformed JSON"));
        // Before it: nothing, the attempt failed.
        let mut t = AnthropicNative.stream_translator(cx());
        let mut buf = BytesMut::new();
        t.feed(b"event: message_start\ndata: {nope\n\n", &mut buf);
        t.finish(&mut buf);
        assert!(buf.is_empty());
        assert!(t
            .failed()
            .unwrap()
            .starts_with("upstream sent malformed JSON"));
        // Bytes that are not UTF-8 inside a string serde would only skip.
        let mut bad = format!("{START}{BLOCK}{DELTA}").into_bytes();
        bad.extend_from_slice(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"x\":\"\xff\"}\n\n");
        let out = run(&bad, &[]);
        let text = std::str::from_utf8(&out).expect("the client gets UTF-8");
        assert!(text.contains("not UTF-8"), "{text}");
    }
}
