//! Messages API SSE events → OpenAI `chat.completion.chunk` frames.
//!
//! Events are read by their JSON `type` (the `event:` name repeats it;
//! `docs/wire.md#anthropic-streaming`):
//! - `message_start`: usage of the input side (`input_tokens`, cache read/write) and a
//!   provisional `output_tokens`, which later counts replace;
//! - `content_block_start` / `content_block_delta`: `text_delta` → `delta.content`,
//!   `thinking_delta` → `delta.reasoning` (unless the client excluded reasoning; empty text
//!   writes nothing, so a thinking block with `display: omitted` gives no reasoning text), a
//!   `signature_delta` → a chunk of its own whose `delta.reasoning_details` is
//!   `[{type: reasoning.text, signature, index}]` (written even when reasoning is excluded: the
//!   client needs it to send the thinking back), a `redacted_thinking` block start → `[{type:
//!   reasoning.encrypted, data, index}]` — `index` the block's ordinal among the thinking and
//!   redacted blocks, as in the buffered answer; a `tool_use` block → one `tool_calls` entry
//!   (id and name at its start, `input_json_delta` fragments as `arguments`) numbered by a
//!   running counter; the first delta carries `role: "assistant"`. Signatures and redacted
//!   data are not counted as delivered model output (`Delta::content_len`);
//! - `message_delta`: the `stop_reason` and cumulative usage (first-party repeats the input
//!   counts there, Vertex sends only `output_tokens`: whatever is present overwrites);
//! - `message_stop`: the clean end → the finish chunk, one `choices: []` usage chunk and
//!   `data: [DONE]` (written when the upstream body ends);
//! - `error` (e.g. `overloaded_error` inside a 200 stream): one error-envelope frame, then only
//!   `[DONE]`; `ping` and unknown events are ignored. A stream that ends without
//!   `message_stop` (or `stop_reason`) is an error frame, then `[DONE]`.
//!
//! Output never depends on how the upstream bytes were cut (tests split every fixture at every
//! offset).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::in_stream_message;
use super::response::{finish_reason, redacted_detail, BlockIn, UsageIn};
use crate::api::chunk::Delta;
use crate::api::completion::{FunctionCall, ReasoningDetail, ToolCall};
use crate::api::Usage;
use crate::providers::chat_stream::{
    send_delta, send_finish, send_usage, ChatFrame, ChatSink, ChatStream,
};
use crate::providers::common::Str;
use crate::providers::sse::SseFramer;
use crate::providers::ResponseCx;

/// Content blocks per message are few; more is a malformed stream.
const MAX_BLOCKS: usize = 4096;

pub(super) struct AnthropicStream {
    cx: ResponseCx,
    framer: SseFramer,
    usage: Usage,
    started: bool,
    /// Per block index seen: what the block became.
    blocks: Vec<(u64, Slot)>,
    tool_calls: u32,
    /// Reasoning blocks (thinking, redacted) seen: the `index` of their `reasoning_details`.
    reasoning_blocks: u32,
    finish: Option<&'static str>,
    stopped: bool,
    error: Option<String>,
    /// Bytes of model output written to the client (`StreamTranslator::delivered`).
    delivered: u64,
}

/// What a content block of the stream is to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// A `tool_use` block: the OpenAI tool-call index.
    ToolCall(u32),
    /// A `thinking` / `redacted_thinking` block: its ordinal among them.
    Reasoning(u32),
    Other,
}

/// One Messages API stream event, as every reader of the stream parses it (this translator
/// and the pass-through of `native.rs`).
#[derive(Deserialize)]
pub(super) struct EventIn<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow, default)]
    message: Option<MessageStart<'a>>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    content_block: Option<BlockIn<'a>>,
    #[serde(borrow, default)]
    delta: Option<DeltaIn<'a>>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct MessageStart<'a> {
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(borrow, default)]
    stop_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct DeltaIn<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Str<'a>>,
    #[serde(borrow, default)]
    partial_json: Option<Str<'a>>,
    #[serde(borrow, default)]
    signature: Option<Str<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<Str<'a>>,
}

impl EventIn<'_> {
    /// Takes the counts this event carries: `message_start`'s usage (the input side and a
    /// provisional output), then each `message_delta`'s cumulative usage (the Messages API
    /// repeats the input counts there, Vertex sends only `output_tokens`): whatever is present
    /// overwrites, nothing is added up.
    pub fn apply_usage(&self, usage: &mut Usage) {
        let counts = match &*self.kind {
            "message_start" => self.message.as_ref().and_then(|m| m.usage.as_ref()),
            "message_delta" => self.usage.as_ref(),
            _ => None,
        };
        if let Some(u) = counts {
            u.apply(usage);
        }
    }

    /// The readable line of an `error` event's `error` object.
    pub fn error_line(&self) -> String {
        self.error.map_or_else(
            || "upstream reported an error".to_owned(),
            in_stream_message,
        )
    }

    /// Bytes of model output a `content_block_delta` carries: text, thinking text, tool input
    /// JSON (signatures are not output).
    pub fn output_bytes(&self) -> u64 {
        let Some(d) = self
            .delta
            .as_ref()
            .filter(|_| &*self.kind == "content_block_delta")
        else {
            return 0;
        };
        let piece = match d.kind.as_deref() {
            Some("text_delta") => d.text.as_deref(),
            Some("thinking_delta") => d.thinking.as_deref(),
            Some("input_json_delta") => d.partial_json.as_deref(),
            _ => None,
        };
        piece.map_or(0, |p| p.len() as u64)
    }
}

impl AnthropicStream {
    pub fn new(cx: ResponseCx) -> Self {
        Self {
            cx,
            framer: SseFramer::default(),
            usage: Usage::default(),
            started: false,
            blocks: Vec::new(),
            tool_calls: 0,
            reasoning_blocks: 0,
            finish: None,
            stopped: false,
            error: None,
            delivered: 0,
        }
    }

    fn on_event(&mut self, data: &[u8], out: &mut dyn ChatSink) {
        if self.error.is_some() || self.stopped || data.trim_ascii().is_empty() {
            return;
        }
        let ev: EventIn = match crate::api::json::from_slice(data) {
            Ok(ev) => ev,
            Err(e) => return self.fail(format!("upstream sent malformed JSON: {e}"), out),
        };
        ev.apply_usage(&mut self.usage);
        match &*ev.kind {
            "message_start" => {
                if let Some(r) = ev.message.and_then(|m| m.stop_reason) {
                    self.finish = Some(finish_reason(&r));
                }
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (ev.index, ev.content_block) else {
                    return;
                };
                self.on_block_start(index, &block, out);
            }
            "content_block_delta" => {
                let (Some(index), Some(delta)) = (ev.index, ev.delta) else {
                    return;
                };
                self.on_delta(index, &delta, out);
            }
            "message_delta" => {
                if let Some(r) = ev.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
                    self.finish = Some(finish_reason(r));
                }
            }
            "message_stop" => self.stopped = true,
            "error" => self.fail(ev.error_line(), out),
            // `ping`, `content_block_stop` and event types added later carry nothing to say.
            _ => {}
        }
    }

    fn on_block_start(&mut self, index: u64, block: &BlockIn<'_>, out: &mut dyn ChatSink) {
        if self.blocks.len() >= MAX_BLOCKS {
            return self.fail("upstream sent too many content blocks".into(), out);
        }
        match &*block.kind {
            "tool_use" => {
                let k = self.tool_calls;
                self.tool_calls += 1;
                self.blocks.push((index, Slot::ToolCall(k)));
                let delta = Delta {
                    tool_calls: Some([ToolCall {
                        index: Some(k),
                        id: block.id.as_deref().map(Cow::Borrowed),
                        kind: Some("function"),
                        function: FunctionCall {
                            name: block.name.as_deref(),
                            arguments: String::new(),
                        },
                    }]),
                    ..Delta::default()
                };
                self.write_delta(delta, out);
            }
            "redacted_thinking" => {
                let n = self.next_reasoning(index);
                self.write_delta(
                    Delta {
                        reasoning_details: Some([redacted_detail(block, n)]),
                        ..Delta::default()
                    },
                    out,
                );
            }
            "thinking" => {
                let n = self.next_reasoning(index);
                // The start block is normally empty: text and signature come as deltas.
                let thinking = block.thinking.as_deref().filter(|t| !t.is_empty());
                if let (Some(t), false) = (thinking, self.cx.exclude_reasoning) {
                    self.write_delta(
                        Delta {
                            reasoning: Some(t),
                            ..Delta::default()
                        },
                        out,
                    );
                }
                if let Some(sig) = block.signature.as_deref().filter(|s| !s.is_empty()) {
                    self.write_signature(n, sig, out);
                }
            }
            _ => {
                self.blocks.push((index, Slot::Other));
                if let Some(t) = block.text.as_deref().filter(|t| !t.is_empty()) {
                    self.write_delta(
                        Delta {
                            content: Some(t),
                            ..Delta::default()
                        },
                        out,
                    );
                }
            }
        }
    }

    /// Numbers a new reasoning block (thinking or redacted) at stream block `index`.
    fn next_reasoning(&mut self, index: u64) -> u32 {
        let n = self.reasoning_blocks;
        self.reasoning_blocks += 1;
        self.blocks.push((index, Slot::Reasoning(n)));
        n
    }

    /// What stream block `index` was started as.
    fn slot(&self, index: u64) -> Slot {
        self.blocks
            .iter()
            .rev()
            .find(|(i, _)| *i == index)
            .map_or(Slot::Other, |(_, s)| *s)
    }

    /// A thinking block's signature: a chunk of its own, no text.
    fn write_signature(&mut self, n: u32, signature: &str, out: &mut dyn ChatSink) {
        let detail = ReasoningDetail {
            kind: "reasoning.text",
            text: None,
            signature: Some(Cow::Borrowed(signature)),
            data: None,
            index: n,
        };
        self.write_delta(
            Delta {
                reasoning_details: Some([detail]),
                ..Delta::default()
            },
            out,
        );
    }

    fn on_delta(&mut self, index: u64, d: &DeltaIn<'_>, out: &mut dyn ChatSink) {
        let mut delta = Delta::default();
        match d.kind.as_deref() {
            Some("text_delta") => match d.text.as_deref().filter(|t| !t.is_empty()) {
                Some(t) => delta.content = Some(t),
                None => return,
            },
            Some("thinking_delta") if !self.cx.exclude_reasoning => {
                match d.thinking.as_deref().filter(|t| !t.is_empty()) {
                    Some(t) => delta.reasoning = Some(t),
                    None => return,
                }
            }
            Some("signature_delta") => {
                let (Slot::Reasoning(n), Some(sig)) = (
                    self.slot(index),
                    d.signature.as_deref().filter(|s| !s.is_empty()),
                ) else {
                    return;
                };
                return self.write_signature(n, sig, out);
            }
            Some("input_json_delta") => {
                let (Slot::ToolCall(k), Some(json)) = (
                    self.slot(index),
                    d.partial_json.as_deref().filter(|j| !j.is_empty()),
                ) else {
                    return;
                };
                delta.tool_calls = Some([ToolCall {
                    index: Some(k),
                    id: None,
                    kind: None,
                    function: FunctionCall {
                        name: None,
                        arguments: json.to_owned(),
                    },
                }]);
            }
            _ => return,
        }
        self.write_delta(delta, out);
    }

    /// Writes one delta chunk; the first one names the role.
    fn write_delta(&mut self, mut delta: Delta<'_>, out: &mut dyn ChatSink) {
        if !self.started {
            self.started = true;
            delta.role = Some("assistant");
        }
        self.delivered += delta.content_len();
        send_delta(out, &self.cx, 0, delta, None, &self.usage);
    }

    fn fail(&mut self, message: String, out: &mut dyn ChatSink) {
        out.frame(ChatFrame::Error(&message), &self.usage);
        self.error = Some(message);
    }
}

impl ChatStream for AnthropicStream {
    fn feed(&mut self, chunk: &[u8], out: &mut dyn ChatSink) {
        self.framer.push(chunk);
        while let Some(ev) = self.framer.next_event() {
            self.on_event(&ev.data, out);
        }
    }

    fn finish(&mut self, out: &mut dyn ChatSink) {
        if let Some(ev) = self.framer.finish() {
            self.on_event(&ev.data, out);
        }
        if self.error.is_none() {
            match (self.stopped, self.finish) {
                (true, finish) | (false, finish @ Some(_)) => {
                    let reason = finish.unwrap_or("stop");
                    send_finish(out, &self.cx, 0, reason, &self.usage);
                    send_usage(out, &self.cx, self.cx.created, &self.usage);
                }
                (false, None) => {
                    self.fail("upstream stream ended before completion".into(), out);
                }
            }
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
    use super::super::test_support::{cx, frames, run_stream};
    use super::super::Anthropic;
    use crate::providers::test_support::feed_in_pieces;
    use serde_json::{json, Value};

    fn stream_bytes(name: &str) -> Vec<u8> {
        crate::providers::test_support::stream_fixture(name, true, "\n\n")
    }

    /// The Anthropic events of a fixture, parsed independently of the translator.
    fn events(bytes: &[u8]) -> Vec<Value> {
        std::str::from_utf8(bytes)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    fn deltas(evs: &[Value], kind: &str, field: &str) -> String {
        evs.iter()
            .filter(|e| e["type"] == "content_block_delta" && e["delta"]["type"] == kind)
            .filter_map(|e| e["delta"][field].as_str())
            .collect()
    }

    fn joined(frames: &[Value], field: &str) -> String {
        frames
            .iter()
            .filter_map(|f| f["choices"][0]["delta"][field].as_str())
            .collect()
    }

    const STREAMS: &[&str] = &[
        "anthropic-stream-thinking.sse",
        "anthropic-stream-thinking.chunks.jsonl",
        "anthropic-stream-tool-use.chunks.jsonl",
        "anthropic-stream-prompt-cache-server-tool.chunks.jsonl",
        "anthropic-vertex-stream-cache-write.sse",
        "anthropic-vertex-stream-cache-hit.sse",
    ];

    #[test]
    fn every_fixture_translates_the_same_at_every_split() {
        for name in STREAMS {
            let input = stream_bytes(name);
            let whole = run_stream(&Anthropic, cx(), &input, &[]);
            for cut in 0..=input.len() {
                assert_eq!(
                    run_stream(&Anthropic, cx(), &input, &[cut]),
                    whole,
                    "{name} split at {cut}"
                );
            }
            let out = frames(&whole);
            let evs = events(&input);
            assert_eq!(out.last().unwrap(), "[DONE]", "{name}");
            assert_eq!(out[0]["choices"][0]["delta"]["role"], "assistant", "{name}");
            assert!(out.iter().all(|f| f.get("error").is_none()), "{name}");
            assert_eq!(
                joined(&out, "content"),
                deltas(&evs, "text_delta", "text"),
                "{name}"
            );
            assert_eq!(
                joined(&out, "reasoning"),
                deltas(&evs, "thinking_delta", "thinking"),
                "{name}"
            );
            for f in &out[..out.len() - 1] {
                assert_eq!(f["id"], "chatcmpl-gw7");
                assert_eq!(f["model"], "anthropic/claude-test");
                assert_eq!(f["object"], "chat.completion.chunk");
            }
            // Expected usage: input side from message_start, overwritten by what
            // message_delta repeats; output from message_delta.
            let start =
                &evs.iter().find(|e| e["type"] == "message_start").unwrap()["message"]["usage"];
            let delta = &evs.iter().find(|e| e["type"] == "message_delta").unwrap()["usage"];
            let pick = |k: &str| delta[k].as_u64().or(start[k].as_u64()).unwrap_or(0);
            let (input, read, write) = (
                pick("input_tokens"),
                pick("cache_read_input_tokens"),
                pick("cache_creation_input_tokens"),
            );
            let usage = &out[out.len() - 2];
            assert_eq!(usage["choices"], json!([]), "{name}");
            assert_eq!(
                usage["usage"]["prompt_tokens"],
                input + read + write,
                "{name}"
            );
            assert_eq!(
                usage["usage"]["prompt_tokens_details"]["cached_tokens"],
                read
            );
            assert_eq!(
                usage["usage"]["prompt_tokens_details"]["cache_write_tokens"],
                write
            );
            assert_eq!(usage["usage"]["completion_tokens"], pick("output_tokens"));
            let finish = &out[out.len() - 3]["choices"][0];
            let want = match evs.iter().find(|e| e["type"] == "message_delta").unwrap()["delta"]
                ["stop_reason"]
                .as_str()
                .unwrap()
            {
                "tool_use" => "tool_calls",
                _ => "stop",
            };
            assert_eq!(finish["finish_reason"], want, "{name}");
            assert_eq!(finish["delta"], json!({}));
        }
    }

    #[test]
    fn known_fixture_values() {
        let out = frames(&run_stream(
            &Anthropic,
            cx(),
            &stream_bytes("anthropic-vertex-stream-cache-write.sse"),
            &[],
        ));
        let u = &out[out.len() - 2]["usage"];
        assert_eq!(u["prompt_tokens"], 10 + 28804);
        assert_eq!(u["prompt_tokens_details"]["cache_write_tokens"], 28804);
        assert_eq!(
            u["completion_tokens"], 4,
            "message_delta replaces the provisional 1"
        );
        let out = frames(&run_stream(
            &Anthropic,
            cx(),
            &stream_bytes("anthropic-vertex-stream-cache-hit.sse"),
            &[],
        ));
        assert_eq!(
            out[out.len() - 2]["usage"]["prompt_tokens_details"]["cached_tokens"],
            28804
        );
        let out = frames(&run_stream(
            &Anthropic,
            cx(),
            &stream_bytes("anthropic-stream-prompt-cache-server-tool.chunks.jsonl"),
            &[],
        ));
        let u = &out[out.len() - 2]["usage"];
        assert_eq!(
            u["prompt_tokens"],
            6 + 3337 + 6289,
            "message_delta wins: {u}"
        );
        assert_eq!(u["completion_tokens"], 198);
    }

    #[test]
    fn tool_use_becomes_one_indexed_tool_call() {
        let input = stream_bytes("anthropic-stream-tool-use.chunks.jsonl");
        let out = frames(&run_stream(&Anthropic, cx(), &input, &[]));
        let calls: Vec<&Value> = out
            .iter()
            .filter_map(|f| f["choices"][0]["delta"].get("tool_calls"))
            .collect();
        assert_eq!(calls[0][0]["id"], "toolu_01KFbKqPYSuAKujiL6mTfzYA");
        assert_eq!(calls[0][0]["function"]["name"], "json");
        assert!(calls.iter().all(|c| c[0]["index"] == 0));
        let args: String = calls
            .iter()
            .filter_map(|c| c[0]["function"]["arguments"].as_str())
            .collect();
        assert_eq!(
            args,
            deltas(&events(&input), "input_json_delta", "partial_json")
        );
        serde_json::from_str::<Value>(&args).unwrap();
    }

    #[test]
    fn excluded_reasoning_is_left_out() {
        let mut c = cx();
        c.exclude_reasoning = true;
        let out = frames(&run_stream(
            &Anthropic,
            c,
            &stream_bytes("anthropic-stream-thinking.sse"),
            &[],
        ));
        assert_eq!(joined(&out, "reasoning"), "");
        assert!(!joined(&out, "content").is_empty());
        assert_eq!(out[0]["choices"][0]["delta"]["role"], "assistant");
    }

    #[test]
    fn an_empty_thinking_block_writes_no_reasoning() {
        // Adaptive thinking with the text omitted: no thinking_delta, only the signature.
        let input = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCkYIBxgCKkA=\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":30}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let whole = run_stream(&Anthropic, cx(), input, &[]);
        for cut in 0..=input.len() {
            assert_eq!(run_stream(&Anthropic, cx(), input, &[cut]), whole);
        }
        let out = frames(&whole);
        assert!(
            out.iter()
                .all(|f| f["choices"][0]["delta"].get("reasoning").is_none()),
            "{out:?}"
        );
        // The signature alone: what the client sends back to replay the thinking.
        assert_eq!(
            out[0]["choices"][0]["delta"],
            json!({"role": "assistant", "reasoning_details": [
                {"type": "reasoning.text", "signature": "EqQBCkYIBxgCKkA=", "index": 0}]})
        );
        assert_eq!(out[1]["choices"][0]["delta"], json!({"content": "Hi"}));
        assert_eq!(out[out.len() - 2]["usage"]["completion_tokens"], 30);
        assert_eq!(
            out.len(),
            5,
            "signature, content, finish, usage, [DONE]: {out:?}"
        );
    }

    /// A stream with interleaved thinking, redacted thinking and two tool calls.
    const SIGNED_TOOL_STREAM: &[u8] = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Call \\u00e9\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"it.\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c2lnMQ==\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"cmVkYWN0ZWQ=\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01A\",\"name\":\"get_weather\",\"input\":{}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\":\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"Paris\\\"}\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c2lnMg==\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":3}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":4,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01B\",\"name\":\"now\",\"input\":{}}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":4}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":40}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    #[test]
    fn signatures_and_redacted_thinking_become_reasoning_details_at_every_split() {
        for exclude in [false, true] {
            let mut c = cx();
            c.exclude_reasoning = exclude;
            let run = |cuts: &[usize]| {
                let mut t = crate::providers::Adapter::stream_translator(&Anthropic, c.clone());
                let out = feed_in_pieces(&mut *t, SIGNED_TOOL_STREAM, cuts);
                (out, t.delivered())
            };
            let whole = run(&[]);
            for cut in 0..=SIGNED_TOOL_STREAM.len() {
                assert_eq!(run(&[cut]), whole, "split at {cut}");
            }
            let (bytes, delivered) = whole;
            let out = frames(&bytes);
            let details: Vec<&Value> = out
                .iter()
                .filter_map(|f| f["choices"][0]["delta"].get("reasoning_details"))
                .collect();
            assert_eq!(
                details,
                [
                    &json!([{"type": "reasoning.text", "signature": "c2lnMQ==", "index": 0}]),
                    &json!([{"type": "reasoning.encrypted", "data": "cmVkYWN0ZWQ=", "index": 1}]),
                    &json!([{"type": "reasoning.text", "signature": "c2lnMg==", "index": 2}]),
                ],
                "exclude: {exclude}"
            );
            let reasoning = joined(&out, "reasoning");
            assert_eq!(reasoning, if exclude { "" } else { "Call \u{e9}it." });
            let calls: Vec<&Value> = out
                .iter()
                .filter_map(|f| f["choices"][0]["delta"].get("tool_calls"))
                .collect();
            assert_eq!(calls.len(), 4, "{calls:?}");
            assert_eq!(calls[0][0]["id"], "toolu_01A");
            assert_eq!(
                calls[3][0],
                json!({"index": 1, "id": "toolu_01B", "type": "function", "function": {"name": "now", "arguments": ""}})
            );
            assert_eq!(out[0]["choices"][0]["delta"]["role"], "assistant");
            assert_eq!(
                out[out.len() - 3]["choices"][0]["finish_reason"],
                "tool_calls"
            );
            // Delivered output: the thinking text as sent, tool names and arguments — no
            // signature or redacted data.
            let args = "{\"city\":\"Paris\"}".len();
            let names = "get_weather".len() + "now".len();
            assert_eq!(delivered, (reasoning.len() + args + names) as u64);
        }
    }

    #[test]
    fn the_fixture_signature_arrives_once_with_its_block() {
        let input = stream_bytes("anthropic-stream-thinking.sse");
        let out = frames(&run_stream(&Anthropic, cx(), &input, &[]));
        let details: Vec<&Value> = out
            .iter()
            .filter_map(|f| f["choices"][0]["delta"].get("reasoning_details"))
            .collect();
        let signature = events(&input)
            .into_iter()
            .find(|e| e["delta"]["type"] == "signature_delta")
            .unwrap()["delta"]["signature"]
            .clone();
        assert_eq!(
            details,
            [&json!([{"type": "reasoning.text", "signature": signature, "index": 0}])]
        );
    }

    #[test]
    fn error_event_is_an_error_frame_then_done() {
        let input = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ignored\"}}\n\n";
        let whole = run_stream(&Anthropic, cx(), input, &[]);
        for cut in 0..=input.len() {
            assert_eq!(run_stream(&Anthropic, cx(), input, &[cut]), whole);
        }
        let out = frames(&whole);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(out[0]["choices"][0]["delta"]["content"], "Hi");
        assert_eq!(
            out[1],
            json!({"error": {"message": "Overloaded (overloaded_error)", "type": "upstream_error", "code": "upstream_error"}})
        );
        assert_eq!(out[2], "[DONE]");
        let mut t = crate::providers::Adapter::stream_translator(&Anthropic, cx());
        let mut buf = bytes::BytesMut::new();
        t.feed(input, &mut buf);
        assert_eq!(t.failed(), Some("Overloaded (overloaded_error)"));
        assert_eq!(t.usage().input, 5);
    }

    #[test]
    fn truncated_or_garbled_streams_fail() {
        let full = stream_bytes("anthropic-stream-thinking.sse");
        let text = std::str::from_utf8(&full).unwrap();
        let cut = text.find("event: message_delta").unwrap();
        let out = frames(&run_stream(&Anthropic, cx(), &full[..cut], &[]));
        assert_eq!(
            out[out.len() - 2]["error"]["message"],
            "upstream stream ended before completion"
        );
        let out = frames(&run_stream(&Anthropic, cx(), b"data: {nope\n\n", &[]));
        assert!(out[0]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("upstream sent malformed JSON"));
        assert_eq!(out.len(), 2);
    }
}
