//! The operators' plain endpoints: liveness, readiness, a status summary, route health and
//! Prometheus metrics — state read from this process's memory, no token needed (the admin
//! listener is loopback by default). What customers bought (cost and tokens per model) is left
//! out of `/metrics`: `/admin/v1/metrics`, behind the admin token, renders it with the rest.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::auth::KeyCache;
use crate::billing::writer::LedgerSink;
use crate::catalog::health::{HealthView, State};
use crate::catalog::{Catalog, Snapshot};
use crate::metrics::{Scrape, METRICS};
use crate::providers::Credentials;

pub struct Ops {
    pub catalog: Arc<Catalog>,
    pub keys: Arc<KeyCache>,
    pub store_kind: &'static str,
    /// The follower's view: did its last read of the store succeed?
    pub store_reachable: Arc<AtomicBool>,
    /// The ledger spool (`tollgate.ledger_spool`): records wait there while the store is down.
    pub spool: PathBuf,
    pub credentials: Credentials,
    /// For the ledger queue's depth.
    pub ledger: LedgerSink,
}

/// One route as the admin listener shows it.
#[derive(Serialize)]
struct RouteView<'a> {
    model: &'a str,
    kind: &'static str,
    /// The upstream API the route calls (`chat`, `responses`).
    api: &'static str,
    region: Option<&'a str>,
    priority: i32,
    credentials: bool,
    #[serde(flatten)]
    health: HealthView,
}

/// Prometheus' text exposition format.
pub const METRICS_TYPE: &str = "text/plain; version=0.0.4";

impl Ops {
    /// `(status, content type, body)` for a GET of `path`; `None` when it is not one of
    /// these endpoints.
    pub fn get(&self, path: &str) -> Option<(u16, &'static str, Vec<u8>)> {
        match path {
            "/metrics" => Some((200, METRICS_TYPE, self.metrics(false))),
            "/health" | "/ready" | "/routes" | "/status" => {
                let (status, body) = self.get_json(path);
                Some((status, "application/json", body))
            }
            _ => None,
        }
    }

    /// The registry, with the state held elsewhere read now; the billing series only with
    /// `billing` (`/admin/v1/metrics`).
    pub fn metrics(&self, billing: bool) -> Vec<u8> {
        let catalog = self.catalog.snapshot();
        let routes = self.route_views(&catalog);
        let gauges = routes
            .iter()
            .map(|r| {
                let state = match r.health.state {
                    State::Healthy => 0,
                    State::HalfOpen => 1,
                    State::Cooling => 2,
                };
                let failures = i64::from(r.health.consecutive_failures);
                (r.model, r.kind, r.region.unwrap_or(""), state, failures)
            })
            .collect();
        METRICS.render(&Scrape {
            keys: self.keys.len(),
            models: catalog.len(),
            store_reachable: self.store_reachable.load(Ordering::Relaxed),
            ledger_queue: self.ledger.queued(),
            ledger_spool_bytes: std::fs::metadata(&self.spool).map_or(0, |m| m.len()),
            journal_unsettled: self.ledger.journal_unsettled(),
            routes: gauges,
            billing,
        })
    }

    /// `(status, JSON body)` for a GET of `path`.
    fn get_json(&self, path: &str) -> (u16, Vec<u8>) {
        #[derive(Serialize)]
        struct Status {
            status: &'static str,
            version: &'static str,
            store: &'static str,
            models: usize,
            keys: usize,
        }
        match path {
            "/health" => (200, br#"{"status":"ok"}"#.to_vec()),
            "/ready" => self.ready(),
            "/routes" => (200, self.routes()),
            "/status" => {
                let s = Status {
                    status: "ok",
                    version: env!("CARGO_PKG_VERSION"),
                    store: self.store_kind,
                    models: self.catalog.snapshot().len(),
                    keys: self.keys.len(),
                };
                (200, serde_json::to_vec(&s).unwrap_or_default())
            }
            _ => (
                404,
                crate::api::GatewayError::NotFound(path.into())
                    .envelope()
                    .to_vec(),
            ),
        }
    }

    /// `/routes`: every active route of every model with this process's view of its health.
    fn routes(&self) -> Vec<u8> {
        let catalog = self.catalog.snapshot();
        let routes = self.route_views(&catalog);
        serde_json::to_vec(&serde_json::json!({ "routes": routes })).unwrap_or_default()
    }

    /// Every active route of the snapshot with its health now, by model then priority.
    fn route_views<'a>(&self, catalog: &'a Snapshot) -> Vec<RouteView<'a>> {
        let now = std::time::Instant::now();
        let mut routes: Vec<RouteView> = catalog
            .models()
            .flat_map(|m| m.routes.iter().map(move |r| (m, r)))
            .map(|(m, r)| RouteView {
                model: &m.id,
                kind: r.kind.as_str(),
                api: r.api.as_str(),
                region: r.region.as_deref(),
                priority: r.priority,
                credentials: self.credentials.configured(r.kind),
                health: r.health.view(now),
            })
            .collect();
        routes.sort_by(|a, b| (a.model, a.priority).cmp(&(b.model, b.priority)));
        routes
    }

    /// `200 {"status":"ready"}`, or `503 {"status":"degraded","problems":[…]}`.
    fn ready(&self) -> (u16, Vec<u8>) {
        let spooled = |path: &PathBuf| std::fs::metadata(path).map_or(0, |m| m.len());
        let problems = degraded(&Readiness {
            store_reachable: self.store_reachable.load(Ordering::Relaxed),
            spooled_bytes: spooled(&self.spool),
            refused_bytes: spooled(&refused_path(&self.spool)),
            catalog: &self.catalog.snapshot(),
            credentials: &self.credentials,
        });
        #[derive(Serialize)]
        struct Ready {
            status: &'static str,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            problems: Vec<String>,
        }
        let (code, status) = if problems.is_empty() {
            (200, "ready")
        } else {
            (503, "degraded")
        };
        let body = serde_json::to_vec(&Ready { status, problems }).unwrap_or_default();
        (code, body)
    }
}

fn refused_path(spool: &std::path::Path) -> PathBuf {
    let mut name = spool.as_os_str().to_owned();
    name.push(".refused");
    PathBuf::from(name)
}

/// What readiness looks at, as plain values.
pub struct Readiness<'a> {
    pub store_reachable: bool,
    pub spooled_bytes: u64,
    pub refused_bytes: u64,
    pub catalog: &'a Snapshot,
    pub credentials: &'a Credentials,
}

/// Every degraded state, in words an operator acts on; empty when ready.
pub fn degraded(r: &Readiness<'_>) -> Vec<String> {
    let mut problems = Vec::new();
    if !r.store_reachable {
        problems.push("store unreachable: serving keys, balances and catalog from memory".into());
    }
    if r.spooled_bytes > 0 {
        problems.push(format!(
            "ledger spool not empty: {} bytes of usage records wait for the store",
            r.spooled_bytes
        ));
    }
    if r.refused_bytes > 0 {
        problems.push(format!(
            "usage records refused by the store: {} bytes set aside in the spool's .refused file",
            r.refused_bytes
        ));
    }
    for kind in r.catalog.route_kinds() {
        if let Some(what) = r.credentials.missing_for(kind) {
            problems.push(format!(
                "no {what} credentials: {} routes answer 503 upstream_unconfigured",
                kind.as_str()
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_degraded_state_is_named() {
        let catalog = Snapshot::default();
        let credentials = Credentials::default();
        let ready = Readiness {
            store_reachable: true,
            spooled_bytes: 0,
            refused_bytes: 0,
            catalog: &catalog,
            credentials: &credentials,
        };
        assert!(degraded(&ready).is_empty());
        let down = Readiness {
            store_reachable: false,
            spooled_bytes: 512,
            refused_bytes: 7,
            ..ready
        };
        let problems = degraded(&down);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].starts_with("store unreachable"));
        assert!(problems[1].contains("512 bytes"));
        assert!(problems[2].contains("refused"));
    }
}
