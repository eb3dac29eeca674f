//! Upstream fault storm: every way an upstream can fail, on every family, buffered and
//! streamed, many times over — each maps to a clear error, nothing undelivered is billed, and
//! the gateway holds no more connections or memory afterwards than before.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{eventually, sse_data, Gateway, Sim};

const MODELS: [&str; 4] = [
    "google/gemini-2.5-flash",
    "vertex/gemini-2.5-flash",
    "anthropic/claude-haiku-4-5",
    "vertex/claude-sonnet-4-5",
];

/// Open file descriptors of a process (its sockets included).
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// What the client saw: the status, and for a 200 stream the last two frames.
async fn outcome(gw: &Gateway, key: &str, model: &str, stream: bool, fault: &str) -> (u16, Value) {
    let body = json!({"model": model, "stream": stream,
        "messages": [{"role": "user", "content": format!("tell me [sim:fault={fault}]")}]});
    let res = gw.chat(key, body).await;
    let status = res.status().as_u16();
    let text = res.text().await.unwrap_or_default();
    if stream && status == 200 {
        let frames = sse_data(&text);
        assert_eq!(
            frames.last().map(String::as_str),
            Some("[DONE]"),
            "{model} {fault}: {text}"
        );
        let error = frames
            .iter()
            .rev()
            .nth(1)
            .and_then(|f| serde_json::from_str::<Value>(f).ok())
            .unwrap_or(Value::Null);
        (status, error)
    } else {
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

#[tokio::test]
async fn a_fault_storm_maps_to_clear_errors_and_leaks_nothing() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let pid = gw.pid();
    // Warm up every route (pools, token) before counting.
    for model in MODELS {
        for stream in [false, true] {
            outcome(&gw, &key, model, stream, "none").await;
        }
    }
    let fds_before = open_fds(pid);
    let rss_before = rss_kib(pid);
    for round in 0..5 {
        for model in MODELS {
            for (fault, buffered_status) in [
                ("500", 500),
                ("429", 429),
                ("garbage", 502),
                ("break-after=2", 502),
            ] {
                let (status, v) = outcome(&gw, &key, model, false, fault).await;
                assert_eq!(
                    status, buffered_status,
                    "round {round} {model} {fault}: {v}"
                );
                assert_eq!(v["error"]["type"], "upstream_error", "{model} {fault}: {v}");
            }
            // A stream that fails before its first content fails over (every route fails the
            // same way here) and is refused with the upstream's status, or a 502; one that
            // fails after it ends with the error frame. Anthropic's first two events carry no
            // content, so its `break-after=2` comes before any.
            let claude = model.contains("claude");
            for (fault, stream_status) in [
                ("500", 500),
                ("429", 429),
                ("garbage", 502),
                ("break-after=2", if claude { 502 } else { 200 }),
                ("error-first", 502),
                ("error-event", 200),
            ] {
                let (status, v) = outcome(&gw, &key, model, true, fault).await;
                assert_eq!(status, stream_status, "{model} {fault}: {v}");
                assert_eq!(v["error"]["type"], "upstream_error", "{model} {fault}: {v}");
            }
        }
    }
    let settled = eventually(Duration::from_secs(10), || async {
        open_fds(pid) <= fds_before + 2
    })
    .await;
    assert!(
        settled.is_some(),
        "connections are released: {} fds after the storm, {fds_before} before",
        open_fds(pid)
    );
    let grown = rss_kib(pid).saturating_sub(rss_before);
    assert!(
        grown < 32 * 1024,
        "memory stays bounded: grew {grown} KiB over 200 failures"
    );
    // Billed: only what was delivered — no buffered failure has a record.
    let records = gw.cli_json(&["usage", "--workspace", &ws]);
    for r in records.as_array().unwrap() {
        if r["stream"] == false {
            assert_eq!(
                r["outcome"], "complete",
                "a failed buffered request is not billed: {r}"
            );
        }
    }
}

#[tokio::test]
async fn silence_from_the_upstream_times_out_before_and_during_the_answer() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start(); // read_timeout: 5s
    let (_, key) = gw.workspace_with_key();
    let model = "vertex/gemini-2.5-flash";
    let slow = |stream: bool| {
        json!({"model": model, "stream": stream,
            "messages": [{"role": "user", "content": "hi [sim:latency=7000]"}]})
    };
    let (buffered, streamed, stalled) = tokio::join!(
        gw.chat(&key, slow(false)),
        gw.chat(&key, slow(true)),
        outcome(&gw, &key, model, true, "stall"),
    );
    for (what, res) in [("buffered", buffered), ("stream", streamed)] {
        assert_eq!(
            res.status(),
            504,
            "{what}: a slow first byte is a gateway timeout"
        );
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["type"], "upstream_error", "{what}: {v}");
    }
    let (status, frame) = stalled;
    assert_eq!(status, 200, "the stream had begun");
    assert_eq!(
        frame["error"]["type"], "upstream_error",
        "silence mid-stream ends it: {frame}"
    );
}
