//! [`ChatFrames`]: the route adapter's own stream translator under a door's stream, fed one
//! complete upstream line at a time, its chat frames handed to the door one by one.
//!
//! Why lines: a door reads the inner translator's state (its usage so far) while it renders a
//! frame, and the inner translator writes frames as it sees events end. Fed whole lines, it is
//! called the same way whatever the cuts in the upstream's bytes, so every frame arrives with
//! the same state behind it and the door's output never depends on the cuts.

use bytes::BytesMut;

use crate::providers::sse::{find_eol, SseFramer};
use crate::providers::StreamTranslator;

/// The inner translator, fed whole upstream lines; its output framed again.
pub(crate) struct ChatFrames {
    inner: Box<dyn StreamTranslator>,
    /// Upstream bytes after the last complete line (fed to `inner` once the line ends).
    pending: BytesMut,
    /// Where the search for a line end resumes in `pending`.
    scan: usize,
    /// What `inner` wrote, framed again.
    frames: SseFramer,
    scratch: BytesMut,
}

impl ChatFrames {
    pub fn new(inner: Box<dyn StreamTranslator>) -> Self {
        Self {
            inner,
            pending: BytesMut::new(),
            scan: 0,
            frames: SseFramer::default(),
            scratch: BytesMut::new(),
        }
    }

    /// The inner translator (its usage, failure, delivered bytes).
    pub fn inner(&self) -> &dyn StreamTranslator {
        &*self.inner
    }

    /// Feeds upstream bytes; `on_frame(inner, data)` gets the data of every chat frame the
    /// complete lines among them produce, in order, with the inner translator as it was right
    /// after writing it.
    pub fn feed(&mut self, chunk: &[u8], mut on_frame: impl FnMut(&dyn StreamTranslator, &[u8])) {
        self.pending.extend_from_slice(chunk);
        while let Some(next) = line_end(&self.pending, self.scan) {
            let line = self.pending.split_to(next).freeze();
            self.scan = 0;
            self.inner.feed(&line, &mut self.scratch);
            self.drain(&mut on_frame);
        }
        // No line ends before here; a last `\r` is looked at again with the next bytes.
        self.scan = self
            .pending
            .len()
            .saturating_sub(usize::from(self.pending.ends_with(b"\r")));
    }

    /// The upstream ended: the unterminated last line, then the inner translator's own end
    /// (its usage chunk and `[DONE]`, or nothing after an error).
    pub fn finish(&mut self, mut on_frame: impl FnMut(&dyn StreamTranslator, &[u8])) {
        if !self.pending.is_empty() {
            let rest = self.pending.split().freeze();
            self.inner.feed(&rest, &mut self.scratch);
            self.drain(&mut on_frame);
        }
        self.inner.finish(&mut self.scratch);
        self.drain(&mut on_frame);
        if let Some(ev) = self.frames.finish() {
            on_frame(&*self.inner, &ev.data);
        }
    }

    /// Hands out every frame `inner` has written so far.
    fn drain(&mut self, on_frame: &mut impl FnMut(&dyn StreamTranslator, &[u8])) {
        if self.scratch.is_empty() {
            return;
        }
        self.frames.push(&self.scratch);
        self.scratch.clear();
        while let Some(ev) = self.frames.next_event() {
            on_frame(&*self.inner, &ev.data);
        }
    }
}

/// The end (exclusive) of the first complete line at or after `from`: after `\n`, `\r\n`, or
/// a `\r` known not to be the first half of `\r\n`.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let i = from.saturating_add(find_eol(buf.get(from..)?)?);
    match (buf[i], buf.get(i.saturating_add(1))) {
        (b'\r', Some(b'\n')) => Some(i.saturating_add(2)),
        (b'\r', None) => None,
        _ => Some(i.saturating_add(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::fixture;
    use crate::providers::{gemini::Gemini, Adapter};

    /// Every frame's data with the inner usage's input count when it came, for `input` cut at
    /// `cuts`.
    fn frames(input: &[u8], cuts: &[usize]) -> Vec<(u64, Vec<u8>)> {
        let cx = crate::doors::messages::test_support::cx();
        let mut f = ChatFrames::new(Gemini.stream_translator(cx));
        let mut got = Vec::new();
        let mut last = 0;
        for &c in cuts.iter().chain([&input.len()]) {
            f.feed(&input[last..c], |inner, data| {
                got.push((inner.usage().input, data.to_vec()))
            });
            last = c;
        }
        f.finish(|inner, data| got.push((inner.usage().input, data.to_vec())));
        got
    }

    #[test]
    fn frames_and_the_state_behind_them_do_not_depend_on_cuts() {
        let input = fixture("gemini-stream-thinking-2.5-flash-devapi.sse");
        let whole = frames(&input, &[]);
        assert!(whole.len() > 3);
        assert_eq!(whole.last().unwrap().1, b"[DONE]");
        assert!(
            whole[0].0 > 0,
            "the first frame comes with the input counted"
        );
        for cut in 0..=input.len() {
            assert_eq!(frames(&input, &[cut]), whole, "split at {cut}");
        }
        let bytes: Vec<usize> = (1..input.len()).collect();
        assert_eq!(frames(&input, &bytes), whole, "byte by byte");
    }

    #[test]
    fn line_ends_wait_for_what_follows_a_carriage_return() {
        assert_eq!(line_end(b"ab\ncd", 0), Some(3));
        assert_eq!(line_end(b"ab\r\ncd", 0), Some(4));
        assert_eq!(line_end(b"ab\rcd", 0), Some(3));
        assert_eq!(line_end(b"ab\r", 0), None, "maybe the first half of \\r\\n");
        assert_eq!(line_end(b"abc", 0), None);
        assert_eq!(line_end(b"a\nb\n", 2), Some(4));
    }
}
