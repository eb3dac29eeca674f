//! Kept responses: the Responses door's answers, kept so that a later request can continue one
//! with `previous_response_id`, and served to `GET` and `DELETE /v1/responses/{id}`.
//!
//! Nothing on the request path waits for a database write. [`ResponseKeeper::keep`] stamps the
//! answer's expiry (`created_at` + `tollgate.responses.retention`), puts it in a bounded queue
//! in memory and returns; the [`ResponseWriter`], a background service, commits the queue in
//! batches with `Store::keep_responses` (group commit, as the ledger writer does) and deletes
//! the expired rows every hour, and once at start.
//!
//! - **Read your writes.** [`ResponseKeeper::lookup`] reads the answers still waiting or being
//!   written before the store, and an answer leaves memory only once its batch committed: a
//!   client that continues a response the moment it completed finds it, written or not.
//! - **Bounded.** At most 4,096 answers or 128 MiB wait. When the queue is full the *oldest*
//!   waiting answer is dropped: a conversation continues from its newest answer, which holds
//!   every earlier turn. Drops are counted in `tollgate_responses_dropped_total{reason}` and
//!   logged (a warning at most every 10 s).
//! - **Outages.** A batch the database cannot take now waits again ahead of the queue and is
//!   tried after a pause (1 s, doubling to 30 s), still served from memory meanwhile; a long
//!   outage ends by dropping the oldest. A response the database refuses for good (its
//!   workspace unknown) is found by writing its batch one by one, and dropped.
//! - **Shutdown.** The writer commits through the grace period, then writes what waits once
//!   more; what still cannot be written, and any answer kept after that, is dropped.
//! - **Deleting** removes an unwritten answer from memory too; one being written is deleted from
//!   the store as soon as its write commits.
//! - **Retention `0`** keeps nothing: `keep` drops every answer (responses kept before still
//!   answer until they expire).
//!
//! Responses are per workspace: another workspace's id reads as absent, in memory as in the
//! store. A lookup needs the store only when the answer is not in memory; the keeper opens its
//! own on first use, on the runtime that serves lookups (connections belong to the runtime that
//! made them).

mod queue;
mod writer;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, SubsecRound, TimeDelta, Utc};
use tokio::sync::{Notify, OnceCell};

use crate::metrics::METRICS;
use crate::store::{self, Store, StoreError, StoredResponse};

use queue::{Limits, Pushed, Queue, Removed};
pub use writer::ResponseWriter;

/// What may wait for the writer.
const QUEUE: Limits = Limits {
    responses: 4_096,
    bytes: 128 << 20,
};
/// The most a drop warning repeats: drops in between are summed into the next one.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The gateway's handle on kept responses (one per process, shared by every request).
pub struct ResponseKeeper {
    /// `None`: keep nothing.
    retention: Option<TimeDelta>,
    queue: Mutex<Queue>,
    /// Poked by `keep`: the writer waits on it while the queue is empty.
    wake: Notify,
    reads: Reads,
    warned: Mutex<DropWarning>,
}

/// Where lookups and deletes read the store.
enum Reads {
    /// Opened from `url` on first use.
    Url {
        url: String,
        store: OnceCell<Arc<dyn Store>>,
    },
    Store(Arc<dyn Store>),
}

/// Drops not yet told in a warning, and when the last one was.
#[derive(Default)]
struct DropWarning {
    untold: u64,
    last: Option<Instant>,
}

impl ResponseKeeper {
    /// A keeper kept for `retention` (zero: nothing is kept), whose lookups open the store at
    /// `store_url` when they first need it, and its writer (run as a background service, with
    /// a store of its own).
    pub fn new(retention: Duration, store_url: String) -> (Arc<Self>, ResponseWriter) {
        Self::with_reads(
            retention,
            Reads::Url {
                url: store_url,
                store: OnceCell::new(),
            },
        )
    }

    /// A keeper whose lookups read `store`, and its writer: for a single runtime (tests).
    pub fn over(retention: Duration, store: Arc<dyn Store>) -> (Arc<Self>, ResponseWriter) {
        Self::with_reads(retention, Reads::Store(store))
    }

    fn with_reads(retention: Duration, reads: Reads) -> (Arc<Self>, ResponseWriter) {
        let retention = TimeDelta::from_std(retention)
            .unwrap_or(TimeDelta::MAX)
            .max(TimeDelta::zero());
        let keeper = Arc::new(ResponseKeeper {
            retention: (!retention.is_zero()).then_some(retention),
            queue: Mutex::new(Queue::new(QUEUE)),
            wake: Notify::new(),
            reads,
            warned: Mutex::new(DropWarning::default()),
        });
        let writer = ResponseWriter::new(Arc::clone(&keeper));
        (keeper, writer)
    }

    /// Keeps `response` for the retention period: its `created_at` is taken at storage
    /// precision (microseconds) and its `expires_at` set from it, whatever it was. Never waits:
    /// the response is queued for the writer (or dropped, counted, when the queue cannot take
    /// it). A second response by an id still unwritten is ignored, as the store ignores it.
    pub fn keep(&self, mut response: StoredResponse) {
        let Some(retention) = self.retention else {
            return;
        };
        response.created_at = response.created_at.trunc_subsecs(6);
        response.expires_at = response
            .created_at
            .checked_add_signed(retention)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let pushed = self.queue().push(Arc::new(response));
        match pushed {
            Pushed::Queued { evicted } => {
                self.wake.notify_one();
                self.dropped("queue_full", evicted);
            }
            Pushed::Duplicate => {}
            Pushed::TooLarge => self.dropped("too_large", 1),
            Pushed::Closed => self.dropped("shutdown", 1),
        }
    }

    /// The workspace's response `id` unless it expired at or before `now`: first among the
    /// responses not yet written, then in the store. Another workspace's id is `None`.
    pub async fn lookup(
        &self,
        workspace_id: &str,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Arc<StoredResponse>>, StoreError> {
        // A statement of its own: the lock is released before any await.
        let unwritten = self.queue().get(id);
        if let Some(r) = unwritten {
            // Ids are the gateway's own and unique: the store holds no other by this id.
            return Ok((r.workspace_id == workspace_id && r.expires_at > now).then_some(r));
        }
        let store = self.store().await?;
        Ok(store
            .stored_response(workspace_id, id, now)
            .await?
            .map(Arc::new))
    }

    /// Deletes the workspace's response `id`, written or not; `false` when it has none by that
    /// id. A response being written is deleted from the store once its write commits.
    pub async fn delete(&self, workspace_id: &str, id: &str) -> Result<bool, StoreError> {
        let removed = self.queue().remove(workspace_id, id);
        if removed == Removed::Waiting {
            // Never written: the store has nothing by this id.
            return Ok(true);
        }
        let stored = self
            .store()
            .await?
            .delete_response(workspace_id, id)
            .await?;
        Ok(stored || removed == Removed::InFlight)
    }

    /// Responses waiting for the writer.
    pub fn waiting(&self) -> usize {
        self.queue().waiting()
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while holding it; the queue stays consistent regardless.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn store(&self) -> Result<&Arc<dyn Store>, StoreError> {
        match &self.reads {
            Reads::Store(store) => Ok(store),
            Reads::Url { url, store } => store.get_or_try_init(|| store::open(url)).await,
        }
    }

    /// Counts `n` responses dropped for `reason` and warns, at most every `WARN_EVERY`.
    fn dropped(&self, reason: &'static str, n: u64) {
        if n == 0 {
            return;
        }
        METRICS.responses_dropped(reason, n);
        let mut w = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        w.untold = w.untold.saturating_add(n);
        if w.last.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return;
        }
        w.last = Some(Instant::now());
        let dropped = std::mem::take(&mut w.untold);
        tracing::warn!(
            dropped,
            reason,
            "kept responses dropped before they were written: previous_response_id cannot \
             continue them"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;
    use crate::store::NewKey;

    const DAY: Duration = Duration::from_secs(86_400);

    /// A migrated in-memory store holding workspaces `w` (key `k`) and `other`.
    async fn store() -> Arc<dyn Store> {
        let store = SqliteStore::open(":memory:").unwrap();
        store.migrate().await.unwrap();
        for ws in ["w", "other"] {
            store.create_workspace(ws, ws, None).await.unwrap();
        }
        store
            .create_key(
                NewKey {
                    id: "k".into(),
                    workspace_id: "w".into(),
                    name: None,
                    secret_hash: "h".into(),
                    hint: "sk-…".into(),
                    expires_at: None,
                    spend_limit: None,
                    limit_reset: None,
                    allowed_models: Vec::new(),
                },
                None,
            )
            .await
            .unwrap();
        Arc::new(store)
    }

    fn response(id: &str, workspace: &str) -> StoredResponse {
        StoredResponse {
            id: id.into(),
            workspace_id: workspace.into(),
            key_id: (workspace == "w").then(|| "k".into()),
            model: "google/gemini-2.5-flash".into(),
            // Far in the future: the writer's purge at start (at the real now) leaves it.
            created_at: DateTime::from_timestamp(4_000_000_000, 123_456_789).unwrap(),
            expires_at: DateTime::<Utc>::MIN_UTC,
            items: format!(r#"[{{"role":"user","content":"{id}"}}]"#),
            response: format!(r#"{{"id":"{id}","object":"response"}}"#),
        }
    }

    /// Runs the writer until what waits is written: shutdown at once, no linger.
    async fn flush(writer: ResponseWriter, store: &Arc<dyn Store>) {
        writer
            .run(Arc::clone(store), std::future::ready(()), Duration::ZERO)
            .await;
    }

    #[tokio::test]
    async fn a_kept_response_is_read_back_before_and_after_its_write() {
        let store = store().await;
        let (keeper, writer) = ResponseKeeper::over(30 * DAY, Arc::clone(&store));
        keeper.keep(response("resp_1", "w"));
        let created = DateTime::from_timestamp(4_000_000_000, 123_456_000).unwrap();
        let expires = created + TimeDelta::days(30);
        let now = created;

        // Not written yet: the store has nothing, the keeper answers from memory.
        assert_eq!(keeper.waiting(), 1);
        assert_eq!(
            store.stored_response("w", "resp_1", now).await.unwrap(),
            None
        );
        let found = keeper.lookup("w", "resp_1", now).await.unwrap().unwrap();
        assert_eq!((found.created_at, found.expires_at), (created, expires));
        assert_eq!(keeper.lookup("other", "resp_1", now).await.unwrap(), None);
        assert_eq!(keeper.lookup("w", "resp_1", expires).await.unwrap(), None);
        assert_eq!(keeper.lookup("w", "resp_2", now).await.unwrap(), None);

        flush(writer, &store).await;
        assert_eq!(keeper.waiting(), 0);
        let stored = store.stored_response("w", "resp_1", now).await.unwrap();
        assert_eq!(
            stored.as_ref(),
            Some(found.as_ref()),
            "the store holds what memory held"
        );
        let again = keeper.lookup("w", "resp_1", now).await.unwrap().unwrap();
        assert_eq!(again, found);
        assert_eq!(keeper.lookup("other", "resp_1", now).await.unwrap(), None);
        // Kept after the writer's last write: dropped.
        keeper.keep(response("resp_late", "w"));
        assert_eq!(keeper.lookup("w", "resp_late", now).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_response_the_database_refuses_does_not_keep_its_batch_out() {
        let store = store().await;
        let (keeper, writer) = ResponseKeeper::over(DAY, Arc::clone(&store));
        for (id, ws) in [("resp_a", "w"), ("resp_b", "nobody"), ("resp_c", "other")] {
            keeper.keep(response(id, ws));
        }
        flush(writer, &store).await;
        let now = response("x", "w").created_at;
        assert!(store
            .stored_response("w", "resp_a", now)
            .await
            .unwrap()
            .is_some());
        assert!(store
            .stored_response("other", "resp_c", now)
            .await
            .unwrap()
            .is_some());
        assert_eq!(
            keeper.lookup("nobody", "resp_b", now).await.unwrap(),
            None,
            "dropped"
        );
        assert_eq!(keeper.waiting(), 0);
    }

    #[tokio::test]
    async fn deleting_reaches_the_queue_and_the_store() {
        let store = store().await;
        let (keeper, writer) = ResponseKeeper::over(DAY, Arc::clone(&store));
        let now = response("x", "w").created_at;
        keeper.keep(response("resp_queued", "w"));
        keeper.keep(response("resp_written", "w"));
        assert!(!keeper.delete("other", "resp_queued").await.unwrap());
        assert!(keeper.delete("w", "resp_queued").await.unwrap());
        assert_eq!(keeper.lookup("w", "resp_queued", now).await.unwrap(), None);
        flush(writer, &store).await;
        assert_eq!(
            store
                .stored_response("w", "resp_queued", now)
                .await
                .unwrap(),
            None,
            "never written"
        );
        assert!(store
            .stored_response("w", "resp_written", now)
            .await
            .unwrap()
            .is_some());
        assert!(!keeper.delete("other", "resp_written").await.unwrap());
        assert!(keeper.delete("w", "resp_written").await.unwrap());
        assert!(!keeper.delete("w", "resp_written").await.unwrap(), "once");
        assert_eq!(keeper.lookup("w", "resp_written", now).await.unwrap(), None);
    }

    #[tokio::test]
    async fn the_writer_purges_what_expired_when_it_starts() {
        let store = store().await;
        let mut old = response("resp_old", "w");
        old.expires_at = Utc::now() - TimeDelta::seconds(1);
        old.created_at = old.expires_at - TimeDelta::days(1);
        let mut live = response("resp_live", "w");
        live.created_at = Utc::now();
        live.expires_at = live.created_at + TimeDelta::days(1);
        assert_eq!(
            store
                .keep_responses(&[old.clone(), live.clone()])
                .await
                .unwrap(),
            2
        );
        let (_keeper, writer) = ResponseKeeper::over(DAY, Arc::clone(&store));
        flush(writer, &store).await;
        let before_expiry = old.created_at;
        assert_eq!(
            store
                .stored_response("w", "resp_old", before_expiry)
                .await
                .unwrap(),
            None
        );
        assert!(store
            .stored_response("w", "resp_live", live.created_at)
            .await
            .unwrap()
            .is_some());
    }

    /// The request path awaits `lookup` and `delete` inside futures that must be `Send`.
    #[tokio::test]
    async fn lookups_and_deletes_can_be_awaited_anywhere() {
        fn send<T: Send>(_: T) {}
        let (keeper, _) = ResponseKeeper::over(DAY, store().await);
        send(keeper.lookup("w", "resp_1", Utc::now()));
        send(keeper.delete("w", "resp_1"));
    }

    #[tokio::test]
    async fn a_zero_retention_keeps_nothing() {
        let store = store().await;
        let (keeper, writer) = ResponseKeeper::over(Duration::ZERO, Arc::clone(&store));
        keeper.keep(response("resp_1", "w"));
        assert_eq!(keeper.waiting(), 0);
        let now = response("x", "w").created_at;
        assert_eq!(keeper.lookup("w", "resp_1", now).await.unwrap(), None);
        flush(writer, &store).await;
        assert_eq!(
            store.stored_response("w", "resp_1", now).await.unwrap(),
            None
        );
    }
}
