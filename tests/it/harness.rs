//! Test harness: the upstream simulator and a real gateway process, each on a free loopback
//! port, each owned by a guard that kills it on drop. Every test gets its own pair.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use crate::fake_upstream::{FakeUpstream, FAKE_KEY};

/// The provider simulator (`tollgate-sim`), in-process on its own thread and runtime, on a
/// free port; stopped on drop.
pub struct Sim {
    pub url: String,
    _running: tollgate_sim::Running,
}

impl Sim {
    pub fn start() -> Sim {
        Self::start_with(&[])
    }

    /// A simulator with extra flags of the `tollgate-sim` binary (e.g. `--latency-ms 50`).
    pub fn start_with(args: &[&str]) -> Sim {
        let mut all = vec!["--vertex-project", "tollgate-test"];
        all.extend_from_slice(args);
        let running = tollgate_sim::spawn(&all).expect("start the simulator");
        Sim {
            url: running.url.clone(),
            _running: running,
        }
    }

    /// Model requests the simulator received (control and token requests left out).
    pub async fn requests(&self) -> Vec<Value> {
        let all: Vec<Value> = ::reqwest::get(format!("{}/_sim/requests", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        all.into_iter()
            .filter(|r| r["route"] != "oauth.token")
            .collect()
    }

    /// The routes of the requests the simulator served since `from` (an index into its request
    /// log), oldest first: `gemini.generate`, `vertex.claude_stream`….
    pub async fn routes_since(&self, from: usize) -> Vec<String> {
        self.requests().await[from..]
            .iter()
            .map(|r| r["route"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Queues `fault` for the next `count` requests of a simulator surface.
    pub async fn queue_fault(&self, fault: &str, surface: &str, count: u64) {
        let res = reqwest::Client::new()
            .post(format!("{}/_sim/faults", self.url))
            .json(&serde_json::json!({"fault": fault, "surface": surface, "count": count}))
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    }

    pub async fn stats(&self) -> Value {
        ::reqwest::get(format!("{}/_sim/stats", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// A blocking GET status over a raw socket (usable from sync harness code inside async tests).
mod reqwest {
    pub use ::reqwest::*;
    pub fn blocking_status(url: &str, key: &str) -> u16 {
        use std::io::{Read, Write};
        let rest = url.trim_start_matches("http://");
        let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let Ok(mut s) = std::net::TcpStream::connect(addr) else {
            return 0;
        };
        let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n");
        let mut buf = [0u8; 12];
        if s.read_exact(&mut buf).is_err() {
            return 0;
        }
        std::str::from_utf8(&buf[9..12])
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }
}

/// Two distinct free ports (both held while choosing, so they cannot coincide).
fn two_free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").unwrap();
    let b = TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// Kills the child when dropped.
pub struct ChildGuard(pub Child);

/// Waits (at most 30 s) for a signalled process to exit.
fn wait_for_exit(mut child: ChildGuard) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the gateway never exited");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a socket listens on `port` (TCP, IPv4 or IPv6), from `/proc/net/tcp{,6}`: each line
/// has the local address as `HEXIP:HEXPORT` in its second field and the state in its fourth,
/// `0A` meaning LISTEN.
fn listening(port: u16) -> bool {
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() > 3 && fields[1].ends_with(&local) && fields[3] == "0A"
            })
        })
    })
}

/// A real signal to a real process (`kill -SIG pid`).
pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{sig} {pid}");
}
impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A failing test shows the end of its gateway's log with its own output.
impl Drop for Gateway {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let Ok(log) = std::fs::read_to_string(&self.log_file) else {
            return;
        };
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        eprintln!("--- the gateway's log, last {} lines:", tail.len());
        for line in tail {
            eprintln!("{line}");
        }
    }
}

/// A configured gateway: its temp dir, conf and store, plus a running `serve` process.
pub struct Gateway {
    pub dir: tempfile::TempDir,
    pub conf: PathBuf,
    pub base: String,
    pub admin: String,
    pub store_url: String,
    /// Where the gateway's log goes (debug level with `GatewayBuilder::capture_logs`, else
    /// warnings; `TOLLGATE_TEST_LOG=<filter>` sends it to the terminal instead). A failing
    /// test prints its tail.
    pub log_file: PathBuf,
    /// The log is at debug level.
    debug_log: bool,
    /// Test credentials left out of the gateway's environment.
    unset_env: Vec<&'static str>,
    /// The open-file limit (soft and hard) the gateway runs under, when a test sets one.
    open_files: Option<u64>,
    child: Option<ChildGuard>,
}

pub struct GatewayBuilder {
    store_url: Option<String>,
    catalog_refresh: &'static str,
    max_body: &'static str,
    sim_url: Option<String>,
    provider_sim: Option<String>,
    strict_credit: bool,
    drain: &'static str,
    max_answer: &'static str,
    body_timeout: &'static str,
    capture_logs: bool,
    unset_env: Vec<&'static str>,
    upstream: String,
    limits: &'static str,
    connections: &'static str,
    open_files: Option<u64>,
    alerts: &'static str,
    console: &'static str,
    only_catalog: Option<&'static str>,
    settings: &'static str,
    /// `tollgate.listeners.public` and `.admin`, YAML flow mappings.
    listeners: [Option<String>; 2],
}

/// A test gateway's `tollgate.upstream` entries beyond the harness's own: `entries`, and
/// HTTP/2 to the simulator (h2c: the path every call to the providers takes over TLS) unless
/// they say otherwise or the fake upstream (HTTP/1.1 only) is in the conf too.
fn upstream_conf(entries: &str, simulator: bool) -> String {
    let http2 = if simulator && !entries.contains("http2:") {
        ", http2: always"
    } else {
        ""
    };
    let entries = if entries.is_empty() {
        String::new()
    } else {
        format!(", {entries}")
    };
    format!("{entries}{http2}")
}

/// The admin token every test gateway gets (`TOLLGATE_ADMIN_TOKEN`).
pub const ADMIN_TOKEN: &str = "test-admin-token-5f1c0a9e7b3d2c4f8a6e";

impl Gateway {
    pub fn builder() -> GatewayBuilder {
        GatewayBuilder {
            store_url: None,
            catalog_refresh: "2s",
            max_body: "32MiB",
            sim_url: None,
            provider_sim: None,
            strict_credit: false,
            drain: "60s",
            max_answer: "16MiB",
            body_timeout: "30s",
            capture_logs: false,
            unset_env: Vec::new(),
            upstream: String::new(),
            limits: "",
            connections: "",
            open_files: None,
            alerts: "",
            console: "",
            only_catalog: None,
            settings: "",
            listeners: [None, None],
        }
    }

    /// Runs the `tollgate` CLI with this gateway's conf; returns stdout (asserts success).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.cli_raw(args);
        assert!(
            out.status.success(),
            "tollgate {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs the `tollgate` CLI with the test credentials `serve` gets (less `without_env`),
    /// for commands that call the providers; success is not asserted.
    pub fn cli_with_credentials(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.arg("-c")
            .arg(&self.conf)
            .args(args)
            .env("RUST_LOG", "warn");
        self.credentials_env(&mut cmd);
        cmd.output().unwrap()
    }

    /// The test credentials of the provider environment variables, less `without_env`.
    fn credentials_env(&self, cmd: &mut Command) {
        cmd.env("TEST_OPENAI_KEY", FAKE_KEY)
            .env("TEST_GEMINI_KEY", "sim-gemini-key")
            .env("TEST_ANTHROPIC_KEY", "sim-anthropic-key")
            .env("TEST_VERTEX_PROJECT", "tollgate-test")
            .env(
                "TEST_VERTEX_CREDENTIALS",
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/test-service-account.json"),
            );
        for name in &self.unset_env {
            cmd.env_remove(name);
        }
    }

    pub fn cli_raw(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("-c")
            .arg(&self.conf)
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    }

    pub fn cli_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.cli(&all)).unwrap()
    }

    /// Creates a workspace with no credit; returns its id.
    pub fn workspace(&self) -> String {
        self.cli_json(&["workspace", "create", "--name", "test"])["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Creates a workspace (with 100 USD credit) and a key; returns (workspace id, secret).
    pub fn workspace_with_key(&self) -> (String, String) {
        let ws = self.cli_json(&["workspace", "create", "--name", "test"]);
        let ws_id = ws["id"].as_str().unwrap().to_owned();
        self.cli(&["credit", "add", "--workspace", &ws_id, "--usd", "100"]);
        (ws_id.clone(), self.key(&ws_id, &[]))
    }

    /// Creates a key; on a running gateway, returns once the gateway knows it (the change
    /// feed delivers it within ~200 ms on SQLite).
    pub fn key(&self, ws: &str, extra: &[&str]) -> String {
        let mut args = vec!["key", "create", "--workspace", ws];
        args.extend_from_slice(extra);
        let secret = self.cli_json(&args)["secret"].as_str().unwrap().to_owned();
        if self.child.is_some() && extra.is_empty() {
            let deadline = Instant::now() + Duration::from_secs(5);
            let url = self.url("/v1/models");
            while reqwest::blocking_status(&url, &secret) != 200 {
                assert!(Instant::now() < deadline, "new key never became valid");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        secret
    }

    pub fn key_id(&self, ws: &str, secret: &str) -> String {
        let keys = self.cli_json(&["key", "list", "--workspace", ws]);
        let hint_start = &secret[..10];
        keys.as_array()
            .unwrap()
            .iter()
            .find(|k| {
                k["hint"].as_str().unwrap().starts_with(hint_start)
                    && k["hint"]
                        .as_str()
                        .unwrap()
                        .ends_with(&secret[secret.len() - 4..])
            })
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The terminal's filter when `TOLLGATE_TEST_LOG` asks for the log there.
    fn live_log() -> Option<String> {
        std::env::var("TOLLGATE_TEST_LOG").ok()
    }

    fn log_level(&self) -> String {
        match Self::live_log() {
            _ if self.debug_log => "debug".into(),
            Some(filter) => filter,
            None => "warn".into(),
        }
    }

    /// The gateway's log file: tests that provoke faults (store outages, failing upstreams)
    /// would otherwise flood the terminal with the warnings they expect.
    fn log_sink(&self) -> Stdio {
        if !self.debug_log && Self::live_log().is_some() {
            return Stdio::inherit();
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_file)
            .unwrap()
            .into()
    }

    /// `tollgate serve` (with `-u`: take the listeners over from a running process) with the
    /// test environment.
    fn serve_command(&self, upgrade: bool) -> Command {
        let bin = env!("CARGO_BIN_EXE_tollgate");
        let mut cmd = match self.open_files {
            // The shell lowers the limit, then becomes the gateway (same process id).
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(bin);
                sh
            }
            None => Command::new(bin),
        };
        cmd.arg("-c").arg(&self.conf).arg("serve");
        if upgrade {
            cmd.arg("-u");
        }
        cmd.env("TOLLGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("RUST_LOG", self.log_level())
            .stdout(Stdio::null())
            .stderr(self.log_sink());
        self.credentials_env(&mut cmd);
        cmd
    }

    /// A graceful upgrade as an operator does it: start the new process with `serve -u`, then
    /// `SIGQUIT` the old one, which hands over its listeners and finishes what it has in flight.
    /// Returns once the old process has exited.
    pub fn upgrade(&mut self) {
        let new = ChildGuard(self.serve_command(true).spawn().unwrap());
        std::thread::sleep(Duration::from_millis(500));
        let old = self
            .child
            .replace(new)
            .expect("a running gateway to upgrade");
        signal(old.0.id(), "QUIT");
        wait_for_exit(old);
    }

    /// Runs `serve` with `env` (beside the admin token) expecting it to refuse to start: waits
    /// for it to exit (at most 30 s), checks it failed, and returns what it wrote to stderr.
    pub async fn refused_start(&self, env: &[(&str, &str)]) -> String {
        use std::io::Read;
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("-c")
            .arg(&self.conf)
            .arg("serve")
            .env("TOLLGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("the gateway started");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(!status.success(), "{stderr}");
        stderr
    }

    /// Waits (at most 30 s) for the gateway, signalled, to exit.
    pub fn wait_exit(&mut self) {
        wait_for_exit(self.child.take().expect("a running gateway"));
    }

    /// Sends `SIGTERM` and waits for the process to exit (at most 30 s).
    pub fn terminate(&mut self) {
        let child = self.child.take().expect("a running gateway");
        signal(child.0.id(), "TERM");
        wait_for_exit(child);
    }

    /// Starts `serve` and waits until both listeners listen. The wait reads the kernel's socket
    /// table instead of connecting: a probe's connection, counted for a moment after it closes,
    /// would take a place under a test's connection caps.
    pub fn start(&mut self) {
        let child = self.serve_command(false).spawn().unwrap();
        self.child = Some(ChildGuard(child));
        let deadline = Instant::now() + Duration::from_secs(30);
        for addr in [self.addr(), self.admin_addr()] {
            while !listening(addr.port()) {
                assert!(
                    Instant::now() < deadline,
                    "gateway did not start listening on {addr}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The running gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the gateway runs").0.id()
    }

    pub fn stop(&mut self) {
        self.child = None;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The client listener's address (`127.0.0.1:port`).
    pub fn addr(&self) -> SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin.trim_start_matches("http://").parse().unwrap()
    }

    /// A workspace's usage records (newest first), once there are at least `n` (the ledger
    /// writes off the response path), or whatever there is after 5 s.
    pub async fn usage_records(&self, ws: &str, n: usize) -> Vec<Value> {
        let records = || {
            self.cli_json(&["usage", "--workspace", ws])
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        for _ in 0..50 {
            let r = records();
            if r.len() >= n {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        records()
    }

    /// `GET path` on the public listener with `key`: the answer's JSON.
    pub async fn get_json(&self, key: &str, path: &str) -> Value {
        reqwest::Client::new()
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The ids `/v1/models` lists for `key`.
    pub async fn model_ids(&self, key: &str) -> Vec<String> {
        let v = self.get_json(key, "/v1/models").await;
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    }

    pub async fn chat(&self, key: &str, body: Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url("/v1/chat/completions"))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap()
    }
}

impl GatewayBuilder {
    pub fn store(mut self, url: String) -> Self {
        self.store_url = Some(url);
        self
    }
    pub fn catalog_refresh(mut self, d: &'static str) -> Self {
        self.catalog_refresh = d;
        self
    }
    /// `tollgate.strict_credit: true`.
    pub fn strict_credit(mut self) -> Self {
        self.strict_credit = true;
        self
    }

    /// `tollgate.drain_after_disconnect`.
    pub fn drain_after_disconnect(mut self, d: &'static str) -> Self {
        self.drain = d;
        self
    }

    /// The store gets only this catalog (YAML), also the conf's `catalog_file`: neither
    /// `conf/catalog.yaml` nor the simulator's route catalog is imported.
    pub fn only_catalog(mut self, yaml: &'static str) -> Self {
        self.only_catalog = Some(yaml);
        self
    }

    /// Leaves a test credential (e.g. `TEST_GEMINI_KEY`) out of the gateway's environment.
    pub fn without_env(mut self, name: &'static str) -> Self {
        self.unset_env.push(name);
        self
    }

    /// The gateway logs at debug level into `Gateway::log_file` instead of the test's stderr.
    pub fn capture_logs(mut self) -> Self {
        self.capture_logs = true;
        self
    }

    /// `tollgate.limits.body_timeout`.
    pub fn body_timeout(mut self, d: &'static str) -> Self {
        self.body_timeout = d;
        self
    }

    /// More `tollgate.limits` settings, as YAML flow entries (`"idle_timeout: 1s"`).
    pub fn limits(mut self, entries: &'static str) -> Self {
        self.limits = entries;
        self
    }

    /// `tollgate.connections`, as YAML flow entries (`"admin: {max: 3, per_address: 2}"`).
    pub fn connections(mut self, entries: &'static str) -> Self {
        self.connections = entries;
        self
    }

    /// Runs the gateway under this open-file limit (soft and hard), as a small host would.
    pub fn open_files(mut self, n: u64) -> Self {
        self.open_files = Some(n);
        self
    }

    /// More `tollgate.upstream` settings, as YAML flow entries (`"breaker: {cooldown: 1s}"`).
    pub fn upstream(mut self, entries: impl Into<String>) -> Self {
        self.upstream = entries.into();
        self
    }

    /// More `tollgate.alerts` settings, as YAML flow entries (`"allow_private_webhooks: true"`).
    pub fn alerts(mut self, entries: &'static str) -> Self {
        self.alerts = entries;
        self
    }

    /// `tollgate.console` settings, as YAML flow entries (`"session_idle: 5s"`).
    pub fn console(mut self, entries: &'static str) -> Self {
        self.console = entries;
        self
    }

    /// More `tollgate` settings, as YAML lines (each ending in a newline) already indented to
    /// sit under `tollgate:` (`"  trusted_proxies: [127.0.0.0/8]\n"`).
    pub fn settings(mut self, lines: &'static str) -> Self {
        self.settings = lines;
        self
    }

    /// `tollgate.listeners.public`, a YAML flow mapping (`"{h2c: true}"`; `certs::tls_listener`
    /// writes a TLS one). With TLS on it, create keys before `start` (`Gateway::key` checks a
    /// new key over plain HTTP).
    pub fn public_listener(mut self, yaml: impl Into<String>) -> Self {
        self.listeners[0] = Some(yaml.into());
        self
    }

    /// `tollgate.listeners.admin`, a YAML flow mapping.
    pub fn admin_listener(mut self, yaml: impl Into<String>) -> Self {
        self.listeners[1] = Some(yaml.into());
        self
    }

    /// `tollgate.upstream.max_answer_body`.
    pub fn max_answer_body(mut self, size: &'static str) -> Self {
        self.max_answer = size;
        self
    }

    pub fn max_body(mut self, size: &'static str) -> Self {
        self.max_body = size;
        self
    }
    /// Adds OpenAI-compatible test models (`acme/echo`, `acme/embed`) routed to the fake.
    pub fn fake_openai(mut self, fake: &FakeUpstream) -> Self {
        self.sim_url = Some(fake.url.clone());
        self
    }

    /// Points every Gemini, Vertex and Anthropic route (and the OAuth token endpoint) at the
    /// simulator, and adds test models that pin each route kind (`route/<kind>/<model>`).
    pub fn simulator(mut self, sim: &Sim) -> Self {
        self.provider_sim = Some(sim.url.clone());
        self
    }

    /// Writes the conf, migrates, imports catalogs; does not start serving.
    pub fn build(self) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let (port, admin_port) = two_free_ports();
        let store_url = self
            .store_url
            .unwrap_or_else(|| format!("sqlite://{}/tollgate.db", dir.path().display()));
        let catalog = match self.only_catalog {
            Some(yaml) => {
                let file = dir.path().join("catalog.yaml");
                std::fs::write(&file, yaml).unwrap();
                file
            }
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/catalog.yaml"),
        };
        let conf = dir.path().join("tollgate.yaml");
        let text = format!(
            "threads: 2\ngrace_period_seconds: 1\ngraceful_shutdown_timeout_seconds: 1\n\
             upgrade_sock: {dir}/upgrade.sock\npid_file: {dir}/tollgate.pid\n\
             tollgate:\n  listen: 127.0.0.1:{port}\n  admin_listen: 127.0.0.1:{admin_port}\n  store: \"{store_url}\"\n\
             \x20 catalog_file: {catalog}\n  ledger_spool: {dir}/ledger.spool\n  catalog_refresh: {refresh}\n  max_request_body: {max}\n  strict_credit: {strict}\n  drain_after_disconnect: {drain}\n\
             \x20 limits: {{body_timeout: {body_timeout}{limits}}}\n\
             \x20 alerts: {{interval: 200ms, backoff: 100ms, attempts: 3, timeout: 2s{alerts}}}\n\
             \x20 upstream: {{connect_timeout: 2s, read_timeout: 5s, max_answer_body: {answer}{upstream}}}\n\
             \x20 console: {{{console}}}\n\
             \x20 providers:\n    openai: {{base_url: \"http://127.0.0.1:9/v1\", api_key_env: TEST_OPENAI_KEY}}\n{providers}{connections}{settings}{listeners}",
            console = self.console,
            settings = self.settings,
            listeners = listeners_conf(&self.listeners),
            connections = if self.connections.is_empty() {
                String::new()
            } else {
                format!("  connections: {{{}}}\n", self.connections)
            },
            providers = self.provider_sim.as_deref().map(provider_conf).unwrap_or_default(),
            dir = dir.path().display(),
            catalog = catalog.display(),
            refresh = self.catalog_refresh,
            max = self.max_body,
            strict = self.strict_credit,
            drain = self.drain,
            answer = self.max_answer,
            body_timeout = self.body_timeout,
            limits = if self.limits.is_empty() {
                String::new()
            } else {
                format!(", {}", self.limits)
            },
            alerts = if self.alerts.is_empty() {
                String::new()
            } else {
                format!(", {}", self.alerts)
            },
            upstream = upstream_conf(&self.upstream, self.provider_sim.is_some() && self.sim_url.is_none()),
        );
        std::fs::write(&conf, text).unwrap();
        let gw = Gateway {
            base: format!("http://127.0.0.1:{port}"),
            admin: format!("http://127.0.0.1:{admin_port}"),
            conf,
            store_url,
            log_file: dir.path().join("gateway.log"),
            debug_log: self.capture_logs,
            unset_env: self.unset_env,
            open_files: self.open_files,
            dir,
            child: None,
        };
        gw.cli(&["migrate"]);
        gw.cli(&["catalog", "import", catalog.to_str().unwrap()]);
        if self.provider_sim.is_some() && self.only_catalog.is_none() {
            let file = gw.dir.path().join("route-catalog.yaml");
            std::fs::write(&file, ROUTE_CATALOG).unwrap();
            gw.cli(&["catalog", "import", file.to_str().unwrap()]);
        }
        if let Some(sim) = self.sim_url {
            let file = gw.dir.path().join("sim-catalog.yaml");
            std::fs::write(
                &file,
                format!(
                    "models:\n  - {{id: acme/echo, provider: acme, family: openai, kind: chat, upstream_model: echo-1, profile: openai, input_price: 0.5, output_price: 1.5}}\n\
                     \x20 - {{id: acme/embed, provider: acme, family: openai, kind: embedding, upstream_model: embed-1, profile: openai, input_price: 0.02, output_price: 0}}\n\
                     routes:\n  - {{model_id: acme/echo, kind: openai, base_url: \"{sim}/v1\"}}\n  - {{model_id: acme/embed, kind: openai, base_url: \"{sim}/v1\"}}\n"
                ),
            )
            .unwrap();
            gw.cli(&["catalog", "import", file.to_str().unwrap()]);
        }
        gw
    }

    pub fn start(self) -> Gateway {
        let mut gw = self.build();
        gw.start();
        gw
    }
}

/// Splits an SSE body into its `data:` payloads.
/// A chat completion's answer judged: `Ok` when the client got it whole (a stream ending with
/// `[DONE]` and no error frame, a buffered answer with content), else what went wrong.
pub async fn whole_answer(res: reqwest::Response, stream: bool) -> Result<(), String> {
    let status = res.status();
    let text = res.text().await.map_err(|e| format!("read: {e}"))?;
    if status != 200 {
        return Err(format!("{status}: {text}"));
    }
    if stream {
        let frames = sse_data(&text);
        let done = frames.last().map(String::as_str) == Some("[DONE]");
        if !done || frames.iter().any(|f| f.contains("\"error\"")) {
            return Err(format!("stream cut: {text}"));
        }
    } else {
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        if v["choices"][0]["message"]["content"].as_str().is_none() {
            return Err(format!("no answer: {text}"));
        }
    }
    Ok(())
}

pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|frame| frame.trim().strip_prefix("data: ").map(str::to_owned))
        .collect()
}

/// Polls `check` until it returns true or `within` passes; returns the time it took.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < within {
        if check().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The PostgreSQL server tests use; `make test` requires it.
pub fn pg_admin_url() -> String {
    std::env::var("TOLLGATE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A fresh database on the test server, dropped when the guard goes.
pub struct PgDatabase {
    pub url: String,
    name: String,
}

impl PgDatabase {
    pub async fn create() -> PgDatabase {
        let admin = pg_admin_url();
        let name = format!("tollgate_it_{}", rand_suffix());
        let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .expect("PostgreSQL must be reachable for make test");
        tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let base = admin.rsplit_once('/').unwrap().0;
        PgDatabase {
            url: format!("{base}/{name}"),
            name,
        }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        let admin = pg_admin_url();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok((client, conn)) =
                    tokio_postgres::connect(&admin, tokio_postgres::NoTls).await
                {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

fn rand_suffix() -> String {
    use rand::Rng;
    let n: u64 = rand::thread_rng().gen();
    format!("{n:016x}")
}

/// `tollgate.listeners`, when a test sets either listener's transport.
fn listeners_conf([public, admin]: &[Option<String>; 2]) -> String {
    let entries: Vec<String> = [("public", public), ("admin", admin)]
        .into_iter()
        .filter_map(|(name, yaml)| Some(format!("{name}: {}", yaml.as_deref()?)))
        .collect();
    if entries.is_empty() {
        return String::new();
    }
    format!("  listeners: {{{}}}\n", entries.join(", "))
}

fn provider_conf(sim: &str) -> String {
    format!(
        "    gemini: {{base_url: \"{sim}\", api_key_env: TEST_GEMINI_KEY}}\n\
         \x20   anthropic: {{base_url: \"{sim}\", api_key_env: TEST_ANTHROPIC_KEY}}\n\
         \x20   vertex: {{base_url: \"{sim}\", global_base_url: \"{sim}\", token_url: \"{sim}/token\", \
         project_env: TEST_VERTEX_PROJECT, credentials_env: TEST_VERTEX_CREDENTIALS}}\n"
    )
}

/// Test models that pin one route kind each, with the default catalog's profiles. The default
/// catalog serves `google/text-embedding-004` by `gemini-embedding-001` at 768 dimensions, on
/// the Developer API first; `vertex/text-embedding-005` pins Vertex's `:predict` with a model
/// that is 768 wide natively and takes 250 inputs a call.
const ROUTE_CATALOG: &str = "models:
  - {id: vertex/gemini-2.5-flash, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash, profile: gemini-2.5-flash, input_price: 0.30, output_price: 2.50, cache_read_price: 0.03}
  - {id: vertex/gemini-3.1-pro-preview, provider: google, family: gemini, kind: chat, upstream_model: gemini-3.1-pro-preview, profile: gemini-3.1-pro, input_price: 2, output_price: 12, cache_read_price: 0.2}
  - {id: global/gemini-2.5-flash, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash, profile: gemini-2.5-flash, input_price: 0.30, output_price: 2.50, cache_read_price: 0.03}
  - {id: vertex/text-embedding-005, provider: google, family: gemini, kind: embedding, upstream_model: text-embedding-005, profile: embedding, input_price: 0.025, output_price: 0.0, capabilities: [embeddings]}
  - {id: devapi/gemini-embedding-001, provider: google, family: gemini, kind: embedding, upstream_model: gemini-embedding-001, profile: embedding, input_price: 0.15, output_price: 0.0, capabilities: [embeddings]}
  - {id: vertex/claude-sonnet-4-5, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-sonnet-4-5@20250929, profile: claude, input_price: 3, output_price: 15, cache_read_price: 0.30, cache_write_price: 3.75, max_output_tokens: 64000}
  - {id: vertex/claude-haiku-4-5, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-haiku-4-5@20251001, profile: claude, input_price: 1, output_price: 5, cache_read_price: 0.10, cache_write_price: 1.25, cache_write_1h_price: 2, max_output_tokens: 64000}
routes:
  - {model_id: vertex/gemini-2.5-flash, kind: vertex, region: us-central1}
  - {model_id: vertex/gemini-3.1-pro-preview, kind: vertex-global, region: global}
  - {model_id: global/gemini-2.5-flash, kind: vertex-global, region: global}
  - {model_id: vertex/text-embedding-005, kind: vertex, region: us-central1}
  - {model_id: devapi/gemini-embedding-001, kind: gemini-api}
  - {model_id: vertex/claude-sonnet-4-5, kind: vertex-anthropic, region: us-east5}
  - {model_id: vertex/claude-haiku-4-5, kind: vertex-anthropic, region: us-east5}
";

/// A simulator, a gateway wired to it, and a funded workspace with a key: the setting of
/// every provider-family test.
pub struct SimEnv {
    pub sim: Sim,
    pub gw: Gateway,
    pub ws: String,
    pub key: String,
}

impl SimEnv {
    pub fn start() -> SimEnv {
        let sim = Sim::start();
        let gw = Gateway::builder().simulator(&sim).start();
        let (ws, key) = gw.workspace_with_key();
        SimEnv { sim, gw, ws, key }
    }

    pub async fn chat(&self, body: Value) -> (u16, Value) {
        let res = self.gw.chat(&self.key, body).await;
        let status = res.status().as_u16();
        (status, res.json().await.unwrap())
    }

    pub async fn stream(&self, body: Value) -> (u16, Vec<String>) {
        let res = self.gw.chat(&self.key, body).await;
        let status = res.status().as_u16();
        (status, sse_data(&res.text().await.unwrap()))
    }

    pub async fn last_upstream(&self) -> Value {
        self.sim
            .requests()
            .await
            .pop()
            .expect("the simulator saw no request")
    }
}

/// The chunks of a streamed answer, which must end with `[DONE]`.
pub fn chunks(frames: &[String]) -> Vec<Value> {
    assert_eq!(
        frames.last().map(String::as_str),
        Some("[DONE]"),
        "{frames:?}"
    );
    frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect()
}
