//! HTTP/2 to the upstreams (`tollgate.upstream.http2`): calls in flight share a connection,
//! up to `http2_max_streams` each, and the gateway opens another when every one is full
//! rather than queueing behind the first; plain `http://` upstreams get it only by prior
//! knowledge (`always`). Over TLS, ALPN decides (`upstream_tls.rs`).

use serde_json::{json, Value};

use crate::harness::{whole_answer, Gateway, GatewayBuilder, Sim};

/// A stream of five events 100 ms apart: long enough for five of them to be open at once.
fn slow_stream() -> Value {
    json!({"model": "google/gemini-3.8-flash", "stream": true,
        "messages": [{"role": "user", "content": "[sim:chunks=5] [sim:chunk-delay=100] a story"}]})
}

/// A gateway whose only route for Google's models is the Developer API on `sim`.
fn gateway(sim: &Sim, upstream: &str) -> GatewayBuilder {
    Gateway::builder()
        .simulator(sim)
        .without_env("TEST_VERTEX_PROJECT")
        .without_env("TEST_VERTEX_CREDENTIALS")
        .upstream(upstream.to_owned())
}

/// The connections the simulator accepted while `work` ran, leaving out the two of its own
/// stats requests (each a connection of its own).
async fn connections_during(sim: &Sim, work: impl std::future::Future<Output = ()>) -> u64 {
    let count = |stats: Value| stats["connections"].as_u64().unwrap();
    let before = count(sim.stats().await);
    work.await;
    count(sim.stats().await) - before - 1
}

#[tokio::test]
async fn streams_beyond_a_connections_limit_open_another_connection() {
    let sim = Sim::start();
    let gw = gateway(&sim, "http2: always, http2_max_streams: 2").start();
    let (_, key) = gw.workspace_with_key();
    let five = async {
        let calls = (0..5).map(|_| async {
            let res = gw.chat(&key, slow_stream()).await;
            whole_answer(res, true).await
        });
        for answer in futures_util::future::join_all(calls).await {
            answer.unwrap();
        }
    };
    // Two streams a connection: three connections, none queued behind another's streams
    // (hyper's own pool would have put all five on one, two open and three waiting).
    assert_eq!(connections_during(&sim, five).await, 3);
    let stats = sim.stats().await;
    assert_eq!(stats["http2_requests"], 5, "{stats}");
    // Room again on the open connections: the next calls use them.
    let two = async {
        for _ in 0..2 {
            let res = gw.chat(&key, slow_stream()).await;
            whole_answer(res, true).await.unwrap();
        }
    };
    assert_eq!(connections_during(&sim, two).await, 0);
}

#[tokio::test]
async fn plain_http_upstreams_get_http2_only_by_prior_knowledge() {
    let sim = Sim::start();
    for (mode, http2_requests) in [("auto", 0), ("never", 0), ("always", 3)] {
        let gw = gateway(&sim, &format!("http2: {mode}")).start();
        let (_, key) = gw.workspace_with_key();
        let before = sim.stats().await["http2_requests"].as_u64().unwrap();
        for stream in [false, true, false] {
            let mut body = slow_stream();
            body["stream"] = stream.into();
            whole_answer(gw.chat(&key, body).await, stream)
                .await
                .unwrap();
        }
        let after = sim.stats().await["http2_requests"].as_u64().unwrap();
        assert_eq!(after - before, http2_requests, "http2: {mode}");
    }
}
