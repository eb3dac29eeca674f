//! The official OpenAI Python SDK drives buffered and streamed chat through the gateway.
//! `make test` creates the venv (`make venv`); `TOLLGATE_PYTHON` names its interpreter.

use std::process::Command;

use crate::harness::{Gateway, Sim};

#[tokio::test]
async fn official_python_sdk_chats_through_the_gateway() {
    let python = std::env::var("TOLLGATE_PYTHON")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python").to_owned());
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} missing: run `make venv` (make test does)"
    );
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_chat.py");
    let base = gw.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .env("TOLLGATE_BASE_URL", base)
            .env("TOLLGATE_KEY", key)
            .env("TOLLGATE_MODEL", "google/gemini-2.5-flash")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "SDK script failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("ok: models, buffered, streamed, errors"),
        "{stdout}"
    );
}
