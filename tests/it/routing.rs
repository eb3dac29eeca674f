//! Route choice: among a model's routes, those whose credentials this gateway has; the one a
//! request needs (flex → Vertex global); then priority.

use serde_json::{json, Value};

use crate::harness::{Gateway, Sim};

fn hello(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn with_vertex_credentials_only_gemini_models_answer_through_vertex() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .without_env("TEST_GEMINI_KEY")
        .start();
    let (_, key) = gw.workspace_with_key();
    // The default catalog lists the Developer API route first; it has no key here.
    let res = gw.chat(&key, hello("google/gemini-2.5-flash")).await;
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let sent = sim.requests().await.pop().unwrap();
    assert!(
        sent["route"].as_str().unwrap().starts_with("vertex."),
        "served by Vertex: {}",
        sent["route"]
    );
    let ready: Value = reqwest::get(format!("{}/ready", gw.admin))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        ready["problems"].to_string().contains("gemini-api"),
        "readiness still names the unconfigured route kind: {ready}"
    );
}

/// Queues `fault` for the next `count` requests of a simulator surface.
async fn queue_fault(sim: &Sim, fault: &str, surface: &str, count: u64) {
    let res = reqwest::Client::new()
        .post(format!("{}/_sim/faults", sim.url))
        .json(&json!({"fault": fault, "surface": surface, "count": count}))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
}

/// The route of the newest usage record of a workspace.
fn billed_route(gw: &Gateway, ws: &str) -> Value {
    let records = gw.cli_json(&["usage", "--workspace", ws]);
    let records = records.as_array().unwrap();
    assert_eq!(
        records.len(),
        1,
        "only the attempt that answered is billed: {records:?}"
    );
    records[0]["route"].clone()
}

#[tokio::test]
async fn a_route_refusing_connections_fails_over_to_the_next() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let file = gw.dir.path().join("flaky.yaml");
    std::fs::write(
        &file,
        format!(
            "models:\n  - {{id: flaky/gemini, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash, profile: gemini-2.5-flash, input_price: 1, output_price: 1}}\n\
             routes:\n  - {{model_id: flaky/gemini, kind: gemini-api, base_url: \"http://127.0.0.1:9\", priority: 0}}\n\
             \x20 - {{model_id: flaky/gemini, kind: vertex, region: us-central1, base_url: \"{}\", priority: 10}}\n",
            sim.url
        ),
    )
    .unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    let (ws, key) = gw.workspace_with_key();
    let mut status = 0;
    for _ in 0..50 {
        let res = gw.chat(&key, hello("flaky/gemini")).await;
        status = res.status().as_u16();
        if status != 400 {
            break; // the model is in the catalog snapshot
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "answered by the second route");
    assert_eq!(billed_route(&gw, &ws), "vertex");
}

#[tokio::test]
async fn throttling_and_server_errors_fail_over_and_the_answering_route_is_billed() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    // google/gemini-2.5-flash: Developer API first, then Vertex regional, then global.
    queue_fault(&sim, "429", "gemini", 1).await;
    let res = gw.chat(&key, hello("google/gemini-2.5-flash")).await;
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    assert_eq!(billed_route(&gw, &ws), "vertex");
    let routes: Vec<Value> = sim
        .requests()
        .await
        .iter()
        .map(|r| r["route"].clone())
        .collect();
    assert_eq!(
        routes.len(),
        2,
        "one failed attempt, one answer: {routes:?}"
    );
}

#[tokio::test]
async fn when_every_route_fails_the_client_gets_the_upstreams_status_throttling_first() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    queue_fault(&sim, "503", "any", 3).await;
    let res = gw.chat(&key, hello("google/gemini-2.5-flash")).await;
    assert_eq!(res.status(), 503, "three routes, three 503s");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "upstream_error");
    // A throttled attempt among failures: the client is told to retry, as the SDKs expect.
    queue_fault(&sim, "429", "gemini", 1).await;
    queue_fault(&sim, "503", "vertex", 2).await;
    let res = gw.chat(&key, hello("google/gemini-2.5-flash")).await;
    assert_eq!(res.status(), 429);
    let v: Value = res.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("retry after"),
        "Google's RetryInfo is relayed: {message}"
    );
    assert_eq!(
        sim.requests().await.len(),
        6,
        "three attempts each, no more"
    );
    let records = gw.cli_json(&["usage", "--workspace", &ws]);
    assert_eq!(records, json!([]), "failed attempts bill nothing");
}
