//! The ledger spool: usage records that could not be committed, as JSON lines in a file,
//! fsync'd on every append and replayed into the store later.
//!
//! Invariants:
//! - Every operation holds the file's advisory lock (`flock`), so two processes sharing the
//!   path (the old and the new gateway during a graceful upgrade) never interleave an append
//!   with a trim.
//! - A trim removes the records that were replayed, by id, not a byte range: records appended
//!   by anyone after the read stay, whatever the other process trimmed meanwhile.
//! - A crash mid-append leaves a torn last line. The next append starts on a new line, so the
//!   torn record is the only one lost; a trim moves it to `<spool>.torn` for an operator.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::store::UsageRecord;

pub struct Spool {
    path: PathBuf,
    file: Mutex<File>,
    /// Ids this process spooled (their charges are pending in the gates).
    ours: Mutex<HashSet<String>>,
}

/// The spool file, held under both this process's mutex and the cross-process file lock.
struct Locked<'a>(MutexGuard<'a, File>);

impl Deref for Locked<'_> {
    type Target = File;
    fn deref(&self) -> &File {
        &self.0
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut File {
        &mut self.0
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = File::unlock(&self.0);
    }
}

impl Spool {
    pub fn open(path: &Path) -> std::io::Result<Spool> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        Ok(Spool {
            path: path.to_owned(),
            file: Mutex::new(file),
            ours: Mutex::new(HashSet::new()),
        })
    }

    fn lock(&self) -> std::io::Result<Locked<'_>> {
        let file = self
            .file
            .lock()
            .map_err(|_| std::io::Error::other("spool lock poisoned"))?;
        File::lock(&file)?;
        Ok(Locked(file))
    }

    /// Appends `records`, whose charges are pending in this process's gates (settled when
    /// they are replayed).
    pub fn append(&self, records: &[UsageRecord]) -> std::io::Result<()> {
        self.write(records)?;
        if let Ok(mut ours) = self.ours.lock() {
            ours.extend(records.iter().map(|r| r.id.clone()));
        }
        Ok(())
    }

    /// Appends records another process billed (an orphaned journal's): replayed like the
    /// others, with no charge of this process to settle.
    pub fn adopt(&self, records: &[UsageRecord]) -> std::io::Result<()> {
        self.write(records)
    }

    fn write(&self, records: &[UsageRecord]) -> std::io::Result<()> {
        let mut text = Vec::new();
        for r in records {
            serde_json::to_writer(&mut text, r)?;
            text.push(b'\n');
        }
        let mut file = self.lock()?;
        if !ends_a_line(&mut file)? {
            // A torn record from a crash: end it, so ours is not glued to it.
            text.insert(0, b'\n');
        }
        file.write_all(&text)?;
        file.sync_data()
    }

    /// Keeps a record the database refused, for an operator to look at.
    pub fn set_aside(&self, record: &UsageRecord) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        self.keep_beside("refused", &line)
    }

    /// Appends `lines` to `<spool>.<what>`.
    fn keep_beside(&self, what: &str, lines: &[u8]) -> std::io::Result<()> {
        let mut path = self.path.clone().into_os_string();
        path.push(".");
        path.push(what);
        let mut file = OpenOptions::new().create(true).append(true).open(path)?;
        file.write_all(lines)?;
        file.sync_data()
    }

    /// Whether this process spooled `id` (asked once per id: the answer is forgotten).
    pub fn was_ours(&self, id: &str) -> bool {
        self.ours.lock().is_ok_and(|mut ours| ours.remove(id))
    }

    /// Every readable record; `None` when the spool is empty.
    pub fn read(&self) -> std::io::Result<Option<Vec<UsageRecord>>> {
        let mut file = self.lock()?;
        let text = contents(&mut file)?;
        if text.is_empty() {
            return Ok(None);
        }
        let records = lines(&text)
            .filter_map(|line| serde_json::from_slice(line).ok())
            .collect();
        Ok(Some(records))
    }

    /// Removes the records whose ids are in `replayed`, keeping every other; moves lines no
    /// record can be read from (torn by a crash) to `<spool>.torn`.
    pub fn consume(&self, replayed: &HashSet<&str>) -> std::io::Result<()> {
        let mut file = self.lock()?;
        let text = contents(&mut file)?;
        let (mut kept, mut torn) = (Vec::with_capacity(text.len()), Vec::new());
        for line in lines(&text) {
            match serde_json::from_slice::<UsageRecord>(line) {
                Ok(r) if replayed.contains(r.id.as_str()) => continue,
                Ok(_) => kept.extend_from_slice(line),
                Err(e) => {
                    tracing::error!(path = %self.path.display(), "unreadable spool line set aside: {e}");
                    torn.extend_from_slice(line);
                    torn.push(b'\n');
                    continue;
                }
            }
            kept.push(b'\n');
        }
        if !torn.is_empty() {
            self.keep_beside("torn", &torn)?;
        }
        file.set_len(0)?;
        file.write_all(&kept)?;
        file.sync_data()
    }
}

/// The whole file.
fn contents(file: &mut File) -> std::io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(0))?;
    let mut text = Vec::new();
    file.read_to_end(&mut text)?;
    Ok(text)
}

/// The file's lines, the last one included even without its newline (a torn record).
fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(|&b| b == b'\n').filter(|l| !l.is_empty())
}

/// Whether the file is empty or ends with a newline.
fn ends_a_line(file: &mut File) -> std::io::Result<bool> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::money::{Price, Usd};
    use crate::store::{UsageEndpoint, UsageOutcome};

    pub(crate) fn record(id: &str) -> UsageRecord {
        let now = chrono::Utc::now();
        UsageRecord {
            id: id.into(),
            workspace_id: "ws_1".into(),
            key_id: "key_1".into(),
            model_id: "m/x".into(),
            route: "openai".into(),
            endpoint: UsageEndpoint::Chat,
            stream: false,
            input_tokens: 1,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            output_tokens: 1,
            reasoning_tokens: 0,
            input_price: Price::from_micro_per_mtok(1_000_000),
            output_price: Price::from_micro_per_mtok(1_000_000),
            cache_read_price: None,
            cache_write_price: None,
            cost: Usd::from_pico(2_000_000),
            outcome: UsageOutcome::Complete,
            started_at: now,
            finished_at: now,
            upstream_latency_us: None,
            ttft_us: None,
            spend_window_start: None,
            usage_source: Default::default(),
            attempts: 1,
            request_id: None,
            review: None,
            client_addr: None,
            upstream_request_id: None,
            waived: false,
            extra: Default::default(),
        }
    }

    fn ids(spool: &Spool) -> Vec<String> {
        spool
            .read()
            .unwrap()
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.id)
            .collect()
    }

    #[test]
    fn lines_spooled_before_client_addresses_were_kept_still_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        let mut traced = record("new");
        traced.client_addr = Some("2001:db8::7".into());
        traced.upstream_request_id = Some("req_011CVEA3SF7rnb3DuBZytqQa".into());
        let mut old = serde_json::to_value(record("old")).unwrap();
        let fields = old.as_object_mut().unwrap();
        fields.remove("client_addr").unwrap();
        fields.remove("upstream_request_id").unwrap();
        std::fs::write(&path, format!("{old}\n")).unwrap();
        let spool = Spool::open(&path).unwrap();
        spool.append(&[traced]).unwrap();
        let read = spool.read().unwrap().unwrap();
        assert_eq!(
            (read[0].client_addr.as_deref(), &read[0].id[..]),
            (None, "old")
        );
        assert_eq!(read[1].client_addr.as_deref(), Some("2001:db8::7"));
        assert_eq!(
            read[1].upstream_request_id.as_deref(),
            Some("req_011CVEA3SF7rnb3DuBZytqQa")
        );
    }

    #[test]
    fn a_torn_line_loses_only_the_torn_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        let spool = Spool::open(&path).unwrap();
        spool.append(&[record("a")]).unwrap();
        // A crash mid-append: half a record, no newline.
        let whole = serde_json::to_vec(&record("torn")).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&whole[..whole.len() / 2]).unwrap();
        drop(f);

        let restarted = Spool::open(&path).unwrap();
        restarted.append(&[record("b")]).unwrap();
        assert_eq!(
            ids(&restarted),
            ["a", "b"],
            "the record after the torn one is kept"
        );

        restarted.consume(&HashSet::from(["a", "b"])).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "replayed and trimmed"
        );
        let torn = std::fs::read(dir.path().join("spool.torn")).unwrap();
        assert_eq!(
            torn,
            [&whole[..whole.len() / 2], b"\n"].concat(),
            "set aside as it was"
        );
    }

    #[test]
    fn a_trim_keeps_what_it_did_not_replay_whoever_appended_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        // Two processes on one path (a graceful upgrade): each with its own handle.
        let old = Spool::open(&path).unwrap();
        let new = Spool::open(&path).unwrap();
        old.append(&[record("a"), record("b")]).unwrap();
        let seen_by_old = ids(&old);
        let seen_by_new = ids(&new);
        new.consume(&seen_by_new.iter().map(String::as_str).collect())
            .unwrap();
        new.append(&[record("c")]).unwrap();
        // The old process trims what it replayed after the new one already did, and appended.
        old.consume(&seen_by_old.iter().map(String::as_str).collect())
            .unwrap();
        assert_eq!(
            ids(&old),
            ["c"],
            "a record appended after the read survives every trim"
        );
    }

    #[test]
    fn concurrent_appends_and_trims_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        let appender = Spool::open(&path).unwrap();
        let trimmer = Spool::open(&path).unwrap();
        let mut replayed: HashSet<String> = HashSet::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..400 {
                    appender.append(&[record(&format!("r{i}"))]).unwrap();
                }
            });
            for _ in 0..200 {
                let batch = ids(&trimmer);
                trimmer
                    .consume(&batch.iter().map(String::as_str).collect())
                    .unwrap();
                replayed.extend(batch);
            }
        });
        replayed.extend(ids(&trimmer));
        assert_eq!(
            replayed.len(),
            400,
            "every record was replayed or is still spooled"
        );
    }
}
