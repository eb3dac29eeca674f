//! Failing over: when an attempt failed before anything reached the client (a buffered answer,
//! a stream before its first data frame, every call of a fan-out), the request is planned
//! again for its next eligible route (those not cooling down first), within
//! `upstream.max_attempts` attempts and `upstream.failover_deadline`. Every attempt's outcome
//! feeds its route's breaker. When no attempt is left, the failure the client is told about is
//! the one [`CallFailure::to_report`] prefers (throttling first, the shortest wait).

use std::time::Instant;

use super::ctx::Ctx;
use super::Gateway;
use crate::admission::{Admission, Admitted};
use crate::catalog::Route;
use crate::config::UpstreamConf;
use crate::providers::{FanOut, Plan, UpstreamRequest};
use crate::upstream::client::CallFailure;

pub(super) struct Failover<'a> {
    admission: &'a Admission<'a>,
    body: &'a [u8],
    /// The routes still to try, computed at the first failure.
    routes: Option<std::vec::IntoIter<Route>>,
    reported: Option<CallFailure>,
    deadline: Instant,
    max_attempts: u32,
}

impl<'a> Failover<'a> {
    pub fn new(admission: &'a Admission<'a>, body: &'a [u8], conf: &UpstreamConf) -> Self {
        Failover {
            admission,
            body,
            routes: None,
            reported: None,
            deadline: Instant::now() + conf.failover_deadline,
            max_attempts: conf.max_attempts,
        }
    }

    /// After the attempt on `admitted.route` failed with `failure` before anything reached the
    /// client: the next attempt's request (`admitted.route` is then its route), or the failure
    /// to tell the client.
    pub async fn next(
        &mut self,
        gateway: &Gateway,
        ctx: &mut Ctx,
        admitted: &mut Admitted,
        failure: CallFailure,
    ) -> Result<UpstreamRequest, CallFailure> {
        let proxy = |plan| match plan {
            Plan::Proxy { request, cache } => Some((request, cache)),
            Plan::FanOut(_) => None,
        };
        let (request, cache) = self.next_plan(ctx, admitted, failure, proxy)?;
        Ok(gateway.use_cache(request, cache, admitted).await)
    }

    /// As [`next`](Self::next), for a plan that fans out (Gemini embeddings batches): the
    /// next route's calls, all of them again.
    pub fn next_fan_out(
        &mut self,
        ctx: &mut Ctx,
        admitted: &mut Admitted,
        failure: CallFailure,
    ) -> Result<FanOut, CallFailure> {
        let fan_out = |plan| match plan {
            Plan::FanOut(f) => Some(f),
            Plan::Proxy { .. } => None,
        };
        self.next_plan(ctx, admitted, failure, fan_out)
    }

    /// Records the failure on its route; when another attempt is allowed, moves `admitted` to
    /// the next route whose plan `take` accepts and returns that plan.
    fn next_plan<T>(
        &mut self,
        ctx: &mut Ctx,
        admitted: &mut Admitted,
        failure: CallFailure,
        take: impl Fn(Plan) -> Option<T>,
    ) -> Result<T, CallFailure> {
        record(&admitted.route, &failure);
        // Nobody is waiting for a stream whose client left before it began.
        let exhausted =
            ctx.attempts >= self.max_attempts || Instant::now() >= self.deadline || ctx.client_left;
        if !failure.worth_another_route() || exhausted {
            return Err(CallFailure::to_report(self.reported.take(), failure));
        }
        let (admission, body) = (self.admission, self.body);
        let routes = self
            .routes
            .get_or_insert_with(|| admission.fallbacks(admitted, body).into_iter());
        let next = routes.find_map(|route| {
            let plan = admission.replan(admitted, body, &route).ok()?;
            Some((route, take(plan)?))
        });
        let Some((route, plan)) = next else {
            return Err(CallFailure::to_report(self.reported.take(), failure));
        };
        self.reported = Some(CallFailure::to_report(self.reported.take(), failure));
        tracing::info!(
            request_id = %admitted.request_id,
            from = admitted.route.kind.as_str(),
            to = route.kind.as_str(),
            "failing over"
        );
        // A context cache the failed attempt created stays on the record (Google bills it);
        // one created for the next route replaces it there (not yet summed).
        admitted.route = route;
        ctx.attempts += 1;
        Ok(plan)
    }
}

/// What an attempt's failure says about its route: throttled, failed, or nothing (the
/// request's own fault, e.g. a 400).
fn record(route: &Route, failure: &CallFailure) {
    let now = Instant::now();
    match failure {
        f if f.is_throttled() => route.health.throttled(now, f.retry_after()),
        f if f.worth_another_route() => route.health.failed(now),
        CallFailure::Broken | CallFailure::TooLarge { .. } => route.health.failed(now),
        _ => {}
    }
}
