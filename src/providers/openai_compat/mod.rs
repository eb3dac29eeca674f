//! Family "openai": upstreams that already speak the OpenAI wire format (OpenAI itself, vLLM,
//! Ollama, llama.cpp's server).
//!
//! Requests: only `model` (→ the catalog's upstream name) and credentials change; a streamed
//! request also gets `stream_options.include_usage = true` so the upstream reports usage.
//! Responses pass through field for field, except `id` (→ the gateway's completion id) and
//! `model` (→ the tollgate model id); usage is read on the way. Streams end the gateway's way
//! whatever the upstream did: one `choices: []` usage chunk, then `data: [DONE]`.
//!
//! Routes with `api: responses` serve the Responses door natively instead ([`OpenAiResponses`],
//! `responses.rs`).

mod responses;

use std::borrow::Cow;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::chat_answer::{AnswerRender, ChatAnswer};
use super::chat_stream::{send_usage, ChatFrame, ChatSink, ChatSse, ChatStream};
use super::common::{quote, upstream_message};
use super::sse::SseFramer;
use super::{
    header, Adapter, ChatAdapter, Credentials, Plan, ResponseCx, StreamTranslator, Target,
    TranslateError, Translated, UpstreamRequest,
};
use crate::api::request::{object_fields, write_object};
use crate::api::usage::OpenAiUsageIn;
use crate::api::{GatewayError, Operation, RawRequest, Usage};

pub use responses::OpenAiResponses;

pub struct OpenAiCompat;

impl Adapter for OpenAiCompat {
    fn plan(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<Plan, GatewayError> {
        let suffix = match target.op {
            Operation::Chat => "/chat/completions",
            Operation::Embeddings => "/embeddings",
        };
        let model = json_string(target.upstream_model());
        let stream_options = if target.stream {
            Some(with_include_usage(req.get("stream_options"))?)
        } else {
            None
        };
        let mut body = Vec::with_capacity(
            req.fields()
                .map(|(k, v)| k.len() + v.get().len() + 4)
                .sum::<usize>()
                + 64,
        );
        let fields = req
            .fields()
            .filter(|(k, _)| *k != "stream_options")
            .map(|(k, v)| match k {
                "model" => (k, model.as_str()),
                _ => (k, v.get()),
            });
        let extra = stream_options.as_deref().map(|s| ("stream_options", s));
        write_object(&mut body, fields.chain(extra));

        let request = UpstreamRequest {
            path: format!("{}{suffix}", target.route.endpoint.base_path),
            headers: headers(creds)?,
            body: Bytes::from(body),
        };
        Ok(Plan::single(request))
    }

    fn translate_buffered(
        &self,
        body: &[u8],
        cx: &ResponseCx,
    ) -> Result<Translated, TranslateError> {
        let mut usage = Usage::default();
        let out = rewrite(body, cx, &mut usage)?;
        Ok(Translated {
            body: Bytes::from(out),
            usage,
            upstream_id: None,
            usage_close: None, // as the upstream wrote it
        })
    }

    fn stream_translator(&self, cx: ResponseCx) -> Box<dyn StreamTranslator> {
        Box::new(ChatSse::new(OpenAiStream::new(cx)))
    }

    fn upstream_error_message(&self, status: u16, body: &[u8]) -> String {
        #[derive(Deserialize)]
        struct Envelope<'a> {
            #[serde(borrow)]
            error: ErrorField<'a>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum ErrorField<'a> {
            Object { message: Cow<'a, str> },
            Text(Cow<'a, str>),
        }
        let detail = match serde_json::from_slice::<Envelope>(body) {
            Ok(Envelope {
                error: ErrorField::Object { message } | ErrorField::Text(message),
            }) => message.into_owned(),
            Err(_) => quote(body),
        };
        upstream_message(status, &detail)
    }
}

impl ChatAdapter for OpenAiCompat {
    /// The upstream's completion, rewritten, is chat JSON already: the door reads it.
    fn translate_answer(
        &self,
        body: &[u8],
        cx: &ResponseCx,
        door: &dyn AnswerRender,
    ) -> Result<Translated, TranslateError> {
        let chat = self.translate_buffered(body, cx)?;
        let body = door.render(ChatAnswer::Json(&chat.body), &chat.usage, cx)?;
        Ok(Translated::usage_last(body, chat.usage, chat.upstream_id))
    }

    fn chat_stream(&self, cx: ResponseCx) -> Box<dyn ChatStream> {
        Box::new(OpenAiStream::new(cx))
    }
}

/// A JSON body and the route's key as a Bearer token, when the gateway has one (local servers
/// take none).
fn headers(creds: &Credentials) -> Result<Vec<(HeaderName, HeaderValue)>, GatewayError> {
    let mut headers = vec![header("content-type", "application/json")?];
    if let Some(key) = &creds.openai {
        headers.push(header(
            "authorization",
            &format!("Bearer {}", key.expose()),
        )?);
    }
    Ok(headers)
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The client's `stream_options` with `include_usage` forced on (other options kept).
fn with_include_usage(raw: Option<&RawValue>) -> Result<String, GatewayError> {
    let mut fields = match raw {
        Some(r) if r.get() != "null" => object_fields(r.get().as_bytes())
            .map_err(|_| GatewayError::invalid("stream_options must be an object"))?,
        _ => Vec::new(),
    };
    fields.retain(|(k, _)| k != "include_usage");
    let mut out = Vec::new();
    let yes: &str = "true";
    write_object(
        &mut out,
        fields
            .iter()
            .map(|(k, v)| (k.as_ref(), v.get()))
            .chain([("include_usage", yes)]),
    );
    String::from_utf8(out).map_err(|_| GatewayError::invalid("stream_options must be UTF-8"))
}

/// Copies a response object, replacing `id` and `model` and reading `usage`, `created`.
fn rewrite(json: &[u8], cx: &ResponseCx, usage: &mut Usage) -> Result<Vec<u8>, TranslateError> {
    let fields = object_fields(json).map_err(|e| TranslateError::Json(e.to_string()))?;
    let id = json_string(&cx.id);
    let model = json_string(&cx.model_id);
    for (k, v) in &fields {
        if k == "usage" && v.get() != "null" {
            let u: OpenAiUsageIn = serde_json::from_str(v.get())
                .map_err(|e| TranslateError::Shape(format!("usage: {e}")))?;
            *usage = Usage::from_openai(&u);
        }
    }
    let mut out = Vec::with_capacity(json.len() + 32);
    write_object(
        &mut out,
        fields.iter().map(|(k, v)| match k.as_ref() {
            "id" if cx.op == Operation::Chat => ("id", id.as_str()),
            "model" => ("model", model.as_str()),
            other => (other, v.get()),
        }),
    );
    Ok(out)
}

struct OpenAiStream {
    cx: ResponseCx,
    framer: SseFramer,
    usage: Usage,
    created: i64,
    error: Option<String>,
    /// Bytes of model output passed to the client (`StreamTranslator::delivered`).
    delivered: u64,
}

impl OpenAiStream {
    fn new(cx: ResponseCx) -> Self {
        Self {
            cx,
            framer: SseFramer::default(),
            usage: Usage::default(),
            created: 0,
            error: None,
            delivered: 0,
        }
    }

    fn on_data(&mut self, data: &[u8], out: &mut dyn ChatSink) {
        if self.error.is_some() || data == b"[DONE]" {
            return;
        }
        match classify(data) {
            Ok(Chunk::Error(message)) => self.fail(message, out),
            Ok(Chunk::Data {
                created,
                usage_only,
                content,
            }) => {
                if created != 0 {
                    self.created = created;
                }
                self.delivered += content;
                let mut usage = self.usage;
                match rewrite(data, &self.cx, &mut usage) {
                    Ok(json) => {
                        self.usage = usage;
                        // Usage-only chunks are re-emitted once, in our shape, at the end.
                        if !usage_only {
                            out.frame(ChatFrame::Json(&json), &self.usage);
                        }
                    }
                    Err(e) => self.fail(e.to_string(), out),
                }
            }
            Err(e) => self.fail(e.to_string(), out),
        }
    }

    fn fail(&mut self, message: String, out: &mut dyn ChatSink) {
        out.frame(ChatFrame::Error(&message), &self.usage);
        self.error = Some(message);
    }
}

enum Chunk {
    Error(String),
    /// `content`: bytes of model output the chunk carries (text, reasoning, tool calls), read
    /// off the raw JSON strings (escapes counted as written: close enough for an estimate).
    Data {
        created: i64,
        usage_only: bool,
        content: u64,
    },
}

fn classify(data: &[u8]) -> Result<Chunk, TranslateError> {
    #[derive(Deserialize)]
    struct Peek<'a> {
        #[serde(default)]
        created: i64,
        #[serde(default, borrow)]
        choices: Option<Vec<ChoicePeek<'a>>>,
        #[serde(default, borrow)]
        error: Option<&'a RawValue>,
        #[serde(default, borrow)]
        usage: Option<&'a RawValue>,
    }
    let peek: Peek =
        crate::api::json::from_slice(data).map_err(|e| TranslateError::Json(e.to_string()))?;
    if let Some(err) = peek.error.filter(|e| e.get() != "null") {
        let message = OpenAiCompat
            .upstream_error_message(200, format!("{{\"error\":{}}}", err.get()).as_bytes());
        return Ok(Chunk::Error(message.replacen(
            "upstream answered HTTP 200: ",
            "",
            1,
        )));
    }
    let has_usage = peek.usage.is_some_and(|u| u.get() != "null");
    let usage_only = has_usage && peek.choices.as_ref().is_none_or(Vec::is_empty);
    let content = peek
        .choices
        .iter()
        .flatten()
        .filter_map(|c| c.delta.as_ref())
        .map(DeltaPeek::content_len)
        .sum();
    Ok(Chunk::Data {
        created: peek.created,
        usage_only,
        content,
    })
}

#[derive(Deserialize)]
struct ChoicePeek<'a> {
    #[serde(default, borrow)]
    delta: Option<DeltaPeek<'a>>,
}

#[derive(Deserialize)]
struct DeltaPeek<'a> {
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    reasoning: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallPeek<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallPeek<'a> {
    #[serde(default, borrow)]
    function: Option<FunctionPeek<'a>>,
}

#[derive(Deserialize)]
struct FunctionPeek<'a> {
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

/// A JSON string's raw length less its quotes (0 for null or anything else).
fn string_len(v: Option<&RawValue>) -> usize {
    v.filter(|r| r.get().starts_with('"'))
        .map_or(0, |r| r.get().len().saturating_sub(2))
}

impl DeltaPeek<'_> {
    fn content_len(&self) -> u64 {
        let calls: usize = self
            .tool_calls
            .iter()
            .flatten()
            .filter_map(|c| c.function.as_ref())
            .map(|f| string_len(f.name) + string_len(f.arguments))
            .sum();
        (string_len(self.content) + string_len(self.reasoning) + calls) as u64
    }
}

impl ChatStream for OpenAiStream {
    fn feed(&mut self, chunk: &[u8], out: &mut dyn ChatSink) {
        self.framer.push(chunk);
        while let Some(ev) = self.framer.next_event() {
            self.on_data(&ev.data, out);
        }
    }

    fn finish(&mut self, out: &mut dyn ChatSink) {
        if let Some(ev) = self.framer.finish() {
            self.on_data(&ev.data, out);
        }
        if self.error.is_none() {
            send_usage(out, &self.cx, self.created, &self.usage);
        }
        out.frame(ChatFrame::Done, &self.usage);
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
    use super::*;
    use crate::providers::test_support::{self, fixture, frames};
    use bytes::BytesMut;
    use std::sync::Arc;

    fn cx() -> ResponseCx {
        ResponseCx {
            id: Arc::from("chatcmpl-gw1"),
            model_id: Arc::from("acme/gpt"),
            op: Operation::Chat,
            created: 1,
            exclude_reasoning: false,
        }
    }

    fn run_stream(input: &[u8], cuts: &[usize]) -> Vec<u8> {
        test_support::run_stream(&OpenAiCompat, cx(), input, cuts)
    }

    #[test]
    fn buffered_fixture_rewrites_id_and_model_and_reads_usage() {
        let body = fixture("openai-chat-completion.json");
        let t = OpenAiCompat.translate_buffered(&body, &cx()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&t.body).unwrap();
        let orig: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], "chatcmpl-gw1");
        assert_eq!(v["model"], "acme/gpt");
        assert_eq!(
            v["choices"], orig["choices"],
            "content passes through untouched"
        );
        let u = &orig["usage"];
        assert_eq!(
            t.usage.prompt_tokens(),
            u["prompt_tokens"].as_u64().unwrap()
        );
        assert_eq!(t.usage.output, u["completion_tokens"].as_u64().unwrap());
    }

    #[test]
    fn stream_fixture_ends_with_one_usage_chunk_then_done() {
        let input = fixture("openai-chat-stream-text-usage.sse");
        let out = run_stream(&input, &[]);
        let f = frames(&out);
        assert_eq!(f.last().unwrap(), "[DONE]");
        let usage_chunk = &f[f.len() - 2];
        assert_eq!(usage_chunk["choices"], serde_json::json!([]));
        assert!(usage_chunk["usage"]["total_tokens"].as_u64().unwrap() > 0);
        assert_eq!(
            f.iter()
                .filter(|c| c.get("usage").is_some_and(|u| !u.is_null()))
                .count(),
            1,
            "usage exactly once"
        );
        for c in &f[..f.len() - 1] {
            assert_eq!(c["id"], "chatcmpl-gw1");
            assert_eq!(c["model"], "acme/gpt");
        }
    }

    #[test]
    fn stream_output_is_independent_of_splits() {
        let input = fixture("openai-chat-stream-tool-call-usage.sse");
        let whole = run_stream(&input, &[]);
        for cut in 0..input.len() {
            assert_eq!(run_stream(&input, &[cut]), whole, "split at {cut}");
        }
    }

    #[test]
    fn stream_without_upstream_usage_still_ends_with_usage_chunk() {
        let out = run_stream(b"data: {\"id\":\"x\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n", &[]);
        let f = frames(&out);
        assert_eq!(f.len(), 3);
        assert_eq!(f[1]["choices"], serde_json::json!([]));
        assert_eq!(f[1]["usage"]["total_tokens"], 0);
        assert_eq!(f[1]["created"], 5);
    }

    #[test]
    fn delivered_counts_the_model_output_passed_through() {
        let mut t = OpenAiCompat.stream_translator(cx());
        let mut out = BytesMut::new();
        t.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hello\"}}]}\n\n", &mut out);
        t.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"hmm\",\"content\":null}}]}\n\n", &mut out);
        t.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n", &mut out);
        assert_eq!(
            t.delivered(),
            5 + 3 + 1 + 2,
            "text, reasoning, tool name and arguments"
        );
        assert_eq!(
            t.usage(),
            Usage::default(),
            "nothing reported yet: an estimate is due"
        );
    }

    #[test]
    fn in_band_error_becomes_envelope_frame_then_done() {
        let out = run_stream(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"Token limit reached\",\"code\":400}}\n\n", &[]);
        let f = frames(&out);
        assert_eq!(f.len(), 3);
        assert_eq!(f[1]["error"]["message"], "Token limit reached");
        assert_eq!(f[1]["error"]["type"], "upstream_error");
        assert_eq!(f[2], "[DONE]");
    }

    #[test]
    fn upstream_error_messages() {
        let m = OpenAiCompat.upstream_error_message(
            429,
            br#"{"error":{"message":"Rate limit reached","type":"requests"}}"#,
        );
        assert_eq!(m, "upstream answered HTTP 429: Rate limit reached");
        assert_eq!(
            OpenAiCompat.upstream_error_message(502, b""),
            "upstream answered HTTP 502"
        );
        assert_eq!(
            OpenAiCompat.upstream_error_message(500, b"oops"),
            "upstream answered HTTP 500: oops"
        );
    }
}
