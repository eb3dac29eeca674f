//! Concurrency cannot multiply an overdraft: each admitted request reserves its worst case, so
//! on a tiny balance (or a tiny spend limit) a burst of slow requests admits exactly one.

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::billing::{pico, records};
use crate::harness::{FakeUpstream, Gateway, PgDatabase, Sim};

const BURST: usize = 100;

/// A chat the simulator answers after 1.5 s, so the whole burst is in flight together.
fn slow() -> Value {
    json!({"model": "anthropic/claude-opus-5-5", "max_tokens": 64,
           "messages": [{"role": "user", "content": "[sim:latency=1500] tell me"}]})
}

async fn burst(gw: &Gateway, key: &str) -> Vec<u16> {
    let calls = (0..BURST).map(|_| async { gw.chat(key, slow()).await.status().as_u16() });
    join_all(calls).await
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|&&s| s == status).count()
}

#[tokio::test]
async fn a_burst_on_a_tiny_balance_admits_one_request() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let ws = gw.workspace();
    gw.cli(&["credit", "add", "--workspace", &ws, "--usd", "0.000001"]);
    let key = gw.key(&ws, &[]);
    let statuses = burst(&gw, &key).await;
    assert_eq!(count(&statuses, 200), 1, "{statuses:?}");
    assert_eq!(count(&statuses, 402), BURST - 1, "{statuses:?}");
    let recs = records(&gw, &ws, 1).await;
    let ledger = gw.cli_json(&["ledger", "--workspace", &ws]);
    assert_eq!(
        pico(&ledger["balance"]),
        1_000_000 - pico(&recs[0]["cost"]),
        "one request's cost beyond the credit, no more"
    );
    assert!(gw.cli_raw(&["ledger", "verify"]).status.success());
}

/// An OpenAI-compatible model with no output cap (as operators add them), at 1,000 USD per 1M
/// tokens in and out, so a few requests spend a workspace's credit.
const UNCAPPED: &str = "acme/uncapped";

fn uncapped_catalog(gw: &Gateway, fake: &FakeUpstream) {
    let file = gw.dir.path().join("uncapped.yaml");
    let yaml = format!(
        "models:\n  - {{id: {UNCAPPED}, provider: acme, family: openai, kind: chat, \
         upstream_model: echo-1, profile: openai, input_price: 1000, output_price: 1000}}\n\
         routes:\n  - {{model_id: {UNCAPPED}, kind: openai, base_url: \"{}/v1\"}}\n",
        fake.url
    );
    std::fs::write(&file, yaml).unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
}

/// The requests that spend the credit: 10 output tokens at most, a 400-byte prompt (about 100
/// tokens), so about 0.1 USD each and a worst case of under 0.5 USD.
fn spending() -> Value {
    json!({"model": UNCAPPED, "max_tokens": 10,
           "messages": [{"role": "user", "content": "x".repeat(400)}]})
}

/// Sends `spending` requests one by one until the gateway refuses one (at most 100).
async fn spend_all(gw: &Gateway, key: &str) -> Vec<u16> {
    let mut statuses = Vec::new();
    while statuses.len() < 100 {
        let status = gw.chat(key, spending()).await.status().as_u16();
        statuses.push(status);
        if status != 200 {
            break;
        }
    }
    statuses
}

#[tokio::test]
async fn an_overflowing_worst_case_creates_no_credit() {
    // The phantom-credit sequence: with an ordinary request in flight, a chat asking for
    // 10^18 output tokens on a model with no output cap. Its worst case overflowed to
    // i64::MAX, the in-flight total saturated, and releasing both in full left it at minus the
    // first request's reservation: credit that existed only in memory, spent by what followed.
    let fake = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&fake).start();
    uncapped_catalog(&gw, &fake);
    let (control, exploit) = (gw.workspace(), gw.workspace());
    for ws in [&control, &exploit] {
        gw.cli(&["credit", "add", "--workspace", ws, "--usd", "2"]);
    }
    let (control_key, exploit_key) = (gw.key(&control, &[]), gw.key(&exploit, &[]));
    // In flight for 400 ms, reserving about 1.6 USD (1,500 output tokens): the credit left
    // unreserved still admits the next request.
    let in_flight = json!({"model": UNCAPPED, "max_tokens": 1500,
                           "messages": [{"role": "user", "content": "[sim:latency=400] hi"}]});
    for _ in 0..3 {
        let first = gw.chat(&exploit_key, in_flight.clone());
        let huge = async {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let body = json!({"model": UNCAPPED, "max_tokens": 1_000_000_000_000_000_000u64,
                              "messages": [{"role": "user", "content": "hi"}]});
            gw.chat(&exploit_key, body).await
        };
        let (first, huge) = tokio::join!(first, huge);
        assert_eq!(first.status(), 200);
        assert_eq!(huge.status(), 400, "an output cap no model has is refused");
        let v: Value = huge.json().await.unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("max_tokens"),
            "{v}"
        );
    }
    let control_statuses = spend_all(&gw, &control_key).await;
    let exploit_statuses = spend_all(&gw, &exploit_key).await;
    assert_eq!(control_statuses.last(), Some(&402), "{control_statuses:?}");
    assert_eq!(exploit_statuses.last(), Some(&402), "{exploit_statuses:?}");
    // The documented bound: one request's worst case beyond the credit — here a spending
    // request's, at most its body's bytes and 10 output tokens at 0.001 USD each.
    let bound = (spending().to_string().len() as i128 + 10) * 1_000_000_000;
    let answered = |s: &[u16]| s.iter().filter(|&&s| s == 200).count();
    records(&gw, &control, answered(&control_statuses)).await;
    records(&gw, &exploit, 3 + answered(&exploit_statuses)).await;
    for ws in [&control, &exploit] {
        let balance = pico(&gw.cli_json(&["ledger", "--workspace", ws])["balance"]);
        assert!(
            balance < 0 && balance >= -bound,
            "{ws}: balance {balance}, bound -{bound}"
        );
    }
    assert!(gw.cli_raw(&["ledger", "verify"]).status.success());
}

#[tokio::test]
async fn a_price_no_request_could_pay_is_refused_at_import() {
    // With 9,223,372,036,854.775807 USD per 1M tokens, every answer's cost overflowed: the
    // chat answered 200, no usage record was written and the balance never moved.
    let fake = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&fake).start();
    let file = gw.dir.path().join("absurd.yaml");
    std::fs::write(
        &file,
        "models:\n  - {id: acme/absurd, provider: acme, family: openai, kind: chat, \
         upstream_model: echo-1, profile: openai, input_price: 1, \
         output_price: 9223372036854.775807}\n",
    )
    .unwrap();
    let out = gw.cli_raw(&["catalog", "import", file.to_str().unwrap()]);
    assert!(!out.status.success(), "imported");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("output_price") && err.contains("10000"),
        "{err}"
    );
    let (_, key) = gw.workspace_with_key();
    let res = gw.chat(
        &key,
        json!({"model": "acme/absurd", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(res.await.status(), 400, "not in the catalog");
}

#[tokio::test]
async fn a_burst_on_a_tiny_spend_limit_admits_one_chat() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, _) = gw.workspace_with_key();
    let limited = gw.key(
        &ws,
        &["--spend-limit-usd", "0.000001", "--limit-reset", "daily"],
    );
    let statuses = burst(&gw, &limited).await;
    assert_eq!(count(&statuses, 200), 1, "{statuses:?}");
    assert_eq!(count(&statuses, 429), BURST - 1, "{statuses:?}");
    let after = gw.chat(&limited, slow()).await.status();
    assert_eq!(
        after, 429,
        "the crossing request completed; the limit holds"
    );
}

#[tokio::test]
async fn strict_credit_refuses_what_the_balance_cannot_pay_for() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).strict_credit().start();
    let ws = gw.workspace();
    gw.cli(&["credit", "add", "--workspace", &ws, "--usd", "0.01"]);
    let key = gw.key(&ws, &[]);
    let ask = |max_tokens: u32| {
        json!({"model": "anthropic/claude-opus-5-5", "max_tokens": max_tokens,
               "messages": [{"role": "user", "content": "hi"}]})
    };
    let res = gw.chat(&key, ask(32_000)).await;
    assert_eq!(
        res.status(),
        402,
        "32,000 output tokens cost more than 0.01 USD"
    );
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["message"], "insufficient credit balance");
    assert_eq!(v["error"]["code"], "insufficient_credit");
    let affordable = v["error"]["affordable_output_tokens"].as_u64().unwrap();
    assert!(
        (1..32_000).contains(&affordable),
        "what 0.01 USD pays for: {v}"
    );
    let fits = gw
        .chat(&key, ask(u32::try_from(affordable / 2).unwrap()))
        .await;
    assert_eq!(fits.status(), 200, "a max_tokens the balance can pay for");
}

#[tokio::test]
async fn two_gateways_on_one_postgres_admit_at_most_one_each() {
    let db = PgDatabase::create().await;
    let sim = Sim::start();
    let gws = [
        Gateway::builder()
            .store(db.url.clone())
            .simulator(&sim)
            .start(),
        Gateway::builder()
            .store(db.url.clone())
            .simulator(&sim)
            .start(),
    ];
    let ws = gws[0].workspace();
    gws[0].cli(&["credit", "add", "--workspace", &ws, "--usd", "0.000001"]);
    let key = gws[0].key(&ws, &[]);
    let calls = (0..BURST).map(|i| {
        let (gw, key) = (&gws[i % 2], &key);
        async move { gw.chat(key, slow()).await.status().as_u16() }
    });
    let statuses = join_all(calls).await;
    let served = count(&statuses, 200);
    assert!(
        (1..=2).contains(&served),
        "at most one per gateway: {statuses:?}"
    );
    assert_eq!(count(&statuses, 402), BURST - served, "{statuses:?}");
    let recs = records(&gws[0], &ws, served).await;
    let spent: i128 = recs.iter().map(|r| pico(&r["cost"])).sum();
    let ledger = gws[0].cli_json(&["ledger", "--workspace", &ws]);
    assert_eq!(pico(&ledger["balance"]), 1_000_000 - spent, "{recs:?}");
    assert!(gws[0].cli_raw(&["ledger", "verify"]).status.success());
}
