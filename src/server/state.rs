//! What the services share, built before Pingora starts: credentials from the environment,
//! the store migrated and loaded once (so the first request already finds warm caches), and
//! the gateway and the admin API over the same caches.
//!
//! The start-up work runs on a short-lived runtime: database connections are bound to the
//! runtime that made them, so each background service later opens its own store.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use crate::admin::session::{Guard, WeakToken};
use crate::admin::{Admin, Api, Ops};
use crate::billing::writer::{LedgerFiles, LedgerSink, LedgerWriter};
use crate::catalog;
use crate::client_addr::TrustedProxies;
use crate::commands;
use crate::config::{AlertsConf, TollgateConf};
use crate::kept::{ResponseKeeper, ResponseWriter};
use crate::providers::{Credentials, TokenCell};
use crate::proxy::Gateway;
use crate::store;
use crate::sync::Follower;
use crate::upstream::client::UpstreamClient;
use crate::upstream::context_cache::ContextCaches;
use crate::upstream::credentials::{self, VertexAccount};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Setup(#[from] commands::CommandError),
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    AdminToken(#[from] WeakToken),
    #[error("TLS: {0}")]
    Tls(#[from] super::tls::TlsError),
    #[error(transparent)]
    UpstreamRoots(#[from] crate::upstream::roots::RootsError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

pub struct State {
    pub gateway: Gateway,
    pub admin: Admin,
    /// The process is being upgraded or stopped: answers close their connections.
    pub draining: Arc<AtomicBool>,
    pub background: Background,
}

/// What the background services take over.
pub struct Background {
    pub follower: Follower,
    pub writer: LedgerWriter,
    /// Writes the kept responses and purges the expired ones.
    pub responses: ResponseWriter,
    /// The Vertex service account and the cell its refreshed tokens go to.
    pub vertex: Option<(VertexAccount, Arc<TokenCell>)>,
    pub store_url: String,
    pub alerts: AlertsConf,
}

impl State {
    /// `read_store_url`: the read replica (`tollgate.store_read_url`), if any.
    pub fn build(
        t: &TollgateConf,
        store_url: String,
        read_store_url: Option<String>,
    ) -> Result<State, ServeError> {
        let (credentials, vertex) = read_credentials(t)?;
        let follower = bootstrap(t, &store_url, &credentials, vertex.as_ref())?;
        let files = LedgerFiles {
            spool: t.ledger_spool.clone().into(),
            journal: t.journal_dir().map(|dir| (dir, t.ledger_journal.fsync)),
        };
        let (ledger, writer) = crate::billing::writer::ledger(files, follower.accounts.clone())?;
        let (responses, responses_writer) =
            ResponseKeeper::new(t.responses.retention, store_url.clone());
        let vertex = vertex.map(|account| (account, credentials.vertex_token.clone()));
        let draining = Arc::new(AtomicBool::new(false));
        let gateway = gateway(
            t,
            &follower,
            credentials,
            ledger,
            responses,
            draining.clone(),
            read_store_url.as_deref().unwrap_or(&store_url),
        )?;
        let api = api(t, &store_url, read_store_url)?;
        let admin = Admin::new(ops(t, &follower, &gateway, &store_url), api);
        let background = Background {
            follower,
            writer,
            responses: responses_writer,
            vertex,
            store_url,
            alerts: t.alerts,
        };
        Ok(State {
            gateway,
            admin,
            draining,
            background,
        })
    }
}

/// The upstream credentials and the Vertex service account (whose project id stands in for an
/// unset project variable).
fn read_credentials(t: &TollgateConf) -> Result<(Credentials, Option<VertexAccount>), ServeError> {
    let env = |k: &str| std::env::var(k).ok();
    let mut credentials = credentials::from_env(&t.providers, env);
    let vertex = VertexAccount::from_env(&t.providers.vertex, env)?;
    if let Some(v) = &vertex {
        credentials.vertex_project = credentials
            .vertex_project
            .take()
            .or_else(|| v.project_id.clone());
    }
    Ok((credentials, vertex))
}

/// Migrates the store, imports the catalog into an empty one, fetches a first Vertex token
/// and loads keys, balances and the catalog for the routes that have credentials.
fn bootstrap(
    t: &TollgateConf,
    store_url: &str,
    credentials: &Credentials,
    vertex: Option<&VertexAccount>,
) -> Result<Follower, ServeError> {
    let served = catalog::Served::new(
        catalog::RouteKind::ALL
            .into_iter()
            .filter(|k| credentials.configured(*k)),
    );
    let loader = catalog::Loader::new(
        t.providers.clone(),
        served,
        catalog::Healths::new(t.upstream.breaker),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = store::open(store_url).await?;
        commands::prepare_store(store.as_ref(), &t.catalog_file).await?;
        if let Some(v) = vertex {
            first_vertex_token(v, &credentials.vertex_token).await;
        }
        let follower = Follower::bootstrap(store.as_ref(), loader, t.catalog_refresh).await?;
        Ok::<_, ServeError>(follower)
    })
}

/// One try, so that Vertex routes can serve at once; the refresher keeps trying after a miss.
async fn first_vertex_token(account: &VertexAccount, cell: &TokenCell) {
    let first = tokio::time::timeout(Duration::from_secs(10), account.fetch_once(cell)).await;
    if !matches!(first, Ok(Ok(_))) {
        tracing::warn!("no Vertex token at start ({first:?}); the refresher keeps trying");
    }
}

fn gateway(
    t: &TollgateConf,
    follower: &Follower,
    credentials: Credentials,
    ledger: LedgerSink,
    responses: Arc<ResponseKeeper>,
    draining: Arc<AtomicBool>,
    read_store_url: &str,
) -> Result<Gateway, ServeError> {
    let tls = crate::upstream::roots::upstream_tls(&t.upstream)?;
    Ok(Gateway {
        responses,
        accounts: follower.accounts.clone(),
        ledger,
        catalog: follower.catalog.clone(),
        keys: follower.keys.clone(),
        credentials,
        caches: ContextCaches::new(
            t.upstream.connect_timeout + Duration::from_secs(30),
            Some(tls.clone()),
        ),
        client: UpstreamClient::with_tls(&t.upstream, tls),
        max_request_body: t.max_request_body.as_u64(),
        upstream: t.upstream.clone(),
        fresh: follower.freshness(),
        strict_credit: t.strict_credit,
        waive_empty_failures: t.waive_empty_failures,
        max_cache_ttl: t.max_cache_ttl,
        drain_after_disconnect: t.drain_after_disconnect,
        limits: t.limits.resolve(),
        anthropic_betas: t.providers.anthropic.betas.clone(),
        draining,
        route_turns: AtomicU64::new(0),
        store: tokio::sync::OnceCell::new(),
        read_store_url: read_store_url.to_owned(),
        trusted_proxies: Arc::new(TrustedProxies::new(t.trusted_proxies.clone())),
    })
}

/// The admin listener's view of the gateway's caches, credentials and ledger queue.
fn ops(t: &TollgateConf, follower: &Follower, gateway: &Gateway, store_url: &str) -> Ops {
    Ops {
        catalog: follower.catalog.clone(),
        keys: follower.keys.clone(),
        store_kind: if store_url.starts_with("sqlite") {
            "sqlite"
        } else {
            "postgres"
        },
        store_reachable: follower.store_reachable.clone(),
        spool: Path::new(&t.ledger_spool).to_path_buf(),
        credentials: gateway.credentials.clone(),
        ledger: gateway.ledger.clone(),
    }
}

/// The admin API and console: off (said in the log) without an admin token, refused at start
/// with a weak one.
fn api(
    t: &TollgateConf,
    store_url: &str,
    read_store_url: Option<String>,
) -> Result<Api, ServeError> {
    let token = std::env::var(&t.admin_token_env).ok();
    let secure = t.listeners.admin.tls.is_some();
    let guard = Guard::new(token.as_deref(), &t.admin_token_env)?.with_console(t.console, secure);
    if guard.enabled() {
        tracing::info!(admin = %t.admin_listen, "admin API and console on (http://{}/)", t.admin_listen);
    } else {
        tracing::warn!(
            "admin API and console off: no admin token in the environment variable {} \
             (tollgate.admin_token_env)",
            t.admin_token_env
        );
    }
    let mut api =
        Api::new(guard, t.key_prefix.clone(), store_url.to_owned()).with_read_store(read_store_url);
    api.allow_private_webhooks = t.alerts.allow_private_webhooks;
    Ok(api)
}
