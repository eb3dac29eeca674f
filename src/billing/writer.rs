//! The ledger writer: usage records leave the response path through a bounded channel and are
//! committed in batches (group commit), each record with its ledger debit, in one transaction.
//!
//! Nothing that must be billed is lost:
//! - `LedgerSink::submit` never waits; when the queue is full the record goes straight to the
//!   spool file.
//! - When the database refuses a batch (outage), the batch is appended to the spool and fsync'd
//!   before the writer moves on; the charges stay pending in the gates meanwhile.
//! - The spool (`spool.rs`) is replayed every second while it is not empty. Replay is
//!   idempotent (a record id is written at most once by the store), so a crash during replay
//!   double-charges nobody, and two processes replaying one spool lose nothing.
//! - A complete answer's record is in the journal (`journal.rs`) before the answer's last bytes
//!   leave: a crash loses the queue, not the records. Once a record is committed or spooled its
//!   journal entry is settled.
//! - On shutdown (SIGTERM, SIGQUIT, and SIGINT through [`LedgerSink::drain`]) the queue is
//!   drained and committed, or spooled.
//! - A record the database refuses for good (it breaks a schema rule, e.g. a cost that does not
//!   match its prices — a gateway bug) is isolated by retrying its batch record by record, set
//!   aside in `<spool>.refused` for an operator, and logged as an error; the others commit.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use super::gates::Accounts;
use super::journal::{Entry, Journal};
use super::spool::Spool;
use crate::metrics::METRICS;
use crate::money::Usd;
use crate::store::{Store, StoreError, UsageRecord};

/// Records per transaction at most.
const BATCH: usize = 512;
/// How long a batch gathers records after its first one when the writer is busy (it committed
/// less than this long ago). Each commit has a fixed cost (a transaction, an fsync, the
/// balance and index pages rewritten), so committing every few records at a high rate spent
/// more of the core on the ledger than on the proxy (about 4 records per commit at 6,000
/// requests/s); a record's bill reaches the database at most this much later, while its
/// reservation already holds the credit. An idle writer commits a lone record at once.
const GATHER: Duration = Duration::from_millis(10);
/// Queue depth: about a second of the gateway's peak rate.
const QUEUE: usize = 16_384;
const REPLAY_EVERY: Duration = Duration::from_secs(1);
/// How much change feed to keep, and how often to trim it (the writer owns the chore because
/// it is the one steady source of feed rows: balances and spend change with every batch).
const FEED_KEPT: Duration = Duration::from_secs(600);
const PRUNE_EVERY: u32 = 60;

/// A record on its way to the store, with its journal entry if it has one.
pub struct Queued {
    pub record: UsageRecord,
    pub entry: Option<Entry>,
}

/// The gateway's handle: submit a finished request's record.
#[derive(Clone)]
pub struct LedgerSink {
    tx: mpsc::Sender<Queued>,
    spool: Arc<Spool>,
    accounts: Arc<Accounts>,
    journal: Option<Arc<Journal>>,
    drain: Arc<Drain>,
}

/// The writer's end, run as a background service.
pub struct LedgerWriter {
    rx: mpsc::Receiver<Queued>,
    spool: Arc<Spool>,
    accounts: Arc<Accounts>,
    journal: Option<Arc<Journal>>,
    /// How often the journal is made durable against a machine crash (`None`: left to the
    /// kernel).
    fsync: Option<Duration>,
    drain: Arc<Drain>,
}

/// A drain asked of the writer outside Pingora's graceful shutdown (SIGINT), and its end.
#[derive(Default)]
struct Drain {
    asked: tokio::sync::Notify,
    done: tokio::sync::Notify,
}

/// Where the ledger keeps what is not yet committed: the spool file, and the journal's
/// directory with how often it is synced (`None`: no journal).
pub struct LedgerFiles {
    pub spool: PathBuf,
    pub journal: Option<(PathBuf, Duration)>,
}

pub fn ledger(
    files: LedgerFiles,
    accounts: Arc<Accounts>,
) -> std::io::Result<(LedgerSink, LedgerWriter)> {
    let spool = Arc::new(Spool::open(&files.spool)?);
    let journal = match &files.journal {
        Some((dir, _)) => Some(Arc::new(Journal::open(dir)?)),
        None => None,
    };
    let fsync = files
        .journal
        .map(|(_, every)| every)
        .filter(|d| !d.is_zero());
    let (tx, rx) = mpsc::channel(QUEUE);
    let drain = Arc::new(Drain::default());
    let sink = LedgerSink {
        tx,
        spool: spool.clone(),
        accounts: accounts.clone(),
        journal: journal.clone(),
        drain: drain.clone(),
    };
    let writer = LedgerWriter {
        rx,
        spool,
        accounts,
        journal,
        fsync,
        drain,
    };
    Ok((sink, writer))
}

fn window_of(r: &UsageRecord) -> Option<(&str, DateTime<Utc>)> {
    r.spend_window_start.map(|w| (r.key_id.as_str(), w))
}

/// Adds a cost to a batch's sum (a batch's costs cannot reach `i64`; saturating all the same).
fn add(sum: &mut Usd, cost: Usd) {
    *sum = Usd::from_pico(sum.pico().saturating_add(cost.pico()));
}

impl LedgerSink {
    /// Records waiting for the writer.
    pub fn queued(&self) -> usize {
        self.tx.max_capacity().saturating_sub(self.tx.capacity())
    }

    /// Journaled records not yet committed or spooled.
    pub fn journal_unsettled(&self) -> u64 {
        self.journal.as_ref().map_or(0, |j| j.unsettled())
    }

    /// Writes `record` to the journal, before the last bytes of its answer are released; `None`
    /// when there is no journal (or it failed: logged, and the record still goes the usual way).
    pub fn journal(&self, record: &UsageRecord) -> Option<Entry> {
        let journal = self.journal.as_ref()?;
        match journal.append(record) {
            Ok(entry) => Some(entry),
            Err(e) => {
                METRICS.journal_failed();
                tracing::error!(id = %record.id, "cannot journal a usage record: {e}");
                None
            }
        }
    }

    /// Charges the gates at once and queues the record (with its journal entry); never waits.
    pub fn submit(&self, record: UsageRecord, entry: Option<Entry>) {
        self.accounts
            .charge(&record.workspace_id, window_of(&record), record.cost);
        if let Err(e) = self.tx.try_send(Queued { record, entry }) {
            let Queued { record, entry } = match e {
                mpsc::error::TrySendError::Full(q) | mpsc::error::TrySendError::Closed(q) => q,
            };
            tracing::warn!(id = %record.id, "ledger queue full or closed: spooling");
            match self.spool.append(std::slice::from_ref(&record)) {
                Ok(()) => entry.into_iter().for_each(Entry::settle),
                Err(e) => tracing::error!(id = %record.id, "CANNOT SPOOL A USAGE RECORD: {e}"),
            }
        }
    }

    /// Has the writer commit (or spool) what is queued now and stop, waiting `within` at most:
    /// what SIGINT does before Pingora's fast shutdown drops the runtimes.
    pub async fn drain(&self, within: Duration) {
        self.drain.asked.notify_one();
        if tokio::time::timeout(within, self.drain.done.notified())
            .await
            .is_err()
        {
            tracing::warn!(
                "the ledger writer did not drain in {within:?}: the journal has the rest"
            );
        }
    }
}

impl LedgerWriter {
    /// Commits batches until `linger` after `shutdown` resolved, then drains the queue (records
    /// submitted later are spooled by the sink).
    pub async fn run(
        mut self,
        store: Arc<dyn Store>,
        shutdown: impl std::future::Future<Output = ()>,
        linger: Duration,
    ) {
        tokio::pin!(shutdown);
        let mut batch = Vec::with_capacity(BATCH);
        let mut tick = tokio::time::interval(REPLAY_EVERY);
        let mut sync = tokio::time::interval(self.fsync.unwrap_or(REPLAY_EVERY));
        sync.reset();
        let mut ticks = 0u32;
        // Set at the shutdown signal: requests still finishing keep sending records until then.
        let mut stop_at: Option<tokio::time::Instant> = None;
        let mut last_commit: Option<std::time::Instant> = None;
        loop {
            let stop = async {
                match stop_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                n = self.rx.recv_many(&mut batch, BATCH) => {
                    if n == 0 {
                        break;
                    }
                    if last_commit.is_some_and(|t| t.elapsed() < GATHER) {
                        self.gather(&mut batch).await;
                    }
                    last_commit = Some(std::time::Instant::now());
                    self.commit(store.as_ref(), &mut batch).await;
                }
                _ = tick.tick() => {
                    self.replay(store.as_ref()).await;
                    ticks = ticks.wrapping_add(1);
                    if ticks.is_multiple_of(PRUNE_EVERY) {
                        prune_feed(store.as_ref()).await;
                    }
                }
                _ = sync.tick(), if self.fsync.is_some() => self.sync_journal(),
                _ = &mut shutdown, if stop_at.is_none() => {
                    let now = tokio::time::Instant::now();
                    stop_at = Some(now.checked_add(linger).unwrap_or(now));
                }
                _ = self.drain.asked.notified() => break,
                _ = stop => break,
            }
        }
        self.rx.close();
        while self.rx.recv_many(&mut batch, BATCH).await > 0 {
            self.commit(store.as_ref(), &mut batch).await;
        }
        self.replay(store.as_ref()).await;
        self.rotate_journal();
        self.drain.done.notify_one();
    }

    fn sync_journal(&self) {
        if let Some(Err(e)) = self.journal.as_ref().map(|j| j.sync()) {
            tracing::error!("cannot sync the ledger journal: {e}");
        }
    }

    /// Seals the journal's current segment and deletes the settled ones.
    fn rotate_journal(&self) {
        if let Some(Err(e)) = self.journal.as_ref().map(|j| j.rotate()) {
            tracing::error!("cannot rotate the ledger journal: {e}");
        }
    }

    /// Adds the records that arrive within `GATHER` to `batch`, up to `BATCH`. It sleeps rather
    /// than waits on the queue: a writer woken by every record costs the proxy threads, which
    /// share its core, a wake-up and a context switch per request.
    async fn gather(&mut self, batch: &mut Vec<Queued>) {
        if batch.len() >= BATCH {
            return; // a backlog: no reason to wait
        }
        tokio::time::sleep(GATHER).await;
        while batch.len() < BATCH {
            match self.rx.try_recv() {
                Ok(record) => batch.push(record),
                Err(_) => return,
            }
        }
    }

    /// Commits the batch (or spools it), then settles its journal entries: once the records are
    /// in the store or the spool, the journal need not keep them.
    async fn commit(&self, store: &dyn Store, batch: &mut Vec<Queued>) {
        let (records, entries): (Vec<_>, Vec<_>) =
            batch.drain(..).map(|q| (q.record, q.entry)).unzip();
        let _turn = self.accounts.sync_turn().await;
        let started = std::time::Instant::now();
        let written = self.write(store, &records).await;
        METRICS.ledger_committed(started.elapsed());
        match written {
            Ok(refused) => {
                let outcomes: Vec<_> = records
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r, refused.contains(&i)))
                    .collect();
                self.settle(store, &outcomes).await;
            }
            Err(e) => {
                tracing::warn!(
                    records = records.len(),
                    "ledger commit failed, spooling: {e}"
                );
                if let Err(e) = self.spool.append(&records) {
                    // The journal keeps them: the next start replays them.
                    return tracing::error!(
                        records = records.len(),
                        "CANNOT SPOOL USAGE RECORDS: {e}"
                    );
                }
            }
        }
        entries.into_iter().flatten().for_each(Entry::settle);
    }

    /// Settles a written batch's charges, each `(record, refused)`: refused ones are
    /// forgotten; the committed ones, summed by workspace and by key window, stop being pending
    /// in the same step as the database's values read back after the commit (which include
    /// them) come in. The caller holds the gates' sync turn from before the commit.
    async fn settle(&self, store: &dyn Store, outcomes: &[(&UsageRecord, bool)]) {
        let mut balances: BTreeMap<&str, Usd> = BTreeMap::new();
        let mut spends: BTreeMap<(&str, DateTime<Utc>), Usd> = BTreeMap::new();
        for (r, refused) in outcomes {
            if *refused {
                self.accounts.release(&r.workspace_id, window_of(r), r.cost);
                continue;
            }
            add(balances.entry(&r.workspace_id).or_default(), r.cost);
            if let Some(window) = window_of(r) {
                add(spends.entry(window).or_default(), r.cost);
            }
        }
        for (ws, charges) in balances {
            let read = store.balance_row(ws).await;
            let read = read
                .inspect_err(|e| tracing::debug!(workspace = ws, "balance read-back failed: {e}"));
            self.accounts.settle_balance(ws, read.ok(), charges);
        }
        if spends.is_empty() {
            return;
        }
        let windows: Vec<_> = spends.keys().map(|&(key, w)| (key.to_owned(), w)).collect();
        let read = store.key_spends(&windows).await;
        let read = read.inspect_err(|e| tracing::debug!("spend read-back failed: {e}"));
        let mut amounts = read.into_iter().flatten().map(|(_, amount)| amount);
        for ((key, window), charges) in spends {
            self.accounts
                .settle_spend(key, window, amounts.next(), charges);
        }
    }

    /// Writes `records`; returns the indexes refused for good (set aside), or the error to
    /// retry the whole slice later with.
    async fn write(
        &self,
        store: &dyn Store,
        records: &[UsageRecord],
    ) -> Result<Vec<usize>, StoreError> {
        match store.record_usage(records).await {
            Ok(_) => Ok(Vec::new()),
            Err(e) if e.is_retryable() => Err(e),
            Err(_) => {
                let mut refused = Vec::new();
                for (i, r) in records.iter().enumerate() {
                    match store.record_usage(std::slice::from_ref(r)).await {
                        Ok(_) => {}
                        Err(e) if e.is_retryable() => return Err(e),
                        Err(e) => {
                            tracing::error!(id = %r.id, "usage record refused by the database, set aside: {e}");
                            if let Err(io) = self.spool.set_aside(r) {
                                tracing::error!(id = %r.id, "CANNOT SET ASIDE A REFUSED RECORD: {io}");
                            }
                            refused.push(i);
                        }
                    }
                }
                Ok(refused)
            }
        }
    }

    /// Replays the spool into the store, with the records of journals whose processes ended
    /// (adopted into it first); keeps whatever does not commit. Rotates the journal.
    async fn replay(&self, store: &dyn Store) {
        self.rotate_journal();
        if let Some(Err(e)) = self.journal.as_ref().map(|j| j.adopt_orphans(&self.spool)) {
            tracing::error!("cannot adopt an orphaned ledger journal: {e}");
        }
        let records = match self.spool.read() {
            Ok(Some(found)) => found,
            Ok(None) => return,
            Err(e) => return tracing::error!("cannot read the ledger spool: {e}"),
        };
        let _turn = self.accounts.sync_turn().await;
        let mut refused = HashSet::new();
        for (n, chunk) in records.chunks(BATCH).enumerate() {
            // Positions in `records`, which is in memory: the sum cannot overflow.
            #[expect(clippy::arithmetic_side_effects, reason = "an index into a Vec")]
            let at = |i| n * BATCH + i;
            match self.write(store, chunk).await {
                Ok(bad) => refused.extend(bad.into_iter().map(at)),
                Err(e) => {
                    return tracing::warn!(spooled = records.len(), "spool replay deferred: {e}")
                }
            }
        }
        // Charges this process spooled settle now; older ones arrive via the change feed.
        let ours: Vec<_> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| self.spool.was_ours(&r.id))
            .map(|(i, r)| (r, refused.contains(&i)))
            .collect();
        self.settle(store, &ours).await;
        let replayed = records.iter().map(|r| r.id.as_str()).collect();
        match self.spool.consume(&replayed) {
            Ok(()) => tracing::info!(records = records.len(), "ledger spool replayed"),
            Err(e) => tracing::error!("cannot trim the ledger spool: {e}"),
        }
    }
}

async fn prune_feed(store: &dyn Store) {
    let Some(before) = chrono::Duration::from_std(FEED_KEPT)
        .ok()
        .and_then(|kept| chrono::Utc::now().checked_sub_signed(kept))
    else {
        return;
    };
    match store.prune_changes(before).await {
        Ok(n) if n > 0 => tracing::debug!(rows = n, "change feed pruned"),
        Ok(_) => {}
        Err(e) => tracing::warn!("change feed pruning failed: {e}"),
    }
}
