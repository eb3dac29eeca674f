//! Process wiring for `tollgate serve`: bootstrap state from the store, then run Pingora with
//! the proxy service, the admin service and the background follower.
//!
//! Start-up work (migrations, first catalog import, initial key and catalog load) runs on a
//! short-lived runtime before Pingora starts, so the first request already finds warm caches.
//! Database connections are bound to the runtime that made them, so the background service
//! opens its own store on its own runtime.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::apps::{HttpServerApp, ReusedHttpStream};
use pingora_core::listeners::ListenerConfig;
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::l4::stream::L4BufferSettings;
use pingora_core::server::configuration::Opt;
use pingora_core::server::{ExecutionPhase, Server, ShutdownWatch};
use pingora_core::services::background::{background_service, BackgroundService};
use pingora_core::services::listening::Service;

use crate::admin::{self, Admin};
use crate::catalog;
use crate::commands::{self, CommandError};
use crate::config::Config;
use crate::connections::{self, Limiter};
use crate::proxy::listener::{self, Bounded};
use crate::proxy::Gateway;
use crate::store;
use crate::sync::Follower;
use crate::upstream::credentials::{self, VertexAccount};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Setup(#[from] CommandError),
    #[error(transparent)]
    Credentials(#[from] crate::upstream::credentials::CredentialError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    AdminToken(#[from] admin::session::WeakToken),
}

pub struct ServeOptions {
    pub upgrade: bool,
    pub daemon: bool,
}

pub fn serve(config: Config, opts: ServeOptions) -> Result<(), ServeError> {
    let t = config.tollgate.clone();
    let store_url = config.store_url(|k| std::env::var(k).ok());
    let env = |k: &str| std::env::var(k).ok();
    let mut credentials = credentials::from_env(&t.providers, env);
    let vertex = VertexAccount::from_env(&t.providers.vertex, env)?;
    if let Some(v) = &vertex {
        credentials.vertex_project = credentials
            .vertex_project
            .take()
            .or_else(|| v.project_id.clone());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = catalog::Served::new(
        catalog::RouteKind::ALL
            .into_iter()
            .filter(|k| credentials.configured(*k)),
    );
    let catalog_loader = catalog::Loader::new(
        t.providers.clone(),
        served,
        catalog::Healths::new(t.upstream.breaker),
    );
    let follower = runtime.block_on(async {
        let store = store::open(&store_url).await?;
        commands::prepare_store(store.as_ref(), &t.catalog_file).await?;
        if let Some(v) = &vertex {
            let first = tokio::time::timeout(
                Duration::from_secs(10),
                v.fetch_once(&credentials.vertex_token),
            )
            .await;
            if !matches!(first, Ok(Ok(_))) {
                tracing::warn!("no Vertex token at start ({first:?}); the refresher keeps trying");
            }
        }
        Ok::<_, ServeError>(
            Follower::bootstrap(store.as_ref(), catalog_loader, t.catalog_refresh).await?,
        )
    })?;
    drop(runtime);
    let (public_limits, admin_limits) = connection_limits(&t.connections);

    let vertex_refresher = vertex.map(|account| VertexRefresher {
        account,
        cell: credentials.vertex_token.clone(),
    });
    let (ledger, writer) = crate::billing::writer::ledger(
        std::path::Path::new(&t.ledger_spool),
        follower.accounts.clone(),
    )?;
    let draining = Arc::new(AtomicBool::new(false));
    let request_limits = limits(&t.limits);
    let gateway = Gateway {
        accounts: follower.accounts.clone(),
        ledger,
        catalog: follower.catalog.clone(),
        keys: follower.keys.clone(),
        credentials,
        caches: crate::upstream::context_cache::ContextCaches::new(
            t.upstream.connect_timeout + Duration::from_secs(30),
        ),
        client: crate::upstream::client::UpstreamClient::new(&t.upstream),
        max_request_body: t.max_request_body.as_u64(),
        upstream: t.upstream.clone(),
        fresh: follower.freshness(),
        strict_credit: t.strict_credit,
        max_cache_ttl: t.max_cache_ttl,
        drain_after_disconnect: t.drain_after_disconnect,
        limits: request_limits.clone(),
        draining: draining.clone(),
        route_turns: std::sync::atomic::AtomicU64::new(0),
        store: tokio::sync::OnceCell::new(),
        store_url: store_url.clone(),
    };
    let ops = admin::Ops {
        catalog: follower.catalog.clone(),
        keys: follower.keys.clone(),
        store_kind: if store_url.starts_with("sqlite") {
            "sqlite"
        } else {
            "postgres"
        },
        store_reachable: follower.store_reachable.clone(),
        spool: std::path::PathBuf::from(&t.ledger_spool),
        credentials: gateway.credentials.clone(),
        ledger: gateway.ledger.clone(),
    };
    let token = std::env::var(&t.admin_token_env).ok();
    let guard = admin::session::Guard::new(token.as_deref(), &t.admin_token_env)?;
    if guard.enabled() {
        tracing::info!(admin = %t.admin_listen, "admin API and console on (http://{}/)", t.admin_listen);
    } else {
        tracing::warn!(
            "admin API and console off: no admin token in the environment variable {} \
             (tollgate.admin_token_env)",
            t.admin_token_env
        );
    }
    let mut api = admin::Api::new(guard, t.key_prefix.clone(), store_url.clone());
    api.allow_private_webhooks = t.alerts.allow_private_webhooks;
    let store_url_alerts = store_url.clone();
    let admin = Admin::new(ops, api);

    let opt = Opt {
        upgrade: opts.upgrade,
        daemon: opts.daemon,
        ..Opt::default()
    };
    let mut server = Server::new_with_opt_and_conf(opt, config.server);
    server.bootstrap();
    follow_shutdown(server.watch_execution_phase(), draining.clone());
    // The writer commits what requests finishing in the grace period bill, and stops just
    // before Pingora shuts the runtimes down (what comes later is spooled, then replayed).
    let grace = Duration::from_secs(server.configuration.grace_period_seconds.unwrap_or(300));
    let linger = grace.saturating_sub((grace / 4).min(Duration::from_secs(1)));
    let mut proxy = Service::new(
        "tollgate".to_owned(),
        Bounded::new(gateway, Limiter::new(public_limits), "public"),
    );
    // No L4 read buffer: Pingora reads heads and bodies into buffers of its own, so its default
    // 64 KiB one (zeroed, so fully resident once the allocator reuses memory) only added a copy
    // and up to 64 KB to every connection, an open stream's included.
    proxy.add_listener(
        ListenerConfig::tcp(t.listen.to_string()).l4_buffer(L4BufferSettings::default().read(0)),
    );
    let admin_app = AdminApp {
        admin,
        limits: request_limits,
        draining,
    };
    let mut admin_service = Service::new(
        "tollgate admin".to_owned(),
        Bounded::new(admin_app, Limiter::new(admin_limits), "admin"),
    );
    admin_service.add_tcp(&t.admin_listen.to_string());
    let sync = background_service(
        "follower",
        SyncService {
            follower: std::sync::Mutex::new(Some(follower)),
            store_url: store_url.clone(),
        },
    );
    server.add_service(proxy);
    server.add_service(admin_service);
    server.add_service(sync);
    server.add_service(background_service(
        "ledger writer",
        WriterService {
            writer: std::sync::Mutex::new(Some(writer)),
            store_url,
            linger,
        },
    ));
    server.add_service(background_service(
        "alerts",
        AlertsService {
            store_url: store_url_alerts,
            conf: t.alerts,
        },
    ));
    if let Some(refresher) = vertex_refresher {
        server.add_service(background_service("vertex token", refresher));
    }
    tracing::info!(listen = %t.listen, admin = %t.admin_listen, "tollgate serving");
    server.run_forever()
}

struct SyncService {
    follower: std::sync::Mutex<Option<Follower>>,
    store_url: String,
}

#[async_trait]
impl BackgroundService for SyncService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(follower) = self.follower.lock().ok().and_then(|mut f| f.take()) else {
            return;
        };
        let Some(store) = open_store_until(&self.store_url, &mut shutdown).await else {
            return;
        };
        follower
            .run(store, async move {
                let _ = shutdown.changed().await;
            })
            .await;
    }
}

/// Runs the ledger writer on its own runtime with its own store connection; on shutdown it
/// drains the queue into the database (or the spool).
struct WriterService {
    writer: std::sync::Mutex<Option<crate::billing::writer::LedgerWriter>>,
    store_url: String,
    /// How long it goes on committing after the shutdown signal.
    linger: Duration,
}

#[async_trait]
impl BackgroundService for WriterService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(writer) = self.writer.lock().ok().and_then(|mut w| w.take()) else {
            return;
        };
        let store = match open_store_until(&self.store_url, &mut shutdown).await {
            Some(s) => s,
            None => return,
        };
        let shutdown = async move {
            let _ = shutdown.changed().await;
        };
        writer.run(store, shutdown, self.linger).await;
    }
}

/// Opens the store, retrying every second (an outage at start must not stop the gateway).
async fn open_store_until(
    url: &str,
    shutdown: &mut ShutdownWatch,
) -> Option<std::sync::Arc<dyn store::Store>> {
    loop {
        match store::open(url).await {
            Ok(s) => return Some(s),
            Err(e) => {
                tracing::warn!("cannot open the store yet: {e}");
                tokio::select! {
                    _ = shutdown.changed() => return None,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Evaluates alerts and sends their webhooks, on its own runtime with its own store.
struct AlertsService {
    store_url: String,
    conf: crate::config::AlertsConf,
}

#[async_trait]
impl BackgroundService for AlertsService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(store) = open_store_until(&self.store_url, &mut shutdown).await else {
            return;
        };
        crate::alerts::run(store, self.conf, async move {
            let _ = shutdown.changed().await;
        })
        .await;
    }
}

struct VertexRefresher {
    account: VertexAccount,
    cell: std::sync::Arc<crate::providers::TokenCell>,
}

#[async_trait]
impl BackgroundService for VertexRefresher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let cell = self.cell.clone();
        self.account
            .refresh_forever(cell, async move {
                let _ = shutdown.changed().await;
            })
            .await;
    }
}

/// Sets `draining` once the process is being upgraded or stopped, so that every later answer
/// closes its connection: clients move to fresh connections (the new process's, on an upgrade)
/// instead of sending on idle ones Pingora drops when it shuts down.
fn follow_shutdown(
    mut phases: tokio::sync::broadcast::Receiver<ExecutionPhase>,
    draining: Arc<AtomicBool>,
) {
    use tokio::sync::broadcast::error::RecvError;
    std::thread::spawn(move || loop {
        match phases.blocking_recv() {
            Ok(
                ExecutionPhase::Setup
                | ExecutionPhase::Bootstrap
                | ExecutionPhase::BootstrapComplete
                | ExecutionPhase::Running,
            )
            | Err(RecvError::Lagged(_)) => {}
            Ok(_) => draining.store(true, Ordering::Relaxed),
            Err(RecvError::Closed) => return,
        }
    });
}

/// The open-file limit raised as far as allowed, and both listeners' connection limits fitted
/// into it (said in the log, with whatever had to be lowered).
fn connection_limits(
    conf: &crate::config::ConnectionsConf,
) -> (crate::config::ListenerLimits, crate::config::ListenerLimits) {
    let open_files = match connections::raise_open_files() {
        Ok(files) => {
            tracing::info!(
                "open-file limit {} (was {}, hard limit {})",
                files.now,
                files.before,
                files.hard
            );
            files.now
        }
        Err(e) => {
            tracing::warn!("cannot read the open-file limit ({e}); assuming 1024");
            1024
        }
    };
    let fitted = connections::fit(conf, open_files);
    for lowered in &fitted.clamped {
        tracing::warn!(
            "{lowered}, to fit the open-file limit of {open_files} \
             (2 per public connection, 1 per admin one, {} in reserve)",
            conf.reserve_files
        );
    }
    let (p, a) = (fitted.public, fitted.admin);
    tracing::info!(
        "connection limits: public {} ({} per client address), admin {} ({} per client address)",
        p.max,
        p.per_address,
        a.max,
        a.per_address
    );
    (fitted.public, fitted.admin)
}

/// The admin listener's Pingora side: the public listener's head, body and idle deadlines
/// around [`Admin::handle`].
struct AdminApp {
    admin: Admin,
    limits: crate::api::limits::Limits,
    /// The process is being upgraded or stopped: answers close their connections.
    draining: Arc<AtomicBool>,
}

#[async_trait]
impl HttpServerApp for AdminApp {
    async fn process_new_http(
        self: &Arc<Self>,
        mut session: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        if !listener::read_head(&mut session, shutdown, self.limits.idle_timeout).await {
            return None;
        }
        let closing = *shutdown.borrow() || self.draining.load(Ordering::Relaxed);
        listener::keep_alive(&mut session, self.limits.idle_timeout, closing);
        session.set_write_timeout(Some(self.limits.client_write_timeout));
        let res = match admin_request(&mut session, self.limits.body_timeout).await {
            Ok(req) => self.admin.handle(&req).await,
            Err(e) => {
                session.set_keepalive(None); // the body was not read whole
                let status =
                    http::StatusCode::from_u16(e.status()).unwrap_or(http::StatusCode::BAD_REQUEST);
                admin::http::Response::new(status, "application/json", e.envelope().to_vec())
            }
        };
        if let Err(e) = write_admin_response(&mut session, res).await {
            tracing::debug!("writing an admin answer: {e}");
            return None;
        }
        listener::reuse(session).await
    }
}

async fn write_admin_response(
    session: &mut ServerSession,
    res: admin::http::Response,
) -> pingora_error::Result<()> {
    let mut header = pingora_http::ResponseHeader::build(res.status, Some(3 + res.headers.len()))?;
    header.insert_header("content-type", res.content_type)?;
    header.insert_header("content-length", res.body.len().to_string())?;
    header.insert_header("cache-control", "no-store")?;
    for (name, value) in res.headers {
        header.append_header(name, value)?;
    }
    session.write_response_header(Box::new(header)).await?;
    session.write_response_body(res.body.into(), true).await
}

/// The session's request as a plain value, its body read whole (at most
/// `admin::http::MAX_BODY` bytes) within `deadline`.
async fn admin_request(
    session: &mut ServerSession,
    deadline: Duration,
) -> Result<admin::http::Request, crate::api::GatewayError> {
    let max = admin::http::MAX_BODY as u64;
    let body = crate::proxy::body::read_within(session, max, deadline).await?;
    let head = session.req_header();
    let target = head.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = admin::http::Request::new(head.method.clone(), target);
    req.headers = head.headers.clone();
    req.peer = session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip());
    req.body = body;
    Ok(req)
}

/// The configured request limits over the gateway's defaults.
fn limits(conf: &crate::config::LimitsConf) -> crate::api::limits::Limits {
    let d = crate::api::limits::Limits::default();
    crate::api::limits::Limits {
        max_messages: conf.max_messages.unwrap_or(d.max_messages),
        max_content_parts: conf.max_content_parts.unwrap_or(d.max_content_parts),
        max_embedding_inputs: conf.max_embedding_inputs.unwrap_or(d.max_embedding_inputs),
        max_input_tokens: conf.max_input_tokens.or(d.max_input_tokens),
        allow_http_urls: conf.allow_http_urls.unwrap_or(d.allow_http_urls),
        max_header_count: conf.max_header_count.unwrap_or(d.max_header_count),
        max_header_bytes: conf
            .max_header_bytes
            .map_or(d.max_header_bytes, |b| b.as_u64()),
        body_timeout: conf.body_timeout.unwrap_or(d.body_timeout),
        client_write_timeout: conf.client_write_timeout.unwrap_or(d.client_write_timeout),
        idle_timeout: conf.idle_timeout.unwrap_or(d.idle_timeout),
    }
}
