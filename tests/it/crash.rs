//! A crash loses no bill: under load at a fixed rate the gateway is killed (SIGKILL, then a
//! fast stop with SIGINT), restarted, and every answer its clients got with a 200 has its usage
//! record (the journal, replayed at start), no record twice, and the ledger verifies.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::harness::{eventually, signal, whole_answer, Gateway, Sim};

/// What the clients saw: complete answers (200), and requests cut by the crash.
#[derive(Default)]
struct Seen {
    answered: AtomicUsize,
    cut: AtomicUsize,
    /// A connection was refused: the gateway is gone.
    gone: AtomicBool,
}

/// Sends buffered and streamed chats at `per_second` until the gateway is gone (its port
/// refuses), counting what came back whole.
async fn load(url: String, key: String, per_second: u64, seen: Arc<Seen>) {
    let client = reqwest::Client::new();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
    let mut sent = Vec::new();
    for i in 0..per_second * 30 {
        if seen.gone.load(Ordering::SeqCst) {
            break;
        }
        tick.tick().await;
        let (client, url, key, seen) = (client.clone(), url.clone(), key.clone(), seen.clone());
        let stream = i % 3 == 0;
        sent.push(tokio::spawn(async move {
            match chat(&client, &url, &key, stream).await {
                Ok(true) => seen.answered.fetch_add(1, Ordering::SeqCst),
                Ok(false) => seen.cut.fetch_add(1, Ordering::SeqCst),
                Err(()) => {
                    seen.gone.store(true, Ordering::SeqCst);
                    0
                }
            };
        }));
    }
    for s in sent {
        let _ = s.await;
    }
}

/// `Ok(true)`: a complete answer; `Ok(false)`: cut short; `Err`: refused before any byte.
async fn chat(client: &reqwest::Client, url: &str, key: &str, stream: bool) -> Result<bool, ()> {
    let body = json!({"model": "google/gemini-2.5-flash", "stream": stream,
        "messages": [{"role": "user", "content": "count me [sim:chunks=3]"}]});
    let res = client
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await;
    let res = match res {
        Ok(res) => res,
        Err(e) if e.is_connect() => return Err(()),
        Err(_) => return Ok(false),
    };
    Ok(whole_answer(res, stream).await.is_ok())
}

/// Loads the gateway, sends it `sig` once answers flow, restarts it, and checks that
/// every complete answer is billed once.
async fn crash_with(sig: &str) {
    let sim = Sim::start();
    let mut gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let seen = Arc::new(Seen::default());
    let load = tokio::spawn(load(gw.base.clone(), key, 200, seen.clone()));
    // Mid-run: once answers are flowing, with more in flight.
    let flowing = eventually(Duration::from_secs(30), || async {
        seen.answered.load(Ordering::SeqCst) >= 60
    })
    .await;
    assert!(flowing.is_some(), "the load never got going");
    let pid = gw.pid();
    signal(pid, sig);
    tokio::task::block_in_place(|| gw.wait_exit());
    load.await.unwrap();
    let answered = seen.answered.load(Ordering::SeqCst);
    let cut = seen.cut.load(Ordering::SeqCst);

    tokio::task::block_in_place(|| gw.start());
    let records = || async {
        let s = tollgate::store::open(&gw.store_url).await.unwrap();
        s.usage(&ws, None).await.unwrap()
    };
    // Replayed from the journal and the spool within a few writer ticks.
    eventually(Duration::from_secs(15), || async {
        records().await.len() >= answered
    })
    .await;
    let records = records().await;
    let ids: std::collections::HashSet<_> = records.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids.len(), records.len(), "no record twice");
    assert!(
        records.len() >= answered,
        "after {sig}: {answered} complete answers, {} records",
        records.len()
    );
    // A request whose answer was journaled just before the crash cut its last bytes is billed
    // too (the upstream produced it all): at most the cut ones.
    assert!(
        records.len() <= answered + cut,
        "after {sig}: {} records for {answered} answers and {cut} cut",
        records.len()
    );
    let verify = gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_answered_request() {
    crash_with("KILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_under_load_drains_the_ledger_and_loses_nothing() {
    crash_with("INT").await;
}
