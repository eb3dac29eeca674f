//! The failover driver, written once for every way of answering (buffered, streamed, fanned
//! out) and every front door: [`Failover::run`] sends a request's attempts.
//!
//! - An attempt goes to `admitted.route`; its outcome feeds that route's breaker.
//! - An attempt that failed before anything of it reached the client (a buffered answer before
//!   it was read, a stream before its first data frame, any call of a fan-out) hands the request
//!   to its next candidate (`Admission::fallbacks`: its model's other eligible routes, those
//!   not cooling down first, then the routes of the fallback models it listed in `models`, all
//!   within its `provider` preferences), planned again — a fallback model with its own adapter
//!   and the door's translation for it — and its context-cache step taken, within
//!   `upstream.max_attempts` attempts (across models) and `upstream.failover_deadline`, and
//!   never for a client that has left.
//! - When no attempt is left, the failure the client is told about is the one
//!   [`CallFailure::to_report`] prefers (throttling first, the shortest wait), worded by
//!   [`client_error`].
//!
//! The seam: a way of answering is an [`Attempt`] of a kind of [`Call`] (a proxied request, a
//! fan-out's calls). The attempt sends its call and answers the client; its result says whether
//! the client has been committed to (`Ok`) or not (`Err`: the next route may answer). A new
//! front door (another client wire format) implements [`Attempt`] for its own answering:
//!
//! ```text
//! impl Attempt<UpstreamRequest> for MyStream<'_> {
//!     type Answer = ();
//!     async fn attempt(&mut self, ctx, admitted, request) -> Result<(), CallFailure> { … }
//! }
//! let request = failover.ready(planned).await; // the context-cache step
//! let relayed = failover.run(ctx, request, &mut my_stream).await;
//! // Err(failure): tell the client `client_error(failover.admitted(), credentials, failure)`.
//! ```

use std::time::{Duration, Instant};

use super::ctx::Ctx;
use bytes::Bytes;

use crate::admission::{Admission, Admitted, Candidate};
use crate::api::error::Transport;
use crate::api::GatewayError;
use crate::billing::writer::LedgerSink;
use crate::catalog::Route;
use crate::config::UpstreamConf;
use crate::kept::ResponseKeeper;
use crate::providers::{Adapter, CacheStep, Credentials, FanOut, Plan, UpstreamRequest};
use crate::upstream::client::UpstreamClient;
use crate::upstream::context_cache::ContextCaches;
use crate::upstream::failure::CallFailure;

/// One way of answering, as the driver runs it: one attempt per route tried.
pub(super) trait Attempt<C: Call> {
    /// What the attempt that answered hands back to its way of answering.
    type Answer;
    /// Sends `call` to `admitted.route` and answers the client (or begins to). `Err` means
    /// nothing of this attempt reached the client (a stream's keep-alive comments aside), so
    /// another route may still answer; once the client is committed to, the attempt sees the
    /// answer through, whatever happens, and returns `Ok`. An attempt that saw its client
    /// leave says so in `ctx.client_left`: the request is then not failed over.
    async fn attempt(
        &mut self,
        ctx: &mut Ctx,
        admitted: &Admitted,
        call: C,
    ) -> Result<Self::Answer, CallFailure>;
}

/// An admitted request being answered from upstream: the model and route being tried are
/// `admitted`'s; the candidates still to try and the failure to report so far.
pub(super) struct Failover<'a> {
    admission: &'a Admission<'a>,
    /// The client's body (what a fallback model is planned from, as its door serves it).
    client: &'a [u8],
    /// The body the current plan was made from when the door translated the client's.
    translated: Option<Bytes>,
    caches: &'a ContextCaches,
    /// What the attempts send through.
    pub outbound: Outbound<'a>,
    admitted: Admitted,
    /// The candidates still to try, computed at the first failure.
    candidates: Option<std::vec::IntoIter<Candidate>>,
    /// The failure to tell the client about so far.
    reported: Option<CallFailure>,
}

impl<'a> Failover<'a> {
    pub fn new(
        admission: &'a Admission<'a>,
        client: &'a [u8],
        translated: Option<Bytes>,
        caches: &'a ContextCaches,
        outbound: Outbound<'a>,
        admitted: Admitted,
    ) -> Self {
        Failover {
            admission,
            client,
            translated,
            caches,
            outbound,
            admitted,
            candidates: None,
            reported: None,
        }
    }

    /// The call to send for `planned` on the route being tried (a proxied request's
    /// context-cache step taken).
    pub async fn ready<C: Call>(&mut self, planned: C::Planned) -> C {
        C::ready(planned, self.caches, &mut self.admitted).await
    }

    /// The request: its route is the one being tried, or after [`run`](Self::run) the one
    /// that answered (or the last one tried).
    pub fn admitted(&self) -> &Admitted {
        &self.admitted
    }

    /// The request, to be recorded once it is answered.
    pub fn into_admitted(self) -> Admitted {
        self.admitted
    }

    /// Runs `attempt` with `call` on the route being tried, then on the next routes while
    /// attempts fail before reaching the client: the answer, or the failure to tell the client
    /// about.
    pub async fn run<C: Call, A: Attempt<C>>(
        &mut self,
        ctx: &mut Ctx,
        mut call: C,
        attempt: &mut A,
    ) -> Result<A::Answer, CallFailure> {
        let started = Instant::now();
        ctx.upstream_at = Some(started);
        let deadline = started + self.outbound.conf.failover_deadline;
        loop {
            let failure = match attempt.attempt(ctx, &self.admitted, call).await {
                Ok(answer) => return Ok(answer),
                Err(failure) => failure,
            };
            record(&self.admitted.route, &failure);
            if let Some(id) = failure.request_id() {
                ctx.upstream_request_id = Some(id.into());
            }
            // Nobody is waiting for a stream whose client left before it began.
            let exhausted = ctx.attempts >= self.outbound.conf.max_attempts
                || Instant::now() >= deadline
                || ctx.client_left;
            if exhausted || !failure.worth_another_route() {
                let reported = CallFailure::to_report(self.reported.take(), failure);
                return Err(told(ctx, reported));
            }
            let planned = self
                .next_route::<C>(ctx, failure)
                .map_err(|r| told(ctx, r))?;
            call = self.ready(planned).await;
        }
    }

    /// Moves the request to the next candidate whose plan has a `C`, and returns that; `Err`:
    /// there is none, and the failure to report.
    fn next_route<C: Call>(
        &mut self,
        ctx: &mut Ctx,
        failure: CallFailure,
    ) -> Result<C::Planned, CallFailure> {
        let (admission, client, admitted) = (self.admission, self.client, &mut self.admitted);
        let planned_from = self.translated.as_deref().unwrap_or(client);
        let candidates = self
            .candidates
            .get_or_insert_with(|| admission.fallbacks(admitted, planned_from).into_iter());
        let next = candidates.find_map(|to| {
            let replanned = admission.replan(admitted, client, planned_from, &to).ok()?;
            Some((to, replanned.switched, C::planned(replanned.plan)?))
        });
        let reported = CallFailure::to_report(self.reported.take(), failure);
        let Some((to, switched, planned)) = next else {
            return Err(reported);
        };
        self.reported = Some(reported);
        tracing::info!(
            request_id = %admitted.request_id,
            from = admitted.route.kind.as_str(),
            to = to.route.kind.as_str(),
            from_model = %admitted.model.id,
            to_model = %to.model.id,
            "failing over"
        );
        // A context cache the failed attempt created stays on the record (Google bills it);
        // one created for the next route replaces it there (not yet summed).
        admitted.move_to(to);
        if let Some(switched) = switched {
            self.translated = admitted.serve_as(switched);
        }
        ctx.attempts += 1;
        Ok(planned)
    }
}

/// The failure the client is told about, its upstream request id recorded: the id that goes
/// with the error message, for a ticket with the provider. A failure without one (a timeout, a
/// stream that ended before its first content) leaves the id of the last call that had one
/// (each failed attempt's is recorded as it fails).
fn told(ctx: &mut Ctx, reported: CallFailure) -> CallFailure {
    if let Some(id) = reported.request_id() {
        ctx.upstream_request_id = Some(id.into());
    }
    reported
}

/// What one attempt sends, as a route's [`Plan`] has it.
pub(super) trait Call: Sized {
    /// This kind of call's part of a plan.
    type Planned;
    /// `None`: the plan is answered another way (its route is skipped).
    fn planned(plan: Plan) -> Option<Self::Planned>;
    /// The call to send on `admitted.route` (a proxied request's context-cache step taken).
    async fn ready(planned: Self::Planned, caches: &ContextCaches, admitted: &mut Admitted)
        -> Self;
}

/// One request, proxied: its context-cache step is `upstream::context_cache`'s.
impl Call for UpstreamRequest {
    type Planned = (UpstreamRequest, Option<CacheStep>);

    fn planned(plan: Plan) -> Option<Self::Planned> {
        match plan {
            Plan::Proxy { request, cache } => Some((request, cache)),
            Plan::FanOut(_) => None,
        }
    }

    async fn ready(planned: Self::Planned, caches: &ContextCaches, a: &mut Admitted) -> Self {
        let (request, step) = planned;
        let (workspace, endpoint) = (&a.key.workspace_id, &a.route.endpoint);
        caches
            .request_for(workspace, endpoint, request, step, &mut a.cache_created)
            .await
    }
}

/// A fan-out's calls: all of them again on the next route, with that route's joiner.
impl Call for FanOut {
    type Planned = FanOut;

    fn planned(plan: Plan) -> Option<FanOut> {
        match plan {
            Plan::FanOut(f) => Some(f),
            Plan::Proxy { .. } => None,
        }
    }

    async fn ready(planned: FanOut, _: &ContextCaches, _: &mut Admitted) -> Self {
        planned
    }
}

/// What a request's attempts send through, borrowed from the gateway.
#[derive(Clone, Copy)]
pub(super) struct Outbound<'a> {
    pub client: &'a UpstreamClient,
    /// What upstream answers quoted to the client are scrubbed of.
    pub credentials: &'a Credentials,
    pub conf: &'a UpstreamConf,
    /// `tollgate.drain_after_disconnect`: how long a stream is read on after its client left.
    pub drain_after_disconnect: Duration,
    /// Where a Responses answer is kept (before its last byte goes out, so that a client
    /// continuing it at once finds it).
    pub responses: &'a ResponseKeeper,
    /// Where a complete answer's usage record is journaled before its last byte goes out.
    pub ledger: &'a LedgerSink,
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

/// The reported failure as the gateway's error (the transport wording of every upstream call,
/// for every family), and the `Retry-After` the upstream asked for. An upstream's answer is
/// worded by its family's adapter, scrubbed, and rid of this gateway's credentials; when it
/// refused those credentials, its words go to the log and the client is told only that.
pub(super) fn client_error(
    admitted: &Admitted,
    credentials: &Credentials,
    failure: CallFailure,
) -> (GatewayError, Option<String>) {
    let Admitted {
        adapter,
        route,
        request_id,
        ..
    } = admitted;
    upstream_failure(*adapter, route, request_id, credentials, failure)
}

/// [`client_error`] for a call on `route` made without an admitted request (`count_tokens`).
pub(super) fn upstream_failure(
    adapter: &dyn Adapter,
    route: &Route,
    request_id: &str,
    credentials: &Credentials,
    failure: CallFailure,
) -> (GatewayError, Option<String>) {
    match failure {
        CallFailure::Status {
            status,
            body,
            retry_after,
            ..
        } => {
            let message = adapter.upstream_error_message(status, &body);
            let message = credentials.redact(&message);
            let e = GatewayError::upstream_answer(status, &message);
            if let GatewayError::UpstreamCredentials { .. } = e {
                tracing::warn!(
                    request_id = %request_id,
                    route = route.kind.as_str(),
                    upstream = %message,
                    "the upstream refused the gateway's credentials"
                );
            }
            (e, retry_after)
        }
        CallFailure::Timeout => (GatewayError::transport(Transport::Timeout, None), None),
        CallFailure::Connect => (GatewayError::transport(Transport::Connect, None), None),
        CallFailure::Tls { certificate } => {
            let why = if certificate {
                "TLS handshake failed: the upstream's certificate was not accepted"
            } else {
                "TLS handshake failed"
            };
            (GatewayError::transport(Transport::Connect, Some(why)), None)
        }
        CallFailure::TooLarge { limit } => (
            GatewayError::Upstream {
                status: 502,
                message: format!("upstream answer exceeds the limit of {limit} bytes").into(),
            },
            None,
        ),
        CallFailure::Broken => (GatewayError::transport(Transport::Broken, None), None),
        CallFailure::EarlyEnd { message } => (
            GatewayError::Upstream {
                status: 502,
                message: message.into(),
            },
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use bytes::Bytes;

    use super::*;
    use crate::admission::tests::World;
    use crate::admission::Decision;
    use crate::billing::writer::{ledger, LedgerFiles};

    /// An attempt that fails as scripted (then answers), noting each route it was sent to.
    struct Scripted {
        failures: VecDeque<CallFailure>,
        routes: Vec<String>,
        client_leaves: bool,
    }

    impl Attempt<UpstreamRequest> for Scripted {
        type Answer = ();

        async fn attempt(
            &mut self,
            ctx: &mut Ctx,
            admitted: &Admitted,
            _: UpstreamRequest,
        ) -> Result<(), CallFailure> {
            self.routes.push(admitted.route.endpoint.base_path.clone());
            ctx.client_left = self.client_leaves;
            self.failures.pop_front().map_or(Ok(()), Err)
        }
    }

    fn status(status: u16) -> CallFailure {
        CallFailure::Status {
            status,
            body: Bytes::new(),
            retry_after: None,
            request_id: None,
        }
    }

    /// A chat on `acme/twin` (routes `/a`, then `/b`) through the driver, its attempts failing
    /// with `failures`: the routes tried, the attempts counted, and the status reported
    /// (`Err(None)`: a failure without one).
    fn drive(
        conf: UpstreamConf,
        client_leaves: bool,
        failures: Vec<CallFailure>,
    ) -> (Vec<String>, u32, Result<(), Option<u16>>) {
        let (routes, ctx, result) = drive_with_ctx(conf, client_leaves, failures);
        (routes, ctx.attempts, result)
    }

    /// [`drive`], with the request's `Ctx` after it.
    fn drive_with_ctx(
        conf: UpstreamConf,
        client_leaves: bool,
        failures: Vec<CallFailure>,
    ) -> (Vec<String>, Ctx, Result<(), Option<u16>>) {
        let body = r#"{"model":"acme/twin","messages":[{"role":"user","content":"hi"}]}"#;
        let (routes, ctx, _, result) = drive_body(body, conf, client_leaves, failures);
        (routes, ctx, result)
    }

    /// [`drive_with_ctx`] for a chat `body`, with the model that answered (or was tried last).
    fn drive_body(
        body: &str,
        conf: UpstreamConf,
        client_leaves: bool,
        failures: Vec<CallFailure>,
    ) -> (Vec<String>, Ctx, String, Result<(), Option<u16>>) {
        let world = World::new();
        let Decision { admitted, plan, .. } = world.post("/v1/chat/completions", body).unwrap();
        let (request, _) = UpstreamRequest::planned(plan).unwrap();
        let (admission, caches) = (world.admission(), ContextCaches::default());
        let (client, credentials) = (UpstreamClient::new(&conf).unwrap(), Credentials::default());
        let (responses, _writer) = ResponseKeeper::new(Duration::ZERO, String::new());
        let spool = tempfile::tempdir().unwrap();
        let files = LedgerFiles {
            spool: spool.path().join("spool"),
            journal: None,
        };
        let (ledger, _writer) = ledger(files, Default::default()).unwrap();
        let outbound = Outbound {
            client: &client,
            credentials: &credentials,
            conf: &conf,
            drain_after_disconnect: Duration::ZERO,
            responses: &responses,
            ledger: &ledger,
        };
        let mut failover = Failover::new(
            &admission,
            body.as_bytes(),
            None,
            &caches,
            outbound,
            admitted,
        );
        let (mut ctx, mut attempt) = (
            Ctx::default(),
            Scripted {
                failures: failures.into(),
                routes: Vec::new(),
                client_leaves,
            },
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = runtime.block_on(failover.run(&mut ctx, request, &mut attempt));
        let result = result.map_err(|f| f.status());
        let model = failover.admitted().model.id.to_string();
        (attempt.routes, ctx, model, result)
    }

    fn with_id(failure: CallFailure, id: &str) -> CallFailure {
        match failure {
            CallFailure::Status {
                status,
                body,
                retry_after,
                ..
            } => CallFailure::Status {
                status,
                body,
                retry_after,
                request_id: Some(id.into()),
            },
            other => other,
        }
    }

    #[test]
    fn the_reported_failures_upstream_id_is_recorded() {
        let failures = vec![
            with_id(status(429), "req_429"),
            with_id(status(503), "req_503"),
        ];
        let (_, ctx, result) = drive_with_ctx(UpstreamConf::default(), false, failures);
        assert_eq!(result, Err(Some(429)));
        assert_eq!(ctx.upstream_request_id.as_deref(), Some("req_429"));
        let failures = vec![with_id(status(503), "req_503"), CallFailure::Timeout];
        let (_, ctx, result) = drive_with_ctx(UpstreamConf::default(), false, failures);
        assert_eq!(result, Err(None));
        assert_eq!(
            ctx.upstream_request_id.as_deref(),
            Some("req_503"),
            "a failure without an id keeps the last one seen"
        );
    }

    #[test]
    fn an_attempt_failing_before_the_client_is_answered_by_the_next_route() {
        let (routes, attempts, result) = drive(UpstreamConf::default(), false, vec![status(503)]);
        assert_eq!(routes, ["/a", "/b"]);
        assert_eq!((attempts, result), (2, Ok(())));
    }

    #[test]
    fn the_requests_own_fault_is_not_failed_over() {
        let (routes, attempts, result) = drive(UpstreamConf::default(), false, vec![status(400)]);
        assert_eq!(routes, ["/a"]);
        assert_eq!((attempts, result), (1, Err(Some(400))));
    }

    #[test]
    fn when_every_route_fails_the_throttling_is_reported() {
        let failures = vec![status(429), status(503)];
        let (routes, attempts, result) = drive(UpstreamConf::default(), false, failures);
        assert_eq!(routes, ["/a", "/b"]);
        assert_eq!((attempts, result), (2, Err(Some(429))));
    }

    #[test]
    fn no_route_is_tried_past_the_limits_or_for_a_client_that_left() {
        let once = UpstreamConf {
            max_attempts: 1,
            ..UpstreamConf::default()
        };
        let late = UpstreamConf {
            failover_deadline: Duration::ZERO,
            ..UpstreamConf::default()
        };
        for (conf, client_leaves) in [(once, false), (late, false), (Default::default(), true)] {
            let (routes, _, result) = drive(conf, client_leaves, vec![CallFailure::Timeout]);
            assert_eq!(
                (routes.len(), result),
                (1, Err(None)),
                "leaves: {client_leaves}"
            );
        }
    }

    /// `acme/twin` (routes `/a`, `/b`), then `acme/llama` (its resolved route `/v1`).
    const TWIN_THEN_LLAMA: &str = r#"{"model":"acme/twin","models":["acme/llama"],"messages":[{"role":"user","content":"hi"}]}"#;

    #[test]
    fn when_a_models_routes_fail_the_next_model_answers_within_the_same_limits() {
        let conf = UpstreamConf::default;
        let failures = vec![status(503), status(503)];
        let (routes, ctx, model, result) = drive_body(TWIN_THEN_LLAMA, conf(), false, failures);
        assert_eq!(routes, ["/a", "/b", "/v1"]);
        assert_eq!((ctx.attempts, result), (3, Ok(())));
        assert_eq!(
            model, "acme/llama",
            "billed and named as the model that answered"
        );
        let two = UpstreamConf {
            max_attempts: 2,
            ..conf()
        };
        let failures = vec![status(503), status(503)];
        let (routes, _, model, result) = drive_body(TWIN_THEN_LLAMA, two, false, failures);
        assert_eq!((routes.len(), result), (2, Err(Some(503))));
        assert_eq!(model, "acme/twin");
        // The request's own fault is not another model's chance either.
        let (routes, _, _, result) = drive_body(TWIN_THEN_LLAMA, conf(), false, vec![status(400)]);
        assert_eq!((routes, result), (vec!["/a".to_owned()], Err(Some(400))));
        let (routes, _, _, _) = drive_body(TWIN_THEN_LLAMA, conf(), true, vec![status(503)]);
        assert_eq!(routes, ["/a"], "nor is a client that left");
    }

    #[test]
    fn without_fallbacks_the_next_model_is_tried_on_its_best_route_only() {
        let body = r#"{"model":"acme/llama","models":["acme/twin"],"provider":{"allow_fallbacks":false},"messages":[{"role":"user","content":"hi"}]}"#;
        let failures = vec![status(503), status(503)];
        let (routes, _, model, result) = drive_body(body, UpstreamConf::default(), false, failures);
        assert_eq!(routes, ["/v1", "/a"]);
        assert_eq!((model.as_str(), result), ("acme/twin", Err(Some(503))));
    }
}
