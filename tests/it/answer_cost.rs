//! The cost in every answer: buffered answers and the last usage object of streams carry
//! `usage.cost` (the ledger's debit, to the pico) and `usage.generation_id` (the usage record's
//! id), on every door and family; buffered answers also in `x-tollgate-cost`.

use serde_json::{json, Value};

use crate::billing::pico;
use crate::harness::{FakeUpstream, Gateway, Sim};

/// One request as a client sends it: the door's path, its body, whether it streams.
struct Case {
    path: &'static str,
    body: Value,
}

fn cases(model: &str) -> Vec<Case> {
    let chat = json!({"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "what does this cost"}]});
    let responses =
        json!({"model": model, "max_output_tokens": 50, "input": "what does this cost"});
    let mut out = Vec::new();
    for path in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
        let body = if path == "/v1/responses" {
            responses.clone()
        } else {
            chat.clone()
        };
        for stream in [false, true] {
            let mut body = body.clone();
            body["stream"] = json!(stream);
            out.push(Case { path, body });
        }
    }
    out
}

/// The JSON number text after the last `"cost":` of `text` (a JSON reader's double would lose
/// digits the test must compare).
pub(crate) fn cost_text(text: &str) -> String {
    let at = text
        .rfind("\"cost\":")
        .unwrap_or_else(|| panic!("no cost in {text}"));
    text[at + 7..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect()
}

/// The generation id after the last `"generation_id":` of `text`.
fn generation_id(text: &str) -> String {
    let at = text
        .rfind("\"generation_id\":\"")
        .unwrap_or_else(|| panic!("no generation_id in {text}"));
    text[at + 17..].split('"').next().unwrap().to_owned()
}

async fn send(gw: &Gateway, key: &str, case: &Case) -> (Option<String>, String) {
    let res = reqwest::Client::new()
        .post(gw.url(case.path))
        .bearer_auth(key)
        .json(&case.body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{} {}", case.path, case.body);
    let header = res
        .headers()
        .get("x-tollgate-cost")
        .map(|v| v.to_str().unwrap().to_owned());
    (header, res.text().await.unwrap())
}

/// The debit the ledger holds for usage record `id`, once written.
async fn debit_of(gw: &Gateway, ws: &str, id: &str) -> i128 {
    for _ in 0..50 {
        let ledger = gw.cli_json(&["ledger", "--workspace", ws]);
        let found = ledger["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["usage_id"] == id)
            .map(|e| pico(&e["amount"]));
        if let Some(amount) = found {
            return amount;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("no debit for {id}")
}

#[tokio::test]
async fn every_answer_carries_the_exact_debit_and_its_record_id() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    for model in ["google/gemini-2.5-flash", "anthropic/claude-sonnet-4-5"] {
        for case in cases(model) {
            let (header, text) = send(&gw, &key, &case).await;
            let what = format!("{model} {} stream={}", case.path, case.body["stream"]);
            let cost = cost_text(&text);
            let id = generation_id(&text);
            let debit = debit_of(&gw, &ws, &id).await;
            assert!(debit < 0, "{what}: a debit");
            assert_eq!(
                pico(&json!(cost)),
                -debit,
                "{what}: the answer's cost is the debit"
            );
            let streamed = case.body["stream"] == json!(true);
            if streamed {
                assert!(
                    header.is_none(),
                    "{what}: headers went before the cost was known"
                );
            } else {
                assert_eq!(header.as_deref(), Some(cost.as_str()), "{what}: the header");
                let answer: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(
                    answer["id"],
                    id.as_str(),
                    "{what}: the answer's id is the record's"
                );
            }
        }
    }
    let verify = gw.cli_raw(&["ledger", "verify"]);
    assert!(verify.status.success());
}

#[tokio::test]
async fn an_embeddings_answer_carries_its_cost() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let res = reqwest::Client::new()
        .post(gw.url("/v1/embeddings"))
        .bearer_auth(&key)
        .json(&json!({"model": "google/text-embedding-004", "input": ["one", "two"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let header = res.headers()["x-tollgate-cost"]
        .to_str()
        .unwrap()
        .to_owned();
    let text = res.text().await.unwrap();
    let debit = debit_of(&gw, &ws, &generation_id(&text)).await;
    assert_eq!(pico(&json!(cost_text(&text))), -debit);
    assert_eq!(header, cost_text(&text));
}

#[tokio::test]
async fn an_openai_compatible_answer_carries_its_cost() {
    let upstream = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&upstream).start();
    let (ws, key) = gw.workspace_with_key();
    for stream in [false, true] {
        let case = Case {
            path: "/v1/chat/completions",
            body: json!({"model": "acme/echo", "stream": stream, "messages": [{"role": "user", "content": "price this"}]}),
        };
        let (header, text) = send(&gw, &key, &case).await;
        let debit = debit_of(&gw, &ws, &generation_id(&text)).await;
        assert!(debit < 0, "priced");
        assert_eq!(pico(&json!(cost_text(&text))), -debit, "stream={stream}");
        assert_eq!(header.is_some(), !stream);
    }
}
