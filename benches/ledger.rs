//! Ledger writer throughput: how many usage records (each with its debit, balance and key-spend
//! update) the ledger writer commits per second while its queue stays full, in 512-record
//! batches, on SQLite and on PostgreSQL (`TOLLGATE_TEST_PG_URL`, default the local test
//! database). Printed, not asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use sha2::Digest;
use tollgate::billing::gates::Accounts;
use tollgate::billing::writer::{ledger, LedgerFiles};
use tollgate::money::Price;
use tollgate::store::{self, NewKey, Store, UsageEndpoint, UsageOutcome, UsageRecord};

const RECORDS: usize = 102_400;
const BATCH: usize = 512;
/// The writer's queue holds 16,384 records; the feed keeps it this full.
const FULL: usize = 16_384 - BATCH;

fn record(i: usize, ws: &str, key: &str) -> UsageRecord {
    let now = Utc::now();
    UsageRecord {
        id: format!(
            "bench-{}-{i}",
            now.timestamp_nanos_opt().unwrap_or_default()
        ),
        workspace_id: ws.into(),
        key_id: key.into(),
        model_id: "google/gemini-2.5-flash".into(),
        route: "gemini-api".into(),
        endpoint: UsageEndpoint::Chat,
        stream: i.is_multiple_of(2),
        input_tokens: 100,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        output_tokens: 200,
        reasoning_tokens: 50,
        input_price: Price::from_micro_per_mtok(300_000),
        output_price: Price::from_micro_per_mtok(2_500_000),
        cache_read_price: None,
        cache_write_price: None,
        extra: Default::default(),
        cost: tollgate::money::Usd::from_pico(100 * 300_000 + 200 * 2_500_000),
        outcome: UsageOutcome::Complete,
        started_at: now,
        finished_at: now,
        upstream_latency_us: Some(1000),
        ttft_us: Some(1500),
        spend_window_start: None,
        usage_source: Default::default(),
        attempts: 1,
        request_id: None,
        review: None,
        client_addr: None,
        upstream_request_id: None,
        waived: false,
    }
}

async fn bench(name: &str, store: Arc<dyn Store>) {
    store.migrate().await.unwrap();
    let ws = store
        .create_workspace(
            &format!(
                "ws_bench_{}",
                Utc::now().timestamp_nanos_opt().unwrap_or_default()
            ),
            "bench",
            None,
        )
        .await
        .unwrap();
    let key_id = format!("key_{}", ws.id);
    store
        .create_key(
            NewKey {
                id: key_id.clone(),
                workspace_id: ws.id.clone(),
                name: None,
                secret_hash: hex::encode(sha2::Sha256::digest(ws.id.as_bytes())),
                hint: String::new(),
                expires_at: None,
                spend_limit: None,
                limit_reset: None,
                allowed_models: Vec::new(),
            },
            None,
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = LedgerFiles {
        spool: dir.path().join("spool"),
        journal: None,
    };
    let (sink, writer) = ledger(files, Arc::new(Accounts::default())).unwrap();
    let records: Vec<_> = (0..RECORDS).map(|i| record(i, &ws.id, &key_id)).collect();
    // Keeps the writer's queue nearly full (records are queued the moment a request ends; the
    // bench plays a gateway that ends them faster than the writer commits), then returns.
    let feed = async {
        for r in records {
            while sink.queued() >= FULL {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sink.submit(r, None);
        }
    };
    let start = Instant::now();
    // The feed is the writer's shutdown signal: once every record is queued, it drains the
    // queue and returns.
    writer.run(store.clone(), feed, Duration::ZERO).await;
    let secs = start.elapsed().as_secs_f64();
    let stored = store.usage(&ws.id, None).await.unwrap().len();
    assert_eq!(stored, RECORDS, "every record committed, none spooled");
    println!("ledger writer, {name}: {RECORDS} records in {:.2}s = {:.0} records/s ({:.1} ms per {BATCH}-record batch)", secs, RECORDS as f64 / secs, secs * 1e3 / (RECORDS / BATCH) as f64);
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = store::open(&format!("sqlite://{}/bench.db", dir.path().display()))
            .await
            .unwrap();
        bench("SQLite", sqlite).await;
        let url = std::env::var("TOLLGATE_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        match store::open(&url).await {
            Ok(pg) => bench("PostgreSQL", pg).await,
            Err(e) => println!("ledger writer, PostgreSQL: skipped ({e})"),
        }
    });
}
