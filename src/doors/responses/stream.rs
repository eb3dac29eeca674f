//! A stream for the Responses door: the route adapter's own translator turns the upstream's
//! events into `chat.completion.chunk`s, handed over typed (`doors::door_stream`), and
//! [`Events`] renders those as the Responses API's events, each `event: <type>\ndata: <json>`
//! with `sequence_number`s counting from 0:
//!
//! ```text
//! response.created   response.in_progress
//! output_item.added  (reasoning)  reasoning_summary_part.added
//!                    reasoning_summary_text.delta …  reasoning_summary_text.done
//!                    reasoning_summary_part.done     output_item.done
//! output_item.added  (message)    content_part.added  output_text.delta …  output_text.done
//!                    content_part.done                output_item.done
//! output_item.added  (function_call)  function_call_arguments.delta …
//!                    function_call_arguments.done     output_item.done
//! response.completed | response.incomplete
//! ```
//!
//! Items are opened as the deltas call for them and closed when another kind begins or the
//! stream ends: reasoning text → a `reasoning` item (its text one summary part), content → a
//! `message` item (`output_text`; a `refusal` part for refused content), each tool call (by
//! its chat `index`) → a `function_call` item. A reasoning item is one reasoning block: the
//! chat adapter sends a block's signature (`reasoning_details` `reasoning.text` with
//! `signature`) after its text and redacted thinking as `reasoning.encrypted`, both with the
//! block's `index`; a detail of another index, or text after a signed block, starts the next
//! item. The block's details, its text included, become the item's `encrypted_content` on
//! `output_item.done` (as in `answer.rs`; the text of details is read from `delta.reasoning`,
//! which OpenRouter repeats in its own text details).
//!
//! The last event carries the whole `response`, the object `to_response` builds for the same
//! answer (same item ids, same usage from the inner translator's final count) whenever the
//! upstream sends reasoning, then text, then calls. Items keep the upstream's order: Claude's
//! interleaved thinking (a block between two calls) comes between them here, where the
//! buffered answer, read from one chat message, puts every reasoning item first (the same
//! items, and replayed the same way); text after a call becomes a second message item. The
//! final object is what [`StreamTranslator::final_answer`] gives once the stream completed.
//!
//! Invariants:
//! - output never depends on how the upstream bytes were cut (`doors::door_stream`);
//! - an inner error frame becomes an `error` event (`code: upstream_error`) then
//!   `response.failed` (its response `status: failed`, `error.code: server_error` — the code
//!   the SDKs know, which Codex retries — with the items finished so far), and nothing follows. Before anything
//!   else it is the first event (`providers::sse::starts_with_error`), so the stream can still
//!   fail over. [`StreamTranslator::abort_frame`] writes the same two events, numbered on.

use std::collections::HashSet;

use bytes::{Bytes, BytesMut};
use serde::Serialize;

use super::answer::{
    detail, reasoning_item, render, Ids, Item, Outcome, Part, State, COMPLETED, ENCRYPTED_DETAIL,
    IN_PROGRESS, TEXT_DETAIL,
};
use super::reasoning::Detail;
use crate::api::Usage;
use crate::doors::chat_in::{ChunkChoiceIn, MessageIn, ReasoningDetailIn, ToolCallIn};
use crate::doors::door_stream::{DoorEvents, DoorStream};
use crate::providers::chat_stream::ChatStream;
use crate::providers::sse::append_json;
use crate::providers::ResponseCx;

/// Responses events over the chat stream of the route's adapter.
pub(crate) type ResponsesStream = DoorStream<Events>;

/// The Responses door's stream over `inner`.
pub(crate) fn stream(inner: Box<dyn ChatStream>, cx: ResponseCx) -> ResponsesStream {
    DoorStream::new(
        inner,
        Events {
            ids: Ids::of(&cx.id),
            cx,
            w: Writer { seq: 0 },
            started: false,
            output: Vec::new(),
            open: None,
            reasoning_items: 0,
            message_items: 0,
            calls_seen: HashSet::new(),
            outcome: None,
            ended: false,
            answer: None,
            usage_close: None,
        },
    )
}

/// What has been written, and what comes next.
pub(crate) struct Events {
    cx: ResponseCx,
    ids: Ids,
    w: Writer,
    started: bool,
    /// The items closed so far: the response's `output`.
    output: Vec<Item>,
    open: Option<Open>,
    reasoning_items: u32,
    message_items: u32,
    /// The chat tool-call indexes seen, so a call's fragments never open a second item.
    calls_seen: HashSet<u32>,
    outcome: Option<Outcome>,
    /// The last event was written (completed, incomplete or failed): nothing more is.
    ended: bool,
    /// The final response object, once completed.
    answer: Option<Bytes>,
    /// Where its usage closes in what `on_finish` wrote.
    usage_close: Option<usize>,
}

/// The item being streamed.
enum Open {
    Reasoning(Thinking),
    Message(Speech),
    Call(Call),
}

/// A reasoning block.
struct Thinking {
    id: String,
    /// The block's `index`, once a detail named it.
    block: Option<u32>,
    text: String,
    /// A `reasoning.text` detail came: the block's text is kept with its signature.
    text_detail: bool,
    signature: Option<String>,
    encrypted: Vec<String>,
    /// The block's closing detail came (signature, redacted data): more text is a new block.
    sealed: bool,
}

impl Thinking {
    /// The block's details, as `answer::detail` reads a buffered message's.
    fn details(&mut self) -> Vec<Detail> {
        let mut details = Vec::with_capacity(1 + self.encrypted.len());
        let text = (!self.text.is_empty()).then(|| self.text.clone());
        // A text detail with neither text nor signature carries nothing (and none is kept
        // buffered either).
        if self.text_detail && (text.is_some() || self.signature.is_some()) {
            details.push(Detail {
                kind: TEXT_DETAIL.into(),
                text,
                signature: self.signature.take(),
                data: None,
            });
        }
        details.extend(self.encrypted.drain(..).map(|data| Detail {
            kind: ENCRYPTED_DETAIL.into(),
            text: None,
            signature: None,
            data: Some(data),
        }));
        details
    }
}

/// A message item: its parts, the last one open while `part_open`.
struct Speech {
    id: String,
    parts: Vec<Part>,
    part_open: bool,
}

struct Call {
    index: u32,
    item: Item,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Said {
    Text,
    Refusal,
}

impl DoorEvents for Events {
    fn ended(&self) -> bool {
        self.ended
    }

    fn on_chunk(&mut self, choice: Option<ChunkChoiceIn<'_>>, _usage: &Usage, out: &mut BytesMut) {
        self.start(out);
        let Some(choice) = choice else {
            return;
        };
        if let Some(delta) = choice.delta {
            self.on_delta(delta, out);
        }
        if let Some(reason) = choice.finish_reason {
            self.outcome = Some(Outcome::of(Some(&reason)));
        }
    }

    /// `error`, then `response.failed` with what was finished; the stream's end.
    fn on_error(&mut self, message: &str, usage: &Usage, out: &mut BytesMut) {
        self.w.emit(
            out,
            "error",
            &ErrorEv {
                code: "upstream_error",
                message,
                param: None,
            },
        );
        let response = render(&self.cx, State::Failed(message), &self.output, Some(usage));
        self.w.emit_response(out, "response.failed", &response);
        self.ended = true;
    }

    /// The open item closed, then the whole response.
    fn on_finish(&mut self, usage: &Usage, out: &mut BytesMut) {
        self.start(out);
        let outcome = self.outcome.unwrap_or(Outcome::Completed);
        self.close(outcome.item_status(), out);
        let response = render(&self.cx, State::Done(outcome), &self.output, Some(usage));
        let at = self.w.emit_response(out, outcome.event(), &response);
        // `render` writes the usage last: `…,"usage":{…}}`.
        self.usage_close = (at + response.len()).checked_sub(2);
        self.answer = Some(response);
        self.ended = true;
    }

    /// `error` then `response.failed`, numbered after what was sent; nothing once the stream
    /// has ended (its last event was written).
    fn abort_frame(&mut self, message: &str, usage: &Usage) -> Option<Bytes> {
        let mut out = BytesMut::new();
        if !self.ended {
            self.on_error(message, usage, &mut out);
        }
        Some(out.freeze())
    }

    fn final_answer(&self) -> Option<Bytes> {
        self.answer.clone()
    }

    fn usage_close(&self) -> Option<usize> {
        self.usage_close
    }
}

impl Events {
    fn on_delta(&mut self, mut delta: MessageIn<'_>, out: &mut BytesMut) {
        if let Some(text) = delta.reasoning().filter(|t| !t.is_empty()) {
            self.on_reasoning(&text, out);
        }
        for d in std::mem::take(&mut delta.reasoning_details) {
            self.on_detail(d, out);
        }
        if let Some(text) = delta.content.as_deref().filter(|t| !t.is_empty()) {
            self.on_said(Said::Text, text, out);
        }
        if let Some(text) = delta.refusal.as_deref().filter(|t| !t.is_empty()) {
            self.on_said(Said::Refusal, text, out);
        }
        for call in delta.tool_calls {
            self.on_call(call, out);
        }
    }

    fn on_reasoning(&mut self, text: &str, out: &mut BytesMut) {
        if !matches!(&self.open, Some(Open::Reasoning(t)) if !t.sealed) {
            self.open_reasoning(out);
        }
        let output_index = self.output.len();
        let Some(Open::Reasoning(t)) = &mut self.open else {
            return;
        };
        if t.text.is_empty() {
            self.w.emit(
                out,
                "response.reasoning_summary_part.added",
                &SummaryPartEv {
                    item_id: &t.id,
                    output_index,
                    summary_index: 0,
                    part: SummaryPart::of(""),
                },
            );
        }
        t.text.push_str(text);
        self.w.emit(
            out,
            "response.reasoning_summary_text.delta",
            &SummaryDeltaEv {
                item_id: &t.id,
                output_index,
                summary_index: 0,
                delta: text,
            },
        );
    }

    fn on_detail(&mut self, d: ReasoningDetailIn<'_>, out: &mut BytesMut) {
        let Some((index, d)) = detail(d) else {
            return;
        };
        if !matches!(&self.open, Some(Open::Reasoning(t)) if t.block.unwrap_or(index) == index) {
            self.open_reasoning(out);
        }
        let Some(Open::Reasoning(t)) = &mut self.open else {
            return;
        };
        t.block = Some(index);
        if d.kind == TEXT_DETAIL {
            t.text_detail = true;
            if d.signature.is_some() {
                t.signature = d.signature;
                t.sealed = true;
            }
        } else if let Some(data) = d.data {
            t.encrypted.push(data);
            t.sealed = true;
        }
    }

    fn open_reasoning(&mut self, out: &mut BytesMut) {
        let id = self.ids.reasoning(self.reasoning_items);
        self.reasoning_items = self.reasoning_items.saturating_add(1);
        self.open_item(
            Item::Reasoning {
                id: id.clone(),
                summary: Vec::new(),
                encrypted_content: None,
            },
            out,
        );
        self.open = Some(Open::Reasoning(Thinking {
            id,
            block: None,
            text: String::new(),
            text_detail: false,
            signature: None,
            encrypted: Vec::new(),
            sealed: false,
        }));
    }

    fn on_said(&mut self, said: Said, text: &str, out: &mut BytesMut) {
        if !matches!(self.open, Some(Open::Message(_))) {
            let id = self.ids.message(self.message_items);
            self.message_items = self.message_items.saturating_add(1);
            self.open_item(
                Item::Message {
                    id: id.clone(),
                    status: IN_PROGRESS,
                    role: "assistant",
                    content: Vec::new(),
                },
                out,
            );
            self.open = Some(Open::Message(Speech {
                id,
                parts: Vec::new(),
                part_open: false,
            }));
        }
        let output_index = self.output.len();
        let Some(Open::Message(s)) = &mut self.open else {
            return;
        };
        let same = match s.parts.last() {
            Some(Part::OutputText { .. }) => said == Said::Text,
            Some(Part::Refusal { .. }) => said == Said::Refusal,
            None => false,
        };
        if !(s.part_open && same) {
            close_part(&mut self.w, s, output_index, out);
            s.parts.push(match said {
                Said::Text => Part::text(String::new()),
                Said::Refusal => Part::Refusal {
                    refusal: String::new(),
                },
            });
            s.part_open = true;
            let content_index = s.parts.len() - 1;
            self.w.emit(
                out,
                "response.content_part.added",
                &PartEv {
                    item_id: &s.id,
                    output_index,
                    content_index,
                    part: &s.parts[content_index],
                },
            );
        }
        let content_index = s.parts.len() - 1;
        if let Some(part) = s.parts.last_mut() {
            part.said_mut().push_str(text);
        }
        let (name, ev) = match said {
            Said::Text => ("response.output_text.delta", TextEv::Text { logprobs: [] }),
            Said::Refusal => ("response.refusal.delta", TextEv::Refusal),
        };
        self.w.emit(
            out,
            name,
            &TextDeltaEv {
                item_id: &s.id,
                output_index,
                content_index,
                delta: text,
                extra: ev,
            },
        );
    }

    fn on_call(&mut self, call: ToolCallIn<'_>, out: &mut BytesMut) {
        let (name, arguments) = match &call.function {
            Some(f) => (f.name.as_deref(), f.arguments.as_deref()),
            None => (None, None),
        };
        if !matches!(&self.open, Some(Open::Call(c)) if c.index == call.index) {
            if !self.calls_seen.insert(call.index) {
                // A fragment of a call already closed: items never reopen, and chat streams
                // send calls one after another, so none should come.
                return;
            }
            let call_id = call
                .id
                .as_deref()
                .map_or_else(|| self.ids.call_id(call.index), str::to_owned);
            let item = Item::call(
                self.ids.call(call.index),
                call_id,
                name.unwrap_or(""),
                String::new(),
                IN_PROGRESS,
            );
            self.open_item(item.clone(), out);
            self.open = Some(Open::Call(Call {
                index: call.index,
                item,
            }));
        }
        let output_index = self.output.len();
        let Some(Open::Call(Call {
            item: Item::FunctionCall {
                id, arguments: all, ..
            },
            ..
        })) = &mut self.open
        else {
            return;
        };
        if let Some(delta) = arguments.filter(|a| !a.is_empty()) {
            all.push_str(delta);
            self.w.emit(
                out,
                "response.function_call_arguments.delta",
                &ArgsDeltaEv {
                    item_id: id,
                    output_index,
                    delta,
                },
            );
        }
    }

    /// Closes the open item and announces `item` at the next output index.
    fn open_item(&mut self, item: Item, out: &mut BytesMut) {
        self.close(COMPLETED, out);
        self.w.emit(
            out,
            "response.output_item.added",
            &ItemEv {
                output_index: self.output.len(),
                item: &item,
            },
        );
    }

    /// Closes the open item, if any (a message or call with `status`), into `output`.
    fn close(&mut self, status: &'static str, out: &mut BytesMut) {
        let Some(open) = self.open.take() else {
            return;
        };
        let output_index = self.output.len();
        let mut item = match open {
            Open::Reasoning(mut t) => {
                if !t.text.is_empty() {
                    self.w.emit(
                        out,
                        "response.reasoning_summary_text.done",
                        &SummaryDoneEv {
                            item_id: &t.id,
                            output_index,
                            summary_index: 0,
                            text: &t.text,
                        },
                    );
                    self.w.emit(
                        out,
                        "response.reasoning_summary_part.done",
                        &SummaryPartEv {
                            item_id: &t.id,
                            output_index,
                            summary_index: 0,
                            part: SummaryPart::of(&t.text),
                        },
                    );
                }
                let details = t.details();
                reasoning_item(t.id, t.text, &details)
            }
            Open::Message(mut s) => {
                close_part(&mut self.w, &mut s, output_index, out);
                Item::Message {
                    id: s.id,
                    status,
                    role: "assistant",
                    content: s.parts,
                }
            }
            Open::Call(Call { item, .. }) => {
                if let Item::FunctionCall {
                    id,
                    name,
                    arguments,
                    ..
                } = &item
                {
                    self.w.emit(
                        out,
                        "response.function_call_arguments.done",
                        &ArgsDoneEv {
                            item_id: id,
                            output_index,
                            name,
                            arguments,
                        },
                    );
                }
                item
            }
        };
        item.set_status(status);
        self.w.emit(
            out,
            "response.output_item.done",
            &ItemEv {
                output_index,
                item: &item,
            },
        );
        self.output.push(item);
    }

    /// `response.created` and `response.in_progress`, once.
    fn start(&mut self, out: &mut BytesMut) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let response = render(&self.cx, State::InProgress, &[], None);
        self.w.emit_response(out, "response.created", &response);
        self.w.emit_response(out, "response.in_progress", &response);
    }
}

/// Closes the message's open part: its `.done` events.
fn close_part(w: &mut Writer, s: &mut Speech, output_index: usize, out: &mut BytesMut) {
    if !std::mem::replace(&mut s.part_open, false) {
        return;
    }
    let Some(part) = s.parts.last() else {
        return;
    };
    let content_index = s.parts.len() - 1;
    let (name, ev) = match part {
        Part::OutputText { text, .. } => (
            "response.output_text.done",
            PartDoneEv::Text { text, logprobs: [] },
        ),
        Part::Refusal { refusal } => ("response.refusal.done", PartDoneEv::Refusal { refusal }),
    };
    w.emit(
        out,
        name,
        &TextDoneEv {
            item_id: &s.id,
            output_index,
            content_index,
            done: ev,
        },
    );
    w.emit(
        out,
        "response.content_part.done",
        &PartEv {
            item_id: &s.id,
            output_index,
            content_index,
            part,
        },
    );
}

/// Numbers and writes the events.
struct Writer {
    seq: u64,
}

impl Writer {
    /// Appends `event: <name>\ndata: {"type":<name>,"sequence_number":…,<body's fields>}`.
    fn emit<T: Serialize>(&mut self, out: &mut BytesMut, name: &str, body: &T) {
        self.head(out, name);
        // The body is an object of its own: its `{` becomes the comma after the head's members,
        // its `}` closes the event (serde's `flatten` does the same through a map serialiser,
        // key by key, slower).
        let at = out.len();
        append_json(out, body);
        match out.get(at..) {
            Some(b"{}") => {
                out.truncate(at);
                out.extend_from_slice(b"}");
            }
            Some([b'{', ..]) => out[at] = b',',
            _ => {}
        }
        out.extend_from_slice(b"\n\n");
    }

    /// An event carrying the response object, as rendered (byte for byte what is stored);
    /// where the object begins in `out`.
    fn emit_response(&mut self, out: &mut BytesMut, name: &str, response: &[u8]) -> usize {
        self.head(out, name);
        out.extend_from_slice(b",\"response\":");
        let at = out.len();
        out.extend_from_slice(response);
        out.extend_from_slice(b"}\n\n");
        at
    }

    /// `event: <name>\ndata: {"type":"<name>","sequence_number":<n>` (an event name is one of
    /// the protocol's, nothing to escape); the next number.
    fn head(&mut self, out: &mut BytesMut, name: &str) {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\ndata: {\"type\":\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\",\"sequence_number\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.seq).as_bytes());
        self.seq = self.seq.saturating_add(1);
    }
}

// ----- the events written --------------------------------------------------------------------

#[derive(Serialize)]
struct ItemEv<'a> {
    output_index: usize,
    item: &'a Item,
}

#[derive(Serialize)]
struct SummaryPartEv<'a> {
    item_id: &'a str,
    output_index: usize,
    summary_index: u32,
    part: SummaryPart<'a>,
}

#[derive(Serialize)]
struct SummaryPart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

impl<'a> SummaryPart<'a> {
    fn of(text: &'a str) -> Self {
        SummaryPart {
            kind: "summary_text",
            text,
        }
    }
}

#[derive(Serialize)]
struct SummaryDeltaEv<'a> {
    item_id: &'a str,
    output_index: usize,
    summary_index: u32,
    delta: &'a str,
}

#[derive(Serialize)]
struct SummaryDoneEv<'a> {
    item_id: &'a str,
    output_index: usize,
    summary_index: u32,
    text: &'a str,
}

#[derive(Serialize)]
struct PartEv<'a> {
    item_id: &'a str,
    output_index: usize,
    content_index: usize,
    part: &'a Part,
}

#[derive(Serialize)]
struct TextDeltaEv<'a> {
    item_id: &'a str,
    output_index: usize,
    content_index: usize,
    delta: &'a str,
    #[serde(flatten)]
    extra: TextEv,
}

/// What an `output_text` event has that a `refusal` one has not.
#[derive(Serialize)]
#[serde(untagged)]
enum TextEv {
    Text { logprobs: [(); 0] },
    Refusal,
}

#[derive(Serialize)]
struct TextDoneEv<'a> {
    item_id: &'a str,
    output_index: usize,
    content_index: usize,
    #[serde(flatten)]
    done: PartDoneEv<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum PartDoneEv<'a> {
    Text { text: &'a str, logprobs: [(); 0] },
    Refusal { refusal: &'a str },
}

#[derive(Serialize)]
struct ArgsDeltaEv<'a> {
    item_id: &'a str,
    output_index: usize,
    delta: &'a str,
}

#[derive(Serialize)]
struct ArgsDoneEv<'a> {
    item_id: &'a str,
    output_index: usize,
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ErrorEv<'a> {
    code: &'static str,
    message: &'a str,
    param: Option<()>,
}

#[cfg(test)]
mod tests {
    use super::super::reasoning::decode;
    use super::super::test_support::{chat_answer, cx, events, fixture, stream_fixture};
    use super::super::to_response;
    use super::*;
    use crate::api::error::stream_error_frame;
    use crate::api::Door;
    use crate::providers::test_support::feed_in_pieces;
    use crate::providers::{
        anthropic::Anthropic, gemini::Gemini, openai_compat::OpenAiCompat, ChatAdapter,
        StreamTranslator,
    };
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// Stream fixtures, the adapter that reads them, and whether they end cleanly.
    const FIXTURES: [(&str, Family, bool); 11] = [
        ("gemini-stream-2.0-flash-devapi.sse", Family::Gemini, true),
        (
            "gemini-stream-thinking-2.5-flash-devapi.sse",
            Family::Gemini,
            true,
        ),
        (
            "gemini-stream-thinking-2.5-flash-vertex.sse",
            Family::Gemini,
            true,
        ),
        (
            "gemini-stream-thinking-2.5-pro-devapi.sse",
            Family::Gemini,
            true,
        ),
        (
            "gemini-stream-function-call-thought-signature-2.5-flash-devapi.sse",
            Family::Gemini,
            true,
        ),
        (
            "gemini-stream-text-gemini3-pro-devapi.chunks.jsonl",
            Family::Gemini,
            true,
        ),
        (
            "gemini-stream-error-mid-stream-vertex.txt",
            Family::Gemini,
            false,
        ),
        (
            "anthropic-stream-thinking.chunks.jsonl",
            Family::Anthropic,
            true,
        ),
        (
            "anthropic-stream-tool-use.chunks.jsonl",
            Family::Anthropic,
            true,
        ),
        (
            "openai-chat-stream-tool-call-usage.sse",
            Family::OpenAi,
            true,
        ),
        (
            "openrouter-stream-reasoning-anthropic.sse",
            Family::OpenAi,
            true,
        ),
    ];

    #[derive(Clone, Copy)]
    enum Family {
        Gemini,
        Anthropic,
        OpenAi,
    }

    impl Family {
        fn adapter(self) -> &'static dyn ChatAdapter {
            match self {
                Family::Gemini => &Gemini,
                Family::Anthropic => &Anthropic,
                Family::OpenAi => &OpenAiCompat,
            }
        }
        fn input(self, name: &str) -> Vec<u8> {
            match self {
                Family::Gemini => stream_fixture(name, false, "\r\n\r\n"),
                Family::Anthropic => stream_fixture(name, true, "\n\n"),
                Family::OpenAi => fixture(name),
            }
        }
    }

    /// What the door writes for `input` cut at `cuts`, and the translator after it.
    fn run(adapter: &dyn ChatAdapter, input: &[u8], cuts: &[usize]) -> (Vec<u8>, ResponsesStream) {
        let mut t = stream(adapter.chat_stream(cx()), cx());
        let out = feed_in_pieces(&mut t, input, cuts);
        (out, t)
    }

    /// A finished stream's items, checking the protocol on the way: `response.created` and
    /// `response.in_progress` first; one item open at a time, added at the next output index;
    /// parts, summaries and deltas only for the open item and of its kind; each `.done` saying
    /// what its deltas added up to; `output_item.done` carrying the whole item; the last event
    /// `response.completed` or `response.incomplete` whose `output` is those items.
    fn output_of(ev: &[(String, Value)]) -> (Vec<Value>, Value) {
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names[..2],
            ["response.created", "response.in_progress"],
            "{names:?}"
        );
        for (_, data) in &ev[..2] {
            let r = &data["response"];
            assert_eq!(
                (&r["status"], &r["output"], &r["usage"]),
                (&json!("in_progress"), &json!([]), &Value::Null)
            );
            assert_eq!(r["id"], "resp_gw7");
        }
        let (last, last_data) = &ev[ev.len() - 1];
        assert!(
            last == "response.completed" || last == "response.incomplete",
            "{names:?}"
        );
        let mut done: Vec<Value> = Vec::new();
        // The open item, and what its deltas said (per summary or content part).
        let mut open: Option<(Value, Vec<String>, String)> = None;
        for (name, d) in &ev[2..ev.len() - 1] {
            if name == "response.output_item.added" {
                assert!(open.is_none(), "an item starts while one is open");
                assert_eq!(d["output_index"], done.len());
                open = Some((d["item"].clone(), Vec::new(), String::new()));
                continue;
            }
            let (item, parts, args) = open.as_mut().expect("an event outside an item");
            assert_eq!(d["output_index"], done.len(), "{name}");
            if name != "response.output_item.done" {
                assert_eq!(d["item_id"], item["id"], "{name}");
            }
            let kind = item["type"].as_str().unwrap();
            match (kind, name.as_str()) {
                ("reasoning", "response.reasoning_summary_part.added") => {
                    assert_eq!(d["summary_index"], parts.len());
                    assert_eq!(d["part"], json!({"type": "summary_text", "text": ""}));
                    parts.push(String::new());
                }
                ("reasoning", "response.reasoning_summary_text.delta") => {
                    assert_eq!(d["summary_index"], parts.len() - 1);
                    parts
                        .last_mut()
                        .unwrap()
                        .push_str(d["delta"].as_str().unwrap());
                }
                ("reasoning", "response.reasoning_summary_text.done") => {
                    assert_eq!(d["text"], parts.last().unwrap().as_str());
                }
                ("reasoning", "response.reasoning_summary_part.done") => {
                    assert_eq!(
                        d["part"],
                        json!({"type": "summary_text", "text": parts.last().unwrap()})
                    );
                }
                ("message", "response.content_part.added") => {
                    assert_eq!(d["content_index"], parts.len());
                    assert_eq!(
                        d["part"].get("text").or(d["part"].get("refusal")),
                        Some(&json!(""))
                    );
                    parts.push(String::new());
                }
                ("message", "response.output_text.delta" | "response.refusal.delta") => {
                    assert_eq!(d["content_index"], parts.len() - 1);
                    if name == "response.output_text.delta" {
                        assert_eq!(d["logprobs"], json!([]));
                    }
                    parts
                        .last_mut()
                        .unwrap()
                        .push_str(d["delta"].as_str().unwrap());
                }
                ("message", "response.output_text.done") => {
                    assert_eq!(d["text"], parts.last().unwrap().as_str());
                }
                ("message", "response.refusal.done") => {
                    assert_eq!(d["refusal"], parts.last().unwrap().as_str());
                }
                ("message", "response.content_part.done") => {
                    let part = &d["part"];
                    assert_eq!(
                        part.get("text").or(part.get("refusal")),
                        Some(&json!(parts.last().unwrap()))
                    );
                }
                ("function_call", "response.function_call_arguments.delta") => {
                    args.push_str(d["delta"].as_str().unwrap());
                }
                ("function_call", "response.function_call_arguments.done") => {
                    assert_eq!(d["arguments"], args.as_str());
                    assert_eq!(d["name"], item["name"]);
                }
                (_, "response.output_item.done") => {
                    let whole = &d["item"];
                    assert_eq!(whole["id"], item["id"]);
                    match kind {
                        "reasoning" => {
                            let said: Vec<Value> = parts
                                .iter()
                                .map(|t| json!({"type": "summary_text", "text": t}))
                                .collect();
                            assert_eq!(whole["summary"], json!(said));
                        }
                        "message" => {
                            let said: Vec<&Value> = whole["content"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|p| p.get("text").or(p.get("refusal")).unwrap())
                                .collect();
                            let parts: Vec<Value> = parts.iter().map(|p| json!(p)).collect();
                            assert_eq!(said, parts.iter().collect::<Vec<_>>());
                        }
                        _ => {
                            assert_eq!(whole["arguments"], args.as_str());
                            assert_eq!(whole["call_id"], item["call_id"]);
                        }
                    }
                    done.push(whole.clone());
                    open = None;
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
        assert!(open.is_none(), "every item is closed");
        let response = last_data["response"].clone();
        assert_eq!(response["output"], json!(done));
        (done, response)
    }

    #[test]
    fn output_is_independent_of_splits() {
        for (name, family, _) in FIXTURES {
            let input = family.input(name);
            if input.len() > 8000 {
                continue; // quadratic: the long one is left to `many_cuts_change_nothing`
            }
            let adapter = family.adapter();
            let (whole, _) = run(adapter, &input, &[]);
            for cut in 0..=input.len() {
                assert_eq!(
                    run(adapter, &input, &[cut]).0,
                    whole,
                    "{name}: split at {cut}"
                );
            }
        }
        let (name, family, _) = FIXTURES[4];
        let input = family.input(name);
        let bytes: Vec<usize> = (1..input.len()).collect();
        assert_eq!(
            run(family.adapter(), &input, &bytes).0,
            run(family.adapter(), &input, &[]).0,
            "{name}: byte by byte"
        );
    }

    proptest! {
        #[test]
        fn many_cuts_change_nothing(file in 0usize..FIXTURES.len(), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..24)) {
            let (name, family, _) = FIXTURES[file];
            let input = family.input(name);
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            at.sort_unstable();
            prop_assert_eq!(run(family.adapter(), &input, &at).0, run(family.adapter(), &input, &[]).0);
        }
    }

    #[test]
    fn the_last_event_is_the_buffered_answer() {
        for (name, family, clean) in FIXTURES {
            if !clean {
                continue;
            }
            let input = family.input(name);
            let (out, t) = run(family.adapter(), &input, &[]);
            let (_, response) = output_of(&events(&out));
            let (completion, usage) = chat_answer(family.adapter(), &input);
            assert_eq!(t.usage(), usage, "{name}");
            let buffered = to_response(&completion, &usage, &cx()).unwrap();
            assert_eq!(
                t.final_answer().map(|a| a.body),
                Some(buffered.clone()),
                "{name}: {response}"
            );
            assert_eq!(
                response,
                serde_json::from_slice::<Value>(&buffered).unwrap(),
                "{name}"
            );
            assert_eq!(t.failed(), None, "{name}");
            assert!(t.delivered() > 0, "{name}");
        }
    }

    #[test]
    fn gemini_streams_become_items() {
        let (name, family, _) = FIXTURES[4];
        let (out, t) = run(family.adapter(), &family.input(name), &[]);
        let (items, response) = output_of(&events(&out));
        let kinds: Vec<&Value> = items.iter().map(|i| &i["type"]).collect();
        assert_eq!(
            kinds,
            [&json!("reasoning"), &json!("function_call")],
            "{name}"
        );
        assert_eq!(items[0]["id"], "rs_gw7_0");
        let call = &items[1];
        assert_eq!(call["id"], "fc_gw7_0");
        assert!(
            call["call_id"].as_str().unwrap().starts_with("call_"),
            "{call}"
        );
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(response["status"], "completed");
        let u = t.usage();
        assert_eq!(response["usage"]["input_tokens"], u.prompt_tokens());
        assert_eq!(response["usage"]["output_tokens"], u.output);
        assert_eq!(
            response["usage"]["output_tokens_details"]["reasoning_tokens"],
            u.reasoning
        );

        let (name, family, _) = FIXTURES[1];
        let (out, _) = run(family.adapter(), &family.input(name), &[]);
        let (items, _) = output_of(&events(&out));
        let kinds: Vec<&Value> = items.iter().map(|i| &i["type"]).collect();
        assert_eq!(kinds, [&json!("reasoning"), &json!("message")], "{name}");
        assert_eq!(items[1]["id"], "msg_gw7");
        assert_eq!(items[1]["status"], "completed");
    }

    #[test]
    fn openrouter_signed_thinking_is_the_items_encrypted_content() {
        let input = fixture("openrouter-stream-reasoning-anthropic.sse");
        let (out, _) = run(&OpenAiCompat, &input, &[]);
        let (items, _) = output_of(&events(&out));
        assert_eq!(items.len(), 2, "{items:?}");
        let thought = "This is a simple arithmetic question. 2+2 equals 4.";
        assert_eq!(
            items[0]["summary"],
            json!([{"type": "summary_text", "text": thought}])
        );
        let details = decode(items[0]["encrypted_content"].as_str().unwrap()).unwrap();
        assert_eq!(details.len(), 1);
        assert_eq!(details[0].kind, "reasoning.text");
        assert_eq!(details[0].text.as_deref(), Some(thought));
        assert!(details[0]
            .signature
            .as_deref()
            .unwrap()
            .starts_with("Et0BCkgI"));
        assert_eq!(items[1]["content"][0]["text"], "2 + 2 = 4");

        // OpenAI's own encrypted reasoning, through OpenRouter: kept whole for the next turn.
        let input = fixture("openrouter-stream-reasoning-encrypted-openai.sse");
        let (out, _) = run(&OpenAiCompat, &input, &[]);
        let (items, _) = output_of(&events(&out));
        assert_eq!(items[0]["type"], "reasoning");
        assert_eq!(items[0]["summary"], json!([]));
        let details = decode(items[0]["encrypted_content"].as_str().unwrap()).unwrap();
        assert_eq!(details[0].kind, "reasoning.encrypted");
        assert!(details[0].data.as_deref().unwrap().starts_with("gAAAAAB"));
        assert_eq!(items[1]["type"], "message");
    }

    /// OpenAI frames as an upstream would send them (an OpenAI-compatible one passes them on).
    fn openai_stream(deltas: &[Value]) -> Vec<u8> {
        let mut s = String::new();
        for d in deltas {
            let chunk = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [d]});
            s.push_str(&format!("data: {chunk}\n\n"));
        }
        s.push_str("data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":5,\"cache_write_tokens\":3},\"completion_tokens_details\":{\"reasoning_tokens\":4}}}\n\ndata: [DONE]\n\n");
        s.into_bytes()
    }

    #[test]
    fn claude_blocks_become_reasoning_items_then_message_and_calls() {
        // The Anthropic chat adapter's convention: a block's text as `reasoning`, then its
        // signature as a detail of the block's index; redacted thinking as its own detail.
        let sig = |s: &str, i: u32| json!({"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.text", "signature": s, "index": i}]}});
        let input = openai_stream(&[
            json!({"index": 0, "delta": {"role": "assistant", "content": ""}}),
            json!({"index": 0, "delta": {"reasoning": "Think"}}),
            json!({"index": 0, "delta": {"reasoning": "ing."}}),
            sig("sig0", 0),
            json!({"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.encrypted", "data": "opaque", "index": 1}]}}),
            json!({"index": 0, "delta": {"reasoning": "More."}}),
            sig("sig2", 2),
            sig("sig3", 3),
            json!({"index": 0, "delta": {"content": "Answer"}}),
            json!({"index": 1, "delta": {"content": "another choice, ignored"}}),
            json!({"index": 0, "delta": {"content": "."}}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {"name": "a", "arguments": "{\"x\""}}]}}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"name": "ns--b", "arguments": ""}}]}}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "late"}}]}}),
            json!({"index": 0, "delta": {}, "finish_reason": "tool_calls"}),
        ]);
        let (out, t) = run(&OpenAiCompat, &input, &[]);
        let ev = events(&out);
        let (items, response) = output_of(&ev);
        let text = |t: &str, s: &str| Detail {
            kind: TEXT_DETAIL.into(),
            text: (!t.is_empty()).then(|| t.into()),
            signature: Some(s.into()),
            data: None,
        };
        let blob = |d: Vec<Detail>| json!(super::super::reasoning::encode(&d));
        let summary = |t: &str| json!([{"type": "summary_text", "text": t}]);
        assert_eq!(
            items,
            [
                json!({"type": "reasoning", "id": "rs_gw7_0", "summary": summary("Thinking."),
                    "encrypted_content": blob(vec![text("Thinking.", "sig0")])}),
                json!({"type": "reasoning", "id": "rs_gw7_1", "summary": [],
                    "encrypted_content": blob(vec![Detail { kind: ENCRYPTED_DETAIL.into(), text: None, signature: None, data: Some("opaque".into()) }])}),
                json!({"type": "reasoning", "id": "rs_gw7_2", "summary": summary("More."),
                    "encrypted_content": blob(vec![text("More.", "sig2")])}),
                json!({"type": "reasoning", "id": "rs_gw7_3", "summary": [],
                    "encrypted_content": blob(vec![text("", "sig3")])}),
                json!({"type": "message", "id": "msg_gw7", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Answer.", "annotations": [], "logprobs": []}]}),
                json!({"type": "function_call", "id": "fc_gw7_0", "status": "completed", "call_id": "c0",
                    "name": "a", "arguments": "{\"x\":1}"}),
                json!({"type": "function_call", "id": "fc_gw7_1", "status": "completed", "call_id": "call_gw7_1",
                    "name": "b", "namespace": "ns", "arguments": ""}),
            ],
            "a call without an id gets one, a namespaced one is split; a late fragment of a closed call is dropped"
        );
        assert_eq!(ev.last().unwrap().0, "response.completed");
        assert_eq!(
            response["usage"],
            json!({"input_tokens": 20, "input_tokens_details": {"cached_tokens": 5, "cache_write_tokens": 3},
                "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 29})
        );
        let (completion, usage) = chat_answer(&OpenAiCompat, &input);
        // A buffered answer has every call's id (a call without one is refused).
        let mut completion: Value = serde_json::from_slice(&completion).unwrap();
        completion["choices"][0]["message"]["tool_calls"][1]["id"] = json!("call_gw7_1");
        let completion = serde_json::to_vec(&completion).unwrap();
        let buffered: Value =
            serde_json::from_slice(&to_response(&completion, &usage, &cx()).unwrap()).unwrap();
        assert_eq!(response, buffered);
        assert_eq!(
            t.final_answer()
                .map(|a| serde_json::from_slice::<Value>(&a.body).unwrap()),
            Some(response)
        );
    }

    #[test]
    fn claudes_interleaved_thinking_stays_between_its_calls() {
        let ev = |json: &str| {
            let v: Value = serde_json::from_str(json).unwrap();
            format!("event: {}\ndata: {json}\n\n", v["type"].as_str().unwrap())
        };
        let block = |i: u32, delta: &str| {
            ev(&format!(
                r#"{{"type":"content_block_delta","index":{i},"delta":{delta}}}"#
            ))
        };
        let start = |i: u32, b: &str| {
            ev(&format!(
                r#"{{"type":"content_block_start","index":{i},"content_block":{b}}}"#
            ))
        };
        let stop = |i: u32| ev(&format!(r#"{{"type":"content_block_stop","index":{i}}}"#));
        let thinking = r#"{"type":"thinking","thinking":"","signature":""}"#;
        let input = [
            ev(r#"{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}"#),
            start(0, thinking),
            block(0, r#"{"type":"thinking_delta","thinking":"Call it."}"#),
            block(0, r#"{"type":"signature_delta","signature":"c2lnMQ=="}"#),
            stop(0),
            start(1, r#"{"type":"redacted_thinking","data":"cmVkYWN0ZWQ="}"#),
            stop(1),
            start(2, r#"{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{}}"#),
            block(2, r#"{"type":"input_json_delta","partial_json":"{\"city\":\"Paris\"}"}"#),
            stop(2),
            start(3, thinking),
            block(3, r#"{"type":"signature_delta","signature":"c2lnMg=="}"#),
            stop(3),
            start(4, r#"{"type":"tool_use","id":"toolu_01B","name":"now","input":{}}"#),
            stop(4),
            ev(r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":40}}"#),
            ev(r#"{"type":"message_stop"}"#),
        ]
        .concat()
        .into_bytes();
        let (out, _) = run(&Anthropic, &input, &[]);
        let (items, response) = output_of(&events(&out));
        let ids: Vec<&str> = items.iter().map(|i| i["id"].as_str().unwrap()).collect();
        assert_eq!(
            ids,
            ["rs_gw7_0", "rs_gw7_1", "fc_gw7_0", "rs_gw7_2", "fc_gw7_1"]
        );
        let details = |i: usize| decode(items[i]["encrypted_content"].as_str().unwrap()).unwrap();
        assert_eq!(
            (
                details(0)[0].text.as_deref(),
                details(0)[0].signature.as_deref()
            ),
            (Some("Call it."), Some("c2lnMQ=="))
        );
        assert_eq!(details(1)[0].data.as_deref(), Some("cmVkYWN0ZWQ="));
        assert_eq!(
            (
                details(3)[0].text.as_deref(),
                details(3)[0].signature.as_deref()
            ),
            (None, Some("c2lnMg=="))
        );
        assert_eq!(items[2]["call_id"], "toolu_01A");
        assert_eq!(items[2]["arguments"], "{\"city\":\"Paris\"}");

        // Buffered: the same items, reasoning first.
        let (completion, usage) = chat_answer(&Anthropic, &input);
        let buffered: Value =
            serde_json::from_slice(&to_response(&completion, &usage, &cx()).unwrap()).unwrap();
        let mut streamed = response["output"].as_array().unwrap().clone();
        streamed.sort_by_key(|i| i["type"] != "reasoning");
        assert_eq!(buffered["output"], json!(streamed));
    }

    #[test]
    fn cut_streams_end_incomplete() {
        let input = openai_stream(&[
            json!({"index": 0, "delta": {"content": "Half"}}),
            json!({"index": 0, "delta": {"refusal": "No."}}),
            json!({"index": 0, "delta": {}, "finish_reason": "length"}),
        ]);
        let (out, t) = run(&OpenAiCompat, &input, &[]);
        let ev = events(&out);
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.content_part.added",
                "response.refusal.delta",
                "response.refusal.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.incomplete",
            ]
        );
        let (items, response) = output_of(&ev);
        assert_eq!(items[0]["status"], "incomplete");
        assert_eq!(
            items[0]["content"],
            json!([{"type": "output_text", "text": "Half", "annotations": [], "logprobs": []},
                {"type": "refusal", "refusal": "No."}])
        );
        assert_eq!(response["status"], "incomplete");
        assert_eq!(
            response["incomplete_details"],
            json!({"reason": "max_output_tokens"})
        );
        let (completion, usage) = chat_answer(&OpenAiCompat, &input);
        assert_eq!(
            t.final_answer().unwrap().body,
            to_response(&completion, &usage, &cx()).unwrap()
        );
    }

    #[test]
    fn an_error_mid_stream_ends_it_failed() {
        let (name, family, _) = FIXTURES[6];
        let (out, t) = run(family.adapter(), &family.input(name), &[]);
        let ev = events(&out);
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        let message = "The operation was cancelled. (CANCELLED)";
        assert_eq!(
            names[..3],
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added"
            ]
        );
        assert_eq!(names[names.len() - 2..], ["error", "response.failed"]);
        assert!(
            !names.contains(&"response.output_item.done"),
            "the open item is left open"
        );
        let n = ev.len() as u64;
        assert_eq!(
            ev[ev.len() - 2].1,
            json!({"type": "error", "sequence_number": n - 2, "code": "upstream_error", "message": message, "param": null})
        );
        let failed = &ev[ev.len() - 1].1["response"];
        assert_eq!(failed["status"], "failed");
        assert_eq!(
            failed["error"],
            json!({"code": "server_error", "message": message})
        );
        assert_eq!(failed["output"], json!([]));
        assert_eq!(t.failed(), Some(message));
        assert_eq!(t.final_answer(), None);
        assert!(!crate::providers::sse::starts_with_error(&out));
    }

    #[test]
    fn an_error_before_anything_comes_first() {
        for input in [
            &b"data: not json\r\n\r\n"[..],
            b"",
            b"data: {\"error\":{\"code\":500,\"message\":\"boom\",\"status\":\"INTERNAL\"}}\r\n\r\n",
        ] {
            let (out, t) = run(&Gemini, input, &[]);
            let ev = events(&out);
            let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["error", "response.failed"]);
            assert!(crate::providers::sse::starts_with_error(&out));
            let message = t.failed().unwrap();
            assert_eq!(ev[0].1["message"], message);
            let stateless = stream_error_frame(Door::Responses, message);
            assert_eq!(
                events(&stateless),
                ev[..1],
                "the stateless frame of the door, numbered 0"
            );
            assert_eq!(t.final_answer(), None);
        }
    }

    #[test]
    fn an_events_body_follows_its_type_and_number() {
        #[derive(Serialize)]
        struct Nothing {}
        #[derive(Serialize)]
        struct Delta<'a> {
            delta: &'a str,
        }
        let (mut w, mut out) = (Writer { seq: 7 }, BytesMut::new());
        w.emit(&mut out, "a", &Nothing {});
        w.emit(&mut out, "b", &Delta { delta: "}{\"" });
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "event: a\ndata: {\"type\":\"a\",\"sequence_number\":7}\n\n\
             event: b\ndata: {\"type\":\"b\",\"sequence_number\":8,\"delta\":\"}{\\\"\"}\n\n"
        );
    }

    #[test]
    fn an_abort_is_numbered_after_what_was_sent() {
        let input = openai_stream(&[json!({"index": 0, "delta": {"content": "Hello"}})]);
        let cut = input.len() / 2;
        let mut t = stream(OpenAiCompat.chat_stream(cx()), cx());
        let mut out = BytesMut::new();
        t.feed(&input[..cut], &mut out);
        let sent = events(&out).len();
        assert!(sent > 2, "{}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&t.abort_frame("connection reset").unwrap());
        let ev = events(&out);
        let names: Vec<&str> = ev[sent..].iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["error", "response.failed"]);
        assert_eq!(ev[sent].1["message"], "connection reset");
        let failed = &ev[sent + 1].1["response"];
        assert_eq!(failed["error"]["message"], "connection reset");
        // Nothing follows the end: not the upstream's rest, not a second abort.
        t.feed(&input[cut..], &mut out);
        t.finish(&mut out);
        assert_eq!(events(&out).len(), sent + 2);
        assert_eq!(t.abort_frame("again").as_deref(), Some(&b""[..]));
        assert_eq!(t.final_answer(), None);

        let (_, mut t) = run(&OpenAiCompat, &input, &[]);
        assert!(t.final_answer().is_some());
        assert_eq!(
            t.abort_frame("late").as_deref(),
            Some(&b""[..]),
            "the stream had ended"
        );
    }

    #[test]
    fn a_blocked_prompt_is_an_incomplete_response_without_output() {
        let blocked = b"data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":7,\"totalTokenCount\":7}}\r\n\r\n";
        let (out, _) = run(&Gemini, blocked, &[]);
        let ev = events(&out);
        let (items, response) = output_of(&ev);
        assert!(items.is_empty());
        assert_eq!(response["status"], "incomplete");
        assert_eq!(response["incomplete_details"]["reason"], "content_filter");
        assert_eq!(response["usage"]["input_tokens"], 7);
    }
}
