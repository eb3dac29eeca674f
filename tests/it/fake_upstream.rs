//! A small in-process OpenAI-compatible upstream for the foundation tests: HTTP/1.1 with
//! keep-alive over a raw socket, buffered and SSE answers, recording of every request, and
//! faults chosen by markers in the last message (`[sim:fault=429]`, `[sim:fault=503]`,
//! `[sim:fault=break-after=N]`, `[sim:fault=echo-401]`: an error quoting the credential back,
//! `[sim:fault=stream-echo]`: a stream whose in-band error, after the first chunk, quotes it),
//! a delay before answering (`[sim:latency=MS]`, as the simulator's) and usage in a stream's
//! first chunk (`[sim:usage-first=1]`). The Gemini/Anthropic families use `tollgate-sim`
//! instead.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub const FAKE_KEY: &str = "sim-openai-key";

pub struct FakeUpstream {
    pub url: String,
    log: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeUpstream {
    pub async fn start() -> FakeUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let shared = log.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((sock, _)) = listener.accept().await {
                conns.spawn(serve(sock, shared.clone()));
            }
        });
        FakeUpstream { url, log, task }
    }

    /// Every request received: `{method, path, headers, body}`.
    pub fn requests(&self) -> Vec<Value> {
        self.log.lock().unwrap().clone()
    }
}

async fn serve(sock: TcpStream, log: Arc<Mutex<Vec<Value>>>) {
    let (read, mut write) = sock.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
        );
        let mut headers = serde_json::Map::new();
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).await.unwrap_or(0);
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(
                    k.trim().to_ascii_lowercase(),
                    Value::String(v.trim().to_owned()),
                );
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.as_str()?.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).await.is_err() {
            return;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        log.lock()
            .unwrap()
            .push(json!({"method": method, "path": path, "headers": headers, "body": body}));
        let keep = respond(&mut write, &path, &headers, &body).await;
        if !keep {
            return;
        }
    }
}

/// Writes one response; false when the connection must be dropped (a fault).
async fn respond(
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    path: &str,
    headers: &serde_json::Map<String, Value>,
    body: &Value,
) -> bool {
    if headers.get("authorization").and_then(Value::as_str) != Some(&format!("Bearer {FAKE_KEY}")) {
        return send_json(w, 401, &json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}})).await;
    }
    let text = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    let marker = |name: &str| {
        text.split(&format!("[sim:{name}="))
            .nth(1)
            .and_then(|r| r.split(']').next())
            .map(str::to_owned)
    };
    if let Some(ms) = marker("latency").and_then(|ms| ms.parse().ok()) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    let fault = marker("fault");
    match fault.as_deref() {
        Some("429") => return send_json(w, 429, &json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}})).await,
        Some("503") => return send_json(w, 503, &json!({"error": {"message": "The server is overloaded", "type": "server_error"}})).await,
        // An upstream that quotes the credential it was sent back in its error (some do).
        Some(f) if f.starts_with("echo-") => {
            let status = f["echo-".len()..].parse().unwrap_or(500);
            let auth = headers["authorization"].as_str().unwrap_or_default();
            let message = format!("Incorrect API key provided: {auth} (x-api-key: {FAKE_KEY}; key {FAKE_KEY})");
            return send_json(w, status, &json!({"error": {"message": message, "type": "invalid_request_error"}})).await;
        }
        // A redirect to itself: followed, it would come back with the credential, again.
        Some("redirect") => {
            let head = format!("HTTP/1.1 307 X\r\nlocation: {path}\r\ncontent-length: 0\r\n\r\n");
            return w.write_all(head.as_bytes()).await.is_ok();
        }
        _ => {}
    }
    let model = body["model"].clone();
    let prompt_tokens = text.len().div_ceil(4).max(1) as u64;
    if path.ends_with("/embeddings") {
        let inputs = match &body["input"] {
            Value::Array(a) => a.len(),
            _ => 1,
        };
        let data: Vec<Value> = (0..inputs)
            .map(
                |i| json!({"object": "embedding", "index": i, "embedding": [0.25, -0.5, i as f64]}),
            )
            .collect();
        return send_json(w, 200, &json!({"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 3, "total_tokens": 3}})).await;
    }
    let reply = format!("Echo: {}", &text[..text.len().min(48)]);
    let pieces: Vec<String> = reply
        .as_bytes()
        .chunks(reply.len().div_ceil(6))
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": pieces.len(), "total_tokens": prompt_tokens + pieces.len() as u64,
                       "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}});
    if body["stream"] != true {
        let answer = json!({"id": "chatcmpl-upstream", "object": "chat.completion", "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}], "usage": usage});
        return send_json(w, 200, &answer).await;
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-upstream", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    // Usage in the first chunk too, as some OpenAI-compatible servers send it (input counted,
    // no output yet): a stream cut after it has used input and produced nothing.
    if marker("usage-first").is_some() {
        events[0]["usage"] = json!({"prompt_tokens": prompt_tokens, "completion_tokens": 0,
                                    "total_tokens": prompt_tokens});
    }
    events.extend(
        pieces
            .iter()
            .map(|p| chunk(json!({"content": p}), Value::Null)),
    );
    events.push(chunk(json!({}), json!("stop")));
    if body["stream_options"]["include_usage"] == true {
        events.push(json!({"id": "chatcmpl-upstream", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model, "choices": [], "usage": usage}));
    }
    if fault.as_deref() == Some("stream-echo") {
        events.truncate(2);
        events.push(
            json!({"error": {"message": format!("session lost for key {FAKE_KEY}"), "code": 500}}),
        );
    }
    let break_after: Option<usize> = fault
        .as_deref()
        .and_then(|f| f.strip_prefix("break-after=")?.parse().ok());
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    if w.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    let frames = events
        .iter()
        .map(|e| format!("data: {e}\n\n"))
        .chain(["data: [DONE]\n\n".to_owned()]);
    for (i, frame) in frames.enumerate() {
        if break_after == Some(i) {
            let _ = w.flush().await;
            return false; // drop the connection inside the chunked body
        }
        if w.write_all(format!("{:x}\r\n{frame}\r\n", frame.len()).as_bytes())
            .await
            .is_err()
        {
            return false;
        }
        let _ = w.flush().await;
    }
    w.write_all(b"0\r\n\r\n").await.is_ok()
}

async fn send_json(w: &mut tokio::net::tcp::OwnedWriteHalf, status: u16, v: &Value) -> bool {
    let body = v.to_string();
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    w.write_all(head.as_bytes()).await.is_ok() && w.write_all(body.as_bytes()).await.is_ok()
}
