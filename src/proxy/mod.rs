//! The Pingora `ProxyHttp` implementation: each phase is a few lines that call into the other
//! rooms. This is the only room (with `server`) that imports Pingora.
//!
//! A request's walk: `request_filter` answers local endpoints and errors itself, or reads the
//! body, authenticates, resolves model and route and builds the upstream request (`admit`);
//! `upstream_peer` / `upstream_request_filter` / `request_body_filter` send it;
//! `response_filter` / `response_body_filter` translate back; `logging` records the outcome;
//! `fail_to_proxy` finishes cleanly when the upstream fails.
//!
//! A request whose adapter asks for several upstream calls (`Adapter::fan_out`, e.g. Gemini
//! embeddings batches) never reaches Pingora's upstream phases: `request_filter` sends the
//! calls itself through the shared [`FanOutClient`], joins the answers with the adapter's
//! joiner and answers locally, leaving `ctx.admitted`, `ctx.usage` and `ctx.error` as a proxied
//! request would for `logging`.

mod body;
pub mod ctx;
mod fan_out;
mod large;
mod outcome;
mod respond;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorSource, ErrorType};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};

use crate::api::{GatewayError, Operation, RawRequest};
use crate::auth::{bearer_token, new_id, KeyCache};
use crate::catalog::{Catalog, Model, ModelKind};
use crate::config::UpstreamConf;
use crate::providers::{adapter_for, sse, Credentials, FanOut, ResponseCx, Target};
use crate::upstream::fan_out::FanOutClient;
use ctx::{Admitted, Ctx, Translation, Upstream};

/// Pingora's replay buffer; bodies above it take the subrequest path.
const REPLAY_LIMIT: usize = 64 * 1024;
const HEALTH_BODY: &[u8] = br#"{"status":"ok"}"#;

/// Shared, read-mostly state of the proxy.
pub struct Gateway {
    pub catalog: Arc<Catalog>,
    pub keys: Arc<KeyCache>,
    pub credentials: Credentials,
    /// Balances and key spend, for the credit and spend-limit gates.
    pub accounts: Arc<crate::billing::gates::Accounts>,
    /// Where finished requests' usage records go (group-committed off the response path).
    pub ledger: crate::billing::writer::LedgerSink,
    /// Explicit context caches created upstream (Gemini), by prefix.
    pub caches: crate::upstream::context_cache::ContextCaches,
    /// Sends the calls of requests that need several upstream calls (`Adapter::fan_out`).
    pub fan_out: FanOutClient,
    pub max_request_body: u64,
    pub upstream: UpstreamConf,
}

/// What a request path and method ask for.
enum Endpoint {
    Health,
    Models,
    Proxied(Operation),
}

fn classify(method: &http::Method, path: &str) -> Result<Endpoint, GatewayError> {
    let (endpoint, allow) = match path {
        "/health" => (Endpoint::Health, "GET, HEAD"),
        "/v1/models" => (Endpoint::Models, "GET, HEAD"),
        "/v1/chat/completions" => (Endpoint::Proxied(Operation::Chat), "POST"),
        "/v1/embeddings" => (Endpoint::Proxied(Operation::Embeddings), "POST"),
        other => return Err(GatewayError::NotFound(other.into())),
    };
    let ok = match endpoint {
        Endpoint::Proxied(_) => method == http::Method::POST,
        _ => method == http::Method::GET || method == http::Method::HEAD,
    };
    if ok {
        Ok(endpoint)
    } else {
        Err(GatewayError::MethodNotAllowed {
            method: method.as_str().into(),
            allow,
        })
    }
}

/// How `admit` ended.
enum Admission {
    /// Answered locally; the request is over.
    Answered,
    /// Ready to proxy (decision stored in the context).
    Proxy,
    /// Ready to proxy, but the body is too large to replay: hand off to a subrequest.
    HandOff(Box<Admitted>),
}

impl Gateway {
    fn authenticate(&self, session: &Session) -> Result<Arc<crate::store::ApiKey>, GatewayError> {
        let header = session
            .req_header()
            .headers
            .get(http::header::AUTHORIZATION);
        let token = bearer_token(header.map(|h| h.as_bytes()))?;
        self.keys.authenticate(token, chrono::Utc::now())
    }

    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Admission, GatewayError> {
        let header = session.req_header();
        let endpoint = classify(&header.method, header.uri.path())?;
        let op = match endpoint {
            Endpoint::Health => {
                self.answer(session, Bytes::from_static(HEALTH_BODY)).await;
                return Ok(Admission::Answered);
            }
            Endpoint::Models => {
                self.authenticate(session)?;
                self.answer(session, self.catalog.snapshot().models_json())
                    .await;
                return Ok(Admission::Answered);
            }
            Endpoint::Proxied(op) => op,
        };
        let key = self.authenticate(session)?;
        let body = body::read_bounded(session, self.max_request_body).await?;
        ctx.body_read = true;
        let (admitted, fan_out) = self.route(&body, op, key).await?;
        if let Some(plan) = fan_out {
            self.run_fan_out(session, ctx, admitted, plan).await;
            return Ok(Admission::Answered);
        }
        if session.as_downstream().retry_buffer_truncated() || body.len() > REPLAY_LIMIT {
            return Ok(Admission::HandOff(Box::new(admitted)));
        }
        ctx.admitted = Some(admitted);
        Ok(Admission::Proxy)
    }

    /// Parses the body and decides model, route and upstream request(s): one to proxy, or a
    /// fan-out to run. The only I/O is the creation of an explicit context cache, the first
    /// time a cacheable prefix is seen.
    async fn route(
        &self,
        body: &[u8],
        op: Operation,
        key: Arc<crate::store::ApiKey>,
    ) -> Result<(Admitted, Option<FanOut>), GatewayError> {
        let req = RawRequest::parse(body, op)?;
        let model = self.model_for(&req, op)?;
        self.gates(&key, op)?;
        let adapter = adapter_for(model.family);
        let route = model
            .routes
            .iter()
            .find(|r| r.addr.is_some())
            .cloned()
            .ok_or_else(|| GatewayError::NoRoute(model.id.as_ref().into()))?;
        let mut target = Target {
            model: &model,
            route: &route,
            op,
            stream: req.stream,
            cached_content: None,
        };
        let cached = match adapter.context_cache(&req, &target, &self.credentials)? {
            Some(c) => {
                self.caches
                    .name_for(&c.key, &route.endpoint, c.ttl, c.request)
                    .await
            }
            None => None,
        };
        target.cached_content = cached.as_deref();
        let (upstream, fan_out) = match adapter.fan_out(&req, &target, &self.credentials)? {
            Some(plan) => (Upstream::FannedOut, Some(plan)),
            None => (
                Upstream::Proxied(adapter.build_request(&req, &target, &self.credentials)?),
                None,
            ),
        };
        let response_cx = ResponseCx {
            id: completion_id(op),
            model_id: model.id.clone(),
            op,
            created: chrono::Utc::now().timestamp(),
            exclude_reasoning: req.excludes_reasoning(),
        };
        let admitted = Admitted {
            op,
            key,
            stream: req.stream,
            model,
            route,
            adapter,
            upstream,
            response_cx,
        };
        Ok((admitted, fan_out))
    }

    /// The catalog model the request names, if it serves this endpoint.
    fn model_for(&self, req: &RawRequest<'_>, op: Operation) -> Result<Arc<Model>, GatewayError> {
        let model = self
            .catalog
            .snapshot()
            .model(&req.model)
            .ok_or_else(|| GatewayError::ModelNotFound(req.model.as_ref().into()))?
            .clone();
        match (op, model.kind) {
            (Operation::Embeddings, ModelKind::Chat) => Err(GatewayError::EmbeddingsUnsupported(
                model.id.as_ref().into(),
            )),
            (Operation::Chat, ModelKind::Embedding) => {
                Err(GatewayError::ChatUnsupported(model.id.as_ref().into()))
            }
            (Operation::Embeddings, _) if req.stream => {
                Err(GatewayError::invalid("embeddings cannot be streamed"))
            }
            _ => Ok(model),
        }
    }

    /// The gates: credit first (every billed endpoint), then the key's spend (chat only).
    fn gates(&self, key: &crate::store::ApiKey, op: Operation) -> Result<(), GatewayError> {
        self.accounts.check_credit(&key.workspace_id)?;
        if op == Operation::Chat {
            self.accounts.check_spend(key, chrono::Utc::now())?;
        }
        Ok(())
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
        if let Some(admitted) = large::take_handoff(session) {
            ctx.admitted = Some(admitted);
            return Ok(false);
        }
        match self.admit(session, ctx).await {
            Ok(Admission::Proxy) => Ok(false),
            Ok(Admission::Answered) => Ok(true),
            Ok(Admission::HandOff(admitted)) => {
                ctx.handed_off = true;
                large::hand_off(session, *admitted).await?;
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
        let Some(route) = ctx.admitted.as_ref().map(|a| &a.route) else {
            return Err(Error::explain(ErrorType::InternalError, "no route decided"));
        };
        let Some(addr) = route.addr else {
            return Err(Error::explain(
                ErrorType::ConnectNoRoute,
                "upstream host unresolved",
            ));
        };
        let mut peer = HttpPeer::new(addr, route.endpoint.tls, route.endpoint.host.clone());
        let o = &mut peer.options;
        o.connection_timeout = Some(self.upstream.connect_timeout);
        o.total_connection_timeout = Some(self.upstream.connect_timeout * 2);
        o.read_timeout = Some(self.upstream.read_timeout);
        o.write_timeout = Some(self.upstream.write_timeout);
        o.idle_timeout = Some(Duration::from_secs(60));
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        req: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> pingora_error::Result<()> {
        let Some(a) = ctx.admitted.as_ref() else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "no upstream request",
            ));
        };
        let Upstream::Proxied(up) = &a.upstream else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "request was answered by a fan-out",
            ));
        };
        // A fresh header: nothing of the client's (its key, cookies, encodings) leaks upstream.
        let mut fresh =
            RequestHeader::build("POST", up.path.as_bytes(), Some(up.headers.len() + 4))?;
        fresh.insert_header("host", a.route.endpoint.authority())?;
        fresh.insert_header("content-length", up.body.len().to_string())?;
        fresh.insert_header(
            "accept",
            if a.stream {
                "text/event-stream"
            } else {
                "application/json"
            },
        )?;
        fresh.insert_header(
            "user-agent",
            concat!("tollgate/", env!("CARGO_PKG_VERSION")),
        )?;
        for (name, value) in &up.headers {
            fresh.insert_header(name.clone(), value.clone())?;
        }
        *req = fresh;
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> pingora_error::Result<()> {
        if let Some(Upstream::Proxied(up)) = ctx.admitted.as_ref().map(|a| &a.upstream) {
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
        let Some(a) = ctx.admitted.as_ref() else {
            return Ok(());
        };
        let status = resp.status.as_u16();
        ctx.upstream_status = Some(status);
        ctx.first_byte_at = Some(Instant::now());
        let ok = (200..300).contains(&status);
        ctx.translation = match (ok, a.stream) {
            (false, _) => Translation::UpstreamError(BytesMut::new()),
            (true, true) => Translation::Stream(a.adapter.stream_translator(a.response_cx.clone())),
            (true, false) => Translation::Buffered(BytesMut::new()),
        };
        let streaming = ok && a.stream;
        let mut fresh = ResponseHeader::build(status, Some(5))?;
        fresh.insert_header(
            "content-type",
            if streaming {
                "text/event-stream"
            } else {
                "application/json"
            },
        )?;
        fresh.insert_header("transfer-encoding", "chunked")?;
        if streaming {
            fresh.insert_header("cache-control", "no-cache")?;
        }
        if let Some(retry_after) = resp.headers.get("retry-after") {
            fresh.insert_header("retry-after", retry_after.clone())?;
        }
        fresh.insert_header("x-request-id", a.response_cx.id.as_ref())?;
        *resp = fresh;
        Ok(())
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> pingora_error::Result<Option<Duration>> {
        let Some(a) = ctx.admitted.as_ref() else {
            return Ok(None);
        };
        match &mut ctx.translation {
            Translation::None => {}
            Translation::Stream(t) => {
                let mut out = BytesMut::new();
                if let Some(chunk) = body.as_ref() {
                    t.feed(chunk, &mut out);
                }
                if end_of_stream {
                    t.finish(&mut out);
                    if let Some(message) = t.failed() {
                        ctx.error = Some(GatewayError::Upstream {
                            status: 200,
                            message: message.into(),
                        });
                    }
                }
                ctx.usage = t.usage();
                if ctx.first_body_at.is_none() && !out.is_empty() {
                    ctx.first_body_at = Some(Instant::now());
                }
                *body = Some(out.freeze());
            }
            Translation::Buffered(buf) | Translation::UpstreamError(buf) => {
                if let Some(chunk) = body.take() {
                    buf.extend_from_slice(&chunk);
                }
                if end_of_stream {
                    ctx.first_body_at = Some(Instant::now());
                    let whole = std::mem::take(buf).freeze();
                    *body = Some(self.finish_buffered(
                        a,
                        &ctx.translation,
                        &whole,
                        &mut ctx.usage,
                        &mut ctx.error,
                        ctx.upstream_status,
                    ));
                }
            }
        }
        Ok(None)
    }

    /// Clients hanging up are routine, not errors worth an error log line.
    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, error: &Error) -> bool {
        matches!(error.esource(), ErrorSource::Downstream)
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        if matches!(e.esource(), ErrorSource::Downstream) {
            // The client went away: nothing to write, and nothing the upstream did wrong.
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            };
        }
        let mid_stream = session.response_written().is_some();
        if mid_stream || session.as_downstream().is_subrequest() && ctx.first_byte_at.is_some() {
            // The client already has a 200: close the stream the specified way.
            let message = format!("upstream failed mid-response: {}", e.etype().as_str());
            if matches!(ctx.translation, Translation::Stream(_))
                && !session.as_downstream().is_subrequest()
            {
                let mut out = BytesMut::new();
                sse::write_error(&mut out, &message);
                sse::write_done(&mut out);
                let _ = session.write_response_body(Some(out.freeze()), true).await;
                let _ = session.finish_body().await;
            }
            ctx.error = Some(GatewayError::Upstream {
                status: 200,
                message: message.into(),
            });
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            };
        }
        let ge = upstream_failure(e);
        let code = ge.status();
        if !session.as_downstream().is_subrequest() {
            let _ = respond::error(session, &ge).await;
        }
        ctx.error = Some(ge);
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        if ctx.handed_off {
            return; // the subrequest logged and accounted this request
        }
        self.bill(e, ctx);
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        outcome::access_log(session.req_header().uri.path(), status, ctx);
    }
}

impl Gateway {
    /// The end of a buffered (or upstream-error) body: the client's bytes.
    fn finish_buffered(
        &self,
        a: &Admitted,
        translation: &Translation,
        whole: &[u8],
        usage: &mut crate::api::Usage,
        error: &mut Option<GatewayError>,
        upstream_status: Option<u16>,
    ) -> Bytes {
        let status = upstream_status.unwrap_or(502);
        let failure = match translation {
            Translation::UpstreamError(_) => GatewayError::Upstream {
                status,
                message: a.adapter.upstream_error_message(status, whole).into(),
            },
            _ => match a.adapter.translate_buffered(whole, &a.response_cx) {
                Ok(t) => {
                    *usage = t.usage;
                    return t.body;
                }
                Err(e) => GatewayError::Upstream {
                    status,
                    message: e.to_string().into(),
                },
            },
        };
        let body = failure.envelope();
        *error = Some(failure);
        body
    }
}

/// A fresh completion id such as `chatcmpl-3fK…` (also the usage record's id).
fn completion_id(op: Operation) -> Arc<str> {
    let prefix = match op {
        Operation::Chat => "chatcmpl",
        Operation::Embeddings => "emb",
    };
    new_id(prefix).replacen('_', "-", 1).into()
}

/// A Pingora failure before any response byte, as the gateway's error.
fn upstream_failure(e: &Error) -> GatewayError {
    use ErrorType::*;
    let (status, what) = match e.etype() {
        ConnectTimedout | ReadTimedout | WriteTimedout => (504, "upstream timed out"),
        ConnectRefused | ConnectNoRoute | ConnectError | TLSHandshakeFailure
        | ConnectProxyFailure => (502, "cannot connect to upstream"),
        HTTPStatus(code) => (*code, "upstream failed"),
        _ => match e.esource() {
            ErrorSource::Upstream => (502, "upstream failed"),
            // Client failures never get here (fail_to_proxy returns early); keep it total.
            ErrorSource::Downstream => (400, "client request failed"),
            ErrorSource::Internal | ErrorSource::Unset => (500, "gateway failed"),
        },
    };
    if status == 500 {
        GatewayError::Internal(format!("{what}: {}", e.etype().as_str()).into())
    } else {
        GatewayError::Upstream {
            status,
            message: format!("{what}: {}", e.etype().as_str()).into(),
        }
    }
}
