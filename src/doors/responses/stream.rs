//! A stream for the Responses door: the chat chunks of the route adapter's own translator →
//! the Responses API's events.

use bytes::BytesMut;

use crate::api::Usage;
use crate::providers::{ResponseCx, StreamTranslator};

/// Responses events over the OpenAI frames of `inner`.
pub struct ResponsesStream {
    inner: Box<dyn StreamTranslator>,
}

impl ResponsesStream {
    pub fn new(inner: Box<dyn StreamTranslator>, cx: ResponseCx) -> Self {
        let _ = cx;
        Self { inner }
    }
}

impl StreamTranslator for ResponsesStream {
    fn feed(&mut self, chunk: &[u8], out: &mut BytesMut) {
        let _ = (chunk, out);
    }
    fn finish(&mut self, out: &mut BytesMut) {
        let _ = out;
    }
    fn usage(&self) -> Usage {
        self.inner.usage()
    }
    fn failed(&self) -> Option<&str> {
        Some("the Responses door is not built yet")
    }
}
