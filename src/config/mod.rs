//! The one YAML file (default `conf/tollgate.yaml`): Pingora's own server settings at the top
//! level, and tollgate's settings under `tollgate:`.
//!
//! Strict on purpose: an unknown key anywhere (tollgate's section *or* a misspelt Pingora
//! setting) fails start-up with a message naming the field path, and `validate()` reports every
//! problem at once. Every setting has a default, so an empty file is a valid configuration.
//! Secrets are never in the file: providers name the environment variables that hold them.

pub mod console;
pub mod endpoint;
pub mod limits;
pub mod listeners;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytesize::ByteSize;
use pingora_core::server::configuration::ServerConf;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Yaml(String),
    #[error("{path}: {message}")]
    Field { path: String, message: String },
    #[error("invalid configuration:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

/// The whole file: Pingora's settings and ours.
#[derive(Debug)]
pub struct Config {
    pub server: ServerConf,
    pub tollgate: TollgateConf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TollgateConf {
    /// Where clients connect (the OpenAI-compatible API).
    pub listen: SocketAddr,
    /// The operators' listener: health, metrics, the admin API and the web console.
    pub admin_listen: SocketAddr,
    /// Each listener's transport: TLS, HTTP/2, the PROXY protocol.
    pub listeners: listeners::ListenersConf,
    /// Peers (CIDRs) whose `Forwarded` / `X-Forwarded-For` headers and PROXY protocol headers
    /// say who the client is; empty: the connection's peer is the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The environment variable holding the admin token (API and console); unset or empty:
    /// both are off.
    pub admin_token_env: String,
    /// Low-balance and spend-limit webhooks: how often they are looked at, retried.
    pub alerts: AlertsConf,
    /// The web console's sessions and sign-ins.
    pub console: console::ConsoleConf,
    /// `sqlite://PATH` or `postgres://…`.
    pub store: String,
    /// A PostgreSQL read replica of `store` (`postgres://…`): where the admin API's pages and
    /// rollups (so the console) and `/v1/generation` read. Money checks and writes never do.
    pub store_read_url: Option<String>,
    /// Every API key secret begins with this (never [`MANAGEMENT_KEY_PREFIX`]).
    pub key_prefix: String,
    /// Imported into an empty catalog at start.
    pub catalog_file: String,
    /// How often the in-memory catalog is reloaded from the store.
    #[serde(with = "humantime_serde")]
    pub catalog_refresh: Duration,
    /// Largest request body accepted; larger ones get 413.
    pub max_request_body: ByteSize,
    /// Where usage records wait, fsync'd, while the database is unreachable.
    pub ledger_spool: String,
    /// Usage records written to disk before their answers end (`<ledger_spool>.journal/`), so
    /// a crash loses none.
    pub ledger_journal: JournalConf,
    /// Refuse (402) a request whose worst case exceeds the credit not yet reserved, so a
    /// balance never goes below zero on one gateway. Off: any credit left admits (the
    /// specification's rule).
    pub strict_credit: bool,
    /// Bill nothing for a request that produced no output tokens and failed (the upstream
    /// broke or erred before any output): its usage record keeps its tokens, costs 0 and says
    /// `waived` (docs/billing.md). Off: such a request pays for the input it used.
    pub waive_empty_failures: bool,
    /// The longest an explicit context cache may live; a client's longer `cache_control.ttl`
    /// is capped to it (the operator pays the upstream's cache storage).
    #[serde(with = "humantime_serde")]
    pub max_cache_ttl: Duration,
    /// How long the gateway keeps reading a stream's upstream after its client left, so the
    /// request is billed the upstream's own final counts; `0s`: stop at once and bill an
    /// estimate.
    #[serde(with = "humantime_serde")]
    pub drain_after_disconnect: Duration,
    /// The Responses door's kept answers (`previous_response_id`).
    pub responses: ResponsesConf,
    pub limits: LimitsConf,
    /// How many connections each listener holds (`connections`).
    pub connections: ConnectionsConf,
    pub upstream: UpstreamConf,
    pub providers: ProvidersConf,
    pub log: LogConf,
}

/// The ledger journal (`tollgate.ledger_journal`; see `billing::journal`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalConf {
    /// Off: a process crash loses the records still queued for the database (about 10 ms of
    /// answers at a high rate). For measuring what the journal costs; keep it on.
    pub enabled: bool,
    /// How often the journal is synced to the disk: what a machine crash (power loss, kernel
    /// panic) can lose at most. `0s`: left to the kernel's writeback.
    #[serde(with = "humantime_serde")]
    pub fsync: Duration,
}

impl Default for JournalConf {
    fn default() -> Self {
        JournalConf {
            enabled: true,
            fsync: Duration::from_secs(1),
        }
    }
}

impl TollgateConf {
    /// The journal's directory, beside the spool (a graceful upgrade's two processes share
    /// both); `None` when the journal is off.
    pub fn journal_dir(&self) -> Option<std::path::PathBuf> {
        self.ledger_journal
            .enabled
            .then(|| std::path::PathBuf::from(format!("{}.journal", self.ledger_spool)))
    }
}

/// The alerts loop (`tollgate.alerts`; see `alerts`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConf {
    /// How often balances and key spend are looked at.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Attempts per event (the first included).
    pub attempts: u32,
    /// Wait before the second attempt; doubled after each.
    #[serde(with = "humantime_serde")]
    pub backoff: Duration,
    /// How long one attempt may take.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Let webhooks reach loopback, private and link-local addresses (a receiver inside the
    /// operator's network). Off: public addresses only, checked when set and when delivered.
    pub allow_private_webhooks: bool,
}

impl Default for AlertsConf {
    fn default() -> Self {
        AlertsConf {
            interval: Duration::from_secs(10),
            attempts: 5,
            backoff: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
            allow_private_webhooks: false,
        }
    }
}

/// The Responses door's kept answers (`tollgate.responses`; see `kept`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResponsesConf {
    /// How long an answer can be continued (`previous_response_id`) and read back; then it is
    /// deleted. `0s`: answers are not kept.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
}

/// Every management key's secret begins with this (`auth`, `admin::scope`): fixed, so that
/// no `key_prefix` can make an API key read as one.
pub const MANAGEMENT_KEY_PREFIX: &str = "mk-tg-";

/// The longest retention accepted: ten years (an expiry stays a plain timestamp).
const MAX_RETENTION: Duration = Duration::from_secs(3650 * 86_400);

impl Default for ResponsesConf {
    fn default() -> Self {
        ResponsesConf {
            retention: Duration::from_secs(30 * 86_400),
        }
    }
}

/// What one request may carry; a field left out keeps the gateway's default
/// (docs/operations.md#request-limits, `api::limits::Limits`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConf {
    pub max_messages: Option<u64>,
    pub max_content_parts: Option<u64>,
    pub max_embedding_inputs: Option<u64>,
    /// Estimated input tokens a chat request may carry, for every model (default: each
    /// model's `context_window`).
    pub max_input_tokens: Option<u64>,
    pub allow_http_urls: Option<bool>,
    pub max_header_count: Option<u64>,
    pub max_header_bytes: Option<ByteSize>,
    /// The whole request body must arrive within this.
    #[serde(default, with = "humantime_serde::option")]
    pub body_timeout: Option<Duration>,
    /// Each write to the client must complete within this.
    #[serde(default, with = "humantime_serde::option")]
    pub client_write_timeout: Option<Duration>,
    /// A kept-alive connection waiting for its next request is closed after this; a
    /// request's head must arrive whole within it.
    #[serde(default, with = "humantime_serde::option")]
    pub idle_timeout: Option<Duration>,
}

/// Connection limits of both listeners, fitted into the open-file limit at start (see
/// `connections`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionsConf {
    pub public: ListenerLimits,
    pub admin: ListenerLimits,
    /// File handles kept beyond the listeners' connections (and the public connections'
    /// upstream calls): the store, logs, the spool, listeners, runtimes, and connections
    /// accepted in a burst or being refused.
    pub reserve_files: u64,
}

/// One listener's connection limits; a connection past either is refused with a 503.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerLimits {
    /// Connections open at once, all clients together.
    pub max: usize,
    /// Connections open at once from one client address (an IPv6 client: its /64).
    pub per_address: usize,
}

impl Default for ConnectionsConf {
    fn default() -> Self {
        ConnectionsConf {
            public: ListenerLimits {
                max: 16_384,
                per_address: 4_096,
            },
            admin: ListenerLimits {
                max: 128,
                per_address: 64,
            },
            reserve_files: 512,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConf {
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Longest wait for any single read from the upstream: bounds the gap between SSE events.
    #[serde(with = "humantime_serde")]
    pub read_timeout: Duration,
    /// Largest buffered upstream answer read; a larger one is a 502 `upstream_error`.
    pub max_answer_body: ByteSize,
    /// Routes a request tries at most, failing over while an attempt fails before anything
    /// reached the client (1: no failover).
    pub max_attempts: u32,
    /// No further route is tried once this long has passed since the first attempt began.
    #[serde(with = "humantime_serde")]
    pub failover_deadline: Duration,
    /// While a stream has sent nothing for this long, an SSE comment (`: keep-alive`) goes to
    /// the client so that proxies in between do not cut it; `0s`: never.
    #[serde(with = "humantime_serde")]
    pub stream_keep_alive: Duration,
    pub breaker: BreakerConf,
    /// PEM certificates of CAs trusted for upstream TLS beside (or, with `system_roots` off,
    /// instead of) the built-in public roots; read at start.
    pub ca_file: Option<std::path::PathBuf>,
    /// Trust the built-in public roots (Mozilla's); off: only `ca_file`'s CAs.
    pub system_roots: bool,
    /// Which upstreams get HTTP/2, many calls sharing a connection (`upstream/multiplex.rs`).
    pub http2: Http2Mode,
    /// Calls in flight on one HTTP/2 connection before another is opened (or fewer, when the
    /// upstream's `SETTINGS_MAX_CONCURRENT_STREAMS` says so).
    pub http2_max_streams: u32,
}

/// Where the upstream client speaks HTTP/2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Http2Mode {
    /// Over TLS when the upstream chooses it (ALPN), as every provider does; plain `http://`
    /// upstreams get HTTP/1.1.
    Auto,
    /// `auto`, and plain `http://` upstreams by prior knowledge (h2c): for a local server known
    /// to speak it.
    Always,
    /// HTTP/1.1 everywhere, a connection per call in flight.
    Never,
}

/// The per-route circuit breaker (docs/providers.md#routing-and-failover).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConf {
    /// Consecutive failures (no connection, timeout, 5xx) that make a route cool down.
    pub failures: u32,
    /// How long a route cools down after them, or after a 429 without `Retry-After`.
    #[serde(with = "humantime_serde")]
    pub cooldown: Duration,
    /// The longest an upstream's `Retry-After` makes a route cool down.
    #[serde(with = "humantime_serde")]
    pub max_cooldown: Duration,
}

impl Default for BreakerConf {
    fn default() -> Self {
        BreakerConf {
            failures: 3,
            cooldown: Duration::from_secs(30),
            max_cooldown: Duration::from_secs(300),
        }
    }
}

/// Per-provider route settings. Route kinds map onto them: `openai` → `openai`,
/// `gemini-api` → `gemini`, `vertex`/`vertex-global`/`vertex-anthropic` → `vertex`,
/// `anthropic` → `anthropic`. A route row's own `base_url` overrides the one here.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProvidersConf {
    pub openai: KeyedProvider,
    pub gemini: KeyedProvider,
    pub anthropic: AnthropicConf,
    pub vertex: VertexConf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyedProvider {
    pub base_url: String,
    /// Name of the environment variable holding the API key.
    pub api_key_env: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnthropicConf {
    pub base_url: String,
    pub api_key_env: String,
    /// Sent as the `anthropic-version` header.
    pub version: String,
    /// The `anthropic-beta` values a Messages-door request may pass to a Claude route; the
    /// others are dropped. A beta that changes the price (`context-1m-…`) passes only for a
    /// model whose catalog entry prices it, whatever this list says.
    pub betas: Vec<String>,
}

/// What Claude Code and the Anthropic SDKs send that changes features, not prices.
pub const DEFAULT_ANTHROPIC_BETAS: &[&str] = &[
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "thinking-token-count-2026-05-13",
    "advanced-tool-use-2025-11-20",
    "effort-2025-11-24",
    "mid-conversation-tool-changes-2026-07-01",
    "fine-grained-tool-streaming-2025-05-14",
    "token-efficient-tools-2025-02-19",
    "prompt-caching-2024-07-31",
    "extended-cache-ttl-2025-04-11",
    "output-128k-2025-02-19",
    "context-1m-2025-08-07",
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VertexConf {
    /// Regional endpoint; `{region}` is replaced by the route's region.
    pub base_url: String,
    /// Endpoint of the `global` location.
    pub global_base_url: String,
    /// Environment variable holding the GCP project id (else the key file's `project_id`).
    pub project_env: String,
    /// Environment variable holding the path of the service-account key file.
    pub credentials_env: String,
    /// OAuth2 token endpoint (overridable so tests use a local fake).
    pub token_url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConf {
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `tollgate=debug,pingora=warn`; `RUST_LOG` wins.
    pub level: String,
}

impl Default for TollgateConf {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            listeners: listeners::ListenersConf::default(),
            console: console::ConsoleConf::default(),
            trusted_proxies: Vec::new(),
            admin_token_env: "TOLLGATE_ADMIN_TOKEN".into(),
            alerts: AlertsConf::default(),
            store: "sqlite://data/tollgate.db".into(),
            store_read_url: None,
            key_prefix: "sk-tg-".into(),
            catalog_file: "conf/catalog.yaml".into(),
            catalog_refresh: Duration::from_secs(30),
            max_request_body: ByteSize::mib(32),
            ledger_spool: "data/ledger.spool".into(),
            ledger_journal: JournalConf::default(),
            strict_credit: false,
            waive_empty_failures: false,
            max_cache_ttl: Duration::from_secs(3600),
            drain_after_disconnect: Duration::from_secs(60),
            responses: ResponsesConf::default(),
            limits: LimitsConf::default(),
            connections: ConnectionsConf::default(),
            upstream: UpstreamConf::default(),
            providers: ProvidersConf::default(),
            log: LogConf::default(),
        }
    }
}

impl Default for UpstreamConf {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(300),
            max_answer_body: ByteSize::mib(16),
            max_attempts: 3,
            failover_deadline: Duration::from_secs(60),
            stream_keep_alive: Duration::from_secs(15),
            breaker: BreakerConf::default(),
            ca_file: None,
            system_roots: true,
            http2: Http2Mode::Auto,
            http2_max_streams: 100,
        }
    }
}

impl Default for ProvidersConf {
    fn default() -> Self {
        Self {
            openai: KeyedProvider {
                base_url: "https://api.openai.com/v1".into(),
                api_key_env: "OPENAI_API_KEY".into(),
            },
            gemini: KeyedProvider {
                base_url: "https://generativelanguage.googleapis.com".into(),
                api_key_env: "GEMINI_API_KEY".into(),
            },
            anthropic: AnthropicConf::default(),
            vertex: VertexConf::default(),
        }
    }
}

impl Default for AnthropicConf {
    fn default() -> Self {
        Self {
            base_url: "https://api.anthropic.com".into(),
            api_key_env: "ANTHROPIC_API_KEY".into(),
            version: "2023-06-01".into(),
            betas: DEFAULT_ANTHROPIC_BETAS
                .iter()
                .map(|b| (*b).to_owned())
                .collect(),
        }
    }
}

impl Default for VertexConf {
    fn default() -> Self {
        Self {
            base_url: "https://{region}-aiplatform.googleapis.com".into(),
            global_base_url: "https://aiplatform.googleapis.com".into(),
            project_env: "VERTEX_PROJECT".into(),
            credentials_env: "GOOGLE_APPLICATION_CREDENTIALS".into(),
            token_url: "https://oauth2.googleapis.com/token".into(),
        }
    }
}

impl Default for LogConf {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses and validates the file's text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut root: serde_yaml::Value = if text.trim().is_empty() {
            serde_yaml::Value::Mapping(Default::default())
        } else {
            serde_yaml::from_str(text).map_err(|e| ConfigError::Yaml(e.to_string()))?
        };
        let map = root.as_mapping_mut().ok_or_else(|| ConfigError::Field {
            path: "(top level)".into(),
            message: "expected a mapping".into(),
        })?;
        let ours = map.remove("tollgate").unwrap_or(serde_yaml::Value::Null);
        reject_unknown_pingora_keys(map)?;
        let server: ServerConf = deserialize_at(root, "")?;
        let tollgate: TollgateConf = if ours.is_null() {
            TollgateConf::default()
        } else {
            deserialize_at(ours, "tollgate.")?
        };
        let config = Config { server, tollgate };
        config.validate()?;
        Ok(config)
    }

    /// Every problem at once, each naming its field.
    fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.tollgate;
        let mut problems = Vec::new();
        if t.alerts.interval < Duration::from_millis(100) {
            problems.push("tollgate.alerts.interval: at least 100ms".to_owned());
        }
        if !(1..=20).contains(&t.alerts.attempts) {
            problems.push("tollgate.alerts.attempts: 1 to 20".to_owned());
        }
        if t.listen == t.admin_listen {
            problems.push("tollgate.admin_listen: must differ from tollgate.listen".to_owned());
        }
        if !(t.store.starts_with("sqlite://")
            || t.store.starts_with("postgres://")
            || t.store.starts_with("postgresql://"))
        {
            problems.push(format!(
                "tollgate.store: {:?} is neither sqlite://PATH nor postgres://…",
                t.store
            ));
        }
        if let Some(read) = &t.store_read_url {
            problems.extend(read_url_problem(&t.store, read));
        }
        let prefix_ok = (2..=16).contains(&t.key_prefix.len())
            && t.key_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !prefix_ok {
            problems.push(
                "tollgate.key_prefix: 2 to 16 characters of [A-Za-z0-9_-] expected".to_owned(),
            );
        } else if t.key_prefix.starts_with(MANAGEMENT_KEY_PREFIX)
            || MANAGEMENT_KEY_PREFIX.starts_with(t.key_prefix.as_str())
        {
            problems.push(format!(
                "tollgate.key_prefix: {:?} would read as a management key ({MANAGEMENT_KEY_PREFIX}…): \
                 choose a prefix that neither begins with it nor begins it",
                t.key_prefix
            ));
        }
        if t.responses.retention > MAX_RETENTION {
            problems.push("tollgate.responses.retention: at most 3650d".to_owned());
        }
        if t.catalog_refresh < Duration::from_secs(1) {
            problems.push("tollgate.catalog_refresh: at least 1s".to_owned());
        }
        if t.max_request_body.as_u64() < 1024 || t.max_request_body > ByteSize::gib(1) {
            problems.push("tollgate.max_request_body: between 1KiB and 1GiB".to_owned());
        }
        for (name, d) in [
            ("connect_timeout", t.upstream.connect_timeout),
            ("read_timeout", t.upstream.read_timeout),
        ] {
            if d.is_zero() {
                problems.push(format!("tollgate.upstream.{name}: must be positive"));
            }
        }
        let u = &t.upstream;
        if u.max_attempts == 0 || u.breaker.failures == 0 || u.http2_max_streams == 0 {
            problems.push(
                "tollgate.upstream.max_attempts, breaker.failures, http2_max_streams: at least 1"
                    .to_owned(),
            );
        }
        if !u.system_roots && u.ca_file.is_none() {
            problems.push(
                "tollgate.upstream.system_roots: false needs a ca_file (no upstream could be trusted)"
                    .to_owned(),
            );
        }
        if u.breaker.cooldown.is_zero() || u.breaker.max_cooldown < u.breaker.cooldown {
            problems.push(
                "tollgate.upstream.breaker: cooldown positive, max_cooldown not below it"
                    .to_owned(),
            );
        }
        let urls = [
            ("openai.base_url", &t.providers.openai.base_url),
            ("gemini.base_url", &t.providers.gemini.base_url),
            ("anthropic.base_url", &t.providers.anthropic.base_url),
            ("vertex.base_url", &t.providers.vertex.base_url),
            (
                "vertex.global_base_url",
                &t.providers.vertex.global_base_url,
            ),
            ("vertex.token_url", &t.providers.vertex.token_url),
        ];
        for (name, url) in urls {
            if let Err(e) = endpoint::Endpoint::parse(&url.replace("{region}", "r")) {
                problems.push(format!("tollgate.providers.{name}: {e}"));
            }
        }
        let c = &t.connections;
        for (name, l) in [("public", c.public), ("admin", c.admin)] {
            if l.max == 0 || l.per_address == 0 || l.per_address > l.max {
                problems.push(format!(
                    "tollgate.connections.{name}: max at least 1, per_address from 1 to max"
                ));
            }
        }
        if c.reserve_files < 64 {
            problems.push("tollgate.connections.reserve_files: at least 64".to_owned());
        }
        for (name, l) in [
            ("public", &t.listeners.public),
            ("admin", &t.listeners.admin),
        ] {
            problems.extend(l.problems(&format!("tollgate.listeners.{name}")));
        }
        if self.server.threads == 0 {
            problems.push("threads: at least 1".to_owned());
        }
        problems.extend(t.console.problems());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// The store URL to use: `TOLLGATE_STORE` overrides the file (handy for one-off CLI use).
    pub fn store_url(&self, env: impl Fn(&str) -> Option<String>) -> String {
        env("TOLLGATE_STORE").unwrap_or_else(|| self.tollgate.store.clone())
    }

    /// The read replica's URL, if any: `TOLLGATE_STORE_READ` overrides the file. `Err` when it
    /// is not a PostgreSQL URL beside a PostgreSQL store.
    pub fn store_read_url(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<String>, ConfigError> {
        let Some(read) =
            env("TOLLGATE_STORE_READ").or_else(|| self.tollgate.store_read_url.clone())
        else {
            return Ok(None);
        };
        match read_url_problem(&self.store_url(&env), &read) {
            Some(problem) => Err(ConfigError::Invalid(vec![problem])),
            None => Ok(Some(read)),
        }
    }
}

/// What is wrong with a read replica's URL beside the store's: SQLite has no replicas (a
/// second connection to the same file would read the same rows, so it is refused rather than
/// pretended).
fn read_url_problem(store: &str, read: &str) -> Option<String> {
    let postgres = |url: &str| url.starts_with("postgres://") || url.starts_with("postgresql://");
    if !postgres(store) {
        return Some(
            "tollgate.store_read_url: read replicas are for a PostgreSQL store only".into(),
        );
    }
    if !postgres(read) {
        return Some(format!(
            "tollgate.store_read_url: {read:?} is not a postgres://… URL"
        ));
    }
    None
}

/// Pingora ignores unknown keys; we do not, so a typo such as `thread: 4` is caught.
fn reject_unknown_pingora_keys(map: &serde_yaml::Mapping) -> Result<(), ConfigError> {
    let known: BTreeSet<String> = match serde_yaml::to_value(ServerConf::default()) {
        Ok(serde_yaml::Value::Mapping(m)) => m
            .keys()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect(),
        _ => return Ok(()),
    };
    for key in map.keys() {
        let name = key.as_str().unwrap_or("(non-string key)");
        if !known.contains(name) {
            return Err(ConfigError::Field {
                path: name.to_owned(),
                message: "unknown setting (neither a Pingora server setting nor `tollgate`)".into(),
            });
        }
    }
    Ok(())
}

fn deserialize_at<T: serde::de::DeserializeOwned>(
    value: serde_yaml::Value,
    prefix: &str,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ConfigError::Field {
            path: format!("{prefix}{path}").trim_end_matches('.').to_owned(),
            message: e.into_inner().to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_all_defaults() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.tollgate.key_prefix, "sk-tg-");
        assert_eq!(c.tollgate.max_request_body, ByteSize::mib(32));
        assert_eq!(c.tollgate.catalog_refresh, Duration::from_secs(30));
        assert_eq!(c.tollgate.store, "sqlite://data/tollgate.db");
    }

    #[test]
    fn reads_both_sections() {
        let c = Config::parse(
            "threads: 3\ntollgate:\n  listen: 127.0.0.1:9000\n  max_request_body: 8MiB\n  catalog_refresh: 5s\n",
        )
        .unwrap();
        assert_eq!(c.server.threads, 3);
        assert_eq!(c.tollgate.listen.port(), 9000);
        assert_eq!(c.tollgate.max_request_body, ByteSize::mib(8));
        assert_eq!(c.tollgate.catalog_refresh, Duration::from_secs(5));
    }

    #[test]
    fn a_read_replica_is_for_a_postgresql_store_only() {
        let on = |store: &str, read: &str| {
            Config::parse(&format!(
                "tollgate:\n  store: \"{store}\"\n  store_read_url: \"{read}\"\n"
            ))
        };
        let pg = "postgres://u@h/db";
        let c = on(pg, "postgres://u@replica/db").unwrap();
        assert_eq!(
            c.store_read_url(|_| None).unwrap().as_deref(),
            Some("postgres://u@replica/db")
        );
        let e = on("sqlite://x.db", "sqlite://x.db")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tollgate.store_read_url: read replicas are for a PostgreSQL store only"),
            "{e}"
        );
        let e = on(pg, "sqlite://x.db").unwrap_err().to_string();
        assert!(e.contains("is not a postgres://"), "{e}");
        // The environment overrides the file, and is held to the same rule.
        let c = Config::parse("tollgate:\n  store: \"sqlite://x.db\"\n").unwrap();
        assert_eq!(c.store_read_url(|_| None).unwrap(), None);
        let env = |k: &str| (k == "TOLLGATE_STORE_READ").then(|| "postgres://u@r/db".to_owned());
        assert!(c.store_read_url(env).is_err());
        let env = |k: &str| match k {
            "TOLLGATE_STORE" => Some(pg.to_owned()),
            "TOLLGATE_STORE_READ" => Some("postgres://u@r/db".to_owned()),
            _ => None,
        };
        assert_eq!(
            c.store_read_url(env).unwrap().as_deref(),
            Some("postgres://u@r/db")
        );
    }

    #[test]
    fn bad_field_is_named() {
        let e = Config::parse("tollgate:\n  upstream:\n    read_timeout: soon\n").unwrap_err();
        assert!(
            e.to_string().contains("tollgate.upstream.read_timeout"),
            "{e}"
        );
        let e = Config::parse("tollgate:\n  listne: 1.2.3.4:5\n").unwrap_err();
        assert!(e.to_string().contains("listne"), "{e}");
        let e = Config::parse("thread: 4\n").unwrap_err();
        assert!(e.to_string().starts_with("thread:"), "{e}");
    }

    #[test]
    fn validation_lists_every_problem() {
        let e = Config::parse(
            "tollgate:\n  store: mysql://x\n  key_prefix: '!'\n  catalog_refresh: 10ms\n",
        )
        .unwrap_err()
        .to_string();
        for field in [
            "tollgate.store",
            "tollgate.key_prefix",
            "tollgate.catalog_refresh",
        ] {
            assert!(e.contains(field), "{field} missing from: {e}");
        }
        for taken in ["mk-tg-", "mk-tg-x", "mk-", "mk"] {
            let e = Config::parse(&format!("tollgate:\n  key_prefix: {taken}\n")).unwrap_err();
            assert!(e.to_string().contains("management key"), "{taken}: {e}");
        }
        assert!(Config::parse("tollgate:\n  key_prefix: mk-tgx\n").is_ok());
    }

    #[test]
    fn connection_limits_are_read_and_checked() {
        let c = Config::parse(
            "tollgate:\n  connections:\n    admin: {max: 8, per_address: 2}\n    reserve_files: 100\n",
        )
        .unwrap();
        let conn = c.tollgate.connections;
        assert_eq!(
            conn.admin,
            ListenerLimits {
                max: 8,
                per_address: 2
            }
        );
        assert_eq!(
            conn.public,
            ConnectionsConf::default().public,
            "default kept"
        );
        assert_eq!(conn.reserve_files, 100);
        let e = Config::parse(
            "tollgate:\n  connections:\n    public: {max: 4, per_address: 5}\n    admin: {max: 0, per_address: 0}\n    reserve_files: 1\n",
        )
        .unwrap_err()
        .to_string();
        for field in ["connections.public", "connections.admin", "reserve_files"] {
            assert!(e.contains(field), "{field} missing from: {e}");
        }
        let e = Config::parse("tollgate:\n  connections:\n    admin: {max: 8}\n").unwrap_err();
        assert!(e.to_string().contains("per_address"), "{e}");
    }

    #[test]
    fn response_retention_is_read_and_checked() {
        let days = |n: u64| Duration::from_secs(n * 86_400);
        let retention = |text: &str| {
            Config::parse(&format!("tollgate:\n  responses:\n    retention: {text}\n"))
                .map(|c| c.tollgate.responses.retention)
        };
        assert_eq!(
            Config::parse("").unwrap().tollgate.responses.retention,
            days(30)
        );
        assert_eq!(retention("7d").unwrap(), days(7));
        assert_eq!(retention("0s").unwrap(), Duration::ZERO);
        assert_eq!(retention("3650d").unwrap(), days(3650));
        let e = retention("3651d").unwrap_err().to_string();
        assert!(e.contains("tollgate.responses.retention"), "{e}");
        let e = retention("soon").unwrap_err().to_string();
        assert!(e.contains("tollgate.responses.retention"), "{e}");
    }

    #[test]
    fn listener_transports_are_read_and_checked() {
        let c = Config::parse(
            "tollgate:\n  listeners:\n    public:\n      tls:\n        certificates: [{cert: a.crt, key: a.key}]\n    admin: {h2c: true}\n",
        )
        .unwrap();
        let l = &c.tollgate.listeners;
        assert!(l.public.is_tls() && !l.public.h2c);
        assert!(l.public.tls.as_ref().unwrap().h2, "h2 by default");
        assert!(!l.admin.is_tls() && l.admin.h2c);
        let e = Config::parse(
            "tollgate:\n  listeners:\n    public: {h2c: true, tls: {certificates: []}}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tollgate.listeners.public.tls.certificates: at least one")
                && e.contains("tollgate.listeners.public: h2c"),
            "{e}"
        );
        let e =
            Config::parse("tollgate:\n  listeners:\n    admin: {tls: {h2: false}}\n").unwrap_err();
        assert!(e.to_string().contains("certificates"), "{e}");
    }

    #[test]
    fn breaker_settings_are_read_and_checked() {
        let c = Config::parse(
            "tollgate:\n  upstream:\n    breaker: {failures: 5, cooldown: 10s}\n    stream_keep_alive: 0s\n",
        )
        .unwrap();
        let u = &c.tollgate.upstream;
        assert_eq!(u.breaker.failures, 5);
        assert_eq!(u.breaker.cooldown, Duration::from_secs(10));
        assert_eq!(
            u.breaker.max_cooldown,
            Duration::from_secs(300),
            "default kept"
        );
        assert!(u.stream_keep_alive.is_zero());
        let e = Config::parse(
            "tollgate:\n  upstream:\n    max_attempts: 0\n    breaker: {cooldown: 60s, max_cooldown: 5s}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("max_attempts") && e.contains("max_cooldown"),
            "{e}"
        );
    }

    #[test]
    fn upstream_http2_settings_are_read_and_checked() {
        let u = Config::parse("tollgate:\n  upstream: {http2: never}\n")
            .unwrap()
            .tollgate
            .upstream;
        assert_eq!((u.http2, u.http2_max_streams), (Http2Mode::Never, 100));
        assert_eq!(UpstreamConf::default().http2, Http2Mode::Auto);
        for bad in ["http2: sometimes", "http2_max_streams: 0"] {
            let text = format!("tollgate:\n  upstream: {{{bad}}}\n");
            assert!(Config::parse(&text).is_err(), "{bad}");
        }
    }

    #[test]
    fn upstream_roots_are_the_built_in_ones_plus_a_ca_file() {
        let u = Config::parse("").unwrap().tollgate.upstream;
        assert_eq!((u.ca_file, u.system_roots), (None, true));
        let u = Config::parse(
            "tollgate:\n  upstream: {ca_file: /etc/tollgate/ca.pem, system_roots: false}\n",
        )
        .unwrap()
        .tollgate
        .upstream;
        assert_eq!(
            u.ca_file.as_deref(),
            Some(Path::new("/etc/tollgate/ca.pem"))
        );
        assert!(!u.system_roots);
        let e = Config::parse("tollgate:\n  upstream: {system_roots: false}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("system_roots") && e.contains("ca_file"), "{e}");
    }
}
