//! Requests that arrive in the Responses API's own dialect (the Responses door) and go to an
//! `openai` route whose server speaks it (`api: responses` in the catalog: OpenAI, vLLM, a
//! LiteLLM): passed through, not translated — the model of the Messages door's Claude
//! pass-through (`anthropic::native`).
//!
//! - `POST {base}/responses` with the route's credential as for chat (`Authorization: Bearer`,
//!   when the gateway has a key);
//! - the body is the client's, rebuilt from its top-level raw slices: every field byte for byte
//!   except `model` (the route's upstream id), `store` (forced `false`: the gateway keeps the
//!   answers it is asked to keep, the upstream keeps nothing) and `previous_response_id` (left
//!   out: the gateway resolves it itself, the door hands over the whole conversation as
//!   `input`);
//! - the answer passes through with its `id` and `model` replaced by the gateway's (the ids of
//!   its items are the upstream's); usage is read exactly: `input_tokens` less its cached
//!   (`cached_tokens`, read from a cache) and cache-written (`cache_write_tokens`) parts,
//!   `output_tokens` with `reasoning_tokens` as its reasoning part;
//! - a stream is forwarded event by event, complete events only, each named after its data's
//!   `type` on one `data:` line; the `response` object of the lifecycle events
//!   (`response.created`, `…in_progress`, `…completed`, `…incomplete`, `…failed`) gets the same
//!   `id`/`model` rewrite and the upstream's `sequence_number`s are kept. `response.created`,
//!   `response.in_progress` (and `response.queued`) are held back until the first output event
//!   (`response.output_item.added` or a delta), so that an `error` event or a `response.failed`
//!   before it ends the attempt before the client saw anything: the output then begins with an
//!   `error` event and the proxy lets the next route answer. After it, both are passed through
//!   and end the stream (an `error` the upstream does not follow with `response.failed` gets
//!   ours). A stream that ends without a terminal event, or that cannot be read on, fails the
//!   same way, with an `error` event and a `response.failed` numbered after the last event
//!   forwarded ([`StreamTranslator::abort_frame`]).

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{headers, json_string, OpenAiCompat};
use crate::api::error::stream_error_frame;
use crate::api::request::{object_fields, write_object};
use crate::api::usage::{CompletionDetailsIn, OpenAiUsageIn, PromptDetailsIn};
use crate::api::{Door, GatewayError, Operation, RawRequest, Usage};
use crate::providers::common::compact;
use crate::providers::sse::{SseEvent, SseFramer};
use crate::providers::{
    Adapter, Credentials, Plan, ResponseCx, StreamTranslator, Target, TranslateError, Translated,
    UpstreamRequest,
};

/// The most bytes of events held back before the first output: past it they are forwarded.
/// `response.created` and `response.in_progress` each echo the request's settings, tools and
/// instructions included, so an agent's pair is tens of kilobytes.
const HOLD_LIMIT: usize = 1024 * 1024;

/// The adapter for Responses API requests to `openai` routes with `api: responses`.
pub struct OpenAiResponses;

impl Adapter for OpenAiResponses {
    fn plan(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<Plan, GatewayError> {
        if target.op != Operation::Chat {
            return Err(GatewayError::invalid(
                "the Responses API answers model responses only",
            ));
        }
        Ok(Plan::single(UpstreamRequest {
            path: format!("{}/responses", target.route.endpoint.base_path),
            headers: headers(creds)?,
            body: body(req, target),
        }))
    }

    fn translate_buffered(
        &self,
        body: &[u8],
        cx: &ResponseCx,
    ) -> Result<Translated, TranslateError> {
        // serde_json does not check the UTF-8 of what it only skips; the client gets text.
        std::str::from_utf8(body)
            .map_err(|_| TranslateError::Json("the answer is not UTF-8".into()))?;
        let mut out = Vec::with_capacity(body.len() + 64);
        let inner = rewrite_response(body, cx, &mut out)
            .map_err(|e| TranslateError::Json(e.to_string()))?;
        let usage = inner
            .usage
            .map(read_usage)
            .transpose()
            .map_err(|e| TranslateError::Shape(format!("usage: {e}")))?
            .unwrap_or_default();
        Ok(Translated {
            body: Bytes::from(out),
            usage,
            upstream_id: None,
            usage_close: None, // as the upstream wrote it
        })
    }

    fn stream_translator(&self, cx: ResponseCx) -> Box<dyn StreamTranslator> {
        Box::new(NativeStream::new(cx))
    }

    fn upstream_error_message(&self, status: u16, body: &[u8]) -> String {
        OpenAiCompat.upstream_error_message(status, body)
    }
}

/// The client's body for the upstream, rebuilt from its raw fields (module doc).
fn body(req: &RawRequest<'_>, target: &Target<'_>) -> Bytes {
    let model = json_string(target.upstream_model());
    let mut fields: Vec<(&str, &str)> = Vec::with_capacity(24);
    let mut store = false;
    for (name, raw) in req.fields() {
        match name {
            "model" => fields.push(("model", &model)),
            "store" => {
                store = true;
                fields.push(("store", "false"));
            }
            "previous_response_id" => {}
            _ => fields.push((name, raw.get())),
        }
    }
    if !store {
        fields.push(("store", "false"));
    }
    let size = fields.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let mut out = Vec::with_capacity(size);
    write_object(&mut out, fields);
    Bytes::from(out)
}

/// What [`rewrite_response`] read of a `response` object.
struct ResponseFields<'a> {
    /// Its `usage`, unless absent or null.
    usage: Option<&'a RawValue>,
    /// Its `error`, unless absent or null.
    error: Option<&'a RawValue>,
}

/// Writes the `response` object with its `id` and `model` replaced by the gateway's, every
/// other field byte for byte.
fn rewrite_response<'a>(
    object: &'a [u8],
    cx: &ResponseCx,
    out: &mut Vec<u8>,
) -> Result<ResponseFields<'a>, serde_json::Error> {
    let fields = object_fields(object)?;
    let id = serde_json::to_string(&*cx.id)?;
    let model = serde_json::to_string(&*cx.model_id)?;
    let present = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
            .filter(|v| v.get() != "null")
    };
    let read = ResponseFields {
        usage: present("usage"),
        error: present("error"),
    };
    write_object(
        out,
        fields.iter().map(|(name, raw)| match name.as_ref() {
            "id" => ("id", id.as_str()),
            "model" => ("model", model.as_str()),
            name => (name, raw.get()),
        }),
    );
    Ok(read)
}

/// The Responses API's usage object (`ResponseUsage`); absent counts are zero.
#[derive(Deserialize, Default)]
#[serde(default)]
struct UsageIn {
    input_tokens: u64,
    input_tokens_details: Option<InputDetails>,
    output_tokens: u64,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct InputDetails {
    cached_tokens: u64,
    cache_write_tokens: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OutputDetails {
    reasoning_tokens: u64,
}

/// The usage buckets of a Responses usage object, split as the chat usage is
/// (`Usage::from_openai`): its input and output are chat's prompt and completion.
fn read_usage(raw: &RawValue) -> Result<Usage, serde_json::Error> {
    let u: UsageIn = serde_json::from_str(raw.get())?;
    let input = u.input_tokens_details.unwrap_or_default();
    Ok(Usage::from_openai(&OpenAiUsageIn {
        prompt_tokens: u.input_tokens,
        completion_tokens: u.output_tokens,
        prompt_tokens_details: Some(PromptDetailsIn {
            cached_tokens: input.cached_tokens,
            cache_write_tokens: input.cache_write_tokens,
            audio_tokens: 0,
        }),
        completion_tokens_details: u.output_tokens_details.map(|d| CompletionDetailsIn {
            reasoning_tokens: d.reasoning_tokens,
        }),
    }))
}

/// What the stream reads of an event; the rest passes through unread.
#[derive(Deserialize)]
struct EventIn<'a> {
    #[serde(default, rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    sequence_number: Option<u64>,
    #[serde(default, borrow)]
    response: Option<&'a RawValue>,
    #[serde(default, borrow)]
    delta: Option<&'a RawValue>,
    /// An `error` event's message and code: at the top (the SDKs' `ResponseErrorEvent`), or in
    /// an `error` object (as api.openai.com sends it).
    #[serde(default, borrow)]
    message: Option<&'a RawValue>,
    #[serde(default, borrow)]
    code: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// The UTF-8 length of a delta's text (0 for anything but a string).
fn text_len(raw: Option<&RawValue>) -> u64 {
    raw.and_then(|r| serde_json::from_str::<Cow<'_, str>>(r.get()).ok())
        .map_or(0, |text| text.len() as u64)
}

/// `message (code)` of an error object (an `error` event, a response's `error`).
fn error_line(message: Option<&RawValue>, code: Option<&RawValue>) -> Option<String> {
    let text = |raw: Option<&RawValue>| match raw.map(RawValue::get) {
        None | Some("null") => None,
        Some(raw) => Some(serde_json::from_str::<String>(raw).unwrap_or_else(|_| raw.to_owned())),
    };
    match (text(message), text(code)) {
        (Some(m), Some(c)) => Some(format!("{m} ({c})")),
        (Some(m), None) => Some(m),
        (None, Some(c)) => Some(c),
        (None, None) => None,
    }
}

/// [`error_line`] of an error object given raw.
fn object_error_line(raw: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct ErrorIn<'a> {
        #[serde(default, borrow)]
        message: Option<&'a RawValue>,
        #[serde(default, borrow)]
        code: Option<&'a RawValue>,
    }
    let e: ErrorIn = serde_json::from_str(raw.get()).ok()?;
    error_line(e.message, e.code)
}

/// A lifecycle event rewritten: the event's data and its `response` object (`id` and `model`
/// replaced), that object's usage and error.
struct Lifecycle {
    event: Vec<u8>,
    response: Vec<u8>,
    usage: Option<Usage>,
    error: Option<String>,
}

fn lifecycle(data: &str, cx: &ResponseCx) -> Result<Lifecycle, String> {
    let malformed = |e: serde_json::Error| format!("upstream sent malformed JSON: {e}");
    let fields = object_fields(data.as_bytes()).map_err(malformed)?;
    let raw = fields
        .iter()
        .find(|(k, _)| k == "response")
        .map_or("null", |(_, v)| v.get());
    let mut response = Vec::with_capacity(raw.len() + 64);
    let inner = rewrite_response(raw.as_bytes(), cx, &mut response).map_err(malformed)?;
    let usage = inner
        .usage
        .map(read_usage)
        .transpose()
        .map_err(|e| format!("upstream sent a usage of the wrong shape: {e}"))?;
    let error = inner.error.and_then(object_error_line);
    let mut event = Vec::with_capacity(data.len() + 64);
    {
        // `write_object` joins `str`s only, so the rewritten object is UTF-8.
        let object = std::str::from_utf8(&response).unwrap_or("{}");
        write_object(
            &mut event,
            fields.iter().map(|(k, v)| match k.as_ref() {
                "response" => ("response", object),
                k => (k, v.get()),
            }),
        );
    }
    Ok(Lifecycle {
        event,
        response,
        usage,
        error,
    })
}

/// Forwards a Responses API stream (module doc).
struct NativeStream {
    cx: ResponseCx,
    framer: SseFramer,
    usage: Usage,
    /// Complete events not forwarded yet: everything before the first output.
    held: BytesMut,
    /// Something went to the client: nothing is held back any more.
    committed: bool,
    error: Option<String>,
    /// The stream is over (a terminal event, or our failure): later events are dropped.
    ended: bool,
    /// The highest `sequence_number` of the events forwarded or held.
    last_seq: Option<u64>,
    /// The latest `response` object, rewritten: what our `response.failed` reports.
    response: Option<Vec<u8>>,
    /// The terminal event's `response` object, rewritten ([`StreamTranslator::final_answer`]).
    answer: Option<Bytes>,
    /// Bytes of model output forwarded (`StreamTranslator::delivered`).
    delivered: u64,
    /// `response.completed` (or `incomplete`), sent when the upstream ends: the request's usage
    /// record is journaled first (`billing::journal`).
    terminal: BytesMut,
}

impl NativeStream {
    fn new(cx: ResponseCx) -> Self {
        Self {
            cx,
            framer: SseFramer::default(),
            usage: Usage::default(),
            held: BytesMut::new(),
            committed: false,
            error: None,
            ended: false,
            last_seq: None,
            response: None,
            answer: None,
            delivered: 0,
            terminal: BytesMut::new(),
        }
    }

    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) {
        if self.ended {
            return;
        }
        let data = ev.data.trim_ascii();
        // An event without data carries nothing; `[DONE]` is a chat habit some servers keep.
        if data.is_empty() || data == b"[DONE]" {
            return;
        }
        let Ok(text) = std::str::from_utf8(data) else {
            return self.fail("upstream sent an event that is not UTF-8".into(), out);
        };
        let parsed: EventIn = match serde_json::from_str(text) {
            Ok(parsed) => parsed,
            Err(e) => return self.fail(format!("upstream sent malformed JSON: {e}"), out),
        };
        // The event is named after its data's `type` (a plain dotted word), never after the
        // upstream's `event:` line.
        let kind: &str = &parsed.kind;
        if kind.is_empty()
            || !kind
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            return;
        }
        // After an `error`, only the upstream's own `response.failed` follows it to the client.
        if self.error.is_some() && (kind != "response.failed" || !self.committed) {
            return;
        }
        let life = match parsed.response {
            Some(_) => match lifecycle(text, &self.cx) {
                Ok(life) => Some(life),
                Err(message) => return self.fail(message, out),
            },
            None => None,
        };
        if let Some(usage) = life.as_ref().and_then(|l| l.usage) {
            self.usage = usage;
        }
        let seq = parsed.sequence_number;
        match (kind, life) {
            ("error", _) => {
                let nested = parsed.error.and_then(object_error_line);
                let message = nested
                    .or_else(|| error_line(parsed.message, parsed.code))
                    .unwrap_or_else(|| "upstream sent an error event".into());
                // Before any output the attempt ends unseen (the next route may answer); after
                // it the client gets the upstream's event.
                if !self.committed {
                    self.held.clear();
                }
                self.note(seq);
                write_event(out, kind, data);
                self.error = Some(message);
            }
            ("response.failed", life) => {
                let (event, response, error) = match life {
                    Some(l) => (Some(l.event), Some(l.response), l.error),
                    None => (None, None, None),
                };
                let message = error.unwrap_or_else(|| "the upstream response failed".into());
                self.answer = response.map(Bytes::from);
                self.ended = true;
                if self.committed {
                    self.note(seq);
                    write_event(out, kind, event.as_deref().unwrap_or(data));
                    self.error.get_or_insert(message);
                } else {
                    self.held.clear();
                    out.extend_from_slice(&stream_error_frame(Door::Responses, &message));
                    self.error = Some(message);
                }
            }
            ("response.completed" | "response.incomplete", life) => {
                let (event, response) = match life {
                    Some(l) => (l.event, l.response),
                    None => (data.to_vec(), Vec::new()),
                };
                self.answer = (!response.is_empty()).then(|| Bytes::from(response));
                self.ended = true;
                let mut terminal = BytesMut::new();
                self.forward(kind, &event, seq, false, &mut terminal);
                self.terminal = terminal;
            }
            (kind, Some(life)) => {
                let prelude = matches!(
                    kind,
                    "response.created" | "response.in_progress" | "response.queued"
                );
                self.response = Some(life.response);
                self.forward(kind, &life.event, seq, prelude, out);
            }
            (kind, None) => {
                if kind.ends_with(".delta") {
                    self.delivered += text_len(parsed.delta);
                }
                self.forward(kind, data, seq, false, out);
            }
        }
    }

    fn note(&mut self, seq: Option<u64>) {
        if let Some(n) = seq {
            self.last_seq = Some(self.last_seq.map_or(n, |last| last.max(n)));
        }
    }

    /// The `sequence_number` of the next event of ours.
    fn next_seq(&self) -> u64 {
        self.last_seq.map_or(0, |n| n.saturating_add(1))
    }

    /// Writes one event; `prelude` events wait (held) until something else comes.
    fn forward(
        &mut self,
        name: &str,
        data: &[u8],
        seq: Option<u64>,
        prelude: bool,
        out: &mut BytesMut,
    ) {
        self.note(seq);
        if !self.committed && prelude && self.held.len() < HOLD_LIMIT {
            write_event(&mut self.held, name, data);
            return;
        }
        self.committed = true;
        out.extend_from_slice(&self.held.split());
        write_event(out, name, data);
    }

    /// The stream cannot be read on: before any output an `error` event alone (the attempt
    /// fails unseen), after it our `error` and `response.failed`.
    fn fail(&mut self, message: String, out: &mut BytesMut) {
        if self.committed {
            self.write_abort(&message, out);
        } else {
            self.held.clear();
            out.extend_from_slice(&stream_error_frame(Door::Responses, &message));
        }
        self.error = Some(message);
        self.ended = true;
    }

    /// Our `error` event and `response.failed`, numbered after the last event forwarded.
    fn write_abort(&mut self, message: &str, out: &mut BytesMut) {
        #[derive(Serialize)]
        struct ErrorEvent<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            code: &'static str,
            message: &'a str,
            param: Option<()>,
            sequence_number: u64,
        }
        let seq = self.next_seq();
        let event = ErrorEvent {
            kind: "error",
            code: "upstream_error",
            message,
            param: None,
            sequence_number: seq,
        };
        write_event(
            out,
            "error",
            &crate::api::json::to_vec(&event).unwrap_or_default(),
        );
        self.last_seq = Some(seq);
        self.write_failed(message, out);
    }

    /// Our `response.failed`, after an `error` event: the latest `response` object with
    /// `status: failed` and the error.
    fn write_failed(&mut self, message: &str, out: &mut BytesMut) {
        #[derive(Serialize)]
        struct ErrorObject<'a> {
            code: &'static str,
            message: &'a str,
        }
        #[derive(Serialize)]
        struct Minimal<'a> {
            id: &'a str,
            object: &'static str,
            created_at: i64,
            status: &'static str,
            model: &'a str,
            output: [(); 0],
            usage: Option<()>,
        }
        let seq = self.next_seq();
        self.last_seq = Some(seq);
        self.ended = true;
        let error = serde_json::to_string(&ErrorObject {
            code: "server_error",
            message,
        })
        .unwrap_or_default();
        let known = self.response.take().unwrap_or_else(|| {
            serde_json::to_vec(&Minimal {
                id: &self.cx.id,
                object: "response",
                created_at: self.cx.created,
                status: "failed",
                model: &self.cx.model_id,
                output: [],
                usage: None,
            })
            .unwrap_or_default()
        });
        let mut response = Vec::with_capacity(known.len() + error.len() + 32);
        if let Ok(fields) = object_fields(&known) {
            let present = |name: &str| fields.iter().any(|(k, _)| k == name);
            let missing = [("status", "\"failed\""), ("error", error.as_str())]
                .into_iter()
                .filter(|(name, _)| !present(name));
            write_object(
                &mut response,
                fields
                    .iter()
                    .map(|(k, v)| match k.as_ref() {
                        "status" => ("status", "\"failed\""),
                        "error" => ("error", error.as_str()),
                        k => (k, v.get()),
                    })
                    .chain(missing),
            );
        }
        let response = std::str::from_utf8(&response).unwrap_or("{}");
        let seq = seq.to_string();
        let mut event = Vec::with_capacity(response.len() + 64);
        write_object(
            &mut event,
            [
                ("type", "\"response.failed\""),
                ("response", response),
                ("sequence_number", seq.as_str()),
            ],
        );
        write_event(out, "response.failed", &event);
    }
}

/// Appends one SSE event: its name, its data on one `data:` line (JSON the upstream spread over
/// several lines is compacted: outside strings a newline is only whitespace), a blank line.
fn write_event(out: &mut BytesMut, name: &str, data: &[u8]) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    match std::str::from_utf8(data) {
        Ok(text) if text.contains('\n') || text.contains('\r') => {
            out.extend_from_slice(compact(text).as_bytes());
        }
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

    /// The upstream ended: a last unterminated event counts. A stream without its terminal
    /// event failed: an `error` the upstream sent after output gets its `response.failed`, a
    /// stream that simply stopped gets both.
    fn finish(&mut self, out: &mut BytesMut) {
        if let Some(ev) = self.framer.finish() {
            self.on_event(&ev, out);
        }
        if self.ended {
            return out.extend_from_slice(&self.terminal.split());
        }
        match self.error.clone() {
            Some(message) if self.committed => self.write_failed(&message, out),
            // Before any output the `error` event already ended the attempt.
            Some(_) => self.ended = true,
            None => self.fail(
                "upstream ended the stream before the response completed".into(),
                out,
            ),
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

    /// The upstream broke after output: our `error` and `response.failed`, numbered on from
    /// the upstream's (nothing once the stream has ended).
    fn abort_frame(&mut self, message: &str) -> Option<Bytes> {
        let mut out = BytesMut::new();
        if !self.ended {
            self.write_abort(message, &mut out);
            self.error.get_or_insert_with(|| message.to_owned());
        }
        Some(out.freeze())
    }

    /// The terminal event's `response` object (`completed`, `incomplete` or `failed`),
    /// rewritten as the client got it.
    fn final_answer(&self) -> Option<Translated> {
        self.answer.clone().map(|body| Translated {
            body,
            usage: self.usage,
            upstream_id: None,
            usage_close: None, // as the upstream wrote it
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::BytesMut;
    use serde_json::{json, Value};

    use super::*;
    use crate::catalog::{Endpoint, Family, Model, ModelKind, Pricing, Route, RouteApi, RouteKind};
    use crate::providers::sse::starts_with_error;
    use crate::providers::test_support::{feed_in_pieces, fixture, single};
    use crate::providers::Secret;

    fn cx() -> ResponseCx {
        ResponseCx {
            id: Arc::from("resp_gw7"),
            model_id: Arc::from("acme/gpt-5"),
            op: Operation::Chat,
            created: 1_700_000_000,
            exclude_reasoning: false,
        }
    }

    fn model() -> Model {
        Model {
            id: Arc::from("acme/gpt-5"),
            provider: "acme".into(),
            family: Family::OpenAiCompat,
            kind: ModelKind::Chat,
            upstream_model: "gpt-5".into(),
            profile_name: String::new(),
            profile: Arc::default(),
            pricing: Pricing::default(),
            capabilities: Vec::new(),
            aliases: Vec::new(),
            max_output_tokens: None,
            context_window: None,
            routes: Vec::new(),
        }
    }

    fn route(upstream_model: Option<&str>) -> Route {
        Route {
            kind: RouteKind::OpenAi,
            endpoint: Endpoint::parse("https://upstream.test/v1").unwrap(),
            region: None,
            upstream_model: upstream_model.map(str::to_owned),
            api: RouteApi::Responses,
            addr: None,
            priority: 0,
            weight: 1,
            health: Default::default(),
        }
    }

    fn plan(body: &str, key: Option<&str>, op: Operation) -> Result<UpstreamRequest, GatewayError> {
        let (m, r) = (model(), route(Some("gpt-5-2025-08-07")));
        let req = RawRequest::parse_head(body.as_bytes()).unwrap();
        let target = Target {
            model: &m,
            route: &r,
            op,
            stream: req.stream,
            max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
            forward: &[],
        };
        let creds = Credentials {
            openai: key.map(Secret::new),
            ..Credentials::default()
        };
        OpenAiResponses.plan(&req, &target, &creds).map(single)
    }

    #[test]
    fn the_body_passes_through_with_the_routes_model_no_store_and_no_previous_id() {
        // Whitespace inside values is the client's: only the top level is rewritten.
        let body = r#"{"model":"acme/gpt-5","input":[ {"role":"user","content":"héllo \u00e9"} ],"previous_response_id":"resp_gw1","store":true,"stream":true,"include":["reasoning.encrypted_content"],"reasoning":{"effort":"high","summary":"auto"},"tools":[{"type":"function","name":"f","parameters":{}}],"prompt_cache_key":"k"}"#;
        let up = plan(body, Some("sec-dummy-openai"), Operation::Chat).unwrap();
        assert_eq!(up.path, "/v1/responses");
        assert_eq!(
            std::str::from_utf8(&up.body).unwrap(),
            r#"{"model":"gpt-5-2025-08-07","input":[ {"role":"user","content":"héllo \u00e9"} ],"store":false,"stream":true,"include":["reasoning.encrypted_content"],"reasoning":{"effort":"high","summary":"auto"},"tools":[{"type":"function","name":"f","parameters":{}}],"prompt_cache_key":"k"}"#
        );
        let names: Vec<&str> = up.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["content-type", "authorization"]);
        assert_eq!(up.headers[1].1, "Bearer sec-dummy-openai");
        // No `store` at all: `false` is added; no key: no authorization.
        let up = plan(
            r#"{"model":"acme/gpt-5","input":"hi"}"#,
            None,
            Operation::Chat,
        )
        .unwrap();
        assert_eq!(
            std::str::from_utf8(&up.body).unwrap(),
            r#"{"model":"gpt-5-2025-08-07","input":"hi","store":false}"#
        );
        assert_eq!(up.headers.len(), 1);
        assert!(plan(r#"{"model":"m","input":"x"}"#, None, Operation::Embeddings).is_err());
    }

    #[test]
    fn the_routes_model_falls_back_to_the_models() {
        let (m, r) = (model(), route(None));
        let req = RawRequest::parse_head(br#"{"model":"acme/gpt-5","input":"x"}"#).unwrap();
        let target = Target {
            model: &m,
            route: &r,
            op: Operation::Chat,
            stream: false,
            max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
            forward: &[],
        };
        let up = single(
            OpenAiResponses
                .plan(&req, &target, &Credentials::default())
                .unwrap(),
        );
        assert!(up.body.starts_with(br#"{"model":"gpt-5","#));
    }

    // ----- buffered --------------------------------------------------------------------------

    fn buffered(body: &[u8]) -> (Value, Usage, String) {
        let t = OpenAiResponses.translate_buffered(body, &cx()).unwrap();
        let text = String::from_utf8(t.body.to_vec()).unwrap();
        (serde_json::from_str(&text).unwrap(), t.usage, text)
    }

    #[test]
    fn a_buffered_answer_gets_the_gateways_id_and_model_and_its_usage_read() {
        let body = fixture("openai-responses-reasoning-cached.json");
        let (got, usage, text) = buffered(&body);
        let mut want: Value = serde_json::from_slice(&body).unwrap();
        assert_ne!(want["id"], "resp_gw7");
        want["id"] = json!("resp_gw7");
        want["model"] = json!("acme/gpt-5");
        assert_eq!(got, want);
        // Every other value is the upstream's text, pretty-printing and all.
        let original = std::str::from_utf8(&body).unwrap();
        let output = &original[original.find("\"output\": [").unwrap() + 10..];
        let output = &output[..output.find("\n  ],").unwrap() + 4];
        assert!(text.contains(output), "{text}");
        assert!(text.contains(r#""store":false"#));
        assert_eq!(
            usage,
            Usage {
                input: 2113 - 1920,
                cache_read: 1920,
                output: 163,
                reasoning: 128,
                ..Usage::default()
            }
        );
        assert_eq!(usage.prompt_tokens(), 2113);
    }

    #[test]
    fn buffered_usage_buckets_and_refusals() {
        let (_, usage, _) = buffered(
            br#"{"id":"r","model":"m","usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":30,"cache_write_tokens":50},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":4},"total_tokens":109}}"#,
        );
        assert_eq!(
            usage,
            Usage {
                input: 20,
                cache_read: 30,
                cache_write: 50,
                output: 9,
                reasoning: 4,
                ..Usage::default()
            }
        );
        let (v, usage, _) = buffered(br#"{"id":"r","object":"response","usage":null}"#);
        assert_eq!(usage, Usage::default());
        assert_eq!(v["id"], "resp_gw7");
        assert!(v.get("model").is_none(), "nothing is added");
        let err = |body: &[u8]| OpenAiResponses.translate_buffered(body, &cx()).unwrap_err();
        assert!(matches!(err(b"{oops"), TranslateError::Json(_)));
        assert!(matches!(err(b"[1]"), TranslateError::Json(_)));
        assert!(matches!(
            err(b"{\"id\":\"r\",\"x\":\"\xff\"}"),
            TranslateError::Json(_)
        ));
        assert!(matches!(
            err(br#"{"id":"r","usage":{"input_tokens":"many"}}"#),
            TranslateError::Shape(_)
        ));
    }

    #[test]
    fn upstream_errors_read_as_the_chat_adapters() {
        assert_eq!(
            OpenAiResponses.upstream_error_message(
                404,
                br#"{"error":{"message":"Previous response with id 'resp_x' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}"#
            ),
            "upstream answered HTTP 404: Previous response with id 'resp_x' not found."
        );
    }

    // ----- streams ---------------------------------------------------------------------------

    const STREAMS: &[&str] = &[
        "openai-responses-stream-text.sse",
        "openai-responses-stream-tool-call.sse",
    ];

    /// (event name, data as JSON) of every event, parsed independently of the translator.
    fn events(bytes: &[u8]) -> Vec<(String, Value)> {
        let text = std::str::from_utf8(bytes).unwrap();
        assert!(text.is_empty() || text.ends_with("\n\n"), "{text}");
        text.split_terminator("\n\n")
            .map(|event| {
                let (name, data) = event.split_once('\n').unwrap();
                let name = name.strip_prefix("event: ").unwrap().to_owned();
                let data = data.strip_prefix("data: ").unwrap();
                assert!(!data.contains('\n'), "one data line: {event}");
                (name, serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    fn run(input: &[u8], cuts: &[usize]) -> Vec<u8> {
        feed_in_pieces(&mut NativeStream::new(cx()), input, cuts)
    }

    /// The upstream's event with the gateway's id and model in its `response`.
    fn rewritten(mut data: Value) -> Value {
        if data.get("response").is_some() {
            data["response"]["id"] = json!("resp_gw7");
            data["response"]["model"] = json!("acme/gpt-5");
        }
        data
    }

    #[test]
    fn every_stream_passes_through_the_same_at_every_split() {
        for name in STREAMS {
            let input = fixture(name);
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
                assert_eq!(gn, gd["type"].as_str().unwrap(), "{name} event {i}");
                assert_eq!(gd["sequence_number"], i, "{name}: numbers kept");
                assert_eq!(gd, &rewritten(wd.clone()), "{name} event {i}");
            }
            // Events without a `response` are the upstream's bytes.
            let lines = |b: &[u8]| -> Vec<String> {
                std::str::from_utf8(b)
                    .unwrap()
                    .lines()
                    .filter(|l| l.starts_with("data: ") && !l.contains("\"response\":"))
                    .map(str::to_owned)
                    .collect()
            };
            assert_eq!(lines(&whole), lines(&input), "{name}");

            let mut t = NativeStream::new(cx());
            let mut out = BytesMut::new();
            t.feed(&input[..input.len() - 1], &mut out);
            assert_eq!(t.final_answer(), None, "{name}: not before the end");
            t.feed(&input[input.len() - 1..], &mut out);
            t.finish(&mut out);
            assert_eq!(t.failed(), None, "{name}");
            let completed = &want.last().unwrap().1;
            assert_eq!(completed["type"], "response.completed");
            let u = &completed["response"]["usage"];
            let n = |v: &Value| v.as_u64().unwrap();
            let usage = t.usage();
            assert_eq!(usage.prompt_tokens(), n(&u["input_tokens"]), "{name}");
            assert_eq!(
                usage.cache_read,
                n(&u["input_tokens_details"]["cached_tokens"]),
                "{name}"
            );
            assert_eq!(usage.output, n(&u["output_tokens"]), "{name}");
            assert_eq!(
                usage.reasoning,
                n(&u["output_tokens_details"]["reasoning_tokens"]),
                "{name}"
            );
            let delivered: u64 = want
                .iter()
                .filter_map(|(_, d)| d["delta"].as_str())
                .map(|s| s.len() as u64)
                .sum();
            assert!(delivered > 0);
            assert_eq!(t.delivered(), delivered, "{name}");
            let answer: Value = serde_json::from_slice(&t.final_answer().unwrap().body).unwrap();
            assert_eq!(answer, rewritten(completed.clone())["response"], "{name}");
        }
    }

    #[test]
    fn known_stream_counts() {
        let mut t = NativeStream::new(cx());
        let mut out = BytesMut::new();
        t.feed(&fixture("openai-responses-stream-text.sse"), &mut out);
        assert_eq!(
            t.usage(),
            Usage {
                input: 256,
                cache_read: 1280,
                output: 5,
                ..Usage::default()
            }
        );
        assert_eq!(t.delivered(), "Echo: héllo wörld".len() as u64);
    }

    /// The fixture's events, each as its SSE text.
    fn fixture_events(name: &str) -> Vec<String> {
        let text = String::from_utf8(fixture(name)).unwrap();
        text.split_terminator("\n\n")
            .map(|e| format!("{e}\n\n"))
            .collect()
    }

    #[test]
    fn nothing_goes_out_before_the_first_output_event() {
        let evs = fixture_events("openai-responses-stream-text.sse");
        let mut t = NativeStream::new(cx());
        let mut out = BytesMut::new();
        t.feed(evs[0].as_bytes(), &mut out);
        t.feed(evs[1].as_bytes(), &mut out);
        assert!(out.is_empty(), "held: {out:?}");
        t.feed(evs[2].as_bytes(), &mut out);
        let got = events(&out);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added"
            ]
        );
        assert_eq!(got[0].1["response"]["id"], "resp_gw7");
        assert_eq!(got[1].1["response"]["model"], "acme/gpt-5");
        // A delta is output too.
        let mut t = NativeStream::new(cx());
        let mut out = BytesMut::new();
        let delta = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"content_index\":0,\"delta\":\"x\",\"item_id\":\"m\",\"output_index\":0,\"sequence_number\":2}\n\n";
        t.feed(format!("{}{}{delta}", evs[0], evs[1]).as_bytes(), &mut out);
        assert_eq!(events(&out).len(), 3);
    }

    #[test]
    fn an_error_before_output_ends_the_attempt_unseen() {
        let input = fixture("openai-responses-stream-error.sse");
        for cut in 0..=input.len() {
            let mut t = NativeStream::new(cx());
            let mut first = BytesMut::new();
            let mut rest = BytesMut::new();
            t.feed(&input[..cut], &mut first);
            t.feed(&input[cut..], &mut rest);
            t.finish(&mut rest);
            // What the proxy sees: nothing, then (in one step) output that begins with the
            // error, or the error at once.
            let seen = if first.is_empty() { &rest } else { &first };
            assert!(starts_with_error(seen), "split at {cut}: {seen:?}");
            assert!(first.is_empty() || rest.is_empty(), "split at {cut}");
            let text = String::from_utf8([first, rest].concat()).unwrap();
            assert!(!text.contains("response.created"), "split at {cut}: {text}");
            assert_eq!(
                t.failed(),
                Some(
                    "You exceeded your current quota, please check your plan and billing \
                     details. (insufficient_quota)"
                ),
                "split at {cut}"
            );
            assert_eq!(t.delivered(), 0);
        }
        // A `response.failed` alone (no `error` event first) fails the same way.
        let evs = fixture_events("openai-responses-stream-error.sse");
        let failed_only = format!("{}{}", evs[0], evs[3]);
        let mut t = NativeStream::new(cx());
        let out = feed_in_pieces(&mut t, failed_only.as_bytes(), &[]);
        assert!(starts_with_error(&out), "{out:?}");
        assert_eq!(
            t.failed(),
            Some(
                "You exceeded your current quota, please check your plan and billing details. \
                 (insufficient_quota)"
            )
        );
        let answer: Value = serde_json::from_slice(&t.final_answer().unwrap().body).unwrap();
        assert_eq!(answer["status"], "failed");
        assert_eq!(answer["id"], "resp_gw7");
        // A stream that stops before any output fails too, and so does an empty one.
        for input in [evs[0].as_str(), ""] {
            let mut t = NativeStream::new(cx());
            let out = feed_in_pieces(&mut t, input.as_bytes(), &[]);
            assert!(starts_with_error(&out), "{out:?}");
            assert_eq!(
                t.failed(),
                Some("upstream ended the stream before the response completed")
            );
        }
    }

    /// The text fixture up to its first delta, then `tail`.
    fn after_output(tail: &str) -> String {
        let evs = fixture_events("openai-responses-stream-text.sse");
        format!("{}{tail}", evs[..5].concat())
    }

    const ERROR: &str = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"server_error\",\"code\":\"server_error\",\"message\":\"The server had an error.\",\"param\":null},\"sequence_number\":5}\n\n";

    #[test]
    fn the_terminal_event_waits_for_the_upstreams_end() {
        let input = fixture("openai-responses-stream-text.sse");
        let mut t = NativeStream::new(cx());
        let mut out = BytesMut::new();
        t.feed(&input, &mut out);
        let fed: Vec<_> = events(&out).into_iter().map(|(n, _)| n).collect();
        assert!(!fed.iter().any(|n| n == "response.completed"), "{fed:?}");
        let mut end = BytesMut::new();
        t.finish(&mut end);
        let names: Vec<_> = events(&end).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["response.completed"]);
    }

    #[test]
    fn an_error_after_output_is_passed_through_and_ends_the_stream() {
        let failed = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"resp_up\",\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"The server had an error.\"},\"model\":\"gpt-x\",\"output\":[],\"usage\":null},\"sequence_number\":6}\n\n";
        let input = after_output(&format!(
            "{ERROR}{failed}{}",
            fixture_events("openai-responses-stream-text.sse")[5]
        ));
        let whole = run(input.as_bytes(), &[]);
        for cut in 0..=input.len() {
            assert_eq!(run(input.as_bytes(), &[cut]), whole, "split at {cut}");
        }
        let got = events(&whole);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names[4..],
            ["response.output_text.delta", "error", "response.failed"],
            "the delta after the failure is dropped"
        );
        assert_eq!(got[5].1["error"]["message"], "The server had an error.");
        assert_eq!(got[6].1["response"]["id"], "resp_gw7");
        assert_eq!(got[6].1["sequence_number"], 6);
        let mut t = NativeStream::new(cx());
        feed_in_pieces(&mut t, input.as_bytes(), &[]);
        assert_eq!(t.failed(), Some("The server had an error. (server_error)"));
        assert_eq!(t.delivered(), 4, "\"Echo\"");
        assert!(!starts_with_error(&whole));

        // Without the upstream's `response.failed`, ours follows its error.
        let input = after_output(ERROR);
        let got = events(&run(input.as_bytes(), &[]));
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names[4..],
            ["response.output_text.delta", "error", "response.failed"]
        );
        let failed = &got[6].1;
        assert_eq!(failed["sequence_number"], 6);
        assert_eq!(failed["response"]["id"], "resp_gw7");
        assert_eq!(failed["response"]["model"], "acme/gpt-5");
        assert_eq!(failed["response"]["status"], "failed");
        assert_eq!(
            failed["response"]["error"],
            json!({"code": "server_error", "message": "The server had an error. (server_error)"})
        );
        assert_eq!(
            failed["response"]["created_at"], 1788205738,
            "the upstream's latest response object"
        );
    }

    #[test]
    fn a_stream_cut_short_after_output_ends_with_numbered_failure_events() {
        let input = after_output("");
        let got = events(&run(input.as_bytes(), &[]));
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[5..], ["error", "response.failed"]);
        assert_eq!(got[5].1["sequence_number"], 5);
        assert_eq!(got[5].1["code"], "upstream_error");
        assert_eq!(got[6].1["sequence_number"], 6);
        let mut t = NativeStream::new(cx());
        feed_in_pieces(&mut t, input.as_bytes(), &[]);
        assert_eq!(
            t.failed(),
            Some("upstream ended the stream before the response completed")
        );
        assert_eq!(t.final_answer(), None);
    }

    #[test]
    fn the_abort_frame_numbers_on_from_the_upstream() {
        let mut t = NativeStream::new(cx());
        let mut out = BytesMut::new();
        t.feed(after_output("").as_bytes(), &mut out);
        let frame = t.abort_frame("upstream connection broken").unwrap();
        let got = events(&frame);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0].1,
            json!({"type": "error", "code": "upstream_error", "message": "upstream connection broken", "param": null, "sequence_number": 5})
        );
        assert_eq!(got[1].0, "response.failed");
        assert_eq!(got[1].1["sequence_number"], 6);
        assert_eq!(got[1].1["response"]["status"], "failed");
        assert_eq!(got[1].1["response"]["id"], "resp_gw7");
        assert_eq!(t.failed(), Some("upstream connection broken"));
        // Before any `response` object: a minimal one of ours.
        let mut t = NativeStream::new(cx());
        let got = events(&t.abort_frame("gone").unwrap());
        assert_eq!(got[0].1["sequence_number"], 0);
        assert_eq!(
            got[1].1["response"],
            json!({"id": "resp_gw7", "object": "response", "created_at": 1_700_000_000, "status": "failed", "model": "acme/gpt-5", "output": [], "usage": null, "error": {"code": "server_error", "message": "gone"}})
        );
        // Once the response completed there is nothing to add.
        let mut t = NativeStream::new(cx());
        let mut out = BytesMut::new();
        t.feed(&fixture("openai-responses-stream-text.sse"), &mut out);
        assert_eq!(t.abort_frame("late"), Some(Bytes::new()));
        assert_eq!(t.failed(), None);
        assert!(t.final_answer().is_some());
    }

    #[test]
    fn events_are_named_by_their_type_on_one_data_line() {
        let evs = fixture_events("openai-responses-stream-text.sse");
        let delta = r#"{"type":"response.output_text.delta","content_index":0,"delta":"hi","item_id":"m","output_index":0,"sequence_number":2}"#;
        let input = format!(
            "{}event: lies\ndata: {delta}\n\n\
             event: response.output_text.delta\ndata: \ndata: {delta}\n\n\
             data: {{\"type\":\"bad name\",\"sequence_number\":3}}\n\n\
             data: {{\"sequence_number\":3}}\n\n\
             data: [DONE]\n\n\
             event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\ndata: \"delta\":\"a\\nb\",\"sequence_number\":4}}\n\n",
            evs[0]
        );
        let out = run(input.as_bytes(), &[]);
        let got = events(&out);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.delta",
                "error",
                "response.failed"
            ],
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(got[3].1["delta"], "a\nb");
        assert_eq!(
            got[4].1["sequence_number"], 5,
            "after the last one forwarded"
        );
    }

    #[test]
    fn garbled_events_fail() {
        // After output: our error and response.failed.
        let input = after_output("data: {nope\n\n");
        let got = events(&run(input.as_bytes(), &[]));
        assert_eq!(got.len(), 7);
        assert_eq!(got[5].0, "error");
        assert!(got[5].1["message"]
            .as_str()
            .unwrap()
            .starts_with("upstream sent malformed JSON"));
        assert_eq!(got[6].0, "response.failed");
        // Before it: an error the proxy fails over on.
        let out = run(b"event: response.created\ndata: {nope\n\n", &[]);
        assert!(starts_with_error(&out));
        // A usage of the wrong shape in the terminal event.
        let bad_usage = r#"{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":-1}},"sequence_number":5}"#;
        let got = events(&run(
            after_output(&format!("data: {bad_usage}\n\n")).as_bytes(),
            &[],
        ));
        assert_eq!(got[5].0, "error");
        assert!(got[5].1["message"].as_str().unwrap().contains("usage"));
        // Bytes that are not UTF-8 inside a string serde would only skip.
        let mut bad = after_output("").into_bytes();
        bad.extend_from_slice(
            b"data: {\"type\":\"response.output_text.delta\",\"delta\":\"\xff\"}\n\n",
        );
        let out = run(&bad, &[]);
        let text = std::str::from_utf8(&out).expect("the client gets UTF-8");
        assert!(text.contains("not UTF-8"), "{text}");
    }
}
