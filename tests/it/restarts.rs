//! Zero-downtime restarts, with real signals to real processes: a graceful upgrade (`serve -u`,
//! then `SIGQUIT` to the old process) under steady load, streams included, loses no request and
//! no ledger record; `SIGTERM` lets in-flight streams finish, flushes the ledger and closes idle
//! connections at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::harness::{eventually, signal, whole_answer, Gateway, Sim};
use crate::raw::{health_kept_alive, read_until_closed};

/// One request, judged: `Ok` when the client got a complete answer (a stream ending with its
/// usage chunk and `[DONE]`, no error frame), else what went wrong.
async fn complete(
    client: &reqwest::Client,
    gw_url: &str,
    key: &str,
    stream: bool,
) -> Result<(), String> {
    let body = json!({"model": "google/gemini-2.5-flash", "stream": stream,
        "messages": [{"role": "user", "content": "a steady stream [sim:chunk-delay=40][sim:chunks=8]"}]});
    let res = client
        .post(format!("{gw_url}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    whole_answer(res, stream).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_upgrade_under_load_loses_no_request_and_no_record() {
    let sim = Sim::start();
    let mut gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..6 {
        let (stop, key, url) = (stop.clone(), key.clone(), gw.base.clone());
        clients.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let (mut ok, mut failed) = (0usize, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match complete(&client, &url, &key, i % 2 == 0).await {
                    Ok(()) => ok += 1,
                    Err(e) => failed.push(e),
                }
            }
            (ok, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    tokio::task::block_in_place(|| gw.upgrade());
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut served, mut lost) = (0, Vec::new());
    for c in clients {
        let (ok, failed) = c.await.unwrap();
        served += ok;
        lost.extend(failed);
    }
    assert!(
        lost.is_empty(),
        "requests lost across the upgrade: {lost:#?}"
    );
    assert!(served > 20, "the load was steady ({served} requests)");
    // The new process answers, and every request served by either process is on the books.
    complete(&reqwest::Client::new(), &gw.base, &key, false)
        .await
        .unwrap();
    served += 1;
    let booked = eventually(Duration::from_secs(10), || async {
        gw.cli_json(&["usage", "--workspace", &ws])
            .as_array()
            .map(Vec::len)
            == Some(served)
    })
    .await;
    assert!(
        booked.is_some(),
        "{} records for {served} requests",
        gw.cli_json(&["usage", "--workspace", &ws])
            .as_array()
            .map_or(0, Vec::len)
    );
    let verify = gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_streams_finish_and_flushes_the_ledger() {
    let sim = Sim::start();
    let mut gw = Gateway::builder().simulator(&sim).start(); // grace_period_seconds: 1
    let (ws, key) = gw.workspace_with_key();
    let url = gw.base.clone();
    let streams: Vec<_> = (0..4)
        .map(|_| {
            let (url, key) = (url.clone(), key.clone());
            tokio::spawn(async move { complete(&reqwest::Client::new(), &url, &key, true).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::task::block_in_place(|| gw.terminate());
    for s in streams {
        s.await
            .unwrap()
            .expect("an in-flight stream finishes after SIGTERM");
    }
    // The process is gone; its ledger writer drained before it exited.
    let records = gw.cli_json(&["usage", "--workspace", &ws]);
    assert_eq!(records.as_array().unwrap().len(), 4, "{records}");
    assert!(
        reqwest::get(format!("{url}/health")).await.is_err(),
        "the gateway stopped"
    );
}

#[tokio::test]
async fn sigterm_closes_connections_idle_between_requests_at_once() {
    let gw = Gateway::builder().start(); // grace_period_seconds: 1
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let (mut sock, answer) = health_kept_alive(&addr).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    signal(gw.pid(), "TERM");
    let (rest, took) = read_until_closed(&mut sock, "an idle connection closes").await;
    assert!(rest.is_empty(), "{rest}");
    // When the shutdown begins, not when the runtimes stop after the grace period.
    assert!(took < Duration::from_millis(900), "closed after {took:?}");
}
