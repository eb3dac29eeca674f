//! What operators and clients see of a request: its `x-request-id` on every answer (the
//! client's own when it is a plain token, else the completion id, else one the gateway made
//! up), in the access log and on the usage record.

use serde_json::{json, Value};

use crate::harness::{Gateway, Sim};

fn hello(stream: bool) -> Value {
    json!({"model": "google/gemini-2.5-flash", "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]})
}

async fn post(gw: &Gateway, key: &str, id: Option<&str>, body: Value) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body);
    if let Some(id) = id {
        req = req.header("x-request-id", id);
    }
    req.send().await.unwrap()
}

async fn get(gw: &Gateway, path: &str, key: &str) -> (u16, Value) {
    let res = reqwest::Client::new()
        .get(gw.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap())
}

fn request_id(res: &reqwest::Response) -> String {
    res.headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn every_answer_carries_the_request_id_and_the_record_keeps_it() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).capture_logs().start();
    let (ws, key) = gw.workspace_with_key();
    for stream in [false, true] {
        let id = format!("trace-{stream}.1");
        let res = post(&gw, &key, Some(&id), hello(stream)).await;
        assert_eq!(res.status(), 200);
        assert_eq!(request_id(&res), id, "stream: {stream}");
    }
    // Errors too: before authentication, and an upstream failure.
    let res = post(&gw, "sk-tg-wrong", Some("bad-key.1"), hello(false)).await;
    assert_eq!(
        (res.status().as_u16(), request_id(&res)),
        (401, "bad-key.1".into())
    );
    let res = reqwest::get(gw.url("/v1/nope")).await.unwrap();
    assert_eq!(res.status(), 404);
    assert!(
        request_id(&res).starts_with("req_"),
        "made up when none was sent"
    );
    // Not a plain token: never echoed; the completion id names the request instead.
    let res = post(&gw, &key, Some("a b<script>"), hello(false)).await;
    let made_up = request_id(&res);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["id"], made_up.as_str());
    let ids: Vec<String> = gw
        .usage_records(&ws, 3)
        .await
        .iter()
        .map(|r| r["request_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    for id in ["trace-false.1", "trace-true.1", made_up.as_str()] {
        assert!(
            ids.iter().any(|i| i == id),
            "{id} on a usage record: {ids:?}"
        );
    }
    let log = std::fs::read_to_string(gw.log_file.as_ref().unwrap()).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("tollgate::access") && l.contains("trace-true.1")),
        "in the access log"
    );
}

#[tokio::test]
async fn a_client_reads_its_own_generations_and_key_unbilled_and_ungated() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let res = post(&gw, &key, None, hello(false)).await;
    let id = request_id(&res);
    assert!(id.starts_with("chatcmpl-"), "{id}");
    let generation = format!("/v1/generation?id={id}");
    assert_eq!(gw.usage_records(&ws, 1).await.len(), 1);
    let (status, v) = get(&gw, &generation, &key).await;
    assert_eq!(status, 200, "{v}");
    let g = &v["data"];
    assert_eq!(g["id"], id.as_str());
    assert_eq!(g["model_id"], "google/gemini-2.5-flash");
    assert_eq!(g["route"], "gemini-api");
    assert_eq!(g["outcome"], "complete");
    assert!(
        g["input_tokens"].as_u64() > Some(0) && g["cost"].is_string(),
        "{g}"
    );
    // Another workspace cannot see it.
    let (_, other) = gw.workspace_with_key();
    let (status, v) = get(&gw, &generation, &other).await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (404, &json!("generation_not_found"))
    );
    // Neither lookup is billed or gated: a workspace without credit still reads its own.
    let empty = gw.workspace();
    let broke = gw.key(&empty, &[]);
    let (status, v) = get(&gw, "/v1/key", &broke).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["workspace"]["credit_usd"], "0.0");
    let (status, _) = get(&gw, "/v1/generation?id=chatcmpl-none", &broke).await;
    assert_eq!(status, 404, "not 402");
    let (status, v) = get(&gw, "/v1/key", &key).await;
    assert_eq!(status, 200);
    assert_eq!(v["id"].as_str(), Some(gw.key_id(&ws, &key).as_str()));
    assert!(!v.to_string().contains(&key), "never the secret");
    assert_eq!(gw.usage_records(&ws, 1).await.len(), 1, "nothing billed");
    let (status, v) = get(&gw, "/v1/key", "sk-tg-nope").await;
    assert_eq!((status, &v["error"]["code"]), (401, &json!("invalid_key")));
}
