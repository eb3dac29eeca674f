//! The admin API on the admin listener: the token and console sessions, every route, the
//! once-only secret, pagination, the audit trail, catalog edits reaching `/v1/models`, and
//! signed alert webhooks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{eventually, Gateway, Sim, ADMIN_TOKEN};

async fn call(gw: &Gateway, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    call_as(gw, Some(ADMIN_TOKEN), method, path, body).await
}

pub(crate) async fn call_as(
    gw: &Gateway,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = client.request(method.parse().unwrap(), format!("{}{path}", gw.admin));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn models_status(gw: &Gateway, secret: &str) -> (u16, Value) {
    let res = reqwest::Client::new()
        .get(gw.url("/v1/models"))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap();
    (
        res.status().as_u16(),
        res.json().await.unwrap_or(Value::Null),
    )
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn the_admin_token_guards_the_api_but_not_the_document_or_metrics() {
    let gw = Gateway::builder().start();
    let (status, v) = call_as(&gw, None, "GET", "/admin/v1/workspaces", None).await;
    assert_eq!((status, code(&v)), (401, "unauthorized"), "{v}");
    let (status, v) = call_as(&gw, Some("wrong"), "GET", "/admin/v1/workspaces", None).await;
    assert_eq!((status, code(&v)), (401, "unauthorized"), "{v}");
    let (status, v) = call(&gw, "GET", "/admin/v1/workspaces", None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"], json!([]));

    let (status, doc) = call_as(&gw, None, "GET", "/admin/v1/openapi.json", None).await;
    assert_eq!(status, 200);
    for path in [
        "/admin/v1/workspaces/{ws}/keys",
        "/admin/v1/keys/{key}/rotate",
        "/admin/v1/audit",
        "/v1/key",
        "/v1/generation",
    ] {
        assert!(
            doc["paths"][path].is_object(),
            "{path} missing from the document"
        );
    }
    assert!(doc["components"]["schemas"]["KeyView"]["properties"]["status"].is_object());
    let metrics = reqwest::get(format!("{}/metrics", gw.admin)).await.unwrap();
    assert_eq!(metrics.status(), 200);

    let (status, v) = call(&gw, "DELETE", "/admin/v1/workspaces", None).await;
    assert_eq!((status, code(&v)), (405, "method_not_allowed"));
    let (status, v) = call(&gw, "GET", "/admin/v1/nothing", None).await;
    assert_eq!((status, code(&v)), (404, "not_found"));
}

#[tokio::test]
async fn without_a_token_the_api_and_console_are_off_and_say_so() {
    let gw = Gateway::builder()
        .without_env("TOLLGATE_ADMIN_TOKEN")
        .start();
    let (status, v) = call(&gw, "GET", "/admin/v1/workspaces", None).await;
    assert_eq!((status, code(&v)), (404, "admin_disabled"), "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("TOLLGATE_ADMIN_TOKEN"));
    let (status, v) = call_as(
        &gw,
        None,
        "POST",
        "/admin/v1/session",
        Some(json!({"token": ""})),
    )
    .await;
    assert_eq!((status, code(&v)), (404, "admin_disabled"));
    let log = std::fs::read_to_string(&gw.log_file).unwrap();
    assert!(log.contains("admin API and console off"), "{log}");
}

#[tokio::test]
async fn workspaces_keys_and_credits_round_trip_with_an_audit_trail() {
    let gw = Gateway::builder().start();
    let (status, ws) = call(
        &gw,
        "POST",
        "/admin/v1/workspaces",
        Some(json!({"name": "acme"})),
    )
    .await;
    assert_eq!(status, 201, "{ws}");
    let id = ws["id"].as_str().unwrap().to_owned();
    let (status, v) = call(
        &gw,
        "POST",
        "/admin/v1/workspaces",
        Some(json!({"name": " "})),
    )
    .await;
    assert_eq!((status, code(&v)), (400, "invalid_request"));
    let (status, v) = call(
        &gw,
        "POST",
        "/admin/v1/workspaces",
        Some(json!({"nom": "x"})),
    )
    .await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");

    let path = format!("/admin/v1/workspaces/{id}");
    let (status, v) = call(&gw, "PATCH", &path, Some(json!({"name": "acme labs"}))).await;
    assert_eq!((status, v["name"].as_str()), (200, Some("acme labs")));
    let (status, v) = call(&gw, "GET", &path, None).await;
    assert_eq!((status, &v["balance"]), (200, &json!("0.0")));
    let (status, v) = call(&gw, "GET", "/admin/v1/workspaces/ws_nope", None).await;
    assert_eq!((status, code(&v)), (404, "not_found"));

    // Credit: exact decimals in and out.
    let credits = format!("{path}/credits");
    let body = json!({"amount_usd": "10.000000000001", "note": "first"});
    let (status, v) = call(&gw, "POST", &credits, Some(body)).await;
    assert_eq!(
        (status, &v["balance"]),
        (201, &json!("10.000000000001")),
        "{v}"
    );
    let (status, v) = call(&gw, "POST", &credits, Some(json!({"amount_usd": "-1"}))).await;
    assert_eq!(status, 400, "{v}");
    let (_, v) = call(&gw, "GET", &credits, None).await;
    assert_eq!(v["balance"], "10.000000000001");
    assert_eq!(v["data"][0]["note"], "first");

    // A key: the secret once, never again.
    let keys = format!("{path}/keys");
    let body = json!({"name": "ci", "spend_limit_usd": "5", "limit_reset": "daily"});
    let (status, created) = call(&gw, "POST", &keys, Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();
    let key_id = created["key"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["key"]["status"], "active");
    let (_, listed) = call(&gw, "GET", &keys, None).await;
    assert_eq!(listed["data"][0]["id"], key_id.as_str());
    assert_eq!(listed["data"][0]["spend_usd"], "0.0");
    assert_eq!(listed["data"][0]["spend_limit_usd"], "5.0");
    let (_, one_more) = call(&gw, "GET", &format!("{path}/keys?limit=1"), None).await;
    for text in [listed.to_string(), one_more.to_string()] {
        assert!(
            !text.contains(&secret) && !text.contains("secret"),
            "{text}"
        );
    }
    let ok = eventually(Duration::from_secs(5), || async {
        models_status(&gw, &secret).await.0 == 200
    });
    assert!(ok.await.is_some(), "the new key works on /v1/models");

    // Revoked: shown so, refused at once by every proxy.
    let (status, v) = call(
        &gw,
        "POST",
        &format!("/admin/v1/keys/{key_id}/revoke"),
        None,
    )
    .await;
    assert_eq!((status, &v["status"]), (200, &json!("revoked")), "{v}");
    let refused = eventually(Duration::from_secs(5), || async {
        let (status, v) = models_status(&gw, &secret).await;
        status == 401 && code(&v) == "invalid_key"
    });
    assert!(refused.await.is_some(), "a revoked key stops working");

    let (status, v) = call(&gw, "GET", &format!("/admin/v1/audit?workspace={id}"), None).await;
    assert_eq!(status, 200);
    let actions: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "key.revoke",
            "key.create",
            "credit.add",
            "workspace.rename",
            "workspace.create"
        ]
    );
    let rename = &v["data"][3];
    assert_eq!(rename["actor"], "admin-token");
    assert_eq!(
        (&rename["before"]["name"], &rename["after"]["name"]),
        (&json!("acme"), &json!("acme labs"))
    );
    assert!(
        !v.to_string().contains(&secret),
        "the audit log never holds a secret"
    );
}

#[tokio::test]
async fn rotation_revokes_at_once_or_after_a_grace_period() {
    let gw = Gateway::builder().start();
    let (_, ws) = call(
        &gw,
        "POST",
        "/admin/v1/workspaces",
        Some(json!({"name": "r"})),
    )
    .await;
    let keys = format!("/admin/v1/workspaces/{}/keys", ws["id"].as_str().unwrap());
    let (_, first) = call(&gw, "POST", &keys, Some(json!({"name": "svc"}))).await;
    let first_id = first["key"]["id"].as_str().unwrap();

    let rotate = format!("/admin/v1/keys/{first_id}/rotate");
    let (status, r) = call(&gw, "POST", &rotate, Some(json!({"grace_seconds": 3600}))).await;
    assert_eq!(status, 201, "{r}");
    assert_eq!(r["key"]["name"], "svc");
    assert_eq!(r["old"]["status"], "active");
    assert!(
        r["old"]["expires_at"].is_string(),
        "grace sets the old key's expiry: {r}"
    );
    let second = r["secret"].as_str().unwrap().to_owned();
    let second_id = r["key"]["id"].as_str().unwrap().to_owned();
    for secret in [first["secret"].as_str().unwrap(), &second] {
        let works = eventually(Duration::from_secs(5), || async {
            models_status(&gw, secret).await.0 == 200
        });
        assert!(
            works.await.is_some(),
            "both keys work during the grace period"
        );
    }

    let rotate = format!("/admin/v1/keys/{second_id}/rotate");
    let (status, r) = call(&gw, "POST", &rotate, None).await;
    assert_eq!(
        (status, &r["old"]["status"]),
        (201, &json!("revoked")),
        "{r}"
    );
    let refused = eventually(Duration::from_secs(5), || async {
        models_status(&gw, &second).await.0 == 401
    });
    assert!(
        refused.await.is_some(),
        "no grace: the old key stops at once"
    );
    let (status, v) = call(&gw, "POST", &rotate, None).await;
    assert_eq!(
        status, 409,
        "a key revoked by its rotation is not rotated again: {v}"
    );
}

#[tokio::test]
async fn pages_follow_their_cursors_without_gaps_or_repeats() {
    let gw = Gateway::builder().start();
    let mut made = Vec::new();
    for i in 0..5 {
        let (_, ws) = call(
            &gw,
            "POST",
            "/admin/v1/workspaces",
            Some(json!({"name": format!("w{i}")})),
        )
        .await;
        made.push(ws["id"].as_str().unwrap().to_owned());
    }
    let mut seen = Vec::new();
    let mut path = "/admin/v1/workspaces?limit=2".to_owned();
    loop {
        let (status, page) = call(&gw, "GET", &path, None).await;
        assert_eq!(status, 200, "{page}");
        let rows = page["data"].as_array().unwrap();
        assert!(rows.len() <= 2);
        seen.extend(rows.iter().map(|w| w["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/admin/v1/workspaces?limit=2&cursor={c}"),
            None => break,
        }
    }
    made.reverse();
    assert_eq!(seen, made, "newest first, each once");
    let (status, v) = call(&gw, "GET", "/admin/v1/workspaces?limit=500", None).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = call(&gw, "GET", "/admin/v1/workspaces?cursor=%%%", None).await;
    assert_eq!(status, 400, "{v}");
}

#[tokio::test]
async fn usage_is_listed_filtered_and_summed_per_day_and_model() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    for _ in 0..3 {
        let res = gw
            .chat(
                &key,
                json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}]}),
            )
            .await;
        assert_eq!(res.status(), 200);
    }
    let records = gw.usage_records(&ws, 3).await;
    assert_eq!(records.len(), 3);
    let usage = format!("/admin/v1/workspaces/{ws}/usage");
    let (status, page) = call(&gw, "GET", &format!("{usage}?limit=2"), None).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    assert!(page["next_cursor"].is_string());
    let (_, none) = call(&gw, "GET", &format!("{usage}?model=acme%2Fecho"), None).await;
    assert_eq!(none["data"], json!([]));
    let (_, all) = call(
        &gw,
        "GET",
        &format!("{usage}?model=google%2Fgemini-2.5-flash"),
        None,
    )
    .await;
    assert_eq!(all["data"].as_array().unwrap().len(), 3);
    let (_, later) = call(
        &gw,
        "GET",
        &format!("{usage}?from=2999-01-01T00:00:00Z"),
        None,
    )
    .await;
    assert_eq!(later["data"], json!([]));

    let (status, daily) = call(&gw, "GET", &format!("{usage}/daily"), None).await;
    assert_eq!(status, 200, "{daily}");
    let rows = daily["data"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{daily}");
    assert_eq!(
        (&rows[0]["model_id"], &rows[0]["requests"]),
        (&json!("google/gemini-2.5-flash"), &json!(3))
    );
    let cost: i128 = records
        .iter()
        .map(|r| pico(r["cost"].as_str().unwrap()))
        .sum();
    assert_eq!(
        pico(rows[0]["cost"].as_str().unwrap()),
        cost,
        "the rollup is exact"
    );
    let (status, v) = call(
        &gw,
        "GET",
        &format!("{usage}/daily?from=2020-01-01&to=2026-01-01"),
        None,
    )
    .await;
    assert_eq!(status, 400, "a range longer than a year is refused: {v}");
}

/// Exact decimal USD text → pico-USD.
fn pico(text: &str) -> i128 {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let frac = format!("{frac:0<12}");
    whole.parse::<i128>().unwrap() * 1_000_000_000_000 + frac.parse::<i128>().unwrap()
}

#[tokio::test]
async fn a_console_session_needs_its_csrf_token_to_change_anything() {
    let gw = Gateway::builder().start();
    let client = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", gw.admin);
    let res = client
        .post(url("/admin/v1/session"))
        .json(&json!({"token": "nope"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let res = client
        .post(url("/admin/v1/session"))
        .json(&json!({"token": ADMIN_TOKEN}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let cookie = res.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    let session = cookie.split(';').next().unwrap().to_owned();
    let csrf = res.json::<Value>().await.unwrap()["csrf_token"]
        .as_str()
        .unwrap()
        .to_owned();

    let get = client
        .get(url("/admin/v1/workspaces"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);
    let body = json!({"name": "from the console"});
    let forged = client
        .post(url("/admin/v1/workspaces"))
        .header("cookie", &session)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    let made = client
        .post(url("/admin/v1/workspaces"))
        .header("cookie", &session)
        .header("x-csrf-token", &csrf)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);
    let (_, audit) = call(&gw, "GET", "/admin/v1/audit", None).await;
    assert!(audit["data"][0]["actor"]
        .as_str()
        .unwrap()
        .starts_with("console:"));

    let out = client
        .delete(url("/admin/v1/session"))
        .header("cookie", &session)
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 200);
    assert!(out.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    let after = client
        .get(url("/admin/v1/workspaces"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 401, "signed out");

    let page = client.get(url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert!(page.text().await.unwrap().contains("/console/app.js"));
}

#[tokio::test]
async fn catalog_edits_reach_v1_models_and_the_audit_log() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .catalog_refresh("1s")
        .start();
    let (_, key) = gw.workspace_with_key();
    let model = "google/gemini-2.5-flash";
    assert!(gw.model_ids(&key).await.contains(&model.to_owned()));
    let path = "/admin/v1/catalog/models/google%2Fgemini-2.5-flash";
    let (status, v) = call(
        &gw,
        "PATCH",
        path,
        Some(json!({"active": false, "input_price": 0.35})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (&v["active"], &v["input_price"]),
        (&json!(false), &json!(0.35))
    );
    assert_eq!(
        v["aliases"],
        json!(["gemini-2.5-flash"]),
        "a price change keeps the aliases"
    );
    let gone = eventually(Duration::from_secs(5), || async {
        !gw.model_ids(&key).await.contains(&model.to_owned())
    });
    assert!(
        gone.await.is_some(),
        "a deactivated model leaves /v1/models"
    );
    let (_, catalog) = call(&gw, "GET", "/admin/v1/catalog", None).await;
    let row = catalog["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == model)
        .unwrap()
        .clone();
    assert_eq!(row["input_price"], json!(0.35));
    assert_eq!(row["aliases"], json!(["gemini-2.5-flash"]));
    let retired = catalog["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "google/gemini-2.0-flash")
        .unwrap();
    assert_eq!(
        (&retired["active"], &retired["shutdown"]),
        (&json!(false), &json!("2026-06-01")),
        "a retired model keeps its row and its date"
    );
    assert!(retired["source"].as_str().is_some_and(|s| !s.is_empty()));
    let (status, v) = call(&gw, "PATCH", path, Some(json!({"output_price": 10000.5}))).await;
    assert_eq!(status, 400, "a price above the catalog's bound: {v}");
    let route = format!("{path}/routes/0");
    let (status, v) = call(&gw, "PATCH", &route, Some(json!({"active": false}))).await;
    assert_eq!(
        (status, &v["routes"][0]["active"]),
        (200, &json!(false)),
        "{v}"
    );
    let (status, _) = call(
        &gw,
        "PATCH",
        &format!("{path}/routes/99"),
        Some(json!({"active": false})),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = call(&gw, "PATCH", path, Some(json!({"input_price": -1}))).await;
    assert_eq!(status, 400);
    let (_, audit) = call(&gw, "GET", "/admin/v1/audit?limit=2", None).await;
    assert_eq!(audit["data"][0]["action"], "catalog.route.update");
    assert_eq!(audit["data"][1]["action"], "catalog.model.update");
    assert_eq!(audit["data"][1]["before"]["input_price"], json!(0.3));
}

/// A webhook receiver answering each request with the next status of `statuses` (then 200),
/// keeping `(headers, body)` of each.
async fn receiver(statuses: Vec<u16>) -> (String, Arc<Mutex<Vec<(String, String)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let log = got.clone();
    tokio::spawn(async move {
        let mut statuses = statuses.into_iter();
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let (head, body) = loop {
                let n = sock.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break (String::new(), String::new());
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if body.len() >= len {
                        break (head.to_owned(), body.to_owned());
                    }
                }
            };
            log.lock().unwrap().push((head.to_ascii_lowercase(), body));
            let status = statuses.next().unwrap_or(200);
            // A redirect points elsewhere on the receiver: followed, it would be answered 200.
            let answer = format!(
                "HTTP/1.1 {status} X\r\nlocation: /elsewhere\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            let _ = sock.write_all(answer.as_bytes()).await;
        }
    });
    (url, got)
}

#[tokio::test]
async fn a_low_balance_sends_one_signed_webhook_retried_until_accepted() {
    // The receiver is on loopback: a private address, allowed here by the operator.
    let gw = Gateway::builder()
        .alerts("allow_private_webhooks: true")
        .start();
    let (url, got) = receiver(vec![500]).await;
    let (_, ws) = call(
        &gw,
        "POST",
        "/admin/v1/workspaces",
        Some(json!({"name": "a"})),
    )
    .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    call(
        &gw,
        "POST",
        &format!("/admin/v1/workspaces/{ws}/credits"),
        Some(json!({"amount_usd": "1"})),
    )
    .await;
    let alerts = format!("/admin/v1/workspaces/{ws}/alerts");
    let (status, v) = call(&gw, "PUT", &alerts, Some(json!({"webhook_url": "ftp://x"}))).await;
    assert_eq!(status, 400, "{v}");
    let body = json!({"webhook_url": url, "low_balance_usd": "5", "key_limit_percents": [80, 100]});
    let (status, settings) = call(&gw, "PUT", &alerts, Some(body)).await;
    assert_eq!(status, 200, "{settings}");
    let secret = settings["signing_secret"].as_str().unwrap().to_owned();

    let deliveries = format!("{alerts}/deliveries");
    let done = eventually(Duration::from_secs(10), || async {
        let (_, v) = call(&gw, "GET", &deliveries, None).await;
        v["data"]
            .as_array()
            .is_some_and(|d| d.iter().any(|x| x["delivered"] == true))
    });
    assert!(done.await.is_some(), "the webhook was delivered");
    tokio::time::sleep(Duration::from_millis(600)).await; // several more checks: no repeat
    let (_, v) = call(&gw, "GET", &deliveries, None).await;
    let attempts = v["data"].as_array().unwrap();
    assert_eq!(
        attempts.len(),
        2,
        "one failed attempt, then one delivered: {v}"
    );
    assert_eq!(
        (&attempts[1]["status"], &attempts[1]["attempt"]),
        (&json!("5xx"), &json!(1))
    );
    let result = |a: &Value| a["result"].as_str().unwrap_or_default().to_owned();
    assert!(
        result(&attempts[1]).starts_with("refused: non-2xx (5xx) in "),
        "{v}"
    );
    assert!(result(&attempts[0]).starts_with("delivered 2xx in "), "{v}");
    assert_eq!(attempts[0]["event_id"], attempts[1]["event_id"]);

    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 2);
    let (head, body) = &got[1];
    let event: Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        (&event["type"], &event["data"]["balance"]),
        (&json!("balance.low"), &json!("1.0"))
    );
    let sig = head
        .lines()
        .find_map(|l| l.strip_prefix("tollgate-signature: "))
        .unwrap();
    let t = sig.split(',').next().unwrap().trim_start_matches("t=");
    let want = tollgate::alerts::signature(&secret, t.parse().unwrap(), body.as_bytes());
    assert_eq!(sig, want, "signed with the workspace's secret");
}

#[tokio::test]
async fn an_admin_token_shorter_than_32_characters_stops_the_start() {
    let gw = Gateway::builder().build();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("-c")
        .arg(&gw.conf)
        .arg("serve")
        .env("TOLLGATE_ADMIN_TOKEN", "only-31-characters-long-xxxxxxx")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let admin: std::net::SocketAddr = gw.admin.trim_start_matches("http://").parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let serving = std::net::TcpStream::connect(admin).is_ok();
        if serving || std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the gateway started with a 31-character admin token");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("TOLLGATE_ADMIN_TOKEN") && stderr.contains("at least 32 characters"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("only-31"),
        "the token itself is never printed: {stderr}"
    );
}

/// An admin-listener client whose connections come from `source` (any 127.0.0.0/8 address
/// is loopback on Linux).
fn client_from(source: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(source))
        .build()
        .unwrap()
}

#[tokio::test]
async fn wrong_admin_tokens_are_logged_and_throttled_per_client_address() {
    let gw = Gateway::builder().capture_logs().start();
    let guesser = client_from([127, 0, 0, 1]);
    let url = |p: &str| format!("{}{p}", gw.admin);
    let mut answers = Vec::new();
    for i in 0..30 {
        let res = if i % 2 == 0 {
            guesser
                .get(url("/admin/v1/workspaces"))
                .bearer_auth(format!("guess-number-{i}"))
                .send()
                .await
                .unwrap()
        } else {
            guesser
                .post(url("/admin/v1/session"))
                .json(&json!({"token": format!("guess-number-{i}")}))
                .send()
                .await
                .unwrap()
        };
        let retry_after = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
        answers.push((res.status().as_u16(), retry_after));
    }
    let first_429 = answers.iter().position(|(s, _)| *s == 429);
    let Some(first_429) = first_429 else {
        panic!("30 wrong tokens from one address and never a 429: {answers:?}");
    };
    assert!(first_429 >= 3, "a few mistakes are forgiven: {answers:?}");
    assert!(answers[..first_429].iter().all(|(s, _)| *s == 401));
    for (status, retry_after) in &answers[first_429..] {
        assert_eq!(*status, 429, "{answers:?}");
        assert!(
            retry_after.is_some_and(|s| (1..=60).contains(&s)),
            "{answers:?}"
        );
    }
    // Throttled means throttled: the right token from that address waits too (no oracle).
    let res = guesser
        .get(url("/admin/v1/workspaces"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
    let v: Value = res.json().await.unwrap();
    assert_eq!(code(&v), "rate_limited", "{v}");
    // Another address is not held up.
    let operator = client_from([127, 0, 0, 2]);
    let res = operator
        .get(url("/admin/v1/workspaces"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    let log = std::fs::read_to_string(&gw.log_file).unwrap();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("admin sign-in failed"))
        .collect();
    assert!(failures.len() >= first_429, "each failure logged: {log}");
    assert!(
        failures.iter().all(|l| l.contains("127.0.0.1")),
        "{failures:?}"
    );
    assert!(!log.contains("guess-number"), "never the token given");
}

/// A new workspace with 1 USD credit and its alerts set to `url`: `(status, answer, id)`. With
/// `due`, a low-balance alert at 5 USD fires at once; without, nothing is ever sent.
async fn alert_to(gw: &Gateway, url: &str, due: bool) -> (u16, Value, String) {
    let (_, ws) = call(
        gw,
        "POST",
        "/admin/v1/workspaces",
        Some(json!({"name": "a"})),
    )
    .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let credits = format!("/admin/v1/workspaces/{ws}/credits");
    call(gw, "POST", &credits, Some(json!({"amount_usd": "1"}))).await;
    let mut body = json!({"webhook_url": url});
    if due {
        body["low_balance_usd"] = json!("5");
    }
    let alerts = format!("/admin/v1/workspaces/{ws}/alerts");
    let (status, v) = call(gw, "PUT", &alerts, Some(body)).await;
    (status, v, ws)
}

/// A workspace's delivery attempts once there are `n` (or whatever there is after 10 s).
async fn deliveries(gw: &Gateway, ws: &str, n: usize) -> Vec<Value> {
    let path = format!("/admin/v1/workspaces/{ws}/alerts/deliveries");
    let mut got = Vec::new();
    for _ in 0..100 {
        let (_, v) = call(gw, "GET", &path, None).await;
        got = v["data"].as_array().cloned().unwrap_or_default();
        if got.len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    got
}

#[tokio::test]
async fn webhooks_to_private_addresses_are_refused_when_set() {
    let gw = Gateway::builder().start();
    for url in [
        "http://127.0.0.1:8081/status",
        "http://[::1]/hook",
        "http://0x7f000001/hook",
        "http://2130706433/hook",
        "http://127.1/hook",
        "http://0.0.0.0/hook",
        "http://10.1.2.3/hook",
        "http://172.16.0.1/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/hook",
        "http://[fe80::1]/hook",
        "http://[fd00::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[::ffff:10.0.0.1]/hook",
        "http://224.0.0.1/hook",
        "http://255.255.255.255/hook",
    ] {
        let (status, v, _) = alert_to(&gw, url, true).await;
        assert_eq!((status, code(&v)), (400, "invalid_request"), "{url}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("allow_private_webhooks"),
            "{url}: {message}"
        );
    }
    let (status, v, _) = alert_to(&gw, "https://hooks.example.com/tollgate", false).await;
    assert_eq!(status, 200, "a public host is fine: {v}");
}

#[tokio::test]
async fn webhooks_resolving_to_private_addresses_are_refused_when_delivered() {
    let gw = Gateway::builder().start();
    let (url, got) = receiver(vec![]).await;
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/hook");
    // Set by name, it passes; delivered, the name resolves to loopback and is refused.
    let (status, v, by_name) = alert_to(&gw, &format!("http://localhost:{port}/hook"), true).await;
    assert_eq!(status, 200, "{v}");
    // Stored directly (as before this check existed): literal addresses in any spelling.
    let store = tollgate::store::open(&gw.store_url).await.unwrap();
    let mut literal = Vec::new();
    for host in ["127.0.0.1", "0x7f000001", "[::1]"] {
        let (_, _, ws) = alert_to(&gw, "https://hooks.example.com/x", false).await;
        let mut settings = store.get_alerts(&ws).await.unwrap().unwrap();
        settings.webhook_url = format!("http://{host}:{port}/hook");
        settings.low_balance = Some(tollgate::money::Usd::from_pico(5_000_000_000_000));
        store.put_alerts(&settings, None).await.unwrap();
        literal.push(ws);
    }
    for ws in std::iter::once(&by_name).chain(&literal) {
        let attempts = deliveries(&gw, ws, 1).await;
        assert!(!attempts.is_empty(), "{ws}: no attempt recorded");
        for a in &attempts {
            assert_eq!(a["delivered"], false);
            assert_eq!(a["result"], "refused: address not allowed", "{a}");
        }
    }
    assert!(
        got.lock().unwrap().is_empty(),
        "nothing reached the receiver"
    );
}

#[tokio::test]
async fn webhook_redirects_are_not_followed_and_failures_are_not_quoted() {
    let gw = Gateway::builder()
        .alerts("allow_private_webhooks: true")
        .start();
    let (url, got) = receiver(vec![302, 307, 301]).await;
    let (status, v, redirected) = alert_to(&gw, &url, true).await;
    assert_eq!(status, 200, "{v}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let (_, _, refused) = alert_to(&gw, &nobody, true).await;

    let attempts = deliveries(&gw, &redirected, 3).await;
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    for a in &attempts {
        assert_eq!(
            (&a["delivered"], &a["status"]),
            (&json!(false), &json!("3xx"))
        );
        let result = a["result"].as_str().unwrap();
        assert!(result.starts_with("refused: non-2xx (3xx) in "), "{a}");
        assert!(result.ends_with(" ms"), "{a}");
    }
    let paths: Vec<String> = got
        .lock()
        .unwrap()
        .iter()
        .map(|(head, _)| head.lines().next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(paths, ["post /hook http/1.1"; 3], "never /elsewhere");

    let attempts = deliveries(&gw, &refused, 3).await;
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    for a in &attempts {
        assert_eq!(a["result"], "failed: connection error", "{a}");
        assert_eq!(a["status"], Value::Null);
        assert!(a.get("error").is_none(), "no raw error: {a}");
    }
}

/// Like `call`, with the body sent as this exact text (a JSON number that a `Value` would
/// round).
async fn call_raw(gw: &Gateway, path: &str, body: &str) -> (u16, Value) {
    let res = reqwest::Client::new()
        .post(format!("{}{path}", gw.admin))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn workspace(gw: &Gateway, name: &str) -> String {
    let body = Some(json!({ "name": name }));
    let (status, ws) = call(gw, "POST", "/admin/v1/workspaces", body).await;
    assert_eq!(status, 201, "{ws}");
    ws["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn rotation_refuses_a_huge_grace_a_second_rotation_and_races() {
    let gw = Gateway::builder().start();
    let ws = workspace(&gw, "r").await;
    let keys = format!("/admin/v1/workspaces/{ws}/keys");
    let (_, first) = call(&gw, "POST", &keys, Some(json!({"name": "svc"}))).await;
    let id = first["key"]["id"].as_str().unwrap().to_owned();
    let rotate = format!("/admin/v1/keys/{id}/rotate");

    for grace in [10_000_000_000_000u64, 30 * 86_400 + 1] {
        let body = Some(json!({ "grace_seconds": grace }));
        let (status, v) = call(&gw, "POST", &rotate, body).await;
        assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("grace_seconds"));
    }
    let (_, listed) = call(&gw, "GET", &keys, None).await;
    assert_eq!(
        listed["data"].as_array().unwrap().len(),
        1,
        "no new key: {listed}"
    );
    assert_eq!(
        listed["data"][0]["expires_at"],
        Value::Null,
        "old key unchanged"
    );
    let (_, log) = call(&gw, "GET", &format!("/admin/v1/audit?workspace={ws}"), None).await;
    assert_eq!(
        log["data"].as_array().unwrap().len(),
        2,
        "nothing audited: {log}"
    );

    // Six at once: one replacement, five conflicts.
    let grace = Some(json!({ "grace_seconds": 3600 }));
    let calls = (0..6).map(|_| call(&gw, "POST", &rotate, grace.clone()));
    let answers = futures_util::future::join_all(calls).await;
    let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{answers:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        5,
        "{answers:?}"
    );
    let (_, listed) = call(&gw, "GET", &keys, None).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 2);

    // In its grace period the old key is not rotated again: its replacement is.
    let (status, v) = call(&gw, "POST", &rotate, None).await;
    assert_eq!((status, code(&v)), (409, "conflict"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("replacement"),
        "{v}"
    );
}

#[tokio::test]
async fn amounts_are_exact_and_names_are_plain_text() {
    let gw = Gateway::builder().start();
    let ws = workspace(&gw, "exact").await;
    let credits = format!("/admin/v1/workspaces/{ws}/credits");

    // A JSON number is read from its text: never rounded to a double.
    let (status, v) = call_raw(&gw, &credits, r#"{"amount_usd": 1.0000000000000001}"#).await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("decimal places"),
        "{v}"
    );
    let (status, v) = call_raw(&gw, &credits, r#"{"amount_usd": 1.000000000001}"#).await;
    assert_eq!(
        (status, &v["balance"]),
        (201, &json!("1.000000000001")),
        "{v}"
    );
    let (status, v) = call_raw(&gw, &credits, r#"{"amount_usd": 1e2}"#).await;
    assert_eq!(status, 400, "{v}");

    // Past the largest balance: a 400 that says so, nothing written.
    let (status, v) = call_raw(&gw, &credits, r#"{"amount_usd": "9223372"}"#).await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("balance"),
        "{v}"
    );
    let (_, v) = call(&gw, "GET", &credits, None).await;
    assert_eq!(v["balance"], "1.000000000001");

    let keys = format!("/admin/v1/workspaces/{ws}/keys");
    let body = r#"{"spend_limit_usd": 2.000000000001, "limit_reset": "daily"}"#;
    let (status, v) = call_raw(&gw, &keys, body).await;
    assert_eq!(
        (status, &v["key"]["spend_limit_usd"]),
        (201, &json!("2.000000000001")),
        "{v}"
    );
    let alerts = format!("/admin/v1/workspaces/{ws}/alerts");
    let body = r#"{"webhook_url": "http://127.0.0.1:9/", "low_balance_usd": 3.0000000000000001}"#;
    let res = reqwest::Client::new()
        .put(format!("{}{alerts}", gw.admin))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status().as_u16(),
        400,
        "low_balance_usd is not rounded either"
    );

    // A day at the start of time: refused, not a panic.
    let (status, v) = call(
        &gw,
        "GET",
        &format!("/admin/v1/workspaces/{ws}/usage/daily?to=-262143-01-05"),
        None,
    )
    .await;
    assert_eq!(status, 400, "{v}");

    // Control characters and bidi overrides: refused, the field named.
    for bad in ["\u{1b}[2J", "line\nbreak", "\u{202e}gpj.exe"] {
        let body = Some(json!({ "name": bad }));
        let (status, v) = call(&gw, "POST", "/admin/v1/workspaces", body.clone()).await;
        assert_eq!(status, 400, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().starts_with("name:"),
            "{v}"
        );
        let (status, _) = call(&gw, "POST", &keys, body).await;
        assert_eq!(status, 400);
        let body = Some(json!({ "amount_usd": "1", "note": bad }));
        let (status, v) = call(&gw, "POST", &credits, body).await;
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("note:"),
            "{v}"
        );
        assert_eq!(status, 400);
    }
}

/// Signs in over HTTP from `client`: the answer's status and, when signed in, the cookie pair to
/// send back and the CSRF token.
async fn sign_in(gw: &Gateway, client: &reqwest::Client) -> (u16, Option<(String, String)>) {
    let res = client
        .post(format!("{}/admin/v1/session", gw.admin))
        .json(&json!({"token": ADMIN_TOKEN}))
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let cookie = res
        .headers()
        .get("set-cookie")
        .map(|c| c.to_str().unwrap().split(';').next().unwrap().to_owned());
    let body: Value = res.json().await.unwrap_or(Value::Null);
    let csrf = body["csrf_token"].as_str().map(str::to_owned);
    (status, cookie.zip(csrf))
}

/// What the admin listener answers a console session's request.
async fn as_session(
    gw: &Gateway,
    (cookie, csrf): &(String, String),
    method: &str,
    path: &str,
    body: Option<Value>,
) -> u16 {
    let mut req = reqwest::Client::new()
        .request(method.parse().unwrap(), format!("{}{path}", gw.admin))
        .header("cookie", cookie)
        .header("x-csrf-token", csrf);
    if let Some(b) = body {
        req = req.json(&b);
    }
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_session_survives_a_graceful_upgrade_and_a_restart() {
    let mut gw = Gateway::builder().start();
    let (status, session) = sign_in(&gw, &reqwest::Client::new()).await;
    assert_eq!(status, 200);
    let session = session.expect("a cookie and a CSRF token");
    assert_eq!(
        as_session(&gw, &session, "GET", "/admin/v1/workspaces", None).await,
        200
    );

    tokio::task::block_in_place(|| gw.upgrade());
    let made = Some(json!({"name": "after the upgrade"}));
    assert_eq!(
        as_session(&gw, &session, "POST", "/admin/v1/workspaces", made).await,
        201,
        "the new process knows the session"
    );
    tokio::task::block_in_place(|| {
        gw.terminate();
        gw.start();
    });
    assert_eq!(
        as_session(&gw, &session, "GET", "/admin/v1/session", None).await,
        200
    );
    let (_, audit) = call(&gw, "GET", "/admin/v1/audit", None).await;
    let actions: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions[..2],
        ["workspace.create", "session.sign_in"],
        "{actions:?}"
    );

    // Signing out ends it for every process, this one and any later.
    assert_eq!(
        as_session(&gw, &session, "DELETE", "/admin/v1/session", None).await,
        200
    );
    tokio::task::block_in_place(|| gw.upgrade());
    assert_eq!(
        as_session(&gw, &session, "GET", "/admin/v1/workspaces", None).await,
        401
    );
}

#[tokio::test]
async fn a_console_session_ends_after_its_idle_time() {
    let gw = Gateway::builder()
        .console("session_idle: 5s, session_max: 1h")
        .start();
    let (_, session) = sign_in(&gw, &reqwest::Client::new()).await;
    let session = session.expect("signed in");
    assert_eq!(
        as_session(&gw, &session, "GET", "/admin/v1/session", None).await,
        200
    );
    // Waits out the idle time (no budget: the session must have ended by then).
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    assert_eq!(
        as_session(&gw, &session, "GET", "/admin/v1/session", None).await,
        401
    );
    let (status, _) = call(&gw, "GET", "/admin/v1/workspaces", None).await;
    assert_eq!(status, 200, "the token itself does not expire");
}

#[tokio::test]
async fn sign_ins_are_rate_limited_per_client_address() {
    let gw = Gateway::builder().console("sign_ins_per_minute: 3").start();
    let operator = client_from([127, 0, 0, 1]);
    for _ in 0..3 {
        assert_eq!(sign_in(&gw, &operator).await.0, 200);
    }
    let res = operator
        .post(format!("{}/admin/v1/session", gw.admin))
        .json(&json!({"token": ADMIN_TOKEN}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
    let retry_after: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=20).contains(&retry_after), "{retry_after}");
    let v: Value = res.json().await.unwrap();
    assert_eq!(code(&v), "rate_limited", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("sign-in"),
        "{v}"
    );
    // Another address signs in; the token still works on the API from the limited one.
    assert_eq!(sign_in(&gw, &client_from([127, 0, 0, 2])).await.0, 200);
    let res = operator
        .get(format!("{}/admin/v1/workspaces", gw.admin))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}
