//! Workspace-scoped management keys and per-key model allowlists (issue 32, items 4 and 5),
//! end to end: the real gateway against `tollgate-sim`. A management key manages its own
//! workspace's API keys and reads its usage and balance through the admin API, is refused
//! everything else (403) and every other workspace's resources (404, as if absent), is audited
//! by name, and stops working when revoked or expired; an API key with an allowlist is refused
//! other models on every door, in that door's shape, before anything goes upstream, sees only its
//! models on `/v1/models`, and a change of its list reaches the running gateway at once.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::admin::call_as;
use crate::harness::{eventually, Gateway, SimEnv, ADMIN_TOKEN};

const GEMINI: &str = "google/gemini-2.5-flash";
const CLAUDE: &str = "anthropic/claude-sonnet-4-5";

/// A call of the admin API with `token` as the bearer.
async fn admin(
    gw: &Gateway,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    call_as(gw, Some(token), method, &format!("/admin/v1{path}"), body).await
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_default()
}

/// A POST to a public `path` with `key` as the bearer.
async fn public(gw: &Gateway, path: &str, key: &str, body: &Value) -> (u16, Value) {
    let res = reqwest::Client::new()
        .post(gw.url(path))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn chat(model: &str) -> Value {
    json!({"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]})
}

/// Waits until `/v1/models` answers `key` with 200 (a key made a moment ago reaches the
/// gateway through the change feed).
async fn usable(gw: &Gateway, key: &str) {
    let ok = eventually(Duration::from_secs(5), || async {
        let res = reqwest::Client::new()
            .get(gw.url("/v1/models"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        res.status() == 200
    })
    .await;
    assert!(ok.is_some(), "the new key never became usable");
}

#[tokio::test]
async fn a_management_key_manages_its_own_workspace_and_nothing_else() {
    let e = SimEnv::start();
    let gw = &e.gw;
    let ws = e.ws.as_str();
    let (status, _) = public(gw, "/v1/chat/completions", &e.key, &chat(GEMINI)).await;
    assert_eq!(status, 200);
    assert_eq!(gw.usage_records(ws, 1).await.len(), 1, "committed");
    let (other_ws, other_key) = gw.workspace_with_key();
    let other_key_id = gw.key_id(&other_ws, &other_key);

    // The operator makes a management key: its secret once, then only its hint.
    let (status, made) = admin(
        gw,
        ADMIN_TOKEN,
        "POST",
        &format!("/workspaces/{ws}/management-keys"),
        Some(json!({"name": "reseller backend"})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let mk = made["secret"].as_str().unwrap().to_owned();
    let mk_id = made["key"]["id"].as_str().unwrap().to_owned();
    assert!(mk.starts_with("mk-tg-") && mk.len() == 6 + 32, "{mk}");
    assert_eq!(made["key"]["workspace_id"], ws);
    assert_eq!(made["key"]["status"], "active");
    let (status, list) = admin(
        gw,
        ADMIN_TOKEN,
        "GET",
        &format!("/workspaces/{ws}/management-keys"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(list["data"][0]["id"], mk_id.as_str());
    assert!(!list.to_string().contains(&mk), "never the secret again");
    assert!(list["data"][0].get("secret_hash").is_none());

    // What it may do, in its own workspace.
    let (status, v) = admin(gw, &mk, "GET", &format!("/workspaces/{ws}"), None).await;
    assert_eq!((status, v["balance"].is_string()), (200, true), "{v}");
    let (status, v) = admin(gw, &mk, "GET", &format!("/workspaces/{ws}/credits"), None).await;
    assert_eq!(status, 200, "{v}");
    let top_up = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "credit");
    assert_eq!(
        top_up.map(|e| e["amount"].clone()),
        Some(json!("100.0")),
        "{v}"
    );
    let (status, v) = admin(gw, &mk, "GET", &format!("/workspaces/{ws}/usage"), None).await;
    assert_eq!(
        (status, v["data"][0]["model_id"].as_str()),
        (200, Some(GEMINI)),
        "{v}"
    );
    let (status, v) = admin(
        gw,
        &mk,
        "GET",
        &format!("/workspaces/{ws}/usage/daily"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"][0]["requests"], 1, "{v}");
    let new_key = json!({"name": "customer", "allowed_models": ["google/*"],
        "spend_limit_usd": "5", "limit_reset": "daily"});
    let (status, created) = admin(
        gw,
        &mk,
        "POST",
        &format!("/workspaces/{ws}/keys"),
        Some(new_key),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let key_id = created["key"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["key"]["allowed_models"], json!(["google/*"]));
    assert!(created["secret"].as_str().unwrap().starts_with("sk-tg-"));
    let (status, v) = admin(gw, &mk, "GET", &format!("/workspaces/{ws}/keys"), None).await;
    assert_eq!(status, 200);
    assert!(
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["id"] == key_id.as_str()),
        "{v}"
    );
    let patch = json!({"allowed_models": ["google/gemini-2.5-*"], "spend_limit_usd": "7.5"});
    let (status, v) = admin(gw, &mk, "PATCH", &format!("/keys/{key_id}"), Some(patch)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["allowed_models"], json!(["google/gemini-2.5-*"]));
    assert_eq!(v["spend_limit_usd"], "7.5");
    let (status, rotated) = admin(
        gw,
        &mk,
        "POST",
        &format!("/keys/{key_id}/rotate"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 201, "{rotated}");
    assert_eq!(
        rotated["key"]["allowed_models"],
        json!(["google/gemini-2.5-*"])
    );
    let new_id = rotated["key"]["id"].as_str().unwrap().to_owned();
    let (status, v) = admin(gw, &mk, "POST", &format!("/keys/{new_id}/revoke"), None).await;
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("revoked")),
        "{v}"
    );

    // Nothing else: 403 whatever the workspace.
    let forbidden: &[(&str, String, Option<Value>)] = &[
        (
            "POST",
            format!("/workspaces/{ws}/credits"),
            Some(json!({"amount_usd": "1"})),
        ),
        ("GET", "/catalog".into(), None),
        (
            "PATCH",
            "/catalog/models/google%2Fgemini-2.5-flash".into(),
            Some(json!({"active": false})),
        ),
        ("GET", "/audit".into(), None),
        ("GET", format!("/audit?workspace={ws}"), None),
        ("GET", "/workspaces".into(), None),
        ("POST", "/workspaces".into(), Some(json!({"name": "mine"}))),
        (
            "PATCH",
            format!("/workspaces/{ws}"),
            Some(json!({"name": "renamed"})),
        ),
        ("GET", format!("/workspaces/{ws}/alerts"), None),
        ("GET", format!("/workspaces/{ws}/management-keys"), None),
        (
            "POST",
            format!("/workspaces/{ws}/management-keys"),
            Some(json!({})),
        ),
        ("POST", format!("/management-keys/{mk_id}/revoke"), None),
        (
            "POST",
            format!("/workspaces/{other_ws}/credits"),
            Some(json!({"amount_usd": "1"})),
        ),
        ("DELETE", format!("/workspaces/{ws}/keys"), None),
        ("GET", "/metrics".into(), None),
    ];
    for (method, path, body) in forbidden {
        let (status, v) = admin(gw, &mk, method, path, body.clone()).await;
        assert_eq!(
            (status, code(&v)),
            (403, "forbidden"),
            "{method} {path}: {v}"
        );
    }
    let (status, v) = admin(gw, &mk, "GET", "/nothing/here", None).await;
    assert_eq!((status, code(&v)), (404, "not_found"), "{v}");

    // Another workspace's things are not there, in the very words of things that are not.
    for (method, path) in [
        ("GET", format!("/workspaces/{other_ws}")),
        ("GET", format!("/workspaces/{other_ws}/keys")),
        ("POST", format!("/workspaces/{other_ws}/keys")),
        ("GET", format!("/workspaces/{other_ws}/credits")),
        ("GET", format!("/workspaces/{other_ws}/usage")),
        ("GET", format!("/workspaces/{other_ws}/usage/daily")),
    ] {
        let (status, v) = admin(gw, &mk, method, &path, Some(json!({}))).await;
        assert_eq!(
            (status, code(&v)),
            (404, "not_found"),
            "{method} {path}: {v}"
        );
        assert_eq!(message(&v), format!("workspace {other_ws} not found"));
    }
    let (_, absent) = admin(gw, ADMIN_TOKEN, "GET", "/workspaces/ws_absent", None).await;
    assert_eq!(
        message(&absent),
        "workspace ws_absent not found",
        "the operator's words"
    );
    for (method, path, body) in [
        ("POST", format!("/keys/{other_key_id}/revoke"), None),
        (
            "POST",
            format!("/keys/{other_key_id}/rotate"),
            Some(json!({})),
        ),
        (
            "PATCH",
            format!("/keys/{other_key_id}"),
            Some(json!({"allowed_models": []})),
        ),
    ] {
        let (status, v) = admin(gw, &mk, method, &path, body).await;
        assert_eq!(
            (status, code(&v)),
            (404, "not_found"),
            "{method} {path}: {v}"
        );
        assert_eq!(message(&v), format!("key {other_key_id} not found"));
    }
    let (status, v) = admin(gw, &mk, "POST", "/keys/key_absent/revoke", None).await;
    assert_eq!((status, message(&v)), (404, "key key_absent not found"));
    let (status, _) = public(gw, "/v1/chat/completions", &other_key, &chat(GEMINI)).await;
    assert_eq!(status, 200, "the other workspace's key still works");

    // Neither kind of key is the other.
    let (status, v) = admin(gw, &e.key, "GET", &format!("/workspaces/{ws}"), None).await;
    assert_eq!(
        (status, code(&v)),
        (401, "unauthorized"),
        "an API key on the admin API: {v}"
    );
    let res = reqwest::Client::new()
        .get(gw.url("/v1/models"))
        .bearer_auth(&mk)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401, "a management key on the public API");
    let v: Value = res.json().await.unwrap();
    assert_eq!(code(&v), "invalid_key");

    // The audit log names the management key for what it did.
    let (status, log) = admin(
        gw,
        ADMIN_TOKEN,
        "GET",
        &format!("/audit?workspace={ws}&limit=200"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let actor = format!("management-key:{mk_id}");
    let by_it: Vec<&str> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["actor"] == actor.as_str())
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for want in ["key.create", "key.update", "key.rotate", "key.revoke"] {
        assert!(by_it.contains(&want), "{want} by {actor}: {log}");
    }
    let creation = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "management_key.create")
        .unwrap();
    assert_eq!(creation["actor"], "admin-token");
    assert!(
        !creation.to_string().contains(&mk),
        "no secret in the audit log"
    );

    // Revoked: 401 at once.
    let (status, v) = admin(
        gw,
        ADMIN_TOKEN,
        "POST",
        &format!("/management-keys/{mk_id}/revoke"),
        None,
    )
    .await;
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("revoked")),
        "{v}"
    );
    let (status, v) = admin(gw, &mk, "GET", &format!("/workspaces/{ws}"), None).await;
    assert_eq!((status, code(&v)), (401, "unauthorized"), "{v}");
}

#[tokio::test]
async fn a_management_key_past_its_expiry_is_refused() {
    let gw = Gateway::builder().start();
    let ws = gw.workspace();
    let expires = chrono::Utc::now() + chrono::Duration::milliseconds(1_500);
    let (status, made) = admin(
        &gw,
        ADMIN_TOKEN,
        "POST",
        &format!("/workspaces/{ws}/management-keys"),
        Some(json!({"expires_at": expires.to_rfc3339()})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let mk = made["secret"].as_str().unwrap();
    let (status, _) = admin(&gw, mk, "GET", &format!("/workspaces/{ws}/keys"), None).await;
    assert_eq!(status, 200);
    let wait = (expires - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(100)).await;
    let (status, v) = admin(&gw, mk, "GET", &format!("/workspaces/{ws}/keys"), None).await;
    assert_eq!((status, code(&v)), (401, "unauthorized"), "{v}");
    let (status, list) = admin(
        &gw,
        ADMIN_TOKEN,
        "GET",
        &format!("/workspaces/{ws}/management-keys"),
        None,
    )
    .await;
    assert_eq!(
        (status, list["data"][0]["status"].as_str()),
        (200, Some("expired"))
    );
    let (status, v) = admin(
        &gw,
        ADMIN_TOKEN,
        "POST",
        &format!("/workspaces/{ws}/management-keys"),
        Some(json!({"expires_at": "2001-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    let (status, v) = admin(
        &gw,
        ADMIN_TOKEN,
        "POST",
        "/workspaces/ws_absent/management-keys",
        Some(json!({})),
    )
    .await;
    assert_eq!((status, code(&v)), (404, "not_found"), "{v}");
}

/// The CLI makes, lists and revokes management keys too, audited as the operator.
#[tokio::test]
async fn the_cli_makes_lists_and_revokes_management_keys() {
    let gw = Gateway::builder().start();
    let ws = gw.workspace();
    let made = gw.cli_json(&["mkey", "create", "--workspace", &ws, "--name", "billing"]);
    let secret = made["secret"].as_str().unwrap();
    let id = made["key"]["id"].as_str().unwrap();
    assert!(secret.starts_with("mk-tg-"), "{made}");
    let list = gw.cli_json(&["mkey", "list", "--workspace", &ws]);
    assert_eq!(list[0]["id"], id);
    assert_eq!(list[0]["name"], "billing");
    assert!(!list.to_string().contains(secret));
    let (status, _) = admin(&gw, secret, "GET", &format!("/workspaces/{ws}/keys"), None).await;
    assert_eq!(status, 200);
    let text = gw.cli(&["mkey", "revoke", id]);
    assert!(text.contains("revoked"), "{text}");
    let (status, _) = admin(&gw, secret, "GET", &format!("/workspaces/{ws}/keys"), None).await;
    assert_eq!(status, 401);
    let out = gw.cli_raw(&["mkey", "list", "--workspace", "ws_absent"]);
    assert!(!out.status.success());
}

/// A request a key's allowlist refuses, on each door, in that door's error shape: nothing
/// reaches the upstream and nothing is billed.
#[tokio::test]
async fn an_allowlisted_key_is_refused_other_models_on_every_door() {
    let e = SimEnv::start();
    let gw = &e.gw;
    let key = gw.key(&e.ws, &["--allow-model", "google/gemini-2.5-flash*"]);
    usable(gw, &key).await;
    let upstream_before = e.sim.requests().await.len();

    let (status, v) = public(gw, "/v1/chat/completions", &key, &chat(CLAUDE)).await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(
        (v["error"]["type"].as_str(), code(&v), message(&v)),
        (
            Some("permission_error"),
            "model_not_allowed",
            format!("this api key is not allowed to use model \"{CLAUDE}\"").as_str()
        )
    );
    let messages = json!({"model": CLAUDE, "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}]});
    let res = reqwest::Client::new()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .json(&messages)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["type"], "error", "Anthropic's shape: {v}");
    assert_eq!(
        (v["error"]["type"].as_str(), v["error"]["code"].as_str()),
        (Some("permission_error"), Some("model_not_allowed"))
    );
    let responses = json!({"model": CLAUDE, "input": "hi", "max_output_tokens": 50});
    let (status, v) = public(gw, "/v1/responses", &key, &responses).await;
    assert_eq!((status, code(&v)), (403, "model_not_allowed"), "{v}");
    assert_eq!(v["error"]["type"], "permission_error");
    let mut streamed = chat("anthropic/claude-haiku-4-5");
    streamed["stream"] = json!(true);
    let (status, v) = public(gw, "/v1/chat/completions", &key, &streamed).await;
    assert_eq!(
        (status, code(&v)),
        (403, "model_not_allowed"),
        "a stream never starts: {v}"
    );
    let counting = reqwest::Client::new()
        .post(gw.url("/v1/messages/count_tokens"))
        .header("x-api-key", &key)
        .json(&messages)
        .send()
        .await
        .unwrap();
    assert_eq!(counting.status(), 403);
    assert_eq!(
        e.sim.requests().await.len(),
        upstream_before,
        "nothing refused went upstream"
    );

    // What it may call works on every door, and is all it is billed for.
    let (status, v) = public(gw, "/v1/chat/completions", &key, &chat(GEMINI)).await;
    assert_eq!(status, 200, "{v}");
    let gemini_messages = json!({"model": GEMINI, "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}]});
    let (status, v) = public(gw, "/v1/messages", &key, &gemini_messages).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = public(
        gw,
        "/v1/responses",
        &key,
        &json!({"model": GEMINI, "input": "hi", "max_output_tokens": 50}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let records = gw.usage_records(&e.ws, 3).await;
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(
        records.iter().all(|r| r["model_id"] == GEMINI),
        "{records:?}"
    );

    // Its model list: only what it may call; the workspace's other key sees everything.
    let mine = gw.model_ids(&key).await;
    assert!(mine.contains(&GEMINI.to_owned()), "{mine:?}");
    assert!(
        mine.iter()
            .all(|m| m.starts_with("google/gemini-2.5-flash")),
        "{mine:?}"
    );
    let everything = gw.model_ids(&e.key).await;
    assert!(everything.len() > mine.len() && everything.contains(&CLAUDE.to_owned()));
    let v: Value = gw.get_json(&key, "/v1/key").await;
    assert_eq!(v["allowed_models"], json!(["google/gemini-2.5-flash*"]));
}

/// A change of a key's list, through the admin API or the CLI, reaches the running gateway
/// within the change feed's delay: the next requests obey it.
#[tokio::test]
async fn an_allowlist_change_reaches_the_running_gateway() {
    let e = SimEnv::start();
    let gw = &e.gw;
    let key_id = gw.key_id(&e.ws, &e.key);
    let (status, _) = public(gw, "/v1/chat/completions", &e.key, &chat(CLAUDE)).await;
    assert_eq!(status, 200);

    let (status, v) = admin(
        gw,
        ADMIN_TOKEN,
        "PATCH",
        &format!("/keys/{key_id}"),
        Some(json!({"allowed_models": ["google/*"]})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let changed = Instant::now();
    let refused = eventually(Duration::from_secs(2), || async {
        let (status, v) = public(gw, "/v1/chat/completions", &e.key, &chat(CLAUDE)).await;
        status == 403 && code(&v) == "model_not_allowed"
    })
    .await;
    assert!(refused.is_some(), "the new list never reached the gateway");
    println!(
        "allowlist in force {:?} after the update",
        changed.elapsed()
    );
    let (status, _) = public(gw, "/v1/chat/completions", &e.key, &chat(GEMINI)).await;
    assert_eq!(status, 200);

    gw.cli(&["key", "update", &key_id, "--allow-all-models"]);
    let allowed = eventually(Duration::from_secs(2), || async {
        public(gw, "/v1/chat/completions", &e.key, &chat(CLAUDE))
            .await
            .0
            == 200
    })
    .await;
    assert!(
        allowed.is_some(),
        "the cleared list never reached the gateway"
    );
    let shown = gw.cli_json(&[
        "key",
        "update",
        &key_id,
        "--allow-model",
        "x/*",
        "--name",
        "n",
    ]);
    assert_eq!(shown["allowed_models"], json!(["x/*"]));
    assert_eq!(shown["name"], "n");
    let (status, v) = admin(
        gw,
        ADMIN_TOKEN,
        "PATCH",
        &format!("/keys/{key_id}"),
        Some(json!({"spend_limit_usd": null})),
    )
    .await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    let (status, v) = admin(
        gw,
        ADMIN_TOKEN,
        "PATCH",
        &format!("/keys/{key_id}"),
        Some(json!({"allowed_models": ["has space"]})),
    )
    .await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
}

/// A key over its spend limit works again as soon as the limit is raised (by a management key
/// here), on the running gateway: the gates read the new amount against the window's spend.
#[tokio::test]
async fn a_raised_spend_limit_reaches_the_running_gateway() {
    let e = SimEnv::start();
    let gw = &e.gw;
    let limited = gw.key(
        &e.ws,
        &["--spend-limit-usd", "0.000001", "--limit-reset", "daily"],
    );
    usable(gw, &limited).await;
    let (status, _) = public(gw, "/v1/chat/completions", &limited, &chat(GEMINI)).await;
    assert_eq!(status, 200, "the crossing request completes");
    let over = eventually(Duration::from_secs(3), || async {
        public(gw, "/v1/chat/completions", &limited, &chat(GEMINI))
            .await
            .0
            == 429
    })
    .await;
    assert!(over.is_some(), "the key over its limit must be refused");

    let (_, made) = admin(
        gw,
        ADMIN_TOKEN,
        "POST",
        &format!("/workspaces/{}/management-keys", e.ws),
        Some(json!({})),
    )
    .await;
    let mk = made["secret"].as_str().unwrap();
    let id = gw.key_id(&e.ws, &limited);
    let (status, v) = admin(
        gw,
        mk,
        "PATCH",
        &format!("/keys/{id}"),
        Some(json!({"limit_reset": "weekly"})),
    )
    .await;
    assert_eq!(
        (status, code(&v)),
        (400, "invalid_request"),
        "the period is fixed: {v}"
    );
    let (status, v) = admin(
        gw,
        mk,
        "PATCH",
        &format!("/keys/{id}"),
        Some(json!({"spend_limit_usd": 25})),
    )
    .await;
    assert_eq!(
        (status, v["spend_limit_usd"].as_str()),
        (200, Some("25.0")),
        "{v}"
    );
    assert_eq!(v["status"], "active", "{v}");
    let back = eventually(Duration::from_secs(2), || async {
        public(gw, "/v1/chat/completions", &limited, &chat(GEMINI))
            .await
            .0
            == 200
    })
    .await;
    assert!(back.is_some(), "the raised limit never reached the gateway");
}
