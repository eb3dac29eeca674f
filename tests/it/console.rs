//! The web console in a real browser: `tests/browser/console.mjs` (Node with `playwright-core`
//! driving the Debian Chromium, headless) against a real gateway whose `acme/echo` model goes to
//! the in-process OpenAI-compatible fake. The script signs in (after a refused wrong token),
//! creates a workspace, tops it up, creates a key and copies its once-shown secret, uses it on
//! the public API, revokes it in the console and sees the proxy refuse it, creates a key with a
//! model allowlist and edits the list (the proxy follows), creates a management key, uses it on
//! the admin API and revokes it, then checks the usage, catalog and audit pages; any page or
//! console error fails it. Midway, once signed in,
//! the script asks for a graceful upgrade (`serve -u` + SIGQUIT) and checks that the page
//! stays signed in and keeps working. Full-page screenshots of each page land in
//! `target/console-screenshots`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

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
    let mut gw = Gateway::builder().fake_openai(&fake).start();
    std::fs::create_dir_all(SHOTS_DIR).unwrap();

    let mut node = Command::new("node");
    node.arg("tests/browser/console.mjs")
        .current_dir(root)
        .env("ADMIN_URL", &gw.admin)
        .env("PUBLIC_URL", &gw.base)
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("CHAT_MODEL", "acme/echo")
        .env("SHOTS_DIR", SHOTS_DIR)
        .env("UPGRADES", "1");
    // Blocking, off the runtime's thread: the fake upstream keeps answering meanwhile.
    let (status, stdout, stderr) = tokio::task::spawn_blocking(move || run_script(node, &mut gw))
        .await
        .unwrap();
    assert!(
        status.success(),
        "the console's browser test failed ({status}); screenshots in {SHOTS_DIR}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(
        stdout.contains("UPGRADE\n"),
        "the gateway was never upgraded:\n{stdout}"
    );
    print!("{stdout}");
}

/// Runs the browser script, upgrading the gateway each time it asks (a line `UPGRADE` on its
/// stdout, answered `upgraded` on its stdin once the old process has exited); returns its exit
/// status, stdout and stderr.
fn run_script(mut node: Command, gw: &mut Gateway) -> (ExitStatus, String, String) {
    node.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = node.spawn().unwrap_or_else(|e| {
        panic!("cannot run `node` ({e}): the console test needs Node.js 20+ (then `make browser-deps`)")
    });
    let mut stdin = child.stdin.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut out = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        out.push_str(&line);
        out.push('\n');
        if line == "UPGRADE" {
            gw.upgrade();
            writeln!(stdin, "upgraded").unwrap();
        }
    }
    let status = child.wait().unwrap();
    (status, out, errors.join().unwrap())
}
