//! The load bench (`make bench`): the release gateway and the simulator as separate processes
//! pinned to separate cores, an open-loop load generator (this process, on the simulator's
//! core) and HDR histograms. Every case runs against the gateway and against the simulator hit
//! directly, so "added" is the gateway's share. Prints a table with each budget's pass/fail and
//! writes `target/bench/load-<unix time>.json`. Budgets are checked here, never in tests.
//!
//! `cargo bench --bench load -- [--quick] [--store postgres://…] [--only rates,max,journal,messages,streams,embeddings]`
//! (the Makefile builds the release binaries first and pins this process with `taskset`).
//! `BENCH_WRAP="valgrind --tool=massif"` runs the gateway under a tool (its RSS and CPU are
//! then the tool's); `BENCH_SERVER_CONF="work_stealing: false;"` adds Pingora server settings
//! (`;` separates lines) to the gateway's conf.
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
                 providers:\n    gemini: {{base_url: \"{sim}\", api_key_env: BENCH_GEMINI_KEY}}\n    \
                 vertex: {{base_url: \"{sim}\", global_base_url: \"{sim}\", token_url: \"{sim}/token\", \
                 project_env: BENCH_VERTEX_PROJECT, credentials_env: BENCH_VERTEX_CREDENTIALS}}\n",
                d = dir.path().display(),
                extra_tollgate = extra,
                extra = std::env::var("BENCH_SERVER_CONF").unwrap_or_default().replace(';', "\n")
            ),
        )
        .unwrap();
        // `BENCH_WRAP="valgrind --tool=massif"` (or perf, strace…) runs the gateway under a
        // tool, for profiles taken under the bench's own load.
        let wrap = std::env::var("BENCH_WRAP").unwrap_or_default();
        let mut words = wrap
            .split_whitespace()
            .chain([bin("tollgate").leak() as &str]);
        let mut command = pinned(core, words.next().unwrap_or_default());
        command.args(words);
        let proc = Proc(
            command
                .arg("-c")
                .arg(&conf)
                .arg("serve")
                .env("BENCH_GEMINI_KEY", "sim-gemini-key")
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
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "the gateway did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
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
        let out = Command::new(bin("tollgate"))
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

/// One HTTP/1.1 request, already serialised.
#[derive(Clone)]
struct Target {
    addr: String,
    request: Arc<Vec<u8>>,
}

fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Target {
    let body = body.to_string();
    let mut r = format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.push_str(&body);
    Target {
        addr: addr.to_owned(),
        request: Arc::new(r.into_bytes()),
    }
}

/// What one exchange took: to the first body bytes, and to the end.
struct Timing {
    status: u16,
    first: Duration,
    done: Duration,
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
        let head = &self.buf[..head_end];
        let status = std::str::from_utf8(head.get(9..12).unwrap_or_default())
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let close = header(head, b"connection").is_some_and(|v| v.eq_ignore_ascii_case(b"close"));
        let length = header(head, b"content-length")
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<usize>().ok());
        let mut first = None;
        if self.buf.len() > head_end {
            first = Some(start.elapsed());
        }
        match length {
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
        if close {
            self.stream = None;
        }
        Ok(Timing {
            status,
            first: first.unwrap_or(done),
            done,
        })
    }
}

/// The value of header `name` (ASCII case-insensitive) in a response head, trimmed.
fn header<'a>(head: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    head.split(|&b| b == b'\n').find_map(|line| {
        let (k, v) = line.split_at(line.iter().position(|&b| b == b':')?);
        k.eq_ignore_ascii_case(name).then(|| v[1..].trim_ascii())
    })
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
    /// To the answer's end (buffered) — corrected for coordinated omission.
    done: Histogram<u64>,
    /// To the first body bytes (streams' time to first token).
    first: Histogram<u64>,
    ok: u64,
    errors: u64,
    seconds: f64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).unwrap()
}

/// Open loop: request `i` is due at `start + i / rate`; its latency counts from then, so a
/// stalled server cannot hide its queue (coordinated omission). `conns` connections send.
async fn open_loop(target: &Target, rate: u64, seconds: u64, conns: usize) -> Run {
    let total = rate * seconds;
    let next = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let interval = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (next, target) = (next.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::new(target);
            let (mut done, mut first, mut ok, mut errors) = (histogram(), histogram(), 0, 0);
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
                match conn.exchange().await {
                    Ok(t) if t.status == 200 => {
                        ok += 1;
                        let _ = done.record((late + t.done).as_micros() as u64);
                        let _ = first.record((late + t.first).as_micros() as u64);
                    }
                    _ => errors += 1,
                }
            }
            (done, first, ok, errors)
        }));
    }
    collect(tasks, start.into_std()).await
}

/// Closed loop: `conns` connections send back to back for `seconds`.
async fn closed_loop(target: &Target, seconds: u64, conns: usize) -> Run {
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::new(target);
            let (mut done, mut first, mut ok, mut errors) = (histogram(), histogram(), 0, 0);
            while Instant::now() < end {
                match conn.exchange().await {
                    Ok(t) if t.status == 200 => {
                        ok += 1;
                        let _ = done.record(t.done.as_micros() as u64);
                        let _ = first.record(t.first.as_micros() as u64);
                    }
                    _ => errors += 1,
                }
            }
            (done, first, ok, errors)
        }));
    }
    collect(tasks, start).await
}

type Part = (Histogram<u64>, Histogram<u64>, u64, u64);

async fn collect(tasks: Vec<tokio::task::JoinHandle<Part>>, start: Instant) -> Run {
    let mut run = Run {
        done: histogram(),
        first: histogram(),
        ok: 0,
        errors: 0,
        seconds: 0.0,
    };
    for t in tasks {
        let (d, f, ok, e) = t.await.unwrap();
        run.done.add(d).unwrap();
        run.first.add(f).unwrap();
        run.ok += ok;
        run.errors += e;
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

/// One budget: what was measured against what is allowed.
struct Check {
    name: &'static str,
    value: f64,
    unit: &'static str,
    budget: f64,
    /// The value must be at least the budget (a rate), else at most (a time or a size).
    at_least: bool,
}

impl Check {
    fn passes(&self) -> bool {
        if self.at_least {
            self.value >= self.budget
        } else {
            self.value <= self.budget
        }
    }
}

struct Targets {
    gw_buffered: Target,
    gw_stream: Target,
    gw_embed: Target,
    sim_buffered: Target,
    sim_stream: Target,
    sim_embed: Target,
    /// The Messages door: translated for Gemini, passed through to Claude.
    gw_messages_gemini: Target,
    gw_messages_claude: Target,
}

/// Inputs per embeddings request.
const EMBED_BATCH: usize = 100;

fn targets(gw: &str, sim: &str, secret: &str) -> Targets {
    let sim_addr = sim.trim_start_matches("http://");
    let auth = format!("Bearer {secret}");
    let chat = |stream: bool| {
        json!({"model": "google/gemini-2.5-flash", "stream": stream,
               "messages": [{"role": "user", "content": PROMPT}]})
    };
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]});
    let key = [("x-goog-api-key", "sim-gemini-key")];
    let inputs: Vec<String> = (0..EMBED_BATCH).map(|i| format!("{i}: {PROMPT}")).collect();
    // What the gateway sends for `google/text-embedding-004`: one Developer API batch.
    let requests: Vec<Value> = inputs
        .iter()
        .map(|t| json!({"model": "models/gemini-embedding-001", "content": {"parts": [{"text": t}]}, "outputDimensionality": 768}))
        .collect();
    let messages = |model: &str| {
        json!({"model": model, "max_tokens": 256,
               "messages": [{"role": "user", "content": PROMPT}]})
    };
    let key_header = [("x-api-key", secret)];
    Targets {
        gw_messages_gemini: post(
            gw,
            "/v1/messages",
            &key_header,
            &messages("google/gemini-2.5-flash"),
        ),
        gw_messages_claude: post(
            gw,
            "/v1/messages",
            &key_header,
            &messages("anthropic/claude-haiku-4-5"),
        ),
        gw_embed: post(
            gw,
            "/v1/embeddings",
            &[("authorization", &auth)],
            &json!({"model": "google/text-embedding-004", "input": inputs}),
        ),
        sim_embed: post(
            sim_addr,
            "/v1beta/models/gemini-embedding-001:batchEmbedContents",
            &key,
            &json!({"requests": requests}),
        ),
        gw_buffered: post(
            gw,
            "/v1/chat/completions",
            &[("authorization", &auth)],
            &chat(false),
        ),
        gw_stream: post(
            gw,
            "/v1/chat/completions",
            &[("authorization", &auth)],
            &chat(true),
        ),
        sim_buffered: post(
            sim_addr,
            "/v1beta/models/gemini-2.5-flash:generateContent",
            &key,
            &gemini,
        ),
        sim_stream: post(
            sim_addr,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            &key,
            &gemini,
        ),
    }
}

/// 2,000 (or `n`) streams open at once, each `events` events `gap_ms` apart: the gateway's peak
/// RSS and CPU while they run, and how many completed.
async fn concurrent_streams(gw: &str, secret: &str, pid: u32, n: usize) -> (u64, f64, usize) {
    let text = format!("{PROMPT} [sim:chunks=20][sim:chunk-delay=200]");
    let body = json!({"model": "google/gemini-2.5-flash", "stream": true,
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
    fn check(&mut self, name: &'static str, value: f64, unit: &'static str, budget: f64) {
        let at_least = unit == "req/s";
        self.checks.push(Check {
            name,
            value,
            unit,
            budget,
            at_least,
        });
    }
}

fn row(case: &str, [p50, p99, p999]: [u64; 3], rate: f64) {
    println!("{case:<44} {p50:>10} {p99:>10} {p999:>10} {rate:>10.0}");
}

/// The cases, in the order they run; `--only a,b` runs some of them.
const CASES: [&str; 6] = [
    "rates",
    "max",
    "journal",
    "messages",
    "streams",
    "embeddings",
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
    let secs = if quick { 3 } else { 10 };

    let (_sim, sim_url) = start_sim(1);
    let gw = Gateway::start(0, &sim_url, store.as_deref(), "");
    let (ws, secret) = gw.key();
    let t = targets(&gw.addr, &sim_url, &secret);
    let pid = gw.pid();
    let idle_rss = rss_kb(pid, "VmRSS:");
    // Warm up both paths (connections, caches, allocator).
    let mut report = Report {
        json: serde_json::Map::new(),
        checks: Vec::new(),
        sent_ok: closed_loop(&t.gw_buffered, 1, 8).await.ok,
    };
    closed_loop(&t.sim_buffered, 1, 8).await;

    println!(
        "{:<44} {:>10} {:>10} {:>10} {:>10}",
        "case", "p50 µs", "p99 µs", "p99.9 µs", "req/s"
    );
    for case in CASES {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|c| c == case))
        {
            continue;
        }
        match case {
            "rates" => rates(&t, secs, &mut report).await,
            "max" => max(&t, secs, pid, &gw.admin, &mut report).await,
            "journal" => journal(&t, &sim_url, store.as_deref(), secs, &mut report).await,
            "messages" => messages(&t, secs, &mut report).await,
            "streams" => streams(&gw.addr, &secret, pid, quick, &mut report).await,
            _ => embeddings(&t, secs, &mut report).await,
        }
    }
    // Every successful request must be in the ledger: wait for the writer, then count.
    let counted = count_records(&gw, &ws, report.sent_ok).await;
    println!(
        "ledger: {counted} usage records for {} successful requests",
        report.sent_ok
    );
    let lost = report.sent_ok.saturating_sub(counted) as f64;
    report.check("ledger records lost", lost, "records", 0.0);
    report.check("idle RSS", (idle_rss / 1024) as f64, "MB", 40.0);
    report.json.insert(
        "ledger".into(),
        json!({"successful_requests": report.sent_ok, "records": counted}),
    );
    report
        .json
        .insert("idle_rss_mb".into(), json!(idle_rss / 1024));
    let store = if gw.store.starts_with("sqlite") {
        "sqlite"
    } else {
        "postgres"
    };
    report.json.insert("store".into(), json!(store));
    finish(report);
}

/// The Messages door's maximum buffered rate, beside the chat door's on the same upstream: a
/// Gemini model (the door translates both ways around the chat adapter) and a Claude model
/// (passed through).
async fn messages(t: &Targets, secs: u64, report: &mut Report) {
    let chat = closed_loop(&t.gw_buffered, secs, 64).await;
    let mut rates = Vec::new();
    for (case, target) in [
        ("messages, Gemini (translated)", &t.gw_messages_gemini),
        ("messages, Claude (passed through)", &t.gw_messages_claude),
    ] {
        let run = closed_loop(target, secs, 64).await;
        report.sent_ok += run.ok;
        let rate = run.ok as f64 / run.seconds;
        row(
            &format!("max {case} (errors {})", run.errors),
            quantiles(&run.done),
            rate,
        );
        rates.push(json!({"case": case, "rate": rate, "errors": run.errors,
            "latency_us": quantiles_json(quantiles(&run.done))}));
    }
    report.sent_ok += chat.ok;
    let chat_rate = chat.ok as f64 / chat.seconds;
    row(
        "max chat, same Gemini model",
        quantiles(&chat.done),
        chat_rate,
    );
    report.json.insert(
        "messages".into(),
        json!({"chat_rate": chat_rate, "doors": rates}),
    );
}

/// Buffered chat at 500, 2,000 and 5,000 req/s, and streamed at 2,000: added latency.
async fn rates(t: &Targets, secs: u64, report: &mut Report) {
    for rate in [500u64, 2_000, 5_000] {
        let gw_run = open_loop(&t.gw_buffered, rate, secs, 64).await;
        let sim_run = open_loop(&t.sim_buffered, rate, secs, 64).await;
        report.sent_ok += gw_run.ok;
        let [p50, p99, _] = added(&gw_run.done, &sim_run.done);
        report.json.insert(
            format!("buffered_{rate}"),
            json!({
                "rate": rate, "ok": gw_run.ok, "errors": gw_run.errors,
                "gateway_us": quantiles_json(quantiles(&gw_run.done)),
                "upstream_alone_us": quantiles_json(quantiles(&sim_run.done)),
                "added_us": quantiles_json(added(&gw_run.done, &sim_run.done)),
            }),
        );
        row(
            &format!("buffered @ {rate}/s: added (errors {})", gw_run.errors),
            added(&gw_run.done, &sim_run.done),
            gw_run.ok as f64 / gw_run.seconds,
        );
        if rate != 2_000 {
            continue;
        }
        report.check("buffered @2000/s added p50", p50 as f64, "µs", 150.0);
        report.check("buffered @2000/s added p99", p99 as f64, "µs", 1000.0);
        let s_gw = open_loop(&t.gw_stream, rate, secs, 64).await;
        let s_sim = open_loop(&t.sim_stream, rate, secs, 64).await;
        report.sent_ok += s_gw.ok;
        let ttft = added(&s_gw.first, &s_sim.first);
        let whole = pct(&s_gw.done, 0.5).saturating_sub(pct(&s_sim.done, 0.5));
        row(
            &format!("streamed @ {rate}/s: added TTFT (errors {})", s_gw.errors),
            ttft,
            s_gw.ok as f64 / s_gw.seconds,
        );
        report.check(
            "streamed @2000/s added TTFT p50",
            ttft[0] as f64,
            "µs",
            300.0,
        );
        report.json.insert(
            "streamed_2000".into(),
            json!({"added_ttft_us": quantiles_json(ttft), "added_whole_p50_us": whole,
                   "errors": s_gw.errors}),
        );
    }
}

/// The most records the ledger writer may have queued at the maximum rate: half its queue
/// (`billing::writer::QUEUE`, 16,384; a record that finds it full goes to the spool file), so
/// that a writer falling behind fails the bench before it spills.
const LEDGER_BACKLOG: f64 = 8_192.0;

/// The maximum buffered and streamed rates (closed loop, 64 connections), and the ledger's
/// backlog meanwhile.
async fn max(t: &Targets, secs: u64, pid: u32, admin: &str, report: &mut Report) {
    let cpu0 = cpu_seconds(pid);
    let until = Instant::now() + Duration::from_secs(secs);
    let backlog = tokio::spawn(ledger_backlog(format!("http://{admin}/metrics"), until));
    let max = closed_loop(&t.gw_buffered, secs, 64).await;
    let core = (cpu_seconds(pid) - cpu0) / max.seconds;
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
    report.sent_ok += max.ok;
    let max_rate = max.ok as f64 / max.seconds;
    let err_rate = max.errors as f64 / (max.ok + max.errors).max(1) as f64;
    row(
        &format!(
            "buffered max ({:.0} % of a core, errors {:.3} %)",
            core * 100.0,
            err_rate * 100.0
        ),
        quantiles(&max.done),
        max_rate,
    );
    let sim_max = closed_loop(&t.sim_buffered, secs, 64).await;
    let sim_rate = sim_max.ok as f64 / sim_max.seconds;
    row(
        "buffered max, upstream alone",
        quantiles(&sim_max.done),
        sim_rate,
    );
    // A rate with 0.1 % errors or more is not sustained.
    let sustained = if err_rate < 0.001 { max_rate } else { 0.0 };
    report.check("buffered max throughput", sustained, "req/s", 9000.0);
    let load_rss = rss_kb(pid, "VmRSS:") / 1024;

    let smax = closed_loop(&t.gw_stream, secs, 64).await;
    report.sent_ok += smax.ok;
    let smax_rate = smax.ok as f64 / smax.seconds;
    row(
        &format!("streamed max (errors {})", smax.errors),
        quantiles(&smax.done),
        smax_rate,
    );
    report.check("streamed max throughput", smax_rate, "req/s", 6000.0);
    report.json.insert("max_buffered".into(), json!({"rate": max_rate, "errors": max.errors, "core": core, "upstream_alone_rate": sim_rate, "rss_mb": load_rss}));
    report.json.insert(
        "max_streamed".into(),
        json!({"rate": smax_rate, "errors": smax.errors}),
    );
}

/// The most throughput the ledger journal may cost at the buffered maximum, in percent.
const JOURNAL_COST: f64 = 10.0;

/// What the ledger journal costs: the buffered maximum and the p99 added at 2,000 req/s on the
/// bench's gateway (journal on) and on a second one without it, back to back on the same core.
async fn journal(t: &Targets, sim: &str, store: Option<&str>, secs: u64, report: &mut Report) {
    let off = Gateway::start(0, sim, store, "  ledger_journal: {enabled: false}\n");
    let (_, secret) = off.key();
    let t_off = targets(&off.addr, sim, &secret);
    closed_loop(&t_off.gw_buffered, 1, 8).await; // warm-up
    let mut measured = serde_json::Map::new();
    let mut rates = Vec::new();
    for (label, target) in [("on", &t.gw_buffered), ("off", &t_off.gw_buffered)] {
        let max = closed_loop(target, secs, 64).await;
        let at = open_loop(target, 2_000, secs, 64).await;
        let upstream = open_loop(&t.sim_buffered, 2_000, secs, 64).await;
        if label == "on" {
            report.sent_ok += max.ok + at.ok; // this gateway's ledger is counted at the end
        }
        let rate = max.ok as f64 / max.seconds;
        let added_at = added(&at.done, &upstream.done);
        row(
            &format!("journal {label}: buffered max (errors {})", max.errors),
            quantiles(&max.done),
            rate,
        );
        row(
            &format!("journal {label}: buffered @ 2000/s added"),
            added_at,
            at.ok as f64 / at.seconds,
        );
        measured.insert(
            label.into(),
            json!({"max_rate": rate, "max_errors": max.errors,
                   "added_at_2000_us": quantiles_json(added_at)}),
        );
        rates.push(rate);
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

/// Embeddings of 100 inputs a request: added latency at a fixed rate, then the maximum.
async fn embeddings(t: &Targets, secs: u64, report: &mut Report) {
    let rate = 50;
    let e_gw = open_loop(&t.gw_embed, rate, secs, 64).await;
    let e_sim = open_loop(&t.sim_embed, rate, secs, 64).await;
    report.sent_ok += e_gw.ok;
    let e_added = added(&e_gw.done, &e_sim.done);
    row(
        &format!(
            "embeddings ×{EMBED_BATCH} @ {rate}/s: added (errors {})",
            e_gw.errors
        ),
        e_added,
        e_gw.ok as f64 / e_gw.seconds,
    );
    let e_max = closed_loop(&t.gw_embed, secs, 16).await;
    report.sent_ok += e_max.ok;
    let e_sim_max = closed_loop(&t.sim_embed, secs, 16).await;
    for (case, run) in [("max", &e_max), ("max, upstream alone", &e_sim_max)] {
        row(
            &format!("embeddings ×{EMBED_BATCH} {case} (errors {})", run.errors),
            quantiles(&run.done),
            run.ok as f64 / run.seconds,
        );
    }
    report.json.insert(
        "embeddings".into(),
        json!({
            "inputs_per_request": EMBED_BATCH, "rate": rate, "errors": e_gw.errors,
            "added_us": quantiles_json(e_added),
            "max_rate": e_max.ok as f64 / e_max.seconds, "max_errors": e_max.errors,
            "upstream_alone_max_rate": e_sim_max.ok as f64 / e_sim_max.seconds,
        }),
    );
}

/// 2,000 concurrent 4-second streams (500 with `--quick`): peak RSS and CPU.
async fn streams(gw: &str, secret: &str, pid: u32, quick: bool, report: &mut Report) {
    let n = if quick { 500 } else { 2_000 };
    let before = rss_kb(pid, "VmRSS:") / 1024;
    let (peak_kb, cpu, completed) = concurrent_streams(gw, secret, pid, n).await;
    let peak = peak_kb / 1024;
    report.sent_ok += completed as u64;
    println!(
        "{n} concurrent 4-second streams: {completed} completed, RSS {before} MB before, \
         peak {peak} MB, {cpu:.1} CPU s"
    );
    report.check("concurrent streams peak RSS", peak as f64, "MB", 150.0);
    report.json.insert("concurrent_streams".into(), json!({"streams": n, "completed": completed, "rss_before_mb": before, "peak_rss_mb": peak, "cpu_seconds": cpu}));
}

/// Prints the budget table and writes the JSON report.
fn finish(mut report: Report) {
    println!(
        "\n{:<36} {:>12} {:>12}  result",
        "budget", "measured", "allowed"
    );
    let mut all = true;
    for c in &report.checks {
        all &= c.passes();
        println!(
            "{:<36} {:>9.0} {:<3}{:>9.0} {:<3} {}",
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
