//! Streamed answers, sent by the gateway's own upstream client so that the whole life of a
//! stream is in one loop:
//!
//! - **Failover before the first data frame.** The client's `200` is held back until the first
//!   translated `data:` frame; an attempt that fails before it (no connection, a timeout, a
//!   429/5xx, an in-band error as the first event, a connection broken before any content) is
//!   retried on the next route (`failover.rs`), and the client sees one clean stream.
//! - **Keep-alive.** While nothing is sent for `upstream.stream_keep_alive` (long thinking, a
//!   failover held back), an SSE comment goes out; the first one commits the `200`, after
//!   which a failure of every route ends the stream with the error frame and `[DONE]`.
//! - **The answer is read after the client leaves**, `drain_after_disconnect` at most, so the
//!   upstream's final counts (Anthropic's output, Vertex Gemini's usage) are what is billed.
//!
//! [`Relay`] is the pure part (translation and the first-frame rule), unit-tested below.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use pingora_core::protocols::http::ServerSession as Session;
use tokio::time::Sleep;

use super::ctx::Ctx;
use super::failover::{client_error, Attempt, Failover, Outbound};
use super::respond;
use super::timing::{Clock, Stamp};
use crate::admission::Admitted;
use crate::api::error::Blame;
use crate::api::{Door, GatewayError};
use crate::doors::charge::{self, Charge};
use crate::providers::{sse, StreamTranslator, UpstreamRequest};
use crate::upstream::client::Answer;
use crate::upstream::failure::CallFailure;

const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";
/// The Messages door's keep-alive once its stream has begun: Anthropic's own `ping` event (a
/// comment before it, since Anthropic's SDKs expect `message_start` as the first event).
const PING: &[u8] = b"event: ping\ndata: {\"type\": \"ping\"}\n\n";

/// One attempt's translation, and whether anything of it may still be taken back.
pub(super) struct Relay {
    translator: Box<dyn StreamTranslator>,
    /// A `data:` frame was produced: from here the stream is the client's.
    committed: bool,
}

/// What one upstream chunk (or the upstream's end) gives the client.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// Bytes for the client (possibly none yet: an incomplete event).
    Send(Bytes),
    /// The attempt failed before its first content: nothing of it goes to the client.
    EarlyEnd(String),
}

impl Step {
    /// The stream's last frames with the request's charge in their usage object, which closes
    /// at `close` when the translator knows where.
    fn charged(self, charge: Option<Charge>, close: Option<usize>) -> Step {
        match (self, charge) {
            (Step::Send(out), Some(charge)) => {
                Step::Send(charge::into_frames(&out, close, &charge).map_or(out, Bytes::from))
            }
            (step, _) => step,
        }
    }
}

/// Room for a translated chunk beyond the upstream's own bytes: a chat chunk's envelope with its
/// usage, or the closing frames.
const OUT_SLACK: usize = 512;

impl Relay {
    pub fn new(translator: Box<dyn StreamTranslator>) -> Self {
        Relay {
            translator,
            committed: false,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Step {
        // About what a chunk translates to: an empty buffer grew by doubling from the first
        // write's six bytes, seven reallocations a chunk.
        let mut out = BytesMut::with_capacity(chunk.len().saturating_add(OUT_SLACK));
        self.translator.feed(chunk, &mut out);
        self.step(out)
    }

    /// The upstream ended cleanly.
    pub fn finish(&mut self) -> Step {
        let mut out = BytesMut::with_capacity(OUT_SLACK);
        self.translator.finish(&mut out);
        self.step(out)
    }

    fn step(&mut self, out: BytesMut) -> Step {
        if !self.committed {
            // An in-band error with no content before it (in this chunk either).
            if let Some(message) = self.translator.failed() {
                if out.is_empty() || sse::starts_with_error(&out) {
                    return Step::EarlyEnd(message.to_owned());
                }
            }
            self.committed = !out.is_empty();
        }
        Step::Send(out.freeze())
    }

    pub fn committed(&self) -> bool {
        self.committed
    }
    /// What the stream has used and delivered so far, into the context (billed even if the
    /// client leaves).
    pub fn count(&self, ctx: &mut Ctx) {
        ctx.usage = self.translator.usage();
        ctx.delivered = self.translator.delivered();
    }
    /// The upstream's in-band error after the stream was committed (it ended with an error
    /// frame).
    pub fn failed(&self) -> Option<&str> {
        self.translator.failed()
    }
}

/// The client's side of a stream: the `200` held back until something is sent, keep-alive
/// comments while nothing is, and whether the client is still there.
struct Client<'s> {
    session: &'s mut Session,
    request_id: Arc<str>,
    door: Door,
    /// When the request's phases happened (kept up to date by the attempts): what the
    /// `Server-Timing` of the `200` (or error) says.
    clock: Clock,
    /// The gateway's time the answer's head reported.
    gateway_time: Option<Duration>,
    header_sent: bool,
    /// Content has been sent (not only keep-alives).
    content_sent: bool,
    left: bool,
    keep_alive: Duration,
    last_write: Instant,
    tick: Pin<Box<Sleep>>,
}

impl<'s> Client<'s> {
    fn new(session: &'s mut Session, ctx: &Ctx, door: Door, keep_alive: Duration) -> Self {
        let now = Instant::now();
        Client {
            session,
            request_id: ctx.request_id.clone(),
            door,
            clock: ctx.clock(),
            gateway_time: None,
            header_sent: false,
            content_sent: false,
            left: false,
            keep_alive,
            last_write: now,
            tick: Box::pin(tokio::time::sleep(keep_alive)),
        }
    }

    /// Writes `bytes` (the `200` first if not yet sent); a failed write means the client left.
    async fn send(&mut self, bytes: Bytes, end: bool) {
        if self.left || (bytes.is_empty() && !end) {
            return;
        }
        if !self.header_sent {
            self.header_sent = true;
            let header = respond::answer_header(200, true, None, &self.stamp());
            let written = match header {
                Ok(h) => self.session.write_response_header(Box::new(h)).await,
                Err(e) => Err(e),
            };
            if written.is_err() {
                self.left = true;
                return;
            }
        }
        self.last_write = Instant::now();
        if self.session.write_response_body(bytes, end).await.is_err() {
            self.left = true;
        }
    }

    /// Tells the client about `e`: the error answer, or, once a keep-alive or content committed
    /// the 200, the stream's own way to fail: `frame` when the translator renders it (the
    /// Responses door numbers its events), else the door's error frame.
    async fn fail(&mut self, e: &GatewayError, retry_after: Option<&str>, frame: Option<Bytes>) {
        if self.header_sent {
            if !self.left {
                let _ = respond::stream_error(self.session, self.door, e, frame).await;
            }
        } else {
            let (door, stamp) = (self.door, self.stamp());
            let _ = respond::error(self.session, door, &stamp, e, retry_after).await;
        }
    }

    /// The answer's head's stamp, as of now.
    fn stamp(&mut self) -> Stamp {
        self.clock.stamp(&self.request_id, &mut self.gateway_time)
    }

    /// What is sent to keep a silent stream alive.
    fn keep_alive_frame(&self) -> &'static [u8] {
        match self.door {
            Door::Messages if self.content_sent => PING,
            _ => KEEP_ALIVE,
        }
    }

    /// Awaits `work`, sending a keep-alive comment whenever nothing was written for the
    /// configured interval. `work` comes pinned by the caller: a future taken by value would
    /// be held twice in this one's state (as its argument and pinned), for a stream's life.
    async fn awaiting<F: std::future::Future>(&mut self, mut work: Pin<&mut F>) -> F::Output {
        loop {
            if self.left || self.keep_alive.is_zero() {
                return work.await;
            }
            tokio::select! {
                done = &mut work => return done,
                () = &mut self.tick => {
                    let due = self.last_write + self.keep_alive;
                    if Instant::now() >= due {
                        // Boxed, as it is rare: the write's state would otherwise be held by
                        // every stream, twice (while opening and while relaying).
                        let frame = Bytes::from_static(self.keep_alive_frame());
                        Box::pin(self.send(frame, false)).await;
                    }
                    let next = self.last_write + self.keep_alive;
                    self.tick.as_mut().reset(next.into());
                }
            }
        }
    }
}

/// A stream's attempts: the client's side, which they share, and what they send through.
struct Streaming<'s> {
    client: Client<'s>,
    outbound: Outbound<'s>,
}

/// Sends a streamed request and relays its answer, failing over until its first data frame.
pub(super) async fn answer(
    session: &mut Session,
    ctx: &mut Ctx,
    failover: &mut Failover<'_>,
    request: UpstreamRequest,
) {
    let door = failover.admitted().door;
    let mut streaming = Streaming::new(session, ctx, door, failover.outbound);
    if let Err(failure) = failover.run(ctx, request, &mut streaming).await {
        let credentials = streaming.outbound.credentials;
        let (e, retry_after) = client_error(failover.admitted(), credentials, failure);
        streaming
            .client
            .fail(&e, retry_after.as_deref(), None)
            .await;
        ctx.error = Some(e);
    }
    ctx.client_left = streaming.client.left;
    ctx.gateway_time = streaming.client.gateway_time;
}

/// An attempt is the client's from its first data frame: `Err` only before it.
impl Attempt<UpstreamRequest> for Streaming<'_> {
    type Answer = ();

    async fn attempt(
        &mut self,
        ctx: &mut Ctx,
        admitted: &Admitted,
        request: UpstreamRequest,
    ) -> Result<(), CallFailure> {
        let endpoint = &admitted.route.endpoint;
        // While this attempt is awaited, a keep-alive that commits the `200` says so.
        self.client.clock = Clock {
            answered_at: None,
            ..ctx.clock()
        };
        let open = self
            .outbound
            .client
            .open(endpoint, request, "text/event-stream");
        // Boxed, and in its own statement: the opening's state (1.6 KB) is gone before the
        // answer is relayed, rather than part of every stream's for its whole life.
        let opened = self.client.awaiting(Box::pin(open).as_mut()).await;
        let relayed = match opened {
            Ok(mut response) => {
                ctx.first_byte_at = Some(Instant::now());
                self.client.clock = ctx.clock();
                ctx.upstream_status = Some(response.status);
                ctx.upstream_request_id = response.request_id.take();
                self.relay(ctx, admitted, response).await
            }
            Err(failure) => Err(failure),
        };
        if let Err(failure) = &relayed {
            ctx.upstream_status = failure.status().or(ctx.upstream_status);
            ctx.client_left = self.client.left;
        }
        relayed
    }
}

impl<'s> Streaming<'s> {
    fn new(session: &'s mut Session, ctx: &Ctx, door: Door, outbound: Outbound<'s>) -> Self {
        let keep_alive = outbound.conf.stream_keep_alive;
        let client = Client::new(session, ctx, door, keep_alive);
        Streaming { client, outbound }
    }

    /// Relays one attempt's answer to the client; after the client left, reads on for
    /// `drain_after_disconnect` at most. `Err`: it failed before its first content.
    async fn relay(
        &mut self,
        ctx: &mut Ctx,
        admitted: &Admitted,
        mut response: Answer,
    ) -> Result<(), CallFailure> {
        let translator = admitted
            .adapter
            .stream_translator(admitted.response_cx.clone());
        let mut relay = Relay::new(translator);
        let mut drain_until = None;
        loop {
            let Some(chunk) = self.next_chunk(&mut response, &mut drain_until).await else {
                ctx.stopped = Some(Blame::Client); // not read to its end
                break;
            };
            let (mut step, end) = match chunk {
                Ok(Some(bytes)) => (relay.feed(&bytes), false),
                Ok(None) => (relay.finish(), true),
                Err(e) if !relay.committed() => return Err(before_content(e)),
                Err(e) => {
                    let e = mid_stream(&e);
                    let frame = relay.translator.abort_frame(&e.to_string());
                    Box::pin(self.client.fail(&e, None, frame)).await; // rare: kept out of the state
                    ctx.error = Some(e);
                    break;
                }
            };
            if end && relay.failed().is_none() {
                relay.count(ctx);
                ctx.client_left = self.client.left;
                let answer = relay.translator.final_answer();
                let answer = answer.as_ref().map(|t| (&t.body, t.usage_close));
                let charge = super::completing(&self.outbound, ctx, admitted, answer);
                step = step.charged(charge, relay.translator.usage_close());
            }
            self.deliver(ctx, admitted, &relay, step, end).await?;
            if end {
                break;
            }
        }
        relay.count(ctx);
        Ok(())
    }

    /// The answer's next chunk; once the client left, only until `drain_until` (`None`: that
    /// time is up).
    async fn next_chunk(
        &mut self,
        response: &mut Answer,
        drain_until: &mut Option<tokio::time::Instant>,
    ) -> Option<Result<Option<Bytes>, CallFailure>> {
        if self.client.left && drain_until.is_none() {
            let drain = self.outbound.drain_after_disconnect;
            *drain_until = Some(tokio::time::Instant::now() + drain);
        }
        match *drain_until {
            Some(until) => tokio::time::timeout_at(until, response.chunk()).await.ok(),
            None => Some(self.client.awaiting(std::pin::pin!(response.chunk())).await),
        }
    }

    /// Sends a step's bytes to the client, the context's counts kept; at the end, records the
    /// in-band error the stream ended with, if any. `Err`: the attempt ended before its first
    /// content.
    async fn deliver(
        &mut self,
        ctx: &mut Ctx,
        admitted: &Admitted,
        relay: &Relay,
        step: Step,
        end: bool,
    ) -> Result<(), CallFailure> {
        let credentials = self.outbound.credentials;
        let out = match step {
            // The upstream's in-band error is in these frames: it may quote the credential it
            // was sent (the error path only, so the copy costs nothing).
            Step::Send(out) if relay.failed().is_some() => credentials.redact_bytes(out),
            Step::Send(out) => out,
            Step::EarlyEnd(message) => return Err(CallFailure::EarlyEnd { message }),
        };
        if relay.committed() && ctx.first_body_at.is_none() {
            ctx.first_body_at = Some(Instant::now());
            admitted.route.health.succeeded();
        }
        relay.count(ctx);
        self.client.content_sent = relay.committed();
        self.client.send(out, end).await;
        if let Some(message) = relay.failed().filter(|_| end) {
            let message = credentials.redact(message);
            ctx.error = Some(GatewayError::MidStream(message.into()));
        }
        Ok(())
    }
}

/// An upstream read failing before the stream's first content: worth another route.
fn before_content(failure: CallFailure) -> CallFailure {
    match failure {
        CallFailure::Timeout => CallFailure::Timeout,
        _ => CallFailure::EarlyEnd {
            message: "upstream failed before any content".into(),
        },
    }
}

/// An upstream read failing after the stream was committed.
fn mid_stream(failure: &CallFailure) -> GatewayError {
    let what = match failure {
        CallFailure::Timeout => "timeout",
        _ => "broken",
    };
    GatewayError::MidStream(format!("upstream failed mid-response: {what}").into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::tests::World;

    /// A relay for a stream admitted on an OpenAI-compatible model (its translator rewrites ids
    /// and model names and passes `data: {"error":…}` on as the error frame).
    fn relay() -> Relay {
        let body =
            r#"{"model":"acme/llama","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let a = World::new()
            .post("/v1/chat/completions", body)
            .unwrap()
            .admitted;
        Relay::new(a.adapter.stream_translator(a.response_cx))
    }

    const CONTENT: &str = "data: {\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"llama-3\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"he\"}}]}\n\n";
    const ERROR: &str = "data: {\"error\":{\"message\":\"overloaded\"}}\n\n";

    fn sent(step: Step) -> String {
        match step {
            Step::Send(b) => String::from_utf8(b.to_vec()).unwrap(),
            Step::EarlyEnd(m) => panic!("early end: {m}"),
        }
    }

    #[test]
    fn content_commits_the_stream_at_every_split_point() {
        let whole = format!("{CONTENT}data: [DONE]\n\n");
        for split in 0..=whole.len() {
            let mut r = relay();
            let mut out = sent(r.feed(&whole.as_bytes()[..split]));
            let complete = split >= CONTENT.len();
            assert_eq!(r.committed(), complete, "split {split}");
            out += &sent(r.feed(&whole.as_bytes()[split..]));
            out += &sent(r.finish());
            assert!(r.committed());
            assert!(out.contains("acme/llama"), "split {split}: {out}");
            assert!(out.ends_with("data: [DONE]\n\n"), "split {split}: {out}");
        }
    }

    #[test]
    fn an_error_before_any_content_ends_the_attempt_unseen() {
        let mut r = relay();
        assert_eq!(
            r.feed(ERROR.as_bytes()),
            Step::EarlyEnd("overloaded".into())
        );
        assert!(!r.committed());
        let mut r = relay();
        assert_eq!(sent(r.feed(&ERROR.as_bytes()[..10])), "");
        assert_eq!(
            r.feed(&ERROR.as_bytes()[10..]),
            Step::EarlyEnd("overloaded".into()),
            "split across reads"
        );
    }

    #[test]
    fn an_error_after_content_is_the_clients_even_in_the_same_read() {
        let mut r = relay();
        let out = sent(r.feed(format!("{CONTENT}{ERROR}").as_bytes()));
        assert!(r.committed());
        assert!(
            out.contains("acme/llama") && out.contains("overloaded"),
            "{out}"
        );
        let out = sent(r.finish());
        assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
        assert_eq!(r.failed(), Some("overloaded"));
    }
}
