//! Server-Sent Events, both ways: a push parser for upstream streams and the writer of the
//! client's `data:` frames. Shared by every provider family.
//!
//! The parser accepts LF, CRLF and CR line endings (Gemini separates events with `\r\n\r\n`),
//! skips comments (`: keep-alive`), joins multi-line `data:`, and keeps only the unfinished
//! tail between calls, so any split of the input yields the same events.
//!
//! Lines that are not SSE fields at all (no `data`/`event`/`id`/`retry` name) are ignored by
//! [`SseFramer::next_event`], as the SSE spec says. [`SseFramer::next_item`] hands them out as
//! [`SseItem::Stray`] lines instead, for upstreams that break the format to report a failure
//! (Vertex appends a bare, pretty-printed JSON `{"error": …}` object to a stream).

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use crate::api::chunk::UsageChunk;
use crate::api::{error::envelope, Usage};

/// One parsed upstream event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, if any (Anthropic names every event; Gemini and OpenAI do not).
    pub event: Option<Box<str>>,
    pub data: Bytes,
}

/// What [`SseFramer::next_item`] yields: an event, or one complete line that is not an SSE field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    Event(SseEvent),
    /// A non-SSE line, without its line ending.
    Stray(Bytes),
}

/// Push parser: `push` bytes as they arrive, then drain `next_event` until `None`.
#[derive(Debug, Default)]
pub struct SseFramer {
    buf: BytesMut,
    /// Offset of the first line of the current event not parsed yet.
    scan: usize,
    event: Option<(usize, usize)>,
    data: Vec<(usize, usize)>,
}

impl SseFramer {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event, if one has fully arrived.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            if let SseItem::Event(ev) = self.next_item()? {
                return Some(ev);
            }
        }
    }

    /// The next complete event or stray line, in input order.
    pub fn next_item(&mut self) -> Option<SseItem> {
        while let Some((line_end, next)) = find_line_end(&self.buf, self.scan) {
            let start = self.scan;
            self.scan = next;
            if line_end == start {
                if let Some(ev) = self.take_event(next) {
                    return Some(SseItem::Event(ev));
                }
                continue;
            }
            if self.field(start, line_end) {
                return Some(SseItem::Stray(Bytes::copy_from_slice(
                    &self.buf[start..line_end],
                )));
            }
        }
        None
    }

    /// The upstream ended: a last event not followed by a blank line still counts.
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.finish_items().into_iter().find_map(|item| match item {
            SseItem::Event(ev) => Some(ev),
            SseItem::Stray(_) => None,
        })
    }

    /// Like [`finish`](Self::finish), also yielding an unterminated last stray line
    /// (after the pending event, whose data lines came first).
    pub fn finish_items(&mut self) -> Vec<SseItem> {
        let mut stray = None;
        if self.scan < self.buf.len() {
            let end = self.buf.len();
            let line_end = if self.buf.ends_with(b"\r") {
                end - 1
            } else {
                end
            };
            if self.field(self.scan, line_end) {
                stray = Some(Bytes::copy_from_slice(&self.buf[self.scan..line_end]));
            }
            self.scan = end;
        }
        let end = self.scan;
        let event = self.take_event(end).map(SseItem::Event);
        event.into_iter().chain(stray.map(SseItem::Stray)).collect()
    }

    /// Records one field line; returns true when the line is not an SSE field at all.
    fn field(&mut self, start: usize, end: usize) -> bool {
        let line = &self.buf[start..end];
        if line.first() == Some(&b':') {
            return false;
        }
        let (name, value_at) = match line.iter().position(|&b| b == b':') {
            Some(i) => (
                &line[..i],
                i + 1 + usize::from(line.get(i + 1) == Some(&b' ')),
            ),
            None => (line, line.len()),
        };
        let value = (start + value_at, end);
        match name {
            b"data" => self.data.push(value),
            b"event" => self.event = Some(value),
            b"id" | b"retry" => {}
            _ => return true,
        }
        false
    }

    /// Cuts the finished event (everything before `consumed`) off the buffer.
    fn take_event(&mut self, consumed: usize) -> Option<SseEvent> {
        let frame = if consumed == self.buf.len() {
            // All of it: the allocation leaves with the event, where a split would keep it
            // (shared) for as long as the stream waits for its next chunk.
            std::mem::take(&mut self.buf).freeze()
        } else {
            self.buf.split_to(consumed).freeze()
        };
        self.scan = 0;
        let event = self
            .event
            .take()
            .map(|(s, e)| String::from_utf8_lossy(&frame[s..e]).into());
        let data = match self.data.as_slice() {
            [] => {
                return event.map(|event| SseEvent {
                    event: Some(event),
                    data: Bytes::new(),
                })
            }
            [(s, e)] => frame.slice(*s..*e),
            many => {
                let mut joined = BytesMut::new();
                for (i, (s, e)) in many.iter().enumerate() {
                    if i > 0 {
                        joined.put_u8(b'\n');
                    }
                    joined.extend_from_slice(&frame[*s..*e]);
                }
                joined.freeze()
            }
        };
        self.data.clear();
        Some(SseEvent { event, data })
    }
}

/// Finds the end of the line starting at `from`: (end of content, start of next line).
/// A lone `\r` at the very end may be the first half of `\r\n`, so it waits for more bytes.
fn find_line_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let i = from + find_eol(buf.get(from..)?)?;
    match (buf[i], buf.get(i + 1)) {
        (b'\r', Some(b'\n')) => Some((i, i + 2)),
        (b'\r', None) => None,
        _ => Some((i, i + 1)),
    }
}

/// Where the first `\n` or `\r` of `buf` is. Lines are long (a JSON event each): the bytes
/// are looked at 32 at a time, in a loop without an early exit the compiler vectorises.
pub(crate) fn find_eol(buf: &[u8]) -> Option<usize> {
    const BLOCK: usize = 32;
    let eol = |b: &u8| *b == b'\n' || *b == b'\r';
    let clean = buf
        .chunks_exact(BLOCK)
        .take_while(|block| !block.iter().fold(false, |hit, b| hit | eol(b)))
        .count();
    let from = clean * BLOCK;
    buf[from..].iter().position(eol).map(|i| from + i)
}

/// Appends `data: <json>\n\n`.
pub fn write_json<T: Serialize>(out: &mut BytesMut, value: &T) {
    out.extend_from_slice(b"data: ");
    append_json(out, value);
    out.extend_from_slice(b"\n\n");
}

/// Appends `value` as JSON. Serialising our own structs cannot fail; should it, an empty object
/// keeps the frame well-formed.
pub(crate) fn append_json<T: Serialize>(out: &mut BytesMut, value: &T) {
    if crate::api::json::append(out, value).is_err() {
        out.extend_from_slice(b"{}");
    }
}

/// Appends `data: <raw bytes>\n\n` for a payload that is already JSON.
pub fn write_raw(out: &mut BytesMut, json: &[u8]) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
}

pub fn write_done(out: &mut BytesMut) {
    out.extend_from_slice(b"data: [DONE]\n\n");
}

/// The error-envelope frame sent when a stream fails after it has begun.
pub fn write_error(out: &mut BytesMut, message: &str) {
    write_raw(out, &envelope(message, "upstream_error", "upstream_error"));
}

/// Whether client bytes begin with an error frame (of [`write_error`], or the Messages door's
/// `error` event): nothing came before it.
pub fn starts_with_error(out: &[u8]) -> bool {
    out.starts_with(b"data: {\"error\"") || out.starts_with(b"event: error\n")
}

/// The final chunk every stream ends with: `choices: []` and the populated usage.
pub fn write_usage_chunk(out: &mut BytesMut, end: &UsageChunk<'_>, usage: &Usage) {
    #[derive(Serialize)]
    struct Body<'a> {
        id: &'a str,
        object: &'static str,
        created: i64,
        model: &'a str,
        choices: [(); 0],
        usage: crate::api::usage::OpenAiUsage,
    }
    write_json(
        out,
        &Body {
            id: end.id,
            object: "chat.completion.chunk",
            created: end.created,
            model: end.model,
            choices: [],
            usage: usage.to_openai(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn events(parts: &[&[u8]]) -> Vec<SseEvent> {
        let mut f = SseFramer::default();
        let mut out = Vec::new();
        for p in parts {
            f.push(p);
            while let Some(e) = f.next_event() {
                out.push(e);
            }
        }
        out.extend(f.finish());
        out
    }

    #[test]
    fn a_framer_holds_no_buffer_between_whole_events() {
        // An open stream waits between chunks: its framer must not keep the last chunk's
        // allocation (shared with the event taken from it) for that time.
        let mut f = SseFramer::default();
        f.push(b"data: {\"a\":1}\n\n");
        let event = f.next_event().expect("a whole event");
        assert!(event.data.is_unique(), "the framer still holds the chunk");
        // A partial event stays buffered, and completes.
        f.push(b"data: {\"b\":");
        assert_eq!(f.next_event(), None);
        f.push(b"2}\n\n");
        assert_eq!(&f.next_event().expect("completed").data[..], b"{\"b\":2}");
    }

    #[test]
    fn line_ends_are_found_at_every_offset() {
        for len in 0..100 {
            for at in 0..=len {
                let mut buf = vec![b'x'; len];
                let want = (at < len).then_some(at);
                for end in [b'\n', b'\r'] {
                    if let Some(i) = want {
                        buf[i] = end;
                    }
                    assert_eq!(find_eol(&buf), want, "{len} bytes, an end at {at}");
                }
            }
        }
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(Into::into),
            data: Bytes::copy_from_slice(data.as_bytes()),
        }
    }

    #[test]
    fn parses_every_line_ending_and_field() {
        let input = b"data: a\r\n\r\n: comment\n\nevent: ping\ndata: {\"x\":1}\n\ndata:one\ndata: two\r\rid: 7\ndata: last";
        assert_eq!(
            events(&[input]),
            vec![
                ev(None, "a"),
                ev(Some("ping"), "{\"x\":1}"),
                ev(None, "one\ntwo"),
                ev(None, "last"),
            ]
        );
    }

    #[test]
    fn splits_inside_crlf_do_not_create_events() {
        assert_eq!(
            events(&[b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]),
            vec![ev(None, "a"), ev(None, "b")]
        );
    }

    fn items(parts: &[&[u8]]) -> Vec<SseItem> {
        let mut f = SseFramer::default();
        let mut out = Vec::new();
        for p in parts {
            f.push(p);
            while let Some(i) = f.next_item() {
                out.push(i);
            }
        }
        out.extend(f.finish_items());
        out
    }

    #[test]
    fn stray_lines_are_items_but_not_events() {
        let input: &[u8] = b"data: a\n\n{\n  \"error\": {\"code\": 1}\nid: 3\ndata: b\n\n}";
        let stray = |s: &str| SseItem::Stray(Bytes::copy_from_slice(s.as_bytes()));
        let expected = vec![
            SseItem::Event(ev(None, "a")),
            stray("{"),
            stray("  \"error\": {\"code\": 1}"),
            SseItem::Event(ev(None, "b")),
            stray("}"),
        ];
        assert_eq!(items(&[input]), expected);
        for cut in 0..input.len() {
            assert_eq!(
                items(&[&input[..cut], &input[cut..]]),
                expected,
                "split at {cut}"
            );
        }
        assert_eq!(events(&[input]), vec![ev(None, "a"), ev(None, "b")]);
        assert_eq!(
            items(&[b"data: x\r\n}\r"]),
            vec![SseItem::Event(ev(None, "x")), stray("}")],
            "an unterminated stray line after a pending event comes last"
        );
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_events(cuts in proptest::collection::vec(0usize..200, 0..12)) {
            let input: &[u8] = b"event: a\r\ndata: {\"k\":\"v\"}\r\n\r\n: c\n\ndata: x\ndata: y\n\nevent: b\rdata: z\r\r";
            let whole = events(&[input]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % input.len()).collect();
            cuts.sort_unstable();
            let mut parts = Vec::new();
            let mut last = 0;
            for c in cuts { parts.push(&input[last..c]); last = c; }
            parts.push(&input[last..]);
            prop_assert_eq!(events(&parts), whole);
        }
    }

    #[test]
    fn writes_frames() {
        let mut out = BytesMut::new();
        write_error(&mut out, "boom");
        write_done(&mut out);
        assert_eq!(
            &out[..],
            &b"data: {\"error\":{\"message\":\"boom\",\"type\":\"upstream_error\",\"code\":\"upstream_error\"}}\n\ndata: [DONE]\n\n"[..]
        );
    }
}
