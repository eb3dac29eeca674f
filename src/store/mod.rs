//! Persistence behind one `Store` trait, with a PostgreSQL backend (production, shared by
//! several gateway replicas) and an embedded SQLite backend (zero-setup single node).
//!
//! This is the only room that speaks SQL. Schema lives in `sql/postgres/NNNN_name.sql` and
//! `sql/sqlite/NNNN_name.sql` (one file per dialect and version: their triggers cannot be
//! shared), applied in order and recorded in `schema_migrations`, so `migrate()` is
//! idempotent. Both backends pass the same suite (`tests/it/store.rs`).
//!
//! Files: this one holds the trait and its errors; `records` the records (re-exported here);
//! `open` picks the backend a URL names. The backends, `postgres` and `sqlite`, differ only in
//! their SQL and in how a value is bound and read; all else they share, in files that import
//! one another one way (`tests/it/architecture.rs`): `sql` (column lists and statements built
//! from them), `params` (what a write binds), `rows` (what a read maps back), `batch`
//! (`record_usage`'s preparation and totals), `codec` (value conversions), and `migrations`.
//!
//! Change feed: triggers append a row to `change_log` whenever a key, workspace, balance or
//! catalog row changes, and when usage records are inserted (`Spend`, ref: the key).
//! Replicas follow it with `changes_since` (PostgreSQL also NOTIFYs on channel
//! `tollgate_changes`, so `wait_for_change` wakes at once; SQLite polls), which is how a
//! revocation made by the CLI on one machine reaches every running gateway.
//!
//! Billing: `usage_records` (one per successful request) and `ledger_entries` (credits,
//! refunds, and one debit per usage record, `usage_id` UNIQUE) are append-only — the database
//! refuses UPDATE and DELETE. `balances` (each with its credited total) and `key_spend` are
//! derived caches of them, updated in the same transaction as the rows they summarise, and
//! `ledger_verify` recomputes the sums to check them. A credit or refund given an idempotency
//! key claims it in `idempotency_keys` in its own transaction, with the answer to repeat.
//! `record_usage` is idempotent by record id: a replayed or racing batch writes and debits each
//! id at most once. Money is `i64` pico-USD in BIGINT/INTEGER columns, never a
//! float; sums are computed exactly (NUMERIC in PostgreSQL, split halves in SQLite).
//!
//! Audit: every change the commands make is given an [`Audit`], which the backend turns into an
//! `audit_log` row inside the change's own transaction — the change and its entry commit
//! together or not at all. `audit_log` is append-only like the ledger.
//!
//! Console sessions: `console_sessions`, keyed by the SHA-256 of the session id (never the id),
//! so sessions outlive a process; deleted on sign-out and once ended (`admin::session`).
//!
//! Kept responses: `responses` holds the Responses door's answers for `previous_response_id`
//! (the `kept` room queues them off the request path and purges the expired ones). Unlike the
//! ledger they are deleted: by their owner, and once past `expires_at`.

mod batch;
mod codec;
pub mod migrations;
mod months;
mod open;
mod params;
pub mod postgres;
mod records;
mod rows;
mod sql;
pub mod sqlite;

pub use months::*;
pub use open::open;
pub use records::*;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::money::Usd;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unsupported store url {0:?} (expected sqlite://PATH or postgres://…)")]
    BadUrl(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("database: {0}")]
    Backend(String),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A sum would leave the exact range of its column (a balance past `i64` pico-USD).
    #[error("{0}")]
    Overflow(String),
    /// An idempotency key already used for another request (of the same workspace and
    /// operation) within the time it is kept.
    #[error(
        "Idempotency-Key {0:?} was already used for a different request: send the first \
         request's body again, or use a new key"
    )]
    IdempotencyKeyReused(String),
}

impl StoreError {
    /// Whether trying again later may succeed (an outage), rather than never (a refused row).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Backend(_) => true,
            Self::BadUrl(_)
            | Self::NotFound(_)
            | Self::Conflict(_)
            | Self::Corrupt(_)
            | Self::Overflow(_)
            | Self::IdempotencyKeyReused(_) => false,
        }
    }

    /// Why a rotation changed nothing, from the old key as the refusing transaction read it.
    pub(crate) fn rotation_refused(id: &str, current: Option<ApiKey>) -> Self {
        match current {
            None => Self::NotFound(format!("key {id}")),
            Some(ApiKey {
                replaced_by: Some(new),
                ..
            }) => Self::Conflict(format!(
                "key {id} was already rotated: its replacement is {new}; rotate the replacement \
                 instead"
            )),
            Some(_) => Self::Conflict(format!(
                "key {id} was revoked or expired while it was being rotated: only a working key is \
                 rotated"
            )),
        }
    }

    /// A credit refused because the balance, or the total credited, would pass the largest
    /// exact amount.
    pub(crate) fn balance_overflow(workspace_id: &str, amount: Usd) -> Self {
        Self::Overflow(format!(
            "crediting {amount} USD would take the balance (or the total credited) of workspace \
             {workspace_id} past the largest amount it can hold ({} USD)",
            Usd::from_pico(i64::MAX)
        ))
    }

    /// A refund refused because it is more than the balance (the credit not spent).
    pub(crate) fn refund_over_balance(workspace_id: &str, amount: Usd, balance: Usd) -> Self {
        Self::Conflict(format!(
            "a refund of {amount} USD is more than the balance of workspace {workspace_id} \
             ({balance} USD): only credit not spent is refunded"
        ))
    }

    /// A key insert refused as a duplicate: of its secret's hash, or of its id.
    pub(crate) fn duplicate_key(key: &ApiKey, on_secret_hash: bool) -> Self {
        if on_secret_hash {
            Self::Conflict("a key with this secret hash already exists".to_owned())
        } else {
            Self::Conflict(format!("key {} already exists", key.id))
        }
    }

    /// A workspace that does not exist.
    pub(crate) fn no_workspace(id: &str) -> Self {
        Self::NotFound(format!("workspace {id}"))
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Applies pending migrations from `sql/`; returns how many were applied now.
    async fn migrate(&self) -> StoreResult<usize>;

    async fn create_workspace(
        &self,
        id: &str,
        name: &str,
        audit: Option<Audit<Workspace>>,
    ) -> StoreResult<Workspace>;
    async fn list_workspaces(&self) -> StoreResult<Vec<Workspace>>;
    async fn get_workspace(&self, id: &str) -> StoreResult<Option<Workspace>>;

    /// Fails with `NotFound` when the workspace does not exist.
    async fn create_key(&self, key: NewKey, audit: Option<Audit<ApiKey>>) -> StoreResult<ApiKey>;
    async fn get_key(&self, id: &str) -> StoreResult<Option<ApiKey>>;
    async fn list_keys(&self, workspace_id: &str) -> StoreResult<Vec<ApiKey>>;
    /// Every key, revoked ones included: the gateway's key cache is built from this.
    async fn all_keys(&self) -> StoreResult<Vec<ApiKey>>;
    /// Marks a key revoked at `at`; `false` when it was already revoked (then nothing is
    /// audited). `NotFound` if absent. The audit sees the key as revoked.
    async fn revoke_key(
        &self,
        id: &str,
        at: DateTime<Utc>,
        audit: Option<Audit<ApiKey>>,
    ) -> StoreResult<bool>;
    /// Rotates a key in one transaction (see [`KeyRotation`]); returns the new key and the
    /// old one as it is now. Only a key not yet replaced, not revoked and not expired at
    /// `now` is rotated: the old row is changed by one conditional UPDATE, so of concurrent
    /// rotations of one key exactly one succeeds and the others fail with `Conflict`, changing
    /// nothing. `NotFound` when the old key is absent.
    async fn rotate_key(&self, rotation: &KeyRotation) -> StoreResult<(ApiKey, ApiKey)>;
    /// Writes a key's settings whole ([`KeyUpdate`]) and returns the key as it is now;
    /// `NotFound` when absent. A change of the key, so the change feed carries it (a new
    /// allowlist, a new limit) to every gateway.
    async fn update_key(
        &self,
        id: &str,
        update: &KeyUpdate,
        audit: Option<Audit<ApiKey>>,
    ) -> StoreResult<ApiKey>;

    // ---- Management keys (`admin::scope`): read by the admin API on each call made with
    // one, so they are not in the change feed.

    /// Stores a new management key (times at storage precision, as returned); `NotFound` when
    /// its workspace does not exist, `Conflict` when its id or secret hash does.
    async fn create_management_key(
        &self,
        key: &ManagementKey,
        audit: Option<Audit<ManagementKey>>,
    ) -> StoreResult<ManagementKey>;
    async fn management_key(&self, id: &str) -> StoreResult<Option<ManagementKey>>;
    /// The management key whose secret hashes to `secret_hash` (hex), revoked or not.
    async fn management_key_by_hash(&self, secret_hash: &str)
        -> StoreResult<Option<ManagementKey>>;
    /// A workspace's management keys, revoked ones included, newest first.
    async fn management_keys(&self, workspace_id: &str) -> StoreResult<Vec<ManagementKey>>;
    /// Marks a management key revoked at `at`; `false` when it was already revoked (then
    /// nothing is audited). `NotFound` if absent. The audit sees the key as revoked.
    async fn revoke_management_key(
        &self,
        id: &str,
        at: DateTime<Utc>,
        audit: Option<Audit<ManagementKey>>,
    ) -> StoreResult<bool>;

    /// Appends a credit (top-up) to the ledger and updates the balance row, atomically; a
    /// balance that would pass `i64` pico-USD is refused with `Overflow`, writing nothing.
    /// Returns the entry and the balance it left.
    async fn add_credit(
        &self,
        entry_id: &str,
        workspace_id: &str,
        amount: Usd,
        note: Option<&str>,
        audit: Option<Audit<(LedgerEntry, Usd)>>,
    ) -> StoreResult<(LedgerEntry, Usd)> {
        let movement = CreditMovement {
            entry_id: entry_id.to_owned(),
            workspace_id: workspace_id.to_owned(),
            kind: LedgerKind::Credit,
            amount,
            note: note.map(str::to_owned),
        };
        match self.move_credit(&movement, audit, None).await? {
            Done::Made(made) => Ok(made),
            Done::Replayed(_) => Err(StoreError::Corrupt(
                "a credit without a key replayed".into(),
            )),
        }
    }
    /// Appends a credit or a refund ([`CreditMovement`]) to the ledger and moves the balance
    /// row and its credited total, in one transaction with its audit entry; returns the entry
    /// and the balance it left. Refused, writing nothing: an amount not positive, a refund
    /// without a reason (`Conflict`); a refund more than the balance row (`Conflict`: only
    /// credit not spent is refunded); a credit taking the balance or the credited total past
    /// `i64` pico-USD (`Overflow`); an unknown workspace (`NotFound`).
    ///
    /// With `once`, the movement is made at most once per key: the key is claimed first in the
    /// same transaction (a concurrent claim of it waits for this one's commit), keys expired by
    /// `once.key.created_at` are deleted, and a key already held answers `Replayed` with the
    /// answer kept for it when its request hash is the same, `IdempotencyKeyReused` when not —
    /// writing nothing either way.
    async fn move_credit(
        &self,
        movement: &CreditMovement,
        audit: Option<Audit<(LedgerEntry, Usd)>>,
        once: Option<Once<(LedgerEntry, Usd)>>,
    ) -> StoreResult<Done<(LedgerEntry, Usd)>>;
    /// The workspace's balance (zero when it has no balance row).
    async fn balance(&self, workspace_id: &str) -> StoreResult<Usd> {
        Ok(self.balance_row(workspace_id).await?.balance)
    }
    /// The workspace's balance row, read in one statement (zeros when it has none).
    async fn balance_row(&self, workspace_id: &str) -> StoreResult<BalanceRow>;
    async fn ledger(&self, workspace_id: &str) -> StoreResult<Vec<LedgerEntry>>;

    /// Writes a batch of usage records in ONE transaction (group commit). For each record
    /// whose id is not yet stored: inserts it, appends its ledger debit (`-cost`, `usage_id`
    /// = the record id, dated `finished_at`), subtracts the cost from the workspace's balance
    /// row (created if missing; it may go negative) and, when `spend_window_start` is set,
    /// adds it to the key's spend in that window. Records already stored — replays, or a
    /// repeated id within the batch (the first occurrence wins) — are skipped, so each id is
    /// written and debited at most once, even with several writers racing. Returns how many
    /// records were newly applied. Any invalid record fails the whole batch, changing nothing.
    async fn record_usage(&self, batch: &[UsageRecord]) -> StoreResult<u64>;
    /// The workspace's usage records finished at or after `since` (all when `None`), oldest
    /// first.
    async fn usage(
        &self,
        workspace_id: &str,
        since: Option<DateTime<Utc>>,
    ) -> StoreResult<Vec<UsageRecord>>;
    /// The workspace's usage record `id` (a completion id), if it has one.
    async fn usage_record(&self, workspace_id: &str, id: &str) -> StoreResult<Option<UsageRecord>>;
    /// The workspace's usage record `id` if it finished in `from..to`: on PostgreSQL the
    /// lookup then probes only the month partitions of that range (`/v1/generation` bounds it
    /// by the time its id encodes).
    async fn usage_record_within(
        &self,
        workspace_id: &str,
        id: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> StoreResult<Option<UsageRecord>>;
    /// Every balance, by workspace id.
    async fn balances(&self) -> StoreResult<Vec<(String, Usd)>> {
        let rows = self.balance_rows().await?;
        Ok(rows
            .into_iter()
            .map(|(ws, row)| (ws, row.balance))
            .collect())
    }
    /// Every balance row, by workspace id: what the in-memory credit gate starts from.
    async fn balance_rows(&self) -> StoreResult<Vec<(String, BalanceRow)>>;
    /// The spend of each (key id, window start), in the order asked; zero when absent.
    async fn key_spends(
        &self,
        since_window_starts: &[(String, DateTime<Utc>)],
    ) -> StoreResult<Vec<(String, Usd)>>;
    /// Every workspace's balance row against the sums of its ledger and usage records, by
    /// workspace id, computed exactly by the database in one snapshot.
    async fn ledger_verify(&self) -> StoreResult<Vec<LedgerCheck>>;

    // ---- Monthly partitions, archive and restore (issue 33). On PostgreSQL `usage_records`
    // is partitioned by month; SQLite keeps one table (no partitions, no default partition).

    /// PostgreSQL: creates the partitions of `at`'s month and of the `ahead` months after it
    /// that are missing; how many it created. SQLite: 0.
    async fn ensure_usage_partitions(&self, at: DateTime<Utc>, ahead: u32) -> StoreResult<u32>;
    /// How many records the default partition holds (PostgreSQL; 0 on SQLite). It is a safety
    /// net that must stay empty: a row there is a month without its partition.
    async fn default_partition_records(&self) -> StoreResult<u64>;
    /// The months before `before` that hold usage records, oldest first.
    async fn usage_months(&self, before: UsageMonth) -> StoreResult<Vec<UsageMonth>>;
    /// Up to `limit` records of `month` (every workspace's) with ids after `after_id`, in id
    /// order: an archive reads a month in such pages, each one range of the id index.
    async fn month_usage_page(
        &self,
        month: UsageMonth,
        after_id: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>>;
    /// Archives `month`, in one transaction: checks that its records still add up to
    /// `totals` (the archive file's, verified) — `Conflict` otherwise, changing nothing —,
    /// writes them to `archived_totals`, and drops the month's records (PostgreSQL detaches
    /// and drops its partition; SQLite deletes the rows, its append-only trigger lifted inside
    /// the transaction only).
    async fn archive_usage_month(
        &self,
        archived: &ArchivedMonth,
        at: DateTime<Utc>,
        audit: Option<Audit<ArchivedMonth>>,
    ) -> StoreResult<()>;
    /// Loads an archived month's records back, in one transaction: their per-workspace totals
    /// must equal the month's `archived_totals` rows (`Conflict` otherwise: not archived,
    /// restored already, or another file), which it deletes, so `ledger verify` counts the
    /// month once. Debits, balances, spend and rollups are untouched (they never left).
    async fn restore_usage_month(
        &self,
        month: UsageMonth,
        records: &[UsageRecord],
        audit: Option<Audit<ArchivedMonth>>,
    ) -> StoreResult<u64>;
    /// Every archived month's carried-forward totals, oldest first.
    async fn archived_months(&self) -> StoreResult<Vec<ArchivedMonth>>;

    async fn load_catalog(&self) -> StoreResult<CatalogRows>;
    /// Upserts profiles (by name) and models (by id) and replaces the routes of every model
    /// named in `rows`.
    async fn import_catalog(
        &self,
        rows: &CatalogRows,
        audit: Option<Audit<CatalogRows>>,
    ) -> StoreResult<()>;
    async fn catalog_is_empty(&self) -> StoreResult<bool>;

    // ---- The admin API's pages and changes (issue 13). Pages are newest first; `after` is
    // the previous page's last row; `limit` rows at most. A change given an [`Audit`] commits
    // with its audit entry in one transaction, or not at all.

    /// Renames a workspace; `NotFound` when absent.
    async fn rename_workspace(
        &self,
        id: &str,
        name: &str,
        audit: Option<Audit<Workspace>>,
    ) -> StoreResult<Workspace>;
    /// Workspaces by (created_at, id) descending.
    async fn workspaces_page(
        &self,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<Workspace>>;
    /// A workspace's keys by (created_at, id) descending.
    async fn keys_page(
        &self,
        workspace_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<ApiKey>>;
    /// Sets a key's `expires_at` (rotation's grace period); `NotFound` when absent.
    async fn set_key_expiry(&self, id: &str, expires_at: DateTime<Utc>) -> StoreResult<()>;
    /// A workspace's ledger entries by (created_at, id) descending.
    async fn ledger_page(
        &self,
        workspace_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<LedgerEntry>>;
    /// A workspace's usage records matching `filter`, by (finished_at, id) descending.
    async fn usage_page(
        &self,
        workspace_id: &str,
        filter: &UsageFilter,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>>;
    /// The daily rollup of a workspace's usage for the UTC days `from..=to`, by day then model.
    async fn usage_daily(
        &self,
        workspace_id: &str,
        from: chrono::NaiveDate,
        to: chrono::NaiveDate,
    ) -> StoreResult<Vec<DailyUsage>>;

    /// The audit log (one workspace's entries, or all), by (at, id) descending.
    async fn audit_page(
        &self,
        workspace_id: Option<&str>,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<AuditEntry>>;

    /// Creates or replaces a workspace's alert settings; `NotFound` when it does not exist.
    async fn put_alerts(
        &self,
        settings: &AlertSettings,
        audit: Option<Audit<AlertSettings>>,
    ) -> StoreResult<()>;
    async fn get_alerts(&self, workspace_id: &str) -> StoreResult<Option<AlertSettings>>;
    async fn all_alerts(&self) -> StoreResult<Vec<AlertSettings>>;
    /// Claims the firing of alert `alert_key` of a workspace: `true` for the first claim only
    /// (replicas race on it; the database decides).
    async fn claim_alert(
        &self,
        workspace_id: &str,
        alert_key: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<bool>;
    /// Drops a claim so the alert can fire again (a balance back above its threshold);
    /// `true` when there was one.
    async fn release_alert(&self, workspace_id: &str, alert_key: &str) -> StoreResult<bool>;
    async fn record_delivery(&self, delivery: &Delivery) -> StoreResult<()>;
    /// A workspace's webhook deliveries by (at, id) descending.
    async fn deliveries_page(
        &self,
        workspace_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<Delivery>>;

    // ---- Console sessions (`admin::session`): found by the SHA-256 of their id.

    /// Stores a new session (a sign-in, audited with it).
    async fn create_session(
        &self,
        session: &ConsoleSession,
        audit: Option<Audit<ConsoleSession>>,
    ) -> StoreResult<()>;
    /// The live session whose id hashes to `id_hash`, its `last_seen` moved to `now`; `None`
    /// when there is none, or it was last seen at or before `idle_since` or expires at or
    /// before `now` — then it is deleted.
    async fn touch_session(
        &self,
        id_hash: &str,
        now: DateTime<Utc>,
        idle_since: DateTime<Utc>,
    ) -> StoreResult<Option<ConsoleSession>>;
    /// Deletes a session (a sign-out); `false` when there was none.
    async fn delete_session(&self, id_hash: &str) -> StoreResult<bool>;
    /// Deletes the sessions ended by `now` (see `touch_session`) and, of the rest, all but the
    /// `keep` most recently seen; returns how many.
    async fn purge_sessions(
        &self,
        now: DateTime<Utc>,
        idle_since: DateTime<Utc>,
        keep: usize,
    ) -> StoreResult<u64>;

    // ---- The Responses door's kept answers (`previous_response_id`).

    /// Writes a batch of kept responses in ONE transaction. A response whose id is already
    /// stored — a replay, or a repeated id within the batch (the first occurrence wins) — is
    /// skipped. Returns how many were newly stored. A response the database refuses (its
    /// workspace or key unknown, a NUL character, an expiry not after its creation) fails the
    /// whole batch with a non-retryable error, writing nothing.
    async fn keep_responses(&self, batch: &[StoredResponse]) -> StoreResult<u64>;
    /// The response `id` of the workspace, unless it expired at or before `now`: another
    /// workspace's id and an expired one are both `None`.
    async fn stored_response(
        &self,
        workspace_id: &str,
        id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<StoredResponse>>;
    /// Deletes the workspace's response `id`; `false` when it had none by that id.
    async fn delete_response(&self, workspace_id: &str, id: &str) -> StoreResult<bool>;
    /// Deletes every response that expired at or before `before` (a few statements of
    /// `PURGE_CHUNK` rows each, so no one transaction holds the database long); returns how
    /// many.
    async fn purge_responses(&self, before: DateTime<Utc>) -> StoreResult<u64>;

    /// Change-feed rows with `seq > after`, oldest first.
    async fn changes_since(&self, after: i64) -> StoreResult<Vec<Change>>;
    /// Deletes change-feed rows older than `before`; returns how many. Followers resync fully
    /// after losing touch, so the feed only needs to cover the gaps between their steps.
    async fn prune_changes(&self, before: DateTime<Utc>) -> StoreResult<u64>;
    /// The newest change seq (0 when none): where a fresh follower starts.
    async fn latest_change(&self) -> StoreResult<i64>;
    /// Returns when a change may have happened or after `max` at the latest.
    async fn wait_for_change(&self, max: Duration);
}
