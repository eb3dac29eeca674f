#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Integration tests of the `tollgate-sim` binary: each test spawns the simulator on a free
//! loopback port and talks to it over HTTP like the gateway will.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

const GKEY: &str = "sim-gemini-key";
const AKEY: &str = "sim-anthropic-key";
const OKEY: &str = "sim-openai-key";

struct Sim {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    base: String,
    http: reqwest::Client,
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sim {
    fn start(extra: &[&str]) -> Sim {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-sim"))
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tollgate-sim");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let base = line
            .trim()
            .strip_prefix("tollgate-sim listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Sim {
            child,
            _stdout: out,
            base,
            http: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn gemini(&self, model: &str, method: &str, body: Value) -> reqwest::Response {
        let q = if method == "streamGenerateContent" {
            "?alt=sse"
        } else {
            ""
        };
        self.http
            .post(self.url(&format!("/v1beta/models/{model}:{method}{q}")))
            .header("x-goog-api-key", GKEY)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn token(&self) -> String {
        let r = self
            .http
            .post(self.url("/token"))
            .form(&[
                ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                ("assertion", &jwt(3600, true)),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        v["access_token"].as_str().unwrap().to_owned()
    }

    async fn vertex(&self, token: &str, path: &str, body: Value) -> reqwest::Response {
        self.http
            .post(self.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn anthropic(&self, body: Value) -> reqwest::Response {
        self.http
            .post(self.url("/v1/messages"))
            .header("x-api-key", AKEY)
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn openai(&self, path: &str, body: Value) -> reqwest::Response {
        self.http
            .post(self.url(path))
            .bearer_auth(OKEY)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn control(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut rb = self.http.request(method, self.url(path));
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb.send().await.unwrap();
        assert!(r.status().is_success(), "control {path}: {}", r.status());
        r.json().await.unwrap()
    }
}

fn tok(s: &str) -> u64 {
    (s.len() as u64).div_ceil(4)
}

fn b64url(v: &Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
}

fn jwt(lifetime: i64, cloud_scope: bool) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let scope = if cloud_scope {
        "https://www.googleapis.com/auth/cloud-platform"
    } else {
        "https://www.googleapis.com/auth/userinfo.email"
    };
    format!(
        "{}.{}.{}",
        b64url(&json!({"alg": "RS256", "typ": "JWT"})),
        b64url(
            &json!({"iss": "sa@proj.iam.gserviceaccount.com", "scope": scope,
            "aud": "https://oauth2.googleapis.com/token", "iat": now, "exp": now + lifetime})
        ),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b"not-a-real-signature")
    )
}

fn user(text: &str) -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": text}]}]})
}

/// Parses `data:` events (SSE separated by blank lines with CRLF or LF).
fn sse_data(raw: &str) -> Vec<Value> {
    raw.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Anthropic events as (event name, data).
fn sse_events(raw: &str) -> Vec<(String, Value)> {
    raw.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|ev| {
            let name = ev
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap()
                .to_owned();
            let data = ev.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name, serde_json::from_str(data).unwrap())
        })
        .collect()
}

async fn json_of(r: reqwest::Response) -> (u16, Value) {
    let s = r.status().as_u16();
    (s, r.json().await.unwrap())
}

// ---------------------------------------------------------------------------------------------
// Gemini Developer API
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn gemini_buffered_text_thinking_and_gemini3() {
    let sim = Sim::start(&[]);
    let (s, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", user("Hello"))
            .await,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let c = &v["candidates"][0];
    assert_eq!(c["content"]["role"], "model");
    assert_eq!(c["content"]["parts"][0]["text"], "Echo: Hello");
    assert_eq!(c["finishReason"], "STOP");
    assert_eq!(c["index"], 0);
    let u = &v["usageMetadata"];
    assert_eq!(u["promptTokenCount"], tok("Hello"));
    assert_eq!(u["candidatesTokenCount"], tok("Echo: Hello"));
    assert_eq!(u["totalTokenCount"], tok("Hello") + tok("Echo: Hello"));
    assert_eq!(u["promptTokensDetails"][0]["modality"], "TEXT");
    assert!(u.get("thoughtsTokenCount").is_none());
    assert_eq!(v["modelVersion"], "gemini-2.5-flash-lite");
    assert!(v["responseId"].as_str().is_some());
    assert!(v.get("createTime").is_none());

    // Given a budget 2.5 Flash-Lite thinks; includeThoughts returns the thought part first.
    let mut body = user("Why?");
    body["generationConfig"] =
        json!({"thinkingConfig": {"includeThoughts": true, "thinkingBudget": 512}});
    let (_, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body)
            .await,
    )
    .await;
    let parts = &v["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0]["thought"], true);
    assert_eq!(parts[0]["text"], "Thinking: Why?");
    assert_eq!(parts[1]["text"], "Echo: Why?");
    let u = &v["usageMetadata"];
    assert_eq!(u["thoughtsTokenCount"], tok("Thinking: Why?"));
    assert_eq!(
        u["totalTokenCount"],
        tok("Why?") + tok("Echo: Why?") + tok("Thinking: Why?")
    );
    // Thinking off: no thought tokens.
    let mut body = user("Why?");
    body["generationConfig"] = json!({"thinkingConfig": {"thinkingBudget": 0}});
    let (_, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body)
            .await,
    )
    .await;
    assert!(v["usageMetadata"].get("thoughtsTokenCount").is_none());

    // Gemini 3: signature on the text part.
    let (_, v) = json_of(
        sim.gemini("gemini-3.1-pro-preview", "generateContent", user("Hi"))
            .await,
    )
    .await;
    assert!(
        v["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
            .as_str()
            .is_some()
    );

    // JSON mode answers a JSON object.
    let mut body = user("Hi");
    body["generationConfig"] = json!({"responseMimeType": "application/json"});
    let (_, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body)
            .await,
    )
    .await;
    let text = v["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        json!({"echo": "Hi"})
    );

    // maxOutputTokens: thoughts are charged first, then the text is cut.
    let mut body = user("a long question indeed");
    body["generationConfig"] = json!({"maxOutputTokens": tok("Thinking: a long question indeed") + 2,
        "thinkingConfig": {"thinkingBudget": 512}});
    let (_, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body)
            .await,
    )
    .await;
    assert_eq!(v["candidates"][0]["finishReason"], "MAX_TOKENS");
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        "Echo: a "
    );
}

#[tokio::test]
async fn gemini_stream_uses_crlf_and_running_usage() {
    let sim = Sim::start(&[]);
    let mut thinking = user("Hello world");
    thinking["generationConfig"] = json!({"thinkingConfig": {"thinkingBudget": 512}});
    let r = sim
        .gemini("gemini-2.5-flash-lite", "streamGenerateContent", thinking)
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let raw = r.text().await.unwrap();
    assert!(raw.contains("\r\n\r\n"));
    assert!(raw.ends_with("\r\n\r\n"));
    assert!(
        raw.starts_with("data: {\"candidates\": [{\"content\": {\"parts\": ["),
        "Google's `\": \"` style: {raw}"
    );
    assert!(!raw.contains("[DONE]"));
    for ev in raw.split("\r\n\r\n").filter(|e| !e.is_empty()) {
        assert!(ev.starts_with("data: {"), "{ev:?}");
    }
    let events = sse_data(&raw);
    assert_eq!(events.len(), 3);
    let text: String = events
        .iter()
        .map(|e| {
            e["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(text, "Echo: Hello world");
    for e in &events {
        assert_eq!(e["usageMetadata"]["promptTokenCount"], tok("Hello world"));
        assert_eq!(
            e["usageMetadata"]["thoughtsTokenCount"],
            tok("Thinking: Hello world")
        );
    }
    let last = events.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(
        last["usageMetadata"]["candidatesTokenCount"],
        tok("Echo: Hello world")
    );
    assert!(events[0]["candidates"][0].get("finishReason").is_none());

    // Gemini 3 ends with an empty text part carrying the signature.
    let raw = sim
        .gemini(
            "gemini-3.1-pro-preview",
            "streamGenerateContent",
            user("Hi [sim:chunks=2]"),
        )
        .await
        .text()
        .await
        .unwrap();
    let events = sse_data(&raw);
    assert_eq!(events.len(), 3);
    let last = &events[2]["candidates"][0];
    assert_eq!(last["content"]["parts"][0]["text"], "");
    assert!(last["content"]["parts"][0]["thoughtSignature"].is_string());
    assert_eq!(last["finishReason"], "STOP");

    // Without alt=sse Google streams one JSON array.
    let r = sim
        .http
        .post(sim.url("/v1beta/models/gemini-2.5-flash-lite:streamGenerateContent"))
        .header("x-goog-api-key", GKEY)
        .json(&user("Hi"))
        .send()
        .await
        .unwrap();
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let arr: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(arr.as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn gemini_auth_rejections() {
    let sim = Sim::start(&[]);
    let r = sim
        .http
        .post(sim.url("/v1beta/models/gemini-2.5-flash-lite:generateContent"))
        .header("x-goog-api-key", "wrong")
        .json(&user("x"))
        .send()
        .await
        .unwrap();
    let (s, v) = json_of(r).await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(
        v["error"]["message"],
        "API key not valid. Please pass a valid API key."
    );
    assert_eq!(v["error"]["details"][0]["reason"], "API_KEY_INVALID");
    // ?key= works.
    let r = sim
        .http
        .post(sim.url(&format!(
            "/v1beta/models/gemini-2.5-flash-lite:generateContent?key={GKEY}"
        )))
        .json(&user("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // No key at all.
    let r = sim
        .http
        .post(sim.url("/v1beta/models/gemini-2.5-flash-lite:generateContent"))
        .json(&user("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn gemini_validation_errors() {
    let sim = Sim::start(&[]);
    // Unknown fields, top level and inside generationConfig.
    let mut body = user("x");
    body["foo"] = json!(1);
    body["generationConfig"] = json!({"response_format": {"type": "json"}});
    let (s, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body)
            .await,
    )
    .await;
    assert_eq!(s, 400);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("Invalid JSON payload received. Unknown name \"foo\": Cannot find field."),
        "{msg}"
    );
    assert!(
        msg.contains("Unknown name \"response_format\" at 'generation_config': Cannot find field."),
        "{msg}"
    );
    assert_eq!(
        v["error"]["details"][0]["@type"],
        "type.googleapis.com/google.rpc.BadRequest"
    );
    // snake_case spellings of known fields are fine.
    let mut body = user("x");
    body["generation_config"] = json!({"max_output_tokens": 50});
    assert_eq!(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body)
            .await
            .status(),
        200
    );

    // Penalties on 2.5+.
    let mut body = user("x");
    body["generationConfig"] = json!({"presencePenalty": 0.5});
    let (s, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body.clone())
            .await,
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(
        v,
        json!({"error": {"code": 400, "message": "Penalty is not enabled for models/gemini-2.5-flash-lite", "status": "INVALID_ARGUMENT"}})
    );
    // Vertex still takes penalties.
    let t = sim.token().await;
    let vertex = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent";
    assert_eq!(sim.vertex(&t, vertex, body).await.status(), 200);
    let mut body = user("x");
    body["generationConfig"] = json!({"frequencyPenalty": 0.0});
    assert_eq!(
        sim.gemini("gemini-3.1-pro-preview", "generateContent", body)
            .await
            .status(),
        200
    );

    // Roles.
    let body = json!({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]});
    let (s, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body)
            .await,
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "Please use a valid role: user, model."
    );

    // thinkingConfig rules.
    let cases = [
        ("gemini-3.1-pro-preview", json!({"thinkingLevel": "low", "thinkingBudget": 1024}), "You can only set only one of thinking budget and thinking level."),
        ("gemini-3.1-pro-preview", json!({"thinkingLevel": "minimal"}), "Thinking level MINIMAL is not supported for this model. Please retry with other thinking level."),
        ("gemini-2.5-flash-lite", json!({"thinkingBudget": 128}), "The thinking budget 128 is invalid. Please choose a value between 512 and 24576."),
    ];
    for (model, tc, want) in cases {
        let mut body = user("x");
        body["generationConfig"] = json!({"thinkingConfig": tc});
        let (s, v) = json_of(sim.gemini(model, "generateContent", body).await).await;
        assert_eq!(s, 400, "{model}");
        assert_eq!(v["error"]["message"], want);
    }
    // 2.5 Pro, served on Vertex only since its Gemini API shutdown.
    let mut body = user("x");
    body["generationConfig"] = json!({"thinkingConfig": {"thinkingBudget": 0}});
    let pro = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent";
    let (s, v) = json_of(sim.vertex(&t, pro, body).await).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "Budget 0 is invalid. This model only works in thinking mode."
    );
    let mut body = user("x");
    body["generationConfig"] = json!({"thinkingConfig": {"thinkingLevel": "low"}});
    assert_eq!(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body.clone())
            .await
            .status(),
        400
    );
    assert_eq!(
        sim.gemini("gemini-3.1-pro-preview", "generateContent", body)
            .await
            .status(),
        200
    );

    // Unknown model.
    let (s, v) = json_of(sim.gemini("gpt-4o", "generateContent", user("x")).await).await;
    assert_eq!(s, 404);
    assert_eq!(v["error"]["status"], "NOT_FOUND");

    // Schema keywords outside the OpenAPI subset.
    let mut body = user("x");
    body["tools"] = json!([{"functionDeclarations": [{"name": "f", "parameters": {"type": "object", "additionalProperties": false}}]}]);
    let (s, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body)
            .await,
    )
    .await;
    assert_eq!(s, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("at 'tools[0].function_declarations[0].parameters'"));
}

#[tokio::test]
async fn gemini_function_calls_and_signatures() {
    let sim = Sim::start(&[]);
    let tools = json!([{"functionDeclarations": [{"name": "get_weather", "description": "w", "parameters": {"type": "OBJECT", "properties": {"arg": {"type": "STRING"}}}}]}]);
    let mut body = user("weather? [sim:call=get_weather]");
    body["tools"] = tools.clone();
    let (s, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body.clone())
            .await,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let part = &v["candidates"][0]["content"]["parts"][0];
    assert_eq!(
        part["functionCall"],
        json!({"name": "get_weather", "args": {"arg": "value"}})
    );
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(
        v["usageMetadata"]["candidatesTokenCount"],
        tok("get_weather{\"arg\":\"value\"}")
    );

    let mut par = user("[sim:call=get_weather][sim:parallel=3]");
    par["tools"] = tools.clone();
    let (_, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", par)
            .await,
    )
    .await;
    assert_eq!(
        v["candidates"][0]["content"]["parts"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Gemini 3: signature on the first call + finishMessage; replay must carry it.
    let (_, v) = json_of(
        sim.gemini("gemini-3.1-pro-preview", "generateContent", body.clone())
            .await,
    )
    .await;
    let call_part = v["candidates"][0]["content"]["parts"][0].clone();
    assert!(call_part["thoughtSignature"].is_string());
    assert_eq!(
        v["candidates"][0]["finishMessage"],
        "Model generated function call(s)."
    );
    let history = |model_part: Value| {
        json!({
            "contents": [
                {"role": "user", "parts": [{"text": "weather? [sim:call=get_weather]"}]},
                {"role": "model", "parts": [model_part]},
                {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}}]}
            ],
            "tools": tools,
        })
    };
    let (s, v) = json_of(
        sim.gemini(
            "gemini-3.1-pro-preview",
            "generateContent",
            history(call_part.clone()),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        "Echo: received 1 tool result(s)"
    );
    let mut unsigned = call_part.clone();
    unsigned.as_object_mut().unwrap().remove("thoughtSignature");
    let (s, v) = json_of(
        sim.gemini(
            "gemini-3.1-pro-preview",
            "generateContent",
            history(unsigned.clone()),
        )
        .await,
    )
    .await;
    assert_eq!(s, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Function call is missing a thought_signature"));
    // 2.5 treats signatures as advisory.
    assert_eq!(
        sim.gemini(
            "gemini-2.5-flash-lite",
            "generateContent",
            history(unsigned)
        )
        .await
        .status(),
        200
    );
    let mut forged = call_part;
    forged["thoughtSignature"] = json!("Zm9yZ2Vk");
    assert_eq!(
        sim.gemini("gemini-3.1-pro-preview", "generateContent", history(forged))
            .await
            .status(),
        400
    );

    // Function args must be an object (a JSON string is a translator bug).
    let bad = json!({"contents": [
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": "{\"arg\":\"value\"}"}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"r": 1}}}]}
    ]});
    let (s, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", bad)
            .await,
    )
    .await;
    assert_eq!(s, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Invalid value at 'contents[1].parts[0].function_call.args'"));
}

#[tokio::test]
async fn gemini_count_tokens_and_embeddings() {
    let sim = Sim::start(&[]);
    let (s, v) = json_of(
        sim.gemini(
            "gemini-2.5-flash-lite",
            "countTokens",
            user("Hello, world!"),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(v["totalTokens"], tok("Hello, world!"));
    assert_eq!(
        v["promptTokensDetails"][0]["tokenCount"],
        tok("Hello, world!")
    );

    let body = json!({"content": {"parts": [{"text": "hello"}]}, "taskType": "RETRIEVAL_QUERY", "outputDimensionality": 16});
    let (s, v) = json_of(sim.gemini("gemini-embedding-2", "embedContent", body).await).await;
    assert_eq!(s, 200, "{v}");
    let one = v["embedding"]["values"].as_array().unwrap().clone();
    assert_eq!(one.len(), 16);
    let (_, v) = json_of(
        sim.gemini(
            "gemini-embedding-2",
            "embedContent",
            json!({"content": {"parts": [{"text": "hello"}]}}),
        )
        .await,
    )
    .await;
    let full = v["embedding"]["values"].as_array().unwrap();
    assert_eq!(full.len(), 3072);
    assert_eq!(
        &full[..16],
        &one[..],
        "truncation is a prefix of the full vector"
    );

    let req = |t: &str| json!({"model": "models/gemini-embedding-001", "content": {"parts": [{"text": t}]}, "taskType": "RETRIEVAL_DOCUMENT"});
    let (s, v) = json_of(
        sim.gemini(
            "gemini-embedding-001",
            "batchEmbedContents",
            json!({"requests": [req("hello"), req("world")]}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["embeddings"].as_array().unwrap().len(), 2);
    assert_eq!(v["embeddings"][0]["values"].as_array().unwrap().len(), 3072);

    let many: Vec<Value> = (0..101).map(|i| req(&i.to_string())).collect();
    let (s, v) = json_of(
        sim.gemini(
            "gemini-embedding-001",
            "batchEmbedContents",
            json!({"requests": many}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n"
    );

    let (s, _) = json_of(
        sim.gemini(
            "gemini-2.5-flash-lite",
            "embedContent",
            json!({"content": {"parts": [{"text": "x"}]}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 404);
}

/// The most significant digits of any number in the `values` arrays of `raw`: an `f32` written
/// in its shortest form needs at most 9, one widened to `f64` 17.
fn most_value_digits(raw: &str) -> usize {
    raw.split("\"values\"")
        .skip(1)
        .flat_map(|rest| {
            let list = &rest[rest.find('[').unwrap() + 1..rest.find(']').unwrap()];
            list.split(',').map(|n| {
                let mantissa = n.trim().split(['e', 'E']).next().unwrap();
                mantissa
                    .trim_start_matches(['-', '0', '.'])
                    .chars()
                    .filter(char::is_ascii_digit)
                    .count()
            })
        })
        .max()
        .unwrap()
}

#[tokio::test]
async fn embedding_values_are_written_as_f32_like_googles() {
    let sim = Sim::start(&[]);
    let req = |t: &str| json!({"model": "models/gemini-embedding-001", "content": {"parts": [{"text": t}]}});
    let batch = json!({"requests": [req("hello"), req("world")]});
    for (method, body) in [
        ("embedContent", req("hello")),
        ("batchEmbedContents", batch),
    ] {
        let r = sim.gemini("gemini-embedding-001", method, body).await;
        assert_eq!(r.status(), 200);
        let digits = most_value_digits(&r.text().await.unwrap());
        assert!((6..=9).contains(&digits), "{method}: {digits} digits");
    }
    let t = sim.token().await;
    let path =
        "/v1/projects/p/locations/us-central1/publishers/google/models/text-embedding-005:predict";
    let r = sim
        .vertex(&t, path, json!({"instances": [{"content": "hello"}]}))
        .await;
    assert_eq!(r.status(), 200);
    let digits = most_value_digits(&r.text().await.unwrap());
    assert!((6..=9).contains(&digits), "predict: {digits} digits");
}

#[tokio::test]
async fn google_answers_are_compact_with_pretty_print_false() {
    let sim = Sim::start(&[]);
    let embed = json!({"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "a \"quoted\"  text"}]}});
    let say = user("Say  something with \"quotes\"");
    for (model, method, body) in [
        ("gemini-2.5-flash-lite", "generateContent", say),
        ("gemini-embedding-001", "embedContent", embed),
    ] {
        let pretty = sim.gemini(model, method, body.clone()).await;
        let pretty = pretty.text().await.unwrap();
        for query in ["?prettyPrint=false", "?$prettyPrint=false"] {
            let compact = sim
                .gemini(model, &format!("{method}{query}"), body.clone())
                .await;
            assert_eq!(compact.status(), 200);
            let compact = compact.text().await.unwrap();
            assert!(pretty.contains("\n  "), "indented by default");
            assert!(!compact.contains('\n'), "{method}{query}: {compact}");
            let answer = |text: &str| {
                let mut v: Value = serde_json::from_str(text).unwrap();
                v.as_object_mut().unwrap().remove("responseId"); // one per answer
                v
            };
            assert_eq!(answer(&pretty), answer(&compact), "the same answer");
        }
    }
    let (s, v) = json_of(
        sim.gemini(
            "no-such-model",
            "generateContent?prettyPrint=false",
            user("x"),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].clone()),
        (404, json!(404)),
        "errors too"
    );
}

#[tokio::test]
async fn gemini_explicit_cache_lifecycle() {
    let sim = Sim::start(&[]);
    let post = |body: Value| {
        sim.http
            .post(sim.url("/v1beta/cachedContents"))
            .header("x-goog-api-key", GKEY)
            .json(&body)
            .send()
    };
    let small = json!({"model": "models/gemini-2.5-flash-lite", "contents": [{"role": "user", "parts": [{"text": "tiny"}]}], "ttl": "300s"});
    let (s, v) = json_of(post(small).await.unwrap()).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "Cached content is too small. total_token_count=1, min_total_token_count=2048"
    );

    let doc = "d".repeat(2048 * 4);
    let big = json!({"model": "models/gemini-2.5-flash-lite", "contents": [{"role": "user", "parts": [{"text": doc}]}],
        "systemInstruction": {"parts": [{"text": "sys"}]}, "ttl": "300s"});
    let (s, v) = json_of(post(big).await.unwrap()).await;
    assert_eq!(s, 200, "{v}");
    let name = v["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("cachedContents/"));
    assert!(v["expireTime"].as_str().unwrap().ends_with('Z'));
    let cached = tok(&doc) + 1; // doc + "sys" = 8195 bytes → 2049 tokens
    assert_eq!(v["usageMetadata"]["totalTokenCount"], cached);

    let mut body = user("question");
    body["cachedContent"] = json!(name);
    let (s, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body.clone())
            .await,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["usageMetadata"]["cachedContentTokenCount"], cached);
    assert_eq!(
        v["usageMetadata"]["promptTokenCount"],
        cached + tok("question")
    );
    assert_eq!(
        v["usageMetadata"]["cacheTokensDetails"][0]["tokenCount"],
        cached
    );

    let mut with_sys = body.clone();
    with_sys["systemInstruction"] = json!({"parts": [{"text": "x"}]});
    let (s, v) = json_of(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", with_sys)
            .await,
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["message"], "CachedContent can not be used with GenerateContent request setting system_instruction, tools or tool_config.");
    assert_eq!(
        sim.gemini("gemini-3.5-flash", "generateContent", body.clone())
            .await
            .status(),
        400
    );

    let get = sim
        .http
        .get(sim.url(&format!("/v1beta/{name}")))
        .header("x-goog-api-key", GKEY)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);
    let del = sim
        .http
        .delete(sim.url(&format!("/v1beta/{name}")))
        .header("x-goog-api-key", GKEY)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 200);
    assert_eq!(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", body)
            .await
            .status(),
        404
    );
}

// ---------------------------------------------------------------------------------------------
// OAuth + Vertex
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn token_endpoint_checks_the_assertion() {
    let sim = Sim::start(&["--token-ttl-secs", "1234"]);
    let post = |grant: &str, assertion: String| {
        sim.http
            .post(sim.url("/token"))
            .form(&[("grant_type", grant.to_owned()), ("assertion", assertion)])
            .send()
    };
    let grant = "urn:ietf:params:oauth:grant-type:jwt-bearer";
    let (s, v) = json_of(post(grant, jwt(3600, true)).await.unwrap()).await;
    assert_eq!(s, 200);
    assert!(v["access_token"].as_str().unwrap().starts_with("sim-"));
    assert_eq!(v["expires_in"], 1234);
    assert_eq!(v["token_type"], "Bearer");
    let (s, v) = json_of(post(grant, jwt(7200, true)).await.unwrap()).await;
    assert_eq!(s, 400);
    assert_eq!(v["error"], "invalid_grant");
    let (s, _) = json_of(post(grant, "only.two".into()).await.unwrap()).await;
    assert_eq!(s, 400);
    let missing_scope = format!(
        "{}.{}.c2ln",
        b64url(&json!({"alg": "RS256"})),
        b64url(&json!({"iss": "a", "aud": "b", "iat": 1, "exp": 2}))
    );
    assert_eq!(post(grant, missing_scope).await.unwrap().status(), 400);
    let (s, v) = json_of(post("client_credentials", jwt(60, true)).await.unwrap()).await;
    assert_eq!(s, 400);
    assert_eq!(v["error"], "unsupported_grant_type");
    let stats = sim.control(reqwest::Method::GET, "/_sim/stats", None).await;
    assert_eq!(stats["tokens_issued"], 1);
}

#[tokio::test]
async fn vertex_generate_stream_tiers_and_auth() {
    let sim = Sim::start(&[]);
    let t = sim.token().await;
    let regional = "/v1/projects/proj/locations/us-central1/publishers/google/models/gemini-2.5-flash-lite:generateContent";
    let (s, v) = json_of(sim.vertex(&t, regional, user("Hello")).await).await;
    assert_eq!(s, 200, "{v}");
    assert!(v["createTime"].as_str().unwrap().ends_with('Z'));
    assert_eq!(v["usageMetadata"]["trafficType"], "ON_DEMAND");
    assert_eq!(
        v["usageMetadata"]["candidatesTokensDetails"][0]["tokenCount"],
        tok("Echo: Hello")
    );
    assert!(v["usageMetadata"].get("serviceTier").is_none());

    // Vertex requires roles.
    let (s, v) = json_of(
        sim.vertex(
            &t,
            regional,
            json!({"contents": [{"parts": [{"text": "x"}]}]}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "Please use a valid role: user, model."
    );

    // Flex / priority headers on the global endpoint (v1beta1 form).
    let global = "/v1beta1/projects/proj/locations/global/publishers/google/models/gemini-2.5-flash:generateContent";
    for (hdr, want) in [
        ("flex", "ON_DEMAND_FLEX"),
        ("priority", "ON_DEMAND_PRIORITY"),
    ] {
        let r = sim
            .http
            .post(sim.url(global))
            .bearer_auth(&t)
            .header("X-Vertex-AI-LLM-Request-Type", "shared")
            .header("X-Vertex-AI-LLM-Shared-Request-Type", hdr)
            .json(&user("x"))
            .send()
            .await
            .unwrap();
        let (_, v) = json_of(r).await;
        assert_eq!(v["usageMetadata"]["trafficType"], want);
    }
    let r = sim
        .http
        .post(sim.url(regional))
        .bearer_auth(&t)
        .header("X-Vertex-AI-LLM-Shared-Request-Type", "flex")
        .json(&user("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await.1["usageMetadata"]["trafficType"],
        "ON_DEMAND",
        "flex is global-only"
    );
    // A body serviceTier is rejected / ignored like the notes describe.
    let mut body = user("x");
    body["serviceTier"] = json!("flex");
    assert_eq!(sim.vertex(&t, global, body).await.status(), 400);

    // Stream: counts only in the final chunk, trafficType everywhere.
    let stream = "/v1/projects/proj/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    let r = sim
        .http
        .post(sim.url(stream))
        .bearer_auth(&t)
        .header("x-vertex-ai-llm-shared-request-type", "flex")
        .json(&user("Hello there"))
        .send()
        .await
        .unwrap();
    let raw = r.text().await.unwrap();
    assert!(raw.contains("\r\n\r\n"));
    let ev = sse_data(&raw);
    assert!(ev.len() >= 2);
    for e in &ev[..ev.len() - 1] {
        assert_eq!(e["usageMetadata"], json!({"trafficType": "ON_DEMAND_FLEX"}));
        assert!(e["createTime"].is_string());
    }
    let last = ev.last().unwrap();
    assert_eq!(
        last["usageMetadata"]["promptTokenCount"],
        tok("Hello there")
    );
    assert_eq!(last["usageMetadata"]["trafficType"], "ON_DEMAND_FLEX");
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");

    // Auth failures.
    let r = sim
        .http
        .post(sim.url(regional))
        .json(&user("x"))
        .send()
        .await
        .unwrap();
    let (s, v) = json_of(r).await;
    assert_eq!(s, 401);
    assert_eq!(v["error"]["status"], "UNAUTHENTICATED");
    assert_eq!(v["error"]["details"][0]["reason"], "CREDENTIALS_MISSING");
    let (s, v) = json_of(sim.vertex("ya29.bogus", regional, user("x")).await).await;
    assert_eq!(s, 401);
    assert_eq!(
        v["error"]["details"][0]["reason"],
        "ACCESS_TOKEN_TYPE_UNSUPPORTED"
    );
    // A token without the cloud-platform scope → 403.
    let r = sim
        .http
        .post(sim.url("/token"))
        .form(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
            ("assertion", &jwt(600, false)),
        ])
        .send()
        .await
        .unwrap();
    let narrow = r.json::<Value>().await.unwrap()["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, v) = json_of(sim.vertex(&narrow, regional, user("x")).await).await;
    assert_eq!(s, 403);
    assert_eq!(v["error"]["status"], "PERMISSION_DENIED");

    // countTokens
    let (s, v) = json_of(sim.vertex(&t, "/v1/projects/proj/locations/us-central1/publishers/google/models/gemini-2.5-flash:countTokens", user("Hello, world!")).await).await;
    assert_eq!(s, 200);
    assert_eq!(v["totalTokens"], tok("Hello, world!"));
    assert_eq!(v["totalBillableCharacters"], 12);
}

#[tokio::test]
async fn vertex_token_expiry_and_project() {
    let sim = Sim::start(&["--token-ttl-secs", "1", "--vertex-project", "good"]);
    let t = sim.token().await;
    let path = |p: &str| {
        format!("/v1/projects/{p}/locations/us-central1/publishers/google/models/gemini-2.5-flash-lite:generateContent")
    };
    assert_eq!(sim.vertex(&t, &path("good"), user("x")).await.status(), 200);
    let (s, v) = json_of(sim.vertex(&t, &path("other"), user("x")).await).await;
    assert_eq!(s, 403);
    assert_eq!(v["error"]["details"][0]["reason"], "IAM_PERMISSION_DENIED");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (s, v) = json_of(sim.vertex(&t, &path("good"), user("x")).await).await;
    assert_eq!(s, 401);
    assert_eq!(v["error"]["details"][0]["reason"], "ACCESS_TOKEN_EXPIRED");
}

#[tokio::test]
async fn vertex_predict_embeddings() {
    let sim = Sim::start(&[]);
    let t = sim.token().await;
    let path =
        "/v1/projects/p/locations/us-central1/publishers/google/models/text-embedding-005:predict";
    let body = json!({"instances": [{"content": "Hello, world!", "task_type": "RETRIEVAL_QUERY"}, {"content": "second", "title": "t"}],
        "parameters": {"outputDimensionality": 8, "autoTruncate": true}});
    let (s, v) = json_of(sim.vertex(&t, path, body).await).await;
    assert_eq!(s, 200, "{v}");
    let p0 = &v["predictions"][0]["embeddings"];
    assert_eq!(p0["values"].as_array().unwrap().len(), 8);
    assert_eq!(p0["statistics"]["token_count"], 4);
    assert_eq!(p0["statistics"]["truncated"], false);
    assert_eq!(v["metadata"]["billableCharacterCount"], 12 + 6);
    let many: Vec<Value> = (0..251)
        .map(|i| json!({"content": i.to_string()}))
        .collect();
    assert_eq!(
        sim.vertex(&t, path, json!({"instances": many}))
            .await
            .status(),
        400
    );
}

#[tokio::test]
async fn vertex_explicit_cache() {
    let sim = Sim::start(&[]);
    let t = sim.token().await;
    let doc = "v".repeat(2048 * 4);
    let create = json!({"model": "projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash",
        "contents": [{"role": "user", "parts": [{"text": doc}]}], "ttl": "60s"});
    let (s, v) = json_of(
        sim.vertex(
            &t,
            "/v1/projects/p/locations/us-central1/cachedContents",
            create,
        )
        .await,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let name = v["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("projects/p/locations/us-central1/cachedContents/"));
    let mut body = user("q");
    body["cachedContent"] = json!(name);
    let gen = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent";
    let (s, v) = json_of(sim.vertex(&t, gen, body).await).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["usageMetadata"]["cachedContentTokenCount"], 2048);
    assert_eq!(v["usageMetadata"]["trafficType"], "ON_DEMAND");
}

// ---------------------------------------------------------------------------------------------
// Anthropic
// ---------------------------------------------------------------------------------------------

fn claude(text: &str) -> Value {
    json!({"model": "claude-haiku-4-5-20251001", "max_tokens": 1000, "messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn anthropic_buffered_and_stream_shapes() {
    let sim = Sim::start(&[]);
    let r = sim.anthropic(claude("Hello")).await;
    assert!(r.headers().get("request-id").is_some());
    let (s, v) = json_of(r).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert!(v["id"].as_str().unwrap().starts_with("msg_01"));
    assert_eq!(v["model"], "claude-haiku-4-5-20251001");
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "Echo: Hello"}])
    );
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["stop_sequence"], Value::Null);
    let u = &v["usage"];
    assert_eq!(u["input_tokens"], tok("Hello"));
    assert_eq!(u["output_tokens"], tok("Echo: Hello"));
    assert_eq!(u["cache_creation_input_tokens"], 0);
    assert_eq!(u["cache_read_input_tokens"], 0);
    assert_eq!(
        u["cache_creation"],
        json!({"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0})
    );
    assert_eq!(u["service_tier"], "standard");

    // Thinking: thinking block with signature, then text; budget counts in output_tokens.
    let mut body = claude("Think");
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    body["max_tokens"] = json!(2048);
    let (_, v) = json_of(sim.anthropic(body.clone()).await).await;
    assert_eq!(v["content"][0]["type"], "thinking");
    assert_eq!(v["content"][0]["thinking"], "Thinking: Think");
    let signature = v["content"][0]["signature"].as_str().unwrap().to_owned();
    assert_eq!(v["content"][1]["text"], "Echo: Think");
    assert_eq!(
        v["usage"]["output_tokens"],
        tok("Thinking: Think") + tok("Echo: Think")
    );

    // Stream.
    body["stream"] = json!(true);
    let r = sim.anthropic(body.clone()).await;
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let raw = r.text().await.unwrap();
    assert!(raw.contains("event: ping\ndata: {\"type\": \"ping\"}\n\n"));
    assert!(raw.contains("  }\n\n"), "first-party lines are padded");
    let ev = sse_events(&raw);
    for (name, data) in &ev {
        assert_eq!(&data["type"], name);
    }
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(names[1], "content_block_start");
    assert_eq!(names[2], "ping");
    assert_eq!(names[names.len() - 2], "message_delta");
    assert_eq!(names[names.len() - 1], "message_stop");
    assert_eq!(ev[0].1["message"]["usage"]["input_tokens"], tok("Think"));
    assert_eq!(ev[0].1["message"]["content"], json!([]));
    assert_eq!(
        ev[1].1["content_block"],
        json!({"type": "thinking", "thinking": "", "signature": ""})
    );
    assert!(ev
        .iter()
        .any(|(_, d)| d["delta"]["type"] == "signature_delta"));
    let text: String = ev
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "text_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Echo: Think");
    let md = &ev[ev.len() - 2].1;
    assert_eq!(md["delta"]["stop_reason"], "end_turn");
    assert_eq!(
        md["usage"]["output_tokens"],
        tok("Thinking: Think") + tok("Echo: Think")
    );
    assert_eq!(md["usage"]["input_tokens"], tok("Think"));

    // Replaying the thinking block: real signature OK, forged one rejected.
    let replay = |sig: &str| {
        json!({"model": "claude-haiku-4-5-20251001", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [
                {"role": "user", "content": "Think"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "Thinking: Think", "signature": sig}, {"type": "text", "text": "Echo: Think"}]},
                {"role": "user", "content": "again"}]})
    };
    assert_eq!(sim.anthropic(replay(&signature)).await.status(), 200);
    let (s, v) = json_of(sim.anthropic(replay("Zm9yZ2Vk")).await).await;
    assert_eq!(s, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Invalid `signature`"));
}

/// The thinking text and signature of a stream's thinking block, and whether any
/// `thinking_delta` came.
fn streamed_thinking(ev: &[(String, Value)]) -> (String, String, bool) {
    let deltas = |kind: &str, field: &str| -> String {
        ev.iter()
            .filter(|(_, d)| d["delta"]["type"] == kind)
            .map(|(_, d)| d["delta"][field].as_str().unwrap().to_owned())
            .collect()
    };
    let any = ev
        .iter()
        .any(|(_, d)| d["delta"]["type"] == "thinking_delta");
    (
        deltas("thinking_delta", "thinking"),
        deltas("signature_delta", "signature"),
        any,
    )
}

#[tokio::test]
async fn anthropic_adaptive_thinking_answers() {
    let sim = Sim::start(&[]);
    let opus = |extra: Value| {
        let mut b = json!({"model": "claude-opus-5-5", "max_tokens": 1000, "messages": [{"role": "user", "content": "Ponder"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let billed = tok("Thinking: Ponder") + tok("Echo: Ponder");
    // Thinking is on by default and its text omitted; the block is signed and billed.
    for extra in [
        json!({}),
        json!({"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}),
        json!({"thinking": {"type": "adaptive", "display": "omitted"}}),
    ] {
        let (s, v) = json_of(sim.anthropic(opus(extra.clone())).await).await;
        assert_eq!(s, 200, "{extra}: {v}");
        assert_eq!(v["content"][0]["type"], "thinking", "{extra}");
        assert_eq!(v["content"][0]["thinking"], "", "{extra}");
        assert!(!v["content"][0]["signature"].as_str().unwrap().is_empty());
        assert_eq!(
            v["content"][1],
            json!({"type": "text", "text": "Echo: Ponder"})
        );
        assert_eq!(v["usage"]["output_tokens"], billed, "{extra}");
        let mut body = opus(extra.clone());
        body["stream"] = json!(true);
        let ev = sse_events(&sim.anthropic(body).await.text().await.unwrap());
        let (text, sig, any_delta) = streamed_thinking(&ev);
        assert!(
            text.is_empty() && !any_delta,
            "no thinking_delta when empty: {extra}"
        );
        assert_eq!(sig, v["content"][0]["signature"], "{extra}");
        assert_eq!(ev[ev.len() - 2].1["usage"]["output_tokens"], billed);
    }
    // display: summarized shows a short summary, buffered and streamed.
    let summarized = json!({"thinking": {"type": "adaptive", "display": "summarized"}, "output_config": {"effort": "low"}});
    let (_, v) = json_of(sim.anthropic(opus(summarized.clone())).await).await;
    assert_eq!(v["content"][0]["thinking"], "Thinking: Ponder");
    assert_eq!(v["usage"]["output_tokens"], billed);
    let signature = v["content"][0]["signature"].as_str().unwrap().to_owned();
    let mut body = opus(summarized);
    body["stream"] = json!(true);
    let ev = sse_events(&sim.anthropic(body).await.text().await.unwrap());
    assert_eq!(streamed_thinking(&ev).0, "Thinking: Ponder");
    // The signed block replays.
    let replay = opus(json!({"messages": [
        {"role": "user", "content": "Ponder"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Thinking: Ponder", "signature": signature}, {"type": "text", "text": "Echo: Ponder"}]},
        {"role": "user", "content": "again"}]}));
    assert_eq!(sim.anthropic(replay).await.status(), 200);
    // Where thinking can be turned off, off means no block; budget models are unchanged.
    let mut off = opus(json!({"thinking": {"type": "disabled"}}));
    off["model"] = json!("claude-sonnet-5");
    let (_, v) = json_of(sim.anthropic(off).await).await;
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "Echo: Ponder"}])
    );
    let (_, v) = json_of(sim.anthropic(claude("Ponder")).await).await;
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "Echo: Ponder"}])
    );
    // The wrong mapping is refused as the real API refuses it.
    let (s, v) = json_of(
        sim.anthropic(opus(
            json!({"thinking": {"type": "enabled", "budget_tokens": 2048}}),
        ))
        .await,
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("budget_tokens is not supported on this model"));
}

#[tokio::test]
async fn anthropic_validation_and_auth() {
    let sim = Sim::start(&[]);
    let r = sim
        .http
        .post(sim.url("/v1/messages"))
        .header("x-api-key", "bad")
        .header("anthropic-version", "2023-06-01")
        .json(&claude("x"))
        .send()
        .await
        .unwrap();
    let (s, v) = json_of(r).await;
    assert_eq!(s, 401);
    assert_eq!(v["type"], "error");
    assert_eq!(
        v["error"],
        json!({"type": "authentication_error", "message": "invalid x-api-key"})
    );
    assert!(v["request_id"].as_str().unwrap().starts_with("req_"));
    let r = sim
        .http
        .post(sim.url("/v1/messages"))
        .header("x-api-key", AKEY)
        .json(&claude("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await.1["error"]["message"],
        "anthropic-version: header is required"
    );

    let check = |body: Value, want: &'static str| {
        let fut = sim.anthropic(body);
        async move {
            let (s, v) = json_of(fut.await).await;
            assert_eq!(s, 400, "{v}");
            assert_eq!(v["error"]["type"], "invalid_request_error");
            assert_eq!(v["error"]["message"], want);
        }
    };
    let mut no_max = claude("x");
    no_max.as_object_mut().unwrap().remove("max_tokens");
    check(no_max, "max_tokens: Field required").await;
    let mut extra = claude("x");
    extra["frequency_penalty"] = json!(0.1);
    check(extra, "frequency_penalty: Extra inputs are not permitted").await;
    let mut twice = claude("x");
    twice["messages"] = json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]);
    check(twice, "messages: roles must alternate between \"user\" and \"assistant\", but found multiple \"user\" roles in a row").await;
    let mut first = claude("x");
    first["messages"] = json!([{"role": "assistant", "content": "a"}]);
    check(first, "messages: first message must use the \"user\" role").await;
    let mut sys_role = claude("x");
    sys_role["messages"] = json!([{"role": "system", "content": "a"}]);
    check(
        sys_role,
        "messages.0.role: Input should be 'user' or 'assistant'",
    )
    .await;
    let mut low = claude("x");
    low["thinking"] = json!({"type": "enabled", "budget_tokens": 500});
    check(
        low,
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
    )
    .await;
    let mut over = claude("x");
    over["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    over["max_tokens"] = json!(1024);
    check(over, "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size").await;
    let mut both = claude("x");
    both["temperature"] = json!(0.5);
    both["top_p"] = json!(0.9);
    check(
        both,
        "`temperature` and `top_p` cannot both be specified for this model. Please use only one.",
    )
    .await;
    let mut sys = claude("x");
    sys["system"] = json!([{"type": "text", "text": "be brief"}]);
    assert_eq!(sim.anthropic(sys).await.status(), 200);
    let mut unknown_model = claude("x");
    unknown_model["model"] = json!("gpt-4o");
    assert_eq!(sim.anthropic(unknown_model).await.status(), 404);
}

#[tokio::test]
async fn anthropic_prompt_cache_write_then_read() {
    let sim = Sim::start(&[]);
    let big = "s".repeat(1024 * 4 + 40); // 1034 tokens ≥ 1024 minimum
    let body = |q: &str| {
        json!({"model": "claude-sonnet-5", "max_tokens": 100,
            "system": [{"type": "text", "text": big, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": q}]})
    };
    let (_, v) = json_of(sim.anthropic(body("first")).await).await;
    let u = &v["usage"];
    assert_eq!(u["cache_creation_input_tokens"], tok(&big));
    assert_eq!(u["cache_read_input_tokens"], 0);
    assert_eq!(u["cache_creation"]["ephemeral_5m_input_tokens"], tok(&big));
    let total = (big.len() as u64 + 5).div_ceil(4);
    assert_eq!(u["input_tokens"], total - tok(&big));
    let (_, v) = json_of(sim.anthropic(body("again")).await).await;
    let u = &v["usage"];
    assert_eq!(u["cache_creation_input_tokens"], 0);
    assert_eq!(u["cache_read_input_tokens"], tok(&big));
    // Below the minimum nothing is cached.
    let small = json!({"model": "claude-sonnet-5", "max_tokens": 100,
        "system": [{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "q"}]});
    let (_, v) = json_of(sim.anthropic(small).await).await;
    assert_eq!(v["usage"]["cache_creation_input_tokens"], 0);
}

#[tokio::test]
async fn anthropic_on_vertex() {
    let sim = Sim::start(&[]);
    let t = sim.token().await;
    let raw = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict";
    let stream = "/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict";
    let ok = json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]});
    let (s, v) = json_of(sim.vertex(&t, raw, ok.clone()).await).await;
    assert_eq!(s, 200, "{v}");
    assert!(v["id"].as_str().unwrap().starts_with("msg_vrtx_"));
    assert_eq!(v["model"], "claude-sonnet-4-5-20250929");
    assert_eq!(v["content"][0]["text"], "Echo: Hi");
    let mut with_model = ok.clone();
    with_model["model"] = json!("claude-sonnet-4-5");
    let (s, v) = json_of(sim.vertex(&t, raw, with_model).await).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "model: Extra inputs are not permitted"
    );
    let mut no_version = ok.clone();
    no_version
        .as_object_mut()
        .unwrap()
        .remove("anthropic_version");
    assert_eq!(sim.vertex(&t, raw, no_version).await.status(), 400);
    assert_eq!(sim.vertex("bogus", raw, ok.clone()).await.status(), 401);

    let mut sbody = ok;
    sbody["stream"] = json!(true);
    let raw_sse = sim.vertex(&t, stream, sbody).await.text().await.unwrap();
    let ev = sse_events(&raw_sse);
    assert!(ev[0].1["message"]["id"]
        .as_str()
        .unwrap()
        .starts_with("msg_vrtx_"));
    let md = ev.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(md.1["usage"], json!({"output_tokens": tok("Echo: Hi")}));
}

#[tokio::test]
async fn anthropic_counts_tokens_direct_and_on_vertex() {
    let sim = Sim::start(&[]);
    let betas =
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27";
    let prompt = |model: &str| {
        json!({"model": model,
            "system": [{"type": "text", "text": "You are Claude Code."}],
            "messages": [{"role": "user", "content": "count these words please"}],
            "tools": [{"name": "Read", "input_schema": {"type": "object"}, "defer_loading": true}],
            "thinking": {"type": "adaptive"},
            "output_config": {"effort": "medium"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}})
    };
    let direct = |body: Value| {
        sim.http
            .post(sim.url("/v1/messages/count_tokens"))
            .header("x-api-key", AKEY)
            .header("anthropic-version", "2023-06-01")
            .header("anthropic-beta", betas)
            .json(&body)
            .send()
    };
    let (s, v) = json_of(direct(prompt("claude-opus-4-6")).await.unwrap()).await;
    assert_eq!(s, 200, "{v}");
    let n = v["input_tokens"].as_u64().unwrap();
    assert!(n > tok("count these words please"), "{v}");
    assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    let mut with_max = prompt("claude-opus-4-6");
    with_max["max_tokens"] = json!(100);
    let (s, v) = json_of(direct(with_max).await.unwrap()).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "max_tokens: Extra inputs are not permitted"
    );

    let t = sim.token().await;
    let path =
        "/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict";
    let on_vertex = |body: Value| {
        sim.http
            .post(sim.url(path))
            .bearer_auth(&t)
            .header("anthropic-beta", betas)
            .json(&body)
            .send()
    };
    let mut versioned = prompt("claude-opus-4-6");
    versioned["anthropic_version"] = json!("vertex-2023-10-16");
    for body in [prompt("claude-opus-4-6"), versioned] {
        let (s, v) = json_of(on_vertex(body).await.unwrap()).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["input_tokens"], n, "the same prompt counts the same");
    }
    let (s, v) = json_of(on_vertex(prompt("claude-sonnet-4-5")).await.unwrap()).await;
    assert_eq!(s, 404, "the 4.5 generation needs its @date on Vertex: {v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("publishers/anthropic/models/claude-sonnet-4-5"));
    let mut no_model = prompt("x");
    no_model.as_object_mut().unwrap().remove("model");
    let (s, v) = json_of(on_vertex(no_model).await.unwrap()).await;
    assert_eq!(
        (s, &v["error"]["message"]),
        (400, &json!("model: Field required"))
    );
    let r = sim
        .http
        .post(sim.url(path))
        .json(&prompt("claude-opus-4-6"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // What was sent is on record, betas included.
    let log = sim
        .control(
            reqwest::Method::GET,
            "/_sim/requests?route=vertex.claude_count_tokens",
            None,
        )
        .await;
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 5, "two counts, the 404, the 400, the 401");
    assert_eq!(log[0]["headers"]["anthropic-beta"], betas);
    assert_eq!(log[0]["body"]["model"], "claude-opus-4-6");
    let log = sim
        .control(
            reqwest::Method::GET,
            "/_sim/requests?route=anthropic.count_tokens",
            None,
        )
        .await;
    assert_eq!(log[0]["headers"]["anthropic-beta"], betas);
    assert_eq!(log[0]["headers"]["anthropic-version"], "2023-06-01");
}

// ---------------------------------------------------------------------------------------------
// OpenAI-compatible
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn openai_chat_buffered_stream_tools() {
    let sim = Sim::start(&[]);
    let body = json!({"model": "my-local-model", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Hello"}]});
    let (s, v) = json_of(sim.openai("/v1/chat/completions", body.clone()).await).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "my-local-model");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["choices"][0]["message"]["content"], "Echo: Hello");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["prompt_tokens"], tok("sysHello"));
    assert_eq!(v["usage"]["completion_tokens"], tok("Echo: Hello"));
    assert_eq!(
        v["usage"]["completion_tokens_details"]["reasoning_tokens"],
        0
    );

    let mut sb = body.clone();
    sb["stream"] = json!(true);
    sb["stream_options"] = json!({"include_usage": true});
    let raw = sim
        .openai("/v1/chat/completions", sb.clone())
        .await
        .text()
        .await
        .unwrap();
    assert!(raw.trim_end().ends_with("data: [DONE]"));
    let ev = sse_data(&raw);
    assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
    let last = ev.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"]["total_tokens"],
        tok("sysHello") + tok("Echo: Hello")
    );
    let fin = &ev[ev.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "stop");
    assert_eq!(fin["usage"], Value::Null);
    let text: String = ev
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Echo: Hello");

    sb.as_object_mut().unwrap().remove("stream_options");
    let raw = sim
        .openai("/v1/chat/completions", sb)
        .await
        .text()
        .await
        .unwrap();
    assert!(!raw.contains("\"usage\""));
    assert!(sse_data(&raw)
        .iter()
        .all(|e| !e["choices"].as_array().unwrap().is_empty()));

    // Tool calls.
    let tools = json!([{"type": "function", "function": {"name": "get_capital", "parameters": {"type": "object"}}}]);
    let tb = json!({"model": "m", "tools": tools, "messages": [{"role": "user", "content": "[sim:call=get_capital] capital?"}]});
    let (_, v) = json_of(sim.openai("/v1/chat/completions", tb.clone()).await).await;
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_capital");
    assert_eq!(call["function"]["arguments"], "{\"arg\":\"value\"}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
    let mut ts = tb;
    ts["stream"] = json!(true);
    let ev = sse_data(
        &sim.openai("/v1/chat/completions", ts)
            .await
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(
        ev[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
        "get_capital"
    );
    let args: String = ev
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, "{\"arg\":\"value\"}");

    // Unknown parameter and auth.
    let mut bad = body.clone();
    bad["reasoning"] = json!({"effort": "low"});
    let (s, v) = json_of(sim.openai("/v1/chat/completions", bad).await).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "Unrecognized request argument supplied: reasoning"
    );
    let r = sim
        .http
        .post(sim.url("/v1/chat/completions"))
        .bearer_auth("sk-wrongkey123")
        .json(&body)
        .send()
        .await
        .unwrap();
    let (s, v) = json_of(r).await;
    assert_eq!(s, 401);
    assert_eq!(v["error"]["code"], "invalid_api_key");
}

/// The Responses API stream's events, checked for what every stream must be: named after their
/// `type`, numbered 0, 1, 2… .
fn responses_events(raw: &str) -> Vec<(String, Value)> {
    let ev = sse_events(raw);
    for (i, (name, data)) in ev.iter().enumerate() {
        assert_eq!(data["type"], name.as_str(), "{raw}");
        assert_eq!(data["sequence_number"], i, "{raw}");
    }
    ev
}

#[tokio::test]
async fn openai_responses_buffered_stream_tools_and_refusals() {
    let sim = Sim::start(&[]);
    let body =
        json!({"model": "gpt-5-mini", "instructions": "sys", "input": "Hello", "store": false});
    let (s, v) = json_of(sim.openai("/v1/responses", body.clone()).await).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["object"], "response");
    assert!(v["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(v["model"], "gpt-5-mini");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["store"], false);
    assert_eq!(v["instructions"], "sys");
    let msg = &v["output"][0];
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["role"], "assistant");
    assert!(msg["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(msg["content"][0]["type"], "output_text");
    assert_eq!(msg["content"][0]["text"], "Echo: Hello");
    let usage = &v["usage"];
    assert_eq!(usage["input_tokens"], tok("sysHello"));
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["output_tokens"], tok("Echo: Hello"));
    assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 0);
    assert_eq!(usage["total_tokens"], tok("sysHello") + tok("Echo: Hello"));

    // Streamed: the API's events in its order, the text in deltas, the usage at the end.
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    sb["input"] = json!([{"role": "user", "content": [{"type": "input_text", "text": "Hello [sim:chunks=2]"}]}]);
    let raw = sim.openai("/v1/responses", sb).await.text().await.unwrap();
    let ev = responses_events(&raw);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(ev[0].1["response"]["status"], "in_progress");
    assert_eq!(ev[0].1["response"]["usage"], Value::Null);
    assert_eq!(ev[2].1["item"]["status"], "in_progress");
    let item_id = ev[2].1["item"]["id"].as_str().unwrap();
    let text: String = ev
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| {
            assert_eq!(d["item_id"], item_id);
            d["delta"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, "Echo: Hello");
    assert_eq!(ev[6].1["text"], "Echo: Hello");
    let done = &ev[9].1["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "Echo: Hello");
    assert_eq!(
        done["usage"]["input_tokens"],
        tok("sysHello [sim:chunks=2]")
    );
    assert_eq!(done["id"], ev[0].1["response"]["id"]);

    // Function calls: flat tools, the marker's arguments, streamed in fragments.
    let tools = json!([{"type": "function", "name": "shell", "parameters": {"type": "object"}}]);
    let tb = json!({"model": "m", "tools": tools, "input": [{"role": "user", "content": "[sim:call=shell][sim:args={\"command\":\"ls\"}] list"}]});
    let (_, v) = json_of(sim.openai("/v1/responses", tb.clone()).await).await;
    let call = &v["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "shell");
    assert_eq!(call["arguments"], r#"{"command":"ls"}"#);
    assert!(call["call_id"].as_str().unwrap().starts_with("call_"));
    assert!(call["id"].as_str().unwrap().starts_with("fc_"));
    assert_eq!(v["usage"]["output_tokens"], tok(r#"shell{"command":"ls"}"#));
    let mut ts = tb;
    ts["stream"] = json!(true);
    let ev = responses_events(&sim.openai("/v1/responses", ts).await.text().await.unwrap());
    let args: String = ev
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(args, r#"{"command":"ls"}"#);
    let done = ev
        .iter()
        .find(|(n, _)| n == "response.function_call_arguments.done")
        .unwrap();
    assert_eq!(done.1["name"], "shell");
    assert_eq!(
        ev.last().unwrap().1["response"]["output"][0]["arguments"],
        args
    );

    // The tool's result comes back: the answer says so.
    let round = json!({"model": "m", "input": [
        {"role": "user", "content": "list"},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.rs"}
    ]});
    let (s, v) = json_of(sim.openai("/v1/responses", round).await).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        "Echo: received 1 tool result(s)"
    );
    assert_eq!(v["usage"]["input_tokens"], tok("listshell{}a.rs"));

    // The output cap.
    let (_, v) = json_of(
        sim.openai(
            "/v1/responses",
            json!({"model": "m", "input": "Hello", "max_output_tokens": 2}),
        )
        .await,
    )
    .await;
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(v["output"][0]["content"][0]["text"], "Echo: He");

    // Refusals, in the API's words.
    let orphan = json!({"model": "m", "input": [
        {"role": "user", "content": "x"},
        {"type": "function_call_output", "call_id": "call_9", "output": "y"}
    ]});
    let (s, v) = json_of(sim.openai("/v1/responses", orphan).await).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"],
        "No tool call found for function call output with call_id call_9."
    );
    assert_eq!(v["error"]["param"], "input");
    let mut cont = body.clone();
    cont["previous_response_id"] = json!("resp_abc");
    let (s, v) = json_of(sim.openai("/v1/responses", cont).await).await;
    assert_eq!(s, 404);
    assert_eq!(v["error"]["code"], "previous_response_not_found");
    assert_eq!(
        v["error"]["message"],
        "Previous response with id 'resp_abc' not found."
    );
    let mut bad = body.clone();
    bad["messages"] = json!([]);
    let (s, v) = json_of(sim.openai("/v1/responses", bad).await).await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["message"], "Unknown parameter: 'messages'.");
    let r = sim
        .http
        .post(sim.url("/v1/responses"))
        .bearer_auth("sk-wrongkey123")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(r).await.1["error"]["code"], "invalid_api_key");

    // Faults: a status, and the API's error event before any output or after the first delta.
    let (s, _) = json_of(
        sim.openai(
            "/v1/responses",
            json!({"model": "m", "input": "x [sim:fault=429]"}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 429);
    for (fault, at) in [("error-first", 2), ("error-event", 5)] {
        let body = json!({"model": "m", "stream": true, "input": format!("x [sim:fault={fault}]")});
        let raw = sim
            .openai("/v1/responses", body)
            .await
            .text()
            .await
            .unwrap();
        let ev = responses_events(&raw);
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), at + 2, "{fault}: {names:?}");
        assert_eq!(names[at..], ["error", "response.failed"], "{fault}");
        assert_eq!(ev[at].1["error"]["code"], "server_error");
        assert_eq!(ev[at + 1].1["response"]["status"], "failed");
        assert_eq!(ev[at + 1].1["response"]["error"]["code"], "server_error");
    }

    // Recorded like every other endpoint.
    let log = sim
        .control(
            reqwest::Method::GET,
            "/_sim/requests?route=openai.responses",
            None,
        )
        .await;
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 13);
    assert_eq!(log[0]["path"], "/v1/responses");
    assert_eq!(log[0]["body"]["input"], "Hello");
}

#[tokio::test]
async fn openai_embeddings_float_and_base64() {
    let sim = Sim::start(&[]);
    let (s, v) = json_of(
        sim.openai(
            "/v1/embeddings",
            json!({"model": "text-embedding-3-small", "input": ["hello", "world"]}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "text-embedding-3-small");
    assert_eq!(v["data"][1]["index"], 1);
    assert_eq!(v["data"][0]["object"], "embedding");
    assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 1536);
    assert_eq!(v["usage"]["prompt_tokens"], tok("hello") + tok("world"));
    let (_, v) = json_of(sim.openai("/v1/embeddings", json!({"model": "text-embedding-004", "input": "hello", "encoding_format": "base64", "dimensions": 64})).await).await;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(v["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    assert_eq!(raw.len(), 64 * 4);
    let floats: Vec<f32> = raw
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let norm: f32 = floats.iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-3);
}

// ---------------------------------------------------------------------------------------------
// Faults, pacing, recording
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn status_faults_use_real_bodies() {
    let sim = Sim::start(&[]);
    let (s, v) = json_of(
        sim.gemini(
            "gemini-2.5-flash-lite",
            "generateContent",
            user("x [sim:fault=429]"),
        )
        .await,
    )
    .await;
    assert_eq!(s, 429);
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(v["error"]["details"][1]["retryDelay"], "34.4s");
    let (s, v) = json_of(
        sim.gemini(
            "gemini-2.5-flash-lite",
            "streamGenerateContent",
            user("x [sim:fault=500]"),
        )
        .await,
    )
    .await;
    assert_eq!(s, 500);
    assert_eq!(v["error"]["status"], "INTERNAL");
    let (s, v) = json_of(
        sim.gemini(
            "gemini-2.5-flash-lite",
            "generateContent",
            user("x [sim:fault=503]"),
        )
        .await,
    )
    .await;
    assert_eq!(s, 503);
    assert_eq!(
        v["error"]["message"],
        "The model is overloaded. Please try again later."
    );

    let r = sim.anthropic(claude("x [sim:fault=429]")).await;
    assert!(r.headers().get("retry-after").is_some());
    let (s, v) = json_of(r).await;
    assert_eq!(s, 429);
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let (s, v) = json_of(sim.anthropic(claude("x [sim:fault=529]")).await).await;
    assert_eq!(s, 529);
    assert_eq!(
        v["error"],
        json!({"type": "overloaded_error", "message": "Overloaded"})
    );
    let (s, v) = json_of(sim.anthropic(claude("x [sim:fault=500]")).await).await;
    assert_eq!(s, 500);
    assert_eq!(v["error"]["type"], "api_error");

    let body =
        json!({"model": "m", "messages": [{"role": "user", "content": "x [sim:fault=429]"}]});
    let (s, v) = json_of(sim.openai("/v1/chat/completions", body).await).await;
    assert_eq!(s, 429);
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");

    // Vertex: Google envelope for quota errors, also for Claude.
    let t = sim.token().await;
    let raw = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict";
    let cb = json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi [sim:fault=429]"}]});
    let (s, v) = json_of(sim.vertex(&t, raw, cb).await).await;
    assert_eq!(s, 429);
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");

    // Blocked prompt.
    let (s, v) = json_of(
        sim.gemini(
            "gemini-2.5-flash-lite",
            "generateContent",
            user("x [sim:fault=blocked]"),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200);
    assert!(v.get("candidates").is_none());
    assert_eq!(v["promptFeedback"]["blockReason"], "SAFETY");
}

#[tokio::test]
async fn queued_faults_apply_to_the_next_requests() {
    let sim = Sim::start(&[]);
    let v = sim
        .control(
            reqwest::Method::POST,
            "/_sim/faults",
            Some(json!({"fault": "503", "count": 2, "surface": "openai"})),
        )
        .await;
    assert_eq!(v["queued"], 1);
    // Other surfaces are untouched.
    assert_eq!(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", user("x"))
            .await
            .status(),
        200
    );
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "plain"}]});
    assert_eq!(
        sim.openai("/v1/chat/completions", body.clone())
            .await
            .status(),
        503
    );
    assert_eq!(
        sim.openai("/v1/chat/completions", body.clone())
            .await
            .status(),
        503
    );
    assert_eq!(
        sim.openai("/v1/chat/completions", body.clone())
            .await
            .status(),
        200
    );
    sim.control(
        reqwest::Method::POST,
        "/_sim/faults",
        Some(json!({"fault": "429"})),
    )
    .await;
    let listed = sim
        .control(reqwest::Method::GET, "/_sim/faults", None)
        .await;
    assert_eq!(listed[0]["fault"], "429");
    assert_eq!(sim.anthropic(claude("x")).await.status(), 429);
    assert_eq!(sim.anthropic(claude("x")).await.status(), 200);
    let r = sim
        .http
        .post(sim.url("/_sim/faults"))
        .json(&json!({"fault": "teapot"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let stats = sim.control(reqwest::Method::GET, "/_sim/stats", None).await;
    assert_eq!(stats["faults_injected"], 3);
}

/// Reads a body chunk by chunk; returns the bytes and whether the body ended in an error.
async fn read_all(mut r: reqwest::Response) -> (String, bool) {
    let mut buf = Vec::new();
    loop {
        match r.chunk().await {
            Ok(Some(c)) => buf.extend_from_slice(&c),
            Ok(None) => return (String::from_utf8_lossy(&buf).into_owned(), false),
            Err(_) => return (String::from_utf8_lossy(&buf).into_owned(), true),
        }
    }
}

#[tokio::test]
async fn break_after_drops_the_connection_mid_body() {
    let sim = Sim::start(&[]);
    let r = sim
        .gemini(
            "gemini-2.5-flash-lite",
            "streamGenerateContent",
            user("one two three four [sim:fault=break-after=2][sim:chunks=4]"),
        )
        .await;
    assert_eq!(r.status(), 200);
    let (got, errored) = read_all(r).await;
    assert!(
        errored,
        "unterminated chunked body must surface as an error"
    );
    assert_eq!(sse_data(&got).len(), 2);

    let mut ab = claude("hello [sim:fault=break-after=3]");
    ab["stream"] = json!(true);
    let (got, errored) = read_all(sim.anthropic(ab).await).await;
    assert!(errored);
    assert_eq!(sse_events(&got).len(), 3);

    // Buffered: the first N bytes, then the drop.
    let r = sim
        .gemini(
            "gemini-2.5-flash-lite",
            "generateContent",
            user("x [sim:fault=break-after=10]"),
        )
        .await;
    assert_eq!(r.status(), 200);
    let (got, errored) = read_all(r).await;
    assert!(errored);
    assert_eq!(got.len(), 10);
}

#[tokio::test]
async fn stall_keeps_the_client_waiting() {
    let sim = Sim::start(&[]);
    let mut r = sim
        .gemini(
            "gemini-2.5-flash-lite",
            "streamGenerateContent",
            user("x [sim:fault=stall]"),
        )
        .await;
    assert_eq!(r.status(), 200);
    let first = tokio::time::timeout(Duration::from_secs(5), r.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.starts_with(b"data: "));
    assert!(
        tokio::time::timeout(Duration::from_millis(400), r.chunk())
            .await
            .is_err(),
        "stream must stall"
    );

    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let started = Instant::now();
    let res = client
        .post(sim.url("/v1/chat/completions"))
        .bearer_auth(OKEY)
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "x [sim:fault=stall]"}]}))
        .send()
        .await;
    let err = match res {
        Ok(resp) => resp.bytes().await.expect_err("body must not complete"),
        Err(e) => e,
    };
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(450));
}

#[tokio::test]
async fn error_events_mid_stream() {
    let sim = Sim::start(&[]);
    let mut ab = claude("hello [sim:fault=error-event]");
    ab["stream"] = json!(true);
    let (got, errored) = read_all(sim.anthropic(ab).await).await;
    assert!(!errored);
    let ev = sse_events(&got);
    let (name, data) = ev.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["error"]["type"], "overloaded_error");
    assert!(!ev.iter().any(|(n, _)| n == "message_stop"));

    let r = sim
        .gemini(
            "gemini-2.5-flash-lite",
            "streamGenerateContent",
            user("hello [sim:fault=error-event]"),
        )
        .await;
    let (got, _) = read_all(r).await;
    assert!(got.starts_with("data: "));
    let tail = got.rsplit("\r\n\r\n").next().unwrap();
    let err: Value = serde_json::from_str(tail.trim()).unwrap();
    assert_eq!(err["error"]["code"], 499);
    assert_eq!(err["error"]["status"], "CANCELLED");

    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x [sim:fault=error-event]"}]});
    let raw = sim
        .openai("/v1/chat/completions", body)
        .await
        .text()
        .await
        .unwrap();
    assert!(!raw.contains("[DONE]"));
    assert_eq!(
        sse_data(&raw).last().unwrap()["error"]["type"],
        "server_error"
    );
}

#[tokio::test]
async fn latency_and_chunk_delay_markers() {
    let sim = Sim::start(&[]);
    let started = Instant::now();
    assert_eq!(
        sim.gemini(
            "gemini-2.5-flash-lite",
            "generateContent",
            user("x [sim:latency=300]")
        )
        .await
        .status(),
        200
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    let started = Instant::now();
    let raw = sim
        .gemini(
            "gemini-2.5-flash-lite",
            "streamGenerateContent",
            user("abcdef [sim:chunk-delay=100][sim:chunks=4]"),
        )
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(sse_data(&raw).len(), 4);
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn recording_and_stats() {
    let sim = Sim::start(&[]);
    let r = sim
        .http
        .post(sim.url("/v1beta/models/gemini-2.5-flash-lite:streamGenerateContent?alt=sse"))
        .header("x-goog-api-key", GKEY)
        .header("X-Custom", "abc")
        .json(&user("recorded"))
        .send()
        .await
        .unwrap();
    r.text().await.unwrap();
    sim.http
        .post(sim.url("/token"))
        .body("grant_type=x")
        .send()
        .await
        .unwrap();
    let log = sim
        .control(reqwest::Method::GET, "/_sim/requests", None)
        .await;
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 2);
    let e = &log[0];
    assert_eq!(e["method"], "POST");
    assert_eq!(
        e["path"],
        "/v1beta/models/gemini-2.5-flash-lite:streamGenerateContent?alt=sse"
    );
    assert_eq!(e["route"], "gemini.stream");
    assert_eq!(e["headers"]["x-custom"], "abc");
    assert_eq!(e["headers"]["x-goog-api-key"], GKEY);
    assert_eq!(e["body"]["contents"][0]["parts"][0]["text"], "recorded");
    assert_eq!(log[1]["body"], "grant_type=x");
    let filtered = sim
        .control(
            reqwest::Method::GET,
            "/_sim/requests?route=oauth.token",
            None,
        )
        .await;
    assert_eq!(filtered.as_array().unwrap().len(), 1);
    let stats = sim.control(reqwest::Method::GET, "/_sim/stats", None).await;
    assert_eq!(stats["requests_total"], 2);
    assert_eq!(stats["by_route"]["gemini.stream"], 1);
    assert_eq!(stats["by_route"]["oauth.token"], 1);
    assert_eq!(stats["tokens_issued"], 0);
    let cleared = sim
        .control(reqwest::Method::DELETE, "/_sim/requests", None)
        .await;
    assert_eq!(cleared["cleared"], 2);
    assert!(sim
        .control(reqwest::Method::GET, "/_sim/requests", None)
        .await
        .as_array()
        .unwrap()
        .is_empty());

    let quiet = Sim::start(&["--no-record"]);
    quiet
        .gemini("gemini-2.5-flash-lite", "generateContent", user("x"))
        .await;
    assert!(quiet
        .control(reqwest::Method::GET, "/_sim/requests", None)
        .await
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(
        quiet
            .control(reqwest::Method::GET, "/_sim/stats", None)
            .await["requests_total"],
        1
    );
}

// ---------------------------------------------------------------------------------------------
// Model registry and listings
// ---------------------------------------------------------------------------------------------

impl Sim {
    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut rb = self.http.get(self.url(path));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        json_of(rb.send().await.unwrap()).await
    }

    async fn withdraw(&self, surface: &str, model: &str) {
        self.control(
            reqwest::Method::POST,
            "/_sim/models/withdraw",
            Some(json!({"surface": surface, "model": model})),
        )
        .await;
    }
}

const ANTHROPIC_HEADERS: [(&str, &str); 2] =
    [("x-api-key", AKEY), ("anthropic-version", "2023-06-01")];

/// Every Gemini listing page, following `nextPageToken`.
async fn gemini_ids(sim: &Sim, page_size: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut token = String::new();
    loop {
        let path = format!("/v1beta/models?pageSize={page_size}&pageToken={token}");
        let (s, v) = sim.get(&path, &[("x-goog-api-key", GKEY)]).await;
        assert_eq!(s, 200, "{v}");
        let page = v["models"].as_array().unwrap();
        assert!(page.len() <= page_size);
        ids.extend(
            page.iter()
                .map(|m| m["baseModelId"].as_str().unwrap().to_owned()),
        );
        match v["nextPageToken"].as_str() {
            Some(t) => token = t.to_owned(),
            None => return ids,
        }
    }
}

#[tokio::test]
async fn retired_and_unknown_ids_get_each_surface_404() {
    let sim = Sim::start(&[]);
    let t = sim.token().await;
    for model in [
        "gemini-2.0-flash",
        "gemini-3-pro-preview",
        "gemini-3.1-flash-lite-preview",
    ] {
        let (s, v) = json_of(sim.gemini(model, "generateContent", user("x")).await).await;
        assert_eq!(s, 404, "{model}");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("models/{model} is not found")));
        let path = format!(
            "/v1/projects/p/locations/global/publishers/google/models/{model}:generateContent"
        );
        let (s, v) = json_of(sim.vertex(&t, &path, user("x")).await).await;
        assert_eq!(s, 404, "{model}");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Publisher Model"));
    }
    let embed = json!({"content": {"parts": [{"text": "x"}]}});
    assert_eq!(
        sim.gemini("text-embedding-004", "embedContent", embed.clone())
            .await
            .status(),
        404
    );
    assert_eq!(
        sim.gemini("text-embedding-005", "embedContent", embed.clone())
            .await
            .status(),
        404,
        "Vertex only"
    );
    assert_eq!(
        sim.gemini("gemini-embedding-2", "embedContent", embed)
            .await
            .status(),
        200
    );
    let predict = |m: &str| {
        format!("/v1/projects/p/locations/us-central1/publishers/google/models/{m}:predict")
    };
    let inst = json!({"instances": [{"content": "x"}]});
    assert_eq!(
        sim.vertex(&t, &predict("text-embedding-004"), inst.clone())
            .await
            .status(),
        404
    );
    assert_eq!(
        sim.vertex(&t, &predict("gemini-embedding-2"), inst.clone())
            .await
            .status(),
        404
    );
    assert_eq!(
        sim.vertex(&t, &predict("text-multilingual-embedding-002"), inst)
            .await
            .status(),
        200
    );

    for model in [
        "claude-opus-4-1",
        "claude-3-5-haiku-20241022",
        "claude-sonnet-4-5@20250929",
        // Retired on Anthropic's API on 2026-11-30 (still on Vertex).
        "claude-sonnet-4-5",
        "claude-sonnet-4-5-20250929",
    ] {
        let mut body = claude("x");
        body["model"] = json!(model);
        let (s, v) = json_of(sim.anthropic(body).await).await;
        assert_eq!(s, 404, "{model}");
        assert_eq!(
            v["error"],
            json!({"type": "not_found_error", "message": format!("model: {model}")})
        );
    }
    let mut alias = claude("x");
    alias["model"] = json!("claude-haiku-4-5");
    let (s, v) = json_of(sim.anthropic(alias).await).await;
    assert_eq!(s, 200);
    assert_eq!(
        v["model"], "claude-haiku-4-5-20251001",
        "an alias answers as its dated id"
    );

    let vbody = json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]});
    let raw = |m: &str| {
        format!("/v1/projects/p/locations/us-east5/publishers/anthropic/models/{m}:rawPredict")
    };
    for (model, want) in [
        ("claude-opus-5-5", 200),
        ("claude-sonnet-4-5", 404),
        ("claude-opus-4-5@20251101", 200),
        ("claude-opus-4-1", 404),
    ] {
        assert_eq!(
            sim.vertex(&t, &raw(model), vbody.clone()).await.status(),
            want,
            "{model}"
        );
    }
}

#[tokio::test]
async fn gemini_listing_pages_and_auth() {
    let sim = Sim::start(&[]);
    let all = gemini_ids(&sim, 1000).await;
    assert_eq!(
        all,
        gemini_ids(&sim, 4).await,
        "pages join up to the whole list"
    );
    assert!(all.contains(&"gemini-3.8-flash".to_owned()));
    assert!(all.contains(&"gemini-embedding-2".to_owned()));
    assert!(!all
        .iter()
        .any(|m| m == "gemini-2.0-flash" || m == "text-embedding-005"));
    let (_, v) = sim.get("/v1beta/models", &[("x-goog-api-key", GKEY)]).await;
    assert!(v.get("nextPageToken").is_none());
    let m = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["baseModelId"] == "gemini-3.8-flash")
        .unwrap()
        .clone();
    assert_eq!(
        m,
        json!({"name": "models/gemini-3.8-flash", "baseModelId": "gemini-3.8-flash", "version": "001",
            "displayName": "Gemini 3.8 Flash", "inputTokenLimit": 1048576, "outputTokenLimit": 65536,
            "supportedGenerationMethods": ["generateContent", "countTokens"], "thinking": true})
    );
    let e = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["baseModelId"] == "gemini-embedding-001")
        .unwrap()
        .clone();
    assert_eq!(
        e["supportedGenerationMethods"],
        json!(["embedContent", "batchEmbedContents"])
    );
    assert_eq!(e["inputTokenLimit"], 2048);
    // `/v1/models` with a Google key is the Gemini listing; with a Bearer key, OpenAI's.
    let (s, v) = sim.get(&format!("/v1/models?key={GKEY}"), &[]).await;
    assert_eq!(s, 200);
    assert_eq!(v["models"].as_array().unwrap().len(), all.len());
    let (s, v) = sim
        .get(
            "/v1/models",
            &[("authorization", &format!("Bearer {OKEY}"))],
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["object"], "list");
    assert_eq!(sim.get("/v1beta/models", &[]).await.0, 403);
    assert_eq!(
        sim.get(
            "/v1beta/models?pageToken=nope!",
            &[("x-goog-api-key", GKEY)]
        )
        .await
        .0,
        400
    );
    let stats = sim.control(reqwest::Method::GET, "/_sim/stats", None).await;
    assert!(stats["by_route"]["gemini.models"].as_u64().unwrap() >= 3);
}

#[tokio::test]
async fn anthropic_listing_pages_newest_first() {
    let sim = Sim::start(&[]);
    let (s, v) = sim.get("/v1/models?limit=3", &ANTHROPIC_HEADERS).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["data"][0],
        json!({"type": "model", "id": "claude-opus-5-5", "display_name": "Claude Opus 5.5", "created_at": "2026-09-22T00:00:00Z"})
    );
    assert_eq!(v["has_more"], true);
    assert_eq!(v["first_id"], "claude-opus-5-5");
    let mut ids: Vec<String> = Vec::new();
    let mut after = String::new();
    loop {
        let (_, v) = sim
            .get(&format!("/v1/models?limit=4{after}"), &ANTHROPIC_HEADERS)
            .await;
        ids.extend(
            v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_owned()),
        );
        if v["has_more"] == false {
            break;
        }
        after = format!("&after_id={}", v["last_id"].as_str().unwrap());
    }
    assert_eq!(ids.len(), 14);
    assert!(ids.contains(&"claude-haiku-4-5-20251001".to_owned()));
    assert!(!ids.contains(&"claude-sonnet-4-5-20250929".to_owned()));
    assert!(!ids
        .iter()
        .any(|i| i.starts_with("claude-opus-4-1") || i.starts_with("claude-3")));
    let (_, v) = sim.get("/v1/models", &ANTHROPIC_HEADERS).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 14, "default limit 20");
    assert_eq!(v["has_more"], false);
    let (_, v) = sim
        .get(
            "/v1/models?limit=2&before_id=claude-haiku-5-5",
            &ANTHROPIC_HEADERS,
        )
        .await;
    assert_eq!(v["first_id"], "claude-opus-5-5");
    assert_eq!(v["last_id"], "claude-sonnet-5-5");
    assert_eq!(v["has_more"], false);
    assert_eq!(
        sim.get("/v1/models?limit=0", &ANTHROPIC_HEADERS).await.0,
        400
    );
    assert_eq!(
        sim.get(
            "/v1/models",
            &[("x-api-key", "wrong"), ("anthropic-version", "2023-06-01")]
        )
        .await
        .0,
        401
    );
}

#[tokio::test]
async fn vertex_publisher_listings() {
    let sim = Sim::start(&[]);
    let t = sim.token().await;
    let auth = format!("Bearer {t}");
    let h = [("authorization", auth.as_str())];
    let (s, v) = sim
        .get("/v1beta1/publishers/google/models?pageSize=1000", &h)
        .await;
    assert_eq!(s, 200, "{v}");
    let names: Vec<&str> = v["publisherModels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"publishers/google/models/text-embedding-005"));
    assert!(!names.contains(&"publishers/google/models/gemini-embedding-2"));
    assert_eq!(
        v["publisherModels"][0],
        json!({"name": "publishers/google/models/gemini-3.8-flash", "versionId": "001", "launchStage": "GA"})
    );
    let (_, v) = sim
        .get("/v1beta1/publishers/google/models?pageSize=5", &h)
        .await;
    assert_eq!(v["publisherModels"].as_array().unwrap().len(), 5);
    assert!(v["nextPageToken"].is_string());
    let (_, v) = sim.get("/v1beta1/publishers/anthropic/models", &h).await;
    let sonnet = v["publisherModels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "publishers/anthropic/models/claude-sonnet-4-5")
        .unwrap()
        .clone();
    assert_eq!(
        sonnet["versionId"], "20250929",
        "the @date a call must carry"
    );
    assert_eq!(
        sim.get("/v1beta1/publishers/google/models", &[]).await.0,
        401
    );
    assert_eq!(sim.get("/v1beta1/publishers/meta/models", &h).await.0, 404);
}

#[tokio::test]
async fn withdrawn_models_leave_listing_and_calls_until_reset() {
    let sim = Sim::start(&[]);
    let t = sim.token().await;
    sim.withdraw("gemini", "gemini-2.5-flash-lite").await;
    assert_eq!(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", user("x"))
            .await
            .status(),
        404
    );
    assert!(!gemini_ids(&sim, 1000)
        .await
        .contains(&"gemini-2.5-flash-lite".to_owned()));
    let vertex =
        "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash-lite:generateContent";
    assert_eq!(
        sim.vertex(&t, vertex, user("x")).await.status(),
        200,
        "other surfaces keep it"
    );
    sim.withdraw("anthropic", "claude-haiku-4-5").await;
    let mut body = claude("x");
    body["model"] = json!("claude-haiku-4-5-20251001");
    assert_eq!(sim.anthropic(body.clone()).await.status(), 404);
    let (_, v) = sim.get("/v1/models?limit=100", &ANTHROPIC_HEADERS).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 13);
    let r = sim
        .http
        .post(sim.url("/_sim/models/withdraw"))
        .json(&json!({"surface": "vertex", "model": "gemini-embedding-2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "not served there");
    sim.control(reqwest::Method::POST, "/_sim/reset", None)
        .await;
    assert_eq!(
        sim.gemini("gemini-2.5-flash-lite", "generateContent", user("x"))
            .await
            .status(),
        200
    );
    assert_eq!(sim.anthropic(body).await.status(), 200);
}
