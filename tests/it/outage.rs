//! The database goes away mid-load: requests keep succeeding from memory, usage records spool
//! to disk, and when the database returns the spool drains and the books agree to the pico.
//! Uses a private PostgreSQL the test starts with `initdb`/`pg_ctl` (as the `postgres` user
//! when run as root), so stopping it disturbs nothing else.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::harness::{eventually, Gateway, Sim};
use crate::private_pg::PrivatePg;

fn spooled(spool: &Path) -> usize {
    std::fs::read_to_string(spool)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// The admin listener's readiness: status and body.
async fn readiness(gw: &Gateway) -> (u16, String) {
    let res = reqwest::get(format!("{}/ready", gw.admin)).await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

async fn chat(gw: &Gateway, key: &str, i: usize) {
    let res = gw.chat(key, json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": format!("outage {i}")}]})).await;
    assert_eq!(
        res.status(),
        200,
        "request {i} must succeed whatever the database does"
    );
    let _ = res.bytes().await;
}

#[tokio::test]
async fn database_outage_spools_and_replays_without_loss() {
    let pg = PrivatePg::start();
    let sim = Sim::start();
    let gw = Gateway::builder().store(pg.url()).simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let spool = gw.dir.path().join("ledger.spool");

    for i in 0..10 {
        chat(&gw, &key, i).await;
    }
    pg.down();
    for i in 10..30 {
        chat(&gw, &key, i).await;
    }
    let grew = eventually(Duration::from_secs(10), || async { spooled(&spool) >= 20 }).await;
    assert!(
        grew.is_some(),
        "records made during the outage are spooled (found {})",
        spooled(&spool)
    );
    let degraded = eventually(Duration::from_secs(5), || async {
        let (status, body) = readiness(&gw).await;
        status == 503
            && body.contains("store unreachable")
            && body.contains("ledger spool not empty")
    })
    .await;
    assert!(degraded.is_some(), "{:?}", readiness(&gw).await);

    pg.up();
    let drained = eventually(Duration::from_secs(20), || async { spooled(&spool) == 0 }).await;
    assert!(
        drained.is_some(),
        "the spool drains once the database is back"
    );
    let ready = eventually(Duration::from_secs(10), || async {
        readiness(&gw).await.0 == 200
    })
    .await;
    assert!(
        ready.is_some(),
        "ready again once the store is back and the spool drained"
    );
    let recs = gw.cli_json(&["usage", "--workspace", &ws]);
    let recs = recs.as_array().unwrap();
    assert_eq!(recs.len(), 30, "every request billed exactly once");
    let verify = gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

/// A key revoked just after the database came back is refused within the feed's delay: the
/// follower's retries while the store was away do not leave it asleep once it is back (they
/// grew to 5 s, and a replica served a revoked key for 3.6 s after a restart).
#[tokio::test]
async fn a_revocation_right_after_the_database_returns_holds_within_the_feeds_delay() {
    let pg = PrivatePg::start();
    let sim = Sim::start();
    let gw = Gateway::builder().store(pg.url()).simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let id = gw.key_id(&ws, &key);
    chat(&gw, &key, 0).await;
    pg.down();
    // Long enough for retries that double from 100 ms to reach any cap of a few seconds.
    tokio::time::sleep(Duration::from_secs(12)).await;
    pg.up();
    gw.cli(&["key", "revoke", &id]);
    let revoked = std::time::Instant::now();
    let refused = eventually(Duration::from_secs(6), || async {
        let res = gw.chat(&key, json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": "still?"}]})).await;
        res.status() == 401
    })
    .await;
    let lag = revoked.elapsed();
    assert!(refused.is_some(), "never refused");
    assert!(
        lag < Duration::from_millis(2_500),
        "the revocation held only after {lag:?}"
    );
}
