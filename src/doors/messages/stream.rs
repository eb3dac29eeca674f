//! A stream for the Messages door: the route adapter's own translator turns the upstream's
//! events into `chat.completion.chunk`s, handed over typed (`doors::door_stream`), and
//! [`Events`] renders those as Anthropic's events:
//!
//! ```text
//! message_start
//! content_block_start  (index 0)   ping   content_block_delta …   content_block_stop
//! content_block_start  (index 1)   content_block_delta …           content_block_stop
//! message_delta        (stop_reason, usage)
//! message_stop
//! ```
//!
//! Blocks are opened as the deltas call for them and closed when another kind begins:
//! reasoning → a `thinking` block (`thinking_delta`), content → a `text` block (`text_delta`),
//! each tool call (by its OpenAI `index`) → a `tool_use` block whose `input` arrives as
//! `input_json_delta` fragments. Only the first choice is read (the door never asks for more).
//!
//! Invariants:
//! - output never depends on how the upstream bytes were cut (`doors::door_stream`): each
//!   chunk comes with the usage counted when it was made, which `message_start` shows;
//! - `message_start` comes first, when the inner translator makes its first chunk, with the
//!   input it has counted by then (0 where the upstream counts at the end); the exact counts
//!   come in `message_delta`, from the inner translator's final usage;
//! - an inner error frame becomes one `error` event and nothing follows it; an error before
//!   anything else is the whole output (`providers::sse::starts_with_error`), so the stream can still fail
//!   over.

use bytes::{BufMut, BytesMut};
use serde::Serialize;

use super::answer::{stop_reason, UsageOut};
use crate::api::error::stream_error_frame;
use crate::api::{Door, Usage};
use crate::doors::chat_in::{ChunkChoiceIn, MessageIn, ToolCallIn};
use crate::doors::door_stream::{DoorEvents, DoorStream};
use crate::providers::chat_stream::ChatStream;
use crate::providers::sse::append_json;
use crate::providers::ResponseCx;

/// Anthropic events over the chat stream of the route's adapter.
pub(crate) type MessagesStream = DoorStream<Events>;

/// The Messages door's stream over `inner`.
pub(crate) fn stream(inner: Box<dyn ChatStream>, cx: ResponseCx) -> MessagesStream {
    DoorStream::new(
        inner,
        Events {
            cx,
            started: false,
            open: None,
            blocks: 0,
            calls_seen: Vec::new(),
            finish_reason: None,
            failed: false,
            usage_close: None,
        },
    )
}

/// What has been written, and what comes next.
pub(crate) struct Events {
    cx: ResponseCx,
    started: bool,
    /// The open content block, if any.
    open: Option<Open>,
    /// Content blocks started so far (the next block's index).
    blocks: u32,
    /// The OpenAI tool-call indexes seen, so a call's fragments never open a second block.
    calls_seen: Vec<u32>,
    finish_reason: Option<&'static str>,
    /// The error event was written: nothing more is.
    failed: bool,
    /// Where `message_delta`'s usage closes in what `on_finish` wrote.
    usage_close: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    Tool(u32),
}

impl DoorEvents for Events {
    fn ended(&self) -> bool {
        self.failed
    }

    fn on_chunk(&mut self, choice: Option<ChunkChoiceIn<'_>>, usage: &Usage, out: &mut BytesMut) {
        self.start(usage, out);
        let Some(choice) = choice else {
            return;
        };
        if let Some(delta) = choice.delta {
            self.on_delta(delta, out);
        }
        if let Some(reason) = choice.finish_reason {
            self.finish_reason = Some(stop_reason(Some(&reason)));
        }
    }

    fn on_error(&mut self, message: &str, _usage: &Usage, out: &mut BytesMut) {
        self.failed = true;
        out.put_slice(&stream_error_frame(Door::Messages, message));
    }

    /// The open block closed, then the stop reason and the exact usage.
    fn on_finish(&mut self, usage: &Usage, out: &mut BytesMut) {
        self.start(usage, out);
        self.close_block(out);
        write_event(
            out,
            "message_delta",
            &MessageDelta {
                kind: "message_delta",
                delta: StopDelta {
                    stop_reason: self.finish_reason.unwrap_or("end_turn"),
                    stop_sequence: None,
                },
                usage: DeltaUsage::of(usage),
            },
        );
        // `…,"usage":{…}}\n\n`: the usage is the event's last member.
        self.usage_close = out.len().checked_sub(4);
        write_event(
            out,
            "message_stop",
            &MessageStop {
                kind: "message_stop",
            },
        );
    }

    fn usage_close(&self) -> Option<usize> {
        self.usage_close
    }
}

impl Events {
    fn on_delta(&mut self, mut delta: MessageIn<'_>, out: &mut BytesMut) {
        let reasoning = delta.reasoning();
        if let Some(text) = reasoning.as_deref().filter(|t| !t.is_empty()) {
            if self.open != Some(Open::Thinking) {
                self.open_block(
                    Open::Thinking,
                    &StartBlock::Thinking {
                        thinking: "",
                        signature: "",
                    },
                    out,
                );
            }
            self.delta(&DeltaOut::Thinking { thinking: text }, out);
        }
        if let Some(text) = delta.content.as_deref().filter(|t| !t.is_empty()) {
            if self.open != Some(Open::Text) {
                self.open_block(Open::Text, &StartBlock::Text { text: "" }, out);
            }
            self.delta(&DeltaOut::Text { text }, out);
        }
        for call in delta.tool_calls {
            self.on_call(call, out);
        }
    }

    fn on_call(&mut self, call: ToolCallIn<'_>, out: &mut BytesMut) {
        let (name, arguments) = match &call.function {
            Some(f) => (f.name.as_deref(), f.arguments.as_deref()),
            None => (None, None),
        };
        if self.open != Some(Open::Tool(call.index)) {
            if self.calls_seen.contains(&call.index) {
                // A fragment of a call whose block is closed: Anthropic's blocks never
                // reopen, and OpenAI streams calls one after another, so none should come.
                return;
            }
            self.calls_seen.push(call.index);
            let minted;
            let id = match call.id.as_deref() {
                Some(id) => id,
                None => {
                    minted = self.mint_id(call.index);
                    &minted
                }
            };
            let start = StartBlock::ToolUse {
                id,
                name: name.unwrap_or(""),
                input: Empty {},
            };
            self.open_block(Open::Tool(call.index), &start, out);
        }
        if let Some(partial_json) = arguments.filter(|a| !a.is_empty()) {
            self.delta(&DeltaOut::InputJson { partial_json }, out);
        }
    }

    /// An id for a tool call the upstream sent none for.
    fn mint_id(&self, index: u32) -> String {
        let tail = self.cx.id.rsplit('-').next().unwrap_or(&self.cx.id);
        format!("toolu_{tail}_{index}")
    }

    /// `message_start`, once, with the input counted by now (`u`).
    fn start(&mut self, u: &Usage, out: &mut BytesMut) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let start = MessageStart {
            kind: "message_start",
            message: StartMessage {
                id: &self.cx.id,
                kind: "message",
                role: "assistant",
                model: &self.cx.model_id,
                content: [],
                stop_reason: None,
                stop_sequence: None,
                usage: StartUsage {
                    input_tokens: u.input.saturating_add(u.audio_input),
                    cache_creation_input_tokens: u.cache_write.saturating_add(u.cache_write_1h),
                    cache_read_input_tokens: u.cache_read,
                    output_tokens: 0,
                },
            },
        };
        write_event(out, "message_start", &start);
    }

    /// Closes the open block and starts `block` (the first one followed by a `ping`).
    fn open_block(&mut self, open: Open, block: &StartBlock<'_>, out: &mut BytesMut) {
        self.close_block(out);
        let index = self.blocks;
        self.blocks = self.blocks.saturating_add(1);
        self.open = Some(open);
        write_event(
            out,
            "content_block_start",
            &BlockStart {
                kind: "content_block_start",
                index,
                content_block: block,
            },
        );
        if index == 0 {
            write_event(out, "ping", &Ping { kind: "ping" });
        }
    }

    fn close_block(&mut self, out: &mut BytesMut) {
        if self.open.take().is_some() {
            write_event(
                out,
                "content_block_stop",
                &BlockStop {
                    kind: "content_block_stop",
                    index: self.blocks.saturating_sub(1),
                },
            );
        }
    }

    fn delta(&self, delta: &DeltaOut<'_>, out: &mut BytesMut) {
        write_event(
            out,
            "content_block_delta",
            &BlockDelta {
                kind: "content_block_delta",
                index: self.blocks.saturating_sub(1),
                delta,
            },
        );
    }
}

/// Appends `event: <name>\ndata: <json>\n\n`.
fn write_event<T: Serialize>(out: &mut BytesMut, name: &str, value: &T) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    append_json(out, value);
    out.extend_from_slice(b"\n\n");
}

// ----- the Anthropic events written ----------------------------------------------------------

#[derive(Serialize)]
struct MessageStart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: StartMessage<'a>,
}

#[derive(Serialize)]
struct StartMessage<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: [(); 0],
    stop_reason: Option<()>,
    stop_sequence: Option<()>,
    usage: StartUsage,
}

#[derive(Serialize)]
struct StartUsage {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
}

#[derive(Serialize)]
struct BlockStart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: u32,
    content_block: &'a StartBlock<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock<'a> {
    Thinking {
        thinking: &'static str,
        signature: &'static str,
    },
    Text {
        text: &'static str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Empty,
    },
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct BlockDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: u32,
    delta: &'a DeltaOut<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum DeltaOut<'a> {
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
}

#[derive(Serialize)]
struct BlockStop {
    #[serde(rename = "type")]
    kind: &'static str,
    index: u32,
}

#[derive(Serialize)]
struct Ping {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct MessageDelta {
    #[serde(rename = "type")]
    kind: &'static str,
    delta: StopDelta,
    usage: DeltaUsage,
}

#[derive(Serialize)]
struct StopDelta {
    stop_reason: &'static str,
    stop_sequence: Option<()>,
}

/// The final counts, exact: those of the inner translator's usage.
#[derive(Serialize)]
struct DeltaUsage {
    output_tokens: u64,
    input_tokens: u64,
    cache_read_input_tokens: u64,
    cache_creation_input_tokens: u64,
}

impl DeltaUsage {
    fn of(u: &Usage) -> Self {
        let all = UsageOut::of(u);
        DeltaUsage {
            output_tokens: all.output_tokens,
            input_tokens: all.input_tokens,
            cache_read_input_tokens: all.cache_read_input_tokens,
            cache_creation_input_tokens: all.cache_creation_input_tokens,
        }
    }
}

#[derive(Serialize)]
struct MessageStop {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{cx, events, fixture, stream_fixture};
    use super::*;
    use crate::providers::test_support::feed_in_pieces;
    use crate::providers::{
        gemini::Gemini, openai_compat::OpenAiCompat, Adapter, ChatAdapter, StreamTranslator,
    };
    use proptest::prelude::*;
    use serde_json::{json, Value};

    const GEMINI_FIXTURES: [&str; 7] = [
        "gemini-stream-2.0-flash-devapi.sse",
        "gemini-stream-thinking-2.5-flash-devapi.sse",
        "gemini-stream-thinking-2.5-flash-vertex.sse",
        "gemini-stream-thinking-2.5-pro-devapi.sse",
        "gemini-stream-function-call-thought-signature-2.5-flash-devapi.sse",
        "gemini-stream-text-gemini3-pro-devapi.chunks.jsonl",
        "gemini-stream-error-mid-stream-vertex.txt",
    ];

    fn upstream(name: &str) -> Vec<u8> {
        stream_fixture(name, false, "\r\n\r\n")
    }

    fn translator(adapter: &'static dyn ChatAdapter) -> MessagesStream {
        stream(adapter.chat_stream(cx()), cx())
    }

    /// What the door writes for `input` cut at `cuts`, and the translator after it.
    fn run(
        adapter: &'static dyn ChatAdapter,
        input: &[u8],
        cuts: &[usize],
    ) -> (Vec<u8>, MessagesStream) {
        let mut t = translator(adapter);
        let out = feed_in_pieces(&mut t, input, cuts);
        (out, t)
    }

    /// The inner translator alone over the whole input: its usage and failure.
    fn inner_alone(adapter: &dyn Adapter, input: &[u8]) -> (Usage, Option<String>) {
        let mut t = adapter.stream_translator(cx());
        let mut out = BytesMut::new();
        t.feed(input, &mut out);
        t.finish(&mut out);
        (t.usage(), t.failed().map(str::to_owned))
    }

    #[test]
    fn output_is_independent_of_splits() {
        for name in GEMINI_FIXTURES {
            let input = upstream(name);
            let (whole, _) = run(&Gemini, &input, &[]);
            for cut in 0..=input.len() {
                assert_eq!(
                    run(&Gemini, &input, &[cut]).0,
                    whole,
                    "{name}: split at {cut}"
                );
            }
            let bytes: Vec<usize> = (1..input.len()).collect();
            assert_eq!(
                run(&Gemini, &input, &bytes).0,
                whole,
                "{name}: byte by byte"
            );
        }
        let input = fixture("openai-chat-stream-tool-call-usage.sse");
        let (whole, _) = run(&OpenAiCompat, &input, &[]);
        for cut in 0..=input.len() {
            assert_eq!(
                run(&OpenAiCompat, &input, &[cut]).0,
                whole,
                "split at {cut}"
            );
        }
    }

    proptest! {
        #[test]
        fn many_cuts_change_nothing(file in 0usize..7, cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..24)) {
            let input = upstream(GEMINI_FIXTURES[file]);
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            at.sort_unstable();
            prop_assert_eq!(run(&Gemini, &input, &at).0, run(&Gemini, &input, &[]).0);
        }
    }

    /// What the Gemini events of a fixture say, read independently of any translator:
    /// thought text, answer text, (name, args) of each call.
    fn gemini_says(input: &[u8]) -> (String, String, Vec<(String, Value)>) {
        let (mut thoughts, mut text, mut calls) = (String::new(), String::new(), Vec::new());
        let events = std::str::from_utf8(input)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str::<Value>(d).unwrap());
        for ev in events {
            for part in ev["candidates"][0]["content"]["parts"].as_array().unwrap() {
                if let Some(call) = part.get("functionCall") {
                    calls.push((
                        call["name"].as_str().unwrap().to_owned(),
                        call["args"].clone(),
                    ));
                } else if part["thought"] == true {
                    thoughts.push_str(part["text"].as_str().unwrap());
                } else {
                    text.push_str(part["text"].as_str().unwrap_or(""));
                }
            }
        }
        (thoughts, text, calls)
    }

    /// A finished stream's blocks, checking the protocol on the way: `message_start` first,
    /// one `ping` right after the first block starts, blocks opened and closed in index order,
    /// deltas only to the open block and of its kind, `message_delta` and `message_stop` last.
    fn blocks(ev: &[(String, Value)]) -> Vec<Value> {
        assert_eq!(ev[0].0, "message_start", "{ev:?}");
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
        let mut blocks: Vec<Value> = Vec::new();
        let mut open: Option<usize> = None;
        for (i, (name, data)) in ev[1..ev.len() - 2].iter().enumerate() {
            match name.as_str() {
                "content_block_start" => {
                    assert_eq!(open, None, "a block starts while one is open");
                    assert_eq!(data["index"], blocks.len());
                    blocks.push(data["content_block"].clone());
                    open = Some(blocks.len() - 1);
                }
                "ping" => assert_eq!((i, blocks.len()), (1, 1), "ping after the first start"),
                "content_block_delta" => {
                    let at = open.expect("a delta outside a block");
                    assert_eq!(data["index"], at);
                    let b = &mut blocks[at];
                    let d = &data["delta"];
                    match (b["type"].as_str().unwrap(), d["type"].as_str().unwrap()) {
                        ("thinking", "thinking_delta") => {
                            b["thinking"] = json!(format!(
                                "{}{}",
                                b["thinking"].as_str().unwrap(),
                                d["thinking"].as_str().unwrap()
                            ));
                        }
                        ("text", "text_delta") => {
                            b["text"] = json!(format!(
                                "{}{}",
                                b["text"].as_str().unwrap(),
                                d["text"].as_str().unwrap()
                            ));
                        }
                        ("tool_use", "input_json_delta") => {
                            let so_far = b["partial"].as_str().unwrap_or("").to_owned();
                            b["partial"] = json!(so_far + d["partial_json"].as_str().unwrap());
                        }
                        other => panic!("delta {other:?}"),
                    }
                }
                "content_block_stop" => {
                    assert_eq!(Some(data["index"].as_u64().unwrap() as usize), open);
                    open = None;
                }
                other => panic!("unexpected event {other}"),
            }
        }
        assert_eq!(open, None, "every block is closed");
        blocks
    }

    fn anthropic_usage(u: &Usage) -> Value {
        json!({
            "output_tokens": u.output,
            "input_tokens": u.input + u.audio_input,
            "cache_read_input_tokens": u.cache_read,
            "cache_creation_input_tokens": u.cache_write + u.cache_write_1h,
        })
    }

    #[test]
    fn gemini_streams_become_messages_events() {
        for (name, stop) in [
            ("gemini-stream-2.0-flash-devapi.sse", "end_turn"),
            ("gemini-stream-thinking-2.5-flash-devapi.sse", "end_turn"),
            ("gemini-stream-thinking-2.5-flash-vertex.sse", "end_turn"),
            ("gemini-stream-thinking-2.5-pro-devapi.sse", "end_turn"),
            (
                "gemini-stream-function-call-thought-signature-2.5-flash-devapi.sse",
                "tool_use",
            ),
            (
                "gemini-stream-text-gemini3-pro-devapi.chunks.jsonl",
                "end_turn",
            ),
        ] {
            let input = upstream(name);
            let (out, t) = run(&Gemini, &input, &[]);
            let ev = events(&out);
            let (thoughts, text, calls) = gemini_says(&input);
            let b = blocks(&ev);

            let start = &ev[0].1["message"];
            assert_eq!(start["id"], "msg_gw7", "{name}");
            assert_eq!(start["model"], "google/gemini-test", "{name}");
            assert_eq!(start["content"], json!([]), "{name}");
            assert_eq!(start["usage"]["output_tokens"], 0, "{name}");

            let mut want = Vec::new();
            if !thoughts.is_empty() {
                want.push(json!({"type": "thinking", "thinking": thoughts, "signature": ""}));
            }
            if !text.is_empty() {
                want.push(json!({"type": "text", "text": text}));
            }
            let got_calls: Vec<(String, Value)> = b
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| {
                    assert!(
                        b["id"].as_str().unwrap().starts_with("call_msggw7_"),
                        "{name}"
                    );
                    assert_eq!(b["input"], json!({}), "{name}: input arrives as deltas");
                    let input = serde_json::from_str(b["partial"].as_str().unwrap()).unwrap();
                    (b["name"].as_str().unwrap().to_owned(), input)
                })
                .collect();
            assert_eq!(got_calls, calls, "{name}");
            let without_calls: Vec<Value> = b
                .iter()
                .filter(|b| b["type"] != "tool_use")
                .cloned()
                .collect();
            assert_eq!(without_calls, want, "{name}: thinking then text, whole");

            let (usage, failed) = inner_alone(&Gemini, &input);
            assert_eq!(failed, None);
            assert_eq!(t.usage(), usage, "{name}");
            assert_eq!(t.failed(), None, "{name}");
            assert!(t.delivered() > 0, "{name}");
            let delta = &ev[ev.len() - 2].1;
            assert_eq!(
                delta["delta"],
                json!({"stop_reason": stop, "stop_sequence": null}),
                "{name}"
            );
            assert_eq!(
                delta["usage"],
                anthropic_usage(&usage),
                "{name}: exact usage"
            );
            assert_eq!(ev[ev.len() - 1].1, json!({"type": "message_stop"}));
        }
    }

    #[test]
    fn message_start_carries_the_input_counted_so_far() {
        // The Developer API counts the prompt in every event: the first one's count is there.
        let input = upstream("gemini-stream-thinking-2.5-flash-devapi.sse");
        let ev = events(&run(&Gemini, &input, &[]).0);
        assert_eq!(ev[0].1["message"]["usage"]["input_tokens"], 10);
        // Vertex counts only at the end: 0 at the start, the exact count in message_delta.
        let input = upstream("gemini-stream-thinking-2.5-flash-vertex.sse");
        let ev = events(&run(&Gemini, &input, &[]).0);
        assert_eq!(ev[0].1["message"]["usage"]["input_tokens"], 0);
        assert_eq!(ev[ev.len() - 2].1["usage"]["input_tokens"], 9);
    }

    #[test]
    fn openai_tool_call_fragments_are_input_json_deltas() {
        let input = fixture("openai-chat-stream-tool-call-usage.sse");
        let (out, t) = run(&OpenAiCompat, &input, &[]);
        let ev = events(&out);
        let b = blocks(&ev);
        assert_eq!(
            b,
            [
                json!({"type": "tool_use", "id": "call_ZR5UUuTt3pf61kjwAJIYdVMj", "name": "get_capital",
                "input": {}, "partial": "{\"country\":\"UK\"}"})
            ]
        );
        let fragments: Vec<&Value> = ev
            .iter()
            .filter(|(n, _)| n == "content_block_delta")
            .map(|(_, d)| &d["delta"]["partial_json"])
            .collect();
        assert_eq!(
            fragments,
            [
                &json!("{\""),
                &json!("country"),
                &json!("\":\""),
                &json!("UK"),
                &json!("\"}")
            ]
        );
        let last = &ev[ev.len() - 2].1;
        assert_eq!(last["delta"]["stop_reason"], "tool_use");
        assert_eq!(
            last["usage"],
            json!({"output_tokens": 15, "input_tokens": 53, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0})
        );
        assert_eq!(t.usage().output, 15);
    }

    /// OpenAI frames as an upstream would send them.
    fn openai_stream(deltas: &[Value]) -> Vec<u8> {
        let mut s = String::new();
        for d in deltas {
            let chunk = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [d]});
            s.push_str(&format!("data: {chunk}\n\n"));
        }
        s.push_str("data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":5,\"cache_write_tokens\":3}}}\n\ndata: [DONE]\n\n");
        s.into_bytes()
    }

    #[test]
    fn blocks_follow_the_deltas_and_never_reopen() {
        let input = openai_stream(&[
            json!({"index": 0, "delta": {"role": "assistant", "content": ""}}),
            json!({"index": 0, "delta": {"reasoning": "Think"}}),
            json!({"index": 0, "delta": {"reasoning_content": "ing."}}),
            json!({"index": 0, "delta": {"content": "Answer"}}),
            json!({"index": 1, "delta": {"content": "another choice, ignored"}}),
            json!({"index": 0, "delta": {"content": "."}}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {"name": "a", "arguments": "{\"x\""}}]}}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"name": "b", "arguments": ""}}]}}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "late"}}]}}),
            json!({"index": 0, "delta": {}, "finish_reason": "length"}),
        ]);
        let (out, _) = run(&OpenAiCompat, &input, &[]);
        let ev = events(&out);
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(
            blocks(&ev),
            [
                json!({"type": "thinking", "thinking": "Thinking.", "signature": ""}),
                json!({"type": "text", "text": "Answer."}),
                json!({"type": "tool_use", "id": "c0", "name": "a", "input": {}, "partial": "{\"x\":1}"}),
                json!({"type": "tool_use", "id": "toolu_msg_gw7_1", "name": "b", "input": {}}),
            ],
            "a call without an id gets one; a late fragment of a closed call is dropped"
        );
        let last = &ev[ev.len() - 2].1;
        assert_eq!(last["delta"]["stop_reason"], "max_tokens");
        assert_eq!(
            last["usage"],
            json!({"output_tokens": 9, "input_tokens": 12, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 3})
        );
        assert_eq!(
            ev[0].1["message"]["usage"],
            json!({"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0}),
            "nothing counted yet when the first frame came"
        );
    }

    #[test]
    fn an_error_mid_stream_is_the_last_event() {
        let input = fixture("gemini-stream-error-mid-stream-vertex.txt");
        let (out, t) = run(&Gemini, &input, &[]);
        let ev = events(&out);
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "error"
            ]
        );
        assert_eq!(
            ev[5].1,
            json!({"type": "error", "error": {"type": "api_error", "message": "The operation was cancelled. (CANCELLED)", "code": "upstream_error"}})
        );
        assert_eq!(t.failed(), Some("The operation was cancelled. (CANCELLED)"));
        assert!(!crate::providers::sse::starts_with_error(&out));
    }

    #[test]
    fn an_error_before_anything_is_the_whole_stream() {
        for input in [
            &b"data: not json\r\n\r\n"[..],
            b"",
            b"data: {\"error\":{\"code\":500,\"message\":\"boom\",\"status\":\"INTERNAL\"}}\r\n\r\n",
        ] {
            let (out, t) = run(&Gemini, input, &[]);
            let ev = events(&out);
            assert_eq!(ev.len(), 1, "{ev:?}");
            assert_eq!(ev[0].0, "error");
            assert!(crate::providers::sse::starts_with_error(&out));
            assert_eq!(
                Some(ev[0].1["error"]["message"].as_str().unwrap()),
                t.failed()
            );
        }
        let (out, t) = run(
            &OpenAiCompat,
            b"data: {\"error\":{\"message\":\"Token limit reached\",\"code\":400}}\n\n",
            &[],
        );
        assert_eq!(
            events(&out),
            [(
                "error".to_owned(),
                json!({"type": "error", "error": {"type": "api_error", "message": "Token limit reached", "code": "upstream_error"}})
            )]
        );
        assert_eq!(t.failed(), Some("Token limit reached"));
    }

    #[test]
    fn a_blocked_prompt_is_a_refusal_without_content() {
        let blocked = b"data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":7,\"totalTokenCount\":7}}\r\n\r\n";
        let (out, _) = run(&Gemini, blocked, &[]);
        let ev = events(&out);
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["message_start", "message_delta", "message_stop"]);
        assert_eq!(ev[1].1["delta"]["stop_reason"], "refusal");
        assert_eq!(ev[1].1["usage"]["input_tokens"], 7);
    }

    #[test]
    fn excluded_reasoning_opens_no_thinking_block() {
        let mut c = cx();
        c.exclude_reasoning = true;
        let input = upstream("gemini-stream-thinking-2.5-flash-devapi.sse");
        let mut t = stream(Gemini.chat_stream(c.clone()), c);
        let mut out = BytesMut::new();
        t.feed(&input, &mut out);
        t.finish(&mut out);
        let kinds: Vec<Value> = blocks(&events(&out))
            .iter()
            .map(|b| b["type"].clone())
            .collect();
        assert_eq!(kinds, [json!("text")]);
    }
}
