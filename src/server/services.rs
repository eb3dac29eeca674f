//! The background services, each on its own Pingora runtime with its own store connection
//! (opened, retried, once Pingora runs: an outage at start must not stop the gateway): the
//! change-feed follower, the ledger writer, the kept responses' writer, the alerts loop, the
//! usage records' partitions (made ahead, the default one checked: hourly), the Vertex token
//! refresher and the certificate reloader (`SIGHUP`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::server::{Server, ShutdownWatch};
use pingora_core::services::background::{background_service, BackgroundService};

use crate::billing::writer::LedgerWriter;
use crate::config::AlertsConf;
use crate::kept::ResponseWriter;
use crate::providers::TokenCell;
use crate::store::{self, Store};
use crate::sync::Follower;
use crate::upstream::credentials::VertexAccount;

use super::state::Background;
use super::tls::{self, Certificates};

/// Adds every background service to `server`; `certificates`: the TLS listeners'.
pub fn add(server: &mut Server, bg: Background, certificates: Vec<Arc<Certificates>>) {
    let grace = Duration::from_secs(server.configuration.grace_period_seconds.unwrap_or(300));
    let sync = SyncService {
        follower: Mutex::new(Some(bg.follower)),
        store_url: bg.store_url.clone(),
    };
    let writer = WriterService {
        writer: Mutex::new(Some(bg.writer)),
        store_url: bg.store_url.clone(),
        linger: linger(grace),
    };
    let responses = ResponsesService {
        writer: Mutex::new(Some(bg.responses)),
        store_url: bg.store_url.clone(),
        linger: linger(grace),
    };
    let alerts = AlertsService {
        store_url: bg.store_url.clone(),
        conf: bg.alerts,
    };
    server.add_service(background_service("follower", sync));
    server.add_service(background_service("ledger writer", writer));
    server.add_service(background_service("responses writer", responses));
    server.add_service(background_service("alerts", alerts));
    let partitions = PartitionsService {
        store_url: bg.store_url.clone(),
    };
    server.add_service(background_service("usage partitions", partitions));
    if let Some((account, cell)) = bg.vertex {
        let refresher = VertexRefresher { account, cell };
        server.add_service(background_service("vertex token", refresher));
    }
    let reloader = CertificateReloader { certificates };
    server.add_service(background_service("certificate reloader", reloader));
}

/// The writers commit what requests finishing in the grace period bill and keep, and stop just
/// before Pingora shuts the runtimes down (usage records coming later are spooled, then
/// replayed).
fn linger(grace: Duration) -> Duration {
    grace.saturating_sub((grace / 4).min(Duration::from_secs(1)))
}

/// Resolves once Pingora says the process is shutting down.
async fn shut_down(mut shutdown: ShutdownWatch) {
    let _ = shutdown.changed().await;
}

struct SyncService {
    follower: Mutex<Option<Follower>>,
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
        follower.run(store, shut_down(shutdown)).await;
    }
}

/// On shutdown it drains the queue into the database (or the spool).
struct WriterService {
    writer: Mutex<Option<LedgerWriter>>,
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
        let Some(store) = open_store_until(&self.store_url, &mut shutdown).await else {
            return;
        };
        writer.run(store, shut_down(shutdown), self.linger).await;
    }
}

/// Commits the kept responses and purges the expired ones; on shutdown it writes what waits.
struct ResponsesService {
    writer: Mutex<Option<ResponseWriter>>,
    store_url: String,
    /// How long it goes on committing after the shutdown signal.
    linger: Duration,
}

#[async_trait]
impl BackgroundService for ResponsesService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(writer) = self.writer.lock().ok().and_then(|mut w| w.take()) else {
            return;
        };
        let Some(store) = open_store_until(&self.store_url, &mut shutdown).await else {
            return;
        };
        writer.run(store, shut_down(shutdown), self.linger).await;
    }
}

/// Evaluates alerts and sends their webhooks.
struct AlertsService {
    store_url: String,
    conf: AlertsConf,
}

#[async_trait]
impl BackgroundService for AlertsService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(store) = open_store_until(&self.store_url, &mut shutdown).await else {
            return;
        };
        crate::alerts::run(store, self.conf, shut_down(shutdown)).await;
    }
}

/// Makes the usage records' monthly partitions ahead (PostgreSQL; nothing on SQLite) and
/// checks that the default partition is empty (a warning and the metric
/// `tollgate_usage_default_partition_records` when not), every hour. Start-up did both
/// already; this keeps a long-running gateway `PARTITIONS_AHEAD` months ahead.
struct PartitionsService {
    store_url: String,
}

/// How often: a month has its partition two months before it begins, so this is for the
/// check, whose metric an operator alerts on. Both are cheap (an advisory lock, a catalog
/// lookup per month, a count of an empty table).
const PARTITIONS_EVERY: Duration = Duration::from_secs(3600);

#[async_trait]
impl BackgroundService for PartitionsService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(store) = open_store_until(&self.store_url, &mut shutdown).await else {
            return;
        };
        loop {
            let now = chrono::Utc::now();
            match store
                .ensure_usage_partitions(now, store::PARTITIONS_AHEAD)
                .await
            {
                Ok(0) => {}
                Ok(made) => tracing::info!(made, "usage record partitions made ahead"),
                Err(e) => tracing::warn!("cannot make the usage record partitions ahead: {e}"),
            }
            if let Err(e) = crate::commands::warn_default_partition(store.as_ref()).await {
                tracing::warn!("cannot read the default partition: {e}");
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(PARTITIONS_EVERY) => {}
            }
        }
    }
}

struct VertexRefresher {
    account: VertexAccount,
    cell: Arc<TokenCell>,
}

#[async_trait]
impl BackgroundService for VertexRefresher {
    async fn start(&self, shutdown: ShutdownWatch) {
        let cell = self.cell.clone();
        self.account
            .refresh_forever(cell, shut_down(shutdown))
            .await;
    }
}

/// Reloads the TLS listeners' certificates on `SIGHUP` (Pingora itself does not use it); with
/// no TLS listener it only says so, so that the signal never ends the process.
struct CertificateReloader {
    certificates: Vec<Arc<Certificates>>,
}

#[async_trait]
impl BackgroundService for CertificateReloader {
    async fn start(&self, shutdown: ShutdownWatch) {
        tls::reload_on_hangup(self.certificates.clone(), shut_down(shutdown)).await;
    }
}

/// Opens the store, retrying every second until it opens or the process shuts down.
async fn open_store_until(url: &str, shutdown: &mut ShutdownWatch) -> Option<Arc<dyn Store>> {
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
