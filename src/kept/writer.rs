//! The keeper's background half: the queue committed in batches, and the expired rows purged.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use super::queue::Limits;
use super::ResponseKeeper;
use crate::store::{Store, StoreError, StoredResponse};

/// One transaction at most: big enough to amortise a commit, small enough that a batch's
/// copy (the store takes owned rows) stays small.
const BATCH: Limits = Limits {
    responses: 256,
    bytes: 8 << 20,
};
/// While responses keep arriving, a batch gathers this long after the previous commit. An idle
/// writer commits a lone response at once, so another replica finds it soon.
const GATHER: Duration = Duration::from_millis(10);
/// The pause after a failed write, doubled after each failure in a row up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
const PURGE_EVERY: Duration = Duration::from_secs(3600);

/// Writes what the keeper queues; run once, as a background service, with a store of its own.
pub struct ResponseWriter {
    keeper: Arc<ResponseKeeper>,
}

impl ResponseWriter {
    pub(super) fn new(keeper: Arc<ResponseKeeper>) -> Self {
        ResponseWriter { keeper }
    }

    /// Commits batches until `linger` after `shutdown` resolved, purging expired responses at
    /// once (a purge that always completes) and every hour meanwhile; then writes what waits
    /// once more and takes nothing after.
    pub async fn run(
        self,
        store: Arc<dyn Store>,
        shutdown: impl std::future::Future<Output = ()>,
        linger: Duration,
    ) {
        let store = store.as_ref();
        let writing = async {
            tokio::select! {
                () = self.write(store, shutdown, linger) => {}
                never = purge_hourly(store) => match never {},
            }
        };
        tokio::join!(purge(store), writing);
        self.last_write(store).await;
    }

    async fn write(
        &self,
        store: &dyn Store,
        shutdown: impl std::future::Future<Output = ()>,
        linger: Duration,
    ) {
        tokio::pin!(shutdown);
        let mut stop_at: Option<Instant> = None;
        // Before the next batch: gathering, or the pause after a failure.
        let mut pause = Duration::ZERO;
        let mut retry = RETRY_FIRST;
        loop {
            let stop = async {
                match stop_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let ready = async {
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                let idle = self.keeper.queue().is_empty();
                if idle {
                    self.keeper.wake.notified().await;
                }
            };
            tokio::select! {
                () = ready => {}
                () = &mut shutdown, if stop_at.is_none() => {
                    let now = Instant::now();
                    stop_at = Some(now.checked_add(linger).unwrap_or(now));
                    continue;
                }
                () = stop => return,
            }
            let batch = self.keeper.queue().take(BATCH);
            if batch.is_empty() {
                pause = Duration::ZERO;
                continue;
            }
            match self.commit(store, batch, true).await {
                Ok(()) => {
                    retry = RETRY_FIRST;
                    let busy = !self.keeper.queue().is_empty();
                    pause = if busy { GATHER } else { Duration::ZERO };
                }
                Err(e) => {
                    tracing::warn!(
                        waiting = self.keeper.waiting(),
                        retry_in = ?retry,
                        "kept responses not written yet (served from memory meanwhile): {e}"
                    );
                    pause = retry;
                    retry = retry.saturating_mul(2).min(RETRY_MAX);
                }
            }
        }
    }

    /// After the grace period: what waits is written once; on the first failure the rest is
    /// dropped (the runtimes stop soon, an outage would outlast them).
    async fn last_write(&self, store: &dyn Store) {
        self.keeper.queue().close();
        loop {
            let batch = self.keeper.queue().take(BATCH);
            if batch.is_empty() {
                return;
            }
            if let Err(e) = self.commit(store, batch, false).await {
                let dropped = self.keeper.queue().abandon();
                tracing::warn!("kept responses lost at shutdown, the store failed: {e}");
                self.keeper.dropped("shutdown", dropped);
                return;
            }
        }
    }

    /// Writes `batch`; a batch the database refuses is written one by one, dropping the
    /// responses refused for good. On an outage the responses not written wait again (`again`)
    /// or are dropped.
    async fn commit(
        &self,
        store: &dyn Store,
        batch: Vec<Arc<StoredResponse>>,
        again: bool,
    ) -> Result<(), StoreError> {
        let rows: Vec<StoredResponse> = batch.iter().map(|r| StoredResponse::clone(r)).collect();
        let e = match store.keep_responses(&rows).await {
            Ok(_) => {
                self.written(store, &batch).await;
                return Ok(());
            }
            Err(e) if e.is_retryable() => e,
            Err(_) => {
                let mut left = batch.into_iter().zip(rows);
                loop {
                    let Some((r, row)) = left.next() else {
                        return Ok(());
                    };
                    match store.keep_responses(std::slice::from_ref(&row)).await {
                        Ok(_) => self.written(store, std::slice::from_ref(&r)).await,
                        Err(e) if e.is_retryable() => {
                            let rest = std::iter::once(r).chain(left.map(|(r, _)| r));
                            return Err(self.not_written(rest.collect(), again, e));
                        }
                        Err(e) => {
                            tracing::error!(id = %r.id, "kept response refused by the database, dropped: {e}");
                            self.keeper.queue().refused(&r);
                            self.keeper.dropped("refused", 1);
                        }
                    }
                }
            }
        };
        Err(self.not_written(batch, again, e))
    }

    /// `batch` failed with `e`: it waits again (`again`) or is dropped; returns `e`.
    fn not_written(
        &self,
        batch: Vec<Arc<StoredResponse>>,
        again: bool,
        e: StoreError,
    ) -> StoreError {
        if again {
            let evicted = self.keeper.queue().retry(batch);
            self.keeper.dropped("queue_full", evicted);
        } else {
            let mut queue = self.keeper.queue();
            for r in &batch {
                queue.refused(r);
            }
            drop(queue);
            self.keeper.dropped("shutdown", batch.len() as u64);
        }
        e
    }

    /// `batch` is stored: it leaves memory, and those deleted meanwhile are deleted now.
    async fn written(&self, store: &dyn Store, batch: &[Arc<StoredResponse>]) {
        let deleted = self.keeper.queue().written(batch);
        for r in deleted {
            if let Err(e) = store.delete_response(&r.workspace_id, &r.id).await {
                tracing::warn!(id = %r.id, "a deleted response was written meanwhile and stays until it expires: {e}");
            }
        }
    }
}

/// Deletes the responses expired by now.
async fn purge(store: &dyn Store) {
    match store.purge_responses(chrono::Utc::now()).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(responses = n, "expired kept responses purged"),
        Err(e) => tracing::warn!("purging expired kept responses failed (again in an hour): {e}"),
    }
}

/// Purges every `PURGE_EVERY`, the first time `PURGE_EVERY` from now; never returns.
async fn purge_hourly(store: &dyn Store) -> Infallible {
    let start = Instant::now();
    let mut every =
        tokio::time::interval_at(start.checked_add(PURGE_EVERY).unwrap_or(start), PURGE_EVERY);
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        purge(store).await;
    }
}
