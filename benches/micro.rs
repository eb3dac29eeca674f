//! Criterion micro-benchmarks of the per-request CPU the gateway adds, without I/O. Run with
//! `make bench` (or `cargo bench --bench micro`; `-- door` for the doors alone); numbers are
//! printed, never asserted. Throughputs are in bytes of what is read: the client's body, the
//! upstream's answer or stream.
//!
//! Per family, on the chat door:
//! - `request_translation/{family}/{small,100KB}`: the chat body parsed and planned;
//! - `answer_translation/{family}`, `sse_translation/{family}`: an upstream answer, and an
//!   upstream stream fed 512 bytes at a time, rendered as chat completions;
//! - `embeddings_100x768/join/{float,base64}`: a 100-input embeddings answer joined.
//!
//! Per front door (`chat`, `messages`, `responses`, `embeddings`), the same conversation in
//! each door's wire format (one question, or ~100 KB of 40 turns):
//! - `door_request/{door}/{family}/{small,100KB}`: admission end to end, as the proxy calls it
//!   — the head (endpoint, key among 10,000), then the body: the door's parse onto the request
//!   model, model, limits, gates with their reservation, route, plan. Gemini on every door;
//!   also Claude and an OpenAI-compatible model on the chat door, and Claude (passed through
//!   natively) on the Messages door;
//! - `door_answer/{door}`: a buffered Gemini answer rendered in the door's shape (embeddings:
//!   a two-input batch joined);
//! - `door_stream/{door}/{small,100KB}`: a Gemini SSE stream (the fixture, and its text chunks
//!   repeated to ~100 KB) translated into the door's stream events, 512 bytes at a time (the
//!   chat door's `small` is `sse_translation/gemini`).
//!
//! And: the cost formula, key lookup among 10,000 keys.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use chrono::{DateTime, Utc};
use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, Criterion, Throughput,
};
use tollgate::admission::{Admission, HeadDecision, RequestHead};
use tollgate::api::limits::Limits;
use tollgate::api::{Door, Operation, RawRequest, Usage};
use tollgate::auth::{mint_secret, KeyCache, MintedKey};
use tollgate::billing::cost::cost;
use tollgate::billing::gates::Accounts;
use tollgate::catalog::{Family, Snapshot};
use tollgate::config::ProvidersConf;
use tollgate::doors::bridged;
use tollgate::doors::forward::AnthropicHeaders;
use tollgate::money::usd;
use tollgate::providers::{
    adapter_for, Adapter, Credentials, FanOut, Plan, ResponseCx, Secret, Target,
};
use tollgate::store::{ApiKey, CatalogRows};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
const CATALOG: &str = include_str!("../conf/catalog.yaml");
const UPSTREAM: &str = "http://127.0.0.1:18000";

/// One chat model per family, as the gateway's own catalog has them (plus an OpenAI-compatible
/// one, which the default catalog lacks).
const MODELS: [(&str, Family); 3] = [
    ("google/gemini-2.5-flash-lite", Family::Gemini),
    ("anthropic/claude-haiku-4-5", Family::Anthropic),
    ("acme/llama", Family::OpenAiCompat),
];

/// The read-mostly state admission consults, every provider pointed at loopback.
struct World {
    catalog: Snapshot,
    keys: KeyCache,
    accounts: Accounts,
    credentials: Credentials,
    limits: Limits,
    minted: MintedKey,
    now: DateTime<Utc>,
}

impl World {
    fn new(extra_keys: usize) -> World {
        let mut rows: CatalogRows = serde_yaml::from_str(CATALOG).unwrap();
        let acme: CatalogRows = serde_yaml::from_str(
            "models:\n  - {id: acme/llama, provider: acme, family: openai, kind: chat, \
             upstream_model: llama-3, input_price: 1, output_price: 2}\n  \
             - {id: bench/embed, provider: google, family: gemini, kind: embedding, \
             upstream_model: text-embedding-004, profile: embedding, input_price: 0.025, \
             output_price: 0}\n\
             routes:\n  - {model_id: acme/llama, kind: openai, priority: 0}\n  \
             - {model_id: bench/embed, kind: gemini-api, priority: 0}\n",
        )
        .unwrap();
        rows.models.extend(acme.models);
        rows.routes.extend(acme.routes);
        let providers: ProvidersConf = serde_yaml::from_str(&format!(
            "openai: {{base_url: '{UPSTREAM}/v1', api_key_env: K}}\n\
             gemini: {{base_url: '{UPSTREAM}', api_key_env: K}}\n\
             anthropic: {{base_url: '{UPSTREAM}', api_key_env: K}}\n"
        ))
        .unwrap();
        let addr: SocketAddr = "127.0.0.1:18000".parse().unwrap();
        let addrs = HashMap::from([(("127.0.0.1".to_owned(), 18000), addr)]);
        let catalog = Snapshot::build(&rows, &providers, &addrs);
        for (id, _) in MODELS {
            assert!(catalog.model(id).is_some(), "{id} missing from the catalog");
        }
        let now = Utc::now();
        let minted = mint_secret("sk-tg-");
        let mut keys: Vec<ApiKey> = (0..extra_keys)
            .map(|i| api_key(&format!("key_{i}"), &mint_secret("sk-tg-"), now))
            .collect();
        keys.push(api_key("key_bench", &minted, now));
        let cache = KeyCache::default();
        cache.replace_all(keys);
        let accounts = Accounts::default();
        accounts.set_balance("ws_bench", usd(1_000_000));
        let credentials = Credentials {
            openai: Some(Secret::new("sk-openai")),
            gemini: Some(Secret::new("gemini-key")),
            anthropic: Some(Secret::new("sk-ant")),
            ..Credentials::default()
        };
        World {
            catalog,
            keys: cache,
            accounts,
            credentials,
            limits: Limits::default(),
            minted,
            now,
        }
    }

    /// Admission as the proxy builds it for a request through `front`.
    fn admission(&self, front: Front) -> Admission<'_> {
        let anthropic = match front.door() {
            Door::Messages => AnthropicHeaders {
                version: Some("2023-06-01".into()),
                betas: String::new(),
            },
            Door::OpenAi | Door::Responses => AnthropicHeaders::default(),
        };
        Admission {
            catalog: &self.catalog,
            keys: &self.keys,
            accounts: &self.accounts,
            credentials: &self.credentials,
            strict_credit: false,
            waive_empty_failures: false,
            max_cache_ttl: tollgate::providers::DEFAULT_MAX_CACHE_TTL,
            limits: &self.limits,
            route_turn: 0,
            now: Instant::now(),
            request_id: None,
            door: front.door(),
            anthropic,
            anthropic_betas: &[],
            previous: None,
        }
    }
}

fn api_key(id: &str, minted: &MintedKey, now: DateTime<Utc>) -> ApiKey {
    ApiKey {
        id: id.into(),
        workspace_id: "ws_bench".into(),
        name: None,
        secret_hash: minted.hash_hex.clone(),
        hint: minted.hint.clone(),
        created_at: now - chrono::Duration::days(1),
        expires_at: None,
        revoked_at: None,
        spend_limit: None,
        limit_reset: None,
        replaced_by: None,
        allowed_models: Vec::new(),
    }
}

/// The front doors: each reads its own wire format onto the one request model and renders
/// answers and stream events in its own shapes. Every door is benched on the same
/// [`Conversation`], written in its format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Front {
    /// OpenAI's Chat Completions (`/v1/chat/completions`).
    Chat,
    /// Anthropic's Messages (`/v1/messages`).
    Messages,
    /// OpenAI's Responses (`/v1/responses`).
    Responses,
    /// OpenAI's Embeddings (`/v1/embeddings`): the turns' texts are its inputs.
    Embeddings,
}

impl Front {
    const ALL: [Front; 4] = [
        Front::Chat,
        Front::Messages,
        Front::Responses,
        Front::Embeddings,
    ];
    /// The doors that answer chat: a buffered answer or a stream of events.
    const CHAT: [Front; 3] = [Front::Chat, Front::Messages, Front::Responses];

    fn name(self) -> &'static str {
        match self {
            Front::Chat => "chat",
            Front::Messages => "messages",
            Front::Responses => "responses",
            Front::Embeddings => "embeddings",
        }
    }

    fn door(self) -> Door {
        match self {
            Front::Chat | Front::Embeddings => Door::OpenAi,
            Front::Messages => Door::Messages,
            Front::Responses => Door::Responses,
        }
    }

    fn path(self) -> &'static str {
        match self {
            Front::Chat => "/v1/chat/completions",
            Front::Messages => "/v1/messages",
            Front::Responses => "/v1/responses",
            Front::Embeddings => "/v1/embeddings",
        }
    }

    /// The models the door's requests are benched on: Gemini on every door; on the chat door
    /// also Claude and an OpenAI-compatible model (each family's own adapter), on the Messages
    /// door also Claude (passed through natively).
    fn models(self) -> &'static [&'static str] {
        match self {
            Front::Chat => &[MODELS[0].0, MODELS[1].0, MODELS[2].0],
            Front::Messages => &[MODELS[0].0, MODELS[1].0],
            Front::Responses => &[MODELS[0].0],
            Front::Embeddings => &["bench/embed"],
        }
    }

    /// `convo` asked of `model` in this door's wire format. The Responses body has
    /// `store: false`, as Codex sends it.
    fn body(self, model: &str, convo: &Conversation) -> Vec<u8> {
        use serde_json::{json, Value};
        let turns = || {
            convo.turns.iter().enumerate().map(|(i, text)| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": text})
            })
        };
        let mut body = match self {
            Front::Chat => {
                let system = json!({"role": "system", "content": convo.system});
                let messages: Vec<Value> = std::iter::once(system).chain(turns()).collect();
                json!({"model": model, "messages": messages, "max_tokens": convo.max_tokens})
            }
            Front::Messages => json!({
                "model": model,
                "system": convo.system,
                "messages": turns().collect::<Vec<_>>(),
                "max_tokens": convo.max_tokens
            }),
            Front::Responses => json!({
                "model": model,
                "instructions": convo.system,
                "input": turns().collect::<Vec<_>>(),
                "max_output_tokens": convo.max_tokens,
                "store": false
            }),
            Front::Embeddings => json!({"model": model, "input": convo.turns}),
        };
        if let (Some(t), false) = (convo.temperature, self == Front::Embeddings) {
            body["temperature"] = json!(t);
        }
        serde_json::to_vec(&body).unwrap()
    }

    /// The answer's context as admission makes it for this door (the id's prefix is the
    /// door's).
    fn cx(self) -> ResponseCx {
        let (id, op) = match self {
            Front::Chat => ("chatcmpl-bench", Operation::Chat),
            Front::Messages => ("msg_bench", Operation::Chat),
            Front::Responses => ("resp_bench", Operation::Chat),
            Front::Embeddings => ("emb-bench", Operation::Embeddings),
        };
        ResponseCx {
            id: Arc::from(id),
            model_id: Arc::from("acme/bench"),
            op,
            created: 1,
            exclude_reasoning: false,
        }
    }
}

/// One conversation, whatever the door: a system prompt, then turns alternating user and
/// assistant, starting with the user.
struct Conversation {
    system: &'static str,
    turns: Vec<String>,
    max_tokens: u32,
    temperature: Option<f64>,
}

impl Conversation {
    /// A one-question chat, as most requests are.
    fn small() -> Conversation {
        Conversation {
            system: "You are terse.",
            turns: vec!["Say hello in 32 words.".into()],
            max_tokens: 64,
            temperature: Some(0.2),
        }
    }

    /// About 100 KB in any door's format: 40 turns of ~2.5 KB text (no tools: the Claude
    /// adapter refuses them on the chat door).
    fn large() -> Conversation {
        let turn =
            "The quick brown fox jumps over the lazy dog; \"quoted\" and\nnew lines. ".repeat(36);
        Conversation {
            system: "You are terse.",
            turns: (0..40).map(|i| format!("{i}: {turn}")).collect(),
            max_tokens: 1024,
            temperature: None,
        }
    }

    /// Both, with their size names.
    fn sizes() -> [(&'static str, Conversation); 2] {
        [
            ("small", Conversation::small()),
            ("100KB", Conversation::large()),
        ]
    }
}

/// Parse once and plan for the family: the request-side work per request.
fn translation(c: &mut Criterion) {
    let world = World::new(0);
    let mut group = c.benchmark_group("request_translation");
    for (id, family) in MODELS {
        let model = world.catalog.model(id).unwrap().clone();
        let adapter = adapter_for(family);
        for (size, convo) in Conversation::sizes() {
            let body = Front::Chat.body(id, &convo);
            group.throughput(Throughput::Bytes(body.len() as u64));
            group.bench_function(format!("{}/{size}", family.as_str()), |b| {
                b.iter(|| {
                    let req = RawRequest::parse(black_box(&body), Operation::Chat).unwrap();
                    let target = Target {
                        model: &model,
                        route: &model.routes[0],
                        op: Operation::Chat,
                        stream: req.stream,
                        max_cache_ttl: tollgate::providers::DEFAULT_MAX_CACHE_TTL,
                        forward: &[],
                    };
                    adapter.plan(&req, &target, &world.credentials).unwrap()
                })
            });
        }
    }
    group.finish();
}

/// The Gemini answers the answer-side benches translate.
const GEMINI_ANSWER: &str = "gemini-generate-thinking-2.5-flash-devapi.json";
const GEMINI_STREAM: &str = "gemini-stream-thinking-2.5-pro-devapi.sse";

fn fixture(file: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}{file}")).unwrap()
}

/// A whole upstream answer through `adapter`, as a buffered request's is.
fn bench_buffered(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    adapter: &dyn Adapter,
    body: &[u8],
    cx: &ResponseCx,
) {
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function(name, |b| {
        b.iter(|| adapter.translate_buffered(black_box(body), cx).unwrap())
    });
}

/// An upstream stream through a fresh translator of `adapter`, read 512 bytes at a time, then
/// finished.
fn bench_stream(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    adapter: &dyn Adapter,
    stream: &[u8],
    cx: &ResponseCx,
) {
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function(name, |b| {
        b.iter_batched_ref(
            || {
                (
                    adapter.stream_translator(cx.clone()),
                    BytesMut::with_capacity(8192),
                )
            },
            |(tr, out)| {
                for piece in stream.chunks(512) {
                    tr.feed(piece, out);
                }
                tr.finish(out);
            },
            BatchSize::SmallInput,
        )
    });
}

/// Upstream answers to OpenAI format: whole bodies, and streams read 512 bytes at a time.
fn answers(c: &mut Criterion) {
    let cx = Front::Chat.cx();
    let buffered = [
        (Family::Gemini, GEMINI_ANSWER),
        (Family::Anthropic, "anthropic-message-thinking.json"),
        (Family::OpenAiCompat, "openai-chat-completion.json"),
    ];
    let mut group = c.benchmark_group("answer_translation");
    for (family, file) in buffered {
        let body = fixture(file);
        bench_buffered(&mut group, family.as_str(), adapter_for(family), &body, &cx);
    }
    group.finish();

    let streams = [
        (Family::Gemini, GEMINI_STREAM),
        (Family::Anthropic, "anthropic-stream-thinking.sse"),
        (
            Family::OpenAiCompat,
            "openai-chat-stream-tool-call-usage.sse",
        ),
    ];
    let mut group = c.benchmark_group("sse_translation");
    for (family, file) in streams {
        let stream = fixture(file);
        bench_stream(
            &mut group,
            family.as_str(),
            adapter_for(family),
            &stream,
            &cx,
        );
    }
    group.finish();
}

/// The embeddings `body`'s fan-out on the Gemini Developer API (`bench/embed`).
fn embed_fan_out(world: &World, body: &[u8]) -> FanOut {
    let model = world.catalog.model("bench/embed").unwrap();
    let req = RawRequest::parse(body, Operation::Embeddings).unwrap();
    let target = Target {
        model,
        route: &model.routes[0],
        op: Operation::Embeddings,
        stream: false,
        max_cache_ttl: tollgate::providers::DEFAULT_MAX_CACHE_TTL,
        forward: &[],
    };
    match adapter_for(model.family)
        .plan(&req, &target, &world.credentials)
        .unwrap()
    {
        Plan::FanOut(fan_out) => fan_out,
        Plan::Proxy { .. } => panic!("embeddings are a fan-out"),
    }
}

/// Embeddings of 100 inputs (768 dimensions, Gemini Developer API): the join of the upstream's
/// answer into OpenAI's `list` — 76,800 numbers read as `f32` and written back (`float`) or as
/// base64.
fn embeddings(c: &mut Criterion) {
    let world = World::new(0);
    let inputs: Vec<String> = (0..100)
        .map(|i| format!("{i}: a sentence to embed"))
        .collect();
    // Numbers as Google writes them: doubles with 17 significant digits.
    let values: Vec<f64> = (0..768)
        .map(|i| (f64::from(i) * 0.618_033_988_749_894_9).sin() / 7.0)
        .collect();
    let answer = serde_json::json!({
        "embeddings": (0..100).map(|_| serde_json::json!({"values": values})).collect::<Vec<_>>()
    })
    .to_string();
    let answer = bytes::Bytes::from(answer);
    let cx = Front::Embeddings.cx();
    let mut group = c.benchmark_group("embeddings_100x768");
    group.throughput(Throughput::Bytes(answer.len() as u64));
    for format in ["float", "base64"] {
        let body =
            serde_json::json!({"model": "bench/embed", "input": inputs, "encoding_format": format})
                .to_string()
                .into_bytes();
        group.bench_function(format!("join/{format}"), |b| {
            b.iter_batched(
                || embed_fan_out(&world, &body),
                |fan_out| (fan_out.join)(std::slice::from_ref(&answer), &cx).unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

/// Every priced bucket at once, at the long-context tier.
fn cost_formula(c: &mut Criterion) {
    let world = World::new(0);
    let model = world.catalog.model("google/gemini-2.5-pro").unwrap();
    let usage = Usage {
        input: 240_000,
        audio_input: 1_000,
        cache_read: 12_000,
        cache_write: 4_000,
        cache_write_1h: 0,
        output: 8_000,
        reasoning: 3_000,
        cache_storage_token_seconds: 4_000 * 3_600,
    };
    let rates = model.pricing.rates_for(usage.prompt_tokens());
    c.bench_function("cost_formula", |b| {
        b.iter(|| cost(black_box(&usage), rates).unwrap())
    });
}

/// SHA-256 of the token and a hash-map probe among 10,000 keys.
fn key_lookup(c: &mut Criterion) {
    let world = World::new(10_000);
    let token = world.minted.secret.clone();
    c.bench_function("key_lookup/hit", |b| {
        b.iter(|| {
            world
                .keys
                .authenticate(black_box(&token), world.now)
                .unwrap()
        })
    });
    let stranger = mint_secret("sk-tg-").secret;
    c.bench_function("key_lookup/miss", |b| {
        b.iter(|| {
            world
                .keys
                .authenticate(black_box(&stranger), world.now)
                .is_err()
        })
    });
}

/// What the proxy calls per request, on every door: the head (endpoint, key among 10,000),
/// then the body (the door's parse onto the request model, model, limits, credit and window
/// gates with their reservation, route, plan). The reservation is released when the decision
/// drops, as when a request ends. `door_request/{door}/{family}/{size}`, in bytes of the
/// client's body.
fn door_request(c: &mut Criterion) {
    let world = World::new(10_000);
    let authorization = format!("Bearer {}", world.minted.secret);
    let sizes = Conversation::sizes();
    let mut group = c.benchmark_group("door_request");
    for front in Front::ALL {
        for &id in front.models() {
            let family = world.catalog.model(id).unwrap().family;
            for (size, convo) in &sizes {
                let body = front.body(id, convo);
                if *size == "100KB" {
                    assert!((95_000..110_000).contains(&body.len()), "{}", body.len());
                }
                let admit = || {
                    let admission = world.admission(front);
                    let head = RequestHead {
                        method: &http::Method::POST,
                        path: front.path(),
                        query: None,
                        authorization: Some(authorization.as_bytes()),
                        api_key: None,
                        header_count: 6,
                        header_bytes: 240,
                    };
                    let HeadDecision::ReadBody { op, key } =
                        admission.head(&head, world.now).unwrap()
                    else {
                        unreachable!("a {} request reads its body", front.name())
                    };
                    admission
                        .admit(key, op, black_box(&body), world.now)
                        .unwrap()
                };
                admit(); // a refusal panics here, not in the measurement
                group.throughput(Throughput::Bytes(body.len() as u64));
                let name = format!("{}/{}/{size}", front.name(), family.as_str());
                group.bench_function(name, |b| b.iter(&admit));
            }
        }
    }
    group.finish();
}

/// A buffered Gemini answer rendered in each door's shape: `door_answer/{door}`, in bytes of
/// the upstream's answer. Embeddings: the two-input batch of the fixture joined into OpenAI's
/// `list`.
fn door_answer(c: &mut Criterion) {
    let world = World::new(0);
    let body = fixture(GEMINI_ANSWER);
    let mut group = c.benchmark_group("door_answer");
    for front in Front::CHAT {
        let adapter = bridged(front.door(), Family::Gemini);
        bench_buffered(&mut group, front.name(), adapter, &body, &front.cx());
    }
    let request = serde_json::json!({"model": "bench/embed", "input": ["hello", "world"]});
    let request = serde_json::to_vec(&request).unwrap();
    let answer = bytes::Bytes::from(fixture("gemini-batch-embed-contents.json"));
    let cx = Front::Embeddings.cx();
    group.throughput(Throughput::Bytes(answer.len() as u64));
    group.bench_function(Front::Embeddings.name(), |b| {
        b.iter_batched(
            || embed_fan_out(&world, &request),
            |fan_out| (fan_out.join)(std::slice::from_ref(&answer), &cx).unwrap(),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// `fixture` (an SSE stream) made about `size` bytes long: its text chunks (neither thought,
/// signature nor finish) repeated after the last of them, before the closing events. Usage
/// counts in the repeats are stale; only the final chunk's are billed.
fn long_stream(fixture: &[u8], size: usize) -> Vec<u8> {
    let text = String::from_utf8(fixture.to_vec()).unwrap();
    let events: Vec<&str> = text.split_inclusive("\r\n\r\n").collect();
    let content = |e: &&str| {
        !["\"thought\"", "thoughtSignature", "finishReason"]
            .iter()
            .any(|marker| e.contains(marker))
    };
    let last = events.iter().rposition(&content).unwrap();
    let repeated: Vec<&str> = events[..=last].iter().copied().filter(content).collect();
    let mut out: String = events[..=last].concat();
    let tail: String = events[last + 1..].concat();
    for event in repeated.iter().cycle() {
        if out.len() + tail.len() >= size {
            break;
        }
        out.push_str(event);
    }
    out.push_str(&tail);
    out.into_bytes()
}

/// A Gemini SSE stream translated into each door's stream events, fed 512 bytes at a time:
/// `door_stream/{door}/{size}`, the fixture as it is and lengthened to about 100 KB, in bytes
/// of the upstream's stream.
fn door_stream(c: &mut Criterion) {
    let small = fixture(GEMINI_STREAM);
    let long = long_stream(&small, 100_000);
    let mut group = c.benchmark_group("door_stream");
    for front in Front::CHAT {
        let adapter = bridged(front.door(), Family::Gemini);
        for (size, stream) in [("small", &small), ("100KB", &long)] {
            let name = format!("{}/{size}", front.name());
            bench_stream(&mut group, &name, adapter, stream, &front.cx());
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    translation,
    answers,
    embeddings,
    cost_formula,
    key_lookup,
    door_request,
    door_answer,
    door_stream
);
criterion_main!(benches);
