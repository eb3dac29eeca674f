//! Keeps the in-memory caches in step with the database, off the hot path.
//!
//! One follower per process reads the change feed (`Store::changes_since`) whenever the store
//! says something may have changed (PostgreSQL NOTIFY, SQLite polling), updates new, changed or revoked
//! keys in the key cache, and rebuilds the catalog snapshot on catalog changes and at least
//! every `catalog_refresh`. When the database is unreachable it keeps serving from memory and
//! retries; a periodic full key reload covers anything a lost feed could hide.
//!
//! The proxy can also ask for a feed read at once and wait for it ([`Freshness`]): a key the
//! cache does not know, or a workspace it believes out of credit, may have been created or
//! topped up a moment ago. Such reads coalesce — one at a time, shared by every waiter — so
//! unknown keys cannot multiply the load on the database.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::auth::KeyCache;
use crate::billing::gates::Accounts;
use crate::billing::window::window_start;
use crate::catalog::{self, Catalog};
use crate::store::{ChangeKind, Store, StoreResult};

/// A full reload of keys, balances and spend this often, whatever the feed said.
const FULL_RELOAD: Duration = Duration::from_secs(300);
/// Longest wait for the store's change signal before polling anyway.
const MAX_WAIT: Duration = Duration::from_secs(1);
/// How long the follower waits for a feed `seq` it skipped to appear. A `seq` is taken at
/// insert, not at commit (PostgreSQL), so a change can become visible after a higher one;
/// reads start below the oldest skipped `seq` until it appears or is this old (a rolled-back
/// transaction's never does; the full reload covers the rest).
const GAP_WAIT: Duration = Duration::from_secs(5);
/// At most this many skipped `seq`s are waited for (a jump past it, after an outage or a
/// prune, is left to the full reload).
const MAX_GAPS: usize = 4096;
/// How far below the cursor a fresh follower looks (`FeedPosition::new`).
const START_WINDOW: i64 = 256;

pub struct Follower {
    pub keys: Arc<KeyCache>,
    /// Balances and key spend for the gates.
    pub accounts: Arc<Accounts>,
    pub catalog: Arc<Catalog>,
    /// Builds catalog snapshots (route breakers included).
    pub catalog_loader: catalog::Loader,
    pub catalog_refresh: Duration,
    /// Whether the last read of the store succeeded (the admin listener's readiness).
    pub store_reachable: Arc<AtomicBool>,
    feed: FeedPosition,
    steps: Steps,
}

/// The follower's side of [`Freshness`]: steps are numbered in the order they start.
struct Steps {
    asked: Arc<Notify>,
    started: Arc<AtomicU64>,
    finished: watch::Sender<u64>,
}

/// The proxy's handle on the follower: read the feed now, and wait until that read is done.
#[derive(Clone)]
pub struct Freshness {
    asked: Arc<Notify>,
    started: Arc<AtomicU64>,
    finished: watch::Receiver<u64>,
}

impl Freshness {
    /// Asks for a feed read and waits (at most `within`) until one that started after this
    /// call has finished, successfully or not. `false` when none finished in time.
    pub async fn refresh(&self, within: Duration) -> bool {
        let before = self.started.load(Ordering::SeqCst);
        let mut finished = self.finished.clone();
        self.asked.notify_one();
        let done = async { finished.wait_for(|&n| n > before).await.is_ok() };
        tokio::time::timeout(within, done).await.unwrap_or(false)
    }
}

impl Follower {
    /// Loads everything once (start-up), returning a follower positioned after that load.
    pub async fn bootstrap(
        store: &dyn Store,
        mut catalog_loader: catalog::Loader,
        catalog_refresh: Duration,
    ) -> StoreResult<Self> {
        // Read the cursor first: a change made during the load is then replayed, never lost.
        let cursor = store.latest_change().await?;
        let all_keys = store.all_keys().await?;
        let accounts = Arc::new(Accounts::default());
        load_accounts(store, &accounts, &all_keys).await?;
        let keys = Arc::new(KeyCache::default());
        keys.replace_all(all_keys);
        let snapshot = catalog_loader.load(store).await?;
        Ok(Follower {
            keys,
            accounts,
            catalog: Arc::new(Catalog::new(snapshot)),
            catalog_loader,
            catalog_refresh,
            store_reachable: Arc::new(AtomicBool::new(true)),
            feed: FeedPosition::new(cursor, Instant::now()),
            steps: Steps {
                asked: Arc::new(Notify::new()),
                started: Arc::new(AtomicU64::new(0)),
                finished: watch::channel(0).0,
            },
        })
    }

    /// The handle the proxy asks for fresh reads with.
    pub fn freshness(&self) -> Freshness {
        Freshness {
            asked: self.steps.asked.clone(),
            started: self.steps.started.clone(),
            finished: self.steps.finished.subscribe(),
        }
    }

    /// Follows the feed through `store` until `shutdown` resolves.
    pub async fn run(
        mut self,
        store: Arc<dyn Store>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut next_catalog = Instant::now() + self.catalog_refresh;
        let mut next_full = Instant::now() + FULL_RELOAD;
        let mut backoff = Duration::from_millis(100);
        // After losing touch with the store, resync everything: the feed may have been pruned.
        let mut resync = false;
        loop {
            let wait = MAX_WAIT.min(next_catalog.saturating_duration_since(Instant::now()));
            tokio::select! {
                _ = &mut shutdown => return,
                _ = store.wait_for_change(wait) => {}
                _ = self.steps.asked.notified() => {}
            }
            let due = Instant::now() >= next_catalog;
            let full = resync || Instant::now() >= next_full;
            let step = self.steps.started.fetch_add(1, Ordering::SeqCst) + 1;
            let result = self.step(store.as_ref(), due || resync, full).await;
            self.steps.finished.send_replace(step);
            self.store_reachable
                .store(result.is_ok(), Ordering::Relaxed);
            match result {
                Ok(reloaded_catalog) => {
                    resync = false;
                    backoff = Duration::from_millis(100);
                    if reloaded_catalog {
                        next_catalog = Instant::now() + self.catalog_refresh;
                    }
                    if Instant::now() >= next_full {
                        next_full = Instant::now() + FULL_RELOAD;
                    }
                }
                Err(e) => {
                    resync = true;
                    tracing::warn!("store unreachable, serving from memory: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = next_backoff(backoff);
                }
            }
        }
    }

    /// Applies pending changes; returns whether the catalog was rebuilt.
    async fn step(
        &mut self,
        store: &dyn Store,
        catalog_due: bool,
        full_keys: bool,
    ) -> StoreResult<bool> {
        let mut feed = self.feed.clone();
        let changes = store.changes_since(feed.read_after()).await?;
        let now = Instant::now();
        let mut catalog_dirty = catalog_due;
        let (mut keys, mut balances, mut spends) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for change in &changes {
            if !feed.admit(change.seq, now) {
                continue;
            }
            match change.kind {
                ChangeKind::Key => {
                    keys.insert(change.ref_id.clone());
                }
                ChangeKind::Catalog => catalog_dirty = true,
                ChangeKind::Balance => {
                    balances.insert(change.ref_id.clone());
                }
                ChangeKind::Spend => {
                    spends.insert(change.ref_id.clone());
                }
                ChangeKind::Workspace => {}
            }
        }
        for workspace in &balances {
            // Each read and its setting within a turn: never between a batch's commit and its
            // settling (see `billing::gates`), and the writer waits for one read at most.
            let _turn = self.accounts.sync_turn().await;
            self.accounts
                .set_balance_row(workspace, store.balance_row(workspace).await?);
        }
        load_spends(
            store,
            &self.accounts,
            &spends.into_iter().collect::<Vec<_>>(),
        )
        .await?;
        // Keys last: a new key becomes usable only once its workspace's credit is known.
        for id in &keys {
            if let Some(key) = store.get_key(id).await? {
                self.keys.upsert(key);
            }
        }
        feed.expire(now);
        self.feed = feed;
        tracing::debug!(
            changes = changes.len(),
            cursor = self.feed.cursor,
            catalog_dirty,
            "change feed step"
        );
        if full_keys {
            let keys = store.all_keys().await?;
            load_accounts(store, &self.accounts, &keys).await?;
            self.keys.replace_all(keys);
        }
        if catalog_dirty {
            let snapshot = self.catalog_loader.load(store).await?;
            self.catalog.publish(snapshot);
        }
        Ok(catalog_dirty)
    }
}

/// The wait before the follower tries an unreachable store again: doubling from 100 ms, but
/// never past the feed's own delay (`MAX_WAIT`). A longer wait would be paid once the store is
/// back: a key revoked then would still be served until the next try.
fn next_backoff(backoff: Duration) -> Duration {
    (backoff * 2).min(MAX_WAIT)
}

/// Every balance, and the current window's spend of every limited key among `keys`. Each
/// read of values is made and applied within the gates' sync turn (see `billing::gates`).
async fn load_accounts(
    store: &dyn Store,
    accounts: &Accounts,
    keys: &[crate::store::ApiKey],
) -> StoreResult<()> {
    {
        let _turn = accounts.sync_turn().await;
        for (workspace, row) in store.balance_rows().await? {
            accounts.set_balance_row(&workspace, row);
        }
    }
    let limited: Vec<String> = keys
        .iter()
        .filter(|k| k.spend_limit.is_some())
        .map(|k| k.id.clone())
        .collect();
    load_spends(store, accounts, &limited).await
}

/// The current window's spend of each of `key_ids` that has a spend limit, into `accounts`.
async fn load_spends(
    store: &dyn Store,
    accounts: &Accounts,
    key_ids: &[String],
) -> StoreResult<()> {
    let now = chrono::Utc::now();
    let mut wanted = Vec::new();
    for id in key_ids {
        if let Some(reset) = store.get_key(id).await?.and_then(|k| k.limit_reset) {
            wanted.push((id.clone(), window_start(reset, now)));
        }
    }
    if wanted.is_empty() {
        return Ok(());
    }
    // The keys' windows are read before the turn: only the spends must not land between a
    // batch's commit and its settling.
    let _turn = accounts.sync_turn().await;
    for ((id, window), (_, spent)) in wanted.iter().zip(store.key_spends(&wanted).await?) {
        accounts.set_spend(id, *window, spent);
    }
    Ok(())
}

/// Where a follower is in the change feed: the highest `seq` applied, and the lower ones it
/// skipped and still waits for (with when it noticed each), so a read re-reads from the oldest
/// of those only, instead of a fixed window behind the cursor on every read.
#[derive(Clone)]
struct FeedPosition {
    cursor: i64,
    gaps: BTreeMap<i64, Instant>,
}

impl FeedPosition {
    /// After a load that read the feed up to `cursor`: the `START_WINDOW` changes up to it are
    /// awaited too, since one still uncommitted when the cursor was read (with a lower `seq`
    /// than a committed one) is in no load. Those already loaded are applied again, harmlessly.
    fn new(cursor: i64, now: Instant) -> Self {
        let from = cursor.saturating_sub(START_WINDOW).max(0);
        Self {
            cursor,
            gaps: (from.saturating_add(1)..=cursor)
                .map(|s| (s, now))
                .collect(),
        }
    }

    /// The `seq` the next read starts after.
    fn read_after(&self) -> i64 {
        self.gaps
            .first_key_value()
            .map_or(self.cursor, |(&gap, _)| gap.saturating_sub(1))
    }

    /// Takes a change read at `now` (reads come in `seq` order): whether it is new, so to be
    /// applied. The `seq`s it jumps over become gaps.
    fn admit(&mut self, seq: i64, now: Instant) -> bool {
        if seq <= self.cursor {
            return self.gaps.remove(&seq).is_some();
        }
        let skipped = self.cursor.saturating_add(1)..seq;
        let room = MAX_GAPS.saturating_sub(self.gaps.len());
        if usize::try_from(seq.saturating_sub(self.cursor)).is_ok_and(|jump| jump <= room) {
            self.gaps.extend(skipped.map(|gap| (gap, now)));
        }
        self.cursor = seq;
        true
    }

    /// Stops waiting for the gaps noticed `GAP_WAIT` or longer before `now`.
    fn expire(&mut self, now: Instant) {
        self.gaps
            .retain(|_, noticed| now.saturating_duration_since(*noticed) < GAP_WAIT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::usd;
    use crate::store::sqlite::SqliteStore;
    use crate::store::{CreditMovement, LedgerKind};

    /// A change-feed read made between a batch's commit and its settling holds the batch's
    /// charges while they are still pending: applied then, they counted twice, and a request
    /// seeing the last of a workspace's credit got a false 402.
    #[tokio::test]
    async fn a_feed_read_waits_for_the_writer_to_settle_what_it_committed() {
        let store = SqliteStore::open(":memory:").unwrap();
        store.migrate().await.unwrap();
        store.create_workspace("ws_1", "one", None).await.unwrap();
        store
            .add_credit("credit_1", "ws_1", usd(10), None, None)
            .await
            .unwrap();
        let loader = catalog::Loader::new(
            Default::default(),
            catalog::Served::every_kind(),
            catalog::Healths::new(Default::default()),
        );
        let mut follower = Follower::bootstrap(&store, loader, Duration::from_secs(60))
            .await
            .unwrap();
        let accounts = follower.accounts.clone();
        accounts.charge("ws_1", None, usd(1)); // a request's cost, pending
        assert_eq!(accounts.balance("ws_1"), usd(9));
        // The writer's turn: its batch commits (a refund stands for the debit here).
        let turn = accounts.sync_turn().await;
        let debit = CreditMovement {
            entry_id: "debit_1".into(),
            workspace_id: "ws_1".into(),
            kind: LedgerKind::Refund,
            amount: usd(1),
            note: Some("stands for a usage debit".into()),
        };
        store.move_credit(&debit, None, None).await.unwrap();
        // The feed is read meanwhile; it must wait for the writer's turn to end.
        let mut step = Box::pin(follower.step(&store, false, false));
        let early = tokio::time::timeout(Duration::from_millis(200), &mut step).await;
        assert_eq!(accounts.balance("ws_1"), usd(9), "never counted twice");
        let read = store.balance_row("ws_1").await.unwrap();
        accounts.settle_balance("ws_1", Some(read), usd(1));
        drop(turn);
        match early {
            Ok(done) => done.map(drop).unwrap(),
            Err(_) => step.await.map(drop).unwrap(),
        }
        assert_eq!(accounts.balance("ws_1"), usd(9));
    }

    #[test]
    fn a_skipped_seq_is_read_again_until_it_appears_then_applied_once() {
        let t0 = Instant::now();
        let mut feed = FeedPosition::new(10, t0);
        feed.expire(t0 + GAP_WAIT);
        assert_eq!(feed.read_after(), 10, "nothing skipped: only what is new");
        // 11 is still in flight when 12 and 13 commit.
        assert!(feed.admit(12, t0) && feed.admit(13, t0));
        assert_eq!(feed.read_after(), 10, "the next read starts below 11");
        // That read sees 12 and 13 again, and now 11.
        assert!(feed.admit(11, t0), "11 applied when it appears");
        assert!(!feed.admit(12, t0) && !feed.admit(13, t0), "never twice");
        assert_eq!(feed.read_after(), 13, "back to reading only what is new");
        assert!(
            !feed.admit(11, t0),
            "a change read again is not applied again"
        );
    }

    #[test]
    fn a_fresh_follower_reads_again_below_the_cursor_its_load_read() {
        let t0 = Instant::now();
        let mut feed = FeedPosition::new(1000, t0);
        assert_eq!(
            feed.read_after(),
            1000 - START_WINDOW,
            "a change committed late is read"
        );
        assert!(feed.admit(990, t0), "applied (again, if the load had it)");
        assert!(!feed.admit(990, t0), "once");
        feed.expire(t0 + GAP_WAIT);
        assert_eq!(feed.read_after(), 1000);
        assert_eq!(
            FeedPosition::new(3, t0).read_after(),
            0,
            "not below the feed's start"
        );
    }

    #[test]
    fn a_gap_that_never_fills_is_given_up_after_the_wait() {
        let t0 = Instant::now();
        let mut feed = FeedPosition::new(0, t0);
        assert!(feed.admit(2, t0));
        feed.expire(t0 + GAP_WAIT / 2);
        assert_eq!(feed.read_after(), 0, "1 still awaited");
        feed.expire(t0 + GAP_WAIT);
        assert_eq!(
            feed.read_after(),
            2,
            "1 given up (a rolled-back transaction's)"
        );
    }

    #[test]
    fn a_jump_past_the_gap_limit_waits_for_nothing() {
        let t0 = Instant::now();
        let mut feed = FeedPosition::new(0, t0);
        let far = i64::try_from(MAX_GAPS).unwrap() + 10;
        assert!(feed.admit(far, t0));
        assert_eq!(feed.read_after(), far, "left to the full reload");
    }
}
