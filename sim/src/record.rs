//! Request log and counters behind `GET/DELETE /_sim/requests` and `GET /_sim/stats`, so tests
//! can assert exactly what the gateway sent upstream (headers, translated bodies).
//!
//! Rules: an entry is appended before the request is handled (stalled requests are visible);
//! the hot path only clones the `Bytes` body and the header strings under one short lock —
//! JSON parsing of the body happens when the log is read. `--no-record` skips all of it;
//! `--record-max` bounds memory (oldest entries are dropped first and counted). Counters are
//! lock-free atomics.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use axum::http::{HeaderMap, Method};
use bytes::Bytes;
use serde_json::{Map, Value};

/// Every kind of route the simulator serves (stats key = `name()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    GeminiGenerate,
    GeminiStream,
    GeminiCountTokens,
    GeminiEmbed,
    GeminiBatchEmbed,
    GeminiCache,
    VertexGenerate,
    VertexStream,
    VertexCountTokens,
    VertexPredict,
    VertexCache,
    VertexClaude,
    VertexClaudeStream,
    VertexClaudeCountTokens,
    OauthToken,
    AnthropicMessages,
    AnthropicCountTokens,
    OpenAiChat,
    OpenAiResponses,
    OpenAiEmbeddings,
    OpenAiModels,
    GeminiModels,
    VertexModels,
    AnthropicModels,
    Unknown,
}

impl Route {
    pub const ALL: [Route; 25] = [
        Route::GeminiGenerate,
        Route::GeminiStream,
        Route::GeminiCountTokens,
        Route::GeminiEmbed,
        Route::GeminiBatchEmbed,
        Route::GeminiCache,
        Route::VertexGenerate,
        Route::VertexStream,
        Route::VertexCountTokens,
        Route::VertexPredict,
        Route::VertexCache,
        Route::VertexClaude,
        Route::VertexClaudeStream,
        Route::VertexClaudeCountTokens,
        Route::OauthToken,
        Route::AnthropicMessages,
        Route::AnthropicCountTokens,
        Route::OpenAiChat,
        Route::OpenAiResponses,
        Route::OpenAiEmbeddings,
        Route::OpenAiModels,
        Route::GeminiModels,
        Route::VertexModels,
        Route::AnthropicModels,
        Route::Unknown,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Route::GeminiGenerate => "gemini.generate",
            Route::GeminiStream => "gemini.stream",
            Route::GeminiCountTokens => "gemini.count_tokens",
            Route::GeminiEmbed => "gemini.embed",
            Route::GeminiBatchEmbed => "gemini.batch_embed",
            Route::GeminiCache => "gemini.cache",
            Route::VertexGenerate => "vertex.generate",
            Route::VertexStream => "vertex.stream",
            Route::VertexCountTokens => "vertex.count_tokens",
            Route::VertexPredict => "vertex.predict",
            Route::VertexCache => "vertex.cache",
            Route::VertexClaude => "vertex.claude",
            Route::VertexClaudeStream => "vertex.claude_stream",
            Route::VertexClaudeCountTokens => "vertex.claude_count_tokens",
            Route::OauthToken => "oauth.token",
            Route::AnthropicMessages => "anthropic.messages",
            Route::AnthropicCountTokens => "anthropic.count_tokens",
            Route::OpenAiChat => "openai.chat",
            Route::OpenAiResponses => "openai.responses",
            Route::OpenAiEmbeddings => "openai.embeddings",
            Route::OpenAiModels => "openai.models",
            Route::GeminiModels => "gemini.models",
            Route::VertexModels => "vertex.models",
            Route::AnthropicModels => "anthropic.models",
            Route::Unknown => "unknown",
        }
    }

    fn index(self) -> usize {
        Route::ALL
            .iter()
            .position(|r| *r == self)
            .unwrap_or(Route::ALL.len() - 1)
    }
}

/// Lock-free counters.
pub struct Stats {
    total: AtomicU64,
    by_route: [AtomicU64; Route::ALL.len()],
    pub tokens_issued: AtomicU64,
    pub faults_injected: AtomicU64,
    pub vertex_flex: AtomicU64,
    pub vertex_priority: AtomicU64,
    /// TLS connections accepted, and those whose handshake failed (`tls.rs`).
    pub tls_handshakes: AtomicU64,
    pub tls_handshakes_failed: AtomicU64,
    /// TCP connections accepted, and the calls that came over HTTP/2.
    pub connections: AtomicU64,
    pub http2_requests: AtomicU64,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            total: AtomicU64::new(0),
            by_route: std::array::from_fn(|_| AtomicU64::new(0)),
            tokens_issued: AtomicU64::new(0),
            faults_injected: AtomicU64::new(0),
            vertex_flex: AtomicU64::new(0),
            vertex_priority: AtomicU64::new(0),
            tls_handshakes: AtomicU64::new(0),
            tls_handshakes_failed: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            http2_requests: AtomicU64::new(0),
        }
    }
}

impl Stats {
    pub fn count(&self, route: Route) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.by_route.get(route.index()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn render(&self, recorded: usize, dropped: u64, recording: bool) -> Value {
        let mut by = Map::new();
        for r in Route::ALL {
            let n = self
                .by_route
                .get(r.index())
                .map(|c| c.load(Ordering::Relaxed))
                .unwrap_or(0);
            by.insert(r.name().into(), Value::from(n));
        }
        let mut m = Map::new();
        m.insert(
            "requests_total".into(),
            self.total.load(Ordering::Relaxed).into(),
        );
        m.insert("by_route".into(), Value::Object(by));
        let counters = [
            ("tokens_issued", &self.tokens_issued),
            ("faults_injected", &self.faults_injected),
            ("vertex_flex_requests", &self.vertex_flex),
            ("vertex_priority_requests", &self.vertex_priority),
            ("tls_handshakes", &self.tls_handshakes),
            ("tls_handshakes_failed", &self.tls_handshakes_failed),
            ("connections", &self.connections),
            ("http2_requests", &self.http2_requests),
        ];
        for (name, counter) in counters {
            m.insert(name.into(), counter.load(Ordering::Relaxed).into());
        }
        m.insert("recording".into(), recording.into());
        m.insert("recorded".into(), recorded.into());
        m.insert("recorded_dropped".into(), dropped.into());
        Value::Object(m)
    }

    pub fn reset(&self) {
        self.total.store(0, Ordering::Relaxed);
        for c in &self.by_route {
            c.store(0, Ordering::Relaxed);
        }
        self.faults_injected.store(0, Ordering::Relaxed);
        self.vertex_flex.store(0, Ordering::Relaxed);
        self.vertex_priority.store(0, Ordering::Relaxed);
        self.tls_handshakes.store(0, Ordering::Relaxed);
        self.tls_handshakes_failed.store(0, Ordering::Relaxed);
        self.connections.store(0, Ordering::Relaxed);
        self.http2_requests.store(0, Ordering::Relaxed);
        // tokens_issued is kept: issued tokens stay valid across a reset.
    }
}

struct Entry {
    seq: u64,
    ts_ms: i64,
    route: Route,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Bytes,
}

pub struct Recorder {
    enabled: bool,
    max: usize,
    seq: AtomicU64,
    dropped: AtomicU64,
    log: Mutex<VecDeque<Entry>>,
}

impl Recorder {
    pub fn new(enabled: bool, max: usize) -> Recorder {
        Recorder {
            enabled,
            max: max.max(1),
            seq: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            log: Mutex::new(VecDeque::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn push(
        &self,
        route: Route,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) {
        if !self.enabled {
            return;
        }
        let mut hs: Vec<(String, String)> = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
            if let Some(existing) = hs.iter_mut().find(|(n, _)| n == name.as_str()) {
                existing.1.push_str(", ");
                existing.1.push_str(&v);
            } else {
                hs.push((name.as_str().to_owned(), v));
            }
        }
        let entry = Entry {
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            ts_ms: chrono::Utc::now().timestamp_millis(),
            route,
            method: method.clone(),
            path: path.to_owned(),
            headers: hs,
            // Copy: the received `Bytes` may be a view into a large connection buffer.
            body: Bytes::copy_from_slice(body),
        };
        if let Ok(mut log) = self.log.lock() {
            if log.len() >= self.max {
                log.pop_front();
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            log.push_back(entry);
        }
    }

    pub fn len(&self) -> usize {
        self.log.lock().map(|l| l.len()).unwrap_or(0)
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn clear(&self) -> usize {
        self.log
            .lock()
            .map(|mut l| {
                let n = l.len();
                l.clear();
                n
            })
            .unwrap_or(0)
    }

    /// The log as JSON objects, optionally only one route kind.
    pub fn render(&self, route_filter: Option<&str>) -> Value {
        let Ok(log) = self.log.lock() else {
            return Value::Array(Vec::new());
        };
        let mut out = Vec::with_capacity(log.len());
        for e in log.iter() {
            if route_filter.is_some_and(|r| r != e.route.name()) {
                continue;
            }
            let mut headers = Map::new();
            for (n, v) in &e.headers {
                headers.insert(n.clone(), Value::String(v.clone()));
            }
            let body = if e.body.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice::<Value>(&e.body).unwrap_or_else(|_| {
                    Value::String(String::from_utf8_lossy(&e.body).into_owned())
                })
            };
            let mut m = Map::new();
            m.insert("seq".into(), e.seq.into());
            m.insert("ts_ms".into(), e.ts_ms.into());
            m.insert("route".into(), e.route.name().into());
            m.insert("method".into(), e.method.as_str().into());
            m.insert("path".into(), e.path.clone().into());
            m.insert("headers".into(), Value::Object(headers));
            m.insert("body".into(), body);
            out.push(Value::Object(m));
        }
        Value::Array(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn records_and_bounds() {
        let r = Recorder::new(true, 2);
        let mut h = HeaderMap::new();
        h.append("x-a", "1".parse().unwrap());
        h.append("x-a", "2".parse().unwrap());
        for i in 0..3 {
            r.push(
                Route::OpenAiChat,
                &Method::POST,
                "/v1/chat/completions",
                &h,
                &Bytes::from(format!("{{\"i\":{i}}}")),
            );
        }
        assert_eq!(r.len(), 2);
        assert_eq!(r.dropped(), 1);
        let v = r.render(None);
        assert_eq!(v[0]["body"]["i"], 1);
        assert_eq!(v[0]["headers"]["x-a"], "1, 2");
        assert_eq!(
            r.render(Some("gemini.generate")).as_array().unwrap().len(),
            0
        );
        let off = Recorder::new(false, 10);
        off.push(Route::Unknown, &Method::GET, "/", &h, &Bytes::new());
        assert_eq!(off.len(), 0);
    }

    #[test]
    fn non_json_body_is_a_string() {
        let r = Recorder::new(true, 10);
        r.push(
            Route::OauthToken,
            &Method::POST,
            "/token",
            &HeaderMap::new(),
            &Bytes::from_static(b"a=b"),
        );
        assert_eq!(r.render(None)[0]["body"], "a=b");
    }
}
