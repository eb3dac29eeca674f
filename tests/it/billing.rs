//! Billing end to end: the gates before any upstream call, exact usage records and debits,
//! spend windows per key, and two gateways sharing one PostgreSQL agreeing to the last pico.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{eventually, FakeUpstream, Gateway, PgDatabase, Sim};

fn hello(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

/// Waits until the workspace has `n` usage records; returns them.
pub(crate) async fn records(gw: &Gateway, ws: &str, n: usize) -> Vec<Value> {
    let found = eventually(Duration::from_secs(10), || async {
        gw.cli_json(&["usage", "--workspace", ws])
            .as_array()
            .unwrap()
            .len()
            >= n
    })
    .await;
    assert!(found.is_some(), "usage records never reached {n}");
    gw.cli_json(&["usage", "--workspace", ws])
        .as_array()
        .unwrap()
        .clone()
}

pub(crate) fn pico(usd: &Value) -> i128 {
    let text = usd
        .as_str()
        .unwrap_or_else(|| panic!("amounts are decimal strings: {usd}"));
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let negative = whole.starts_with('-');
    let value = whole.trim_start_matches('-').parse::<i128>().unwrap() * 1_000_000_000_000
        + format!("{frac:0<12}").parse::<i128>().unwrap();
    if negative {
        -value
    } else {
        value
    }
}

#[tokio::test]
async fn no_credit_is_402_and_the_upstream_is_not_called() {
    let sim = Sim::start();
    let fake = FakeUpstream::start().await;
    let gw = Gateway::builder()
        .simulator(&sim)
        .fake_openai(&fake)
        .start();
    let ws = gw.workspace();
    let key = gw.key(&ws, &[]);
    let res = gw.chat(&key, hello("google/gemini-2.5-flash", "hi")).await;
    assert_eq!(res.status(), 402);
    let v: Value = res.json().await.unwrap();
    assert_eq!(
        (v["error"]["code"].as_str(), v["error"]["message"].as_str()),
        (
            Some("insufficient_credit"),
            Some("insufficient credit balance")
        )
    );
    let res = reqwest::Client::new()
        .post(gw.url("/v1/embeddings"))
        .bearer_auth(&key)
        .json(&json!({"model": "acme/embed", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 402, "embeddings are gated too");
    assert!(
        sim.requests().await.is_empty() && fake.requests().is_empty(),
        "no upstream call"
    );
    assert!(
        gw.cli_json(&["usage", "--workspace", &ws])
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing billed"
    );
}

#[tokio::test]
async fn every_success_leaves_an_exact_record_and_debit() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let buffered: Value = gw
        .chat(
            &key,
            hello("google/gemini-2.5-flash", "what does this cost"),
        )
        .await
        .json()
        .await
        .unwrap();
    let streamed = gw.chat(&key, json!({"model": "google/gemini-2.5-flash", "stream": true, "messages": [{"role": "user", "content": "and this"}]})).await.text().await.unwrap();
    let stream_id = streamed
        .split("\"id\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();

    let recs = records(&gw, &ws, 2).await;
    let ids: HashSet<&str> = recs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        HashSet::from([buffered["id"].as_str().unwrap(), stream_id.as_str()]),
        "the record id is the completion id"
    );
    let mut total = 0i128;
    for r in &recs {
        // gemini-2.5-flash: 0.30 input, 0.03 cache read, 2.50 output (USD per 1M) = micro per token ×1e6.
        let expected = r["input_tokens"].as_i64().unwrap() as i128 * 300_000
            + r["cache_read_tokens"].as_i64().unwrap() as i128 * 30_000
            + r["output_tokens"].as_i64().unwrap() as i128 * 2_500_000;
        assert_eq!(pico(&r["cost"]), expected, "exact cost: {r}");
        assert_eq!(r["input_price"], 0.3);
        assert_eq!(r["outcome"], "complete");
        // Buffered and streamed alike: the upstream's latency and the time to first token.
        for timing in ["upstream_latency_us", "ttft_us"] {
            assert!(
                r[timing].as_u64().is_some_and(|us| us > 0),
                "{timing} recorded (stream: {}): {r}",
                r["stream"]
            );
        }
        total += expected;
    }
    let u = &buffered["usage"];
    let rec = recs.iter().find(|r| r["id"] == buffered["id"]).unwrap();
    assert_eq!(
        rec["input_tokens"].as_u64().unwrap() + rec["cache_read_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap()
    );
    assert_eq!(rec["output_tokens"], u["completion_tokens"]);

    let ledger = gw.cli_json(&["ledger", "--workspace", &ws]);
    assert_eq!(
        pico(&ledger["balance"]),
        100 * 1_000_000_000_000 - total,
        "balance = credit − debits, to the pico"
    );
    let debits: i128 = ledger["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "debit")
        .map(|e| pico(&e["amount"]))
        .sum();
    assert_eq!(debits, -total);
    let verify = gw.cli_raw(&["ledger", "verify"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

#[tokio::test]
async fn spend_limit_stops_only_that_keys_chat() {
    let sim = Sim::start();
    let fake = FakeUpstream::start().await;
    let gw = Gateway::builder()
        .simulator(&sim)
        .fake_openai(&fake)
        .start();
    let (ws, sibling) = gw.workspace_with_key();
    let limited = gw.key(
        &ws,
        &["--spend-limit-usd", "0.000001", "--limit-reset", "daily"],
    );
    // Wait for the limited key to be live, then spend: the crossing request completes.
    assert!(eventually(Duration::from_secs(3), || async {
        gw.chat(&limited, hello("google/gemini-2.5-flash", "warm"))
            .await
            .status()
            != 401
    })
    .await
    .is_some());
    let refused = eventually(Duration::from_secs(3), || async {
        gw.chat(&limited, hello("google/gemini-2.5-flash", "again"))
            .await
            .status()
            == 429
    })
    .await;
    assert!(refused.is_some(), "the key over its limit must be refused");
    let res = gw
        .chat(&limited, hello("google/gemini-2.5-flash", "once more"))
        .await;
    let v: Value = res.json().await.unwrap();
    assert_eq!(
        (v["error"]["code"].as_str(), v["error"]["message"].as_str()),
        (
            Some("spend_limit_exceeded"),
            Some("api key spend limit exceeded")
        )
    );
    assert_eq!(
        gw.chat(&sibling, hello("google/gemini-2.5-flash", "sibling"))
            .await
            .status(),
        200,
        "other keys are unaffected"
    );
    let res = reqwest::Client::new()
        .post(gw.url("/v1/embeddings"))
        .bearer_auth(&limited)
        .json(&json!({"model": "acme/embed", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        200,
        "the spend limit does not apply to embeddings"
    );
}

#[tokio::test]
async fn two_gateways_on_one_postgres_agree_to_the_pico() {
    let db = PgDatabase::create().await;
    let sim = Sim::start();
    let gw1 = Gateway::builder()
        .store(db.url.clone())
        .simulator(&sim)
        .start();
    let gw2 = Gateway::builder()
        .store(db.url.clone())
        .simulator(&sim)
        .start();
    let (ws, k1) = gw1.workspace_with_key();
    let keys = [k1, gw1.key(&ws, &[]), gw1.key(&ws, &[]), gw1.key(&ws, &[])];
    for k in &keys {
        assert!(
            eventually(Duration::from_secs(3), || async {
                gw2.chat(k, hello("google/gemini-2.5-flash", "w"))
                    .await
                    .status()
                    == 200
            })
            .await
            .is_some(),
            "key reaches the second replica"
        );
    }
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (url, key) = (
            if i % 2 == 0 {
                gw1.url("/v1/chat/completions")
            } else {
                gw2.url("/v1/chat/completions")
            },
            keys[i % 4].clone(),
        );
        tasks.push(tokio::spawn(async move {
            let stream = i % 3 == 0;
            let res = reqwest::Client::new().post(url).bearer_auth(key).json(&json!({"model": "google/gemini-2.5-flash", "stream": stream, "messages": [{"role": "user", "content": format!("request number {i}")}]})).send().await.unwrap();
            assert_eq!(res.status(), 200);
            let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
            let _ = res.bytes().await.unwrap();
            id
        }));
    }
    let mut ids = HashSet::new();
    for t in tasks {
        assert!(ids.insert(t.await.unwrap()), "completion ids are unique");
    }
    let recs = records(&gw1, &ws, 204).await;
    let recorded: Vec<&str> = recs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        recorded.len(),
        recorded.iter().collect::<HashSet<_>>().len(),
        "each request appears exactly once"
    );
    assert!(
        ids.iter().all(|id| recorded.contains(&id.as_str())),
        "every request was billed"
    );
    let costs: i128 = recs.iter().map(|r| pico(&r["cost"])).sum();
    let ledger = gw2.cli_json(&["ledger", "--workspace", &ws]);
    assert_eq!(
        pico(&ledger["balance"]),
        100 * 1_000_000_000_000 - costs,
        "balance row = credit − usage costs"
    );
    let verify = gw1.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

#[tokio::test]
async fn embeddings_are_billed_for_input_only() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let res = reqwest::Client::new().post(gw.url("/v1/embeddings")).bearer_auth(&key).json(&json!({"model": "google/text-embedding-004", "input": ["one input", "another input here"]})).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    let tokens = v["usage"]["prompt_tokens"].as_i64().unwrap() as i128;
    let recs = records(&gw, &ws, 1).await;
    assert_eq!(recs[0]["endpoint"], "embeddings");
    assert_eq!(recs[0]["output_tokens"], 0);
    assert_eq!(
        pico(&recs[0]["cost"]),
        tokens * 25_000,
        "0.025 USD per 1M input tokens, exactly"
    );

    let poor = gw.workspace();
    let poor_key = gw.key(&poor, &[]);
    let res = reqwest::Client::new()
        .post(gw.url("/v1/embeddings"))
        .bearer_auth(&poor_key)
        .json(&json!({"model": "google/text-embedding-004", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 402);
    assert_eq!(
        sim.requests().await.len(),
        1,
        "the refused request never reached the upstream"
    );
}
