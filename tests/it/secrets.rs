//! No secret anywhere it should not be: a whole session — every family, buffered and streamed,
//! embeddings, client and upstream errors, the operator CLI — with the gateway logging at debug
//! level, then every log line, response (headers and body) and CLI output is searched for each
//! client key, provider key and OAuth token the session used.

use serde_json::{json, Value};

use crate::harness::{Gateway, Sim};

/// One request's whole answer as text: status line, headers, body.
async fn send(req: reqwest::RequestBuilder) -> String {
    let res = req.send().await.unwrap();
    let mut text = format!("{}\n", res.status());
    for (name, value) in res.headers() {
        text.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("")));
    }
    text + &res.text().await.unwrap()
}

#[tokio::test]
async fn no_secret_reaches_a_log_line_a_response_or_the_cli() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).capture_logs().start();
    let (ws, key) = gw.workspace_with_key();
    let broke = {
        let ws = gw.workspace();
        gw.key(&ws, &[])
    };
    let client = reqwest::Client::new();
    let chat = |key: &str, body: Value| {
        client
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth(key)
            .json(&body)
    };
    let mut seen = Vec::new();
    let models = [
        "google/gemini-2.5-flash",
        "vertex/gemini-2.5-flash",
        "global/gemini-2.5-flash",
        "anthropic/claude-haiku-4-5",
        "vertex/claude-sonnet-4-5",
    ];
    for model in models {
        for stream in [false, true] {
            for text in [
                "hello",
                "throttled [sim:fault=429]",
                "broken [sim:fault=500]",
            ] {
                let body = json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]});
                seen.push(send(chat(&key, body)).await);
            }
        }
    }
    let hello = json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}]});
    seen.push(send(chat(&broke, hello.clone())).await); // 402
    seen.push(send(chat("sk-tg-not-a-key-at-all-0000000000000", hello.clone())).await); // 401
    seen.push(
        send(chat(
            &key,
            json!({"model": "nope/nope", "messages": [{"role": "user", "content": "hi"}]}),
        ))
        .await,
    );
    seen.push(
        send(
            client
                .post(gw.url("/v1/chat/completions"))
                .bearer_auth(&key)
                .body("{not json"),
        )
        .await,
    );
    seen.push(
        send(
            client
                .post(gw.url("/v1/embeddings"))
                .bearer_auth(&key)
                .json(&json!({"model": "google/text-embedding-004", "input": ["a", "b"]})),
        )
        .await,
    );
    seen.push(send(client.get(gw.url("/v1/models")).bearer_auth(&key)).await);
    for path in ["/status", "/ready", "/health"] {
        seen.push(send(client.get(format!("{}{path}", gw.admin))).await);
    }
    for args in [
        vec!["key", "list", "--workspace", ws.as_str()],
        vec!["usage", "--workspace", ws.as_str()],
        vec!["ledger", "--workspace", ws.as_str()],
        vec!["catalog", "list"],
        vec!["workspace", "list"],
    ] {
        let out = gw.cli_raw(&args);
        seen.push(String::from_utf8_lossy(&out.stdout).into_owned());
        seen.push(String::from_utf8_lossy(&out.stderr).into_owned());
    }

    // The credentials the gateway sent upstream, as the simulator received them.
    let mut secrets = vec![key.clone(), broke.clone()];
    for request in sim.requests().await {
        for (name, value) in request["headers"].as_object().into_iter().flatten() {
            if ["authorization", "x-goog-api-key", "x-api-key"].contains(&name.as_str()) {
                let value = value.as_str().unwrap();
                secrets.push(value.trim_start_matches("Bearer ").to_owned());
            }
        }
    }
    secrets.sort();
    secrets.dedup();
    assert!(
        secrets.len() >= 5,
        "client keys, the Gemini and Anthropic keys and a Vertex token were all used: {secrets:?}"
    );
    gw.cli(&["ledger", "verify"]); // a last command, then read the log
    let log = std::fs::read_to_string(&gw.log_file).unwrap();
    assert!(
        log.contains("tollgate::access"),
        "the log holds the session's access lines: searching it means something"
    );
    for secret in &secrets {
        let leaks: Vec<String> = log
            .lines()
            .filter(|line| line.contains(secret.as_str()))
            .map(|line| line.replace(secret.as_str(), "<SECRET>"))
            .collect();
        assert!(
            leaks.is_empty(),
            "a secret is in the gateway's log: {leaks:#?}"
        );
        for text in &seen {
            assert!(
                !text.contains(secret.as_str()),
                "a secret is in an answer: {text}"
            );
        }
    }
}
