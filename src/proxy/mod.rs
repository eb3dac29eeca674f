//! The Pingora `ProxyHttp` implementation: each phase is a few lines that turn the session into
//! plain values and call into the other rooms. This is the only room (with `server`) that
//! imports Pingora.
//!
//! A request's walk: `request_filter` asks [`admission`](crate::admission) about the head
//! (local answers and auth), reads the body, and asks again for the decision and the upstream
//! plan; a cache step is resolved through [`ContextCaches`]; then, for a stream,
//! `upstream_peer` / `upstream_request_filter` / `request_body_filter` send the one request;
//! `response_filter` / `response_body_filter` translate back; `logging` bills the outcome
//! ([`admission::outcome`](crate::admission::outcome)) and writes the access event;
//! `fail_to_proxy` finishes cleanly when the upstream fails.
//!
//! Only streams take Pingora's upstream phases. A buffered request (a fan-out of one call) and
//! a plan that fans out (e.g. Gemini embeddings batches) are sent by `request_filter` itself
//! through the shared [`FanOutClient`]: the answers are read (bounded), joined or translated
//! with the adapter, and answered locally with the status that follows from the translation,
//! leaving `ctx.admitted`, `ctx.usage` and `ctx.error` as a proxied request would for
//! `logging`.

mod answer;
mod body;
mod convert;
pub mod ctx;
mod fan_out;
mod large;
mod logging;
mod respond;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorSource, ErrorType};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};

use crate::admission::{Admission, Admitted, Decision, HeadDecision};
use crate::api::error::Blame;
use crate::api::limits::Limits;
use crate::api::GatewayError;
use crate::auth::KeyCache;
use crate::billing::gates::Accounts;
use crate::billing::writer::LedgerSink;
use crate::catalog::{Catalog, Snapshot};
use crate::config::UpstreamConf;
use crate::providers::{CacheStep, Credentials, Plan, UpstreamRequest};
use crate::sync::Freshness;
use crate::upstream::context_cache::ContextCaches;
use crate::upstream::fan_out::FanOutClient;
use ctx::{Ctx, Proxied, Translation};

/// Pingora's replay buffer; bodies above it take the subrequest path.
const REPLAY_LIMIT: usize = 64 * 1024;

/// Shared, read-mostly state of the proxy.
pub struct Gateway {
    pub catalog: Arc<Catalog>,
    pub keys: Arc<KeyCache>,
    pub credentials: Credentials,
    /// Balances and key spend, for the credit and spend-limit gates.
    pub accounts: Arc<Accounts>,
    /// Where finished requests' usage records go (group-committed off the response path).
    pub ledger: LedgerSink,
    /// Explicit context caches created upstream (Gemini), by prefix.
    pub caches: ContextCaches,
    /// Sends the calls of plans that fan out.
    pub fan_out: FanOutClient,
    pub max_request_body: u64,
    pub upstream: UpstreamConf,
    /// `tollgate.strict_credit`: the unreserved credit must cover a request's worst case.
    pub strict_credit: bool,
    /// `tollgate.max_cache_ttl`: the cap on explicit caches' lifetime.
    pub max_cache_ttl: Duration,
    /// `tollgate.drain_after_disconnect`: streams run as subrequests, so that when their
    /// client leaves the upstream is still read, this long at most, to its final counts.
    pub drain_after_disconnect: Duration,
    /// `tollgate.limits`: what one request may carry.
    pub limits: Limits,
    /// The process is being upgraded or stopped: answers close their connections.
    pub draining: Arc<AtomicBool>,
    /// Counts requests, so that routes of equal priority take turns.
    pub route_turns: AtomicU64,
    /// Asks the change-feed follower for an immediate read, before refusing a key it does not
    /// know or a workspace it thinks has no credit: either may have changed a moment ago.
    pub fresh: Freshness,
}

/// How long a request waits for that read before it is refused anyway.
const FRESH_WAIT: Duration = Duration::from_secs(1);

/// Where `request_filter` goes next.
enum Next {
    /// Answered locally; the request is over.
    Answered,
    /// Proxy through the upstream phases.
    Proxy(Box<Proxied>),
    /// Proxy through a subrequest: the body is too large to replay, or the answer is a stream
    /// to read to its end even if the client leaves.
    HandOff(Box<Proxied>),
}

impl Gateway {
    fn admission<'a>(&'a self, catalog: &'a Snapshot) -> Admission<'a> {
        Admission {
            catalog,
            keys: &self.keys,
            accounts: &self.accounts,
            credentials: &self.credentials,
            strict_credit: self.strict_credit,
            max_cache_ttl: self.max_cache_ttl,
            limits: &self.limits,
            route_turn: self.route_turns.fetch_add(1, Ordering::Relaxed),
        }
    }

    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Next, GatewayError> {
        let catalog = self.catalog.snapshot();
        let admission = self.admission(&catalog);
        let head = match admission.head(&convert::head(session), chrono::Utc::now()) {
            // A key created a moment ago (`tollgate key create` then use) is not refused.
            Err(GatewayError::InvalidKey) if self.fresh.refresh(FRESH_WAIT).await => {
                admission.head(&convert::head(session), chrono::Utc::now())
            }
            head => head,
        };
        let (op, key) = match head? {
            HeadDecision::Answer(body) => {
                self.answer(session, body).await;
                return Ok(Next::Answered);
            }
            HeadDecision::ReadBody { op, key } => (op, key),
        };
        let deadline = self.limits.body_timeout;
        let body =
            tokio::time::timeout(deadline, body::read_bounded(session, self.max_request_body))
                .await
                .map_err(|_| GatewayError::BodyTimeout {
                    secs: deadline.as_secs(),
                })??;
        ctx.body_read = true;
        let decision = match admission.admit(key.clone(), op, &body, chrono::Utc::now()) {
            // Credit added a moment ago admits the next request.
            Err(GatewayError::InsufficientCredit | GatewayError::CreditShort { .. })
                if self.fresh.refresh(FRESH_WAIT).await =>
            {
                admission.admit(key, op, &body, chrono::Utc::now())
            }
            decision => decision,
        };
        let Decision { mut admitted, plan } = decision?;
        let request = match plan {
            Plan::FanOut(plan) => {
                self.run_fan_out(session, ctx, admitted, plan).await;
                return Ok(Next::Answered);
            }
            Plan::Proxy { request, cache } => self.use_cache(request, cache, &mut admitted).await,
        };
        if !admitted.stream {
            // Sent by the gateway itself, so that the answer is read, bounded and translated
            // before its status is chosen: an untranslatable 2xx becomes a 502.
            self.run_buffered(session, ctx, &admission, admitted, request, &body)
                .await;
            return Ok(Next::Answered);
        }
        // A stream: proxied by Pingora, through a subrequest when it is to be read on after
        // its client leaves or its body is too large to replay.
        let drained = !self.drain_after_disconnect.is_zero();
        let proxied = Proxied::new(admitted, request);
        let too_large =
            session.as_downstream().retry_buffer_truncated() || body.len() > REPLAY_LIMIT;
        if too_large || drained {
            return Ok(Next::HandOff(Box::new(proxied)));
        }
        Ok(Next::Proxy(Box::new(proxied)))
    }

    /// Creates (or reuses) the plan's explicit context cache and sends the body naming it; if
    /// creation failed the request goes as planned, its prefix inline.
    /// Caches are the workspace's own: never shared across workspaces.
    async fn use_cache(
        &self,
        mut request: UpstreamRequest,
        cache: Option<CacheStep>,
        admitted: &mut Admitted,
    ) -> UpstreamRequest {
        let Some(step) = cache else {
            return request;
        };
        let key = format!("{} {}", admitted.key.workspace_id, step.key);
        let endpoint = &admitted.route.endpoint;
        let named = self
            .caches
            .name_for(&key, endpoint, step.ttl, step.create)
            .await;
        if let Some(named) = named {
            request.body = (step.body_using)(&named.name);
            admitted.cache_created = named.created;
        }
        request
    }

    async fn answer(&self, session: &mut Session, body: Bytes) {
        if let Err(e) = respond::json(session, 200, body, &[]).await {
            tracing::debug!("writing local answer failed: {e}");
        }
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::default()
    }

    fn allow_spawning_subrequest(&self, session: &Session, _ctx: &Ctx) -> bool {
        !session.as_downstream().is_subrequest()
    }

    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
    ) -> pingora_error::Result<bool> {
        if let Some(proxied) = large::take_handoff(session) {
            ctx.proxy(proxied);
            return Ok(false);
        }
        if self.draining.load(Ordering::Relaxed) {
            session.set_keepalive(None);
        }
        // A client that stops reading cannot hold a connection (and a stream) forever.
        session
            .downstream_session
            .set_write_timeout(Some(self.limits.client_write_timeout));
        match self.admit(session, ctx).await {
            Ok(Next::Proxy(proxied)) => {
                ctx.proxy(*proxied);
                Ok(false)
            }
            Ok(Next::Answered) => Ok(true),
            Ok(Next::HandOff(proxied)) => {
                ctx.handed_off = true;
                large::hand_off(session, *proxied, self.drain_after_disconnect).await?;
                Ok(true)
            }
            Err(e) => {
                if !ctx.body_read {
                    // Unread body: Pingora cannot reuse this connection, so say so.
                    session.set_keepalive(None);
                }
                respond::error(session, &e).await?;
                ctx.error = Some(e);
                Ok(true)
            }
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Ctx,
    ) -> pingora_error::Result<Box<HttpPeer>> {
        let Some(a) = ctx.admitted.as_ref() else {
            return Err(Error::explain(ErrorType::InternalError, "no route decided"));
        };
        let peer = convert::peer(&a.route, &self.upstream)?;
        ctx.upstream_at = Some(Instant::now());
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> pingora_error::Result<()> {
        let (Some(a), Some(up)) = (ctx.admitted.as_ref(), ctx.upstream.as_ref()) else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "no upstream request",
            ));
        };
        *req = convert::upstream_header(a, up)?;
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> pingora_error::Result<()> {
        if let Some(up) = ctx.upstream.as_ref() {
            // Never `None` mid-body: that would end the upstream body early.
            *body = Some(if end_of_stream {
                up.body.clone()
            } else {
                Bytes::new()
            });
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> pingora_error::Result<()> {
        let status = resp.status.as_u16();
        let Some(streaming) = ctx.begin_answer(status, Instant::now()) else {
            return Ok(());
        };
        let id = ctx.admitted.as_ref().map_or("", |a| &a.response_cx.id);
        *resp = respond::answer_header(status, streaming, resp.headers.get("retry-after"), id)?;
        Ok(())
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> pingora_error::Result<Option<Duration>> {
        *body = ctx.translate_body(body.take(), end_of_stream, Instant::now());
        Ok(None)
    }

    /// Clients hanging up are routine, not errors worth an error log line.
    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, error: &Error) -> bool {
        matches!(error.esource(), ErrorSource::Downstream)
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let subrequest = session.as_downstream().is_subrequest();
        let answering =
            session.response_written().is_some() || subrequest && ctx.first_byte_at.is_some();
        let failure = match convert::blame(e) {
            // The client went away: nothing to write, and nothing the upstream did wrong.
            Blame::Client => return convert::closed(0),
            // The client already has a 200: close the stream the specified way.
            _ if answering => convert::mid_stream(e),
            _ => convert::before_answer(e),
        };
        if !subrequest {
            let streaming = matches!(ctx.translation, Translation::Stream(_));
            if let Err(write) = respond::failure(session, &failure, streaming).await {
                tracing::debug!("writing the failure failed: {write}");
            }
        }
        let code = if answering { 0 } else { failure.status() };
        ctx.error = Some(failure);
        convert::closed(code)
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        if ctx.handed_off {
            return; // the subrequest logged and accounted this request
        }
        self.bill(e.map(convert::blame), ctx);
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        logging::access_log(session.req_header().uri.path(), status, ctx);
    }
}
