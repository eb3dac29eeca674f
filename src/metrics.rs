//! Prometheus metrics, names prefixed `tollgate_`, served at `/metrics` on the admin listener.
//!
//! The billing series — what was sold, per model: `tollgate_cost_usd_total` and
//! `tollgate_tokens_total` (tokens times the catalog's prices is revenue too) — are in a
//! registry of their own, rendered only for the admin token (`/admin/v1/metrics`); the rest is
//! operational and public on the admin listener.
//!
//! One process-wide set of registries ([`METRICS`]): request counters and latency histograms are
//! recorded once per request in `logging` (a label lookup and a few atomic adds, no I/O);
//! state that already lives elsewhere (key cache, catalog, route health, ledger queue and
//! spool) is read when the registry is scraped ([`Scrape`]). A leaf room: it imports nothing
//! of the gateway's.
// Metric names and labels are constants: building the registry fails only on a bug, which the
// unit test below (it builds and renders the registry) catches before anything ships.
#![allow(clippy::expect_used)]

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Latency buckets, 25 µs to 60 s: the gateway's own overhead sits at the low end, upstream
/// answers at the high end.
const BUCKETS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

pub struct Metrics {
    registry: Registry,
    /// The billing series.
    billing: Registry,
    requests: IntCounterVec,
    refusals: IntCounterVec,
    connections_refused: IntCounterVec,
    tls_reloads: IntCounterVec,
    gateway_added: HistogramVec,
    upstream_latency: HistogramVec,
    first_token: HistogramVec,
    tokens: IntCounterVec,
    cost: prometheus::CounterVec,
    attempts: IntCounterVec,
    unpriced: IntCounterVec,
    ledger_commit: Histogram,
    ledger_queue: IntGauge,
    ledger_spool_bytes: IntGauge,
    journal_unsettled: IntGauge,
    journal_failures: IntCounterVec,
    responses_dropped: IntCounterVec,
    keys: IntGauge,
    models: IntGauge,
    store_reachable: IntGauge,
    default_partition: IntGauge,
    route_state: IntGaugeVec,
    route_failures: IntGaugeVec,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// One finished request, as `logging` saw it.
pub struct Finished<'a> {
    /// `chat`, `embeddings`, `models`, `key`, `generation`, `health` or `other`.
    pub endpoint: &'static str,
    /// The catalog model, `""` when none was admitted.
    pub model: &'a str,
    /// The route that answered (or was tried last), `""` when none.
    pub route: &'static str,
    pub status: u16,
    /// The error code the client got, `""` on success.
    pub code: &'static str,
    /// The gateway refused the request itself (a client error: auth, gates, limits).
    pub refused: bool,
    /// The gateway's own time (`Server-Timing: gateway`), `None` when no answer went out.
    pub gateway_added: Option<Duration>,
    pub upstream_latency: Option<Duration>,
    pub first_token: Option<Duration>,
    /// Routes tried (failover), 0 when none.
    pub attempts: u32,
    /// `(bucket, tokens)` of the billed usage.
    pub tokens: [(&'static str, u64); 7],
    /// The billed cost in USD (for dashboards: the ledger is the exact record).
    pub cost_usd: f64,
}

/// The state read at scrape time.
pub struct Scrape<'a> {
    pub keys: usize,
    pub models: usize,
    pub store_reachable: bool,
    pub ledger_queue: usize,
    pub ledger_spool_bytes: u64,
    /// Journaled usage records not yet committed or spooled.
    pub journal_unsettled: u64,
    /// `(model, kind, region, state (0 healthy, 1 half-open, 2 cooling), failures)`.
    pub routes: Vec<(&'a str, &'static str, &'a str, i64, i64)>,
    /// Render the billing series too.
    pub billing: bool,
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

fn histogram(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(BUCKETS.to_vec());
    let h = HistogramVec::new(opts, labels).expect("valid metric");
    registry
        .register(Box::new(h.clone()))
        .expect("unique metric");
    h
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

fn gauges(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

impl Metrics {
    fn new() -> Self {
        let r = Registry::new();
        let billing = Registry::new();
        let cost = prometheus::CounterVec::new(
            Opts::new(
                "tollgate_cost_usd_total",
                "Billed cost in USD (approximate; the ledger is exact)",
            ),
            &["model"],
        )
        .expect("valid metric");
        billing
            .register(Box::new(cost.clone()))
            .expect("unique metric");
        let ledger_commit = Histogram::with_opts(
            HistogramOpts::new(
                "tollgate_ledger_commit_seconds",
                "Time to commit one batch of usage records",
            )
            .buckets(BUCKETS.to_vec()),
        )
        .expect("valid metric");
        r.register(Box::new(ledger_commit.clone()))
            .expect("unique metric");
        let route = &["model", "kind", "region"];
        Metrics {
            requests: counter(
                &r,
                "tollgate_requests_total",
                "Requests answered, by endpoint, model, route, status and error code",
                &["endpoint", "model", "route", "status", "code"],
            ),
            refusals: counter(
                &r,
                "tollgate_refusals_total",
                "Requests the gateway refused itself (auth, credit, spend limit, limits), by code",
                &["code"],
            ),
            connections_refused: counter(
                &r,
                "tollgate_connections_refused_total",
                "Connections refused at a listener's limit or for their PROXY protocol header, by listener and reason (total, per_address, proxy_protocol)",
                &["listener", "reason"],
            ),
            tls_reloads: counter(
                &r,
                "tollgate_tls_reloads_total",
                "Certificate reloads (SIGHUP) by listener and result (ok, failed: the old \
                 certificates stay)",
                &["listener", "result"],
            ),
            gateway_added: histogram(
                &r,
                "tollgate_gateway_added_seconds",
                "The gateway's own time on an answer, as its Server-Timing header says it: from \
                 the request's head to the answer's head, less the upstream's time",
                &["endpoint"],
            ),
            upstream_latency: histogram(
                &r,
                "tollgate_upstream_latency_seconds",
                "From the first upstream call to the answering upstream's response head",
                &["route"],
            ),
            first_token: histogram(
                &r,
                "tollgate_time_to_first_token_seconds",
                "From the request to the first byte of the answer's body",
                &["model"],
            ),
            tokens: counter(
                &billing,
                "tollgate_tokens_total",
                "Billed tokens by model and bucket",
                &["model", "bucket"],
            ),
            cost,
            attempts: counter(
                &r,
                "tollgate_upstream_attempts_total",
                "Upstream attempts, failovers included, by answering route",
                &["route"],
            ),
            unpriced: counter(
                &r,
                "tollgate_usage_unpriced_total",
                "Usage that could not be priced, billed at the request's worst case and flagged \
                 for review (alert on any increase)",
                &["model"],
            ),
            ledger_commit,
            ledger_queue: gauge(
                &r,
                "tollgate_ledger_queue_depth",
                "Usage records waiting for the ledger writer",
            ),
            ledger_spool_bytes: gauge(
                &r,
                "tollgate_ledger_spool_bytes",
                "Bytes of usage records waiting in the spool for the database",
            ),
            journal_unsettled: gauge(
                &r,
                "tollgate_ledger_journal_unsettled",
                "Journaled usage records not yet committed to the store or spooled",
            ),
            journal_failures: counter(
                &r,
                "tollgate_ledger_journal_failures_total",
                "Usage records that could not be journaled before their answer ended (they are \
                 still billed, but a crash before their commit would lose them: alert on any)",
                &[],
            ),
            responses_dropped: counter(
                &r,
                "tollgate_responses_dropped_total",
                "Kept responses (previous_response_id) dropped before they were written, by \
                 reason (queue_full, too_large, refused, shutdown)",
                &["reason"],
            ),
            keys: gauge(&r, "tollgate_keys_cached", "API keys in the key cache"),
            models: gauge(
                &r,
                "tollgate_catalog_models",
                "Models in the catalog snapshot",
            ),
            store_reachable: gauge(
                &r,
                "tollgate_store_reachable",
                "1 while the change-feed follower's last read of the store succeeded",
            ),
            default_partition: gauge(
                &r,
                "tollgate_usage_default_partition_records",
                "Usage records in PostgreSQL's default partition, which must stay empty: they \
                 are of a month that has no partition (alert on any; checked at start and hourly)",
            ),
            route_state: gauges(
                &r,
                "tollgate_route_state",
                "Route breaker: 0 healthy, 1 half-open, 2 cooling down",
                route,
            ),
            route_failures: gauges(
                &r,
                "tollgate_route_consecutive_failures",
                "Consecutive failures of a route",
                route,
            ),
            registry: r,
            billing,
        }
    }

    /// Counts a finished request.
    pub fn finished(&self, f: &Finished<'_>) {
        let mut status = itoa::Buffer::new();
        let status = status.format(f.status);
        self.requests
            .with_label_values(&[f.endpoint, f.model, f.route, status, f.code])
            .inc();
        if f.refused {
            self.refusals.with_label_values(&[f.code]).inc();
        }
        let observe = |h: &HistogramVec, label: &str, d: Option<Duration>| {
            if let Some(d) = d {
                h.with_label_values(&[label]).observe(d.as_secs_f64());
            }
        };
        observe(&self.gateway_added, f.endpoint, f.gateway_added);
        observe(&self.upstream_latency, f.route, f.upstream_latency);
        observe(&self.first_token, f.model, f.first_token);
        if f.attempts > 0 {
            self.attempts
                .with_label_values(&[f.route])
                .inc_by(u64::from(f.attempts));
        }
        for (bucket, n) in f.tokens.iter().filter(|(_, n)| *n > 0) {
            self.tokens.with_label_values(&[f.model, bucket]).inc_by(*n);
        }
        if f.cost_usd > 0.0 {
            self.cost.with_label_values(&[f.model]).inc_by(f.cost_usd);
        }
    }

    /// A connection refused at `listener`'s connection limit.
    pub fn connection_refused(&self, listener: &str, reason: &str) {
        self.connections_refused
            .with_label_values(&[listener, reason])
            .inc();
    }

    /// A listener's certificates reloaded (`ok`) or kept after a failed reload.
    pub fn tls_reload(&self, listener: &str, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.tls_reloads
            .with_label_values(&[listener, result])
            .inc();
    }

    /// A usage of `model` could not be priced (see `admission::outcome`).
    pub fn usage_unpriced(&self, model: &str) {
        self.unpriced.with_label_values(&[model]).inc();
    }

    /// One ledger batch committed (or failed) after `took`.
    pub fn ledger_committed(&self, took: Duration) {
        self.ledger_commit.observe(took.as_secs_f64());
    }

    /// What the last check found in PostgreSQL's default partition of the usage records.
    pub fn default_partition_records(&self, records: u64) {
        self.default_partition
            .set(i64::try_from(records).unwrap_or(i64::MAX));
    }

    /// A usage record could not be written to the journal.
    pub fn journal_failed(&self) {
        self.journal_failures
            .with_label_values(&[] as &[&str])
            .inc();
    }

    /// `n` kept responses dropped before they were written, for `reason`.
    pub fn responses_dropped(&self, reason: &str, n: u64) {
        self.responses_dropped
            .with_label_values(&[reason])
            .inc_by(n);
    }

    /// The text exposition format, with the scrape-time state.
    pub fn render(&self, s: &Scrape<'_>) -> Vec<u8> {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.keys.set(count(s.keys));
        self.models.set(count(s.models));
        self.store_reachable.set(i64::from(s.store_reachable));
        self.ledger_queue.set(count(s.ledger_queue));
        self.ledger_spool_bytes
            .set(i64::try_from(s.ledger_spool_bytes).unwrap_or(i64::MAX));
        self.journal_unsettled
            .set(i64::try_from(s.journal_unsettled).unwrap_or(i64::MAX));
        self.route_state.reset();
        self.route_failures.reset();
        for (model, kind, region, state, failures) in &s.routes {
            let labels = [*model, *kind, *region];
            self.route_state.with_label_values(&labels).set(*state);
            self.route_failures
                .with_label_values(&labels)
                .set(*failures);
        }
        let mut families = self.registry.gather();
        if s.billing {
            families.extend(self.billing.gather());
            families.sort_by(|a, b| a.name().cmp(b.name()));
        }
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
            tracing::warn!("encoding metrics: {e}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_counted_under_its_labels_and_state_is_read_at_scrape() {
        let m = Metrics::new();
        let f = Finished {
            endpoint: "chat",
            model: "google/g",
            route: "vertex",
            status: 200,
            code: "",
            refused: false,
            gateway_added: Some(Duration::from_micros(80)),
            upstream_latency: Some(Duration::from_millis(3)),
            first_token: Some(Duration::from_millis(4)),
            attempts: 2,
            tokens: [
                ("input", 10),
                ("output", 5),
                ("cache_read", 0),
                ("cache_write", 0),
                ("reasoning", 0),
                ("audio_input", 0),
                ("cache_write_1h", 0),
            ],
            cost_usd: 0.25,
        };
        m.finished(&f);
        m.finished(&Finished {
            status: 402,
            code: "insufficient_credit",
            refused: true,
            ..f
        });
        let scrape = |billing| Scrape {
            keys: 3,
            models: 2,
            store_reachable: true,
            ledger_queue: 1,
            ledger_spool_bytes: 0,
            journal_unsettled: 0,
            routes: vec![("google/g", "vertex", "us-central1", 2, 3)],
            billing,
        };
        let public = String::from_utf8(m.render(&scrape(false))).unwrap();
        for billing in ["tollgate_cost_usd_total", "tollgate_tokens_total"] {
            assert!(
                !public.contains(billing),
                "{billing} is not public:\n{public}"
            );
        }
        let text = String::from_utf8(m.render(&scrape(true))).unwrap();
        for line in [
            r#"tollgate_requests_total{code="",endpoint="chat",model="google/g",route="vertex",status="200"} 1"#,
            r#"tollgate_refusals_total{code="insufficient_credit"} 1"#,
            r#"tollgate_tokens_total{bucket="input",model="google/g"} 20"#,
            r#"tollgate_upstream_attempts_total{route="vertex"} 4"#,
            r#"tollgate_cost_usd_total{model="google/g"} 0.5"#,
            r#"tollgate_gateway_added_seconds_count{endpoint="chat"} 2"#,
            r#"tollgate_route_state{kind="vertex",model="google/g",region="us-central1"} 2"#,
            "tollgate_keys_cached 3",
            "tollgate_store_reachable 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }
}
