//! # tollgate-sim — upstream simulator for the tollgate gateway
//!
//! Upstream providers are unreachable from CI and the bench machines, so tests, `make demo` and
//! the load bench point the gateway at this binary. It serves every upstream surface on one
//! loopback port with bodies shaped like the captured fixtures in `tests/fixtures/`,
//! validates requests the way the real services do (so translator bugs surface as the same
//! 400s they would cause in production), and injects faults on demand.
//!
//! At startup it prints exactly one line, `tollgate-sim listening on http://127.0.0.1:PORT`,
//! to stdout (flushed); `--listen 127.0.0.1:0` picks a free port. With `--tls-cert FILE
//! --tls-key FILE` it serves HTTPS instead (`https://` in that line; `tls.rs`). It speaks
//! HTTP/1.1 and HTTP/2: over TLS it offers both (ALPN), as the providers do, and on plain
//! connections it takes HTTP/2 by prior knowledge (h2c).
//!
//! ## Surfaces
//!
//! | Path | Auth | Module |
//! |---|---|---|
//! | `POST /v1beta/models/{m}:generateContent`, `:streamGenerateContent?alt=sse`, `:countTokens`, `:embedContent`, `:batchEmbedContents` (also `/v1/models/…`) | `x-goog-api-key` or `?key=` = `--gemini-key` | `gemini.rs` |
//! | `POST/GET /v1beta/cachedContents`, `GET/PATCH/DELETE /v1beta/cachedContents/{id}` | same | `gemini.rs` |
//! | `POST /{v1,v1beta1}/projects/{p}/locations/{l}/publishers/google/models/{m}:generateContent`, `:streamGenerateContent?alt=sse`, `:countTokens`, `:predict`; `…/locations/{l}/cachedContents[/{id}]` | `Authorization: Bearer` token from `/token` | `vertex.rs` → `gemini.rs` |
//! | `POST /{v1,v1beta1}/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:rawPredict`, `:streamRawPredict`; `…/models/count-tokens:rawPredict` (the model in the body) | same | `vertex.rs` → `anthropic.rs` |
//! | `POST /token` (JWT-bearer grant) | — | `oauth.rs` |
//! | `POST /v1/messages`, `POST /v1/messages/count_tokens` | `x-api-key` = `--anthropic-key`, `anthropic-version` | `anthropic.rs` |
//! | `POST /v1/chat/completions`, `POST /v1/embeddings`, `GET /v1/models` | `Authorization: Bearer --openai-key` | `openai.rs` |
//! | `POST /v1/responses` (the Responses API, buffered and streamed) | same | `openai_responses.rs` |
//! | `GET /v1beta/models?pageSize=&pageToken=` (also `GET /v1/models` when it carries `x-goog-api-key` or `?key=`) | Gemini key | `listing.rs` |
//! | `GET /v1/models?limit=&after_id=&before_id=` when it carries `x-api-key` | Anthropic key, `anthropic-version` | `listing.rs` |
//! | `GET /v1beta1/publishers/{google,anthropic}/models?pageSize=&pageToken=` (shape from Google's REST reference as remembered, not captured) | `Authorization: Bearer` token from `/token` | `listing.rs` |
//!
//! Google's surfaces answer in indented JSON, as Google does, and compact JSON when the query
//! has `prettyPrint=false` (Google's system parameter; `$prettyPrint` too). Embedding values are
//! `f32`s in their shortest form.
//!
//! `GET /v1/models` is three surfaces on one path, told apart by the credential it carries:
//! a Google key → Gemini, `x-api-key` → Anthropic, anything else → OpenAI.
//!
//! Which model ids exist where is the registry's (`models.rs`: what the real services list as
//! of 2026-12-07): an unknown or retired id gets each surface's real 404 (Gemini
//! `models/… is not found`, Vertex `Publisher Model … was not found`, Anthropic
//! `not_found_error` `model: …`), and the listings above show the same table.
//!
//! Answers are deterministic: `"Echo: <last user text>"`, tokens = `ceil(bytes/4)`; the exact
//! rule is in `content.rs`. Per-surface validation rules are listed in each module's doc.
//!
//! ## Markers (in the last user message text; for embeddings in any input)
//!
//! | Marker | Effect |
//! |---|---|
//! | `[sim:fault=429]`, `=500`, `=503`, `=529` | the provider's real error body with that status (529 = Anthropic overloaded; Google/OpenAI answer their 503) |
//! | `[sim:fault=break-after=N]` | stream: N events, then the TCP connection drops without the final chunk; buffered: the first N body bytes, then the drop |
//! | `[sim:fault=stall]` | headers (and the first stream event), then silence until the client leaves |
//! | `[sim:fault=error-event]` | stream: the provider's mid-stream error after the first content event (buffered: the 500 body) |
//! | `[sim:fault=error-first]` | stream: the same error before any content (buffered: the 500 body) |
//! | `[sim:fault=garbage]` | a 200 whose body is an HTML page, not the provider's answer (buffered and streamed) |
//! | `[sim:fault=blocked]` | 200 refusal: Gemini `promptFeedback.blockReason=SAFETY`, Anthropic `stop_reason=refusal`, OpenAI `finish_reason=content_filter` (Responses: `status: incomplete`, reason `content_filter`) |
//! | `[sim:latency=MS]` | delay before the response headers (overrides `--latency-ms`) |
//! | `[sim:chunk-delay=MS]` | delay between stream events (overrides `--chunk-delay-ms`) |
//! | `[sim:chunks=N]` | split the streamed text into N events (overrides `--chunks`) |
//! | `[sim:call=NAME]` | with tools declared: call NAME with args `{"arg":"value"}` (Gemini `functionCall`, Anthropic `tool_use`, OpenAI `tool_calls`, Responses `function_call` items) |
//! | `[sim:parallel=N]` | N parallel calls (of NAME, or of the first declared function) |
//! | `[sim:args=JSON]` | the calls' arguments are this JSON object instead of `{"arg":"value"}` (Anthropic, Gemini, Vertex, OpenAI Responses; the value may hold `]`), so a real client can run a real tool |
//!
//! Forced tool modes call without a marker: Gemini `toolConfig` `ANY` (first allowed name),
//! Anthropic `tool_choice` `any`/`tool`, OpenAI `tool_choice` `required`/named; `NONE`/`none`
//! never call. Markers are stripped from the echoed text.
//!
//! ## Control API (never recorded, never faulted)
//!
//! | Request | Effect |
//! |---|---|
//! | `GET /_sim/requests[?route=NAME]` | JSON array of recorded requests `{seq, ts_ms, route, method, path, headers{lowercase: value}, body}` (body parsed as JSON, else a string) |
//! | `DELETE /_sim/requests` | clear the log → `{"cleared": n}` |
//! | `GET /_sim/stats` | `{requests_total, by_route{NAME: n}, tokens_issued, faults_injected, vertex_flex_requests, vertex_priority_requests, recording, recorded, recorded_dropped}` |
//! | `POST /_sim/faults` `{"fault":"429","count":1,"surface":"any"}` | queue a fault for the next `count` model requests of `surface` (`any`, `gemini`, `vertex`, `anthropic`, `anthropic-vertex`, `openai`) → `{"queued": n}` |
//! | `GET /_sim/faults`, `DELETE /_sim/faults` | list / clear queued faults |
//! | `POST /_sim/models/withdraw` `{"surface":"gemini","model":"gemini-2.5-pro"}` | take a model off one surface (`gemini`, `vertex`, `anthropic`, `anthropic-vertex`): its listing and its calls (which then 404) → `{"withdrawn": id, "surface": s}`; 400 if that surface does not serve it |
//! | `POST /_sim/reset` | clear log, queued faults, Gemini caches, Anthropic prompt cache, withdrawn models and counters (issued tokens stay valid) |
//! | `GET /_sim/health` | `{"ok": true}` |
//!
//! Route names: `gemini.generate`, `gemini.stream`, `gemini.count_tokens`, `gemini.embed`,
//! `gemini.batch_embed`, `gemini.cache`, `vertex.generate`, `vertex.stream`,
//! `vertex.count_tokens`, `vertex.predict`, `vertex.cache`, `vertex.claude`,
//! `vertex.claude_stream`, `vertex.claude_count_tokens`, `oauth.token`, `anthropic.messages`, `anthropic.count_tokens`,
//! `openai.chat`, `openai.responses`, `openai.embeddings`, `openai.models`, `gemini.models`,
//! `vertex.models`, `anthropic.models`, `unknown`.
//!
//! ## Flags
//!
//! `--listen ADDR` (default `127.0.0.1:0`), `--gemini-key` (`sim-gemini-key`),
//! `--anthropic-key` (`sim-anthropic-key`), `--openai-key` (`sim-openai-key`),
//! `--token-ttl-secs` (3600), `--latency-ms` (0), `--chunk-delay-ms` (0), `--chunks` (3),
//! `--no-record`, `--record-max` (100000 entries, oldest dropped first), `--threads` (tokio
//! worker threads, default 1), `--vertex-project P` (only P is authorised on Vertex; other
//! projects get the IAM 403), `--tls-cert FILE --tls-key FILE` (HTTPS with that PEM chain and
//! key; `/_sim/stats` then counts `tls_handshakes` and `tls_handshakes_failed`), `--http1-only`
//! (TLS handshakes offer HTTP/1.1 alone). `/_sim/stats` counts `connections` (TCP accepted)
//! and `http2_requests`.

// Handlers use `Result<Response, Response>`: the error *is* the (fully built) reply, so boxing
// it would only add an allocation on the error path.
#![allow(clippy::result_large_err)]
// The simulator is a test program with its own lifetimes: the gateway's spawn rule is not its.
#![allow(clippy::disallowed_methods)]

mod anthropic;
mod content;
mod faults;
mod fixtures;
mod gemini;
mod listing;
pub mod models;
mod oauth;
mod openai;
mod openai_responses;
mod record;
mod respond;
pub mod tls;
mod vertex;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use clap::Parser;
use serde_json::json;

use crate::content::Markers;
use crate::faults::{Fault, FaultQueue, StreamFault, Surface};
use crate::record::{Recorder, Route, Stats};
use crate::respond::{LatencyOverride, JSON_PLAIN};

/// The simulator's flags (also what [`spawn`] takes, as command-line words).
#[derive(Parser, Debug)]
#[command(
    name = "tollgate-sim",
    about = "Upstream simulator for the tollgate gateway (Gemini, Vertex, Anthropic, OpenAI)"
)]
pub struct Options {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    #[arg(long, default_value = "sim-gemini-key")]
    pub gemini_key: String,
    #[arg(long, default_value = "sim-anthropic-key")]
    pub anthropic_key: String,
    #[arg(long, default_value = "sim-openai-key")]
    pub openai_key: String,
    /// `expires_in` of issued OAuth tokens (and their real lifetime).
    #[arg(long, default_value_t = 3600)]
    pub token_ttl_secs: u64,
    /// Delay before response headers.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Delay between stream events.
    #[arg(long, default_value_t = 0)]
    pub chunk_delay_ms: u64,
    /// Number of content events a streamed answer is split into.
    #[arg(long, default_value_t = 3)]
    pub chunks: usize,
    /// Do not record requests (for load benches).
    #[arg(long)]
    pub no_record: bool,
    /// Keep at most this many recorded requests.
    #[arg(long, default_value_t = 100_000)]
    pub record_max: usize,
    /// Tokio worker threads (1 = current-thread runtime).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Only this Vertex project is authorised (others get the IAM 403).
    #[arg(long)]
    pub vertex_project: Option<String>,
    /// Serve TLS with this certificate chain (PEM); with `--tls-key`.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Offer only HTTP/1.1 in TLS handshakes (by default HTTP/2 too, as the providers do).
    #[arg(long)]
    pub http1_only: bool,
}

impl Options {
    /// The TLS server configuration of `--tls-cert` and `--tls-key`, when given.
    pub fn tls(&self) -> std::io::Result<Option<Arc<rustls::ServerConfig>>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => tls::server_config(cert, key, !self.http1_only).map(Some),
            _ => Ok(None),
        }
    }

    /// The URL scheme the simulator serves.
    pub fn scheme(&self) -> &'static str {
        if self.tls_cert.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

pub struct Config {
    pub gemini_key: String,
    pub anthropic_key: String,
    pub openai_key: String,
    pub token_ttl_secs: u64,
    pub latency_ms: u64,
    pub chunk_delay_ms: u64,
    pub chunks: usize,
    pub vertex_project: Option<String>,
}

/// Shared simulator state.
pub struct Sim {
    pub cfg: Config,
    pub rec: Recorder,
    pub stats: Stats,
    pub faults: FaultQueue,
    pub tokens: oauth::TokenStore,
    pub gcache: gemini::CacheStore,
    pub pcache: anthropic::PromptCache,
    pub models: models::Registry,
}

impl Sim {
    /// The fault for this request: its marker, else the next queued one for `surface`.
    pub fn pick_fault(&self, markers: &Markers, surface: Surface) -> Option<Fault> {
        let f = markers
            .fault
            .as_deref()
            .and_then(Fault::parse)
            .or_else(|| self.faults.take(surface));
        if f.is_some() {
            self.stats.faults_injected.fetch_add(1, Ordering::Relaxed);
        }
        f
    }

    pub fn delay(&self, m: &Markers) -> Duration {
        Duration::from_millis(m.chunk_delay_ms.unwrap_or(self.cfg.chunk_delay_ms))
    }

    pub fn chunks(&self, m: &Markers) -> usize {
        m.chunks.unwrap_or(self.cfg.chunks).max(1)
    }
}

/// What a handler sees of the request.
pub struct Req<'a> {
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
    pub query: &'a str,
    pub body: &'a Bytes,
}

/// First value of a query parameter (percent-decoded).
pub fn query_param(query: &str, name: &str) -> Option<String> {
    if query.is_empty() {
        return None;
    }
    oauth::form_decode(query)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// Google's `prettyPrint` system parameter (`$prettyPrint` too): its JSON answers are indented
/// unless it is `false`.
fn pretty_print(query: &str) -> bool {
    let off = |name| query_param(query, name).is_some_and(|v| v == "false");
    !(off("prettyPrint") || off("$prettyPrint"))
}

/// A buffered 200 body, misbehaving as `fault` asks (`error-event` → `on_error`).
pub fn buffered_with_fault(
    body: Bytes,
    content_type: &'static str,
    fault: Option<&Fault>,
    on_error: impl FnOnce() -> Response,
) -> Response {
    match fault {
        Some(Fault::BreakAfter(n)) => {
            let cut = body.slice(..(*n).min(body.len()));
            let b = faults::deliver(vec![cut], Duration::ZERO, StreamFault::BreakAfter(1));
            respond::streamed(StatusCode::OK, content_type, b)
        }
        Some(Fault::Stall) => {
            let b = faults::deliver(vec![body], Duration::ZERO, StreamFault::StallAfter(0));
            respond::streamed(StatusCode::OK, content_type, b)
        }
        Some(Fault::ErrorEvent | Fault::ErrorFirst) => on_error(),
        _ => respond::raw(StatusCode::OK, content_type, body),
    }
}

enum Target<'a> {
    Token,
    GeminiDev {
        version: &'a str,
        model: &'a str,
        method: &'a str,
    },
    GeminiCache {
        id: Option<&'a str>,
    },
    Vertex(vertex::VPath<'a>),
    AnthropicMessages,
    AnthropicCount,
    OpenAiChat,
    OpenAiResponses,
    OpenAiEmbeddings,
    OpenAiModels,
    GeminiModels,
    VertexModels {
        publisher: &'a str,
    },
    AnthropicModels,
    Unknown,
}

impl Target<'_> {
    /// Google's surfaces, whose JSON answers follow its system parameters.
    fn is_google(&self) -> bool {
        matches!(
            self,
            Target::GeminiDev { .. }
                | Target::GeminiCache { .. }
                | Target::Vertex(_)
                | Target::GeminiModels
                | Target::VertexModels { .. }
        )
    }

    fn route(&self) -> Route {
        match self {
            Target::Token => Route::OauthToken,
            Target::GeminiDev { method, .. } => match *method {
                "generateContent" => Route::GeminiGenerate,
                "streamGenerateContent" => Route::GeminiStream,
                "countTokens" => Route::GeminiCountTokens,
                "embedContent" => Route::GeminiEmbed,
                "batchEmbedContents" => Route::GeminiBatchEmbed,
                _ => Route::Unknown,
            },
            Target::GeminiCache { .. } => Route::GeminiCache,
            Target::Vertex(vp) => vp.route(),
            Target::AnthropicMessages => Route::AnthropicMessages,
            Target::AnthropicCount => Route::AnthropicCountTokens,
            Target::OpenAiChat => Route::OpenAiChat,
            Target::OpenAiResponses => Route::OpenAiResponses,
            Target::OpenAiEmbeddings => Route::OpenAiEmbeddings,
            Target::OpenAiModels => Route::OpenAiModels,
            Target::GeminiModels => Route::GeminiModels,
            Target::VertexModels { .. } => Route::VertexModels,
            Target::AnthropicModels => Route::AnthropicModels,
            Target::Unknown => Route::Unknown,
        }
    }
}

/// Whose `GET /v1/models` this is: the credential it carries decides, as only the
/// provider that issued it would answer.
fn models_list_target(headers: &HeaderMap, query: &str) -> Target<'static> {
    if headers.contains_key("x-goog-api-key") || query_param(query, "key").is_some() {
        Target::GeminiModels
    } else if headers.contains_key("x-api-key") {
        Target::AnthropicModels
    } else {
        Target::OpenAiModels
    }
}

/// `GET /v1beta1/publishers/{publisher}/models`.
fn vertex_models_target(path: &str) -> Option<Target<'_>> {
    let publisher = path
        .strip_prefix("/v1beta1/publishers/")?
        .strip_suffix("/models")?;
    (!publisher.is_empty() && !publisher.contains('/'))
        .then_some(Target::VertexModels { publisher })
}

fn classify<'a>(method: &Method, path: &'a str, headers: &HeaderMap, query: &str) -> Target<'a> {
    let post = method == Method::POST;
    let get = method == Method::GET;
    match path {
        "/token" if post => return Target::Token,
        "/v1/messages" if post => return Target::AnthropicMessages,
        "/v1/messages/count_tokens" if post => return Target::AnthropicCount,
        "/v1/chat/completions" if post => return Target::OpenAiChat,
        "/v1/responses" if post => return Target::OpenAiResponses,
        "/v1/embeddings" if post => return Target::OpenAiEmbeddings,
        "/v1/models" if get => return models_list_target(headers, query),
        "/v1beta/models" if get => return Target::GeminiModels,
        _ => {}
    }
    if get {
        if let Some(t) = vertex_models_target(path) {
            return t;
        }
    }
    for version in ["v1beta", "v1"] {
        let prefix_len = version.len() + 2;
        if path.len() <= prefix_len
            || !path[1..].starts_with(version)
            || path.as_bytes()[prefix_len - 1] != b'/'
        {
            continue;
        }
        let rest = &path[prefix_len..];
        if let Some(spec) = rest.strip_prefix("models/") {
            if post {
                if let Some((model, m)) = spec.split_once(':') {
                    if !model.contains('/') {
                        return Target::GeminiDev {
                            version,
                            model,
                            method: m,
                        };
                    }
                }
            }
        } else if rest == "cachedContents" {
            return Target::GeminiCache { id: None };
        } else if let Some(id) = rest.strip_prefix("cachedContents/") {
            if !id.is_empty() && !id.contains('/') {
                return Target::GeminiCache { id: Some(id) };
            }
        }
    }
    if let Some(vp) = vertex::parse(path) {
        if post || matches!(vp.kind, vertex::VKind::Cache { .. }) {
            return Target::Vertex(vp);
        }
    }
    Target::Unknown
}

fn not_found(method: &Method, path: &str) -> Response {
    if path.starts_with("/v1beta") || path.contains("/projects/") {
        fixtures::google_error(
            404,
            "NOT_FOUND",
            "Requested entity was not found.",
            Vec::new(),
        )
    } else if path.starts_with("/v1/messages") {
        fixtures::anthropic_error(404, "not_found_error", "Not Found", false)
    } else {
        fixtures::openai_error(
            404,
            &format!("Invalid URL ({} {path})", method.as_str()),
            "invalid_request_error",
            None,
            None,
        )
    }
}

const MAX_BODY: usize = 64 * 1024 * 1024;

async fn dispatch(State(sim): State<Arc<Sim>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    if let Some(ctl) = path.strip_prefix("/_sim/") {
        let body = axum::body::to_bytes(body, MAX_BODY)
            .await
            .unwrap_or_default();
        return control(
            &sim,
            &parts.method,
            ctl,
            parts.uri.query().unwrap_or(""),
            &body,
        );
    }
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            return respond::raw(
                StatusCode::PAYLOAD_TOO_LARGE,
                "text/plain",
                "request body too large",
            )
        }
    };
    let query = parts.uri.query().unwrap_or("");
    let target = classify(&parts.method, path, &parts.headers, query);
    let route = target.route();
    sim.stats.count(route);
    if parts.version == axum::http::Version::HTTP_2 {
        sim.stats.http2_requests.fetch_add(1, Ordering::Relaxed);
    }
    if sim.rec.enabled() {
        let full = parts.uri.path_and_query().map_or(path, |p| p.as_str());
        sim.rec
            .push(route, &parts.method, full, &parts.headers, &body);
    }
    let req = Req {
        method: &parts.method,
        headers: &parts.headers,
        query,
        body: &body,
    };
    let resp = match &target {
        Target::Token => oauth::token(&sim, &body),
        Target::GeminiDev {
            version,
            model,
            method,
        } => gemini::handle_dev(&sim, &req, version, model, method),
        Target::GeminiCache { id } => match gemini::dev_auth(&sim, &req) {
            Ok(()) => gemini::cache_admin(&sim, &req, "", *id, false),
            Err(r) => r,
        },
        Target::Vertex(vp) => vertex::handle(&sim, &req, vp),
        Target::AnthropicMessages => anthropic::handle_direct(&sim, &req, false),
        Target::AnthropicCount => anthropic::handle_direct(&sim, &req, true),
        Target::OpenAiChat => openai::chat(&sim, &req),
        Target::OpenAiResponses => openai_responses::create(&sim, &req),
        Target::OpenAiEmbeddings => openai::embeddings(&sim, &req),
        Target::OpenAiModels => openai::models(&sim, &req),
        Target::GeminiModels => listing::gemini(&sim, &req),
        Target::VertexModels { publisher } => listing::vertex(&sim, &req, publisher),
        Target::AnthropicModels => listing::anthropic(&sim, &req),
        Target::Unknown => not_found(&parts.method, path),
    };
    let resp = if target.is_google() && !pretty_print(query) {
        respond::compacted(resp).await
    } else {
        resp
    };
    let latency = resp
        .extensions()
        .get::<LatencyOverride>()
        .map_or(sim.cfg.latency_ms, |l| l.0);
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    resp
}

fn control(sim: &Sim, method: &Method, path: &str, query: &str, body: &Bytes) -> Response {
    let ok = |v: serde_json::Value| respond::json(StatusCode::OK, JSON_PLAIN, &v);
    let bad = |msg: String| {
        respond::json(
            StatusCode::BAD_REQUEST,
            JSON_PLAIN,
            &json!({ "error": msg }),
        )
    };
    match (method.as_str(), path) {
        ("GET", "requests") => {
            let route = query_param(query, "route");
            ok(sim.rec.render(route.as_deref()))
        }
        ("DELETE", "requests") => ok(json!({ "cleared": sim.rec.clear() })),
        ("GET", "stats") => {
            ok(sim
                .stats
                .render(sim.rec.len(), sim.rec.dropped(), sim.rec.enabled()))
        }
        ("POST", "faults") => match serde_json::from_slice::<faults::QueueRequest>(body) {
            Ok(q) => match sim.faults.push(q) {
                Ok(n) => ok(json!({ "queued": n })),
                Err(e) => bad(e),
            },
            Err(e) => bad(format!(
                "expected {{\"fault\": \"429\", \"count\": 1, \"surface\": \"any\"}}: {e}"
            )),
        },
        ("GET", "faults") => ok(json!(sim.faults.list())),
        ("DELETE", "faults") => ok(json!({ "cleared": sim.faults.clear() })),
        ("POST", "models/withdraw") => withdraw(sim, body),
        ("POST", "reset") => {
            sim.rec.clear();
            sim.faults.clear();
            sim.gcache.clear();
            sim.pcache.clear();
            sim.models.reset();
            sim.stats.reset();
            ok(json!({ "reset": true }))
        }
        ("GET", "health") => ok(json!({ "ok": true })),
        _ => respond::json(
            StatusCode::NOT_FOUND,
            JSON_PLAIN,
            &json!({ "error": format!("no control route {} /_sim/{path}", method.as_str()) }),
        ),
    }
}

#[derive(serde::Deserialize)]
struct Withdraw {
    surface: String,
    model: String,
}

/// `POST /_sim/models/withdraw`.
fn withdraw(sim: &Sim, body: &Bytes) -> Response {
    let result = serde_json::from_slice::<Withdraw>(body)
        .map_err(|e| format!("expected {{\"surface\": \"gemini\", \"model\": \"<id>\"}}: {e}"))
        .and_then(|w| sim.models.withdraw(&w.surface, &w.model).map(|()| w));
    match result {
        Ok(w) => respond::json(
            StatusCode::OK,
            JSON_PLAIN,
            &json!({ "withdrawn": w.model, "surface": w.surface }),
        ),
        Err(e) => respond::json(StatusCode::BAD_REQUEST, JSON_PLAIN, &json!({ "error": e })),
    }
}

/// Serves the simulator on `listener`.
pub async fn serve(listener: tokio::net::TcpListener, opts: Options) -> std::io::Result<()> {
    let tls = opts.tls()?;
    let sim = Arc::new(Sim {
        cfg: Config {
            gemini_key: opts.gemini_key,
            anthropic_key: opts.anthropic_key,
            openai_key: opts.openai_key,
            token_ttl_secs: opts.token_ttl_secs,
            latency_ms: opts.latency_ms,
            chunk_delay_ms: opts.chunk_delay_ms,
            chunks: opts.chunks.max(1),
            vertex_project: opts.vertex_project,
        },
        rec: Recorder::new(!opts.no_record, opts.record_max),
        stats: Stats::default(),
        faults: FaultQueue::default(),
        tokens: oauth::TokenStore::default(),
        gcache: gemini::CacheStore::default(),
        pcache: anthropic::PromptCache::default(),
        models: models::Registry::default(),
    });
    let app = Router::new().fallback(dispatch).with_state(sim.clone());
    if let Some(config) = tls {
        return axum::serve(tls::TlsListener::new(listener, config, sim), app).await;
    }
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(move |tcp| {
        let _ = tcp.set_nodelay(true);
        sim.stats.connections.fetch_add(1, Ordering::Relaxed);
    });
    axum::serve(listener, app).await
}

/// A simulator running on its own thread and runtime, for tests in other crates: it listens
/// on a free loopback port (or `--listen`) and stops (connections and all) when dropped.
pub struct Running {
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts a simulator with `args` (the binary's flags, e.g. `["--latency-ms", "50"]`) on
/// `--listen` (by default `127.0.0.1:0`); a TLS certificate or key that cannot be used is an
/// error here.
pub fn spawn(args: &[&str]) -> Result<Running, String> {
    let opts = Options::try_parse_from(std::iter::once("tollgate-sim").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    opts.tls().map_err(|e| e.to_string())?;
    let listener = std::net::TcpListener::bind(&opts.listen).map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let url = format!(
        "{}://{}",
        opts.scheme(),
        listener.local_addr().map_err(|e| e.to_string())?
    );
    let runtime = runtime(opts.threads).map_err(|e| e.to_string())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("tollgate-sim".into())
        .spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                tokio::spawn(serve(listener, opts));
                let _ = stopped.await;
            });
            // Dropping the runtime ends the server and every connection still open (a
            // stalled stream included), so a dropped simulator is gone at once.
            drop(runtime);
        })
        .map_err(|e| e.to_string())?;
    Ok(Running {
        url,
        stop: Some(stop),
        thread: Some(thread),
    })
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A current-thread runtime for one worker, else a multi-thread one.
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}
