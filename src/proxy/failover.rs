//! Failing over: when an attempt failed before anything reached the client, the request is
//! planned again for its next eligible route (those not cooling down first), within
//! `upstream.max_attempts` attempts and `upstream.failover_deadline`. Every attempt's outcome
//! feeds its route's breaker. When no attempt is left, the failure the client is told about is
//! the one [`CallFailure::to_report`] prefers (throttling first, the shortest wait).

use std::time::Instant;

use super::ctx::Ctx;
use super::Gateway;
use crate::admission::{Admission, Admitted};
use crate::catalog::Route;
use crate::config::UpstreamConf;
use crate::providers::{Plan, UpstreamRequest};
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
        let next = routes.find_map(|route| match admission.replan(admitted, body, &route) {
            Ok(Plan::Proxy { request, cache }) => Some((route, request, cache)),
            _ => None,
        });
        let Some((route, request, cache)) = next else {
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
        Ok(gateway.use_cache(request, cache, admitted).await)
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
