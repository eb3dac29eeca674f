//! `tollgate usage archive` and `usage restore` from the command line: the months before the
//! current one go to compressed files and out of the store, the books still verify, and a
//! restore brings every record back exactly.

use chrono::{Duration, Utc};
use tollgate::money::{Price, Usd};
use tollgate::store::{NewKey, UsageEndpoint, UsageMonth, UsageOutcome, UsageRecord};

use crate::harness::Gateway;

fn record(i: usize, days_ago: i64) -> UsageRecord {
    // At the store's precision (microseconds), so the records read back equal.
    let now = chrono::DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap();
    let finished = now - Duration::days(days_ago);
    UsageRecord {
        id: format!("chatcmpl-old{i}"),
        workspace_id: "ws_1".into(),
        key_id: "key_1".into(),
        model_id: "acme/echo".into(),
        route: "openai".into(),
        endpoint: UsageEndpoint::Chat,
        stream: false,
        input_tokens: 10 + i as u64,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        output_tokens: 20,
        reasoning_tokens: 0,
        input_price: Price::from_micro_per_mtok(300_007),
        output_price: Price::from_micro_per_mtok(2_500_001),
        cache_read_price: None,
        cache_write_price: None,
        cost: Usd::from_pico((10 + i as i64) * 300_007 + 20 * 2_500_001),
        outcome: UsageOutcome::Complete,
        started_at: finished - Duration::seconds(2),
        finished_at: finished,
        upstream_latency_us: None,
        ttft_us: None,
        spend_window_start: None,
        usage_source: Default::default(),
        attempts: 1,
        request_id: None,
        review: None,
        client_addr: None,
        upstream_request_id: None,
        waived: false,
        extra: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_archives_past_months_verifies_and_restores() {
    let gw = Gateway::builder().build();
    gw.cli(&["migrate"]);
    let store = tollgate::store::open(&gw.store_url).await.unwrap();
    store.create_workspace("ws_1", "old", None).await.unwrap();
    let key = NewKey {
        id: "key_1".into(),
        workspace_id: "ws_1".into(),
        name: None,
        secret_hash: "hash".into(),
        hint: "hint".into(),
        expires_at: None,
        spend_limit: None,
        limit_reset: None,
        allowed_models: vec![],
    };
    store.create_key(key, None).await.unwrap();
    // 40 and 70 days ago: always in months before the current one.
    let records = vec![record(0, 40), record(1, 70), record(2, 71)];
    assert_eq!(store.record_usage(&records).await.unwrap(), 3);
    let before_balance = store.balance("ws_1").await.unwrap();

    let now = UsageMonth::of(Utc::now());
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().to_str().unwrap();
    // The current month is not over: refused, nothing written.
    let next = now.next().to_string();
    let refused = gw.cli_raw(&["usage", "archive", "--before", &next, "--to", to]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not over"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let archived = gw.cli_json(&["usage", "archive", "--before", &now.to_string(), "--to", to]);
    let months = archived["months"].as_array().unwrap();
    let archived_records: u64 = months.iter().map(|m| m["records"].as_u64().unwrap()).sum();
    assert_eq!(archived_records, 3);
    assert!(store.usage("ws_1", None).await.unwrap().is_empty());
    assert!(gw.cli(&["ledger", "verify"]).contains("0 inconsistent"));
    assert_eq!(store.balance("ws_1").await.unwrap(), before_balance);

    for m in months {
        let file = m["file"].as_str().unwrap();
        assert!(file.ends_with(".jsonl.zst"), "{file}");
        assert!(gw
            .cli(&["usage", "restore", file])
            .contains("records restored"));
    }
    let mut back = store.usage("ws_1", None).await.unwrap();
    back.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(back, records);
    assert!(gw.cli(&["ledger", "verify"]).contains("0 inconsistent"));
}
