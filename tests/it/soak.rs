//! `make soak`: many gateway replicas on one PostgreSQL, under mixed load, through faults —
//! PostgreSQL restarted mid-run, two replicas upgraded (`serve -u` + `SIGQUIT`), one killed
//! with `SIGKILL` and started again, keys revoked and workspaces topped up while requests run.
//! Then the books are read back and held to the invariants: every answered request has its
//! record (none lost), no record is charged twice, the ledger verifies, overdrafts stay within
//! the stated bound (docs/billing.md, "The overdraft bound"), a revoked key stops everywhere
//! within the change feed's delay. Prints what it saw; any broken invariant fails the test.
//!
//! `#[ignore]`d (minutes long, many processes): `make soak` runs it on release builds.
//! `SOAK_SECONDS` (default 120) bounds the load, `SOAK_GATEWAYS` (default 6, at least 4: the
//! faults need three replicas and one left alone) sets the replicas.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{eventually, Gateway, Sim, ADMIN_TOKEN};
use crate::private_pg::PrivatePg;

/// Concurrent clients per replica (each sends one request at a time).
const CLIENTS_PER_GATEWAY: usize = 3;
/// `max_tokens` of every chat: with the body's bytes, a request's worst case.
const MAX_TOKENS: u64 = 64;
/// `google/gemini-2.5-flash`'s dearest input price (audio, 1.00 USD per 1M tokens) and its
/// output price (2.50), in pico-USD per token: the worst case's factors.
const DEAREST_INPUT_PICO: i64 = 1_000_000;
const OUTPUT_PICO: i64 = 2_500_000;
/// The change feed's delay and the writer's tick, with margin: what other replicas admit in
/// this long after a workspace runs dry is inside the overdraft bound.
const FEED_DELAY: Duration = Duration::from_secs(2);
/// A revoked key let through later than this on any replica is a failure.
const REVOCATION_LIMIT: Duration = Duration::from_secs(5);
/// How long a revoked key is still sent to: past the limit, so one never refused fails.
const PROBE_AFTER: Duration = Duration::from_secs(6);
/// Credit of a workspace kept near zero, and each top-up: a few dozen requests.
const POOR_CREDIT: &str = "0.002";
/// Spend limit of a key kept near its limit.
const LIMIT_USD: &str = "0.003";
const LIMIT_PICO: i64 = 3_000_000_000;

/// What a request is, for the mix and the report.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    Buffered,
    Streamed,
    Embedding,
    /// On a key near its spend limit.
    Limited,
    /// On a workspace near zero credit.
    Poor,
    /// On a key about to be revoked.
    Probe,
}

/// How a request ended for its client.
#[derive(Debug)]
enum Answer {
    /// A whole 200 answer, with its record id (`x-request-id`).
    Whole(String),
    /// A status other than 200.
    Status(u16),
    /// A 200 cut short, or a connection that failed (a replica killed or restarting).
    Broken,
}

/// One request as its client saw it.
struct Sent {
    kind: Kind,
    /// The account: an index into the kind's keys.
    account: usize,
    /// The replica it was sent to.
    gateway: usize,
    /// When it was sent, since the load began.
    at: Duration,
    /// Its worst case in pico-USD.
    worst: i64,
    answer: Answer,
}

/// The keys the load uses, by kind.
struct Accounts {
    rich: Vec<String>,
    limited: Vec<(String, String)>,
    /// (workspace, key secret)
    poor: Vec<(String, String)>,
    /// (key id, secret)
    probes: Vec<(String, String)>,
}

struct Load {
    gateways: Vec<String>,
    accounts: Accounts,
    start: Instant,
    stop: AtomicBool,
    sent: Mutex<Vec<Sent>>,
}

impl Load {
    fn note(&self, sent: Sent) {
        self.sent.lock().unwrap().push(sent);
    }
}

/// One request of `kind` on `gateway` with `key`: how it ended, and its worst case.
async fn send(
    client: &reqwest::Client,
    gateway: &str,
    key: &str,
    kind: Kind,
    i: usize,
) -> (Answer, i64) {
    let (path, body) = match kind {
        Kind::Embedding => (
            "/v1/embeddings",
            json!({"model": "google/text-embedding-004", "input": format!("soak {i}")}),
        ),
        Kind::Streamed => (
            "/v1/chat/completions",
            json!({"model": "google/gemini-2.5-flash", "stream": true, "max_tokens": MAX_TOKENS,
                "messages": [{"role": "user", "content": format!("soak {i} [sim:chunks=4]")}]}),
        ),
        _ => (
            "/v1/chat/completions",
            json!({"model": "google/gemini-2.5-flash", "max_tokens": MAX_TOKENS,
                "messages": [{"role": "user", "content": format!("soak {i}")}]}),
        ),
    };
    let bytes = serde_json::to_vec(&body).unwrap();
    let worst = i64::try_from(bytes.len()).unwrap() * DEAREST_INPUT_PICO
        + i64::try_from(MAX_TOKENS).unwrap() * OUTPUT_PICO;
    let res = client
        .post(format!("{gateway}{path}"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(bytes)
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    let Ok(res) = res else {
        return (Answer::Broken, worst);
    };
    let status = res.status().as_u16();
    let id = res
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let Ok(text) = res.text().await else {
        return (Answer::Broken, worst);
    };
    if status != 200 {
        return (Answer::Status(status), worst);
    }
    let whole = match kind {
        Kind::Streamed => text.trim_end().ends_with("data: [DONE]") && !text.contains("\"error\""),
        Kind::Embedding => text.contains("\"embedding\""),
        _ => text.contains("\"choices\""),
    };
    (
        if whole {
            Answer::Whole(id)
        } else {
            Answer::Broken
        },
        worst,
    )
}

/// One client of one replica: the mix, one request at a time, until the load stops.
async fn client(load: Arc<Load>, gateway: usize, seed: usize) {
    let client = reqwest::Client::new();
    let url = load.gateways[gateway].clone();
    let mut i = seed;
    while !load.stop.load(Ordering::Relaxed) {
        i += 1;
        let (kind, account) = match i % 10 {
            0..=3 => (Kind::Buffered, i % load.accounts.rich.len()),
            4 | 5 => (Kind::Streamed, i % load.accounts.rich.len()),
            6 => (Kind::Embedding, i % load.accounts.rich.len()),
            7 => (Kind::Limited, i % load.accounts.limited.len()),
            _ => (Kind::Poor, i % load.accounts.poor.len()),
        };
        let key = match kind {
            Kind::Limited => &load.accounts.limited[account].1,
            Kind::Poor => &load.accounts.poor[account].1,
            _ => &load.accounts.rich[account],
        };
        let at = load.start.elapsed();
        let (answer, worst) = send(&client, &url, key, kind, i).await;
        if matches!(answer, Answer::Broken) {
            // A replica being killed or restarted: do not spin on a closed port.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        load.note(Sent {
            kind,
            account,
            gateway,
            at,
            worst,
            answer,
        });
    }
}

/// Sends with probe key `probe` on every replica until `until` is set.
async fn probe(load: Arc<Load>, gateway: usize, probe: usize, until: Arc<AtomicBool>) {
    let client = reqwest::Client::new();
    let url = load.gateways[gateway].clone();
    let key = load.accounts.probes[probe].1.clone();
    let mut i = probe * 1_000_000;
    while !until.load(Ordering::Relaxed) {
        i += 1;
        let at = load.start.elapsed();
        let (answer, worst) = send(&client, &url, &key, Kind::Probe, i).await;
        if !matches!(answer, Answer::Whole(_)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        load.note(Sent {
            kind: Kind::Probe,
            account: probe,
            gateway,
            at,
            worst,
            answer,
        });
    }
}

/// A POST on the admin API of `admin` (a replica's admin listener), retried until it answers
/// 2xx (the store may be restarting); returns when it did, since the load began.
async fn admin_post(load: &Load, admin: &str, path: &str, body: Value) -> Duration {
    let client = reqwest::Client::new();
    for _ in 0..300 {
        let res = client
            .post(format!("{admin}{path}"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await;
        if res.is_ok_and(|r| r.status().is_success()) {
            return load.start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("POST {path} never succeeded");
}

/// Probes key `n` on every replica for a second, revokes it, probes [`PROBE_AFTER`] more;
/// returns when the revocation was committed.
async fn revocation(load: Arc<Load>, admin: String, n: usize) -> Duration {
    let until = Arc::new(AtomicBool::new(false));
    let probes: Vec<_> = (0..load.gateways.len())
        .map(|g| tokio::spawn(probe(load.clone(), g, n, until.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let path = format!("/admin/v1/keys/{}/revoke", load.accounts.probes[n].0);
    let revoked = admin_post(&load, &admin, &path, json!({})).await;
    tokio::time::sleep(PROBE_AFTER).await;
    until.store(true, Ordering::Relaxed);
    for p in probes {
        p.await.unwrap();
    }
    revoked
}

/// The faults and account changes of the run, at fractions of its length.
#[derive(Debug, Clone, Copy)]
enum Event {
    Revoke(usize),
    TopUp,
    Upgrade(usize),
    RestartPostgres,
    Kill(usize),
}

fn schedule(gateways: usize) -> Vec<(f64, Event)> {
    let mut events: Vec<(f64, Event)> = vec![
        (0.30, Event::Upgrade(1)),
        (0.45, Event::RestartPostgres),
        (0.60, Event::Kill(2)),
        (0.80, Event::Upgrade(3 % gateways)),
    ];
    // Revocations and top-ups stay clear of the database restart: they need the store.
    let revocations = [0.08, 0.16, 0.24, 0.34, 0.56, 0.66, 0.74, 0.86];
    events.extend(
        revocations
            .iter()
            .enumerate()
            .map(|(n, &at)| (at, Event::Revoke(n))),
    );
    events.extend([0.20, 0.36, 0.70, 0.84].map(|at| (at, Event::TopUp)));
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    events
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The cluster's CPU ticks while it serves, across its restart.
struct PgCpu {
    before_restart: u64,
    base: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes long, many processes: `make soak`"]
async fn many_replicas_with_faults_keep_the_books() {
    let seconds = env_number("SOAK_SECONDS", 120);
    let replicas = usize::try_from(env_number("SOAK_GATEWAYS", 6))
        .unwrap()
        .max(4);
    let pg = PrivatePg::start();
    let sim = Sim::start();
    let mut gateways: Vec<Gateway> = (0..replicas)
        .map(|_| Gateway::builder().store(pg.url()).simulator(&sim).build())
        .collect();
    let accounts = accounts(&gateways[0]);
    for gw in &mut gateways {
        gw.start();
    }
    // The last replica is never upgraded nor killed: the admin calls go there.
    let admin = gateways[replicas - 1].admin.clone();
    let load = Arc::new(Load {
        gateways: gateways.iter().map(|g| g.base.clone()).collect(),
        accounts,
        start: Instant::now(),
        stop: AtomicBool::new(false),
        sent: Mutex::new(Vec::new()),
    });
    let mut cpu = PgCpu {
        before_restart: 0,
        base: pg.cpu_ticks(),
    };
    let clients: Vec<_> = (0..replicas * CLIENTS_PER_GATEWAY)
        .map(|c| tokio::spawn(client(load.clone(), c % replicas, c * 7)))
        .collect();

    let mut revocations = Vec::new();
    for (at, event) in schedule(replicas) {
        let due = Duration::from_secs_f64(seconds as f64 * at);
        tokio::time::sleep(due.saturating_sub(load.start.elapsed())).await;
        println!(
            "soak: {:>6.1}s {event:?}",
            load.start.elapsed().as_secs_f64()
        );
        match event {
            Event::Revoke(n) => {
                revocations.push((n, tokio::spawn(revocation(load.clone(), admin.clone(), n))));
            }
            Event::TopUp => {
                for (ws, _) in &load.accounts.poor {
                    let path = format!("/admin/v1/workspaces/{ws}/credits");
                    admin_post(&load, &admin, &path, json!({"amount_usd": POOR_CREDIT})).await;
                }
            }
            Event::Upgrade(g) => tokio::task::block_in_place(|| gateways[g].upgrade()),
            Event::RestartPostgres => tokio::task::block_in_place(|| {
                cpu.before_restart = pg.cpu_ticks().saturating_sub(cpu.base);
                pg.down();
                std::thread::sleep(Duration::from_secs(3));
                pg.up();
                cpu.base = pg.cpu_ticks();
            }),
            Event::Kill(g) => tokio::task::block_in_place(|| {
                gateways[g].stop(); // SIGKILL
                std::thread::sleep(Duration::from_secs(2));
                gateways[g].start();
            }),
        }
    }
    tokio::time::sleep(Duration::from_secs(seconds).saturating_sub(load.start.elapsed())).await;
    let mut revoked_at = HashMap::new();
    for (n, task) in revocations {
        revoked_at.insert(n, task.await.unwrap());
    }
    load.stop.store(true, Ordering::Relaxed);
    let ran = load.start.elapsed();
    let pg_ticks = cpu.before_restart + pg.cpu_ticks().saturating_sub(cpu.base);
    for c in clients {
        c.await.unwrap();
    }
    // Every replica drains its spool, then stops (SIGTERM flushes the ledger writer).
    for gw in &mut gateways {
        let ready = eventually(Duration::from_secs(60), || async {
            reqwest::get(format!("{}/ready", gw.admin))
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
        assert!(ready.is_some(), "{} never ready again", gw.admin);
        tokio::task::block_in_place(|| gw.terminate());
    }

    let sent = std::mem::take(&mut *load.sent.lock().unwrap());
    let books = Books::read(&pg.url()).await;
    let verify = gateways[0].cli_json(&["ledger", "verify"]);
    let report = Report::new(&load.accounts, &sent, &books, &revoked_at, ran, pg_ticks);
    report.print(replicas, &verify);
    let mut broken = report.broken();
    if verify["inconsistent"] != json!([]) {
        broken.push(format!("ledger verify: {verify}"));
    }
    assert!(broken.is_empty(), "soak invariants broken: {broken:#?}");
}

/// Rich workspaces, keys near their limits, workspaces near zero, keys to revoke.
fn accounts(gw: &Gateway) -> Accounts {
    let funded = |usd: &str| {
        let ws = gw.workspace();
        gw.cli(&["credit", "add", "--workspace", &ws, "--usd", usd]);
        ws
    };
    let rich: Vec<String> = (0..3).map(|_| funded("1000")).collect();
    let secret = |v: Value| v["secret"].as_str().unwrap().to_owned();
    let key = |ws: &str, extra: &[&str]| {
        let mut args = vec!["key", "create", "--workspace", ws];
        args.extend_from_slice(extra);
        let v = gw.cli_json(&args);
        (v["id"].as_str().unwrap().to_owned(), secret(v))
    };
    let limit = ["--spend-limit-usd", LIMIT_USD, "--limit-reset", "monthly"];
    Accounts {
        limited: (0..3).map(|_| key(&rich[0], &limit)).collect(),
        poor: (0..3)
            .map(|_| {
                let ws = funded(POOR_CREDIT);
                let k = key(&ws, &[]).1;
                (ws, k)
            })
            .collect(),
        probes: (0..8).map(|_| key(&rich[1], &[])).collect(),
        rich: rich.iter().map(|ws| key(ws, &[]).1).collect(),
    }
}

/// What the database holds at the end.
struct Books {
    /// Record id → (key id, cost).
    records: HashMap<String, (String, i64)>,
    /// Debits per record id, where more than one.
    charged_twice: usize,
    /// Records with no debit.
    unbilled: usize,
    /// Workspace → balance (sum of its ledger entries).
    balances: HashMap<String, i64>,
}

impl Books {
    async fn read(url: &str) -> Books {
        let (db, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let records = db
            .query("SELECT id, key_id, cost_pico FROM usage_records", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), (r.get(1), r.get(2))))
            .collect();
        let count = |sql: &'static str| {
            let db = &db;
            async move { db.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
        };
        let charged_twice = count(
            "SELECT count(*) FROM (SELECT usage_id FROM ledger_entries WHERE usage_id IS NOT NULL \
             GROUP BY usage_id HAVING count(*) > 1) t",
        )
        .await;
        let unbilled = count(
            "SELECT count(*) FROM usage_records u WHERE NOT EXISTS \
             (SELECT 1 FROM ledger_entries l WHERE l.usage_id = u.id)",
        )
        .await;
        let balances = db
            .query(
                "SELECT workspace_id, sum(amount_pico)::BIGINT FROM ledger_entries GROUP BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        Books {
            records,
            charged_twice: usize::try_from(charged_twice).unwrap(),
            unbilled: usize::try_from(unbilled).unwrap(),
            balances,
        }
    }
}

/// An overdraft seen and its bound, in pico-USD.
#[derive(Default, Clone, Copy)]
struct Overdraft {
    seen: i64,
    bound: i64,
}

struct Report {
    ran: Duration,
    answered: HashMap<Kind, usize>,
    statuses: HashMap<(Kind, u16), usize>,
    broken_connections: usize,
    records: usize,
    lost: Vec<String>,
    charged_twice: usize,
    unbilled: usize,
    poor: Vec<Overdraft>,
    limited: Vec<Overdraft>,
    /// Per revocation: the last request it let through, after it (zero when none), and the
    /// replica that let it through.
    revocation_lags: Vec<(Duration, Option<usize>)>,
    pg_cpu_seconds: f64,
}

impl Report {
    fn new(
        accounts: &Accounts,
        sent: &[Sent],
        books: &Books,
        revoked_at: &HashMap<usize, Duration>,
        ran: Duration,
        pg_ticks: u64,
    ) -> Report {
        let mut answered = HashMap::new();
        let mut statuses = HashMap::new();
        let mut broken_connections = 0;
        let mut lost = Vec::new();
        for s in sent {
            match &s.answer {
                Answer::Whole(id) => {
                    *answered.entry(s.kind).or_default() += 1;
                    if !books.records.contains_key(id) {
                        lost.push(format!("{:?} {id}", s.kind));
                    }
                }
                Answer::Status(code) => *statuses.entry((s.kind, *code)).or_default() += 1,
                Answer::Broken => broken_connections += 1,
            }
        }
        let poor = (0..accounts.poor.len())
            .map(|n| {
                let balance = books
                    .balances
                    .get(&accounts.poor[n].0)
                    .copied()
                    .unwrap_or(0);
                Overdraft {
                    seen: (-balance).max(0),
                    bound: bound(sent, Kind::Poor, n, books),
                }
            })
            .collect();
        let limited = (0..accounts.limited.len())
            .map(|n| {
                let key = &accounts.limited[n].0;
                let spent: i64 = books
                    .records
                    .values()
                    .filter(|(k, _)| k == key)
                    .map(|(_, cost)| cost)
                    .sum();
                Overdraft {
                    seen: (spent - LIMIT_PICO).max(0),
                    bound: bound(sent, Kind::Limited, n, books),
                }
            })
            .collect();
        let revocation_lags = revoked_at
            .iter()
            .map(|(&n, &revoked)| {
                sent.iter()
                    .filter(|s| s.kind == Kind::Probe && s.account == n)
                    .filter(|s| matches!(s.answer, Answer::Whole(_)) && s.at > revoked)
                    .map(|s| (s.at - revoked, Some(s.gateway)))
                    .max()
                    .unwrap_or_default()
            })
            .collect();
        Report {
            ran,
            answered,
            statuses,
            broken_connections,
            records: books.records.len(),
            lost,
            charged_twice: books.charged_twice,
            unbilled: books.unbilled,
            poor,
            limited,
            revocation_lags,
            pg_cpu_seconds: pg_ticks as f64 / clock_ticks_per_second(),
        }
    }

    fn answered_total(&self) -> usize {
        self.answered.values().sum()
    }

    /// The p99 of the revocations' lags, and the replica of that one.
    fn revocation_p99(&self) -> (Duration, Option<usize>) {
        let mut lags = self.revocation_lags.clone();
        lags.sort();
        let rank = (lags.len() * 99).div_ceil(100).max(1) - 1;
        lags.get(rank).copied().unwrap_or_default()
    }

    fn print(&self, replicas: usize, verify: &Value) {
        let secs = self.ran.as_secs_f64();
        let rate = self.answered_total() as f64 / secs;
        let cores = self.pg_cpu_seconds / secs;
        let usd = |pico: i64| pico as f64 / 1e12;
        println!("soak: {replicas} replicas on one PostgreSQL, {secs:.0} s of load");
        println!(
            "  requests answered     {} ({rate:.0}/s): {}",
            self.answered_total(),
            by_kind(&self.answered)
        );
        let mut refused: Vec<_> = self.statuses.iter().collect();
        refused.sort_by_key(|((kind, code), _)| (format!("{kind:?}"), *code));
        let refused: Vec<String> = refused
            .iter()
            .map(|((kind, code), n)| format!("{kind:?} {code}: {n}"))
            .collect();
        println!("  refused               {}", refused.join(", "));
        println!(
            "  cut or unreachable    {} (replicas killed, upgraded or restarting)",
            self.broken_connections
        );
        println!("  records written       {}", self.records);
        println!("  lost                  {}", self.lost.len());
        println!("  counted twice         {}", self.charged_twice);
        println!("  records not debited   {}", self.unbilled);
        println!(
            "  ledger verify         inconsistent {}",
            verify["inconsistent"]
        );
        for (name, all) in [
            ("workspace credit", &self.poor),
            ("key spend limit", &self.limited),
        ] {
            // The account closest to its bound.
            let Some(o) = all.iter().max_by(|a, b| {
                (a.seen as f64 / a.bound.max(1) as f64)
                    .total_cmp(&(b.seen as f64 / b.bound.max(1) as f64))
            }) else {
                continue;
            };
            println!(
                "  overdraft ({name})  {:.6} USD, bound {:.6} USD (closest of {} accounts)",
                usd(o.seen),
                usd(o.bound),
                all.len()
            );
        }
        let (p99, replica) = self.revocation_p99();
        let by = replica.map_or(String::new(), |g| format!(", on replica {g}"));
        println!(
            "  revocation → last request let through, p99 {} ms (max of {} revocations{by}; 0: none after)",
            p99.as_millis(),
            self.revocation_lags.len()
        );
        println!(
            "  PostgreSQL CPU        {:.1} s = {cores:.2} cores at {rate:.0} req/s: {:.2} cores per 1,000 req/s",
            self.pg_cpu_seconds,
            cores / (rate / 1000.0)
        );
    }

    fn broken(&self) -> Vec<String> {
        let mut broken = Vec::new();
        if !self.lost.is_empty() {
            broken.push(format!("answered without a record: {:?}", self.lost));
        }
        if self.charged_twice > 0 {
            broken.push(format!("{} records charged twice", self.charged_twice));
        }
        if self.unbilled > 0 {
            broken.push(format!("{} records without a debit", self.unbilled));
        }
        for (name, all) in [("workspace", &self.poor), ("key", &self.limited)] {
            for (n, o) in all.iter().enumerate() {
                if o.seen > o.bound {
                    broken.push(format!(
                        "{name} {n}: overdraft {} pico-USD over its bound {}",
                        o.seen, o.bound
                    ));
                }
            }
        }
        let (p99, replica) = self.revocation_p99();
        if p99 > REVOCATION_LIMIT {
            broken.push(format!(
                "a revoked key worked {p99:?} later on replica {replica:?}"
            ));
        }
        if self.answered.get(&Kind::Poor).copied().unwrap_or(0) == 0
            || self
                .statuses
                .keys()
                .all(|(k, c)| *k != Kind::Poor || *c != 402)
        {
            broken.push("the near-zero workspaces were never both served and refused".into());
        }
        broken
    }
}

/// The stated bound for account `n` of `kind`: one request's worst case (the dearest seen,
/// or the dearest record when the upstream produced more than asked), times one plus the most
/// requests of the account all replicas answered within the change feed's delay.
fn bound(sent: &[Sent], kind: Kind, n: usize, books: &Books) -> i64 {
    let mine: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.kind == kind && s.account == n)
        .collect();
    let mut times: Vec<Duration> = mine
        .iter()
        .filter(|s| matches!(s.answer, Answer::Whole(_)))
        .map(|s| s.at)
        .collect();
    times.sort();
    let in_window = (0..times.len())
        .map(|i| times[i..].partition_point(|t| *t < times[i] + FEED_DELAY))
        .max()
        .unwrap_or(0);
    let dearest_record = mine
        .iter()
        .filter_map(|s| match &s.answer {
            Answer::Whole(id) => books.records.get(id).map(|r| r.1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let worst = mine
        .iter()
        .map(|s| s.worst)
        .max()
        .unwrap_or(0)
        .max(dearest_record);
    worst * (1 + i64::try_from(in_window).unwrap())
}

fn by_kind(counts: &HashMap<Kind, usize>) -> String {
    let mut all: Vec<String> = counts.iter().map(|(k, n)| format!("{k:?} {n}")).collect();
    all.sort();
    all.join(", ")
}

/// `getconf CLK_TCK` (100 on Linux unless told otherwise).
fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}
