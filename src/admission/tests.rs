//! Every branch of admission and of the billing outcome, without a socket.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use chrono::{TimeZone, Utc};

use super::outcome::{billed, settle, usage_record_for, Ending, Produced, Timings, Traced};
use super::*;
use crate::api::error::Blame;
use crate::api::Usage;
use crate::auth::{mint_secret, MintedKey};
use crate::config::ProvidersConf;
use crate::money::{usd, Price, Usd};
use crate::store::CatalogRows;
use crate::store::{LimitReset, UsageOutcome, UsageRecord, UsageSource};

const HOUR: Duration = Duration::from_secs(3_600);

fn produced(reported: Usage, delivered: u64) -> Produced {
    Produced {
        reported,
        delivered,
        cache_created: None,
        attempts: 1,
    }
}

const CATALOG: &str = r#"
profiles:
  - {name: g, spec: {forward: [temperature]}}
models:
  - {id: acme/llama, provider: acme, family: openai, kind: chat, upstream_model: llama-3,
     input_price: 1, output_price: 2}
  - {id: acme/embed, provider: acme, family: openai, kind: embedding, upstream_model: e-1,
     input_price: 1, output_price: 0}
  - {id: acme/down, provider: acme, family: openai, kind: chat, upstream_model: d,
     input_price: 1, output_price: 1}
  - {id: acme/twin, provider: acme, family: openai, kind: chat, upstream_model: t,
     input_price: 1, output_price: 1}
  - {id: acme/claude, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-x,
     profile: g, input_price: 3, output_price: 15, max_output_tokens: 64000}
  - {id: acme/gem, provider: google, family: gemini, kind: chat, upstream_model: gem-x, profile: g,
     input_price: 1, output_price: 2}
routes:
  - {model_id: acme/claude, kind: anthropic, base_url: "http://127.0.0.1:8"}
  - {model_id: acme/gem, kind: gemini-api, base_url: "http://127.0.0.1:8"}
  - {model_id: acme/llama, kind: openai, base_url: "http://127.0.0.1:9/v1", priority: 1}
  - {model_id: acme/llama, kind: openai, base_url: "http://127.0.0.1:8/v1", priority: 2}
  - {model_id: acme/embed, kind: openai, base_url: "http://127.0.0.1:8/v1"}
  - {model_id: acme/down, kind: openai, base_url: "http://127.0.0.1:9/v1"}
  - {model_id: acme/twin, kind: openai, base_url: "http://127.0.0.1:8/a", priority: 1}
  - {model_id: acme/twin, kind: openai, base_url: "http://127.0.0.1:8/b", priority: 2}
"#;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 24, 12, 0, 0).unwrap()
}

/// The test world: a catalog where only port 8 resolved (`acme/twin` has two routes there),
/// one workspace, one key. Other rooms' tests admit requests through it too.
pub(crate) struct World {
    strict: bool,
    limits: Limits,
    catalog: Snapshot,
    keys: KeyCache,
    accounts: Accounts,
    credentials: Credentials,
    minted: MintedKey,
}

impl World {
    pub(crate) fn new() -> World {
        Self::with_key(|_| {})
    }

    fn with_key(edit: impl FnOnce(&mut ApiKey)) -> World {
        let rows: CatalogRows = serde_yaml::from_str(CATALOG).unwrap();
        let addr: SocketAddr = "127.0.0.1:8".parse().unwrap();
        let addrs = HashMap::from([(("127.0.0.1".to_owned(), 8), addr)]);
        let catalog = Snapshot::build(&rows, &ProvidersConf::default(), &addrs);
        let minted = mint_secret("sk-tg-");
        let mut key = ApiKey {
            id: "key_1".into(),
            workspace_id: "ws_1".into(),
            name: None,
            secret_hash: minted.hash_hex.clone(),
            hint: minted.hint.clone(),
            created_at: now() - chrono::Duration::days(1),
            expires_at: None,
            revoked_at: None,
            spend_limit: None,
            limit_reset: None,
            replaced_by: None,
            allowed_models: Vec::new(),
        };
        edit(&mut key);
        let keys = KeyCache::default();
        keys.replace_all(vec![key]);
        let accounts = Accounts::default();
        accounts.set_balance("ws_1", usd(10));
        World {
            strict: false,
            limits: Limits::default(),
            catalog,
            keys,
            accounts,
            credentials: Credentials {
                anthropic: Some(crate::providers::Secret::new("sec-anthropic-dummy")),
                gemini: Some(crate::providers::Secret::new("sec-gemini-dummy")),
                anthropic_version: "2023-06-01".into(),
                ..Credentials::default()
            },
            minted,
        }
    }

    pub(crate) fn admission(&self) -> Admission<'_> {
        Admission {
            catalog: &self.catalog,
            keys: &self.keys,
            accounts: &self.accounts,
            credentials: &self.credentials,
            strict_credit: self.strict,
            waive_empty_failures: false,
            max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
            limits: &self.limits,
            route_turn: 0,
            now: std::time::Instant::now(),
            request_id: None,
            door: Door::OpenAi,
            anthropic: AnthropicHeaders::default(),
            anthropic_betas: &[],
            previous: None,
        }
    }

    /// The admission of a request to `path` (its door decided by the path).
    fn admission_at(&self, path: &str) -> Admission<'_> {
        Admission {
            door: door_of(path),
            ..self.admission()
        }
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.minted.secret)
    }

    fn head(
        &self,
        method: http::Method,
        path: &str,
        auth: Option<&str>,
    ) -> Result<HeadDecision, GatewayError> {
        self.head_with(method, path, auth, None)
    }

    /// [`head`](Self::head) with an `x-api-key` header too.
    fn head_with(
        &self,
        method: http::Method,
        path: &str,
        auth: Option<&str>,
        api_key: Option<&str>,
    ) -> Result<HeadDecision, GatewayError> {
        let (path, query) = match path.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path, None),
        };
        let head = RequestHead {
            method: &method,
            path,
            query,
            authorization: auth.map(str::as_bytes),
            api_key: api_key.map(str::as_bytes),
            header_count: 3,
            header_bytes: 120,
        };
        self.admission_at(path).head(&head, now())
    }

    /// Head and body of an authenticated POST to `path`.
    pub(crate) fn post(&self, path: &str, body: &str) -> Result<Decision, GatewayError> {
        let bearer = self.bearer();
        match self.head(http::Method::POST, path, Some(&bearer))? {
            HeadDecision::ReadBody { op, key } => {
                self.admission_at(path)
                    .admit(key, op, body.as_bytes(), now())
            }
            other => panic!("{path} must read a body: {other:?}"),
        }
    }

    fn chat(&self, model: &str) -> Result<Decision, GatewayError> {
        let body =
            format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#);
        self.post("/v1/chat/completions", &body)
    }
}

fn code<T>(r: Result<T, GatewayError>) -> &'static str {
    match r {
        Ok(_) => "admitted",
        Err(e) => e.code(),
    }
}

// ----- the head ------------------------------------------------------------------------------

#[test]
fn health_needs_no_key_and_answers_locally() {
    let w = World::new();
    let HeadDecision::Answer(body) = w.head(http::Method::GET, "/health", None).unwrap() else {
        panic!("/health is answered locally");
    };
    assert_eq!(&body[..], br#"{"status":"ok"}"#);
}

#[test]
fn unknown_paths_and_wrong_methods_are_refused_before_auth() {
    let w = World::new();
    assert_eq!(code(w.head(http::Method::GET, "/v2/x", None)), "not_found");
    let e = w
        .head(http::Method::GET, "/v1/chat/completions", None)
        .unwrap_err();
    assert_eq!((e.code(), e.allow()), ("method_not_allowed", Some("POST")));
    let e = w.head(http::Method::POST, "/v1/models", None).unwrap_err();
    assert_eq!(e.allow(), Some("GET, HEAD"));
}

#[test]
fn each_auth_failure_has_its_code() {
    let w = World::new();
    let chat = |auth: Option<&str>| code(w.head(http::Method::POST, "/v1/chat/completions", auth));
    assert_eq!(chat(None), "missing_auth");
    assert_eq!(chat(Some("Basic abc")), "missing_auth");
    assert_eq!(chat(Some("Bearer ")), "missing_auth");
    assert_eq!(chat(Some("Bearer sk-tg-unknown")), "invalid_key");
    assert_eq!(chat(Some(&w.bearer())), "admitted");

    let expired = World::with_key(|k| k.expires_at = Some(now()));
    let r = expired.head(
        http::Method::POST,
        "/v1/embeddings",
        Some(&expired.bearer()),
    );
    assert_eq!(code(r), "expired_key");
    let revoked = World::with_key(|k| k.revoked_at = Some(now() - chrono::Duration::seconds(1)));
    let r = revoked.head(
        http::Method::POST,
        "/v1/embeddings",
        Some(&revoked.bearer()),
    );
    assert_eq!(code(r), "invalid_key", "a revoked key is simply invalid");
}

#[test]
fn the_model_list_needs_a_key() {
    let w = World::new();
    assert_eq!(
        code(w.head(http::Method::GET, "/v1/models", None)),
        "missing_auth"
    );
    let HeadDecision::Answer(body) = w
        .head(http::Method::GET, "/v1/models", Some(&w.bearer()))
        .unwrap()
    else {
        panic!("/v1/models is answered locally");
    };
    assert_eq!(body, w.catalog.models_json());
}

#[test]
fn a_key_sees_its_own_settings_and_spend_never_its_secret() {
    let w = World::with_key(|k| {
        k.name = Some("ci".into());
        k.spend_limit = Some(usd(5));
        k.limit_reset = Some(crate::store::LimitReset::Daily);
    });
    assert_eq!(
        code(w.head(http::Method::GET, "/v1/key", None)),
        "missing_auth"
    );
    let window = crate::billing::window::window_start(crate::store::LimitReset::Daily, now());
    w.accounts.set_spend("key_1", window, usd(2));
    let HeadDecision::Answer(body) = w
        .head(http::Method::GET, "/v1/key", Some(&w.bearer()))
        .unwrap()
    else {
        panic!("/v1/key is answered locally");
    };
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["object"], "key");
    assert_eq!(v["name"], "ci");
    assert_eq!(v["spend_limit_usd"], "5.0");
    assert_eq!(v["limit_reset"], "daily");
    assert_eq!(v["window_spend_usd"], "2.0");
    assert_eq!(v["workspace"]["credit_usd"], "10.0");
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(!text.contains(&w.minted.secret), "{text}");
    assert!(!text.contains(&w.minted.hash_hex), "{text}");
}

#[test]
fn credits_are_answered_at_the_head_from_the_gates_even_without_credit() {
    let w = World::new();
    let bearer = w.bearer();
    let answer = |method| match w.head(method, "/v1/credits", Some(&bearer)) {
        Ok(HeadDecision::Answer(body)) => String::from_utf8(body.to_vec()).unwrap(),
        other => panic!("/v1/credits is answered locally: {other:?}"),
    };
    w.accounts.set_balance_row(
        "ws_1",
        crate::store::BalanceRow {
            balance: Usd::from_pico(7_000_000_000_001),
            credited: usd(10),
        },
    );
    let held = w.chat("acme/llama").unwrap();
    let reserved = held.admitted.reservation.amount();
    assert_eq!(
        answer(http::Method::GET),
        format!(
            r#"{{"data":{{"total_credits":10.0,"total_usage":2.999999999999,"balance":7.000000000001,"reserved":{reserved},"currency":"USD"}}}}"#
        )
    );
    drop(held);
    // No credit left: never gated.
    w.accounts
        .set_balance_row("ws_1", crate::store::BalanceRow::default());
    assert!(answer(http::Method::HEAD).contains(r#""balance":0.0,"reserved":0.0"#));
    assert_eq!(
        code(w.head(http::Method::GET, "/v1/credits", None)),
        "missing_auth"
    );
    let e = w
        .head(http::Method::POST, "/v1/credits", Some(&bearer))
        .unwrap_err();
    assert_eq!(e.allow(), Some("GET, HEAD"));
}

#[test]
fn a_generation_is_looked_up_in_the_callers_workspace_by_a_plain_id() {
    let w = World::new();
    let bearer = w.bearer();
    let looked_up = |path: &str| w.head(http::Method::GET, path, Some(&bearer));
    match looked_up("/v1/generation?x=1&id=chatcmpl-Ab12").unwrap() {
        HeadDecision::Generation { workspace_id, id } => {
            assert_eq!((&*workspace_id, &*id), ("ws_1", "chatcmpl-Ab12"));
        }
        other => panic!("{other:?}"),
    }
    for bad in [
        "/v1/generation",
        "/v1/generation?id=",
        "/v1/generation?id=a%20b",
    ] {
        assert_eq!(code(looked_up(bad)), "invalid_request_error", "{bad}");
    }
    assert_eq!(
        code(w.head(http::Method::GET, "/v1/generation?id=x", None)),
        "missing_auth"
    );
}

#[test]
fn the_head_names_the_operation() {
    let w = World::new();
    let ops = [
        ("/v1/chat/completions", Operation::Chat),
        ("/v1/embeddings", Operation::Embeddings),
    ];
    for (path, want) in ops {
        match w.head(http::Method::POST, path, Some(&w.bearer())).unwrap() {
            HeadDecision::ReadBody { op, key } => {
                assert_eq!(op, want);
                assert_eq!(key.id, "key_1");
            }
            other => panic!("{path} reads a body: {other:?}"),
        }
    }
}

// ----- the body: model, gates, route, plan ----------------------------------------------------

#[test]
fn malformed_bodies_are_400() {
    let w = World::new();
    let r = w.post("/v1/chat/completions", "{");
    assert_eq!(code(r), "invalid_request_error");
    let r = w.post(
        "/v1/chat/completions",
        r#"{"model":"acme/llama","messages":[]}"#,
    );
    assert_eq!(code(r), "invalid_request_error");
}

#[test]
fn model_resolution() {
    let w = World::new();
    assert_eq!(code(w.chat("acme/nope")), "model_not_found");
    assert_eq!(code(w.chat("acme/embed")), "chat_unsupported");
    let r = w.post("/v1/embeddings", r#"{"model":"acme/llama","input":"x"}"#);
    assert_eq!(code(r), "embeddings_unsupported");
    let r = w.post(
        "/v1/embeddings",
        r#"{"model":"acme/embed","input":"x","stream":true}"#,
    );
    assert_eq!(code(r), "invalid_request_error", "embeddings cannot stream");
    let r = w.post("/v1/embeddings", r#"{"model":"acme/embed","input":"x"}"#);
    assert_eq!(code(r), "admitted");
}

#[test]
fn the_credit_gate_refuses_without_credit_on_every_endpoint() {
    let w = World::new();
    w.accounts.set_balance("ws_1", Usd::ZERO);
    assert_eq!(code(w.chat("acme/llama")), "insufficient_credit");
    let r = w.post("/v1/embeddings", r#"{"model":"acme/embed","input":"x"}"#);
    assert_eq!(code(r), "insufficient_credit");
    w.accounts.set_balance("ws_1", Usd::from_pico(1));
    assert_eq!(
        code(w.chat("acme/llama")),
        "admitted",
        "any credit left admits"
    );
}

#[test]
fn a_model_is_resolved_before_the_gates() {
    let w = World::new();
    w.accounts.set_balance("ws_1", Usd::ZERO);
    assert_eq!(code(w.chat("acme/nope")), "model_not_found");
}

#[test]
fn the_spend_gate_is_chat_only_and_after_credit() {
    let w = World::with_key(|k| {
        k.spend_limit = Some(usd(1));
        k.limit_reset = Some(LimitReset::Daily);
    });
    let today = Utc.with_ymd_and_hms(2026, 11, 24, 0, 0, 0).unwrap();
    w.accounts.set_spend("key_1", today, usd(1));
    assert_eq!(code(w.chat("acme/llama")), "spend_limit_exceeded");
    let r = w.post("/v1/embeddings", r#"{"model":"acme/embed","input":"x"}"#);
    assert_eq!(code(r), "admitted", "embeddings are not spend-limited");
    w.accounts.set_balance("ws_1", Usd::ZERO);
    assert_eq!(
        code(w.chat("acme/llama")),
        "insufficient_credit",
        "credit answers first"
    );

    let yesterday = World::with_key(|k| {
        k.spend_limit = Some(usd(1));
        k.limit_reset = Some(LimitReset::Daily);
    });
    yesterday
        .accounts
        .set_spend("key_1", today - chrono::Duration::days(1), usd(5));
    assert_eq!(
        code(yesterday.chat("acme/llama")),
        "admitted",
        "a new window starts empty"
    );
}

#[test]
fn the_first_resolved_route_is_chosen() {
    let w = World::new();
    let d = w.chat("acme/llama").unwrap();
    assert_eq!(d.admitted.route.endpoint.port, 8, "port 9 did not resolve");
    assert_eq!(code(w.chat("acme/down")), "no_route");
}

#[test]
fn an_admitted_request_carries_its_plan_and_identity() {
    let w = World::new();
    let body =
        r#"{"model":"acme/llama","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
    let d = w.post("/v1/chat/completions", body).unwrap();
    let a = &d.admitted;
    assert_eq!(
        (a.op, a.stream, a.key.id.as_str()),
        (Operation::Chat, true, "key_1")
    );
    assert!(
        a.response_cx.id.starts_with("chatcmpl-"),
        "{}",
        a.response_cx.id
    );
    assert_eq!(a.response_cx.created, now().timestamp());
    assert_eq!(a.response_cx.model_id.as_ref(), "acme/llama");
    let Plan::Proxy { request, cache } = d.plan else {
        panic!("an OpenAI-compatible chat is one proxied request");
    };
    assert!(cache.is_none());
    assert_eq!(request.path, "/v1/chat/completions");
    let sent: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(sent["model"], "llama-3", "the upstream model name is sent");
    let e = w
        .post("/v1/embeddings", r#"{"model":"acme/embed","input":"x"}"#)
        .unwrap();
    assert!(e.admitted.response_cx.id.starts_with("emb-"));
}

// ----- the billing outcome --------------------------------------------------------------------

#[test]
fn how_a_request_ended() {
    let mid = GatewayError::MidStream("upstream failed mid-response".into());
    let upstream = GatewayError::Upstream {
        status: 503,
        message: "overloaded".into(),
    };
    let cases = [
        (None, None, Ending::Complete),
        (None, Some(Blame::Client), Ending::ClientLeft),
        (None, Some(Blame::Upstream), Ending::Failed),
        (Some(&mid), None, Ending::BrokeMidStream),
        (Some(&mid), Some(Blame::Upstream), Ending::BrokeMidStream),
        (Some(&upstream), None, Ending::Failed),
        (Some(&upstream), Some(Blame::Upstream), Ending::Failed),
    ];
    for (error, failure, want) in cases {
        assert_eq!(
            Ending::of(error, failure, false),
            want,
            "{error:?} / {failure:?}"
        );
    }
    // A stream whose client left: its upstream was read on to its end, or it was not.
    let left = [
        (None, None, Ending::ClientLeftAnswerRead),
        (None, Some(Blame::Client), Ending::ClientLeft),
        (Some(&mid), None, Ending::ClientLeft),
        (Some(&upstream), None, Ending::Failed),
    ];
    for (error, failure, want) in left {
        assert_eq!(
            Ending::of(error, failure, true),
            want,
            "{error:?} / {failure:?}"
        );
    }
}

#[test]
fn what_each_ending_bills() {
    let used = Usage {
        input: 10,
        output: 5,
        ..Usage::default()
    };
    assert_eq!(
        billed(Ending::Complete, &used, None),
        Some(UsageOutcome::Complete)
    );
    assert_eq!(
        billed(Ending::ClientLeft, &used, None),
        Some(UsageOutcome::ClientDisconnected)
    );
    assert_eq!(
        billed(Ending::ClientLeftAnswerRead, &used, None),
        Some(UsageOutcome::ClientDisconnected)
    );
    assert_eq!(
        billed(Ending::BrokeMidStream, &used, None),
        Some(UsageOutcome::UpstreamFailed)
    );
    assert_eq!(
        billed(Ending::Failed, &used, None),
        None,
        "failed before the answer"
    );
    assert_eq!(
        billed(Ending::Complete, &Usage::default(), None),
        None,
        "nothing used"
    );
}

#[test]
fn the_usage_record_carries_cost_and_timings() {
    let w = World::new();
    let d = w.chat("acme/llama").unwrap();
    let usage = Usage {
        input: 1_000_000,
        output: 500_000,
        ..Usage::default()
    };
    let t = Timings {
        started_at: now(),
        finished_at: now() + chrono::Duration::seconds(2),
        upstream_latency: Some(Duration::from_micros(1_234)),
        ttft: Some(Duration::from_micros(2_345)),
    };
    let r = usage_record_for(
        &d.admitted,
        Ending::Complete,
        produced(usage, 0),
        t,
        Traced::default(),
    )
    .expect("billed")
    .unwrap();
    assert_eq!(r.cost, usd(2), "1M input at 1 USD + 0.5M output at 2 USD");
    assert_eq!(
        (r.upstream_latency_us, r.ttft_us),
        (Some(1_234), Some(2_345))
    );
    assert_eq!(r.id, d.admitted.response_cx.id.as_ref());
    assert_eq!(
        (r.key_id.as_str(), r.workspace_id.as_str()),
        ("key_1", "ws_1")
    );
    assert!(usage_record_for(
        &d.admitted,
        Ending::Failed,
        produced(usage, 0),
        t,
        Traced::default()
    )
    .is_none());
    assert_eq!((r.client_addr, r.upstream_request_id), (None, None));
    let traced = Traced {
        client_addr: Some("2001:db8::7".parse().unwrap()),
        upstream_request_id: Some("req_011CVEA3SF7rnb3DuBZytqQa"),
    };
    let r = usage_record_for(&d.admitted, Ending::Complete, produced(usage, 0), t, traced)
        .expect("billed")
        .unwrap();
    assert_eq!(r.client_addr.as_deref(), Some("2001:db8::7"));
    assert_eq!(
        r.upstream_request_id.as_deref(),
        Some("req_011CVEA3SF7rnb3DuBZytqQa")
    );
}

#[test]
fn only_a_failure_without_output_is_waived_and_only_when_the_operator_waives() {
    let w = World::new();
    let mut d = w.chat("acme/llama").unwrap();
    let t = Timings {
        started_at: now(),
        finished_at: now(),
        upstream_latency: None,
        ttft: None,
    };
    let input_only = Usage {
        input: 1_000_000,
        ..Usage::default()
    };
    let record = |a: &Admitted, ending, usage, delivered| {
        usage_record_for(a, ending, produced(usage, delivered), t, Traced::default())
            .expect("billed")
            .unwrap()
    };
    // Off (the default): a stream cut before any output pays for its input, as before.
    let r = record(&d.admitted, Ending::BrokeMidStream, input_only, 0);
    assert_eq!((r.cost, r.waived), (usd(1), false));
    d.admitted.waive_empty_failures = true;
    let r = record(&d.admitted, Ending::BrokeMidStream, input_only, 0);
    assert_eq!((r.cost, r.waived), (Usd::ZERO, true), "waived");
    assert_eq!(
        (r.input_tokens, r.input_price, r.outcome),
        (
            1_000_000,
            Price::from_micro_per_mtok(1_000_000),
            UsageOutcome::UpstreamFailed
        ),
        "the tokens and prices stay recorded"
    );
    // Output, reported or only delivered, is never waived.
    let with_output = Usage {
        output: 1,
        ..input_only
    };
    let r = record(&d.admitted, Ending::BrokeMidStream, with_output, 0);
    assert_eq!(
        (r.waived, r.cost),
        (false, Usd::from_pico(1_000_002_000_000))
    );
    let r = record(&d.admitted, Ending::BrokeMidStream, input_only, 40);
    assert!(!r.waived && r.output_tokens == 10, "{r:?}");
    // Not failures: a complete answer (it has a finish reason) and a client that left.
    for ending in [
        Ending::Complete,
        Ending::ClientLeft,
        Ending::ClientLeftAnswerRead,
    ] {
        let r = record(&d.admitted, ending, input_only, 0);
        assert_eq!((r.waived, r.cost), (false, usd(1)), "{ending:?}");
    }
}

// ----- reservations --------------------------------------------------------------------------

#[test]
fn the_worst_case_is_every_byte_an_input_token_plus_the_maximum_output() {
    let w = World::new();
    let model = w.catalog.model("acme/llama").unwrap().clone(); // 1 USD in, 2 USD out per 1M
    let worst = |body: &str| {
        let req = RawRequest::parse(body.as_bytes(), Operation::Chat).unwrap();
        worst_case(&model, &req, body.as_bytes(), Operation::Chat, HOUR).map(|w| w.cost)
    };
    let plain = r#"{"model":"acme/llama","messages":[{"role":"user","content":"hi"}]}"#;
    // 66 bytes at 1 µUSD per token, 32,768 default output tokens at 2 µUSD.
    assert_eq!(
        worst(plain),
        Some(Usd::from_pico(66 * 1_000_000 + 32_768 * 2_000_000))
    );
    let capped = r#"{"model":"acme/llama","max_tokens":10,"n":3,"messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(
        worst(capped),
        Some(Usd::from_pico(
            capped.len() as i64 * 1_000_000 + 30 * 2_000_000
        )),
        "the client's cap, for each of n choices"
    );
    let embed = r#"{"model":"acme/embed","input":"abc"}"#;
    let req = RawRequest::parse(embed.as_bytes(), Operation::Embeddings).unwrap();
    let e = w.catalog.model("acme/embed").unwrap();
    assert_eq!(
        worst_case(e, &req, embed.as_bytes(), Operation::Embeddings, HOUR).map(|w| w.cost),
        Some(Usd::from_pico(embed.len() as i64 * 1_000_000)),
        "embeddings: input only"
    );
}

/// The worst case of `body` on `model` of `catalog` (a one-model catalog in YAML).
fn worst_on(model_yaml: &str, body: &str) -> Option<WorstCase> {
    let rows: CatalogRows = serde_yaml::from_str(&format!(
        "models:\n  - {{id: acme/m, provider: acme, family: openai, kind: chat, \
         upstream_model: m, {model_yaml}}}\n"
    ))
    .unwrap();
    let catalog = Snapshot::build(&rows, &ProvidersConf::default(), &HashMap::new());
    let model = catalog.model("acme/m").unwrap().clone();
    let req = RawRequest::parse(body.as_bytes(), Operation::Chat).unwrap();
    worst_case(&model, &req, body.as_bytes(), Operation::Chat, HOUR)
}

#[test]
fn a_client_cannot_reserve_beyond_the_models_cap_however_much_it_asks() {
    // The most a request may ask (a larger one is a 400 before admission).
    let huge =
        r#"{"model":"acme/m","max_tokens":4294967295,"messages":[{"role":"user","content":"hi"}]}"#;
    let prices = "input_price: 1, output_price: 2";
    let output = |yaml: &str| worst_on(&format!("{prices}, {yaml}"), huge).map(|w| w.output_tokens);
    assert_eq!(
        output("max_output_tokens: 8192"),
        Some(8_192),
        "the catalog's cap"
    );
    assert_eq!(
        output("context_window: 200000"),
        Some(200_000),
        "no output cap: the context window"
    );
    assert_eq!(
        worst_on(prices, huge).map(|w| w.output_tokens),
        Some(32_768),
        "neither: the default (was: whatever was asked)"
    );
    let small = r#"{"model":"acme/m","max_completion_tokens":5,"n":2,"messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(worst_on(prices, small).map(|w| w.output_tokens), Some(10));
}

#[test]
fn a_worst_case_beyond_i64_is_refused_before_the_upstream() {
    // At the dearest price a catalog accepts, a few billion output tokens for 128 choices do
    // not fit i64 pico-USD: admission must refuse, not reserve i64::MAX (which let a second
    // request's release create credit).
    let model = "input_price: 1, output_price: 10000, max_output_tokens: 4000000000";
    let body = r#"{"model":"acme/m","n":128,"messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(worst_on(model, body), None);
    let mut w = World::new();
    w.catalog = {
        let rows: CatalogRows = serde_yaml::from_str(&CATALOG.replace(
            "input_price: 1, output_price: 2}",
            "input_price: 1, output_price: 10000, max_output_tokens: 4000000000}",
        ))
        .unwrap();
        let addrs = HashMap::from([(("127.0.0.1".to_owned(), 8), "127.0.0.1:8".parse().unwrap())]);
        Snapshot::build(&rows, &ProvidersConf::default(), &addrs)
    };
    let refused = w.post(
        "/v1/chat/completions",
        r#"{"model":"acme/llama","n":128,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    let Err(err) = refused else {
        panic!("admitted a request whose worst case does not fit")
    };
    assert_eq!((err.status(), err.code()), (400, "invalid_request_error"));
    assert!(err.to_string().contains("worst-case"), "{err}");
    assert_eq!(w.accounts.unreserved("ws_1"), usd(10), "nothing held");
}

/// The usage record of a complete chat on `acme/llama` whose upstream reported `reported`,
/// and the worst case the chat reserved.
fn record_of(reported: Usage) -> (UsageRecord, WorstCase) {
    let w = World::new();
    let d = w.chat("acme/llama").expect("admitted");
    let t = Timings {
        started_at: now(),
        finished_at: now(),
        upstream_latency: None,
        ttft: None,
    };
    let r = usage_record_for(
        &d.admitted,
        Ending::Complete,
        produced(reported, 0),
        t,
        Traced::default(),
    )
    .expect("billed, never dropped")
    .expect("priced");
    (r, d.admitted.worst_case)
}

#[test]
fn a_usage_that_cannot_be_priced_bills_the_worst_case_and_is_flagged() {
    // A (hostile) upstream reports more output than i64 pico-USD can price.
    let (r, worst) = record_of(Usage {
        input: 10,
        output: u64::MAX / 2,
        ..Usage::default()
    });
    assert_eq!(
        (r.input_tokens, r.output_tokens),
        (worst.input_tokens, worst.output_tokens)
    );
    assert_eq!(r.usage_source, UsageSource::Estimated);
    assert!(r.cost.is_positive() && r.cost <= worst.cost);
    let review = r.review.expect("flagged for review");
    assert!(review.contains(&(u64::MAX / 2).to_string()), "{review}");
    let (plain, _) = record_of(Usage {
        input: 1,
        output: 1,
        ..Usage::default()
    });
    assert_eq!(plain.review, None, "an ordinary usage is not flagged");
}

#[test]
fn reasoning_beyond_the_output_is_not_a_record_the_database_refuses() {
    // The database checks reasoning <= output; a record it refuses is set aside unbilled.
    let (r, _) = record_of(Usage {
        input: 5,
        output: 3,
        reasoning: 9,
        ..Usage::default()
    });
    assert_eq!((r.output_tokens, r.reasoning_tokens), (3, 3));
}

#[test]
fn an_admitted_request_holds_its_worst_case_until_it_ends() {
    let w = World::new();
    w.accounts.set_balance("ws_1", Usd::from_pico(1));
    let first = w.chat("acme/llama").expect("any credit admits");
    assert!(first.admitted.reservation.amount() > Usd::from_pico(1));
    assert_eq!(
        code(w.chat("acme/llama")),
        "insufficient_credit",
        "promised to the first"
    );
    drop(first);
    assert_eq!(
        code(w.chat("acme/llama")),
        "admitted",
        "released when it ended"
    );
    let refused = w.chat("acme/nope");
    assert_eq!(code(refused), "model_not_found");
    assert_eq!(
        code(w.chat("acme/down")),
        "no_route",
        "reserved, then released on refusal"
    );
    assert_eq!(
        code(w.chat("acme/llama")),
        "admitted",
        "nothing left reserved"
    );
}

#[test]
fn strict_credit_refuses_what_the_balance_cannot_pay_and_says_what_it_can() {
    let mut w = World::new();
    w.strict = true;
    // acme/llama: 1 USD in, 2 USD out per 1M; the body is 66 bytes (66 µUSD of input).
    w.accounts
        .set_balance("ws_1", Usd::from_pico(66 * 1_000_000 + 100 * 2_000_000));
    let capped = |n: u32| {
        format!(
            r#"{{"model":"acme/llama","max_tokens":{n},"messages":[{{"role":"user","content":"hi"}}]}}"#
        )
    };
    let body = capped(1000);
    let e = w
        .post("/v1/chat/completions", &body)
        .map(|_| ())
        .unwrap_err();
    let affordable = (66 * 1_000_000 + 100 * 2_000_000 - body.len() as i64 * 1_000_000) / 2_000_000;
    assert_eq!(
        e,
        GatewayError::CreditShort {
            affordable_output_tokens: affordable as u64
        }
    );
    assert_eq!(e.status(), 402);
    let fits = capped(50);
    assert!(
        w.post("/v1/chat/completions", &fits).is_ok(),
        "a smaller max_tokens fits"
    );
    w.strict = false;
    assert_eq!(
        code(w.chat("acme/llama")),
        "admitted",
        "off: any credit admits"
    );
}

#[test]
fn a_stream_cut_short_is_billed_at_least_what_was_delivered() {
    // Anthropic: input counted at the start, output only a placeholder until the end.
    let started = Usage {
        input: 20,
        output: 1,
        ..Usage::default()
    };
    let (u, source) = settle(Ending::ClientLeft, started, 400, 99);
    assert_eq!(
        (u.input, u.output, source),
        (20, 100, UsageSource::Estimated)
    );
    // Vertex Gemini: nothing counted before the end; the input is the request's estimate.
    let (u, source) = settle(Ending::BrokeMidStream, Usage::default(), 10, 99);
    assert_eq!((u.input, u.output, source), (99, 3, UsageSource::Estimated));
    // The upstream's counts already cover what was delivered: they stand.
    let counted = Usage {
        input: 20,
        output: 500,
        ..Usage::default()
    };
    assert_eq!(
        settle(Ending::ClientLeft, counted, 400, 99),
        (counted, UsageSource::Reported)
    );
    // Complete answers, answers read to their end after the client left, and failures
    // before the answer are never estimated.
    assert_eq!(
        settle(Ending::Complete, started, 400, 99),
        (started, UsageSource::Reported)
    );
    assert_eq!(
        settle(Ending::ClientLeftAnswerRead, counted, 4_000, 99),
        (counted, UsageSource::Reported),
        "the upstream's final counts stand even below the delivered bytes' estimate"
    );
    assert_eq!(
        settle(Ending::ClientLeft, Usage::default(), 0, 99),
        (Usage::default(), UsageSource::Reported),
        "nothing delivered, nothing counted: nothing billed"
    );
}

mod route_choice {
    use super::*;
    use crate::providers::Secret;

    const ROUTES: &str = r#"
profiles:
  - {name: g, spec: {forward: [temperature]}}
models:
  - {id: google/g, provider: google, family: gemini, kind: chat, upstream_model: g, profile: g,
     input_price: 1, output_price: 1}
routes:
  - {model_id: google/g, kind: gemini-api, base_url: "http://127.0.0.1:8", priority: 0}
  - {model_id: google/g, kind: vertex, region: us-central1, base_url: "http://127.0.0.1:8", priority: 10}
  - {model_id: google/g, kind: vertex, region: europe-west4, base_url: "http://127.0.0.1:8", priority: 10}
  - {model_id: google/g, kind: vertex-global, base_url: "http://127.0.0.1:8", priority: 20}
"#;

    fn model() -> Arc<Model> {
        let rows: CatalogRows = serde_yaml::from_str(ROUTES).unwrap();
        let addr: SocketAddr = "127.0.0.1:8".parse().unwrap();
        let addrs = HashMap::from([(("127.0.0.1".to_owned(), 8), addr)]);
        let catalog = Snapshot::build(&rows, &ProvidersConf::default(), &addrs);
        catalog.model("google/g").unwrap().clone()
    }

    fn creds(gemini: bool, vertex: bool) -> Credentials {
        let c = Credentials {
            gemini: gemini.then(|| Secret::new("k")),
            vertex_project: vertex.then(|| "p".to_owned()),
            ..Credentials::default()
        };
        c.vertex_token.set(vertex.then(|| Secret::new("t")));
        c
    }

    fn chosen(
        body: &str,
        creds: &Credentials,
        turn: u64,
    ) -> Result<(RouteKind, Option<String>), GatewayError> {
        chosen_at(&model(), body, creds, turn, Instant::now())
    }

    fn chosen_at(
        model: &Model,
        body: &str,
        creds: &Credentials,
        turn: u64,
        now: Instant,
    ) -> Result<(RouteKind, Option<String>), GatewayError> {
        let req = RawRequest::parse(body.as_bytes(), Operation::Chat).unwrap();
        route_for(model, &req, creds, &Prefs::default(), turn, now).map(|r| (r.kind, r.region))
    }

    const PLAIN: &str = r#"{"model":"google/g","messages":[{"role":"user","content":"hi"}]}"#;
    const FLEX: &str =
        r#"{"model":"google/g","service_tier":"flex","messages":[{"role":"user","content":"hi"}]}"#;

    #[test]
    fn the_best_priority_with_credentials_wins() {
        assert_eq!(
            chosen(PLAIN, &creds(true, true), 0).unwrap().0,
            RouteKind::GeminiApi
        );
        // Vertex credentials only: the Developer API route is skipped, not answered 503.
        assert_eq!(
            chosen(PLAIN, &creds(false, true), 0).unwrap().0,
            RouteKind::Vertex
        );
        // Developer API key only: Vertex routes are skipped even for flex.
        assert_eq!(
            chosen(FLEX, &creds(true, false), 0).unwrap().0,
            RouteKind::GeminiApi
        );
    }

    #[test]
    fn flex_goes_to_vertex_global() {
        assert_eq!(
            chosen(FLEX, &creds(true, true), 0).unwrap().0,
            RouteKind::VertexGlobal
        );
    }

    #[test]
    fn routes_of_equal_priority_take_turns() {
        let regions: Vec<Option<String>> = (0..4)
            .map(|turn| chosen(PLAIN, &creds(false, true), turn).unwrap().1)
            .collect();
        let (a, b) = (
            Some("us-central1".to_owned()),
            Some("europe-west4".to_owned()),
        );
        assert_eq!(regions, [a.clone(), b.clone(), a, b]);
    }

    #[test]
    fn no_credentials_at_all_is_upstream_unconfigured() {
        let e = chosen(PLAIN, &creds(false, false), 0).unwrap_err();
        assert_eq!(e, GatewayError::MissingCredentials("gemini"));
        assert_eq!((e.status(), e.code()), (503, "upstream_unconfigured"));
    }

    #[test]
    fn a_cooling_route_is_skipped_while_another_can_serve_then_probed() {
        let model = model();
        let creds = creds(true, true);
        let t = Instant::now();
        let secs = std::time::Duration::from_secs;
        model.routes[0].health.throttled(t, Some(secs(5)));
        let during = chosen_at(&model, PLAIN, &creds, 0, t + secs(1)).unwrap();
        assert_eq!(
            during.0,
            RouteKind::Vertex,
            "the throttled route is skipped"
        );
        let after = t + secs(6);
        let probe = chosen_at(&model, PLAIN, &creds, 0, after).unwrap();
        assert_eq!(probe.0, RouteKind::GeminiApi, "the next request probes it");
        let meanwhile = chosen_at(&model, PLAIN, &creds, 0, after).unwrap();
        assert_eq!(meanwhile.0, RouteKind::Vertex, "one probe at a time");
        model.routes[0].health.succeeded();
        let healed = chosen_at(&model, PLAIN, &creds, 0, after).unwrap();
        assert_eq!(healed.0, RouteKind::GeminiApi);
    }

    #[test]
    fn equal_routes_take_turns_among_those_not_cooling() {
        let model = model();
        let t = Instant::now();
        model.routes[1].health.throttled(t, None); // us-central1
        for turn in 0..4 {
            let (_, region) = chosen_at(&model, PLAIN, &creds(false, true), turn, t).unwrap();
            assert_eq!(region.as_deref(), Some("europe-west4"), "turn {turn}");
        }
    }

    #[test]
    fn when_every_route_cools_the_one_recovering_first_still_serves() {
        let model = model();
        let t = Instant::now();
        let secs = std::time::Duration::from_secs;
        for (route, wait) in model.routes.iter().zip([40, 30, 20, 50]) {
            route.health.throttled(t, Some(secs(wait)));
        }
        let (kind, region) = chosen_at(&model, PLAIN, &creds(true, true), 0, t).unwrap();
        assert_eq!(
            (kind, region.as_deref()),
            (RouteKind::Vertex, Some("europe-west4")),
            "never refused for health alone"
        );
    }

    #[test]
    fn equal_routes_share_the_turns_by_weight() {
        let weights = [3u32, 1];
        let picks: Vec<usize> = (0..8)
            .map(|turn| weighted_turn(weights.iter().copied(), 4, turn))
            .collect();
        assert_eq!(picks, [0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(weighted_turn([1u32, 1, 1].into_iter(), 3, 5), 2);
    }

    #[test]
    fn a_heavier_route_takes_more_of_the_turns() {
        let mut model = (*model()).clone();
        model.routes[1].weight = 3; // us-central1, against europe-west4's 1
        let t = Instant::now();
        let central = (0..8)
            .filter(|turn| {
                let (_, region) = chosen_at(&model, PLAIN, &creds(false, true), *turn, t).unwrap();
                region.as_deref() == Some("us-central1")
            })
            .count();
        assert_eq!(central, 6);
    }
}

mod request_ids {
    use super::*;

    #[test]
    fn a_plain_client_id_is_kept_anything_else_is_not() {
        assert_eq!(
            client_request_id(Some(b"trace-42:a.b_c")).as_deref(),
            Some("trace-42:a.b_c")
        );
        let long = [b'a'; 129];
        for bad in [&b""[..], b"has space", b"new\nline", b"\xff\xfe", &long[..]] {
            assert_eq!(client_request_id(Some(bad)), None, "{bad:?}");
        }
        assert_ne!(local_request_id(), local_request_id(), "fresh each time");
    }

    #[test]
    fn an_admitted_request_without_one_is_known_by_its_completion_id() {
        let body = r#"{"model":"acme/llama","messages":[{"role":"user","content":"hi"}]}"#;
        let a = World::new()
            .post("/v1/chat/completions", body)
            .unwrap()
            .admitted;
        assert_eq!(a.request_id, a.response_cx.id);
    }
}

// ----- the Messages door ---------------------------------------------------------------------

const MESSAGES: &str = r#"{"model":"acme/claude","max_tokens":100,"stream":true,
    "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#;

#[test]
fn the_messages_door_takes_the_key_in_x_api_key_or_bearer() {
    let w = World::new();
    let secret = w.minted.secret.clone();
    let bearer = w.bearer();
    let messages = |auth: Option<&str>, key: Option<&str>| {
        code(w.head_with(http::Method::POST, "/v1/messages", auth, key))
    };
    assert_eq!(messages(None, Some(&secret)), "admitted");
    assert_eq!(messages(Some(&bearer), None), "admitted");
    assert_eq!(messages(None, None), "missing_auth");
    assert_eq!(messages(None, Some(" ")), "missing_auth");
    assert_eq!(messages(None, Some("sk-tg-nope")), "invalid_key");
    // The OpenAI door keeps the specification's Authorization header.
    let chat = w.head_with(
        http::Method::POST,
        "/v1/chat/completions",
        None,
        Some(&secret),
    );
    assert_eq!(code(chat), "missing_auth");
    let counting = w.head_with(
        http::Method::POST,
        "/v1/messages/count_tokens",
        None,
        Some(&secret),
    );
    assert!(matches!(counting, Ok(HeadDecision::CountTokens { .. })));
    let e = w.head(http::Method::GET, "/v1/messages", None).unwrap_err();
    assert_eq!(e.allow(), Some("POST"));
}

#[test]
fn a_claude_model_on_the_messages_door_passes_through_with_the_allowed_betas() {
    let w = World::new();
    let admission = Admission {
        anthropic: AnthropicHeaders {
            version: Some("2023-06-01".into()),
            betas: "claude-code-20250219,secret-beta".into(),
        },
        anthropic_betas: &["claude-code-20250219".to_owned()],
        previous: None,
        ..w.admission_at("/v1/messages")
    };
    let key = w.keys.authenticate(&w.minted.secret, now()).unwrap();
    let d = admission
        .admit(key, Operation::Chat, MESSAGES.as_bytes(), now())
        .unwrap();
    assert!(d.translated.is_none(), "Claude speaks the door's dialect");
    let a = &d.admitted;
    assert_eq!((a.door, a.stream), (Door::Messages, true));
    assert!(a.response_cx.id.starts_with("msg_"), "{}", a.response_cx.id);
    let forwarded: Vec<_> = a
        .forward
        .iter()
        .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
        .collect();
    assert_eq!(
        forwarded,
        [
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "claude-code-20250219")
        ]
    );
    // The reservation is the door's max_tokens, as on the chat door.
    assert_eq!(d.admitted.worst_case.output_tokens, 100);
}

#[test]
fn the_messages_door_requires_max_tokens_and_answers_an_unknown_model_with_404() {
    let w = World::new();
    let no_max = MESSAGES.replace(r#""max_tokens":100,"#, "");
    let e = w.post("/v1/messages", &no_max).err().unwrap();
    assert_eq!(
        (e.status(), e.to_string().as_str()),
        (400, "max_tokens: Field required")
    );
    let unknown = MESSAGES.replace("acme/claude", "claude-nope");
    let e = w.post("/v1/messages", &unknown).err().unwrap();
    assert_eq!(e.status_in(Door::Messages), 404);
    assert_eq!(e.to_string(), r#"model "claude-nope" not found"#);
}

#[test]
fn a_gemini_model_on_the_messages_door_is_planned_from_the_translated_body_and_recorded_so() {
    let w = World::new();
    let body = MESSAGES.replace("acme/claude", "acme/gem");
    let d = w.post("/v1/messages", &body).unwrap();
    let chat: serde_json::Value = serde_json::from_slice(d.translated.as_ref().unwrap()).unwrap();
    assert_eq!(chat["messages"][0]["role"], "user", "{chat}");
    assert_eq!(chat["max_tokens"], 100);
    let Plan::Proxy { request, .. } = &d.plan else {
        panic!("one upstream request");
    };
    assert!(
        request.path.contains("gem-x:streamGenerateContent"),
        "{}",
        request.path
    );
    assert!(
        d.admitted.forward.is_empty(),
        "no Anthropic header reaches Gemini"
    );
    let t = Timings {
        started_at: now(),
        finished_at: now(),
        upstream_latency: None,
        ttft: None,
    };
    let usage = Usage {
        input: 10,
        output: 5,
        ..Usage::default()
    };
    let r = usage_record_for(
        &d.admitted,
        Ending::Complete,
        produced(usage, 0),
        t,
        Traced::default(),
    )
    .expect("billed")
    .unwrap();
    assert_eq!(r.endpoint, crate::store::UsageEndpoint::Messages);
    assert!(r.id.starts_with("msg_"), "{}", r.id);
}

// ----- request-level routing: `models`, `provider` -------------------------------------------

mod fallbacks {
    use super::*;

    fn chat_with(model: &str, extra: &str) -> String {
        format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
    }

    fn post(w: &World, body: &str) -> Result<Decision, GatewayError> {
        w.post("/v1/chat/completions", body)
    }

    /// The candidates failover would try after the admitted route, as `model@route path`.
    fn after(w: &World, d: &Decision, client: &str) -> Vec<String> {
        let planned_from = d.translated.as_deref().unwrap_or(client.as_bytes());
        w.admission()
            .fallbacks(&d.admitted, planned_from)
            .iter()
            .map(|c| format!("{}@{}", c.model.id, c.route.endpoint.base_path))
            .collect()
    }

    fn plan_body(plan: &Plan) -> serde_json::Value {
        let Plan::Proxy { request, .. } = plan else {
            panic!("one upstream request");
        };
        serde_json::from_slice(&request.body).unwrap()
    }

    #[test]
    fn every_model_named_is_checked_like_the_model_wherever_it_stands() {
        let w = World::new();
        let e = post(
            &w,
            &chat_with("acme/twin", r#","models":["acme/llama","acme/nope"]"#),
        )
        .err()
        .unwrap();
        assert_eq!((e.code(), e.status()), ("model_not_found", 400));
        assert_eq!(e.to_string(), r#"model "acme/nope" not found"#);
        let e = post(&w, &chat_with("acme/twin", r#","models":["acme/embed"]"#));
        assert_eq!(code(e), "chat_unsupported");
        let nine = r#","models":["a","b","c","d","e","f","g","h","i"]"#;
        assert_eq!(
            code(post(&w, &chat_with("acme/twin", nine))),
            "invalid_request_error"
        );
        assert_eq!(w.accounts.unreserved("ws_1"), usd(10), "nothing reserved");
    }

    #[test]
    fn the_model_is_tried_first_then_each_of_models_once_in_order() {
        let w = World::new();
        let body = chat_with(
            "acme/twin",
            r#","models":["acme/llama","acme/twin","acme/gem","acme/llama"]"#,
        );
        let d = post(&w, &body).unwrap();
        assert_eq!(&*d.admitted.model.id, "acme/twin");
        assert_eq!(
            after(&w, &d, &body),
            ["acme/twin@/b", "acme/llama@/v1", "acme/gem@"],
            "its other route, then each fallback's (the unresolved one left out)"
        );
        // OpenRouter's shape without `model`: the first of `models` is the model.
        let body =
            r#"{"models":["acme/llama","acme/twin"],"messages":[{"role":"user","content":"hi"}]}"#;
        let d = post(&w, body).unwrap();
        assert_eq!(&*d.admitted.model.id, "acme/llama");
        assert_eq!(after(&w, &d, body), ["acme/twin@/a", "acme/twin@/b"]);
    }

    #[test]
    fn a_model_that_cannot_serve_gives_way_to_the_next() {
        let w = World::new();
        assert_eq!(code(w.chat("acme/down")), "no_route");
        let d = post(&w, &chat_with("acme/down", r#","models":["acme/twin"]"#)).unwrap();
        assert_eq!(&*d.admitted.model.id, "acme/twin");
        assert_eq!(&*d.admitted.response_cx.model_id, "acme/twin");
        // Claude takes no tools on the chat door: as a fallback it is left out, as the model
        // it gives way to one that takes them; alone, its refusal stands.
        let tools = r#","tools":[{"type":"function","function":{"name":"f","parameters":{}}}]"#;
        let body = chat_with("acme/gem", &format!(r#"{tools},"models":["acme/claude"]"#));
        let d = post(&w, &body).unwrap();
        assert!(
            after(&w, &d, &body).is_empty(),
            "{:?}",
            after(&w, &d, &body)
        );
        let body = chat_with("acme/claude", &format!(r#"{tools},"models":["acme/gem"]"#));
        assert_eq!(&*post(&w, &body).unwrap().admitted.model.id, "acme/gem");
        let body = chat_with("acme/claude", tools);
        assert_eq!(code(post(&w, &body)), "unsupported_parameter");
    }

    #[test]
    fn the_reservation_covers_the_dearest_model_and_each_bills_its_own_worst_case() {
        let w = World::new();
        let body = chat_with("acme/llama", r#","models":["acme/claude"]"#);
        let d = post(&w, &body).unwrap();
        let req = RawRequest::parse(body.as_bytes(), Operation::Chat).unwrap();
        let at = |id: &str| {
            let model = w.catalog.model(id).unwrap();
            let ttl = crate::providers::DEFAULT_MAX_CACHE_TTL;
            worst_case(model, &req, body.as_bytes(), Operation::Chat, ttl).unwrap()
        };
        assert!(at("acme/claude").cost > at("acme/llama").cost);
        assert_eq!(d.admitted.reservation.amount(), at("acme/claude").cost);
        assert_eq!(d.admitted.worst_case, at("acme/llama"));
        let fallbacks = w.admission().fallbacks(&d.admitted, body.as_bytes());
        let claude = fallbacks.last().unwrap();
        assert_eq!(claude.worst_case, at("acme/claude"));
        assert_eq!(
            w.accounts.unreserved("ws_1"),
            usd(10).checked_sub(at("acme/claude").cost).unwrap()
        );
    }

    #[test]
    fn max_price_leaves_dear_models_out_and_refuses_when_none_is_left() {
        let w = World::new();
        // acme/claude: 3 / 15; acme/llama: 1 / 2 (USD per 1M tokens).
        let cheap =
            r#","models":["acme/llama"],"provider":{"max_price":{"prompt":1,"completion":2}}"#;
        let body = chat_with("acme/claude", cheap);
        let d = post(&w, &body).unwrap();
        assert_eq!(&*d.admitted.model.id, "acme/llama");
        assert!(after(&w, &d, &body).is_empty(), "claude is never tried");
        drop(d);
        let body = chat_with(
            "acme/claude",
            r#","models":["acme/llama"],"provider":{"max_price":{"completion":"1.999999"}}"#,
        );
        let e = post(&w, &body).err().unwrap();
        assert_eq!(
            (e.status(), e.code(), e.error_type()),
            (400, "no_route_within_price", "invalid_request_error")
        );
        assert_eq!(
            e.to_string(),
            "no model of this request is priced within its provider.max_price \
             (completion 1.999999 USD per 1M tokens)"
        );
        assert_eq!(w.accounts.unreserved("ws_1"), usd(10), "nothing reserved");
    }

    #[test]
    fn only_and_ignore_hold_for_the_first_route_and_every_candidate() {
        let w = World::new();
        let body = chat_with(
            "acme/gem",
            r#","models":["acme/twin","acme/claude"],"provider":{"only":["anthropic","gemini-api"]}"#,
        );
        let d = post(&w, &body).unwrap();
        assert_eq!(&*d.admitted.model.id, "acme/gem");
        assert_eq!(
            after(&w, &d, &body),
            ["acme/claude@"],
            "twin's routes are openai"
        );
        let body = chat_with(
            "acme/gem",
            r#","models":["acme/twin","acme/claude"],"provider":{"ignore":["google-ai-studio"]}"#,
        );
        let d = post(&w, &body).unwrap();
        assert_eq!(&*d.admitted.model.id, "acme/twin");
        assert_eq!(
            after(&w, &d, &body),
            ["acme/twin@/b", "acme/claude@"],
            "gem is never tried"
        );
        let e = post(
            &w,
            &chat_with("acme/gem", r#","provider":{"only":["vertex"]}"#),
        );
        assert_eq!(code(e), "no_allowed_route");
    }

    #[test]
    fn without_fallbacks_a_model_keeps_its_first_route_and_order_ranks_routes() {
        let w = World::new();
        let off = r#","models":["acme/llama"],"provider":{"allow_fallbacks":false}"#;
        let body = chat_with("acme/twin", off);
        let d = post(&w, &body).unwrap();
        assert_eq!(d.admitted.route.endpoint.base_path, "/a");
        assert_eq!(
            after(&w, &d, &body),
            ["acme/llama@/v1"],
            "no other route of twin; llama's best"
        );
        let body = chat_with("acme/twin", r#","provider":{"allow_fallbacks":false}"#);
        let d = post(&w, &body).unwrap();
        assert!(after(&w, &d, &body).is_empty());
        // `order` puts its kinds first, the rest after unless fallbacks are off.
        let ordered = r#","models":["acme/gem"],"provider":{"order":["gemini-api","anthropic"]}"#;
        let body = chat_with("acme/claude", ordered);
        let d = post(&w, &body).unwrap();
        assert_eq!(d.admitted.route.kind, RouteKind::Anthropic);
        assert_eq!(after(&w, &d, &body), ["acme/gem@"]);
    }

    #[test]
    fn the_routing_fields_never_reach_an_upstream_body() {
        let w = World::new();
        let routing = r#","models":["acme/claude"],"provider":{"only":["openai","anthropic"]}"#;
        // The OpenAI-compatible adapter copies unknown fields byte for byte.
        let d = post(&w, &chat_with("acme/llama", routing)).unwrap();
        let sent = plan_body(&d.plan);
        assert_eq!(sent["model"], "llama-3");
        assert!(
            sent.get("models").is_none() && sent.get("provider").is_none(),
            "{sent}"
        );
        // Claude's pass-through on the Messages door does too.
        let body = MESSAGES.replacen('{', &format!("{{{},", &routing[1..]), 1);
        let d = w.post("/v1/messages", &body).unwrap();
        let sent = plan_body(&d.plan);
        assert_eq!(sent["model"], "claude-x");
        assert!(
            sent.get("models").is_none() && sent.get("provider").is_none(),
            "{sent}"
        );
    }

    #[test]
    fn a_fallback_of_another_family_is_planned_as_its_door_serves_it() {
        let w = World::new();
        let body = MESSAGES.replace("acme/claude", "acme/gem").replacen(
            '{',
            r#"{"models":["acme/claude"],"#,
            1,
        );
        let d = w.post("/v1/messages", &body).unwrap();
        assert_eq!(&*d.admitted.model.id, "acme/gem");
        assert!(
            d.translated.is_some(),
            "Gemini is served the door's translation"
        );
        let admission = w.admission_at("/v1/messages");
        let planned_from = d.translated.as_deref().unwrap();
        let next = admission.fallbacks(&d.admitted, planned_from);
        assert_eq!(next.len(), 1);
        let replanned = admission
            .replan(&d.admitted, body.as_bytes(), planned_from, &next[0])
            .unwrap();
        let sent = plan_body(&replanned.plan);
        assert_eq!(sent["model"], "claude-x");
        assert_eq!(sent["messages"][0]["content"][0]["text"], "hi", "{sent}");
        assert!(sent.get("models").is_none(), "{sent}");
        let mut admitted = d.admitted;
        admitted.move_to(next[0].clone());
        let translated = admitted.serve_as(replanned.switched.expect("another model"));
        assert!(translated.is_none(), "Claude is passed the client's body");
        assert_eq!(&*admitted.model.id, "acme/claude");
        assert_eq!(&*admitted.response_cx.model_id, "acme/claude");
        assert_eq!(admitted.route.kind, RouteKind::Anthropic);
        assert_eq!(admitted.worst_case, next[0].worst_case);
        let stream = admitted
            .adapter
            .stream_translator(admitted.response_cx.clone());
        drop(stream);
    }

    #[test]
    fn no_other_model_is_planned_once_an_attempt_created_a_context_cache() {
        let w = World::new();
        let body = chat_with("acme/twin", r#","models":["acme/llama"]"#);
        let mut d = post(&w, &body).unwrap();
        let admission = w.admission();
        let next = admission.fallbacks(&d.admitted, body.as_bytes());
        let (same, other) = (&next[0], &next[1]);
        assert_eq!(
            (&*same.model.id, &*other.model.id),
            ("acme/twin", "acme/llama")
        );
        let replan = |a: &Admitted, to: &Candidate| {
            admission.replan(a, body.as_bytes(), body.as_bytes(), to)
        };
        assert!(replan(&d.admitted, other).is_ok());
        d.admitted.cache_created = Some(CacheCreation {
            tokens: 40_000,
            ttl_secs: 300,
        });
        assert!(
            replan(&d.admitted, same).is_ok(),
            "its own model's routes still serve"
        );
        assert!(
            replan(&d.admitted, other).is_err(),
            "the cache is priced at its model"
        );
    }
}

// ----- a key's model allowlist -----------------------------------------------------------------

#[test]
fn a_key_with_an_allowlist_is_refused_other_models_on_every_door_before_any_reservation() {
    let w = World::with_key(|k| {
        k.allowed_models = vec!["acme/ll*".into(), "acme/embed".into()];
    });
    assert_eq!(code(w.chat("acme/llama")), "admitted");
    // One pico-dollar of credit: a refusal that reserved anything would leave none free.
    w.accounts.set_balance("ws_1", Usd::from_pico(1));
    let e = w.chat("acme/claude").err().unwrap();
    assert_eq!((e.code(), e.status()), ("model_not_allowed", 403));
    assert_eq!(
        e.to_string(),
        r#"this api key is not allowed to use model "acme/claude""#
    );
    assert_eq!(
        w.accounts.unreserved("ws_1"),
        Usd::from_pico(1),
        "nothing reserved"
    );
    let messages = w.post("/v1/messages", MESSAGES).err().unwrap();
    assert_eq!(messages.status_in(Door::Messages), 403);
    assert_eq!(messages.code(), "model_not_allowed");
    let responses = w
        .post("/v1/responses", r#"{"model":"acme/gem","input":"hi"}"#)
        .err()
        .unwrap();
    assert_eq!(responses.code(), "model_not_allowed");
    let embed = r#"{"model":"acme/embed","input":"hi"}"#;
    assert_eq!(code(w.post("/v1/embeddings", embed)), "admitted");
    assert_eq!(
        code(w.chat("acme/nope")),
        "model_not_found",
        "an unknown model is unknown, allowed or not"
    );
    let key = w.keys.authenticate(&w.minted.secret, now()).unwrap();
    let counting = w.admission_at("/v1/messages/count_tokens");
    let e = counting
        .count_tokens(&key.models, MESSAGES.as_bytes())
        .err()
        .unwrap();
    assert_eq!(
        e.code(),
        "model_not_allowed",
        "counting calls the upstream too"
    );

    let open = World::new();
    let key = open.keys.authenticate(&open.minted.secret, now()).unwrap();
    assert!(key.models.is_unrestricted());
    assert_eq!(code(open.chat("acme/claude")), "admitted");
}

#[test]
fn the_model_list_of_a_key_with_an_allowlist_holds_only_its_models() {
    let ids = |w: &World| {
        let HeadDecision::Answer(body) = w
            .head(http::Method::GET, "/v1/models", Some(&w.bearer()))
            .unwrap()
        else {
            panic!("/v1/models is answered locally");
        };
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let ids: Vec<String> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect();
        ids
    };
    let w = World::with_key(|k| k.allowed_models = vec!["acme/*a*".into()]);
    assert_eq!(ids(&w), ["acme/claude", "acme/llama"]);
    let HeadDecision::Answer(key) = w
        .head(http::Method::GET, "/v1/key", Some(&w.bearer()))
        .unwrap()
    else {
        panic!("/v1/key is answered locally");
    };
    let key: serde_json::Value = serde_json::from_slice(&key).unwrap();
    assert_eq!(key["allowed_models"], serde_json::json!(["acme/*a*"]));
    let none = World::with_key(|k| k.allowed_models = vec!["other/*".into()]);
    assert!(ids(&none).is_empty());
    let open = World::new();
    assert_eq!(ids(&open).len(), 6, "no list: every listed model");
}

#[test]
fn every_model_a_request_names_is_held_to_the_keys_allowlist() {
    let w = World::with_key(|k| k.allowed_models = vec!["acme/ll*".into()]);
    let chat = |extra: &str| {
        format!(r#"{{"model":"acme/llama","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
    };
    let d = w.post("/v1/chat/completions", &chat("")).unwrap();
    assert_eq!(&*d.admitted.model.id, "acme/llama");
    drop(d);
    // A fallback the key may not use refuses the request, as the model would: a key's list
    // cannot be widened by naming a model second.
    let e = w
        .post(
            "/v1/chat/completions",
            &chat(r#","models":["acme/claude"]"#),
        )
        .err()
        .unwrap();
    assert_eq!((e.code(), e.status()), ("model_not_allowed", 403));
    assert_eq!(
        e.to_string(),
        r#"this api key is not allowed to use model "acme/claude""#
    );
    assert_eq!(w.accounts.unreserved("ws_1"), usd(10), "nothing reserved");
}
