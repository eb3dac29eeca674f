//! The Responses door (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`) driven by real
//! OpenAI clients, unmodified but for their base URL and key: the official Python SDK
//! (`tests/python/sdk_responses.py`), the TypeScript SDK (`tests/agents/sdk_responses.mjs`) and
//! the Codex CLI itself, `codex exec` with the gateway as a custom provider
//! (`tests/agents/codex.mjs`). Each runs against a fresh simulator and gateway, on a Gemini
//! route (`google/gemini-2.5-flash-lite`) and on a Claude route (`anthropic/claude-haiku-4-5`), both
//! translated from and to the chat model. `make test` installs the clients (`make venv`,
//! `make agent-deps`); `TOLLGATE_PYTHON` names the venv's interpreter.
//!
//! The SDK scripts check buffered and streamed answers (every event, numbered), a stateless
//! two-turn function-tool loop, a three-turn loop on `previous_response_id`, reasoning items
//! sent back with their `encrypted_content`, `text.format` json_schema, retrieve and delete,
//! and the refusals as each SDK's error classes; the keys for those are made here: a revoked
//! and an expired key (401), a key of a workspace without credit (402) and a key already past
//! its spend limit (429); an unknown model is a 400, as the Responses API answers it.
//!
//! Codex answers a prompt and completes a tool turn — the simulator asks for its
//! `exec_command` tool (`[sim:call=exec_command]` with `[sim:args=…]`), the CLI runs it once
//! and sends its `function_call_output` — with and without reasoning; the upstream request
//! after the tool carries the command's output as the tool's result (and, on Claude, the signed
//! thinking the reasoning item carried). Every answer is billed as the `responses` endpoint.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{eventually, Gateway, Sim};

const CLAUDE: &str = "anthropic/claude-haiku-4-5";
const GEMINI: &str = "google/gemini-2.5-flash-lite";

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A simulator, a gateway wired to it, and a funded workspace with a key.
struct Door {
    sim: Sim,
    gw: Gateway,
    ws: String,
    key: String,
}

impl Door {
    fn start() -> Door {
        let sim = Sim::start();
        let gw = Gateway::builder().simulator(&sim).start();
        let (ws, key) = gw.workspace_with_key();
        Door { sim, gw, ws, key }
    }

    /// The environment every script gets: where the door is, the key, the model.
    fn env(&self, model: &str) -> Vec<(String, String)> {
        vec![
            ("TOLLGATE_BASE_URL".into(), self.gw.base.clone()),
            ("TOLLGATE_KEY".into(), self.key.clone()),
            ("TOLLGATE_MODEL".into(), model.into()),
            ("TOLLGATE_GATEWAY".into(), "1".into()),
        ]
    }

    /// The keys the SDK scripts are refused with, once the gateway refuses them so.
    async fn refusal_env(&self) -> Vec<(String, String)> {
        let gw = &self.gw;
        let revoked = gw.key(&self.ws, &[]);
        gw.cli(&["key", "revoke", &gw.key_id(&self.ws, &revoked)]);
        let expired = gw.key(&self.ws, &["--expires-at", "2020-01-01T00:00:00Z"]);
        let broke = gw.workspace();
        let no_credit = gw.key(&broke, &[]);
        let limited = gw.key(
            &self.ws,
            &["--spend-limit-usd", "0.000001", "--limit-reset", "daily"],
        );
        assert!(
            self.refuses(&revoked, 401, "invalid_key").await,
            "the revoked key is refused"
        );
        assert!(
            self.refuses(&expired, 401, "expired_key").await,
            "the expired key is refused as expired"
        );
        // The crossing request completes; the limit holds once its cost is on the ledger.
        let over = eventually(Duration::from_secs(10), || async {
            let res = gw
                .chat(
                    &limited,
                    json!({"model": GEMINI, "messages": [{"role": "user", "content": "spend"}]}),
                )
                .await;
            res.status() == 429
        })
        .await;
        assert!(over.is_some(), "the limited key never went over its limit");
        vec![
            ("TOLLGATE_REVOKED_KEY".into(), revoked),
            ("TOLLGATE_EXPIRED_KEY".into(), expired),
            ("TOLLGATE_NO_CREDIT_KEY".into(), no_credit),
            ("TOLLGATE_LIMITED_KEY".into(), limited),
        ]
    }

    /// Whether `GET /v1/models` with `key` comes to `status` with the tollgate `code` (the
    /// gateway learns of key changes from its change feed).
    async fn refuses(&self, key: &str, status: u16, code: &str) -> bool {
        let url = self.gw.url("/v1/models");
        eventually(Duration::from_secs(5), || async {
            let res = reqwest::Client::new()
                .get(&url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap();
            let got = res.status().as_u16();
            let body: Value = res.json().await.unwrap_or(Value::Null);
            got == status && body["error"]["code"] == code
        })
        .await
        .is_some()
    }

    /// The model requests the simulator received (generate/stream/messages, not caches or
    /// counts), each as its route and its body as JSON text.
    async fn model_requests(&self) -> Vec<(String, String)> {
        self.sim
            .requests()
            .await
            .into_iter()
            .map(|r| {
                (
                    r["route"].as_str().unwrap_or_default().to_owned(),
                    r["body"].to_string(),
                )
            })
            .filter(|(route, _)| {
                ["gemini.generate", "gemini.stream", "anthropic.messages"].contains(&route.as_str())
            })
            .collect()
    }

    /// Every answer of the workspace's key went through the door and is billed as it: the
    /// records of `/v1/responses` name the endpoint, and one is the client's to read by the
    /// response id it was answered with.
    async fn billed_as_responses(&self, at_least: usize) {
        let records = self.gw.usage_records(&self.ws, at_least).await;
        let ours: Vec<&Value> = records
            .iter()
            .filter(|r| r["endpoint"] == "responses")
            .collect();
        assert!(
            ours.len() >= at_least,
            "{} of {at_least} answers billed as responses: {records:?}",
            ours.len()
        );
        let id = ours[0]["id"].as_str().unwrap();
        assert!(id.starts_with("resp_"), "{id}");
        let res = reqwest::Client::new()
            .get(self.gw.url(&format!("/v1/generation?id={id}")))
            .bearer_auth(&self.key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "the generation of {id}");
        let generation: Value = res.json().await.unwrap();
        assert_eq!(generation["data"]["endpoint"], "responses", "{generation}");
    }
}

/// Runs `cmd` off the runtime's thread (the gateway and simulator keep answering) with `env`;
/// asserts it succeeded and returns its stdout.
async fn run(mut cmd: Command, env: Vec<(String, String)>, what: &str) -> String {
    cmd.current_dir(ROOT).envs(env);
    let shown = format!("{cmd:?}");
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot run {what} ({e}): {shown}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    print!("{stdout}");
    stdout
}

async fn python_sdk(env: Vec<(String, String)>) -> String {
    let python =
        std::env::var("TOLLGATE_PYTHON").unwrap_or_else(|_| format!("{ROOT}/.venv/bin/python"));
    assert!(
        Path::new(&python).exists(),
        "{python} missing: run `make venv` (make test does)"
    );
    let mut cmd = Command::new(python);
    cmd.arg("tests/python/sdk_responses.py");
    run(cmd, env, "the OpenAI Python SDK script").await
}

fn agents_installed() {
    let sdk = Path::new(ROOT).join("tests/agents/node_modules/openai");
    let codex = Path::new(ROOT).join("tests/agents/node_modules/.bin/codex");
    assert!(
        sdk.is_dir() && codex.exists(),
        "the OpenAI clients are missing: run `make agent-deps` (npm ci in tests/agents; make test does)"
    );
}

async fn typescript_sdk(env: Vec<(String, String)>) -> String {
    agents_installed();
    let mut cmd = Command::new("node");
    cmd.arg("tests/agents/sdk_responses.mjs");
    run(cmd, env, "the OpenAI TypeScript SDK script (node)").await
}

async fn codex(mut env: Vec<(String, String)>, task: &str, effort: Option<&str>) -> String {
    agents_installed();
    env.push(("CODEX_TASK".into(), task.into()));
    if let Some(effort) = effort {
        env.push(("CODEX_EFFORT".into(), effort.into()));
    }
    let mut cmd = Command::new("node");
    cmd.arg("tests/agents/codex.mjs");
    run(cmd, env, "Codex (tests/agents/codex.mjs)").await
}

/// Everything both SDK scripts check on every route, refusals included.
const SDK_OK: &str = "create, stream, tools, previous_response_id, reasoning, ";
const SDK_END: &str =
    "retrieve, delete, errors(auth revoked expired unknown_model rate_limit payment)";

/// The SDK script's `ok:` line on `model`: all of it, and `json_schema` where it is enforced.
fn sdk_ok(out: &str, model: &str) {
    let json = if model == CLAUDE { "" } else { "json_schema, " };
    assert!(
        out.contains(&format!("ok: {SDK_OK}{json}{SDK_END}")),
        "{out}"
    );
}

/// An SDK script on `model`, then the door's own view: the stored conversation reached the
/// upstream whole, and every answer is billed as `responses`.
async fn sdk_on(model: &str, script: &str) {
    let door = Door::start();
    let mut env = door.env(model);
    env.extend(door.refusal_env().await);
    let out = match script {
        "python" => python_sdk(env).await,
        _ => typescript_sdk(env).await,
    };
    sdk_ok(&out, model);
    // The third turn on previous_response_id: the question, the call's result and the new
    // text in one upstream request, though the client sent only the new text.
    let bodies = door.model_requests().await;
    let third = bodies
        .iter()
        .find(|(_, b)| b.contains("And tomorrow?") && b.contains("Weather in Paris?"));
    let (_, third) =
        third.unwrap_or_else(|| panic!("no upstream request carried turn 3's history"));
    assert!(third.contains("Sunny, 21 C"), "turn 3's history: {third}");
    // create, stream, 2 tools, 3 turns + 1 alone, 2 reasoning, json: 11 answers.
    door.billed_as_responses(11).await;
}

#[tokio::test]
async fn python_sdk_on_a_gemini_route() {
    sdk_on(GEMINI, "python").await;
}

#[tokio::test]
async fn python_sdk_on_a_claude_route() {
    sdk_on(CLAUDE, "python").await;
}

#[tokio::test]
async fn typescript_sdk_on_a_gemini_route() {
    sdk_on(GEMINI, "typescript").await;
}

#[tokio::test]
async fn typescript_sdk_on_a_claude_route() {
    sdk_on(CLAUDE, "typescript").await;
}

/// Codex on `model`: an answer, then a tool turn without and with a reasoning effort. Each tool
/// turn is two upstream requests — the call, then the answer to its result — and the second
/// carries the command's output in the upstream's own form (`tool_form`).
async fn codex_on(model: &str, tool_form: &str) -> Door {
    let door = Door::start();
    let out = codex(door.env(model), "answer", None).await;
    assert!(
        out.contains(&format!("ok: codex answer on {model}")),
        "{out}"
    );
    for effort in [None, Some("low")] {
        let before = door.model_requests().await.len();
        let out = codex(door.env(model), "tool", effort).await;
        assert!(out.contains(&format!("ok: codex tool on {model}")), "{out}");
        if model == CLAUDE {
            // Codex sends a `prompt_cache_key`: on Claude the door marks the prefix, and the
            // turn's second request reads what its first wrote.
            let cached = out
                .split("(cached ")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .and_then(|n| n.parse::<u64>().ok());
            assert!(cached.is_some_and(|n| n > 0), "{out}");
        }
        let bodies = door.model_requests().await.split_off(before);
        assert_eq!(
            bodies.len(),
            2,
            "the call and the answer after it (effort {effort:?}), no repeated call: {:?}",
            bodies.iter().map(|(r, _)| r).collect::<Vec<_>>()
        );
        assert!(
            bodies[0].1.contains("[sim:call=exec_command]"),
            "the first asks for the tool: {}",
            bodies[0].1
        );
        let answered = &bodies[1].1;
        assert!(
            answered.contains(tool_form) && answered.contains("wrote-proof"),
            "the request after the tool carries its {tool_form} with the command's output \
             (effort {effort:?}): {answered}"
        );
    }
    door
}

/// The Codex runs' answers: one, then two per tool turn.
const CODEX_ANSWERS: usize = 5;

#[tokio::test]
async fn codex_on_a_gemini_route() {
    let door = codex_on(GEMINI, "\"functionResponse\"").await;
    door.billed_as_responses(CODEX_ANSWERS).await;
}

#[tokio::test]
async fn codex_on_a_claude_route() {
    let door = codex_on(CLAUDE, "\"tool_result\"").await;
    // With reasoning, Codex sent the reasoning item back with the tool's result: Claude sees
    // its signed thinking again before its tool_use (the simulator refuses a signature it did
    // not issue).
    let bodies = door.model_requests().await;
    let (_, last) = bodies.last().unwrap();
    let sent: Value = serde_json::from_str(last).unwrap();
    let assistant = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .unwrap_or_else(|| panic!("no assistant turn: {sent}"));
    let blocks: Vec<&str> = assistant["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(blocks.first(), Some(&"thinking"), "{assistant}");
    assert!(blocks.contains(&"tool_use"), "{assistant}");
    assert!(
        assistant["content"][0]["signature"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{assistant}"
    );
    door.billed_as_responses(CODEX_ANSWERS).await;
}
