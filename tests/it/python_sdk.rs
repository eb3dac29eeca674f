//! The official OpenAI Python SDK drives buffered and streamed chat, and embeddings (its
//! default base64 and float), through the gateway. `make test` creates the venv
//! (`make venv`); `TOLLGATE_PYTHON` names its interpreter.

use std::process::Command;

use crate::harness::{Gateway, Sim};

/// Runs `tests/python/<script>` against a fresh simulator and gateway; returns its stdout.
async fn run_script(script: &str, env: &[(&str, &str)]) -> String {
    let python = std::env::var("TOLLGATE_PYTHON")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python").to_owned());
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} missing: run `make venv` (make test does)"
    );
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let script = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let base = gw.base.clone();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .env("TOLLGATE_BASE_URL", base)
            .env("TOLLGATE_KEY", key)
            .envs(env)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "SDK script failed:\n{stdout}\n{stderr}"
    );
    stdout
}

#[tokio::test]
async fn official_python_sdk_chats_through_the_gateway() {
    let stdout = run_script(
        "sdk_chat.py",
        &[("TOLLGATE_MODEL", "google/gemini-2.5-flash")],
    )
    .await;
    assert!(
        stdout.contains("ok: models, buffered, streamed, errors"),
        "{stdout}"
    );
}

#[tokio::test]
async fn official_python_sdk_embeds_through_the_gateway() {
    // The Developer API (the default catalog's first route) and Vertex (pinned by the harness).
    let stdout = run_script(
        "sdk_embeddings.py",
        &[(
            "TOLLGATE_EMBED_MODELS",
            "google/text-embedding-004,vertex/text-embedding-005",
        )],
    )
    .await;
    assert!(
        stdout.contains("ok: embeddings base64, float, dimensions, task_type, errors"),
        "{stdout}"
    );
}
