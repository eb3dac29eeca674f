//! The Messages door (`POST /v1/messages`, `/v1/messages/count_tokens`) driven by real Anthropic
//! clients, unmodified but for their base URL and key: the official Python SDK
//! (`tests/python/sdk_messages.py`), the TypeScript SDK (`tests/agents/sdk_messages.mjs`) and
//! Claude Code itself, the CLI in print mode (`tests/agents/claude_code.mjs`). Each runs against
//! a fresh simulator and gateway, on a Claude route (native) and on a Gemini route
//! (`google/gemini-2.5-flash-lite`, translated), through the same scripts that also run against the
//! simulator directly. `make test` installs the clients (`make venv`, `make agent-deps`);
//! `TOLLGATE_PYTHON` names the venv's interpreter.
//!
//! The SDK scripts check buffered and streamed answers, a two-turn tool loop, thinking, prompt
//! caching, `count_tokens`, and the refusals as each SDK's error classes; the keys for those are
//! made here: a revoked and an expired key (401), a key of a workspace without credit (402) and
//! a key already past its spend limit (429). Claude Code answers a prompt (with its key as
//! `x-api-key` and as a Bearer token) and completes a tool turn: the simulator asks for its
//! `Bash` tool (`[sim:call=Bash]` with `[sim:args=…]`), the CLI runs it, and the upstream request
//! after it carries the command's output as the tool's result.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{eventually, Gateway, Sim};

/// A Claude model by its catalog id, by its alias and by its dated alias.
const CLAUDE: &str = "anthropic/claude-haiku-4-5";
const CLAUDE_ALIAS: &str = "claude-haiku-4-5";
const CLAUDE_DATED: &str = "claude-haiku-4-5-20251001";
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

    /// The bodies the simulator received as a model request, each as JSON text.
    async fn upstream_bodies(&self) -> Vec<(String, String)> {
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
            .collect()
    }
}

/// Runs `program args…` off the runtime's thread (the gateway and simulator keep answering)
/// with `env`; asserts it succeeded and returns its stdout.
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
    cmd.arg("tests/python/sdk_messages.py");
    run(cmd, env, "the Anthropic Python SDK script").await
}

fn agents_installed() {
    let sdk = Path::new(ROOT).join("tests/agents/node_modules/@anthropic-ai/sdk");
    let claude = Path::new(ROOT).join("tests/agents/node_modules/.bin/claude");
    assert!(
        sdk.is_dir() && claude.exists(),
        "the Anthropic clients are missing: run `make agent-deps` (npm ci in tests/agents; make test does)"
    );
}

async fn typescript_sdk(env: Vec<(String, String)>) -> String {
    agents_installed();
    let mut cmd = Command::new("node");
    cmd.arg("tests/agents/sdk_messages.mjs");
    run(cmd, env, "the Anthropic TypeScript SDK script (node)").await
}

async fn claude_code(mut env: Vec<(String, String)>, task: &str, auth: &str) -> String {
    agents_installed();
    env.push(("CLAUDE_TASK".into(), task.into()));
    env.push(("CLAUDE_AUTH".into(), auth.into()));
    let mut cmd = Command::new("node");
    cmd.arg("tests/agents/claude_code.mjs");
    run(cmd, env, "Claude Code (tests/agents/claude_code.mjs)").await
}

/// Everything the SDK scripts check, refusals included (the line they print when all ran).
const SDK_OK: &str = "count_tokens, errors(auth revoked expired not_found rate_limit payment)";

#[tokio::test]
async fn python_sdk_on_a_claude_route() {
    let door = Door::start();
    let mut env = door.env(CLAUDE);
    env.push(("TOLLGATE_THINKING".into(), "enabled".into()));
    env.extend(door.refusal_env().await);
    let out = python_sdk(env).await;
    assert!(
        out.contains("ok: create, x-api-key, stream, tools, thinking enabled, cache, ")
            && out.contains(SDK_OK),
        "{out}"
    );
}

#[tokio::test]
async fn python_sdk_on_a_gemini_route() {
    let door = Door::start();
    let mut env = door.env(GEMINI);
    env.push(("TOLLGATE_THINKING".into(), "adaptive".into()));
    env.extend(door.refusal_env().await);
    let out = python_sdk(env).await;
    assert!(
        out.contains("ok: create, x-api-key, stream, tools, thinking adaptive, cache, ")
            && out.contains(SDK_OK),
        "{out}"
    );
}

#[tokio::test]
async fn typescript_sdk_on_a_claude_route() {
    let door = Door::start();
    // The dated alias, as the SDK's own model constants name it.
    let mut env = door.env(CLAUDE_DATED);
    env.push(("TOLLGATE_THINKING".into(), "enabled".into()));
    env.extend(door.refusal_env().await);
    let out = typescript_sdk(env).await;
    assert!(
        out.contains("ok: create, x-api-key, stream, tools, thinking enabled, cache, ")
            && out.contains(SDK_OK),
        "{out}"
    );
}

#[tokio::test]
async fn typescript_sdk_on_a_gemini_route() {
    let door = Door::start();
    let mut env = door.env(GEMINI);
    env.push(("TOLLGATE_THINKING".into(), "adaptive".into()));
    env.extend(door.refusal_env().await);
    let out = typescript_sdk(env).await;
    assert!(
        out.contains("ok: create, x-api-key, stream, tools, thinking adaptive, cache, ")
            && out.contains(SDK_OK),
        "{out}"
    );
}

/// Claude Code on `model`: an answer with the key as `x-api-key`, one with it as a Bearer
/// token, and a tool turn; then the upstream request after the tool carries its result (in
/// the upstream's own form, `tool_form`).
async fn claude_code_on(door: &Door, model: &str, tool_form: &str) {
    let out = claude_code(door.env(model), "answer", "api-key").await;
    assert!(
        out.contains(&format!("ok: claude code answer via api-key on {model}")),
        "{out}"
    );
    let out = claude_code(door.env(model), "answer", "auth-token").await;
    assert!(
        out.contains(&format!("ok: claude code answer via auth-token on {model}")),
        "{out}"
    );
    let out = claude_code(door.env(model), "tool", "api-key").await;
    assert!(
        out.contains(&format!("ok: claude code tool via api-key on {model}")),
        "{out}"
    );
    let bodies = door.upstream_bodies().await;
    let asked = bodies
        .iter()
        .position(|(_, b)| b.contains("[sim:call=Bash]"))
        .unwrap_or_else(|| panic!("no upstream request asked for the tool: {bodies:?}"));
    let answered = bodies[asked + 1..]
        .iter()
        .find(|(_, b)| b.contains(tool_form) && b.contains("wrote-proof"));
    assert!(
        answered.is_some(),
        "no upstream request after the tool call carries its {tool_form} with the command's output; \
         routes after it: {:?}",
        bodies[asked..].iter().map(|(r, _)| r).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn claude_code_on_a_claude_route() {
    let door = Door::start();
    // The alias a user sets as ANTHROPIC_MODEL; the CLI sends it verbatim (and takes it for
    // Sonnet 4.5: thinking with a budget).
    claude_code_on(&door, CLAUDE_ALIAS, "\"tool_result\"").await;
    // The catalog id, which it also sends verbatim and also takes for Sonnet 4.5.
    let out = claude_code(door.env(CLAUDE), "answer", "api-key").await;
    assert!(
        out.contains(&format!("ok: claude code answer via api-key on {CLAUDE}")),
        "{out}"
    );
    // What the CLI asks of Claude reaches it: by default every beta it sends is allowed.
    let requests = door.sim.requests().await;
    let last = requests.last().unwrap();
    let betas = last["headers"]["anthropic-beta"]
        .as_str()
        .unwrap_or_default();
    for beta in [
        "claude-code-20250219",
        "interleaved-thinking-2025-05-14",
        "context-management-2025-06-27",
        "thinking-token-count-2026-05-13",
    ] {
        assert!(betas.contains(beta), "{beta} not forwarded: {betas:?}");
    }
    assert_eq!(last["headers"]["anthropic-version"], "2023-06-01");
}

#[tokio::test]
async fn claude_code_on_a_gemini_route() {
    // A model id the CLI does not know: it asks for adaptive thinking with an effort, and
    // sends its context as a mid-conversation `system` message, which the door gives Gemini
    // as system text.
    claude_code_on(&Door::start(), GEMINI, "\"functionResponse\"").await;
}
