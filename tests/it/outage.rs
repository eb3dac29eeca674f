//! The database goes away mid-load: requests keep succeeding from memory, usage records spool
//! to disk, and when the database returns the spool drains and the books agree to the pico.
//! Uses a private PostgreSQL the test starts with `initdb`/`pg_ctl` (as the `postgres` user
//! when run as root), so stopping it disturbs nothing else.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::harness::{eventually, Gateway, Sim};

/// A throwaway PostgreSQL cluster in a temp dir; stopped and removed on drop.
struct PrivatePg {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl PrivatePg {
    fn start() -> PrivatePg {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL server binaries under /usr/lib/postgresql")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .find(|b| b.join("initdb").exists())
            .expect("initdb");
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = PrivatePg { dir, bin, port };
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(pg.dir.path())
            .status();
        pg.run(
            "initdb",
            &["-A", "trust", "-U", "postgres", "-D", &pg.data()],
        );
        pg.up();
        pg
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs a server binary, as `postgres` when we are root (initdb refuses root).
    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout.starts_with(b"0"))
            .unwrap_or(false);
        let status = if root {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&exe)
                .args(args)
                .output()
                .unwrap()
        } else {
            Command::new(&exe).args(args).output().unwrap()
        };
        assert!(
            status.status.success(),
            "{tool} {args:?}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
    }

    fn up(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-o", &opts, "-l", &log, "-w", "start"],
        );
    }

    fn down(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "stop"])
            .output();
    }
}

fn spooled(spool: &Path) -> usize {
    std::fs::read_to_string(spool)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// The admin listener's readiness: status and body.
async fn readiness(gw: &Gateway) -> (u16, String) {
    let res = reqwest::get(format!("{}/ready", gw.admin)).await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

async fn chat(gw: &Gateway, key: &str, i: usize) {
    let res = gw.chat(key, json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": format!("outage {i}")}]})).await;
    assert_eq!(
        res.status(),
        200,
        "request {i} must succeed whatever the database does"
    );
    let _ = res.bytes().await;
}

#[tokio::test]
async fn database_outage_spools_and_replays_without_loss() {
    let pg = PrivatePg::start();
    let sim = Sim::start();
    let gw = Gateway::builder().store(pg.url()).simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let spool = gw.dir.path().join("ledger.spool");

    for i in 0..10 {
        chat(&gw, &key, i).await;
    }
    pg.down();
    for i in 10..30 {
        chat(&gw, &key, i).await;
    }
    let grew = eventually(Duration::from_secs(10), || async { spooled(&spool) >= 20 }).await;
    assert!(
        grew.is_some(),
        "records made during the outage are spooled (found {})",
        spooled(&spool)
    );
    let degraded = eventually(Duration::from_secs(5), || async {
        let (status, body) = readiness(&gw).await;
        status == 503
            && body.contains("store unreachable")
            && body.contains("ledger spool not empty")
    })
    .await;
    assert!(degraded.is_some(), "{:?}", readiness(&gw).await);

    pg.up();
    let drained = eventually(Duration::from_secs(20), || async { spooled(&spool) == 0 }).await;
    assert!(
        drained.is_some(),
        "the spool drains once the database is back"
    );
    let ready = eventually(Duration::from_secs(10), || async {
        readiness(&gw).await.0 == 200
    })
    .await;
    assert!(
        ready.is_some(),
        "ready again once the store is back and the spool drained"
    );
    let recs = gw.cli_json(&["usage", "--workspace", &ws]);
    let recs = recs.as_array().unwrap();
    assert_eq!(recs.len(), 30, "every request billed exactly once");
    let verify = gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}
