//! The web console in a real browser: `tests/browser/console.mjs` (Node with `playwright-core`
//! driving the Debian Chromium, headless) against a real gateway whose `acme/echo` model goes to
//! the in-process OpenAI-compatible fake. The script signs in (after a refused wrong token),
//! creates a workspace, tops it up, creates a key and copies its once-shown secret, uses it on
//! the public API, revokes it in the console and sees the proxy refuse it, then checks the
//! usage, catalog and audit pages; any page or console error fails it. Full-page screenshots
//! of each page land in `target/console-screenshots`.

use std::path::Path;
use std::process::Command;

use crate::harness::{FakeUpstream, Gateway, ADMIN_TOKEN};

const SHOTS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/target/console-screenshots");

#[tokio::test]
async fn console_end_to_end_in_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let playwright = root.join("tests/browser/node_modules/playwright-core");
    assert!(
        playwright.is_dir(),
        "{} is missing: run `make browser-deps` (npm ci in tests/browser) first",
        playwright.display()
    );

    let fake = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&fake).start();
    std::fs::create_dir_all(SHOTS_DIR).unwrap();

    let mut node = Command::new("node");
    node.arg("tests/browser/console.mjs")
        .current_dir(root)
        .env("ADMIN_URL", &gw.admin)
        .env("PUBLIC_URL", &gw.base)
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("CHAT_MODEL", "acme/echo")
        .env("SHOTS_DIR", SHOTS_DIR);
    // Blocking, off the runtime's thread: the fake upstream keeps answering meanwhile.
    let out = tokio::task::spawn_blocking(move || node.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| {
            panic!("cannot run `node` ({e}): the console test needs Node.js 20+ (then `make browser-deps`)")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the console's browser test failed ({}); screenshots in {SHOTS_DIR}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    print!("{stdout}");
}
