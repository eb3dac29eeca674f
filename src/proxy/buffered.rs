//! The ordinary way of answering: a buffered answer. Its calls go through the failover driver
//! (`failover.rs`), their answers are read whole (bounded by `upstream.max_answer_body`) and
//! translated (or joined) before the status is chosen, then written at once. A chat or a
//! single embeddings call is one call, [`translate`]d; a fan-out is several, joined
//! (`fan_out.rs`).

use std::time::Instant;

use bytes::Bytes;
use pingora_core::protocols::http::ServerSession as Session;

use super::ctx::Ctx;
use super::failover::{client_error, Attempt, Call, Failover, Outbound};
use super::respond;
use super::timing::Stamp;
use crate::admission::Admitted;
use crate::api::GatewayError;
use crate::doors::charge::{self, Charge};
use crate::providers::{Credentials, TranslateError, Translated, UpstreamRequest};
use crate::upstream::client::UpstreamClient;
use crate::upstream::failure::CallFailure;

/// Sends `call` (failing over while its attempts fail) and answers the client with `join` of
/// its answers.
pub(super) async fn answer<'a, C: Call, T>(
    session: &mut Session,
    ctx: &mut Ctx,
    failover: &mut Failover<'a>,
    call: C,
    join: impl FnOnce(T, &Admitted) -> Result<Translated, TranslateError>,
) where
    Calls<'a>: Attempt<C, Answer = T>,
{
    let outbound = failover.outbound;
    let answers = failover.run(ctx, call, &mut Calls(outbound.client)).await;
    let admitted = failover.admitted();
    write(session, ctx, admitted, outbound, answers, join).await;
}

/// The join of a single call: the adapter's translation of its answer.
pub(super) fn translate(bodies: Vec<Bytes>, a: &Admitted) -> Result<Translated, TranslateError> {
    let body = bodies.first().map_or(&[][..], |b| &b[..]);
    a.adapter.translate_buffered(body, &a.response_cx)
}

/// Attempts that send their calls and read every answer whole.
pub(super) struct Calls<'a>(pub &'a UpstreamClient);

impl Calls<'_> {
    /// Every call's answer, in call order (their success recorded on the route), or the first
    /// failure.
    pub async fn send(
        &self,
        ctx: &mut Ctx,
        admitted: &Admitted,
        calls: Vec<UpstreamRequest>,
    ) -> Result<Vec<Bytes>, CallFailure> {
        let answered = self.0.run(&admitted.route.endpoint, calls).await?;
        admitted.route.health.succeeded();
        ctx.upstream_request_id = answered.request_id;
        Ok(answered.bodies)
    }
}

/// Nothing reaches the client before the answer is read whole: every failure may fail over.
impl Attempt<UpstreamRequest> for Calls<'_> {
    type Answer = Vec<Bytes>;

    async fn attempt(
        &mut self,
        ctx: &mut Ctx,
        admitted: &Admitted,
        request: UpstreamRequest,
    ) -> Result<Vec<Bytes>, CallFailure> {
        self.send(ctx, admitted, vec![request]).await
    }
}

/// Answers the client with `join` of the answers, or with the failure the driver reported;
/// records in `ctx` what `logging` needs (upstream status, usage or error).
async fn write<T>(
    session: &mut Session,
    ctx: &mut Ctx,
    admitted: &Admitted,
    outbound: Outbound<'_>,
    answers: Result<T, CallFailure>,
    join: impl FnOnce(T, &Admitted) -> Result<Translated, TranslateError>,
) {
    ctx.first_byte_at = Some(Instant::now());
    let (outcome, retry_after) = outcome(ctx, admitted, outbound.credentials, answers, join);
    let written = match outcome {
        Ok(t) => {
            ctx.usage = t.usage;
            if let Some(id) = t.upstream_id {
                ctx.upstream_request_id = Some(id);
            }
            ctx.first_body_at = Some(Instant::now());
            let answer = (&t.body, t.usage_close);
            let charge = super::completing(&outbound, ctx, admitted, Some(answer));
            charged(session, &ctx.stamp(), t.body, t.usage_close, charge).await
        }
        Err(e) => {
            let (retry_after, stamp) = (retry_after.as_deref(), ctx.stamp());
            let written = respond::error(session, admitted.door, &stamp, &e, retry_after).await;
            ctx.error = Some(e);
            written
        }
    };
    if let Err(e) = written {
        tracing::debug!("writing a buffered answer failed: {e}");
    }
}

/// Writes a 200 answer with its charge in the body's usage object and in headers
/// (`x-tollgate-cost`, `x-tollgate-generation-id`), for clients that read neither.
async fn charged(
    session: &mut Session,
    stamp: &Stamp,
    body: Bytes,
    usage_close: Option<usize>,
    charge: Option<Charge>,
) -> pingora_error::Result<()> {
    let Some(charge) = charge else {
        return respond::json(session, stamp, 200, body, &[]).await;
    };
    let body = charge::into_body(&body, usage_close, &charge).map_or(body, Bytes::from);
    let cost = charge.cost.to_string();
    let headers = [
        (respond::X_TOLLGATE_COST, cost.as_str()),
        (respond::X_TOLLGATE_GENERATION_ID, charge.id.as_str()),
    ];
    respond::json(session, stamp, 200, body, &headers).await
}

/// The client's answer (or error, and the upstream's `Retry-After`), and the upstream status.
fn outcome<T>(
    ctx: &mut Ctx,
    admitted: &Admitted,
    credentials: &Credentials,
    answers: Result<T, CallFailure>,
    join: impl FnOnce(T, &Admitted) -> Result<Translated, TranslateError>,
) -> (Result<Translated, GatewayError>, Option<String>) {
    match answers {
        Ok(answers) => {
            ctx.upstream_status = Some(200);
            let joined = join(answers, admitted);
            let untranslatable = |e: TranslateError| GatewayError::Upstream {
                status: 502,
                message: e.to_string().into(),
            };
            (joined.map_err(untranslatable), None)
        }
        Err(failure) => {
            ctx.upstream_status = failure.status().or(ctx.upstream_status);
            let (e, retry_after) = client_error(admitted, credentials, failure);
            (Err(e), retry_after)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::tests::World;
    use crate::providers::Secret;

    fn outcome_of(
        answers: Result<Vec<Bytes>, CallFailure>,
    ) -> (
        Option<u16>,
        Result<Translated, GatewayError>,
        Option<String>,
    ) {
        let body = r#"{"model":"acme/llama","messages":[{"role":"user","content":"hi"}]}"#;
        let admitted = World::new()
            .post("/v1/chat/completions", body)
            .unwrap()
            .admitted;
        let credentials = Credentials {
            openai: Some(Secret::new("sec-dummy-openai")),
            ..Credentials::default()
        };
        let mut ctx = Ctx::default();
        let (answer, retry_after) = outcome(&mut ctx, &admitted, &credentials, answers, translate);
        (ctx.upstream_status, answer, retry_after)
    }

    #[test]
    fn an_answer_is_translated_and_an_untranslatable_one_is_a_502() {
        let answer = r#"{"id":"up","object":"chat.completion","created":1,"model":"llama-3","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;
        let (status, translated, _) = outcome_of(Ok(vec![Bytes::from(answer)]));
        assert_eq!(status, Some(200));
        let body = translated.unwrap().body;
        assert!(std::str::from_utf8(&body).unwrap().contains("acme/llama"));
        let (status, translated, _) = outcome_of(Ok(vec![Bytes::from_static(b"{nope")]));
        assert_eq!(status, Some(200));
        assert_eq!(translated.err().map(|e| e.status()), Some(502));
    }

    #[test]
    fn a_failed_call_keeps_its_status_and_wait_and_loses_the_credential() {
        let failure = CallFailure::Status {
            status: 429,
            body: Bytes::from_static(br#"{"error":{"message":"slow down, sec-dummy-openai"}}"#),
            retry_after: Some("7".into()),
            request_id: None,
        };
        let (status, answer, retry_after) = outcome_of(Err(failure));
        assert_eq!((status, retry_after.as_deref()), (Some(429), Some("7")));
        let e = answer.err().unwrap();
        assert_eq!(e.status(), 429);
        assert!(!e.to_string().contains("sec-dummy-openai"), "{e}");
        let (status, answer, _) = outcome_of(Err(CallFailure::Timeout));
        assert_eq!(
            (status, answer.err().map(|e| e.status())),
            (None, Some(504))
        );
    }
}
