//! The ledger writer against a real store: a shutdown drains the queue into the database, and
//! records the database refuses for good are set aside for an operator (spooling during an
//! outage and its replay are covered end to end by `tests/it/outage.rs`).

use std::sync::Arc;

use chrono::Utc;
use tollgate::billing::gates::Accounts;
use tollgate::billing::journal::Journal;
use tollgate::billing::writer::{ledger, LedgerFiles};
use tollgate::money::{Price, Usd};
use tollgate::store::{self, NewKey, Store, UsageEndpoint, UsageOutcome, UsageRecord};

fn record(i: usize) -> UsageRecord {
    let now = Utc::now();
    UsageRecord {
        id: format!("chatcmpl-{i}"),
        workspace_id: "ws_1".into(),
        key_id: "key_1".into(),
        model_id: "google/gemini-2.5-flash".into(),
        route: "gemini-api".into(),
        endpoint: UsageEndpoint::Chat,
        stream: false,
        input_tokens: 10,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        output_tokens: 20,
        reasoning_tokens: 0,
        input_price: Price::from_micro_per_mtok(300_000),
        output_price: Price::from_micro_per_mtok(2_500_000),
        cache_read_price: None,
        cache_write_price: None,
        cost: Usd::from_pico(10 * 300_000 + 20 * 2_500_000),
        outcome: UsageOutcome::Complete,
        started_at: now,
        finished_at: now,
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

/// The spool and journal of a test writer, in `dir`; the journal synced every second.
fn files(dir: &tempfile::TempDir) -> LedgerFiles {
    LedgerFiles {
        spool: dir.path().join("spool"),
        journal: Some((
            dir.path().join("journal"),
            std::time::Duration::from_secs(1),
        )),
    }
}

fn journal_files(dir: &tempfile::TempDir) -> usize {
    std::fs::read_dir(dir.path().join("journal"))
        .unwrap()
        .count()
}

async fn store_at(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    let s = store::open(&format!("sqlite://{}/t.db", dir.path().display()))
        .await
        .unwrap();
    s.migrate().await.unwrap();
    s
}

async fn seed(s: &dyn Store) {
    s.create_workspace("ws_1", "w", None).await.unwrap();
    let key = NewKey {
        id: "key_1".into(),
        workspace_id: "ws_1".into(),
        name: None,
        secret_hash: "ab".repeat(32),
        hint: String::new(),
        expires_at: None,
        spend_limit: None,
        limit_reset: None,
        allowed_models: Vec::new(),
    };
    s.create_key(key, None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_the_queue_into_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let s = store_at(&dir).await;
    seed(s.as_ref()).await;
    let accounts = Arc::new(Accounts::default());
    let (sink, writer) = ledger(files(&dir), accounts.clone()).unwrap();
    for i in 0..1500 {
        let r = record(i);
        let entry = sink.journal(&r);
        assert!(entry.is_some(), "journaled");
        sink.submit(r, entry);
    }
    assert_eq!(sink.journal_unsettled(), 1500);
    assert!(
        accounts.balance("ws_1") < Usd::ZERO,
        "charges count at once, before any commit"
    );
    // Shutdown is already signalled when the writer starts: everything queued must still land.
    writer
        .run(s.clone(), std::future::ready(()), std::time::Duration::ZERO)
        .await;
    assert_eq!(s.usage("ws_1", None).await.unwrap().len(), 1500);
    let expected = Usd::from_pico(-1500 * (10 * 300_000 + 20 * 2_500_000));
    assert_eq!(s.balance("ws_1").await.unwrap(), expected);
    assert_eq!(
        accounts.balance("ws_1"),
        expected,
        "committed charges are no longer pending"
    );
    assert_eq!(
        std::fs::metadata(dir.path().join("spool")).unwrap().len(),
        0,
        "nothing spooled"
    );
    assert_eq!(sink.journal_unsettled(), 0, "every journal entry settled");
    assert_eq!(
        journal_files(&dir),
        1,
        "settled segments deleted: only the fresh empty one is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_the_store_refuses_for_good_are_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let s = store_at(&dir).await;
    // No workspace or key yet: the store refuses these records (foreign keys) for good, so
    // they are set aside, not retried forever.
    let (sink, writer) = ledger(files(&dir), Arc::new(Accounts::default())).unwrap();
    for i in 0..3 {
        sink.submit(record(i), None);
    }
    writer
        .run(s.clone(), std::future::ready(()), std::time::Duration::ZERO)
        .await;
    assert!(s.usage("ws_1", None).await.unwrap().is_empty());
    let refused = std::fs::read_to_string(dir.path().join("spool.refused")).unwrap();
    assert_eq!(
        refused.lines().count(),
        3,
        "each refused record is kept for an operator"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_left_by_a_dead_process_is_billed_once_by_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    let s = store_at(&dir).await;
    seed(s.as_ref()).await;
    // A process journals three answers, one of which its writer committed, then dies.
    let dead = Journal::open(&dir.path().join("journal")).unwrap();
    for i in 0..3 {
        let _unsettled = dead.append(&record(i)).unwrap();
    }
    s.record_usage(&[record(0)]).await.unwrap();
    drop(dead);
    // The next process's writer adopts the orphan on its first tick.
    let (_sink, writer) = ledger(files(&dir), Arc::new(Accounts::default())).unwrap();
    writer
        .run(s.clone(), std::future::ready(()), std::time::Duration::ZERO)
        .await;
    assert_eq!(s.usage("ws_1", None).await.unwrap().len(), 3);
    let each = 10 * 300_000 + 20 * 2_500_000;
    assert_eq!(
        s.balance("ws_1").await.unwrap(),
        Usd::from_pico(-3 * each),
        "the record committed before the crash is not charged twice"
    );
    assert_eq!(journal_files(&dir), 1, "the orphan is gone");
}
