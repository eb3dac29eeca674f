//! Local endpoints, authentication and the gateway's own errors.

use serde_json::{json, Value};

use crate::harness::{FakeUpstream, Gateway, Sim};

async fn get(url: String, key: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(k) = key {
        req = req.header("authorization", k);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

fn assert_error(body: &Value, ty: &str, code: &str) {
    assert_eq!(body["error"]["type"], ty, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn health_is_public_and_local() {
    let gw = Gateway::builder().start();
    let (status, body) = get(gw.url("/health"), None).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"status": "ok"}));
    let (status, body) = get(format!("{}/health", gw.admin), None).await;
    assert_eq!(
        (status, body),
        (200, json!({"status": "ok"})),
        "admin listener answers too"
    );
}

#[tokio::test]
async fn models_list_has_the_specified_shape() {
    // Credentials for every route kind: a model is listed only while it can be served.
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let (status, body) = get(gw.url("/v1/models"), Some(&format!("Bearer {key}"))).await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "list");
    let data = body["data"].as_array().unwrap();
    assert!(data.len() >= 9, "default catalog: {body}");
    for m in data {
        let keys: Vec<&str> = m.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys.len(),
            5,
            "exactly id/object/created/owned_by/pricing: {m}"
        );
        assert_eq!(m["object"], "model");
        assert_eq!(m["created"], 1704067200);
        assert!(m["id"].as_str().unwrap().contains('/'));
        assert!(m["owned_by"].is_string());
        for field in ["input", "output"] {
            assert!(m["pricing"][field].is_number(), "{m}");
        }
        for field in ["cache_read", "cache_write"] {
            assert!(
                m["pricing"][field].is_number() || m["pricing"][field].is_null(),
                "{m}"
            );
        }
    }
    let embed = data
        .iter()
        .find(|m| m["id"] == "google/text-embedding-004")
        .unwrap();
    assert_eq!(
        embed["pricing"],
        json!({"input": 0.025, "output": 0.0, "cache_read": null, "cache_write": null})
    );
    let sonnet = data
        .iter()
        .find(|m| m["id"] == "anthropic/claude-sonnet-4-5")
        .unwrap();
    assert_eq!(sonnet["owned_by"], "anthropic");
    assert_eq!(
        sonnet["pricing"],
        json!({"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75})
    );
}

#[tokio::test]
async fn every_auth_failure_has_its_envelope() {
    let gw = Gateway::builder().start();
    let (ws, key) = gw.workspace_with_key();
    let models = gw.url("/v1/models");

    for header in [
        None,
        Some("Basic abc"),
        Some("Bearer"),
        Some("Bearer "),
        Some(key.as_str()),
    ] {
        let (status, body) = get(models.clone(), header).await;
        assert_eq!(status, 401, "{header:?}");
        assert_error(&body, "authentication_error", "missing_auth");
    }

    let (status, body) = get(models.clone(), Some("Bearer sk-tg-not-a-real-key")).await;
    assert_eq!(status, 401);
    assert_error(&body, "authentication_error", "invalid_key");
    assert_eq!(body["error"]["message"], "invalid api key");

    let expired = gw.key(&ws, &["--expires-at", "2020-01-01T00:00:00Z"]);
    let revoked = gw.key(&ws, &[]);
    gw.cli(&["key", "revoke", &gw.key_id(&ws, &revoked)]);
    let gw2 = {
        // Restart so the keys come from the initial load rather than the change feed.
        let mut g = gw;
        g.stop();
        g.start();
        g
    };
    let (status, body) = get(gw2.url("/v1/models"), Some(&format!("Bearer {expired}"))).await;
    assert_eq!(status, 401);
    assert_error(&body, "authentication_error", "expired_key");
    assert_eq!(body["error"]["message"], "api key has expired");

    let (status, body) = get(gw2.url("/v1/models"), Some(&format!("Bearer {revoked}"))).await;
    assert_eq!(status, 401);
    assert_error(&body, "authentication_error", "invalid_key");

    let (status, _) = get(gw2.url("/v1/models"), Some(&format!("Bearer {key}"))).await;
    assert_eq!(status, 200, "the untouched key still works");

    // Chat is gated the same way, before the body is even looked at.
    let res = reqwest::Client::new()
        .post(gw2.url("/v1/chat/completions"))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
}

#[tokio::test]
async fn gateway_errors_are_envelopes_with_the_right_status() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder()
        .fake_openai(&sim)
        .max_body("64KiB")
        .start();
    let (_, key) = gw.workspace_with_key();
    let client = reqwest::Client::new();
    let post = |path: &str, body: String| {
        client
            .post(gw.url(path))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let res = post(
        "/v1/chat/completions",
        json!({"model": "nope/model", "messages": [{"role": "user", "content": "hi"}]}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert_error(&body, "invalid_request_error", "model_not_found");
    assert_eq!(body["error"]["message"], "model \"nope/model\" not found");

    for bad in [
        "{",
        "[]",
        "{\"messages\":[]}",
        "{\"model\":\"acme/echo\"}",
        "{\"model\":\"acme/echo\",\"messages\":\"x\"}",
    ] {
        let res = post("/v1/chat/completions", bad.to_owned()).await.unwrap();
        assert_eq!(res.status(), 400, "{bad}");
        assert_error(
            &res.json().await.unwrap(),
            "invalid_request_error",
            "invalid_request_error",
        );
    }

    let huge = format!(
        "{{\"model\":\"acme/echo\",\"messages\":[{{\"role\":\"user\",\"content\":\"{}\"}}]}}",
        "x".repeat(70 * 1024)
    );
    let res = post("/v1/chat/completions", huge).await.unwrap();
    assert_eq!(res.status(), 413);
    assert_error(
        &res.json().await.unwrap(),
        "invalid_request_error",
        "request_too_large",
    );

    let res = post(
        "/v1/embeddings",
        json!({"model": "acme/echo", "input": "x"}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert_error(&body, "invalid_request_error", "embeddings_unsupported");
    assert_eq!(
        body["error"]["message"],
        "model \"acme/echo\" does not support embeddings"
    );

    let res = post(
        "/v1/chat/completions",
        json!({"model": "acme/embed", "messages": [{"role": "user", "content": "x"}]}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 400, "an embedding model is not a chat model");

    let res = client
        .get(gw.url("/v1/nothing-here"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    assert_error(
        &res.json().await.unwrap(),
        "invalid_request_error",
        "not_found",
    );

    let res = client
        .get(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers()["allow"], "POST");
    assert_error(
        &res.json().await.unwrap(),
        "invalid_request_error",
        "method_not_allowed",
    );

    let res = client
        .delete(gw.url("/v1/models"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);

    assert!(
        sim.requests().is_empty(),
        "no failed request reached the upstream"
    );
}
