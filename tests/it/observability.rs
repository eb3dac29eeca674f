//! What operators and clients see of a request: its `x-request-id` on every answer (the
//! client's own when it is a plain token, else the completion id, else one the gateway made
//! up), in the access log and on the usage record.

use serde_json::{json, Value};

use crate::harness::{Gateway, PgDatabase, Sim, ADMIN_TOKEN};

fn hello(stream: bool) -> Value {
    json!({"model": "google/gemini-2.5-flash-lite", "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]})
}

async fn post(gw: &Gateway, key: &str, id: Option<&str>, body: Value) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body);
    if let Some(id) = id {
        req = req.header("x-request-id", id);
    }
    req.send().await.unwrap()
}

async fn get(gw: &Gateway, path: &str, key: &str) -> (u16, Value) {
    let res = reqwest::Client::new()
        .get(gw.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap())
}

fn request_id(res: &reqwest::Response) -> String {
    res.headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn every_answer_carries_the_request_id_and_the_record_keeps_it() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).capture_logs().start();
    let (ws, key) = gw.workspace_with_key();
    for stream in [false, true] {
        let id = format!("trace-{stream}.1");
        let res = post(&gw, &key, Some(&id), hello(stream)).await;
        assert_eq!(res.status(), 200);
        assert_eq!(request_id(&res), id, "stream: {stream}");
    }
    // Errors too: before authentication, and an upstream failure.
    let res = post(&gw, "sk-tg-wrong", Some("bad-key.1"), hello(false)).await;
    assert_eq!(
        (res.status().as_u16(), request_id(&res)),
        (401, "bad-key.1".into())
    );
    let res = reqwest::get(gw.url("/v1/nope")).await.unwrap();
    assert_eq!(res.status(), 404);
    assert!(
        request_id(&res).starts_with("req_"),
        "made up when none was sent"
    );
    // Not a plain token: never echoed; the completion id names the request instead.
    let res = post(&gw, &key, Some("a b<script>"), hello(false)).await;
    let made_up = request_id(&res);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["id"], made_up.as_str());
    let ids: Vec<String> = gw
        .usage_records(&ws, 3)
        .await
        .iter()
        .map(|r| r["request_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    for id in ["trace-false.1", "trace-true.1", made_up.as_str()] {
        assert!(
            ids.iter().any(|i| i == id),
            "{id} on a usage record: {ids:?}"
        );
    }
    let log = std::fs::read_to_string(&gw.log_file).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("tollgate::access") && l.contains("trace-true.1")),
        "in the access log"
    );
}

#[tokio::test]
async fn a_client_reads_its_own_generations_and_key_unbilled_and_ungated() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let res = post(&gw, &key, None, hello(false)).await;
    let id = request_id(&res);
    assert!(id.starts_with("chatcmpl-"), "{id}");
    let generation = format!("/v1/generation?id={id}");
    assert_eq!(gw.usage_records(&ws, 1).await.len(), 1);
    let (status, v) = get(&gw, &generation, &key).await;
    assert_eq!(status, 200, "{v}");
    let g = &v["data"];
    assert_eq!(g["id"], id.as_str());
    assert_eq!(g["model_id"], "google/gemini-2.5-flash-lite");
    assert_eq!(g["route"], "gemini-api");
    assert_eq!(g["outcome"], "complete");
    assert!(
        g["input_tokens"].as_u64() > Some(0) && g["cost"].is_string(),
        "{g}"
    );
    // Another workspace cannot see it.
    let (_, other) = gw.workspace_with_key();
    let (status, v) = get(&gw, &generation, &other).await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (404, &json!("generation_not_found"))
    );
    // Neither lookup is billed or gated: a workspace without credit still reads its own.
    let empty = gw.workspace();
    let broke = gw.key(&empty, &[]);
    let (status, v) = get(&gw, "/v1/key", &broke).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["workspace"]["credit_usd"], "0.0");
    let (status, _) = get(&gw, "/v1/generation?id=chatcmpl-none", &broke).await;
    assert_eq!(status, 404, "not 402");
    let (status, v) = get(&gw, "/v1/key", &key).await;
    assert_eq!(status, 200);
    assert_eq!(v["id"].as_str(), Some(gw.key_id(&ws, &key).as_str()));
    assert!(!v.to_string().contains(&key), "never the secret");
    assert_eq!(gw.usage_records(&ws, 1).await.len(), 1, "nothing billed");
    let (status, v) = get(&gw, "/v1/key", "sk-tg-nope").await;
    assert_eq!((status, &v["error"]["code"]), (401, &json!("invalid_key")));
}

/// The value of the `/metrics` sample `name{labels}` (labels in Prometheus' sorted order).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn metrics_count_the_traffic_sent() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    for stream in [false, false, false, true] {
        let res = post(&gw, &key, None, hello(stream)).await;
        assert_eq!(res.status(), 200);
        let _ = res.bytes().await.unwrap();
    }
    for _ in 0..2 {
        let res = post(&gw, "sk-tg-nope", None, hello(false)).await;
        assert_eq!(res.status(), 401);
    }
    let records = gw.usage_records(&ws, 4).await;
    assert_eq!(records.len(), 4);
    let sum = |field: &str| -> f64 {
        records
            .iter()
            .map(|r| r[field].as_u64().unwrap() as f64)
            .sum()
    };
    // The ledger writer commits off the response path: scrape once it has.
    let mut text = String::new();
    for _ in 0..50 {
        let res = reqwest::get(format!("{}/metrics", gw.admin)).await.unwrap();
        assert_eq!(res.status(), 200);
        assert!(res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"));
        text = res.text().await.unwrap();
        if sample(&text, "tollgate_ledger_commit_seconds_count").is_some_and(|n| n >= 1.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let model = "google/gemini-2.5-flash-lite";
    let ok = format!(
        r#"tollgate_requests_total{{code="",endpoint="chat",model="{model}",route="gemini-api",status="200"}}"#
    );
    assert_eq!(sample(&text, &ok), Some(4.0), "{text}");
    let refused = r#"tollgate_requests_total{code="invalid_key",endpoint="chat",model="",route="",status="401"}"#;
    assert_eq!(sample(&text, refused), Some(2.0));
    assert_eq!(
        sample(&text, r#"tollgate_refusals_total{code="invalid_key"}"#),
        Some(2.0)
    );
    let billed = scrape(&gw, "/admin/v1/metrics", Some(ADMIN_TOKEN)).await.1;
    for (bucket, field) in [("input", "input_tokens"), ("output", "output_tokens")] {
        let series = format!(r#"tollgate_tokens_total{{bucket="{bucket}",model="{model}"}}"#);
        assert_eq!(sample(&billed, &series), Some(sum(field)), "{bucket}");
    }
    let ttft = format!(r#"tollgate_time_to_first_token_seconds_count{{model="{model}"}}"#);
    assert_eq!(sample(&text, &ttft), Some(4.0));
    assert_eq!(
        sample(
            &text,
            r#"tollgate_upstream_attempts_total{route="gemini-api"}"#
        ),
        Some(4.0)
    );
    assert!(sample(&text, "tollgate_keys_cached").is_some_and(|n| n >= 1.0));
    assert_eq!(sample(&text, "tollgate_store_reachable"), Some(1.0));
    let route = format!(r#"tollgate_route_state{{kind="gemini-api",model="{model}",region=""}}"#);
    assert_eq!(sample(&text, &route), Some(0.0), "healthy");
}

/// A GET of the admin listener's `path`, with the admin token or without: `(status, body)`.
async fn scrape(gw: &Gateway, path: &str, token: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().get(format!("{}{path}", gw.admin));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let res = req.send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

#[tokio::test]
async fn money_series_need_the_admin_token() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let res = post(&gw, &key, None, hello(false)).await;
    assert_eq!(res.status(), 200);
    let cost = r#"tollgate_cost_usd_total{model="google/gemini-2.5-flash-lite"}"#;
    let mut billed = String::new();
    for _ in 0..50 {
        let (status, text) = scrape(&gw, "/admin/v1/metrics", Some(ADMIN_TOKEN)).await;
        assert_eq!(status, 200, "{text}");
        billed = text;
        if sample(&billed, cost).is_some_and(|usd| usd > 0.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        sample(&billed, cost).is_some_and(|usd| usd > 0.0),
        "{billed}"
    );
    assert!(billed.contains("tollgate_requests_total{"), "and the rest");

    let (status, public) = scrape(&gw, "/metrics", None).await;
    assert_eq!(status, 200);
    assert!(public.contains("tollgate_requests_total{"), "{public}");
    for money in ["tollgate_cost_usd", "tollgate_tokens_total"] {
        assert!(!public.contains(money), "{money} in the public /metrics");
    }
    let (status, _) = scrape(&gw, "/admin/v1/metrics", None).await;
    assert_eq!(status, 401);
    let (status, _) = scrape(&gw, "/admin/v1/metrics", Some("not-the-admin-token")).await;
    assert_eq!(status, 401);
}

/// PostgreSQL: a usage record in the default partition (of a month that has no partition of
/// its own) is on the gauge an operator alerts on, from the gateway's start.
#[tokio::test]
async fn a_record_in_the_default_partition_is_on_the_metrics() {
    let db = PgDatabase::create().await;
    let sim = Sim::start();
    let mut gw = Gateway::builder()
        .store(db.url.clone())
        .simulator(&sim)
        .start();
    let series = "tollgate_usage_default_partition_records";
    let (status, text) = scrape(&gw, "/metrics", None).await;
    assert_eq!(status, 200);
    assert_eq!(sample(&text, series), Some(0.0), "empty at start");
    // A real record, stored again as if it had finished in a month with no partition yet.
    let (ws, key) = gw.workspace_with_key();
    assert_eq!(post(&gw, &key, None, hello(false)).await.status(), 200);
    gw.usage_records(&ws, 1).await;
    let store = tollgate::store::open(&db.url).await.unwrap();
    let mut stray = store.usage(&ws, None).await.unwrap().remove(0);
    stray.id.push_str("-stray");
    stray.started_at = "2031-06-10T12:00:00Z".parse().unwrap();
    stray.finished_at = stray.started_at;
    assert_eq!(store.record_usage(&[stray]).await.unwrap(), 1);
    assert_eq!(store.default_partition_records().await.unwrap(), 1);

    gw.stop();
    gw.start();
    let (_, text) = scrape(&gw, "/metrics", None).await;
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
}

/// `Server-Timing`'s two durations (ms): `(gateway, upstream)`.
fn server_timing(res: &reqwest::Response) -> (f64, Option<f64>) {
    let value = res.headers()["server-timing"].to_str().unwrap().to_owned();
    let dur = |name: &str| {
        value.split(',').find_map(|part| {
            let rest = part.trim().strip_prefix(name)?.strip_prefix(";dur=")?;
            rest.parse::<f64>().ok()
        })
    };
    (dur("gateway").expect(&value), dur("upstream"))
}

#[tokio::test]
async fn every_answer_says_the_gateways_time_and_the_metrics_record_the_same() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let slow = |stream: bool| {
        json!({"model": "google/gemini-2.5-flash-lite", "stream": stream,
            "messages": [{"role": "user", "content": "[sim:latency=300] hi"}]})
    };
    let mut gateway_ms = Vec::new();
    for stream in [false, true] {
        let sent = std::time::Instant::now();
        let res = post(&gw, &key, None, slow(stream)).await;
        let (gateway, upstream) = server_timing(&res);
        let _ = res.bytes().await.unwrap();
        let whole = sent.elapsed().as_secs_f64() * 1e3;
        // The upstream's 300 ms are the upstream's, not the gateway's (for a stream: to its head).
        let upstream = upstream.expect("an upstream was called");
        assert!((300.0..whole).contains(&upstream), "{upstream} of {whole}");
        assert!(gateway < 100.0 && gateway + upstream <= whole, "{gateway}");
        gateway_ms.push(gateway);
    }
    // A refusal and a local answer: the gateway's time alone.
    let refused = post(&gw, "sk-tg-nope", None, hello(false)).await;
    assert_eq!(refused.status(), 401);
    let (gateway, upstream) = server_timing(&refused);
    assert_eq!(upstream, None);
    gateway_ms.push(gateway);
    let models = reqwest::get(gw.url("/health")).await.unwrap();
    assert_eq!(server_timing(&models).1, None);

    // The chat door's histogram holds exactly the three figures the chat answers carried (to
    // the header's microsecond).
    let (_, text) = scrape(&gw, "/metrics", None).await;
    let series = r#"tollgate_gateway_added_seconds_sum{endpoint="chat"}"#;
    let sum_ms = sample(&text, series).unwrap() * 1e3;
    let said: f64 = gateway_ms.iter().sum();
    assert!((sum_ms - said).abs() < 0.002, "{sum_ms} against {said}");
    let count = r#"tollgate_gateway_added_seconds_count{endpoint="chat"}"#;
    assert_eq!(sample(&text, count), Some(3.0));
}
