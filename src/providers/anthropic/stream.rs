//! Messages API SSE events → OpenAI `chat.completion.chunk` frames.
//!
//! Events are read by their JSON `type` (the `event:` name repeats it; anthropic.md §4):
//! - `message_start`: usage of the input side (`input_tokens`, cache read/write) and a
//!   provisional `output_tokens`, which later counts replace;
//! - `content_block_start` / `content_block_delta`: `text_delta` → `delta.content`,
//!   `thinking_delta` → `delta.reasoning` (unless the client excluded reasoning),
//!   `signature_delta` ignored, a `tool_use` block → one `tool_calls` entry (id and name at its
//!   start, `input_json_delta` fragments as `arguments`) numbered by a running counter;
//!   the first delta carries `role: "assistant"`;
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

use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::error::in_stream_message;
use super::response::{finish_reason, BlockIn, FunctionOut, ToolCallOut, UsageIn};
use crate::api::Usage;
use crate::providers::common::Str;
use crate::providers::sse::{self, SseFramer};
use crate::providers::{ResponseCx, StreamTranslator};

/// Content blocks per message are few; more is a malformed stream.
const MAX_BLOCKS: usize = 4096;

pub(super) struct AnthropicStream {
    cx: ResponseCx,
    framer: SseFramer,
    usage: Usage,
    started: bool,
    /// Per block index seen: the OpenAI tool-call index of a `tool_use` block.
    blocks: Vec<(u64, Option<u32>)>,
    tool_calls: u32,
    finish: Option<&'static str>,
    stopped: bool,
    error: Option<String>,
}

#[derive(Deserialize)]
struct EventIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
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
    stop_reason: Option<Str<'a>>,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: [ChunkChoice<'a>; 1],
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallOut<'a>; 1]>,
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
            finish: None,
            stopped: false,
            error: None,
        }
    }

    fn on_event(&mut self, data: &[u8], out: &mut BytesMut) {
        if self.error.is_some() || self.stopped || data.trim_ascii().is_empty() {
            return;
        }
        let ev: EventIn = match serde_json::from_slice(data) {
            Ok(ev) => ev,
            Err(e) => return self.fail(format!("upstream sent malformed JSON: {e}"), out),
        };
        match &*ev.kind {
            "message_start" => {
                if let Some(m) = ev.message {
                    if let Some(u) = m.usage {
                        u.apply(&mut self.usage);
                    }
                    if let Some(r) = m.stop_reason.as_deref() {
                        self.finish = Some(finish_reason(r));
                    }
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
                if let Some(u) = ev.usage {
                    u.apply(&mut self.usage);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let message = ev.error.map_or_else(
                    || "upstream reported an error".to_owned(),
                    in_stream_message,
                );
                self.fail(message, out);
            }
            // `ping`, `content_block_stop` and event types added later carry nothing to say.
            _ => {}
        }
    }

    fn on_block_start(&mut self, index: u64, block: &BlockIn<'_>, out: &mut BytesMut) {
        if self.blocks.len() >= MAX_BLOCKS {
            return self.fail("upstream sent too many content blocks".into(), out);
        }
        match &*block.kind {
            "tool_use" => {
                let k = self.tool_calls;
                self.tool_calls += 1;
                self.blocks.push((index, Some(k)));
                let delta = Delta {
                    tool_calls: Some([ToolCallOut {
                        index: Some(k),
                        id: block.id.as_deref(),
                        kind: Some("function"),
                        function: FunctionOut {
                            name: block.name.as_deref(),
                            arguments: String::new(),
                        },
                    }]),
                    ..Delta::default()
                };
                self.write_delta(delta, out);
            }
            _ => {
                self.blocks.push((index, None));
                // A start block may already hold text (it is normally empty).
                let text = block.text.as_deref().filter(|t| !t.is_empty());
                let thinking = block.thinking.as_deref().filter(|t| !t.is_empty());
                if let Some(t) = text {
                    self.write_delta(
                        Delta {
                            content: Some(t),
                            ..Delta::default()
                        },
                        out,
                    );
                } else if let (Some(t), false) = (thinking, self.cx.exclude_reasoning) {
                    self.write_delta(
                        Delta {
                            reasoning: Some(t),
                            ..Delta::default()
                        },
                        out,
                    );
                }
            }
        }
    }

    fn on_delta(&mut self, index: u64, d: &DeltaIn<'_>, out: &mut BytesMut) {
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
            Some("input_json_delta") => {
                let call = self
                    .blocks
                    .iter()
                    .rev()
                    .find(|(i, _)| *i == index)
                    .and_then(|(_, k)| *k);
                let (Some(k), Some(json)) =
                    (call, d.partial_json.as_deref().filter(|j| !j.is_empty()))
                else {
                    return;
                };
                delta.tool_calls = Some([ToolCallOut {
                    index: Some(k),
                    id: None,
                    kind: None,
                    function: FunctionOut {
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
    fn write_delta(&mut self, mut delta: Delta<'_>, out: &mut BytesMut) {
        if !self.started {
            self.started = true;
            delta.role = Some("assistant");
        }
        self.write_chunk(delta, None, out);
    }

    fn write_chunk(&self, delta: Delta<'_>, finish: Option<&'static str>, out: &mut BytesMut) {
        sse::write_json(
            out,
            &Chunk {
                id: &self.cx.id,
                object: "chat.completion.chunk",
                created: self.cx.created,
                model: &self.cx.model_id,
                choices: [ChunkChoice {
                    index: 0,
                    delta,
                    finish_reason: finish,
                }],
            },
        );
    }

    fn fail(&mut self, message: String, out: &mut BytesMut) {
        sse::write_error(out, &message);
        self.error = Some(message);
    }
}

impl StreamTranslator for AnthropicStream {
    fn feed(&mut self, chunk: &[u8], out: &mut BytesMut) {
        self.framer.push(chunk);
        while let Some(ev) = self.framer.next_event() {
            self.on_event(&ev.data, out);
        }
    }

    fn finish(&mut self, out: &mut BytesMut) {
        if let Some(ev) = self.framer.finish() {
            self.on_event(&ev.data, out);
        }
        if self.error.is_none() {
            match (self.stopped, self.finish) {
                (true, finish) | (false, finish @ Some(_)) => {
                    let reason = finish.unwrap_or("stop");
                    self.write_chunk(Delta::default(), Some(reason), out);
                    let cx = &self.cx;
                    sse::write_usage_chunk(out, &cx.id, cx.created, &cx.model_id, &self.usage);
                }
                (false, None) => {
                    self.fail("upstream stream ended before completion".into(), out);
                }
            }
        }
        sse::write_done(out);
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn failed(&self) -> Option<&str> {
        self.error.as_deref()
    }
}
