//! A family's stream translator before its frames are bytes: [`ChatStream`] hands each
//! `chat.completion.chunk` it makes to a [`ChatSink`] as a typed [`ChatFrame`]. The chat door's
//! `ChatSink` is the client's bytes (`BytesMut`: SSE `data:` frames, through [`ChatSse`]); the
//! other doors' render the same frames as their own events, so no door reads back JSON the
//! chat translator wrote.
//!
//! Every frame comes with the usage counted when it was made, so a door that shows counts
//! mid-stream (the Messages door's `message_start`) sees what the chat frames would have said,
//! whatever the cuts in the upstream's bytes.

use bytes::BytesMut;

use super::{sse, ResponseCx, StreamTranslator};
use crate::api::chunk::{Chunk, ChunkChoice, Delta, UsageChunk};
use crate::api::Usage;

/// One frame of a chat stream.
pub enum ChatFrame<'a> {
    /// A chunk of one choice's delta (or its finish reason).
    Chunk(&'a Chunk<'a>),
    /// A chunk that is chat JSON already: an OpenAI-compatible upstream's own, rewritten.
    Json(&'a [u8]),
    /// The last chunk of a stream that completed: no choices, the final usage.
    Usage(&'a UsageChunk<'a>),
    /// The upstream failed in band; only `Done` follows.
    Error(&'a str),
    /// `[DONE]`: the stream's end, after a completion or a failure.
    Done,
}

/// Where a chat stream's frames go.
pub trait ChatSink {
    /// `frame`, with the stream's `usage` counted so far.
    fn frame(&mut self, frame: ChatFrame<'_>, usage: &Usage);
}

/// The chat door's frames: SSE bytes.
impl ChatSink for BytesMut {
    fn frame(&mut self, frame: ChatFrame<'_>, usage: &Usage) {
        match frame {
            ChatFrame::Chunk(chunk) => sse::write_json(self, chunk),
            ChatFrame::Json(json) => sse::write_raw(self, json),
            ChatFrame::Usage(end) => sse::write_usage_chunk(self, end, usage),
            ChatFrame::Error(message) => sse::write_error(self, message),
            ChatFrame::Done => sse::write_done(self),
        }
    }
}

/// Hands choice `index`'s `delta` (and its finish reason) to `out` as a chunk of the answer `cx`
/// names, with the `usage` counted so far.
pub fn send_delta(
    out: &mut dyn ChatSink,
    cx: &ResponseCx,
    index: u32,
    delta: Delta<'_>,
    finish: Option<&'static str>,
    usage: &Usage,
) {
    let chunk = Chunk {
        id: &cx.id,
        object: "chat.completion.chunk",
        created: cx.created,
        model: &cx.model_id,
        choices: [ChunkChoice {
            index,
            delta,
            finish_reason: finish,
        }],
    };
    out.frame(ChatFrame::Chunk(&chunk), usage);
}

/// Hands `out` the chunk that ends choice `index` with `reason`.
pub fn send_finish(
    out: &mut dyn ChatSink,
    cx: &ResponseCx,
    index: u32,
    reason: &'static str,
    usage: &Usage,
) {
    send_delta(out, cx, index, Delta::default(), Some(reason), usage);
}

/// Hands `out` the usage chunk that ends a completed answer (`created`: its chunks' time).
pub fn send_usage(out: &mut dyn ChatSink, cx: &ResponseCx, created: i64, usage: &Usage) {
    let end = UsageChunk {
        id: &cx.id,
        created,
        model: &cx.model_id,
    };
    out.frame(ChatFrame::Usage(&end), usage);
}

/// A family's stream translator, its frames typed (what [`StreamTranslator`] is for the chat
/// door, less what only a door's own rendering knows).
pub trait ChatStream: Send + Sync {
    /// Feeds upstream bytes; every frame they complete goes to `out`, in order.
    fn feed(&mut self, chunk: &[u8], out: &mut dyn ChatSink);
    /// The upstream ended: the final chunks and the usage frame (or only an error), then
    /// `Done`.
    fn finish(&mut self, out: &mut dyn ChatSink);
    /// Usage seen so far.
    fn usage(&self) -> Usage;
    /// The upstream's in-band error, if it sent one.
    fn failed(&self) -> Option<&str>;
    /// Bytes of model output delivered so far (see [`StreamTranslator::delivered`]).
    fn delivered(&self) -> u64;
}

/// A [`ChatStream`] speaking SSE: the chat door's stream translator.
pub struct ChatSse<S> {
    stream: S,
    /// Where the usage chunk's usage closes in what `finish` wrote.
    usage_close: Option<usize>,
}

impl<S> ChatSse<S> {
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            usage_close: None,
        }
    }
}

impl<S: ChatStream> StreamTranslator for ChatSse<S> {
    fn feed(&mut self, chunk: &[u8], out: &mut BytesMut) {
        self.stream.feed(chunk, out);
    }

    fn finish(&mut self, out: &mut BytesMut) {
        let mut end = Ending {
            out,
            usage_close: None,
        };
        self.stream.finish(&mut end);
        self.usage_close = end.usage_close;
    }

    fn usage(&self) -> Usage {
        self.stream.usage()
    }

    fn failed(&self) -> Option<&str> {
        self.stream.failed()
    }

    fn delivered(&self) -> u64 {
        self.stream.delivered()
    }

    fn usage_close(&self) -> Option<usize> {
        self.usage_close
    }
}

/// The client's bytes, noting where the usage chunk's usage closes.
struct Ending<'a> {
    out: &'a mut BytesMut,
    usage_close: Option<usize>,
}

impl ChatSink for Ending<'_> {
    fn frame(&mut self, frame: ChatFrame<'_>, usage: &Usage) {
        let is_usage = matches!(frame, ChatFrame::Usage(_));
        self.out.frame(frame, usage);
        if is_usage {
            // `…,"usage":{…}}\n\n`: the usage is the chunk's last member.
            self.usage_close = self.out.len().checked_sub(4);
        }
    }
}
