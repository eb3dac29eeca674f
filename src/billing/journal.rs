//! The ledger journal: a usage record is appended here before the last bytes of its answer go
//! to the client, so a process crash (SIGKILL, an abort, the OOM killer) loses no answered
//! request. The writer's queue lives in memory; the journal is what the kernel keeps of it.
//!
//! - **On the request path** an append is one `write(2)` of one JSON line to the current
//!   segment file, opened `O_APPEND`: no lock, no fsync, no wait on the database.
//! - **Segments.** The writer seals the current segment every tick (a new file takes the next
//!   appends) and deletes a sealed one once every record in it is settled: committed to the
//!   store, or spooled (the spool fsyncs). [`Entry`] is a record's claim on its segment.
//! - **Ownership.** Each process holds an exclusive `flock` on its segments while it lives, so a
//!   segment anyone can lock belongs to a process that is gone: the writer adopts such orphans
//!   into the spool (without their charges, which no gate of this process holds) and deletes
//!   them. The spool's replay is idempotent by record id, so records already committed cost
//!   nothing; during a graceful upgrade the old process's segments stay its own until it exits.
//! - **Durability.** What a process crash cannot lose, a machine crash (power, kernel panic)
//!   still can: the records written since the last `fsync`. The writer syncs the current
//!   segment every `ledger_journal.fsync` (and every sealed one), which bounds that loss.
//! - A crash mid-append tears at most the line being written; its answer's last bytes were not
//!   yet released. Unreadable lines are skipped when an orphan is adopted.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::spool::Spool;
use crate::store::UsageRecord;

/// The journal of one process: the segment taking appends, and the sealed ones not yet
/// settled.
pub struct Journal {
    dir: PathBuf,
    current: ArcSwap<Segment>,
    /// Sealed segments waiting for their records to settle (the writer's alone).
    sealed: Mutex<Vec<Arc<Segment>>>,
    /// Names this process's segment files: `<pid>-<start>-<n>.journal`.
    prefix: String,
    next: AtomicU64,
}

/// One segment file, exclusively locked by this process while it lives.
pub struct Segment {
    path: PathBuf,
    file: File,
    /// Records appended; a claim taken before a sealed check (see [`Journal::append`]).
    appended: AtomicU64,
    /// Records committed or spooled.
    settled: AtomicU64,
    sealed: AtomicBool,
}

/// A journaled record's claim on its segment: [`settle`](Entry::settle) it once the record is
/// committed or spooled. One never settled keeps its segment until the process ends; the next
/// start then replays it (idempotently).
#[derive(Debug)]
pub struct Entry(Arc<Segment>);

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Segment").field(&self.path).finish()
    }
}

impl Entry {
    pub fn settle(self) {
        self.0.settled.fetch_add(1, SeqCst);
    }
}

const SUFFIX: &str = "journal";

thread_local! {
    /// Each proxy thread's line buffer: an append allocates nothing once it has grown.
    static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Journal {
    /// Opens the journal in `dir` (made if missing) with a fresh segment of this process.
    pub fn open(dir: &Path) -> std::io::Result<Journal> {
        std::fs::create_dir_all(dir)?;
        let started = chrono::Utc::now().timestamp_micros();
        let prefix = format!("{}-{started}", std::process::id());
        let first = Segment::create(&dir.join(format!("{prefix}-0.{SUFFIX}")))?;
        Ok(Journal {
            dir: dir.to_owned(),
            current: ArcSwap::from_pointee(first),
            sealed: Mutex::new(Vec::new()),
            prefix,
            next: AtomicU64::new(1),
        })
    }

    /// Appends `record` as one line; the entry is settled once the record is committed or
    /// spooled.
    pub fn append(&self, record: &UsageRecord) -> std::io::Result<Entry> {
        LINE.with_borrow_mut(|line| {
            line.clear();
            record.write_json(line);
            line.push(b'\n');
            loop {
                let segment = self.current.load_full();
                // Claim first, then look: the writer seals first, then counts. Either it sees
                // this claim, or this append sees the seal and goes to the next segment.
                segment.appended.fetch_add(1, SeqCst);
                if segment.sealed.load(SeqCst) {
                    segment.appended.fetch_sub(1, SeqCst);
                    continue;
                }
                return match (&segment.file).write_all(line) {
                    Ok(()) => Ok(Entry(segment)),
                    Err(e) => {
                        segment.appended.fetch_sub(1, SeqCst);
                        Err(e)
                    }
                };
            }
        })
    }

    /// The writer's tick: seals the current segment if it took any record (a fresh one takes
    /// the next), then deletes the sealed segments whose records are all settled.
    pub fn rotate(&self) -> std::io::Result<()> {
        if self.current.load().appended.load(SeqCst) > 0 {
            let n = self.next.fetch_add(1, SeqCst);
            let path = self.dir.join(format!("{}-{n}.{SUFFIX}", self.prefix));
            let old = self.current.swap(Arc::new(Segment::create(&path)?));
            old.sealed.store(true, SeqCst);
            old.file.sync_data()?;
            self.lock_sealed().push(old);
        }
        self.trim();
        Ok(())
    }

    /// Deletes the sealed segments whose records are all settled.
    pub fn trim(&self) {
        self.lock_sealed().retain(|s| {
            let done = s.settled.load(SeqCst) >= s.appended.load(SeqCst);
            if done {
                if let Err(e) = std::fs::remove_file(&s.path) {
                    tracing::warn!(path = %s.path.display(), "cannot delete a settled journal segment: {e}");
                }
            }
            !done
        });
    }

    /// Makes what the current segment holds survive a machine crash.
    pub fn sync(&self) -> std::io::Result<()> {
        self.current.load().file.sync_data()
    }

    /// Records waiting in journal segments, this process's (not yet settled).
    pub fn unsettled(&self) -> u64 {
        let count = |s: &Segment| {
            s.appended
                .load(SeqCst)
                .saturating_sub(s.settled.load(SeqCst))
        };
        let sealed: u64 = self.lock_sealed().iter().map(|s| count(s)).sum();
        sealed.saturating_add(count(&self.current.load()))
    }

    /// Moves the records of segments left by processes that are gone into `spool` (to be
    /// replayed, idempotently) and deletes those segments; returns how many records moved.
    pub fn adopt_orphans(&self, spool: &Spool) -> std::io::Result<usize> {
        let mut adopted = 0usize;
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != SUFFIX) {
                continue;
            }
            let Some(records) = read_orphan(&path)? else {
                continue; // a live process's
            };
            spool.adopt(&records)?;
            std::fs::remove_file(&path)?;
            adopted = adopted.saturating_add(records.len());
            tracing::warn!(
                path = %path.display(),
                records = records.len(),
                "adopted the ledger journal of a process that ended without settling it"
            );
        }
        Ok(adopted)
    }

    fn lock_sealed(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Segment>>> {
        self.sealed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Segment {
    fn create(path: &Path) -> std::io::Result<Segment> {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)?;
        file.try_lock().map_err(std::io::Error::other)?;
        Ok(Segment {
            path: path.to_owned(),
            file,
            appended: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            sealed: AtomicBool::new(false),
        })
    }
}

/// The records of the segment at `path` if no live process holds it (`None`: one does).
fn read_orphan(path: &Path) -> std::io::Result<Option<Vec<UsageRecord>>> {
    let mut file = match OpenOptions::new().read(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if file.try_lock().is_err() {
        return Ok(None);
    }
    let mut text = Vec::new();
    file.read_to_end(&mut text)?;
    let records = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect();
    Ok(Some(records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::billing::spool::tests::record;

    fn files(dir: &Path) -> Vec<PathBuf> {
        let mut found: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        found.sort();
        found
    }

    #[test]
    fn a_segment_is_deleted_once_sealed_and_settled_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let a = journal.append(&record("a")).unwrap();
        let b = journal.append(&record("b")).unwrap();
        journal.rotate().unwrap();
        assert_eq!(files(dir.path()).len(), 2, "sealed and fresh segments");
        a.settle();
        journal.trim();
        assert_eq!(files(dir.path()).len(), 2, "b is not settled yet");
        assert_eq!(journal.unsettled(), 1);
        b.settle();
        journal.rotate().unwrap();
        assert_eq!(
            files(dir.path()).len(),
            1,
            "only the empty current segment is left"
        );
        journal.rotate().unwrap();
        assert_eq!(files(dir.path()).len(), 1, "an empty segment is not sealed");
    }

    #[test]
    fn a_live_journal_is_not_adopted_and_a_dead_ones_is_with_its_torn_line_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(&dir.path().join("spool")).unwrap();
        let journal_dir = dir.path().join("journal");
        let live = Journal::open(&journal_dir).unwrap();
        let _entry = live.append(&record("live")).unwrap();
        let other = Journal::open(&journal_dir).unwrap();
        assert_eq!(
            other.adopt_orphans(&spool).unwrap(),
            0,
            "held by a live journal"
        );

        let dead = Journal::open(&journal_dir).unwrap();
        let _ = dead.append(&record("x")).unwrap();
        let _ = dead.append(&record("y")).unwrap();
        let path = dead.current.load().path.clone();
        drop(dead); // its process ended: the lock is gone
        let whole = serde_json::to_vec(&record("torn")).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&whole[..whole.len() / 2]).unwrap();

        // `live` and `other` hold their own segments; only the dead one is adopted.
        assert_eq!(other.adopt_orphans(&spool).unwrap(), 2);
        assert!(!path.exists());
        let spooled: Vec<String> = spool
            .read()
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(spooled, ["x", "y"]);
        assert!(!spool.was_ours("x"), "adopted charges are no gate's here");
        assert_eq!(other.adopt_orphans(&spool).unwrap(), 0);
    }

    #[test]
    fn appends_racing_rotations_are_each_counted_in_the_segment_that_holds_them() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let entries = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..4 {
                let (journal, entries) = (&journal, &entries);
                s.spawn(move || {
                    for i in 0..300 {
                        let e = journal.append(&record(&format!("r{t}-{i}"))).unwrap();
                        entries.lock().unwrap().push(e);
                    }
                });
            }
            for _ in 0..50 {
                journal.rotate().unwrap();
            }
        });
        let mut on_disk = 0;
        for path in files(dir.path()) {
            let text = std::fs::read_to_string(path).unwrap();
            on_disk += text.lines().count();
        }
        assert_eq!(on_disk, 1200, "every record is in some segment file");
        assert_eq!(journal.unsettled(), 1200);
        for e in entries.into_inner().unwrap() {
            e.settle();
        }
        journal.rotate().unwrap();
        assert_eq!(journal.unsettled(), 0);
        assert_eq!(files(dir.path()).len(), 1, "every settled segment deleted");
    }
}
