//! Concurrency cannot multiply an overdraft: each admitted request reserves its worst case, so
//! on a tiny balance (or a tiny spend limit) a burst of slow requests admits exactly one.

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::billing::{pico, records};
use crate::harness::{Gateway, PgDatabase, Sim};

const BURST: usize = 100;

/// A chat the simulator answers after 1.5 s, so the whole burst is in flight together.
fn slow() -> Value {
    json!({"model": "anthropic/claude-opus-4-1", "max_tokens": 64,
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
        json!({"model": "anthropic/claude-opus-4-1", "max_tokens": max_tokens,
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
