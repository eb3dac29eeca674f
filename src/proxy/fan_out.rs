//! A fan-out: an adapter asked for several upstream calls (e.g. Gemini embeddings batches).
//! They go together through the failover driver (`failover.rs`) — all of them again on the
//! next route when one fails — and their answers are joined, by the answering route's joiner,
//! into one buffered answer (`buffered.rs`).

use bytes::Bytes;
use pingora_core::protocols::http::ServerSession as Session;

use super::buffered::{self, Calls};
use super::ctx::Ctx;
use super::failover::{Attempt, Failover};
use crate::admission::Admitted;
use crate::providers::{FanOut, Joiner, ResponseCx};
use crate::upstream::client::CallFailure;

/// Sends a fan-out's calls (failing over while an attempt fails), joins their answers and
/// answers the client.
pub(super) async fn answer(
    session: &mut Session,
    ctx: &mut Ctx,
    failover: Failover<'_>,
    plan: FanOut,
) {
    let credentials = failover.outbound.credentials;
    let mut calls = Calls(failover.outbound.client);
    let (admitted, answers) = failover.run(ctx, plan, &mut calls).await;
    let join = |(bodies, join): (Vec<Bytes>, Joiner), cx: &ResponseCx| join(&bodies, cx);
    buffered::write(session, ctx, admitted, credentials, answers, join).await;
}

/// Each route's plan has its own joiner (Vertex and the Developer API answer apart): the
/// answering route's comes back with its answers.
impl Attempt<FanOut> for Calls<'_> {
    type Answer = (Vec<Bytes>, Joiner);

    async fn attempt(
        &mut self,
        _: &mut Ctx,
        admitted: &Admitted,
        plan: FanOut,
    ) -> Result<Self::Answer, CallFailure> {
        let FanOut { calls, join } = plan;
        Ok((self.send(admitted, calls).await?, join))
    }
}
