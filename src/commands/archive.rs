//! Retention of usage records: `usage archive` writes every record of each month before a
//! given one to a compressed file with a manifest, reads the file back to check it, and only
//! then has the store drop the month (in one transaction with its carried-forward totals, so
//! `ledger verify` still balances); `usage restore` loads an archive back for an audit.
//!
//! An archive is two files per month in the directory named: `usage-YYYY-MM.jsonl.zst` (one
//! JSON usage record a line — the spool's format — compressed with zstd) and
//! `usage-YYYY-MM.manifest.json` (the month, the record count, each workspace's count and
//! exact cost, and the SHA-256 of the compressed file). A file is written under a temporary
//! name and renamed once complete; an archive that fails to write or to read back is removed
//! and the month stays in the store untouched.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::audit::{self, Actor, Change};
use super::{CommandError, CommandResult};
use crate::money::Usd;
use crate::store::{ArchivedMonth, MonthTotal, Store, StoreError, UsageMonth, UsageRecord};

/// Records read from the store per query while a month is written.
const PAGE: usize = 1000;
/// zstd's level: its default, a good ratio at a cost far below the database's reads.
const LEVEL: i32 = 3;

/// What an archive file holds, written beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub month: UsageMonth,
    /// The archive file's name (in the manifest's directory).
    pub file: String,
    pub records: u64,
    /// Per workspace (byte order): its records and their exact cost.
    pub totals: Vec<MonthTotal>,
    /// Hex SHA-256 of the compressed file.
    pub sha256: String,
}

/// One month archived: its files and what they hold.
#[derive(Debug, Serialize)]
pub struct ArchivedFile {
    pub month: UsageMonth,
    pub file: PathBuf,
    pub manifest: PathBuf,
    pub records: u64,
    pub cost: Usd,
}

/// Every month an archive run took out of the store, oldest first.
#[derive(Debug, Serialize)]
pub struct Archived {
    pub months: Vec<ArchivedFile>,
}

/// A month loaded back from its archive.
#[derive(Debug, Serialize)]
pub struct Restored {
    pub month: UsageMonth,
    pub records: u64,
}

/// Archives every month before `before` that holds records into directory `to`, oldest
/// first, each month on its own: a month is dropped from the store only once its file has
/// been written, read back and found equal to its manifest, and the store finds the same
/// totals. Months not over at `now` (the current one) are refused.
pub async fn archive_usage(
    store: &dyn Store,
    actor: &Actor,
    before: &str,
    to: &Path,
    now: DateTime<Utc>,
) -> CommandResult<Archived> {
    let before: UsageMonth = before
        .parse()
        .map_err(|e| CommandError::Invalid(format!("--before: {e}")))?;
    let current = UsageMonth::of(now);
    if before > current {
        return Err(CommandError::Invalid(format!(
            "--before {before}: {current} is not over yet; at most --before {current}"
        )));
    }
    fs::create_dir_all(to).map_err(|e| io_err(to, &e))?;
    let mut months = Vec::new();
    for month in store.usage_months(before).await? {
        months.push(archive_month(store, actor, month, to, now).await?);
    }
    Ok(Archived { months })
}

async fn archive_month(
    store: &dyn Store,
    actor: &Actor,
    month: UsageMonth,
    to: &Path,
    now: DateTime<Utc>,
) -> CommandResult<ArchivedFile> {
    let (file, manifest_path) = paths(to, month);
    for p in [&file, &manifest_path] {
        if p.exists() {
            return Err(CommandError::Conflict(format!(
                "{} exists: an archive is never overwritten",
                p.display()
            )));
        }
    }
    let manifest = match write_month(store, month, &file, &manifest_path).await {
        Ok(m) => m,
        Err(e) => {
            remove(&[file.as_path(), manifest_path.as_path()]);
            return Err(e);
        }
    };
    let archived = ArchivedMonth {
        month,
        totals: manifest.totals.clone(),
    };
    let target = month.to_string();
    let change = Change {
        action: "usage.archive",
        workspace: None,
        target: &target,
    };
    let audit = audit::of(actor, change, None, audit::snapshot);
    match store.archive_usage_month(&archived, now, Some(audit)).await {
        Ok(()) => {}
        // Refused, nothing dropped (e.g. a record of the month arrived meanwhile): the files
        // go, the month stays. Any other failure may have committed: the files stay.
        Err(e @ StoreError::Conflict(_)) => {
            remove(&[file.as_path(), manifest_path.as_path()]);
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    }
    Ok(ArchivedFile {
        month,
        file,
        manifest: manifest_path,
        records: manifest.records,
        cost: total_cost(&manifest.totals)?,
    })
}

/// Writes `month`'s records to `file` and its manifest, then reads the file back and checks
/// it against the manifest.
async fn write_month(
    store: &dyn Store,
    month: UsageMonth,
    file: &Path,
    manifest_path: &Path,
) -> CommandResult<Manifest> {
    let partial = partial(file);
    let out = File::create(&partial).map_err(|e| io_err(&partial, &e))?;
    let mut out = zstd::Encoder::new(Hashing::new(BufWriter::new(out)), LEVEL)
        .map_err(|e| io_err(&partial, &e))?;
    let mut tally = Tally::default();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .month_usage_page(month, after.as_deref(), PAGE)
            .await?;
        for r in &page {
            serde_json::to_writer(&mut out, r).map_err(|e| io_err(&partial, &e.into()))?;
            out.write_all(b"\n").map_err(|e| io_err(&partial, &e))?;
            tally.add(r)?;
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = Some(last.id.clone()),
            _ => break,
        }
    }
    let hashing = out.finish().map_err(|e| io_err(&partial, &e))?;
    let sha256 = hashing.finish().map_err(|e| io_err(&partial, &e))?;
    fs::rename(&partial, file).map_err(|e| io_err(file, &e))?;
    let manifest = Manifest {
        month,
        file: file_name(file),
        records: tally.records,
        totals: tally.totals(),
        sha256,
    };
    let json =
        serde_json::to_vec_pretty(&manifest).map_err(|e| io_err(manifest_path, &e.into()))?;
    write_synced(manifest_path, &json)?;
    let (read, _) = read_archive(file, &manifest)?;
    if read != manifest {
        return Err(CommandError::Conflict(format!(
            "{} does not read back as written",
            file.display()
        )));
    }
    Ok(manifest)
}

/// Loads the archive file `path` back into the store, once its manifest (beside it) and its
/// contents agree; the store then checks them against the month's carried-forward totals.
pub async fn restore_usage(
    store: &dyn Store,
    actor: &Actor,
    path: &Path,
) -> CommandResult<Restored> {
    let manifest_path = manifest_of(path)?;
    let text = fs::read(&manifest_path).map_err(|e| io_err(&manifest_path, &e))?;
    let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| {
        CommandError::Invalid(format!("{}: not a manifest: {e}", manifest_path.display()))
    })?;
    let (read, records) = read_archive(path, &manifest)?;
    if read != manifest {
        return Err(CommandError::Conflict(format!(
            "{} does not match its manifest (records, totals or month)",
            path.display()
        )));
    }
    let target = manifest.month.to_string();
    let change = Change {
        action: "usage.restore",
        workspace: None,
        target: &target,
    };
    let audit = audit::of(actor, change, None, audit::snapshot);
    let n = store
        .restore_usage_month(manifest.month, &records, Some(audit))
        .await?;
    Ok(Restored {
        month: manifest.month,
        records: n,
    })
}

/// Reads an archive file: its checksum must be `expected`'s; returns the manifest its
/// contents make (to compare with `expected`) and its records.
fn read_archive(path: &Path, expected: &Manifest) -> CommandResult<(Manifest, Vec<UsageRecord>)> {
    let mut raw = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut raw))
        .map_err(|e| io_err(path, &e))?;
    let sha256 = hex::encode(Sha256::digest(&raw));
    if sha256 != expected.sha256 {
        return Err(CommandError::Conflict(format!(
            "{}: SHA-256 {sha256}, the manifest says {}",
            path.display(),
            expected.sha256
        )));
    }
    let lines = BufReader::new(zstd::Decoder::new(raw.as_slice()).map_err(|e| io_err(path, &e))?);
    let mut tally = Tally::default();
    let mut records = Vec::new();
    for (i, line) in lines.lines().enumerate() {
        let line = line.map_err(|e| io_err(path, &e))?;
        let r: UsageRecord = serde_json::from_str(&line).map_err(|e| {
            CommandError::Invalid(format!(
                "{} line {}: {e}",
                path.display(),
                i.saturating_add(1)
            ))
        })?;
        if UsageMonth::of(r.finished_at) != expected.month {
            return Err(CommandError::Conflict(format!(
                "{}: record {} is not of {}",
                path.display(),
                r.id,
                expected.month
            )));
        }
        tally.add(&r)?;
        records.push(r);
    }
    let read = Manifest {
        month: expected.month,
        file: expected.file.clone(),
        records: tally.records,
        totals: tally.totals(),
        sha256,
    };
    Ok((read, records))
}

/// Count and per-workspace cost of records, as they are written or read.
#[derive(Default)]
struct Tally {
    records: u64,
    by_workspace: BTreeMap<String, (u64, Usd)>,
}

impl Tally {
    fn add(&mut self, r: &UsageRecord) -> CommandResult<()> {
        self.records = self.records.saturating_add(1);
        let (n, cost) = self
            .by_workspace
            .entry(r.workspace_id.clone())
            .or_insert((0, Usd::ZERO));
        *n = n.saturating_add(1);
        *cost = cost.checked_add(r.cost).ok_or_else(|| {
            StoreError::Overflow(format!("the month's cost of {}", r.workspace_id))
        })?;
        Ok(())
    }

    fn totals(&self) -> Vec<MonthTotal> {
        self.by_workspace
            .iter()
            .map(|(w, &(records, cost))| MonthTotal {
                workspace_id: w.clone(),
                records,
                cost,
            })
            .collect()
    }
}

fn total_cost(totals: &[MonthTotal]) -> CommandResult<Usd> {
    totals.iter().try_fold(Usd::ZERO, |sum, t| {
        sum.checked_add(t.cost)
            .ok_or_else(|| StoreError::Overflow("an archived month's cost".into()).into())
    })
}

/// A writer that hashes what it passes on.
struct Hashing<W: Write> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Self {
        Hashing {
            inner,
            hash: Sha256::new(),
        }
    }
}

impl Hashing<BufWriter<File>> {
    /// Flushes and syncs the file; the hex SHA-256 of everything written.
    fn finish(self) -> io::Result<String> {
        let file = self.inner.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(hex::encode(self.hash.finalize()))
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(buf.get(..n).unwrap_or(buf));
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `usage-YYYY-MM.jsonl.zst` and `usage-YYYY-MM.manifest.json` in `dir`.
fn paths(dir: &Path, month: UsageMonth) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("usage-{month}.jsonl.zst")),
        dir.join(format!("usage-{month}.manifest.json")),
    )
}

/// The manifest beside an archive file.
fn manifest_of(file: &Path) -> CommandResult<PathBuf> {
    let name = file_name(file);
    let stem = name.strip_suffix(".jsonl.zst").ok_or_else(|| {
        CommandError::Invalid(format!(
            "{}: expected an archive file usage-YYYY-MM.jsonl.zst",
            file.display()
        ))
    })?;
    Ok(file.with_file_name(format!("{stem}.manifest.json")))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn partial(path: &Path) -> PathBuf {
    path.with_file_name(format!("{}.partial", file_name(path)))
}

/// Writes `bytes` to `path` under a temporary name, synced, then renamed.
fn write_synced(path: &Path, bytes: &[u8]) -> CommandResult<()> {
    let tmp = partial(path);
    File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path))
        .map_err(|e| {
            remove(&[tmp.as_path()]);
            io_err(path, &e)
        })
}

/// Removes what a failed archive left (nothing to do when it is absent).
fn remove(paths: &[&Path]) {
    for p in paths {
        for q in [p.to_path_buf(), partial(p)] {
            if let Err(e) = fs::remove_file(&q) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(path = %q.display(), error = %e, "could not remove");
                }
            }
        }
    }
}

fn io_err(path: &Path, e: &io::Error) -> CommandError {
    CommandError::Invalid(format!("{}: {e}", path.display()))
}
