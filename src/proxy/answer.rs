//! Turning a proxied stream's answer into the client's, on the request's context: which
//! translation an answer gets, and each body chunk through it. Only streams are proxied by
//! Pingora (buffered answers are sent by the gateway itself, `fan_out.rs`). No Pingora types
//! here (the phases hand in plain bytes), so every path is a unit test below.

use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::ctx::{Ctx, Translation};
use crate::api::GatewayError;

impl Ctx {
    /// The upstream's response header arrived with `status`: choose the translation. Returns
    /// whether the client gets a stream (a 2xx: an SSE answer), or `None` if the request is not
    /// ours.
    pub fn begin_answer(&mut self, status: u16, at: Instant) -> Option<bool> {
        let a = self.admitted.as_ref()?;
        self.upstream_status = Some(status);
        self.first_byte_at = Some(at);
        let ok = (200..300).contains(&status);
        self.translation = if ok {
            Translation::Stream(a.adapter.stream_translator(a.response_cx.clone()))
        } else {
            Translation::UpstreamError(BytesMut::new())
        };
        Some(ok)
    }

    /// One upstream body chunk (`None` at a bare end) through the translation: the client's
    /// bytes for it. An upstream's error answer gives `None` until its end, then the envelope;
    /// usage and a failure the client is told about are recorded on the context.
    pub fn translate_body(
        &mut self,
        chunk: Option<Bytes>,
        end: bool,
        now: Instant,
    ) -> Option<Bytes> {
        let Some(a) = self.admitted.as_ref() else {
            return chunk;
        };
        match &mut self.translation {
            Translation::None => chunk,
            Translation::Stream(t) => {
                let mut out = BytesMut::new();
                if let Some(chunk) = chunk {
                    t.feed(&chunk, &mut out);
                }
                if end {
                    t.finish(&mut out);
                    if let Some(message) = t.failed() {
                        self.error = Some(GatewayError::MidStream(message.into()));
                    }
                }
                self.usage = t.usage();
                self.delivered = t.delivered();
                if self.first_body_at.is_none() && !out.is_empty() {
                    self.first_body_at = Some(now);
                }
                Some(out.freeze())
            }
            Translation::UpstreamError(buf) => {
                if let Some(chunk) = chunk {
                    buf.extend_from_slice(&chunk);
                }
                if !end {
                    return None;
                }
                self.first_body_at = Some(now);
                let status = self.upstream_status.unwrap_or(502);
                let e = GatewayError::Upstream {
                    status,
                    message: a.adapter.upstream_error_message(status, buf).into(),
                };
                let body = e.envelope();
                self.error = Some(e);
                Some(body)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::admission::tests::World;
    use crate::api::Usage;

    /// A context admitted for a stream on an OpenAI-compatible model (its translator rewrites
    /// ids and model names and reads OpenAI usage).
    fn admitted_ctx() -> Ctx {
        let body =
            r#"{"model":"acme/llama","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let decision = World::new().post("/v1/chat/completions", body).unwrap();
        Ctx {
            admitted: Some(decision.admitted),
            ..Ctx::default()
        }
    }

    #[test]
    fn an_upstream_error_keeps_its_status_in_the_envelope() {
        let mut ctx = admitted_ctx();
        assert_eq!(
            ctx.begin_answer(429, Instant::now()),
            Some(false),
            "no stream"
        );
        let body = Bytes::from(r#"{"error":{"message":"slow down"}}"#);
        let out = ctx
            .translate_body(Some(body), true, Instant::now())
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["error"]["type"], "upstream_error");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("slow down"),
            "{v}"
        );
        assert_eq!(ctx.error.as_ref().map(GatewayError::status), Some(429));
        assert_eq!(ctx.usage, Usage::default(), "an error answer uses nothing");
    }

    #[test]
    fn a_stream_is_translated_as_it_arrives_and_an_in_band_error_is_mid_stream() {
        let mut ctx = admitted_ctx();
        assert_eq!(ctx.begin_answer(200, Instant::now()), Some(true));
        let first = Bytes::from(
            "data: {\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"llama-3\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"he\"}}]}\n\n",
        );
        let out = ctx
            .translate_body(Some(first), false, Instant::now())
            .unwrap();
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert!(
            text.starts_with("data: ") && text.contains("acme/llama"),
            "{text}"
        );
        assert!(ctx.first_body_at.is_some());
        let error = Bytes::from("data: {\"error\":{\"message\":\"overloaded\"}}\n\n");
        let out = ctx
            .translate_body(Some(error), true, Instant::now())
            .unwrap();
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(
            matches!(&ctx.error, Some(GatewayError::MidStream(m)) if m.contains("overloaded")),
            "{:?}",
            ctx.error
        );
    }

    #[test]
    fn answers_that_are_not_ours_pass_through() {
        let mut ctx = Ctx::default();
        assert_eq!(ctx.begin_answer(200, Instant::now()), None);
        let chunk = Bytes::from("as is");
        assert_eq!(
            ctx.translate_body(Some(chunk.clone()), true, Instant::now()),
            Some(chunk)
        );
    }
}
