//! A fan-out: an adapter asked for several upstream calls (e.g. Gemini embeddings batches).
//! It is a buffered answer (`buffered.rs`) whose attempt sends every call — all of them again on
//! the next route when one fails — and whose answers are [`join`]ed by the answering route's
//! joiner.

use bytes::Bytes;

use super::buffered::Calls;
use super::ctx::Ctx;
use super::failover::Attempt;
use crate::admission::Admitted;
use crate::providers::{FanOut, Joiner, TranslateError, Translated};
use crate::upstream::failure::CallFailure;

/// Each route's plan has its own joiner (Vertex and the Developer API answer apart): the
/// answering route's comes back with its answers.
impl Attempt<FanOut> for Calls<'_> {
    type Answer = (Vec<Bytes>, Joiner);

    async fn attempt(
        &mut self,
        ctx: &mut Ctx,
        admitted: &Admitted,
        plan: FanOut,
    ) -> Result<Self::Answer, CallFailure> {
        let FanOut { calls, join } = plan;
        Ok((self.send(ctx, admitted, calls).await?, join))
    }
}

/// The calls' answers, in call order, joined into the client's answer.
pub(super) fn join(
    answered: (Vec<Bytes>, Joiner),
    a: &Admitted,
) -> Result<Translated, TranslateError> {
    let (bodies, join) = answered;
    join(&bodies, &a.response_cx)
}
