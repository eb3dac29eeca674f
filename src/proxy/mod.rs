//! The gateway as a Pingora HTTP application ([`HttpServerApp`]): a few lines that turn the
//! session into plain values and call into the other rooms. This is the only room (with
//! `server`) that imports Pingora.
//!
//! A request's walk, all of it in [`Gateway::respond`] and `admit` (the ordinary chat request
//! goes 1, 2, 3 with `buffered.rs`, 4):
//!
//! 1. [`admission`](crate::admission) decides about the head (local answers, auth),
//!    `body::read_within` reads the body, and admission decides again: the admitted request
//!    and its upstream [`Plan`].
//! 2. The failover driver (`failover.rs`) takes the request; a proxied plan's context-cache
//!    step is taken ([`ContextCaches`]).
//! 3. One way of answering, each a plain function over the session: `buffered.rs` (the answer
//!    read whole, bounded, translated, then written), `stream.rs` (relayed as it arrives) or
//!    `fan_out.rs` (several calls joined into a buffered answer). Each runs its attempts
//!    through the driver, which moves the request to the model's other routes, then to the
//!    fallback models the request listed (`models`), while nothing has reached the client.
//! 4. `logging`: bills the outcome ([`admission::outcome`](crate::admission::outcome)) and
//!    writes the metrics and the access event.
//!
//! Pingora serves the connections (HTTP/1.1 keep-alive, h2, timeouts, graceful shutdown), but
//! its proxy (`pingora-proxy`'s `ProxyHttp`) is not used: holding a stream's `200` until its
//! first data frame (so that it can fail over), keep-alive comments while it is silent, and
//! reading it on after its client left all need the whole stream in one loop, so the gateway
//! sends upstream calls itself through the shared [`UpstreamClient`]. With the proxy's phases
//! unused, its per-request future (its cache and upstream states, about 15 KB) was held by
//! every open stream for nothing.

pub mod body;
mod buffered;
mod convert;
mod count;
pub mod ctx;
mod failover;
mod fan_out;
pub mod listener;
mod logging;
pub mod proxy_protocol;
mod respond;
mod stream;
mod timing;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora_core::apps::{HttpServerApp, ReusedHttpStream};
use pingora_core::protocols::http::ServerSession as Session;
use pingora_core::server::ShutdownWatch;

use crate::admission::{self, Admission, Decision, HeadDecision};
use crate::api::error::Blame;
use crate::api::limits::Limits;
use crate::api::{Door, GatewayError};
use crate::auth::KeyCache;
use crate::billing::gates::Accounts;
use crate::billing::writer::LedgerSink;
use crate::catalog::{Catalog, Snapshot};
use crate::client_addr::TrustedProxies;
use crate::config::UpstreamConf;
use crate::doors::charge::Charge;
use crate::doors::forward::AnthropicHeaders;
use crate::doors::responses;
use crate::kept::ResponseKeeper;
use crate::providers::{Credentials, Plan};
use crate::store::StoredResponse;
use crate::sync::Freshness;
use crate::upstream::client::UpstreamClient;
use crate::upstream::context_cache::ContextCaches;
use ctx::Ctx;
use failover::{Failover, Outbound};

/// `/v1/generation` looks a record up from a day before the time its id encodes (replicas'
/// clocks may disagree)…
const GENERATION_BEFORE_ID: chrono::TimeDelta = chrono::TimeDelta::days(1);
/// …to a week after it, far past the longest request (a stream read on to its end).
const GENERATION_AFTER_ID: chrono::TimeDelta = chrono::TimeDelta::days(7);

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
    /// Sends every planned upstream call.
    pub client: UpstreamClient,
    pub max_request_body: u64,
    pub upstream: UpstreamConf,
    /// `tollgate.strict_credit`: the unreserved credit must cover a request's worst case.
    pub strict_credit: bool,
    /// `tollgate.waive_empty_failures`: a request with no output that failed costs nothing.
    pub waive_empty_failures: bool,
    /// `tollgate.max_cache_ttl`: the cap on explicit caches' lifetime.
    pub max_cache_ttl: Duration,
    /// `tollgate.drain_after_disconnect`: when a stream's client leaves, its upstream is still
    /// read, this long at most, to its final counts.
    pub drain_after_disconnect: Duration,
    /// `tollgate.limits`: what one request may carry.
    pub limits: Limits,
    /// `tollgate.providers.anthropic.betas`: what the Messages door passes to Claude.
    pub anthropic_betas: Vec<String>,
    /// The process is being upgraded or stopped: answers close their connections.
    pub draining: Arc<AtomicBool>,
    /// Counts requests, so that routes of equal priority take turns.
    pub route_turns: AtomicU64,
    /// The store, opened on first use (`/v1/generation` only: nothing on the request path
    /// reads the database).
    pub store: tokio::sync::OnceCell<Arc<dyn crate::store::Store>>,
    /// Where `/v1/generation` reads: `tollgate.store_read_url` when set, else the store.
    pub read_store_url: String,
    /// Asks the change-feed follower for an immediate read, before refusing a key it does not
    /// know or a workspace it thinks has no credit: either may have changed a moment ago.
    pub fresh: Freshness,
    /// The Responses door's kept answers: what `previous_response_id` continues and
    /// `/v1/responses/{id}` reads (a lookup reads the store only for an answer no longer in
    /// memory; keeping one never waits for it).
    pub responses: Arc<ResponseKeeper>,
    /// `tollgate.trusted_proxies`: whose `Forwarded` / `X-Forwarded-For` names the client.
    pub trusted_proxies: Arc<TrustedProxies>,
}

/// How long a request waits for that read before it is refused anyway.
const FRESH_WAIT: Duration = Duration::from_secs(1);

impl Gateway {
    /// Answers one request (`closing`: and closes the connection after it); `Err`: the
    /// gateway's own error answer could not be written.
    async fn respond(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        closing: bool,
    ) -> pingora_error::Result<()> {
        let sent_id = session.req_header().headers.get("x-request-id");
        ctx.client_request_id = admission::client_request_id(sent_id.map(|v| v.as_bytes()));
        ctx.request_id =
            (ctx.client_request_id.clone()).unwrap_or_else(admission::local_request_id);
        ctx.door = admission::door_of(session.req_header().uri.path());
        ctx.client_addr = listener::client_addr(session, &self.trusted_proxies);
        listener::keep_alive(session, self.limits.idle_timeout, closing);
        // A client that stops reading cannot hold a connection (and a stream) forever.
        session.set_write_timeout(Some(self.limits.client_write_timeout));
        if let Err(e) = self.admit(session, ctx).await {
            if !ctx.body_read {
                // Unread body: Pingora cannot reuse this connection, so say so.
                session.set_keepalive(None);
            }
            let stamp = ctx.stamp();
            respond::error(session, ctx.door, &stamp, &e, None).await?;
            ctx.error = Some(e);
        }
        Ok(())
    }

    /// Answers the request (locally, or from its upstream); `Err`: the error to answer with.
    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<(), GatewayError> {
        let catalog = self.catalog.snapshot();
        let mut admission = self.admission(&catalog, session, ctx);
        let (op, key) = match self.head(session, ctx, &admission).await? {
            Some(HeadDecision::ReadBody { op, key }) => (op, key),
            Some(HeadDecision::CountTokens { key }) => {
                let body = self.read_body(session, ctx).await?;
                let outbound = self.outbound();
                let models = &key.models;
                return count::answer(session, ctx, &admission, outbound, models, &body).await;
            }
            _ => return Ok(()), // answered by `head`
        };
        let body = self.read_body(session, ctx).await?;
        let previous = match ctx.door {
            Door::Responses => self.previous(&key.workspace_id, &body).await?,
            _ => None,
        };
        admission.previous = previous.as_deref();
        let decision = match admission.admit(key.clone(), op, &body, chrono::Utc::now()) {
            // Credit added a moment ago admits the next request. Only the refusal is held
            // across the wait: a whole decision there would be part of every stream's state.
            Err(e @ (GatewayError::InsufficientCredit | GatewayError::CreditShort { .. })) => {
                if self.fresh.refresh(FRESH_WAIT).await {
                    admission.admit(key, op, &body, chrono::Utc::now())
                } else {
                    Err(e)
                }
            }
            decision => decision,
        };
        let Decision {
            admitted,
            plan,
            translated,
        } = decision?;
        let outbound = self.outbound();
        let caches = &self.caches;
        let mut failover = Failover::new(&admission, &body, translated, caches, outbound, admitted);
        ctx.request_id = failover.admitted().request_id.clone();
        match plan {
            Plan::FanOut(calls) => {
                buffered::answer(session, ctx, &mut failover, calls, fan_out::join).await;
            }
            Plan::Proxy { request, cache } => {
                let request = failover.ready((request, cache)).await;
                if failover.admitted().stream {
                    stream::answer(session, ctx, &mut failover, request).await;
                } else {
                    let translate = buffered::translate;
                    buffered::answer(session, ctx, &mut failover, request, translate).await;
                }
            }
        }
        ctx.admitted = Some(Box::new(failover.into_admitted()));
        Ok(())
    }

    /// The request body, read whole within its size and time limits.
    async fn read_body(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Bytes, GatewayError> {
        let (limit, timeout) = (self.max_request_body, self.limits.body_timeout);
        let body = body::read_within(session, limit, timeout).await?;
        ctx.body_read = true;
        Ok(body)
    }

    /// What the head alone decides: an answer given here (`None`: `/health`, `/v1/models`,
    /// `/v1/key`, `/v1/generation`), or a body to read (`ReadBody`, `CountTokens`).
    async fn head(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        admission: &Admission<'_>,
    ) -> Result<Option<HeadDecision>, GatewayError> {
        let head = match admission.head(&convert::head(session), chrono::Utc::now()) {
            // A key created a moment ago (`tollgate key create` then use) is not refused.
            Err(GatewayError::InvalidKey) if self.fresh.refresh(FRESH_WAIT).await => {
                admission.head(&convert::head(session), chrono::Utc::now())
            }
            head => head,
        };
        // The store reads are boxed: their futures are large and rare, and a future's size is
        // its largest state's, held by every request (and open stream) for its whole life.
        let body = match head? {
            HeadDecision::Answer(body) => body,
            HeadDecision::Generation { workspace_id, id } => {
                Box::pin(self.generation(&workspace_id, &id)).await?
            }
            HeadDecision::StoredResponse {
                workspace_id,
                id,
                delete,
            } => Box::pin(self.stored_response(&workspace_id, &id, delete)).await?,
            read => return Ok(Some(read)),
        };
        self.answer(session, &ctx.stamp(), body).await;
        Ok(None)
    }

    /// Bills the finished request and writes its metrics and access event; `failed`: who made
    /// writing the gateway's own answer fail.
    fn logging(&self, session: &Session, failed: Option<Blame>, ctx: &mut Ctx) {
        let billed = logging::bill(&self.ledger, failed, ctx);
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let path = session.req_header().uri.path();
        logging::count(path, status, ctx, billed);
        logging::access_log(path, status, ctx);
    }

    fn admission<'a>(
        &'a self,
        catalog: &'a Snapshot,
        session: &Session,
        ctx: &Ctx,
    ) -> Admission<'a> {
        let anthropic = match ctx.door {
            Door::Messages => convert::anthropic_headers(session),
            Door::OpenAi | Door::Responses => AnthropicHeaders::default(),
        };
        Admission {
            catalog,
            keys: &self.keys,
            accounts: &self.accounts,
            credentials: &self.credentials,
            strict_credit: self.strict_credit,
            waive_empty_failures: self.waive_empty_failures,
            max_cache_ttl: self.max_cache_ttl,
            limits: &self.limits,
            route_turn: self.route_turns.fetch_add(1, Ordering::Relaxed),
            now: Instant::now(),
            request_id: ctx.client_request_id.clone(),
            door: ctx.door,
            anthropic,
            anthropic_betas: &self.anthropic_betas,
            previous: None,
        }
    }

    /// What a request's upstream attempts send through.
    fn outbound(&self) -> Outbound<'_> {
        Outbound {
            client: &self.client,
            credentials: &self.credentials,
            conf: &self.upstream,
            drain_after_disconnect: self.drain_after_disconnect,
            responses: &self.responses,
            ledger: &self.ledger,
        }
    }

    /// `/v1/generation`: the workspace's usage record `id`, read from the store (a record
    /// appears once the ledger writer committed it, within about a second).
    async fn generation(&self, workspace_id: &str, id: &str) -> Result<Bytes, GatewayError> {
        let store = self
            .store
            .get_or_try_init(|| crate::store::open(&self.read_store_url))
            .await
            .map_err(store_unavailable)?;
        let found = match crate::auth::id_time(id) {
            // A record finishes after its id is made, within its request's life (streams read
            // on, spooled records keep their time): the range prunes the month partitions to
            // one or two. Its lower bound allows for replicas' clocks disagreeing.
            Some(made) => {
                let (from, to) = (made - GENERATION_BEFORE_ID, made + GENERATION_AFTER_ID);
                store.usage_record_within(workspace_id, id, from, to).await
            }
            None => store.usage_record(workspace_id, id).await,
        };
        let record = found
            .map_err(store_unavailable)?
            .ok_or_else(|| GatewayError::NoGeneration(id.into()))?;
        let body = serde_json::json!({ "object": "generation", "data": record });
        Ok(Bytes::from(body.to_string()))
    }

    /// The conversation a Responses body's `previous_response_id` continues (the kept
    /// response's items, then its output), if it names one; 404 when the workspace has no
    /// such response.
    async fn previous(
        &self,
        workspace_id: &str,
        body: &[u8],
    ) -> Result<Option<Vec<u8>>, GatewayError> {
        let Some(id) = responses::previous_response_id(body)? else {
            return Ok(None);
        };
        let lookup = self.responses.lookup(workspace_id, &id, chrono::Utc::now());
        let kept = Box::pin(lookup) // boxed as the reads in `head`
            .await
            .map_err(store_unavailable)?
            .ok_or_else(|| GatewayError::NoResponse(id.into()))?;
        responses::continued(&kept.items, &kept.response).map(Some)
    }

    /// `GET /v1/responses/{id}`: the kept response object; `DELETE`: it is deleted.
    async fn stored_response(
        &self,
        workspace_id: &str,
        id: &str,
        delete: bool,
    ) -> Result<Bytes, GatewayError> {
        let missing = || GatewayError::NoResponse(id.into());
        if delete {
            let deleted = self
                .responses
                .delete(workspace_id, id)
                .await
                .map_err(store_unavailable)?;
            if !deleted {
                return Err(missing());
            }
            let body = serde_json::json!({"id": id, "object": "response", "deleted": true});
            return Ok(Bytes::from(body.to_string()));
        }
        let kept = self
            .responses
            .lookup(workspace_id, id, chrono::Utc::now())
            .await
            .map_err(store_unavailable)?
            .ok_or_else(missing)?;
        Ok(Bytes::from(kept.response.clone()))
    }

    async fn answer(&self, session: &mut Session, stamp: &timing::Stamp, body: Bytes) {
        if let Err(e) = respond::json(session, stamp, 200, body, &[]).await {
            tracing::debug!("writing local answer failed: {e}");
        }
    }
}

/// What happens just before a complete answer's last bytes are released: its usage record is
/// journaled (a crash from here on loses no bill), and a Responses answer (`answer`) is kept,
/// so that its client finds it at once (with where its usage closes, when known). The charge the
/// answer's last bytes carry.
fn completing(
    outbound: &Outbound<'_>,
    ctx: &mut Ctx,
    admitted: &crate::admission::Admitted,
    answer: Option<(&Bytes, Option<usize>)>,
) -> Option<Charge> {
    logging::journal(outbound.ledger, ctx, admitted);
    let charge = ctx.journaled.as_ref().map(|j| Charge {
        cost: j.record.cost,
        id: j.record.id.clone(),
    });
    if let Some(answer) = answer {
        keep_answer(
            outbound.responses,
            admitted,
            ctx.started_at,
            answer,
            charge.as_ref(),
        );
    }
    charge
}

/// Keeps a completed Responses answer with the conversation before it, when its client let the
/// gateway (`store`, [`Admitted::kept_items`]): what a later `previous_response_id` continues.
/// It is kept as its client gets it, `charge` in its usage (which closes at `usage_close`, when
/// known), so that a later GET answers the same.
fn keep_answer(
    keeper: &ResponseKeeper,
    admitted: &crate::admission::Admitted,
    started_at: chrono::DateTime<chrono::Utc>,
    (answer, usage_close): (&Bytes, Option<usize>),
    charge: Option<&Charge>,
) {
    let Some(items) = &admitted.kept_items else {
        return;
    };
    let charged = charge.and_then(|c| crate::doors::charge::into_body(answer, usage_close, c));
    let answer = charged.as_deref().unwrap_or(answer);
    let (Ok(items), Ok(response)) = (std::str::from_utf8(items), std::str::from_utf8(answer))
    else {
        return; // JSON the door wrote: never the case
    };
    keeper.keep(StoredResponse {
        id: admitted.response_cx.id.to_string(),
        workspace_id: admitted.key.workspace_id.clone(),
        key_id: Some(admitted.key.id.clone()),
        model: admitted.model.id.to_string(),
        created_at: started_at,
        expires_at: started_at, // the keeper sets it from its retention
        items: items.to_owned(),
        response: response.to_owned(),
    });
}

/// A store read a client asked for failed: logged, and answered as a retryable 503.
fn store_unavailable(e: crate::store::StoreError) -> GatewayError {
    tracing::warn!("reading the store: {e}");
    GatewayError::StoreUnavailable
}

/// Pingora's side of a connection: one request at a time (HTTP/1.1 keep-alive), or one h2
/// stream.
///
/// Written out rather than with `#[async_trait]`, whose body moves the session into a local of
/// its own: the future would hold it twice (680 bytes each), for every open stream.
impl HttpServerApp for Gateway {
    fn process_new_http<'a, 'b, 'f>(
        self: &'a Arc<Self>,
        mut session: Session,
        shutdown: &'b ShutdownWatch,
    ) -> Pin<Box<dyn Future<Output = Option<ReusedHttpStream>> + Send + 'f>>
    where
        'a: 'f,
        'b: 'f,
    {
        Box::pin(async move {
            if !self.serve(&mut session, shutdown).await {
                return None;
            }
            // Boxed: Pingora's `finish` future (3.7 KB) would otherwise set this state's size.
            Box::pin(listener::reuse(session)).await
        })
    }
}

impl Gateway {
    /// Reads the connection's next request and answers it; `false`: the connection is done (no
    /// request came, or the gateway's own answer could not be written: the client is gone).
    async fn serve(&self, session: &mut Session, shutdown: &ShutdownWatch) -> bool {
        if !listener::read_head(session, shutdown, self.limits.idle_timeout).await {
            return false;
        }
        let mut ctx = Ctx::default();
        let closing = *shutdown.borrow() || self.draining.load(Ordering::Relaxed);
        let failed = self
            .respond(session, &mut ctx, closing)
            .await
            .err()
            .map(|e| {
                let blame = convert::blame(&e);
                if blame != Blame::Client {
                    tracing::warn!("answering failed: {e}");
                }
                blame
            });
        self.logging(session, failed, &mut ctx);
        failed.is_none()
    }
}
