//! [`DoorStream`]: the route adapter's chat stream under a door's own events. The adapter's
//! translator hands its chunks over typed ([`ChatFrame`]), each with the usage counted when it
//! was made; the door renders them ([`DoorEvents`]). Nothing is written as chat JSON to be
//! read back, except the chunks an OpenAI-compatible upstream wrote itself.
//!
//! Output never depends on the cuts in the upstream's bytes: the inner translator makes its
//! chunks as each upstream event ends, whatever the cuts, and the door renders each one then,
//! with the state the inner translator had when it made it.

use bytes::{Bytes, BytesMut};

use crate::api::json;
use crate::api::Usage;
use crate::doors::chat_in::{ChunkChoiceIn, ChunkIn};
use crate::providers::chat_stream::{ChatFrame, ChatSink, ChatStream};
use crate::providers::{StreamTranslator, Translated};

/// A door's rendering of a chat stream.
pub(crate) trait DoorEvents: Send + Sync {
    /// The door's stream has ended (its last event was written): nothing more is.
    fn ended(&self) -> bool;
    /// A chunk: the answer has begun. `choice`: the first choice's part of it, if it has one.
    fn on_chunk(&mut self, choice: Option<ChunkChoiceIn<'_>>, usage: &Usage, out: &mut BytesMut);
    /// The upstream failed after `usage`; nothing follows.
    fn on_error(&mut self, message: &str, usage: &Usage, out: &mut BytesMut);
    /// The upstream ended (after `on_error`, too): the door's closing events.
    fn on_finish(&mut self, usage: &Usage, out: &mut BytesMut);
    /// See [`StreamTranslator::abort_frame`].
    fn abort_frame(&mut self, _message: &str, _usage: &Usage) -> Option<Bytes> {
        None
    }
    /// See [`StreamTranslator::final_answer`].
    fn final_answer(&self) -> Option<Bytes> {
        None
    }
    /// See [`StreamTranslator::usage_close`]: set by `on_finish`.
    fn usage_close(&self) -> Option<usize> {
        None
    }
}

/// A door's events `E` over the chat stream `inner`.
pub struct DoorStream<E> {
    inner: Box<dyn ChatStream>,
    events: E,
    /// A failure of the door's own: a chunk it could not read.
    error: Option<String>,
}

impl<E: DoorEvents> DoorStream<E> {
    pub(crate) fn new(inner: Box<dyn ChatStream>, events: E) -> Self {
        Self {
            inner,
            events,
            error: None,
        }
    }

    fn render<'a>(&'a mut self, out: &'a mut BytesMut) -> (&'a mut dyn ChatStream, Render<'a, E>) {
        let render = Render {
            events: &mut self.events,
            error: &mut self.error,
            out,
        };
        (&mut *self.inner, render)
    }
}

impl<E: DoorEvents> StreamTranslator for DoorStream<E> {
    fn feed(&mut self, chunk: &[u8], out: &mut BytesMut) {
        let (inner, mut render) = self.render(out);
        inner.feed(chunk, &mut render);
    }

    fn finish(&mut self, out: &mut BytesMut) {
        let (inner, mut render) = self.render(out);
        inner.finish(&mut render);
        let usage = self.inner.usage();
        if !self.events.ended() {
            self.events.on_finish(&usage, out);
        }
    }

    fn usage(&self) -> Usage {
        self.inner.usage()
    }

    fn failed(&self) -> Option<&str> {
        self.inner.failed().or(self.error.as_deref())
    }

    fn delivered(&self) -> u64 {
        self.inner.delivered()
    }

    fn abort_frame(&mut self, message: &str) -> Option<Bytes> {
        self.events.abort_frame(message, &self.inner.usage())
    }

    fn final_answer(&self) -> Option<Translated> {
        // The doors render an answer's usage last, as their buffered answers.
        let kept = |body| Translated::usage_last(body, self.inner.usage(), None);
        self.events.final_answer().map(kept)
    }

    fn usage_close(&self) -> Option<usize> {
        self.events.usage_close()
    }
}

/// The door's events as the inner stream's [`ChatSink`].
struct Render<'a, E> {
    events: &'a mut E,
    error: &'a mut Option<String>,
    out: &'a mut BytesMut,
}

impl<E: DoorEvents> ChatSink for Render<'_, E> {
    fn frame(&mut self, frame: ChatFrame<'_>, usage: &Usage) {
        if self.events.ended() {
            return;
        }
        let (events, out) = (&mut *self.events, &mut *self.out);
        match frame {
            ChatFrame::Chunk(chunk) => {
                let choice = ChunkChoiceIn::first_of(chunk);
                events.on_chunk(choice, usage, out);
            }
            ChatFrame::Json(frame) => match json::from_slice::<ChunkIn>(frame) {
                Ok(ChunkIn {
                    error: Some(error), ..
                }) => events.on_error(&error.message(), usage, out),
                Ok(chunk) => {
                    let choice = chunk.choices.into_iter().find(|c| c.index == 0);
                    events.on_chunk(choice, usage, out);
                }
                Err(e) => {
                    let message = format!("upstream stream could not be read: {e}");
                    events.on_error(&message, usage, out);
                    *self.error = Some(message);
                }
            },
            ChatFrame::Usage(_) => events.on_chunk(None, usage, out),
            ChatFrame::Error(message) => events.on_error(message, usage, out),
            ChatFrame::Done => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::chunk::Chunk;
    use crate::doors::charge::{into_body, into_frames, Charge};
    use crate::doors::{messages, responses};
    use crate::money::Usd;
    use crate::providers::test_support::{feed_in_pieces, stream_fixture};
    use crate::providers::{anthropic::Anthropic, gemini::Gemini, ChatAdapter, ResponseCx};

    /// `inner` with every typed chunk handed on as its JSON: the way a door read the chat
    /// translator's output before chunks came typed.
    struct AsJson(Box<dyn ChatStream>);

    struct JsonOut<'a>(&'a mut dyn ChatSink);

    impl ChatSink for JsonOut<'_> {
        fn frame(&mut self, frame: ChatFrame<'_>, usage: &Usage) {
            match frame {
                ChatFrame::Chunk(chunk) => {
                    let json = serde_json::to_vec::<Chunk>(chunk).unwrap();
                    self.0.frame(ChatFrame::Json(&json), usage);
                }
                other => self.0.frame(other, usage),
            }
        }
    }

    impl ChatStream for AsJson {
        fn feed(&mut self, chunk: &[u8], out: &mut dyn ChatSink) {
            self.0.feed(chunk, &mut JsonOut(out));
        }
        fn finish(&mut self, out: &mut dyn ChatSink) {
            self.0.finish(&mut JsonOut(out));
        }
        fn usage(&self) -> Usage {
            self.0.usage()
        }
        fn failed(&self) -> Option<&str> {
            self.0.failed()
        }
        fn delivered(&self) -> u64 {
            self.0.delivered()
        }
    }

    type Door = fn(Box<dyn ChatStream>, ResponseCx) -> Box<dyn StreamTranslator>;

    fn doors() -> [(&'static str, Door, ResponseCx); 2] {
        [
            (
                "messages",
                |inner, cx| Box::new(messages::stream(inner, cx)),
                messages::test_support::cx(),
            ),
            (
                "responses",
                |inner, cx| Box::new(responses::stream(inner, cx)),
                responses::test_support::cx(),
            ),
        ]
    }

    /// Fixtures of both chat families: (adapter, upstream bytes, name).
    fn upstreams() -> Vec<(&'static dyn ChatAdapter, Vec<u8>, &'static str)> {
        let gemini: &'static dyn ChatAdapter = &Gemini;
        let anthropic: &'static dyn ChatAdapter = &Anthropic;
        let cases = [
            (
                gemini,
                "gemini-stream-thinking-2.5-flash-devapi.sse",
                false,
                "\r\n\r\n",
            ),
            (
                gemini,
                "gemini-stream-function-call-thought-signature-2.5-flash-devapi.sse",
                false,
                "\r\n\r\n",
            ),
            (
                gemini,
                "gemini-stream-text-gemini3-pro-devapi.chunks.jsonl",
                false,
                "\r\n\r\n",
            ),
            (
                gemini,
                "gemini-stream-error-mid-stream-vertex.txt",
                false,
                "\r\n\r\n",
            ),
            (
                anthropic,
                "anthropic-stream-thinking.chunks.jsonl",
                true,
                "\n\n",
            ),
            (
                anthropic,
                "anthropic-stream-tool-use.chunks.jsonl",
                true,
                "\n\n",
            ),
            (
                anthropic,
                "anthropic-stream-prompt-cache-server-tool.chunks.jsonl",
                true,
                "\n\n",
            ),
        ];
        cases
            .into_iter()
            .map(|(adapter, name, named, separator)| {
                (adapter, stream_fixture(name, named, separator), name)
            })
            .collect()
    }

    #[test]
    fn typed_chunks_render_as_their_json_would() {
        for (adapter, input, name) in upstreams() {
            for (door, open, cx) in doors() {
                let mut typed = open(adapter.chat_stream(cx.clone()), cx.clone());
                let mut json = open(Box::new(AsJson(adapter.chat_stream(cx.clone()))), cx);
                let out = feed_in_pieces(&mut *typed, &input, &[input.len() / 2]);
                assert!(out.len() > 200, "{door} {name}: {} bytes", out.len());
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    String::from_utf8(feed_in_pieces(&mut *json, &input, &[])).unwrap(),
                    "{door} {name}"
                );
                assert_eq!(typed.usage(), json.usage(), "{door} {name}");
                assert_eq!(typed.failed(), json.failed(), "{door} {name}");
                assert_eq!(typed.final_answer(), json.final_answer(), "{door} {name}");
            }
        }
    }

    #[test]
    fn each_door_says_where_the_charge_goes_in_its_last_frames() {
        let charge = Charge {
            cost: Usd::from_pico(1_500_000),
            id: "gen-1".into(),
        };
        for (adapter, input, name) in upstreams() {
            let chat = (
                "chat",
                adapter.stream_translator(messages::test_support::cx()),
            );
            let doors =
                doors().map(|(door, open, cx)| (door, open(adapter.chat_stream(cx.clone()), cx)));
            for (door, mut t) in doors.into_iter().chain([chat]) {
                let mut out = BytesMut::new();
                t.feed(&input, &mut out);
                let mut last = BytesMut::new();
                t.finish(&mut last);
                let told = t.usage_close();
                if t.failed().is_some() {
                    assert_eq!(told, None, "{door} {name}");
                    continue;
                }
                assert_eq!(last.get(told.unwrap()), Some(&b'}'), "{door} {name}");
                let at_told = into_frames(&last, told, &charge).unwrap();
                let looked_for = into_frames(&last, None, &charge).unwrap();
                assert_eq!(at_told, looked_for, "{door} {name}");
                // The kept copy (the Responses door's) too.
                assert_eq!(t.final_answer().is_some(), door == "responses");
                if let Some(kept) = t.final_answer() {
                    assert_eq!(
                        into_body(&kept.body, kept.usage_close, &charge),
                        into_body(&kept.body, None, &charge),
                        "{door} {name}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_unreadable_chunk_ends_the_doors_stream_as_its_own_failure() {
        struct Garbage;
        impl ChatStream for Garbage {
            fn feed(&mut self, _chunk: &[u8], out: &mut dyn ChatSink) {
                out.frame(ChatFrame::Json(b"{not json"), &Usage::default());
            }
            fn finish(&mut self, out: &mut dyn ChatSink) {
                out.frame(ChatFrame::Done, &Usage::default());
            }
            fn usage(&self) -> Usage {
                Usage::default()
            }
            fn failed(&self) -> Option<&str> {
                None
            }
            fn delivered(&self) -> u64 {
                0
            }
        }
        for (door, open, cx) in doors() {
            let mut t = open(Box::new(Garbage), cx);
            let out = feed_in_pieces(&mut *t, b"x", &[]);
            let text = String::from_utf8(out).unwrap();
            assert!(text.starts_with("event: error\n"), "{door}: {text}");
            assert!(
                t.failed()
                    .unwrap()
                    .starts_with("upstream stream could not be read"),
                "{door}"
            );
        }
    }
}
