//! Money a reseller builds on (issue 32): `GET /v1/credits` from the gateway's memory, credit
//! grants and refunds made once per `Idempotency-Key` (the admin API and the CLI), and the
//! zero-completion waiver.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::billing::pico;
use crate::harness::{FakeUpstream, Gateway, PgDatabase, ADMIN_TOKEN};

/// `GET /v1/credits` for `key`: the status, and each field of `data` as the exact JSON token
/// sent (numbers as written, strings quoted).
async fn credits(gw: &Gateway, key: &str) -> (u16, BTreeMap<String, String>) {
    let res = reqwest::Client::new()
        .get(gw.url("/v1/credits"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    let Ok(answer) = serde_json::from_str::<BTreeMap<String, Box<RawValue>>>(&text) else {
        return (status, BTreeMap::new());
    };
    let data = answer
        .get("data")
        .and_then(|d| serde_json::from_str::<BTreeMap<String, Box<RawValue>>>(d.get()).ok())
        .unwrap_or_default();
    let fields = data
        .into_iter()
        .map(|(k, v)| (k, v.get().to_owned()))
        .collect();
    (status, fields)
}

/// An amount `/v1/credits` sent (a JSON number's exact text) in pico-USD.
fn number(fields: &BTreeMap<String, String>, name: &str) -> i128 {
    let text = &fields[name];
    assert!(
        !text.starts_with('"') && !text.contains(['e', 'E']),
        "{name} is a plain JSON number: {text}"
    );
    pico(&Value::String(text.clone()))
}

/// Waits until `/v1/credits` for `key` satisfies `check`; the fields it last saw.
async fn credits_when(
    gw: &Gateway,
    key: &str,
    check: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let mut seen = BTreeMap::new();
    for _ in 0..250 {
        seen = credits(gw, key).await.1;
        if !seen.is_empty() && check(&seen) {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("/v1/credits never got there: {seen:?}");
}

#[tokio::test]
async fn credits_show_top_ups_spend_and_requests_in_flight() {
    let fake = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&fake).start();
    let ws = gw.workspace();
    let key = gw.key(&ws, &[]);

    // No credit at all: answered all the same (never gated), in OpenRouter's shape and ours.
    let (status, c) = credits(&gw, &key).await;
    assert_eq!(status, 200, "{c:?}");
    let zero = |name: &str| (name.to_owned(), "0.0".to_owned());
    let expected: BTreeMap<String, String> =
        ["total_credits", "total_usage", "balance", "reserved"]
            .into_iter()
            .map(zero)
            .chain([("currency".to_owned(), "\"USD\"".to_owned())])
            .collect();
    assert_eq!(c, expected);
    assert_eq!(credits(&gw, "sk-tg-nobody").await.0, 401);

    // A top-up reaches the running gateway through the change feed, to the last pico.
    gw.cli(&[
        "credit",
        "add",
        "--workspace",
        &ws,
        "--usd",
        "10.000000000001",
    ]);
    let c = credits_when(&gw, &key, |c| c["total_credits"] == "10.000000000001").await;
    assert_eq!(
        (c["balance"].as_str(), c["total_usage"].as_str()),
        ("10.000000000001", "0.0")
    );

    // Spend: what was charged is the ledger's debit, exactly.
    let ask = |content: &str| {
        json!({"model": "acme/echo", "max_tokens": 10,
               "messages": [{"role": "user", "content": content}]})
    };
    assert_eq!(gw.chat(&key, ask("hello there")).await.status(), 200);
    let record = gw.usage_records(&ws, 1).await[0].clone();
    let cost = pico(&record["cost"]);
    assert!(cost > 0, "{record}");
    let c = credits_when(&gw, &key, |c| c["total_usage"] != "0.0").await;
    assert_eq!(number(&c, "total_usage"), cost);
    assert_eq!(
        c["total_usage"],
        record["cost"].as_str().unwrap(),
        "the same digits"
    );
    let ledger = gw.cli_json(&["ledger", "--workspace", &ws]);
    let debit = ledger["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "debit")
        .unwrap();
    assert_eq!(pico(&debit["amount"]), -cost);
    assert_eq!(number(&c, "balance"), 10_000_000_000_001 - cost);
    assert_eq!(number(&c, "total_credits"), 10_000_000_000_001);
    assert_eq!(c["reserved"], "0.0");

    // A request in flight holds its worst case: every body byte an input token at 0.5 USD per
    // 1M, and its 10 output tokens at 1.5.
    let slow = ask("[sim:latency=1500] tell me");
    let worst = serde_json::to_vec(&slow).unwrap().len() as i128 * 500_000 + 10 * 1_500_000;
    let in_flight = gw.chat(&key, slow);
    let watch = async { credits_when(&gw, &key, |c| c["reserved"] != "0.0").await };
    let (res, during) = tokio::join!(in_flight, watch);
    assert_eq!(res.status(), 200);
    assert_eq!(number(&during, "reserved"), worst, "{during:?}");
    assert_eq!(
        number(&during, "balance"),
        10_000_000_000_001 - cost,
        "reserved, not yet charged"
    );
    credits_when(&gw, &key, |c| c["reserved"] == "0.0").await;
}

/// A POST to the admin API with an optional `Idempotency-Key`: the status, whether the answer
/// says it is replayed, and the body as sent.
async fn post(gw: &Gateway, path: &str, key: Option<&str>, body: &str) -> (u16, bool, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", gw.admin))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let replayed = res
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    (status, replayed, res.text().await.unwrap())
}

async fn get(gw: &Gateway, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{}{path}", gw.admin))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    v["error"]["code"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_retried_top_up_and_refund_move_credit_once() {
    let gw = Gateway::builder().start();
    let ws = gw.workspace();
    let key = gw.key(&ws, &[]);
    let grants = format!("/admin/v1/workspaces/{ws}/credits");
    let refunds = format!("/admin/v1/workspaces/{ws}/refunds");

    // A payment provider's webhook delivered eight times at once: one credit, one answer.
    let body = r#"{"amount_usd": "25.5", "note": "stripe evt_1"}"#;
    let sent = (0..8).map(|_| post(&gw, &grants, Some("evt_1"), body));
    let answers = join_all(sent).await;
    assert!(answers.iter().all(|(s, ..)| *s == 201), "{answers:?}");
    assert_eq!(
        answers.iter().filter(|(_, replayed, _)| !replayed).count(),
        1,
        "one made, the others replayed: {answers:?}"
    );
    assert!(
        answers.iter().all(|(_, _, b)| *b == answers[0].2),
        "every answer the first one, byte for byte: {answers:?}"
    );
    // Later, and spelt otherwise (a number, not a string): still the same request.
    let (status, replayed, again) = post(
        &gw,
        &grants,
        Some("evt_1"),
        r#"{"note": "stripe evt_1", "amount_usd": 25.50}"#,
    )
    .await;
    assert_eq!((status, replayed, &again), (201, true, &answers[0].2));
    // The key for another request: refused, nothing moved.
    let (status, _, refused) = post(&gw, &grants, Some("evt_1"), r#"{"amount_usd": "26"}"#).await;
    assert_eq!(
        (status, code(&refused).as_str()),
        (409, "idempotency_key_reused"),
        "{refused}"
    );
    for bad in ["", &"k".repeat(256), "evt\t2"] {
        let (status, _, text) = post(&gw, &grants, Some(bad), body).await;
        assert_eq!(
            (status, code(&text).as_str()),
            (400, "invalid_request"),
            "{bad:?}: {text}"
        );
    }
    let listed = get(&gw, &grants).await;
    let entries = listed["data"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{listed}");
    assert_eq!(listed["balance"], "25.5");

    // A refund: a negative entry with its reason, audited, once per key; never past the
    // balance.
    let refund = r#"{"amount_usd": "10.25", "reason": "customer closed the account"}"#;
    let (status, replayed, made) = post(&gw, &refunds, Some("refund_1"), refund).await;
    assert_eq!((status, replayed), (201, false), "{made}");
    let made: Value = serde_json::from_str(&made).unwrap();
    assert_eq!(made["entry"]["kind"], "refund");
    assert_eq!(made["entry"]["amount"], "-10.25");
    assert_eq!(made["entry"]["note"], "customer closed the account");
    assert_eq!(made["balance"], "15.25");
    let (status, replayed, _) = post(&gw, &refunds, Some("refund_1"), refund).await;
    assert_eq!((status, replayed), (201, true));
    let (status, _, over) = post(
        &gw,
        &refunds,
        None,
        r#"{"amount_usd": "15.250000000001", "reason": "x"}"#,
    )
    .await;
    assert_eq!((status, code(&over).as_str()), (409, "conflict"), "{over}");
    let (status, _, no_reason) = post(&gw, &refunds, None, r#"{"amount_usd": "1"}"#).await;
    assert_eq!(status, 400, "{no_reason}");
    let (status, _, blank) =
        post(&gw, &refunds, None, r#"{"amount_usd": "1", "reason": " "}"#).await;
    assert_eq!(status, 400, "{blank}");

    let listed = get(&gw, &grants).await;
    let kinds: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["refund", "credit"], "{listed}");
    assert_eq!(listed["balance"], "15.25");
    let audit = get(&gw, &format!("/admin/v1/audit?workspace={ws}")).await;
    let refunded: Vec<&Value> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "credit.refund")
        .collect();
    assert_eq!(refunded.len(), 1, "{audit}");
    assert_eq!(
        refunded[0]["after"]["entry"]["note"],
        "customer closed the account"
    );
    assert_eq!(refunded[0]["after"]["idempotency_key"], "refund_1");
    assert_eq!(refunded[0]["actor"], "admin-token");
    assert!(gw.cli_raw(&["ledger", "verify"]).status.success());

    // The running gateway sees the refund through the change feed: its gate's balance drops.
    let c = credits_when(&gw, &key, |c| c["balance"] == "15.25").await;
    assert_eq!(
        (c["total_credits"].as_str(), c["total_usage"].as_str()),
        ("15.25", "0.0")
    );
}

/// A webhook racing its own retries on two admin API replicas over one PostgreSQL: each key
/// credits once, and every answer is the first.
#[tokio::test]
async fn a_top_up_racing_itself_on_two_replicas_credits_once() {
    let db = PgDatabase::create().await;
    let gws = [
        Gateway::builder().store(db.url.clone()).start(),
        Gateway::builder().store(db.url.clone()).start(),
    ];
    let ws = gws[0].workspace();
    let grants = format!("/admin/v1/workspaces/{ws}/credits");
    for round in 0..4 {
        let key = format!("evt_{round}");
        let body = format!(r#"{{"amount_usd": "1.000000000001", "note": "round {round}"}}"#);
        let sent = (0..10).map(|i| post(&gws[i % 2], &grants, Some(&key), &body));
        let answers = join_all(sent).await;
        assert!(answers.iter().all(|(s, ..)| *s == 201), "{answers:?}");
        let made = answers.iter().filter(|(_, replayed, _)| !replayed).count();
        assert_eq!(made, 1, "round {round}: {answers:?}");
        assert!(
            answers.iter().all(|(_, _, b)| *b == answers[0].2),
            "round {round}: {answers:?}"
        );
    }
    let listed = get(&gws[1], &grants).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 4, "{listed}");
    assert_eq!(listed["balance"], "4.000000000004");
    assert!(gws[0].cli_raw(&["ledger", "verify"]).status.success());
    let key = gws[1].key(&ws, &[]);
    for gw in &gws {
        credits_when(gw, &key, |c| c["total_credits"] == "4.000000000004").await;
    }
}

#[tokio::test]
async fn the_cli_moves_credit_once_per_key_and_refunds() {
    let gw = Gateway::builder().build();
    let ws = gw.workspace();
    let add = |key: &str, usd: &str| {
        gw.cli_json(&[
            "credit",
            "add",
            "--workspace",
            &ws,
            "--usd",
            usd,
            "--idempotency-key",
            key,
        ])
    };
    let first = add("order-17", "3");
    assert_eq!(add("order-17", "3"), first, "the first answer again");
    let reused = gw.cli_raw(&[
        "credit",
        "add",
        "--workspace",
        &ws,
        "--usd",
        "4",
        "--idempotency-key",
        "order-17",
    ]);
    assert!(!reused.status.success());
    assert!(
        String::from_utf8_lossy(&reused.stderr).contains("different request"),
        "{reused:?}"
    );
    let refunded = gw.cli_json(&[
        "credit",
        "refund",
        "--workspace",
        &ws,
        "--usd",
        "1.5",
        "--reason",
        "goodwill",
    ]);
    assert_eq!(refunded["entry"]["kind"], "refund");
    assert_eq!(refunded["balance"], "1.5");
    let text = gw.cli(&[
        "credit",
        "refund",
        "--workspace",
        &ws,
        "--usd",
        "0.5",
        "--reason",
        "goodwill",
    ]);
    assert!(text.contains("refunded 0.5 USD"), "{text}");
    let too_much = gw.cli_raw(&[
        "credit",
        "refund",
        "--workspace",
        &ws,
        "--usd",
        "2",
        "--reason",
        "x",
    ]);
    assert!(!too_much.status.success());
    let ledger = gw.cli_json(&["ledger", "--workspace", &ws]);
    assert_eq!(ledger["entries"].as_array().unwrap().len(), 3, "{ledger}");
    assert_eq!(ledger["balance"], "1.0");
    assert!(gw.cli_raw(&["ledger", "verify"]).status.success());
}

/// A stream whose upstream counted the input in its first chunk and then broke: before any
/// output (`break-after=1`), or after the first piece of it (`break-after=2`).
fn cut(after: usize) -> Value {
    json!({"model": "acme/echo", "stream": true, "messages": [{"role": "user",
        "content": format!("tell me a story [sim:usage-first=1] [sim:fault=break-after={after}]")}]})
}

/// The last frame before `[DONE]` of a stream that ended with the upstream's error.
async fn ended_with_error(res: reqwest::Response) {
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    let frames = crate::harness::sse_data(&text);
    assert_eq!(frames.last().map(String::as_str), Some("[DONE]"), "{text}");
    let error: Value = serde_json::from_str(&frames[frames.len() - 2]).unwrap();
    assert_eq!(error["error"]["type"], "upstream_error", "{text}");
}

#[tokio::test]
async fn a_failure_without_output_is_waived_when_the_operator_says_so() {
    let fake = FakeUpstream::start().await;
    let gw = Gateway::builder()
        .fake_openai(&fake)
        .settings("  waive_empty_failures: true\n")
        .start();
    let (ws, key) = gw.workspace_with_key();
    ended_with_error(gw.chat(&key, cut(1)).await).await;
    let records = gw.usage_records(&ws, 1).await;
    let r = &records[0];
    assert_eq!(r["waived"], true, "{r}");
    assert_eq!(r["cost"], "0.0", "{r}");
    assert_eq!(r["outcome"], "upstream_failed", "{r}");
    assert!(
        r["input_tokens"].as_u64().unwrap() > 0,
        "the tokens stay recorded: {r}"
    );
    assert_eq!(r["output_tokens"], 0, "{r}");
    let generation: Value = gw
        .get_json(
            &key,
            &format!("/v1/generation?id={}", r["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(generation["data"]["waived"], true, "{generation}");
    assert_eq!(
        gw.cli_json(&["ledger", "--workspace", &ws])["balance"],
        "100.0",
        "the balance is unchanged"
    );
    let c = credits_when(&gw, &key, |_| true).await;
    assert_eq!(
        (c["balance"].as_str(), c["total_usage"].as_str()),
        ("100.0", "0.0")
    );

    // Output was delivered: never waived, billed as ever.
    ended_with_error(gw.chat(&key, cut(2)).await).await;
    let records = gw.usage_records(&ws, 2).await;
    let billed = records
        .iter()
        .find(|r| r["waived"] == false)
        .expect("billed");
    assert!(billed["output_tokens"].as_u64().unwrap() > 0, "{billed}");
    assert!(pico(&billed["cost"]) > 0, "{billed}");
    assert!(gw.cli_raw(&["ledger", "verify"]).status.success());
}

#[tokio::test]
async fn without_the_waiver_a_failure_pays_for_its_input() {
    let fake = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&fake).start();
    let (ws, key) = gw.workspace_with_key();
    ended_with_error(gw.chat(&key, cut(1)).await).await;
    let r = gw.usage_records(&ws, 1).await[0].clone();
    assert_eq!(
        (&r["waived"], &r["output_tokens"]),
        (&json!(false), &json!(0)),
        "{r}"
    );
    let input = r["input_tokens"].as_u64().unwrap() as i128;
    assert!(input > 0, "{r}");
    assert_eq!(
        pico(&r["cost"]),
        input * 500_000,
        "the input at 0.5 USD per 1M"
    );
    let balance = pico(&gw.cli_json(&["ledger", "--workspace", &ws])["balance"]);
    assert_eq!(balance, 100_000_000_000_000 - input * 500_000);
}
