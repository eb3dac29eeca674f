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
