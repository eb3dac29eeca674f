//! A throwaway PostgreSQL cluster of a test's own, made with `initdb` and run with `pg_ctl`
//! (as the `postgres` user when run as root), so stopping or restarting it disturbs nothing
//! else: the outage test and the soak take theirs down mid-run.

use std::path::PathBuf;
use std::process::Command;

/// A throwaway PostgreSQL cluster in a temp dir; stopped and removed on drop.
pub struct PrivatePg {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl PrivatePg {
    pub fn start() -> PrivatePg {
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

    pub fn url(&self) -> String {
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

    pub fn up(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-o", &opts, "-l", &log, "-w", "start"],
        );
    }

    /// CPU time the cluster has used since it last started, in clock ticks: the postmaster's
    /// own and that of the children it reaped (exited backends), plus its live children's.
    pub fn cpu_ticks(&self) -> u64 {
        let pid_file = std::path::Path::new(&self.data()).join("postmaster.pid");
        let Some(postmaster) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse::<u32>().ok())
        else {
            return 0;
        };
        let mut ticks = 0;
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(stat) = proc_stat(&entry.path()) else {
                continue;
            };
            if stat.pid == postmaster {
                ticks += stat.utime + stat.stime + stat.cutime + stat.cstime;
            } else if stat.ppid == postmaster {
                ticks += stat.utime + stat.stime;
            }
        }
        ticks
    }

    pub fn down(&self) {
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

/// The fields of `/proc/<pid>/stat` the CPU count needs.
struct ProcStat {
    pid: u32,
    ppid: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

/// `/proc/<pid>/stat`, read past the command name (which may hold spaces and parentheses).
fn proc_stat(dir: &std::path::Path) -> Option<ProcStat> {
    let pid = dir.file_name()?.to_str()?.parse().ok()?;
    let text = std::fs::read_to_string(dir.join("stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    // After the name: state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i - 3)?.parse::<u64>().ok();
    Some(ProcStat {
        pid,
        ppid: u32::try_from(num(4)?).ok()?,
        utime: num(14)?,
        stime: num(15)?,
        cutime: num(16)?,
        cstime: num(17)?,
    })
}
