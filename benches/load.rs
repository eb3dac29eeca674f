//! The load bench (`make bench`): the release gateway and the simulator as separate processes
//! pinned to separate cores, an open-loop load generator (this process, on the simulator's
//! core) and HDR histograms. Every case runs against the gateway and against the simulator hit
//! directly with the upstream call the gateway makes, so "added" is the gateway's share. Prints
//! a table with each budget's pass/fail and writes `target/bench/load-<unix time>.json`.
//! Budgets are checked here, never in tests.
//!
//! `cargo bench --bench load -- [--quick] [--store postgres://…] [--only rates,max,journal,doors,conversations,agents,streams,embeddings,oha,nginx]`
//! (the Makefile builds the release binaries first and pins this process with `taskset`).
//! `--train` measures nothing: it sends the workload `make build-pgo` profiles the gateway on.
//! `BENCH_GATEWAY=path` runs that build of the gateway instead of `target/release/tollgate`.
//! The `oha` case runs when `oha` is on PATH (`make bench-tools`), and is skipped otherwise.
//! `BENCH_WRAP="valgrind --tool=massif"` runs the gateway under a tool (its RSS and CPU are
//! then the tool's); `BENCH_SERVER_CONF="work_stealing: false;"` adds Pingora server settings
//! (`;` separates lines) to the gateway's conf. The gateway speaks HTTP/2 to the simulator
//! (`upstream.http2: always`, h2c), as it does to the providers over TLS; `BENCH_HTTP2=never`
//! makes it HTTP/1.1, a connection per call in flight.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]
// The bench drives load from tasks of its own.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const PROMPT: &str = "Tell me about the history of the bicycle in thirty two words or so, \
                      including who invented it, when it became popular, and why people still \
                      love riding it today in cities and villages.";

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    /// SIGTERM first (a tool wrapping the gateway writes its profile on exit), then SIGKILL.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `taskset -c CORE cmd…` when the machine has more than one core.
fn pinned(core: usize, program: &str) -> Command {
    if machine_cores() > 1 && which("taskset") {
        let mut c = Command::new("taskset");
        c.arg("-c").arg(core.to_string()).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// The machine's cores, whatever this process is pinned to (`available_parallelism` counts only
/// the cores this process may use: under `make bench`'s `taskset -c 1`, one).
fn machine_cores() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|list| {
            let last = list
                .trim()
                .rsplit([',', '-'])
                .next()?
                .parse::<usize>()
                .ok()?;
            Some(last + 1)
        })
        .unwrap_or(1)
}

fn which(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn bin(name: &str) -> String {
    let path = format!("{ROOT}/target/release/{name}");
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} missing: `cargo build --release --workspace --bins` (make bench does)"
    );
    path
}

/// The gateway's binary: the release build's, or `BENCH_GATEWAY` (another build of it, such as
/// the instrumented one `make build-pgo` trains).
fn gateway_bin() -> String {
    std::env::var("BENCH_GATEWAY").unwrap_or_else(|_| bin("tollgate"))
}

/// The simulator on `core`; its base URL.
fn start_sim(core: usize) -> (Proc, String) {
    let mut child = pinned(core, &bin("tollgate-sim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--no-record",
            "--vertex-project",
            "bench",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    (Proc(child), url)
}

struct Gateway {
    proc: Proc,
    addr: String,
    /// The operators' listener (`/metrics`).
    admin: String,
    conf: std::path::PathBuf,
    store: String,
    _dir: tempfile::TempDir,
}

/// Whether something accepts connections on `addr` within `within`.
fn listening(addr: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Gateway {
    /// A gateway on `core`; `extra`: more lines of its `tollgate:` section.
    fn start(core: usize, sim: &str, store: Option<&str>, extra: &str) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let (port, admin) = (free_port(), free_port());
        let store = store.map_or_else(
            || format!("sqlite://{}/bench.db", dir.path().display()),
            str::to_owned,
        );
        let conf = dir.path().join("bench.yaml");
        std::fs::write(
            &conf,
            format!(
                "threads: 1\n{extra}grace_period_seconds: 1\ngraceful_shutdown_timeout_seconds: 1\n\
                 upgrade_sock: {d}/u.sock\npid_file: {d}/pid\ntollgate:\n  listen: 127.0.0.1:{port}\n  \
                 admin_listen: 127.0.0.1:{admin}\n  store: \"{store}\"\n  catalog_file: {ROOT}/conf/catalog.yaml\n  \
                 ledger_spool: {d}/spool\n{extra_tollgate}  log: {{level: error}}\n  \
                 upstream: {{http2: {http2}}}\n  \
                 providers:\n    gemini: {{base_url: \"{sim}\", api_key_env: BENCH_GEMINI_KEY}}\n    \
                 vertex: {{base_url: \"{sim}\", global_base_url: \"{sim}\", token_url: \"{sim}/token\", \
                 project_env: BENCH_VERTEX_PROJECT, credentials_env: BENCH_VERTEX_CREDENTIALS}}\n    \
                 anthropic: {{base_url: \"{sim}\", api_key_env: BENCH_ANTHROPIC_KEY}}\n",
                d = dir.path().display(),
                extra_tollgate = extra,
                http2 = std::env::var("BENCH_HTTP2").unwrap_or_else(|_| "always".into()),
                extra = std::env::var("BENCH_SERVER_CONF").unwrap_or_default().replace(';', "\n")
            ),
        )
        .unwrap();
        // `BENCH_WRAP="valgrind --tool=massif"` (or perf, strace…) runs the gateway under a
        // tool, for profiles taken under the bench's own load.
        let wrap = std::env::var("BENCH_WRAP").unwrap_or_default();
        let mut words = wrap
            .split_whitespace()
            .chain([gateway_bin().leak() as &str]);
        let mut command = pinned(core, words.next().unwrap_or_default());
        command.args(words);
        let proc = Proc(
            command
                .arg("-c")
                .arg(&conf)
                .arg("serve")
                .env("BENCH_GEMINI_KEY", "sim-gemini-key")
                .env("BENCH_ANTHROPIC_KEY", "sim-anthropic-key")
                .env("BENCH_VERTEX_PROJECT", "bench")
                .env(
                    "BENCH_VERTEX_CREDENTIALS",
                    format!("{ROOT}/tests/fixtures/test-service-account.json"),
                )
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let addr = format!("127.0.0.1:{port}");
        assert!(
            listening(&addr, Duration::from_secs(30)),
            "the gateway did not start"
        );
        Gateway {
            proc,
            addr,
            admin: format!("127.0.0.1:{admin}"),
            conf,
            store,
            _dir: dir,
        }
    }

    fn cli(&self, args: &[&str]) -> Value {
        let out = Command::new(gateway_bin())
            .arg("-c")
            .arg(&self.conf)
            .arg("--json")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    /// A workspace with ample credit and a key: (workspace id, secret).
    fn key(&self) -> (String, String) {
        let ws = self.cli(&["workspace", "create", "--name", "bench"])["id"]
            .as_str()
            .unwrap()
            .to_owned();
        self.cli(&["credit", "add", "--workspace", &ws, "--usd", "1000000"]);
        let secret = self.cli(&["key", "create", "--workspace", &ws])["secret"]
            .as_str()
            .unwrap()
            .to_owned();
        std::thread::sleep(Duration::from_millis(500)); // the change feed brings the key
        (ws, secret)
    }

    fn pid(&self) -> u32 {
        self.proc.0.id()
    }
}

/// The gateway process itself (under `taskset`, the child is taskset's exec: same pid).
fn rss_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU seconds used by `pid` so far (user + system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime, in ticks of 1/100 s) follow the name at 11 and 12.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// One HTTP/1.1 POST: serialised once for the bench's own generator, and in parts for oha.
#[derive(Clone)]
struct Target {
    addr: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Arc<str>,
    request: Arc<Vec<u8>>,
}

fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Target {
    post_raw(addr, path, headers, body.to_string())
}

/// [`post`] of a body already written.
fn post_raw(addr: &str, path: &str, headers: &[(&str, &str)], body: String) -> Target {
    let mut r = format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.push_str(&body);
    Target {
        addr: addr.to_owned(),
        path: path.to_owned(),
        headers: headers
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        body: body.into(),
        request: Arc::new(r.into_bytes()),
    }
}

/// What one exchange took: to the first body bytes, and to the end.
struct Timing {
    status: u16,
    first: Duration,
    done: Duration,
    /// The gateway's own time by its `server-timing` header, in µs.
    gateway_us: Option<u64>,
}

/// A keep-alive connection that sends a prepared request and reads the answer (length-framed or
/// chunked) with as little work as possible: the generator must not be what is measured.
struct Conn {
    target: Target,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

impl Conn {
    fn new(target: Target) -> Self {
        Conn {
            target,
            stream: None,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    async fn exchange(&mut self) -> std::io::Result<Timing> {
        let start = Instant::now();
        if self.stream.is_none() {
            let s = TcpStream::connect(&self.target.addr).await?;
            s.set_nodelay(true)?;
            self.stream = Some(s);
        }
        let result = self.exchange_on(start).await;
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn exchange_on(&mut self, start: Instant) -> std::io::Result<Timing> {
        let stream = self.stream.as_mut().expect("connected");
        stream.write_all(&self.target.request).await?;
        self.buf.clear();
        let mut scanned = 0;
        let head_end = loop {
            if let Some(i) = find(&self.buf[scanned..], b"\r\n\r\n") {
                break scanned + i + 4;
            }
            scanned = self.buf.len().saturating_sub(3);
            read_more(stream, &mut self.buf).await?;
        };
        let head = Head::parse(&self.buf[..head_end]);
        let mut first = None;
        if self.buf.len() > head_end {
            first = Some(start.elapsed());
        }
        match head.length {
            Some(n) => {
                while self.buf.len() < head_end + n {
                    read_more(stream, &mut self.buf).await?;
                    first.get_or_insert_with(|| start.elapsed());
                }
            }
            None => {
                // Chunked: the body ends with the zero-size chunk.
                let mut scanned = head_end;
                loop {
                    let body = &self.buf[head_end..];
                    if body.starts_with(b"0\r\n\r\n")
                        || find(&self.buf[scanned..], b"\r\n0\r\n\r\n").is_some()
                    {
                        break;
                    }
                    scanned = self.buf.len().saturating_sub(6).max(head_end);
                    read_more(stream, &mut self.buf).await?;
                    first.get_or_insert_with(|| start.elapsed());
                }
            }
        }
        let done = start.elapsed();
        if head.close {
            self.stream = None;
        }
        Ok(Timing {
            status: head.status,
            first: first.unwrap_or(done),
            done,
            gateway_us: head.gateway_us,
        })
    }
}

/// What the bench reads from a response head, taken in one pass over its lines (the generator
/// shares a core with the simulator: every byte it looks at twice is time taken from both).
struct Head {
    status: u16,
    length: Option<usize>,
    close: bool,
    /// `server-timing: gateway;dur=<ms>`, in µs.
    gateway_us: Option<u64>,
}

impl Head {
    fn parse(head: &[u8]) -> Head {
        let status = std::str::from_utf8(head.get(9..12).unwrap_or_default())
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut h = Head {
            status,
            length: None,
            close: false,
            gateway_us: None,
        };
        for line in head.split(|&b| b == b'\n').skip(1) {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
            if name.eq_ignore_ascii_case(b"content-length") {
                h.length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
            } else if name.eq_ignore_ascii_case(b"connection") {
                h.close = value.eq_ignore_ascii_case(b"close");
            } else if name.eq_ignore_ascii_case(b"server-timing") {
                h.gateway_us = h.gateway_us.or_else(|| gateway_dur(value));
            }
        }
        h
    }
}

/// The `gateway` metric's duration in a `server-timing` value
/// (`gateway;dur=0.123, upstream;dur=4.567`, in ms), in µs.
fn gateway_dur(value: &[u8]) -> Option<u64> {
    const METRIC: &[u8] = b"gateway;dur=";
    let rest = &value[find(value, METRIC)? + METRIC.len()..];
    let end = rest
        .iter()
        .position(|&b| !(b.is_ascii_digit() || b == b'.'))
        .unwrap_or(rest.len());
    let ms: f64 = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    Some((ms * 1000.0).round() as u64)
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.reserve(16 * 1024);
    if stream.read_buf(buf).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Latencies (µs) of a run and how it went.
struct Run {
    /// To the answer's end (open loop: from when the request was due, so that a stalled server
    /// cannot hide its queue).
    done: Histogram<u64>,
    /// To the first body bytes (streams' time to first token).
    first: Histogram<u64>,
    /// The gateway's own account of each 200 answer (`server-timing: gateway;dur=`).
    server_timing: Histogram<u64>,
    /// 200 answers without that header.
    server_timing_missing: u64,
    ok: u64,
    errors: u64,
    seconds: f64,
}

impl Run {
    fn new() -> Run {
        let histogram = || Histogram::new_with_bounds(1, 60_000_000, 3).unwrap();
        Run {
            done: histogram(),
            first: histogram(),
            server_timing: histogram(),
            server_timing_missing: 0,
            ok: 0,
            errors: 0,
            seconds: 0.0,
        }
    }

    /// Counts one exchange, which started `late` after it was due (zero in a closed loop).
    fn record(&mut self, late: Duration, result: std::io::Result<Timing>) {
        let t = match result {
            Ok(t) if t.status == 200 => t,
            _ => {
                self.errors += 1;
                return;
            }
        };
        self.ok += 1;
        self.done
            .saturating_record((late + t.done).as_micros() as u64);
        self.first
            .saturating_record((late + t.first).as_micros() as u64);
        match t.gateway_us {
            Some(us) => self.server_timing.saturating_record(us),
            None => self.server_timing_missing += 1,
        }
    }

    /// Adds one connection's part (the histograms share their bounds, so adding cannot fail).
    fn merge(&mut self, part: Run) {
        self.done.add(part.done).unwrap();
        self.first.add(part.first).unwrap();
        self.server_timing.add(part.server_timing).unwrap();
        self.server_timing_missing += part.server_timing_missing;
        self.ok += part.ok;
        self.errors += part.errors;
    }

    /// Successful requests a second.
    fn rate(&self) -> f64 {
        self.ok as f64 / self.seconds.max(1e-9)
    }
}

/// Open loop: request `i` is due at `start + i / rate`; its latency counts from then, so a
/// stalled server cannot hide its queue (coordinated omission). `conns` connections send, each
/// taking the next due request when its last is answered.
async fn open_loop(target: &Target, rate: u64, seconds: u64, conns: usize) -> Run {
    let total = rate * seconds;
    let next = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let interval = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let tasks = (0..conns).map(|_| {
        let (next, target) = (next.clone(), target.clone());
        tokio::spawn(async move {
            let mut conn = Conn::new(target);
            let mut run = Run::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let due = start + interval * u32::try_from(i).unwrap_or(u32::MAX);
                // Behind schedule (this connection was busy): the wait counts, as the
                // server's queue. Ahead: the timer's own lateness (up to 1 ms) does not.
                let late = if tokio::time::Instant::now() >= due {
                    tokio::time::Instant::now().saturating_duration_since(due)
                } else {
                    tokio::time::sleep_until(due).await;
                    Duration::ZERO
                };
                run.record(late, conn.exchange().await);
            }
            run
        })
    });
    collect(tasks.collect(), start.into_std()).await
}

/// Closed loop: `conns` connections send back to back for `seconds`.
async fn closed_loop(target: &Target, seconds: u64, conns: usize) -> Run {
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let tasks = (0..conns).map(|_| {
        let target = target.clone();
        tokio::spawn(async move {
            let mut conn = Conn::new(target);
            let mut run = Run::new();
            while Instant::now() < end {
                run.record(Duration::ZERO, conn.exchange().await);
            }
            run
        })
    });
    collect(tasks.collect(), start).await
}

async fn collect(tasks: Vec<tokio::task::JoinHandle<Run>>, start: Instant) -> Run {
    let mut run = Run::new();
    for t in tasks {
        run.merge(t.await.unwrap());
    }
    run.seconds = start.elapsed().as_secs_f64();
    run
}

fn pct(h: &Histogram<u64>, q: f64) -> u64 {
    h.value_at_quantile(q)
}

/// The percentiles every case reports: p50, p99, p99.9.
const QUANTILES: [f64; 3] = [0.5, 0.99, 0.999];

fn quantiles(h: &Histogram<u64>) -> [u64; 3] {
    QUANTILES.map(|q| pct(h, q))
}

/// What the gateway added: its percentiles minus the upstream's alone at the same rate.
fn added(gateway: &Histogram<u64>, upstream: &Histogram<u64>) -> [u64; 3] {
    QUANTILES.map(|q| pct(gateway, q).saturating_sub(pct(upstream, q)))
}

fn quantiles_json([p50, p99, p999]: [u64; 3]) -> Value {
    json!({"p50": p50, "p99": p99, "p999": p999})
}

/// A request through the gateway, and the upstream call the gateway makes for it sent to the
/// simulator directly: the same load on both tells what the gateway adds.
#[derive(Clone)]
struct Route {
    gw: Target,
    sim: Target,
}

/// One open-loop load on the gateway, then the same on the simulator directly.
struct Versus {
    rate: u64,
    gw: Run,
    sim: Run,
}

/// `route` at `rate` through the gateway, then straight to the simulator, back to back so that
/// both see the machine in the same state.
async fn versus(route: &Route, rate: u64, secs: u64, conns: usize) -> Versus {
    let gw = open_loop(&route.gw, rate, secs, conns).await;
    let sim = open_loop(&route.sim, rate, secs, conns).await;
    Versus { rate, gw, sim }
}

impl Versus {
    /// Added to the whole exchange (a stream: to its last byte).
    fn added(&self) -> [u64; 3] {
        added(&self.gw.done, &self.sim.done)
    }

    /// Added to the first body bytes (a stream: its time to first token).
    fn added_ttft(&self) -> [u64; 3] {
        added(&self.gw.first, &self.sim.first)
    }

    /// A table row: `label`, then the added percentiles `q`, with the gateway's errors and rate.
    fn row(&self, label: &str, q: [u64; 3]) {
        let case = format!("{label} @ {}/s (errors {})", self.rate, self.gw.errors);
        row(&case, q, self.gw.rate());
    }

    fn json(&self) -> Value {
        json!({
            "rate": self.rate, "ok": self.gw.ok, "errors": self.gw.errors,
            "gateway_us": quantiles_json(quantiles(&self.gw.done)),
            "upstream_alone_us": quantiles_json(quantiles(&self.sim.done)),
            "added_us": quantiles_json(self.added()),
            "added_ttft_us": quantiles_json(self.added_ttft()),
        })
    }
}

/// One budget: what was measured against what is allowed.
struct Check {
    name: String,
    value: f64,
    unit: &'static str,
    budget: f64,
    /// The value must be at least the budget (a rate), else at most (a time or a size).
    at_least: bool,
}

impl Check {
    /// NaN (not measured) fails either way.
    fn passes(&self) -> bool {
        if self.at_least {
            self.value >= self.budget
        } else {
            self.value <= self.budget
        }
    }
}

/// A front door: its buffered request and, but for embeddings, its streamed one.
struct Door {
    name: &'static str,
    buffered: Route,
    streamed: Option<Route>,
}

struct Targets {
    chat_buffered: Route,
    chat_streamed: Route,
    /// Every front door, chat first (the others are compared with it).
    doors: Vec<Door>,
    /// Embeddings of [`EMBED_BATCH`] inputs.
    embed_batch: Route,
    /// Chat, Messages and Responses, each sent the same agent-sized conversation (buffered).
    conversations: Vec<Door>,
    /// Claude Code's and Codex's own requests, each to a Gemini and a Claude model (buffered).
    agents: Vec<(String, Target)>,
}

/// Turns of the `conversations` case's conversation: a user and an assistant message each.
const TURNS: usize = 20;

/// Part `k` of turn `i`'s messages: about 150 bytes of text with the quotes and line breaks an
/// agent's context is full of (each an escape in the JSON).
fn turn_text(i: usize, k: usize) -> String {
    format!(
        "Turn {i}, part {k}: \"the bicycle\" came first,\n then the pedal,\n then the chain; \
         each one a step that made riding in towns \"easier\" than walking.\n"
    )
}

/// The same conversation on the chat, Messages and Responses doors ([`TURNS`] turns of two
/// text parts a message, then [`PROMPT`]), and the Gemini call each door makes of it. `sim`:
/// the simulator's address.
fn conversations(gw: &str, sim: &str, bearer: &[(&str, &str)], secret: &str) -> Vec<Door> {
    let parts = |kind: &str, texts: &[String; 2]| json!([{"type": kind, "text": texts[0]}, {"type": kind, "text": texts[1]}]);
    // The Messages door's blocks have the chat door's shape: one list serves both.
    let (mut chat, mut responses, mut contents) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..TURNS {
        let texts = [turn_text(i, 0), turn_text(i, 1)];
        for (role, input) in [("user", "input_text"), ("assistant", "output_text")] {
            chat.push(json!({"role": role, "content": parts("text", &texts)}));
            responses
                .push(json!({"type": "message", "role": role, "content": parts(input, &texts)}));
            let role = if role == "user" { "user" } else { "model" };
            contents.push(json!({"role": role, "parts": [{"text": texts[0]}, {"text": texts[1]}]}));
        }
    }
    chat.push(json!({"role": "user", "content": PROMPT}));
    responses.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}));
    contents.push(json!({"role": "user", "parts": [{"text": PROMPT}]}));
    let door = |name, path, headers: &[(&str, &str)], body: Value, upstream: Value| Door {
        name,
        buffered: Route {
            gw: post(gw, path, headers, &body),
            sim: gemini(sim, false, &upstream),
        },
        streamed: None,
    };
    let capped = json!({"contents": contents, "generationConfig": {"maxOutputTokens": 256}});
    vec![
        door(
            "chat, conversation",
            "/v1/chat/completions",
            bearer,
            json!({"model": MODEL, "messages": &chat}),
            json!({"contents": contents}),
        ),
        door(
            "messages, conversation",
            "/v1/messages",
            &[("x-api-key", secret)],
            json!({"model": MODEL, "max_tokens": 256, "messages": &chat}),
            capped,
        ),
        door(
            "responses, conversation",
            "/v1/responses",
            bearer,
            json!({"model": MODEL, "input": responses, "store": false}),
            json!({"contents": contents}),
        ),
    ]
}

/// The Gemini model of the `agents` case: one that takes explicit caches (Gemini 3.6 and later
/// do not), so that Claude Code's `cache_control` takes the cache step.
const GEMINI_CACHING_MODEL: &str = "google/gemini-3.1-flash-lite";
/// The Claude model of the `agents` case (the default catalog sends it to Anthropic's API).
const CLAUDE_MODEL: &str = "anthropic/claude-sonnet-4-6";

/// The requests Claude Code (the Messages door) and Codex (the Responses door) sent, as captured
/// from the real CLIs (`tests/fixtures/*/SOURCES.md`: 88 KB and 41 KB, most of it system prompt
/// and tools), compact, buffered, each to a Gemini model and to a Claude model.
/// Claude Code marks its system prompt `cache_control`: on Gemini that is an explicit cache,
/// made by the first request and named by the rest.
fn agents(gw: &str, bearer: &[(&str, &str)], secret: &str) -> Vec<(String, Target)> {
    let fixture = |path: &str| {
        let text = std::fs::read_to_string(format!("{ROOT}/tests/fixtures/{path}")).unwrap();
        compact(&text)
    };
    let claude_code = fixture("messages/claude-code-captured-request.json");
    let codex = fixture("responses/codex-captured-request.json");
    let mut targets = Vec::new();
    for model in [GEMINI_CACHING_MODEL, CLAUDE_MODEL] {
        targets.push((
            format!("claude code, {model}"),
            post_raw(
                gw,
                "/v1/messages",
                &[("x-api-key", secret)],
                buffered(&claude_code, model),
            ),
        ));
        // The captured reasoning item's signature is a placeholder, which Claude (and the
        // simulator, as Claude does) refuses: Claude is sent the conversation without it (and
        // the gateway then sends that tool turn without thinking).
        let codex = if model == CLAUDE_MODEL {
            without_reasoning(&codex)
        } else {
            codex.clone()
        };
        targets.push((
            format!("codex, {model}"),
            post_raw(gw, "/v1/responses", bearer, buffered(&codex, model)),
        ));
    }
    targets
}

/// `json` without the whitespace between its tokens (a string's own is kept).
fn compact(json: &str) -> String {
    let (mut out, mut in_string, mut escaped) = (String::with_capacity(json.len()), false, false);
    for c in json.chars() {
        if in_string {
            (in_string, escaped) = (escaped || c != '"', !escaped && c == '\\');
        } else if c.is_ascii_whitespace() {
            continue;
        } else {
            in_string = c == '"';
        }
        out.push(c);
    }
    out
}

/// A Responses body (compact) without its `reasoning` input items.
fn without_reasoning(body: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<&'a str>,
    }
    let fields = tollgate::api::request::object_fields(body.as_bytes()).unwrap();
    let mut input = String::from("[");
    for item in fields
        .iter()
        .filter(|(name, _)| name == "input")
        .flat_map(|(_, raw)| {
            serde_json::from_str::<Vec<&serde_json::value::RawValue>>(raw.get()).unwrap()
        })
    {
        if serde_json::from_str::<Kind>(item.get()).unwrap().kind != Some("reasoning") {
            if input.len() > 1 {
                input.push(',');
            }
            input.push_str(item.get());
        }
    }
    input.push(']');
    replaced(body, &[("input", &input)])
}

/// A captured body (compact) naming `model`, not streamed.
fn buffered(body: &str, model: &str) -> String {
    replaced(
        body,
        &[("model", &json!(model).to_string()), ("stream", "false")],
    )
}

/// `body` (compact) with the values of the top-level fields `values` names (JSON text) in
/// place of its own, its fields in the order the agent wrote them.
fn replaced(body: &str, values: &[(&str, &str)]) -> String {
    let fields = tollgate::api::request::object_fields(body.as_bytes()).unwrap();
    let fields = fields.iter().map(|(name, raw)| {
        let value = values.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        (name.as_ref(), value.unwrap_or(raw.get()))
    });
    let mut out = Vec::new();
    tollgate::api::request::write_object(&mut out, fields);
    String::from_utf8(out).unwrap()
}

/// Inputs per embeddings request of the `embeddings` case.
const EMBED_BATCH: usize = 100;
/// Google's successor of the Gemini 2.5 Flash the bench used until its shutdown (2026-12-01).
const MODEL: &str = "google/gemini-3.5-flash-lite";

fn targets(gw: &str, sim: &str, secret: &str) -> Targets {
    let sim = sim.trim_start_matches("http://");
    let bearer = format!("Bearer {secret}");
    let bearer = [("authorization", bearer.as_str())];
    let user = json!([{"role": "user", "content": PROMPT}]);
    // The Gemini call each door makes for these bodies, as the simulator's request log shows it
    // (the Messages door's `max_tokens` becomes `maxOutputTokens`).
    let contents = json!([{"role": "user", "parts": [{"text": PROMPT}]}]);
    let plain = json!({"contents": contents});
    let capped = json!({"contents": contents, "generationConfig": {"maxOutputTokens": 256}});
    let door = |name, path, headers: &[(&str, &str)], body: &dyn Fn(bool) -> Value, upstream| {
        let route = |stream| Route {
            gw: post(gw, path, headers, &body(stream)),
            sim: gemini(sim, stream, upstream),
        };
        Door {
            name,
            buffered: route(false),
            streamed: Some(route(true)),
        }
    };
    let chat = door(
        "chat",
        "/v1/chat/completions",
        &bearer,
        &|stream| json!({"model": MODEL, "stream": stream, "messages": user}),
        &plain,
    );
    let messages = door(
        "messages",
        "/v1/messages",
        &[("x-api-key", secret)],
        &|stream| json!({"model": MODEL, "max_tokens": 256, "stream": stream, "messages": user}),
        &capped,
    );
    let responses = door(
        "responses",
        "/v1/responses",
        &bearer,
        &|stream| json!({"model": MODEL, "input": PROMPT, "stream": stream}),
        &plain,
    );
    // One input, so that its added time compares with a chat request's.
    let embeddings = Door {
        name: "embeddings",
        buffered: embed_route(gw, sim, &bearer, 1),
        streamed: None,
    };
    Targets {
        chat_buffered: chat.buffered.clone(),
        chat_streamed: chat.streamed.clone().expect("chat streams"),
        doors: vec![chat, messages, responses, embeddings],
        embed_batch: embed_route(gw, sim, &bearer, EMBED_BATCH),
        conversations: conversations(gw, sim, &bearer, secret),
        agents: agents(gw, &bearer, secret),
    }
}

/// Seconds [`train`] sends each of its requests for.
const TRAIN_SECS: u64 = 2;
/// The models [`train`] sends to, and whether with a tool conversation: Gemini, a Claude model
/// that thinks only when asked, and one that always does (its answers carry thinking blocks, and
/// a tool turn would have to send the earlier turn's back, which the simulator checks); then one
/// of each family that the default catalog serves through Vertex only (their providers' own
/// APIs shut them down), so that Vertex's paths are in the profile too.
const TRAIN_MODELS: [(&str, bool); 5] = [
    (MODEL, true),
    ("anthropic/claude-sonnet-4-6", true),
    ("anthropic/claude-haiku-5-5", false),
    ("google/gemini-2.5-flash", true),
    ("anthropic/claude-sonnet-4-5", true),
];

/// `--train`: measures nothing. Each of [`training`]'s requests runs in a closed loop for
/// [`TRAIN_SECS`]. This is the workload `make build-pgo` records the gateway's profile on: a
/// path it left out would be laid out as cold code, so a refused request stops it.
async fn train(gw: &str, secret: &str) {
    for request in &training(gw, secret) {
        let run = closed_loop(request, TRAIN_SECS, 16).await;
        let body = request.body.get(..60).unwrap_or(&request.body);
        println!("{:<20} {body:<60} {:>7} answered", request.path, run.ok);
        assert!(
            run.errors == 0 && run.ok > 0,
            "{} {}: {} refused",
            request.path,
            request.body,
            run.errors
        );
    }
}

/// Every front door to both families on the routes the default catalog tries first (Gemini's
/// Developer API, Anthropic's API, and Vertex for the models only it still serves), buffered
/// and streamed: a one-line prompt, a conversation, and one with a tool call; then embeddings
/// of one input and of 100; then the agents' captured requests ([`agents`]).
fn training(gw: &str, secret: &str) -> Vec<Target> {
    let bearer = format!("Bearer {secret}");
    let bearer = [("authorization", bearer.as_str())];
    let api_key = [("x-api-key", secret)];
    let user = json!([{"role": "user", "content": PROMPT}]);
    let tools = json!([{"type": "function", "function": {"name": "weather",
        "description": "Today's weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let conversation = json!([
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": "Bicycles date from 1817."},
        {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]},
    ]);
    // Tools on the chat door are Gemini's only: the door refuses them for Claude, whose tools
    // the Messages and Responses doors carry.
    let tool_turns = json!([
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"sky\":\"clear\",\"celsius\":21}"},
    ]);
    let messages_turns = json!([
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather",
            "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
            "content": "{\"sky\":\"clear\"}"}, {"type": "text", "text": "And tomorrow?"}]},
    ]);
    let messages_tools = json!([{"name": "weather", "description": "Today's weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let mut requests = Vec::new();
    for (model, with_tools) in TRAIN_MODELS {
        for stream in [false, true] {
            let chat = |body: Value| post(gw, "/v1/chat/completions", &bearer, &body);
            let messages = |body: Value| post(gw, "/v1/messages", &api_key, &body);
            let responses = |body: Value| post(gw, "/v1/responses", &bearer, &body);
            let mut turns = json!({"model": model, "stream": stream, "messages": conversation,
                "temperature": 0.2, "max_tokens": 512});
            if stream {
                turns["stream_options"] = json!({"include_usage": true});
            }
            requests.extend([
                chat(json!({"model": model, "stream": stream, "messages": user})),
                chat(turns),
                messages(json!({"model": model, "max_tokens": 256, "stream": stream,
                    "messages": user})),
                responses(json!({"model": model, "input": PROMPT, "stream": stream})),
            ]);
            if !with_tools {
                continue;
            }
            if model.starts_with("google/") {
                requests.push(chat(json!({"model": model, "stream": stream,
                    "messages": tool_turns, "tools": tools, "tool_choice": "auto"})));
            }
            requests.push(messages(
                json!({"model": model, "max_tokens": 512, "stream": stream,
                "system": "You answer briefly.", "messages": messages_turns,
                "tools": messages_tools}),
            ));
            requests.push(responses(json!({"model": model, "stream": stream,
                "instructions": "You answer briefly.", "tools": [{"type": "function",
                "name": "weather", "parameters": {"type": "object", "properties": {}}}],
                "input": [{"role": "user", "content": PROMPT},
                          {"type": "function_call", "call_id": "call_1", "name": "weather",
                           "arguments": "{}"},
                          {"type": "function_call_output", "call_id": "call_1",
                           "output": "clear"}]})));
        }
    }
    for n in [1, EMBED_BATCH] {
        let inputs: Vec<String> = (0..n).map(|i| format!("{i}: {PROMPT}")).collect();
        let body = json!({"model": "google/text-embedding-004", "input": inputs});
        requests.push(post(gw, "/v1/embeddings", &bearer, &body));
    }
    requests.extend(agents(gw, &bearer, secret).into_iter().map(|(_, t)| t));
    requests
}

/// The simulator's Gemini generateContent (or its SSE stream) for `body`.
fn gemini(sim: &str, stream: bool, body: &Value) -> Target {
    let path = if stream {
        "/v1beta/models/gemini-3.5-flash-lite:streamGenerateContent?alt=sse"
    } else {
        "/v1beta/models/gemini-3.5-flash-lite:generateContent?prettyPrint=false"
    };
    post(sim, path, &[("x-goog-api-key", "sim-gemini-key")], body)
}

/// Embeddings of `n` inputs, and the one call the gateway makes for them: a Developer API
/// `batchEmbedContents` of `gemini-embedding-001` cut to the 768 dimensions that
/// `google/text-embedding-004` promises.
fn embed_route(gw: &str, sim: &str, auth: &[(&str, &str)], n: usize) -> Route {
    let inputs: Vec<String> = (0..n).map(|i| format!("{i}: {PROMPT}")).collect();
    let requests: Vec<Value> = inputs
        .iter()
        .map(|t| json!({"model": "models/gemini-embedding-001", "content": {"parts": [{"text": t}]}, "outputDimensionality": 768}))
        .collect();
    Route {
        gw: post(
            gw,
            "/v1/embeddings",
            auth,
            &json!({"model": "google/text-embedding-004", "input": inputs}),
        ),
        sim: post(
            sim,
            "/v1beta/models/gemini-embedding-001:batchEmbedContents?prettyPrint=false",
            &[("x-goog-api-key", "sim-gemini-key")],
            &json!({"requests": requests}),
        ),
    }
}

/// 2,000 (or `n`) streams open at once, each `events` events `gap_ms` apart: the gateway's peak
/// RSS and CPU while they run, and how many completed.
async fn concurrent_streams(gw: &str, secret: &str, pid: u32, n: usize) -> (u64, f64, usize) {
    let text = format!("{PROMPT} [sim:chunks=20][sim:chunk-delay=200]");
    let body = json!({"model": MODEL, "stream": true,
                      "messages": [{"role": "user", "content": text}]});
    let target = post(
        gw,
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {secret}"))],
        &body,
    );
    let cpu0 = cpu_seconds(pid);
    let mut tasks = Vec::new();
    for _ in 0..n {
        let t = target.clone();
        tasks.push(tokio::spawn(async move {
            Conn::new(t).exchange().await.is_ok_and(|t| t.status == 200)
        }));
    }
    let mut peak = 0;
    while tasks.iter().any(|t| !t.is_finished()) {
        peak = peak.max(rss_kb(pid, "VmRSS:"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut completed = 0;
    for t in tasks {
        completed += usize::from(t.await.unwrap_or(false));
    }
    (peak, cpu_seconds(pid) - cpu0, completed)
}

/// What a run collects: the JSON report, the budgets checked, and how many requests succeeded
/// (each must be in the ledger).
struct Report {
    json: serde_json::Map<String, Value>,
    checks: Vec<Check>,
    sent_ok: u64,
}

impl Report {
    fn check(&mut self, name: impl Into<String>, value: f64, unit: &'static str, budget: f64) {
        let at_least = unit == "req/s";
        self.checks.push(Check {
            name: name.into(),
            value,
            unit,
            budget,
            at_least,
        });
    }

    /// [`versus`] on the bench's gateway, whose successes must all be in its ledger.
    async fn versus(&mut self, route: &Route, rate: u64, secs: u64, conns: usize) -> Versus {
        let v = versus(route, rate, secs, conns).await;
        self.sent_ok += v.gw.ok;
        v
    }

    /// [`closed_loop`] on the bench's gateway, counted likewise.
    async fn closed_loop(&mut self, target: &Target, secs: u64, conns: usize) -> Run {
        let run = closed_loop(target, secs, conns).await;
        self.sent_ok += run.ok;
        run
    }
}

fn row(case: &str, [p50, p99, p999]: [u64; 3], rate: f64) {
    println!("{case:<56} {p50:>9} {p99:>9} {p999:>9} {rate:>9.0}");
}

/// What every case is given.
struct Bench {
    t: Targets,
    /// Seconds a run lasts: 10, or 3 with `--quick`.
    secs: u64,
    quick: bool,
    /// The bench's gateway: its process, listener, operators' listener and key.
    pid: u32,
    addr: String,
    admin: String,
    secret: String,
    sim_url: String,
    /// `--store`; `None`: SQLite.
    store: Option<String>,
}

impl Bench {
    fn postgres(&self) -> bool {
        is_postgres(self.store.as_deref())
    }
}

/// Whether `--store` names a PostgreSQL database (SQLite without it).
fn is_postgres(store: Option<&str>) -> bool {
    store.is_some_and(|s| s.starts_with("postgres"))
}

/// The cases, in the order they run; `--only a,b` runs some of them.
const CASES: [&str; 10] = [
    "rates",
    "max",
    "journal",
    "doors",
    "conversations",
    "agents",
    "streams",
    "embeddings",
    "oha",
    "nginx",
];

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        let i = args.iter().position(|a| a == name)?;
        args.get(i + 1).cloned()
    };
    let quick = args.iter().any(|a| a == "--quick");
    let only = arg("--only");
    let store = arg("--store");
    let cases = selected_cases(only.as_deref());

    let (_sim, sim_url) = start_sim(1);
    if args.iter().any(|a| a == "--train") {
        let gw = Gateway::start(0, &sim_url, store.as_deref(), "");
        train(&gw.addr, &gw.key().1).await;
        return; // the gateway stops on SIGTERM, and an instrumented one writes its profile
    }
    let mut report = Report {
        json: serde_json::Map::new(),
        checks: Vec::new(),
        sent_ok: 0,
    };
    println!(
        "{:<56} {:>9} {:>9} {:>9} {:>9}",
        "case", "p50 µs", "p99 µs", "p99.9 µs", "req/s"
    );
    let (mut idle_rss, mut ledger) = (None, Ledger::default());
    for case in cases {
        // A fresh gateway, and with SQLite a fresh database, for every case: the cases before
        // it leave a million records behind, and the ledger writer's work on a larger database
        // shares the gateway's core, so later cases would otherwise measure slower.
        let gw = Gateway::start(0, &sim_url, store.as_deref(), "");
        let (ws, secret) = gw.key();
        let b = Bench {
            t: targets(&gw.addr, &sim_url, &secret),
            secs: if quick { 3 } else { 10 },
            quick,
            pid: gw.pid(),
            addr: gw.addr.clone(),
            admin: gw.admin.clone(),
            secret,
            sim_url: sim_url.clone(),
            store: store.clone(),
        };
        idle_rss.get_or_insert_with(|| rss_kb(b.pid, "VmRSS:"));
        report.sent_ok = 0;
        // Warm up both paths (connections, caches, allocator).
        report.closed_loop(&b.t.chat_buffered.gw, 1, 8).await;
        closed_loop(&b.t.chat_buffered.sim, 1, 8).await;
        match case {
            "rates" => rates(&b, &mut report).await,
            "max" => max(&b, &mut report).await,
            "journal" => journal(&b, &mut report).await,
            "doors" => doors(&b, &mut report).await,
            "conversations" => conversation_doors(&b, &mut report).await,
            "agents" => agent_requests(&b, &mut report).await,
            "streams" => streams(&b, &mut report).await,
            "embeddings" => embeddings(&b, &mut report).await,
            "oha" => oha_case(&b, &mut report),
            _ => nginx_case(&b, &mut report).await,
        }
        ledger.sent += report.sent_ok;
        ledger.counted += count_records(&gw, &ws, report.sent_ok).await;
    }
    ledger_and_idle(ledger, idle_rss.unwrap_or_default(), &mut report);
    let store = if is_postgres(store.as_deref()) {
        "postgres"
    } else {
        "sqlite"
    };
    report.json.insert("store".into(), json!(store));
    finish(report);
}

/// The cases `--only a,b` names, in their running order (all of them without it); an unknown
/// name stops the bench before anything starts.
fn selected_cases(only: Option<&str>) -> Vec<&'static str> {
    let Some(only) = only else {
        return CASES.to_vec();
    };
    if let Some(unknown) = only.split(',').find(|c| !CASES.contains(c)) {
        println!(
            "--only: no case {unknown:?}; the cases: {}",
            CASES.join(",")
        );
        std::process::exit(2);
    }
    CASES
        .into_iter()
        .filter(|case| only.split(',').any(|c| c == *case))
        .collect()
}

/// Successful requests sent to the bench's gateways, and the usage records their ledgers hold.
#[derive(Default)]
struct Ledger {
    sent: u64,
    counted: u64,
}

/// The budgets of the whole run: every successful request in its gateway's ledger (counted
/// once each writer had caught up), and the idle RSS taken before the first request.
fn ledger_and_idle(ledger: Ledger, idle_rss: u64, report: &mut Report) {
    println!(
        "ledger: {} usage records for {} successful requests",
        ledger.counted, ledger.sent
    );
    let lost = ledger.sent.saturating_sub(ledger.counted) as f64;
    report.check("ledger records lost", lost, "records", 0.0);
    report.check("idle RSS", (idle_rss / 1024) as f64, "MB", 25.0);
    report.json.insert(
        "ledger".into(),
        json!({"successful_requests": ledger.sent, "records": ledger.counted}),
    );
    report
        .json
        .insert("idle_rss_mb".into(), json!(idle_rss / 1024));
}

/// The rate of the fixed-rate budgets, and of every door's cases.
const RATE: u64 = 2_000;

/// Buffered chat at a low rate, then at 500, 2,000 and 5,000 req/s, and streamed at 2,000: the
/// latency the gateway adds; at 2,000 also the gateway's own account of it (`server-timing`).
async fn rates(b: &Bench, report: &mut Report) {
    low_rate(b, report).await;
    for rate in [500, RATE, 5_000] {
        let v = report.versus(&b.t.chat_buffered, rate, b.secs, 64).await;
        v.row("buffered: added", v.added());
        report.json.insert(format!("buffered_{rate}"), v.json());
        if rate == RATE {
            let [p50, p99, _] = v.added();
            // PostgreSQL's server is not pinned: on the bench machine it shares the gateway's
            // core, and its work shows in the gateway's tail.
            let p99_budget = if b.postgres() { 600.0 } else { 300.0 };
            report.check("buffered @2000/s added p50", p50 as f64, "µs", 80.0);
            report.check("buffered @2000/s added p99", p99 as f64, "µs", p99_budget);
            server_timing(&v, report);
        }
    }
    let v = report.versus(&b.t.chat_streamed, RATE, b.secs, 64).await;
    v.row("streamed: added TTFT", v.added_ttft());
    v.row("streamed: added whole stream", v.added());
    let ttft_p99 = v.added_ttft()[1] as f64;
    report.check("streamed @2000/s added TTFT p99", ttft_p99, "µs", 400.0);
    report.json.insert(format!("streamed_{RATE}"), v.json());
}

const LOW_RATE: u64 = 50;
/// Requests the low-rate case needs for a p50 worth budgeting, `--quick` or not.
const LOW_RATE_SAMPLES: u64 = 600;

/// How long a low-rate run lasts: long enough for [`LOW_RATE_SAMPLES`].
fn low_rate_secs(b: &Bench) -> u64 {
    b.secs.max(LOW_RATE_SAMPLES.div_ceil(LOW_RATE))
}

/// Buffered chat at 50 req/s on 4 connections: each connection waits 80 ms between requests and
/// the gateway's core sleeps between them, so what is measured includes waking it — the cost a
/// lightly used gateway pays on every request.
async fn low_rate(b: &Bench, report: &mut Report) {
    let v = report
        .versus(&b.t.chat_buffered, LOW_RATE, low_rate_secs(b), 4)
        .await;
    v.row("buffered, 4 connections: added", v.added());
    report.check("buffered @50/s added p50", v.added()[0] as f64, "µs", 100.0);
    report.json.insert(format!("buffered_{LOW_RATE}"), v.json());
}

/// The gateway's `server-timing: gateway;dur=` beside what the bench measured. It cannot see the
/// loopback legs (client to gateway, gateway to upstream, and back) that the bench's added time
/// includes, so its median should be at or below the bench's; 25 µs allows for the two
/// measurements' noise. Every 200 answer must carry it.
fn server_timing(v: &Versus, report: &mut Report) {
    let (run, [a50, a99, _]) = (&v.gw, v.added());
    // No header at all: not measured, and NaN fails its budget.
    let header = |q| {
        if run.server_timing.is_empty() {
            f64::NAN
        } else {
            pct(&run.server_timing, q) as f64
        }
    };
    let (h50, h99) = (header(0.5), header(0.99));
    println!(
        "  server-timing gateway: p50 {h50:.0} µs, p99 {h99:.0} µs (the bench's added: p50 {a50}, \
         p99 {a99}); {} of {} answers without it",
        run.server_timing_missing, run.ok
    );
    let missing = run.server_timing_missing as f64;
    report.check("server-timing missing on 200s", missing, "answers", 0.0);
    report.check(
        "server-timing p50 (≤ added p50+25)",
        h50,
        "µs",
        a50 as f64 + 25.0,
    );
    report.json.insert(
        format!("server_timing_{RATE}"),
        json!({"gateway_p50_us": h50, "gateway_p99_us": h99, "missing": run.server_timing_missing,
               "answers": run.ok, "added_p50_us": a50, "added_p99_us": a99}),
    );
}

/// The most records the ledger writer may have queued at the maximum rate: half its queue
/// (`billing::writer::QUEUE`, 16,384; a record that finds it full goes to the spool file), so
/// that a writer falling behind fails the bench before it spills.
const LEDGER_BACKLOG: f64 = 8_192.0;

/// The maximum buffered and streamed rates (closed loop, 64 connections), and the ledger's
/// backlog meanwhile.
async fn max(b: &Bench, report: &mut Report) {
    let cpu0 = cpu_seconds(b.pid);
    let until = Instant::now() + Duration::from_secs(b.secs);
    let backlog = tokio::spawn(ledger_backlog(format!("http://{}/metrics", b.admin), until));
    let max = report.closed_loop(&b.t.chat_buffered.gw, b.secs, 64).await;
    let core = (cpu_seconds(b.pid) - cpu0) / max.seconds;
    let (queue, spooled) = backlog.await.unwrap_or_default();
    println!(
        "ledger backlog at the max rate: at most {queue} records queued, {spooled} bytes spooled"
    );
    report.check(
        "ledger queue peak at max rate",
        queue as f64,
        "records",
        LEDGER_BACKLOG,
    );
    report.check("ledger spooled at max rate", spooled as f64, "bytes", 0.0);
    report.json.insert(
        "ledger_backlog".into(),
        json!({"peak_queue": queue, "peak_spool_bytes": spooled, "allowed_queue": LEDGER_BACKLOG}),
    );
    let err_rate = max.errors as f64 / (max.ok + max.errors).max(1) as f64;
    row(
        &format!(
            "buffered max ({:.0} % of a core, errors {:.3} %)",
            core * 100.0,
            err_rate * 100.0
        ),
        quantiles(&max.done),
        max.rate(),
    );
    let sim_max = closed_loop(&b.t.chat_buffered.sim, b.secs, 64).await;
    row(
        "buffered max, upstream alone",
        quantiles(&sim_max.done),
        sim_max.rate(),
    );
    // A rate with 0.1 % errors or more is not sustained.
    let sustained = if err_rate < 0.001 { max.rate() } else { 0.0 };
    report.check("buffered max throughput", sustained, "req/s", 25_000.0);
    let load_rss = rss_kb(b.pid, "VmRSS:") / 1024;

    let smax = report.closed_loop(&b.t.chat_streamed.gw, b.secs, 64).await;
    row(
        &format!("streamed max (errors {})", smax.errors),
        quantiles(&smax.done),
        smax.rate(),
    );
    report.check("streamed max throughput", smax.rate(), "req/s", 15_000.0);
    report.json.insert("max_buffered".into(), json!({"rate": max.rate(), "errors": max.errors, "core": core, "upstream_alone_rate": sim_max.rate(), "rss_mb": load_rss}));
    report.json.insert(
        "max_streamed".into(),
        json!({"rate": smax.rate(), "errors": smax.errors}),
    );
}

/// The most throughput the ledger journal may cost at the buffered maximum, in percent.
const JOURNAL_COST: f64 = 10.0;

/// What the ledger journal costs: the buffered maximum and the added latency at 2,000 req/s on
/// the bench's gateway (journal on) and on a second one without it, back to back on the same
/// core.
async fn journal(b: &Bench, report: &mut Report) {
    let off = Gateway::start(
        0,
        &b.sim_url,
        b.store.as_deref(),
        "  ledger_journal: {enabled: false}\n",
    );
    let (_, secret) = off.key();
    let off_route = targets(&off.addr, &b.sim_url, &secret).chat_buffered;
    closed_loop(&off_route.gw, 1, 8).await; // warm-up
    let mut measured = serde_json::Map::new();
    let mut rates = Vec::new();
    for (label, route) in [("on", &b.t.chat_buffered), ("off", &off_route)] {
        let max = closed_loop(&route.gw, b.secs, 64).await;
        let at = versus(route, RATE, b.secs, 64).await;
        if label == "on" {
            report.sent_ok += max.ok + at.gw.ok; // this gateway's ledger is counted at the end
        }
        row(
            &format!("journal {label}: buffered max (errors {})", max.errors),
            quantiles(&max.done),
            max.rate(),
        );
        at.row(&format!("journal {label}: buffered, added"), at.added());
        measured.insert(
            label.into(),
            json!({"max_rate": max.rate(), "max_errors": max.errors,
                   "added_at_2000_us": quantiles_json(at.added())}),
        );
        rates.push(max.rate());
    }
    let cost = match rates[..] {
        [on, off] if off > 0.0 => (off - on).max(0.0) / off * 100.0,
        _ => 100.0,
    };
    report.check("journal cost at buffered max", cost, "%", JOURNAL_COST);
    report
        .json
        .insert("journal".into(), Value::Object(measured));
}

/// The peak of the ledger writer's queue depth and spool size, sampled from `/metrics` every
/// 250 ms until `until`.
async fn ledger_backlog(metrics: String, until: Instant) -> (u64, u64) {
    let client = reqwest::Client::new();
    let gauge = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0) as u64
    };
    let (mut queue, mut spooled) = (0, 0);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Ok(res) = client.get(&metrics).send().await else {
            continue;
        };
        let text = res.text().await.unwrap_or_default();
        queue = queue.max(gauge(&text, "tollgate_ledger_queue_depth "));
        spooled = spooled.max(gauge(&text, "tollgate_ledger_spool_bytes "));
    }
    (queue, spooled)
}

/// Every front door at 2,000 req/s, buffered and streamed, each beside the simulator sent the
/// upstream call the door makes; then each door's buffered maximum. The doors translate onto
/// the chat path, so each door's added median is held to chat's, measured a minute or two
/// apart on the same gateway.
async fn doors(b: &Bench, report: &mut Report) {
    // Chat is measured first and every door against it: a second of load on every door's path
    // first, so that chat does not pay alone for what a path's first requests grow (buffers,
    // the allocator's arenas, pooled connections).
    for door in &b.t.doors {
        for route in std::iter::once(&door.buffered).chain(&door.streamed) {
            report.closed_loop(&route.gw, 1, 64).await;
        }
    }
    // Every door's rates first and the maxima after, so that no door is measured on the
    // records another door's maximum has just added.
    let mut at_rate = Vec::new();
    let mut chat = None;
    for door in &b.t.doors {
        let (json, p50s) = door_rates(b, door, report).await;
        match chat {
            None => chat = Some(p50s), // chat comes first
            Some(chat) => door_checks(door.name, p50s, chat, report),
        }
        at_rate.push(json);
    }
    let mut measured = serde_json::Map::new();
    for (door, mut json) in b.t.doors.iter().zip(at_rate) {
        let max = report.closed_loop(&door.buffered.gw, b.secs, 64).await;
        let case = format!("{}: buffered max (errors {})", door.name, max.errors);
        row(&case, quantiles(&max.done), max.rate());
        json["max_rate"] = json!(max.rate());
        json["max_errors"] = json!(max.errors);
        measured.insert(door.name.into(), json);
    }
    report.json.insert("doors".into(), Value::Object(measured));
}

/// Requests a second of the `conversations` case: each is several times a one-line request's
/// work, so [`RATE`]'s would measure a saturated core.
const CONVERSATION_RATE: u64 = 500;

/// The chat, Messages and Responses doors sent an agent-sized conversation
/// ([`conversations`]): each door's added latency at [`CONVERSATION_RATE`] beside the
/// simulator sent the door's Gemini call, then its buffered maximum. Reported, not budgeted:
/// what a door's translation costs grows with the conversation, which the one-line `doors`
/// case cannot show.
async fn conversation_doors(b: &Bench, report: &mut Report) {
    let mut measured = serde_json::Map::new();
    for door in &b.t.conversations {
        report.closed_loop(&door.buffered.gw, 1, 16).await;
        let v = report
            .versus(&door.buffered, CONVERSATION_RATE, b.secs, 64)
            .await;
        v.row(&format!("{}: buffered, added", door.name), v.added());
        let max = report.closed_loop(&door.buffered.gw, b.secs, 64).await;
        let case = format!("{}: buffered max (errors {})", door.name, max.errors);
        row(&case, quantiles(&max.done), max.rate());
        measured.insert(
            door.name.into(),
            json!({"at_rate": v.json(), "rate": CONVERSATION_RATE, "max_rate": max.rate(), "max_errors": max.errors}),
        );
    }
    report
        .json
        .insert("conversations".into(), Value::Object(measured));
}

/// Requests a second of the `agents` case: each is a 40–90 KB body.
const AGENT_RATE: u64 = 100;

/// The agents' captured requests ([`agents`]): the gateway's own time (its `server-timing`)
/// at [`AGENT_RATE`], then the buffered maximum. Reported, not budgeted: what a front door and
/// a translation cost on the requests agents actually send, beside the one-line `doors` case.
async fn agent_requests(b: &Bench, report: &mut Report) {
    let mut measured = serde_json::Map::new();
    for (name, target) in &b.t.agents {
        report.closed_loop(target, 1, 4).await;
        let run = open_loop(target, AGENT_RATE, b.secs, 16).await;
        report.sent_ok += run.ok;
        let own = quantiles(&run.server_timing);
        row(
            &format!("{name}: gateway's own time (errors {})", run.errors),
            own,
            run.rate(),
        );
        let max = report.closed_loop(target, b.secs, 16).await;
        row(
            &format!("{name}: buffered max (errors {})", max.errors),
            quantiles(&max.done),
            max.rate(),
        );
        measured.insert(
            name.clone(),
            json!({"gateway_us": quantiles_json(own), "rate": AGENT_RATE, "errors": run.errors,
                   "max_rate": max.rate(), "max_errors": max.errors}),
        );
    }
    report.json.insert("agents".into(), Value::Object(measured));
}

/// A door's added medians: buffered, and the whole stream's when it streams.
type DoorP50s = (u64, Option<u64>);

/// One door at [`RATE`], buffered and streamed: its JSON and its added medians.
async fn door_rates(b: &Bench, door: &Door, report: &mut Report) -> (Value, DoorP50s) {
    let name = door.name;
    let buffered = report.versus(&door.buffered, RATE, b.secs, 64).await;
    buffered.row(&format!("{name}: buffered, added"), buffered.added());
    let mut streamed = None;
    if let Some(route) = &door.streamed {
        let v = report.versus(route, RATE, b.secs, 64).await;
        v.row(&format!("{name}: streamed, added TTFT"), v.added_ttft());
        v.row(&format!("{name}: streamed, added whole"), v.added());
        streamed = Some(v);
    }
    let json = json!({
        "buffered": buffered.json(),
        "streamed": streamed.as_ref().map(Versus::json),
    });
    (json, (buffered.added()[0], streamed.map(|s| s.added()[0])))
}

/// A door's added medians against chat's: at most 10 % more, or 10 µs more when that is larger,
/// because two medians of under 100 µs taken a minute apart differ by a few µs of noise alone.
fn door_checks(name: &str, (buffered, whole): DoorP50s, chat: DoorP50s, report: &mut Report) {
    let allowed = |chat: u64| chat as f64 + (chat as f64 * 0.1).max(10.0);
    report.check(
        format!("{name} buffered added p50 (vs chat)"),
        buffered as f64,
        "µs",
        allowed(chat.0),
    );
    if let (Some(whole), Some(chat)) = (whole, chat.1) {
        report.check(
            format!("{name} stream added p50 (vs chat)"),
            whole as f64,
            "µs",
            allowed(chat),
        );
    }
}

/// Embeddings of 100 inputs a request: added latency at a fixed rate, then the maximum.
async fn embeddings(b: &Bench, report: &mut Report) {
    let v = report.versus(&b.t.embed_batch, 50, b.secs, 64).await;
    v.row(&format!("embeddings ×{EMBED_BATCH}: added"), v.added());
    let e_max = report.closed_loop(&b.t.embed_batch.gw, b.secs, 16).await;
    let e_sim_max = closed_loop(&b.t.embed_batch.sim, b.secs, 16).await;
    for (case, run) in [("max", &e_max), ("max, upstream alone", &e_sim_max)] {
        row(
            &format!("embeddings ×{EMBED_BATCH} {case} (errors {})", run.errors),
            quantiles(&run.done),
            run.rate(),
        );
    }
    report.json.insert(
        "embeddings".into(),
        json!({
            "inputs_per_request": EMBED_BATCH, "at_rate": v.json(),
            "max_rate": e_max.rate(), "max_errors": e_max.errors,
            "upstream_alone_max_rate": e_sim_max.rate(),
        }),
    );
}

/// 2,000 concurrent 4-second streams (500 with `--quick`): peak RSS and CPU.
async fn streams(b: &Bench, report: &mut Report) {
    let n = if b.quick { 500 } else { 2_000 };
    let before = rss_kb(b.pid, "VmRSS:") / 1024;
    let (peak_kb, cpu, completed) = concurrent_streams(&b.addr, &b.secret, b.pid, n).await;
    let peak = peak_kb / 1024;
    report.sent_ok += completed as u64;
    println!(
        "{n} concurrent 4-second streams: {completed} completed, RSS {before} MB before, \
         peak {peak} MB, {cpu:.1} CPU s"
    );
    report.check("concurrent streams peak RSS", peak as f64, "MB", 80.0);
    report.json.insert("concurrent_streams".into(), json!({"streams": n, "completed": completed, "rss_before_mb": before, "peak_rss_mb": peak, "cpu_seconds": cpu}));
}

/// The floor: what a proxy that does nothing but proxy adds in the gateway's place. nginx (when
/// on PATH: `make bench-tools` installs it), one worker pinned to the gateway's core, keep-alive
/// connections to the simulator, sent the simulator's own request at 50 and 2,000 req/s like the
/// gateway's `rates` cases. No budget: it shows how much of the gateway's added time is this
/// machine's (two more loopback hops, two more cores woken) rather than the gateway's.
async fn nginx_case(b: &Bench, report: &mut Report) {
    if !which("nginx") {
        println!("nginx: not on PATH, skipped (`make bench-tools` installs it)");
        return;
    }
    let Some((_nginx, addr, _dir)) = start_nginx(0, &b.sim_url) else {
        println!("nginx: did not start, skipped");
        return;
    };
    let sim = &b.t.chat_buffered.sim;
    // The same request, sent to nginx (its `host` header names the simulator: nginx ignores it).
    let through = Target {
        addr,
        ..sim.clone()
    };
    let route = Route {
        gw: through,
        sim: sim.clone(),
    };
    let mut measured = serde_json::Map::new();
    for (rate, conns) in [(LOW_RATE, 4), (RATE, 64)] {
        let secs = if rate == LOW_RATE {
            low_rate_secs(b)
        } else {
            b.secs
        };
        let v = versus(&route, rate, secs, conns).await;
        v.row("nginx, the floor: added", v.added());
        measured.insert(rate.to_string(), v.json());
    }
    report.json.insert("nginx".into(), Value::Object(measured));
}

/// nginx on `core` with one worker, proxying to `sim` over kept-alive connections; it, the
/// address it listens on, and its directory (removed when dropped).
fn start_nginx(core: usize, sim: &str) -> Option<(Proc, String, tempfile::TempDir)> {
    let dir = tempfile::tempdir().ok()?;
    let port = free_port();
    let upstream = sim.trim_start_matches("http://");
    let d = dir.path().display();
    let conf = format!(
        "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log error;\n\
         events {{ worker_connections 4096; }}\n\
         http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d};\n\
         upstream sim {{ server {upstream}; keepalive 256; }}\n\
         server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://sim; \
         proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }} }}\n"
    );
    let conf_file = dir.path().join("nginx.conf");
    std::fs::write(&conf_file, conf).ok()?;
    let child = pinned(core, "nginx")
        .arg("-c")
        .arg(&conf_file)
        .arg("-p")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let proc = Proc(child);
    let addr = format!("127.0.0.1:{port}");
    listening(&addr, Duration::from_secs(10)).then_some((proc, addr, dir))
}

/// What oha measured in one run.
struct Oha {
    p50: u64,
    p99: u64,
    ok: u64,
    rate: f64,
}

/// An outside opinion: `oha` (when on PATH: `make bench-tools` installs it) run as the
/// independent measurement ran it — open loop at 2,000 req/s with its coordinated-omission
/// correction, 32 connections — on buffered chat through the gateway, then on the simulator
/// directly. No budget: it is there to say whether the bench's own generator can be believed.
fn oha_case(b: &Bench, report: &mut Report) {
    if !which("oha") {
        println!("oha: not on PATH, skipped (`make bench-tools` installs it)");
        return;
    }
    let route = &b.t.chat_buffered;
    let (Some(gw), Some(sim)) = (oha(&route.gw, b.secs), oha(&route.sim, b.secs)) else {
        println!("oha: did not run or its JSON was not understood");
        return;
    };
    report.sent_ok += gw.ok;
    let added = [
        gw.p50.saturating_sub(sim.p50),
        gw.p99.saturating_sub(sim.p99),
    ];
    for (case, [p50, p99], rate) in [
        ("oha: buffered, gateway", [gw.p50, gw.p99], gw.rate),
        (
            "oha: buffered, upstream alone",
            [sim.p50, sim.p99],
            sim.rate,
        ),
    ] {
        println!("{case:<56} {p50:>9} {p99:>9} {:>9} {rate:>9.0}", "—");
    }
    let case = format!("oha: buffered, added @ {RATE}/s");
    println!("{case:<56} {:>9} {:>9} {:>9}", added[0], added[1], "—");
    report.json.insert(
        "oha".into(),
        json!({"rate": RATE, "connections": 32,
               "gateway_us": {"p50": gw.p50, "p99": gw.p99}, "gateway_rate": gw.rate,
               "upstream_alone_us": {"p50": sim.p50, "p99": sim.p99},
               "added_us": {"p50": added[0], "p99": added[1]}}),
    );
}

/// `oha` on `target` for `secs`; `None` when it did not run or said something unexpected.
fn oha(target: &Target, secs: u64) -> Option<Oha> {
    // JSON out: `--output-format json` in today's oha (1.16 rejects `-j`); `-j`, the spelling
    // of the independent measurement's older oha, as the fallback.
    let report = [&["--output-format", "json"][..], &["-j"]]
        .into_iter()
        .find_map(|format| oha_json(target, secs, format))?;
    // oha reports seconds.
    let micros = |q: &str| Some((report["latencyPercentiles"][q].as_f64()? * 1e6).round() as u64);
    Some(Oha {
        p50: micros("p50")?,
        p99: micros("p99")?,
        ok: report["statusCodeDistribution"]["200"]
            .as_u64()
            .unwrap_or(0),
        rate: report["summary"]["requestsPerSec"].as_f64()?,
    })
}

fn oha_json(target: &Target, secs: u64, format: &[&str]) -> Option<Value> {
    let mut command = Command::new("oha");
    command
        .args(["--no-tui", "--latency-correction", "-c", "32"])
        .args(format)
        .args(["-q", &RATE.to_string(), "-z", &format!("{secs}s")])
        .args(["-m", "POST", "-d", &target.body])
        .args(["-H", "content-type: application/json"]);
    for (k, v) in &target.headers {
        command.arg("-H").arg(format!("{k}: {v}"));
    }
    let url = format!("http://{}{}", target.addr, target.path);
    let out = command.arg(url).stderr(Stdio::null()).output().ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// Prints the budget table and writes the JSON report.
fn finish(mut report: Report) {
    println!(
        "\n{:<40} {:>12} {:>12}  result",
        "budget", "measured", "allowed"
    );
    let mut all = true;
    for c in &report.checks {
        all &= c.passes();
        println!(
            "{:<40} {:>9.0} {:<3}{:>9.0} {:<3} {}",
            c.name,
            c.value,
            c.unit.get(..3).unwrap_or(c.unit),
            c.budget,
            c.unit.get(..3).unwrap_or(c.unit),
            if c.passes() { "pass" } else { "FAIL" }
        );
    }
    let budgets = report.checks.iter().map(|c| json!({"name": c.name, "value": c.value, "unit": c.unit, "budget": c.budget, "pass": c.passes()}));
    report
        .json
        .insert("budgets".into(), Value::Array(budgets.collect()));
    let dir = format!("{ROOT}/target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let file = format!("{dir}/load-{stamp}.json");
    let text = serde_json::to_vec_pretty(&Value::Object(report.json)).unwrap();
    std::fs::write(&file, text).unwrap();
    let verdict = if all {
        "every budget met"
    } else {
        "some budgets missed"
    };
    println!("\n{verdict} — written to {file}");
}

/// Usage records of the bench's workspace once the ledger writer has caught up with `want`
/// (or after 30 s).
async fn count_records(gw: &Gateway, ws: &str, want: u64) -> u64 {
    let store = tollgate::store::open(&gw.store).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = store.usage(ws, None).await.unwrap().len() as u64;
        if n >= want || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
