//! PostgreSQL backend: the production store, shared by every gateway replica.
//!
//! Queries go through a deadpool connection pool with per-connection cached prepared
//! statements. Besides the pool, each `PgStore` keeps one dedicated connection that
//! `LISTEN`s on `tollgate_changes` (the schema's triggers `NOTIFY` it for every change-log
//! row, at commit), so `wait_for_change` wakes as soon as any replica — or the CLI — commits a
//! change. That connection is re-established with backoff if it drops, and the task that
//! owns it ends when the `PgStore` is dropped.
//!
//! `record_usage` is built for several replicas writing at once: a batch is one transaction
//! of four array-parameter statements (records + debits, balances, window spend, daily
//! rollup), whatever its size, fed by the shared `batch` code; the last three are pipelined
//! (sent together, run in the order sent), so a batch costs four round trips with its
//! `BEGIN` and `COMMIT`. Idempotency rests on the
//! primary key of `usage_records` (`ON CONFLICT DO NOTHING`; a racing writer of the same id
//! waits for the other's commit, then skips it), and debits, balances, spend and rollup are
//! derived only from the ids actually inserted. Every writer takes its row locks in one global
//! order — usage ids, then balance rows by workspace id, then spend rows by (key, window), then
//! rollup rows by (workspace, day, model), each sorted in byte order — so writers wait for
//! each other but never deadlock.
//!
//! Where a batch's time went (EXPLAIN ANALYZE of 5,000 records): about 40 % in three per-row
//! foreign-key checks (records → keys, debits → workspaces, debits → records), the rest in the
//! two heap inserts and their nine index entries; decoding the arrays and sorting them was
//! under 5 %, so the records still arrive as arrays, not through `COPY`. Migration 0019 made
//! the foreign keys statement-level checks over each statement's inserted rows (the same
//! `foreign_key_violation`, so a batch naming a missing key still fails whole) and dropped
//! three indexes nothing reads; docs/benchmarks.md has the numbers.

use std::collections::{BTreeSet, HashSet};
use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use chrono::{DateTime, Utc};
use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
    Transaction,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Row, Socket, Statement};

use super::batch::{BatchTotals, UsageBatch};
use super::codec;
use super::migrations::{self, Dialect, Migration};
use super::months;
use super::params::{self, Param};
use super::rows::{self, DbRow};
use super::sql::{
    self, Page, ALERT_COLS, AUDIT_COLS, DAILY_COLS, DELIVERY_COLS, KEY_COLS, LEDGER_COLS,
    MANAGEMENT_KEY_COLS, MODEL_COLS, PROFILE_COLS, PURGE_CHUNK, RESPONSE_COLS, ROUTE_COLS,
    SESSION_COLS, USAGE_COLS, WORKSPACE_COLS,
};
use super::{
    AlertSettings, ApiKey, ArchivedMonth, Audit, AuditEntry, BalanceRow, CatalogRows, Change,
    ConsoleSession, CreditMovement, Cursor, DailyUsage, Delivery, Done, IdempotencyKey,
    KeyRotation, KeyUpdate, LedgerCheck, LedgerEntry, LedgerKind, ManagementKey, MonthTotal,
    NewKey, Once, Store, StoreError, StoreResult, StoredResponse, UsageFilter, UsageMonth,
    UsageRecord, Workspace,
};
use crate::money::Usd;

/// The NOTIFY channel the schema's `change_log` trigger announces on.
const CHANNEL: &str = "tollgate_changes";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a caller waits for a free pooled connection before failing.
const POOL_WAIT: Duration = Duration::from_secs(30);
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

pub struct PgStore {
    pool: Pool,
    /// Poked by the listener task on every notification and on every reconnect.
    changed: Arc<Notify>,
    listener: JoinHandle<()>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// `e` with its chain of causes: tokio-postgres puts the useful part ("Connection refused",
/// "password authentication failed") in the source, not in its own message.
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Maps a PostgreSQL error: unique violations become `Conflict`, the rest `Backend`, with the
/// server's code, message and detail.
fn pg_err(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => {
            let mut msg = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                msg.push_str(": ");
                msg.push_str(detail);
            }
            if *db.code() == SqlState::UNIQUE_VIOLATION {
                StoreError::Conflict(msg)
            } else {
                StoreError::Backend(format!("postgres: {msg}"))
            }
        }
        None => StoreError::Backend(format!("postgres: {}", describe(&e))),
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        pg_err(e)
    }
}

impl From<PoolError> for StoreError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::Backend(e) => pg_err(e),
            other => StoreError::Backend(format!("postgres pool: {other}")),
        }
    }
}

/// Maps an insert's error, a unique violation meaning that `what` already exists.
fn exists(what: String) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
    move |e| {
        if is_code(&e, &SqlState::UNIQUE_VIOLATION) {
            StoreError::Conflict(format!("{what} already exists"))
        } else {
            pg_err(e)
        }
    }
}

fn is_code(e: &tokio_postgres::Error, code: &SqlState) -> bool {
    e.code() == Some(code)
}

/// Reads column `col`, reporting a type mismatch as a corrupt row.
fn col<'a, T: FromSql<'a>>(row: &'a Row, col: &str) -> StoreResult<T> {
    row.try_get(col)
        .map_err(|e| StoreError::Corrupt(format!("column {col}: {e}")))
}

/// Inserts the batch's records (arrays in `USAGE_COLS` order, sorted by id so concurrent
/// writers lock ids in the same order) and, in the same statement, the debit of each record
/// actually inserted. Ids already stored — or being inserted by a concurrent transaction,
/// which this one then waits for — are skipped by `ON CONFLICT DO NOTHING`, with no conflict
/// target: the primary key is the table's one unique index (`id`, or `(id, finished_at)` on a
/// table partitioned by month, where a replayed record has the same `finished_at`). Returns
/// the ids newly applied.
const INSERT_USAGE: &str = "WITH new AS (
    INSERT INTO usage_records (id, workspace_id, key_id, model_id, route, endpoint, stream,
        input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
        input_price_micro, output_price_micro, cache_read_price_micro, cache_write_price_micro,
        cost_pico, outcome, started_at, finished_at, upstream_latency_us, ttft_us,
        spend_window_start, usage_source, audio_input_tokens, cache_write_1h_tokens,
        cache_storage_token_seconds, audio_input_price_micro, cache_write_1h_price_micro,
        cache_storage_price_micro, attempts, request_id, review, client_addr,
        upstream_request_id, waived)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
        $6::text[], $7::bool[], $8::int8[], $9::int8[], $10::int8[], $11::int8[], $12::int8[],
        $13::int8[], $14::int8[], $15::int8[], $16::int8[], $17::int8[], $18::text[],
        $19::timestamptz[], $20::timestamptz[], $21::int8[], $22::int8[], $23::timestamptz[],
        $24::text[], $25::int8[], $26::int8[], $27::int8[], $28::int8[], $29::int8[],
        $30::int8[], $31::int4[], $32::text[], $33::text[], $34::text[], $35::text[],
        $36::bool[])
        AS t(id)
    ORDER BY id COLLATE \"C\"
    ON CONFLICT DO NOTHING
    RETURNING id, workspace_id, cost_pico, finished_at
), debits AS (
    INSERT INTO ledger_entries (id, workspace_id, kind, amount_pico, note, created_at, usage_id)
    SELECT 'debit:' || id, workspace_id, 'debit', -cost_pico, NULL, finished_at, id FROM new
    ORDER BY id COLLATE \"C\"
    RETURNING usage_id
)
SELECT usage_id FROM debits";

/// Adds each workspace's balance change (minus its debits) to its balance row (creating it),
/// locking the rows in workspace-id order.
const ADD_BALANCES: &str = "INSERT INTO balances (workspace_id, balance_pico)
    SELECT w, d FROM unnest($1::text[], $2::int8[]) AS t(w, d) ORDER BY w COLLATE \"C\"
    ON CONFLICT (workspace_id) DO UPDATE
    SET balance_pico = balances.balance_pico + EXCLUDED.balance_pico";

/// Adds each (key, window)'s total to its spend row (creating it), in (key, window) order.
const ADD_KEY_SPEND: &str = "INSERT INTO key_spend (key_id, window_start, spend_pico)
    SELECT k, w, s FROM unnest($1::text[], $2::timestamptz[], $3::int8[]) AS t(k, w, s)
    ORDER BY k COLLATE \"C\", w
    ON CONFLICT (key_id, window_start) DO UPDATE
    SET spend_pico = key_spend.spend_pico + EXCLUDED.spend_pico";

/// Adds a batch's groups to the daily rollup, locking rows in one global order.
const ADD_DAILY: &str = "INSERT INTO usage_daily AS d
    (workspace_id, day, model_id, requests, input_tokens, output_tokens, cost_pico)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[],
                         $6::int8[], $7::int8[]) AS t(w, day, m, r, i, o, c)
    ORDER BY w COLLATE \"C\", day, m COLLATE \"C\"
    ON CONFLICT (workspace_id, day, model_id) DO UPDATE SET
        requests = d.requests + EXCLUDED.requests,
        input_tokens = d.input_tokens + EXCLUDED.input_tokens,
        output_tokens = d.output_tokens + EXCLUDED.output_tokens,
        cost_pico = d.cost_pico + EXCLUDED.cost_pico";

/// Maps an error of `record_usage`: a record the schema refuses (a CHECK such as the exact
/// cost, a key not in its workspace) is a `Conflict` / `NotFound` — retrying the same batch
/// cannot succeed — while anything else stays a (possibly transient) `Backend` error.
fn usage_err(e: tokio_postgres::Error) -> StoreError {
    refused("usage", e)
}

/// Maps an error of a batch of `what` as `usage_err` does.
fn refused(what: &str, e: tokio_postgres::Error) -> StoreError {
    let refused = e.as_db_error().map(|db| {
        let mut msg = format!("{what} batch refused: {}", db.message());
        if let Some(detail) = db.detail() {
            msg.push_str(": ");
            msg.push_str(detail);
        }
        (db.code().clone(), msg)
    });
    match refused {
        Some((code, msg)) if code == SqlState::FOREIGN_KEY_VIOLATION => StoreError::NotFound(msg),
        Some((code, msg))
            if code == SqlState::CHECK_VIOLATION
                || code == SqlState::NOT_NULL_VIOLATION
                || code == SqlState::UNIQUE_VIOLATION
                || code == SqlState::NUMERIC_VALUE_OUT_OF_RANGE =>
        {
            StoreError::Conflict(msg)
        }
        _ => pg_err(e),
    }
}

/// `keep_responses`' one statement: the batch's responses as arrays in `RESPONSE_COLS` order,
/// inserted in id order; an id already stored (or being stored by a concurrent transaction,
/// which this one then waits for) is skipped.
fn insert_responses_sql() -> String {
    format!(
        "INSERT INTO responses ({RESPONSE_COLS}) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
                              $5::timestamptz[], $6::timestamptz[], $7::text[], $8::text[]) \
             AS t(id) \
         ORDER BY id COLLATE \"C\" \
         ON CONFLICT (id) DO NOTHING"
    )
}

/// `record_usage`'s first step: the records and their debits, in id order. The unique index
/// on `usage_records.id` is the idempotency guard: a concurrent writer of the same id makes
/// this one wait for its commit, then skip the id. Returns the ids newly stored.
async fn insert_usage(tx: &Transaction<'_>, batch: &UsageBatch) -> StoreResult<HashSet<String>> {
    let columns = columns(batch.rows().map(|(_, row)| row));
    let stmt = tx.prepare_cached(INSERT_USAGE).await?;
    let inserted = tx.query(&stmt, &refs(&columns)).await.map_err(usage_err)?;
    inserted.iter().map(|row| col(row, "usage_id")).collect()
}

/// `record_usage`'s last steps, a statement of arrays each, taking their row locks after
/// every usage-id lock and in one global order (balances by workspace, spend by (key,
/// window), the rollup by (workspace, day, model)), so concurrent writers cannot deadlock.
///
/// The three are pipelined: sent together on the connection, which runs them one after the
/// other in the order sent (so the lock order holds), costing one round trip instead of three.
/// An error in one aborts the transaction; the first error is the one returned.
async fn apply_totals(tx: &Transaction<'_>, totals: &BatchTotals) -> StoreResult<()> {
    let balances = columns(totals.balances());
    let spends = columns(totals.key_spends());
    let daily = columns(totals.daily());
    // Prepared once per connection; cached afterwards, so these cost no round trip.
    let add_balances = tx.prepare_cached(ADD_BALANCES).await?;
    let add_spends = tx.prepare_cached(ADD_KEY_SPEND).await?;
    let add_daily = tx.prepare_cached(ADD_DAILY).await?;
    tokio::try_join!(
        unnest(tx, &add_balances, &balances),
        unnest(tx, &add_spends, &spends),
        unnest(tx, &add_daily, &daily),
    )?;
    Ok(())
}

/// Executes the array statement `stmt` with `columns`; nothing when they hold no row.
async fn unnest(
    tx: &Transaction<'_>,
    stmt: &Statement,
    columns: &[Vec<Param<'_>>],
) -> StoreResult<()> {
    if columns.first().is_none_or(Vec::is_empty) {
        return Ok(());
    }
    tx.execute(stmt, &refs(columns)).await.map_err(usage_err)?;
    Ok(())
}

/// `rows` as one array per column, as `unnest` takes them.
fn columns<'p, const N: usize>(rows: impl Iterator<Item = [Param<'p>; N]>) -> [Vec<Param<'p>>; N] {
    let n = rows.size_hint().0;
    let mut columns = std::array::from_fn(|_| Vec::with_capacity(n));
    for row in rows {
        for (column, value) in columns.iter_mut().zip(row) {
            column.push(value);
        }
    }
    columns
}

/// PostgreSQL keeps `TIMESTAMPTZ` and `BOOLEAN` natively.
impl DbRow for Row {
    fn text(&self, i: usize) -> StoreResult<String> {
        at(self, i)
    }
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
        at(self, i)
    }
    fn int(&self, i: usize) -> StoreResult<i64> {
        at(self, i)
    }
    fn opt_int(&self, i: usize) -> StoreResult<Option<i64>> {
        at(self, i)
    }
    fn int32(&self, i: usize) -> StoreResult<i32> {
        at(self, i)
    }
    fn flag(&self, i: usize) -> StoreResult<bool> {
        at(self, i)
    }
    fn time(&self, i: usize) -> StoreResult<DateTime<Utc>> {
        at(self, i)
    }
    fn opt_time(&self, i: usize) -> StoreResult<Option<DateTime<Utc>>> {
        at(self, i)
    }
}

/// Reads column `i`, reporting a type mismatch as a corrupt row.
fn at<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> StoreResult<T> {
    row.try_get(i)
        .map_err(|e| StoreError::Corrupt(format!("column {i}: {e}")))
}

type BoxError = Box<dyn std::error::Error + Sync + Send>;

/// PostgreSQL binds times as `TIMESTAMPTZ` and flags as `BOOLEAN`; each value is checked
/// against the parameter's type as its own Rust type would be.
impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        match self {
            Param::Null => Ok(IsNull::Yes),
            Param::Text(s) => s.as_ref().to_sql_checked(ty, out),
            Param::Int(n) => n.to_sql_checked(ty, out),
            Param::Int32(n) => n.to_sql_checked(ty, out),
            Param::Count32(n) => i32::try_from(*n)
                .unwrap_or(i32::MAX)
                .to_sql_checked(ty, out),
            Param::Flag(b) => b.to_sql_checked(ty, out),
            Param::Time(t) => t.to_sql_checked(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Wakes every current waiter and leaves one permit for the next, so a notification that
/// lands between a follower's `changes_since` and its next `wait_for_change` is not lost
/// (at worst one wake-up is spurious).
fn poke(changed: &Notify) {
    changed.notify_waiters();
    changed.notify_one();
}

/// A connection that has executed `LISTEN`; `client` must stay alive while it is driven.
struct Listening {
    client: Client,
    conn: Connection<Socket, NoTlsStream>,
}

/// Opens a dedicated connection and subscribes it to the change channel.
async fn listen(config: &Config) -> Result<Listening, String> {
    let (client, mut conn) = config.connect(NoTls).await.map_err(|e| describe(&e))?;
    {
        let subscribe = client.batch_execute("LISTEN tollgate_changes");
        tokio::pin!(subscribe);
        loop {
            tokio::select! {
                done = &mut subscribe => {
                    done.map_err(|e| describe(&e))?;
                    break;
                }
                msg = poll_fn(|cx| conn.poll_message(cx)) => match msg {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(describe(&e)),
                    None => return Err("connection closed".to_owned()),
                },
            }
        }
    }
    Ok(Listening { client, conn })
}

/// Drives a listening connection, poking `changed` on every notification, until it fails.
async fn pump(listening: Listening, changed: &Notify) -> String {
    let Listening { client, mut conn } = listening;
    let why = loop {
        match poll_fn(|cx| conn.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n))) if n.channel() == CHANNEL => poke(changed),
            Some(Ok(_)) => {}
            Some(Err(e)) => break describe(&e),
            None => break "connection closed".to_owned(),
        }
    };
    drop(client);
    why
}

/// The listener task: pumps the connection, and re-establishes it with exponential backoff
/// when it drops. Runs until aborted by `PgStore::drop`.
async fn run_listener(config: Config, changed: Arc<Notify>, first: Listening) {
    let mut current = first;
    loop {
        let why = pump(current, &changed).await;
        tracing::warn!(reason = %why, "change listener lost its connection; reconnecting");
        // Followers fall back to polling at their `max` until we are back.
        poke(&changed);
        let mut backoff = BACKOFF_START;
        current = loop {
            tokio::time::sleep(backoff).await;
            match listen(&config).await {
                Ok(l) => break l,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "change listener cannot reconnect");
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        };
        tracing::info!("change listener reconnected");
        // Notifications sent while we were away are lost: make followers re-read the log.
        poke(&changed);
    }
}

/// The connection pool (connections made on demand; none yet).
fn pool(config: Config) -> StoreResult<Pool> {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(CONNECT_TIMEOUT))
        .build()
        .map_err(|e| StoreError::Backend(format!("postgres pool: {e}")))
}

impl PgStore {
    /// Connects to `url` (`postgres://user@host:port/db?options=…`, no TLS): checks that the
    /// database answers and starts the change listener. Does not migrate: call `migrate()`.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let mut config: Config = url.parse().map_err(|e| {
            StoreError::Backend(format!("invalid PostgreSQL url: {}", describe(&e)))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("tollgate");
        }
        let pool = pool(config.clone())?;
        drop(pool.get().await?);

        // The listener detects a dead peer within about a minute even if no packet says so.
        let mut listen_config = config;
        listen_config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(3);
        // Subscribe before returning, so no change committed after `connect` is missed.
        let first = listen(&listen_config)
            .await
            .map_err(|e| StoreError::Backend(format!("postgres: LISTEN {CHANNEL}: {e}")))?;
        let changed = Arc::new(Notify::new());
        #[expect(
            clippy::disallowed_methods,
            reason = "the LISTEN connection lives as long as the store; Drop aborts it"
        )]
        let listener = tokio::spawn(run_listener(listen_config, Arc::clone(&changed), first));
        Ok(Self {
            pool,
            changed,
            listener,
        })
    }

    async fn client(&self) -> StoreResult<Object> {
        Ok(self.pool.get().await?)
    }

    /// Executes one raw SQL statement; returns the number of rows changed. For tests that
    /// check what the schema itself refuses.
    #[doc(hidden)]
    pub async fn execute_raw(&self, sql: &str) -> StoreResult<u64> {
        Ok(self.client().await?.execute(sql, &[]).await?)
    }

    async fn query_rows(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> StoreResult<Vec<Row>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await?;
        Ok(client.query(&stmt, params).await?)
    }
}

impl PgStore {
    /// Runs a newest-first page query.
    async fn page<T>(
        &self,
        page: Page<'_>,
        map: fn(&Row) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        let sql = page.q.sql(|n| format!("${n}"));
        let rows = self.query_rows(&sql, &refs(&page.args)).await?;
        rows::all(rows, map)
    }
}

/// Whether workspace `id` exists, as seen by `client` (inside its transaction, if any).
async fn workspace_exists(client: &Transaction<'_>, id: &str) -> StoreResult<bool> {
    let stmt = client
        .prepare_cached("SELECT 1 FROM workspaces WHERE id = $1")
        .await?;
    Ok(client.query_opt(&stmt, &[&id]).await?.is_some())
}

/// Inserts a new key (its workspace must exist) inside `tx`.
async fn insert_key(tx: &Transaction<'_>, out: &ApiKey) -> StoreResult<()> {
    if !workspace_exists(tx, &out.workspace_id).await? {
        return Err(StoreError::no_workspace(&out.workspace_id));
    }
    let insert = sql::insert_sql("api_keys", KEY_COLS, '$');
    execute(tx, &insert, &params::api_key(out)?)
        .await
        .map_err(|e| {
            if is_code(&e, &SqlState::UNIQUE_VIOLATION) {
                let on_hash = e
                    .as_db_error()
                    .and_then(|db| db.constraint())
                    .is_some_and(|c| c.contains("secret_hash"));
                StoreError::duplicate_key(out, on_hash)
            } else if is_code(&e, &SqlState::FOREIGN_KEY_VIOLATION) {
                StoreError::no_workspace(&out.workspace_id)
            } else {
                pg_err(e)
            }
        })?;
    Ok(())
}

/// Appends an audit entry through `client` (a pooled connection or a transaction).
async fn insert_audit(client: &impl GenericClient, e: &AuditEntry) -> StoreResult<()> {
    let insert = sql::insert_sql("audit_log", AUDIT_COLS, '$');
    execute(client, &insert, &params::audit_entry(e)).await?;
    Ok(())
}

/// Appends the audit entry of what `tx` just made, when the change is audited: inside the
/// change's transaction, so both commit or neither.
async fn audited<T: Sync>(
    tx: &Transaction<'_>,
    audit: Option<Audit<T>>,
    made: &T,
) -> StoreResult<()> {
    match audit {
        Some(audit) => insert_audit(tx, &audit(made)).await,
        None => Ok(()),
    }
}

/// Claims `key` inside `tx`, the keys expired by its time deleted first: `None` when it is
/// this transaction's now, else what the request it is held for answered (`held_key`). A
/// concurrent claim of the same key makes the insert wait for that transaction's end; once it
/// committed, its row is read here.
async fn claim<T>(tx: &Transaction<'_>, key: &IdempotencyKey) -> StoreResult<Option<Done<T>>> {
    let now = [Param::from(codec::trunc(key.created_at))];
    execute(tx, &sql::idempotency_purge_sql('$'), &now).await?;
    let claimed = execute(
        tx,
        &sql::idempotency_claim_sql('$'),
        &params::idempotency_claim(key),
    )
    .await
    .map_err(|e| refused("idempotency key", e))?;
    if claimed == 1 {
        return Ok(None);
    }
    let stmt = tx.prepare_cached(&sql::idempotency_held_sql('$')).await?;
    let row = tx
        .query_one(&stmt, &[&key.workspace_id, &key.operation, &key.key])
        .await?;
    rows::held_key(&row, key).map(Some)
}

/// Moves the balance row and its credited total by `m` (an entry already written in `tx`);
/// returns the balance it left, or refuses the movement (see `Store::move_credit`).
async fn move_balance(tx: &Transaction<'_>, m: &CreditMovement) -> StoreResult<Usd> {
    let args = [Param::from(&m.workspace_id), m.amount.pico().into()];
    let sql = match m.kind {
        LedgerKind::Refund => sql::refund_balance_sql('$'),
        _ => sql::credit_balance_sql('$'),
    };
    let stmt = tx.prepare_cached(&sql).await?;
    if let Some(row) = tx.query_opt(&stmt, &refs(&args)).await? {
        return Ok(Usd::from_pico(at(&row, 0)?));
    }
    if m.kind != LedgerKind::Refund {
        return Err(StoreError::balance_overflow(&m.workspace_id, m.amount));
    }
    let stmt = tx.prepare_cached(&sql::balance_row_sql('$')).await?;
    let now = match tx.query_opt(&stmt, &[&m.workspace_id]).await? {
        Some(row) => rows::balance_row(&row, 0)?.balance,
        None => Usd::ZERO,
    };
    Err(StoreError::refund_over_balance(
        &m.workspace_id,
        m.amount,
        now,
    ))
}

/// Deletes a console session (parameter: id_hash).
const SESSION_DELETE: &str = "DELETE FROM console_sessions WHERE id_hash = $1";

/// Executes the cached statement `sql` with `params` through `client` (a pooled connection or
/// a transaction); returns the number of rows changed.
async fn execute(
    client: &impl GenericClient,
    sql: &str,
    params: &[Param<'_>],
) -> Result<u64, tokio_postgres::Error> {
    let stmt = client.prepare_cached(sql).await?;
    client.execute(&stmt, &refs(params)).await
}

/// Every row of the cached query `sql` (no parameters) as records.
async fn select<T>(
    client: &impl GenericClient,
    sql: &str,
    map: fn(&Row) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let stmt = client.prepare_cached(sql).await?;
    rows::all(client.query(&stmt, &[]).await?, map)
}

/// Parameters as tokio-postgres takes them.
fn refs<T: ToSql + Sync>(params: &[T]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

/// The month partitions of `usage_records` (and its default partition), by name.
const PARTITIONS: &str = "SELECT c.relname::text FROM pg_inherits i \
     JOIN pg_class c ON c.oid = i.inhrelid \
     WHERE i.inhparent = 'usage_records'::regclass ORDER BY 1";

/// The month a partition named `usage_records_YYYY_MM` holds.
fn partition_month(name: &str) -> Option<UsageMonth> {
    let (y, m) = name.strip_prefix("usage_records_")?.split_once('_')?;
    format!("{y}-{m}").parse().ok()
}

/// Serialises partition changes (creation ahead, archive, restore) across replicas and the
/// CLI, with the migrations (the same lock): held until `tx` ends.
async fn lock_partitions(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&migrations::PG_MIGRATION_LOCK],
    )
    .await?;
    Ok(())
}

async fn partition_exists(tx: &Transaction<'_>, name: &str) -> StoreResult<bool> {
    let row = tx
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await?;
    Ok(row.try_get(0)?)
}

/// Per-workspace count and cost of `table`'s records of `month`, in workspace byte order.
/// Not a cached statement: the table is dropped and made again by archives and restores.
async fn pg_month_totals(
    tx: &Transaction<'_>,
    table: &str,
    month: UsageMonth,
) -> StoreResult<Vec<MonthTotal>> {
    let sql = format!(
        "SELECT workspace_id, COUNT(*), SUM(cost_pico)::text FROM {table} \
         WHERE finished_at >= $1 AND finished_at < $2 \
         GROUP BY workspace_id ORDER BY workspace_id COLLATE \"C\""
    );
    let rows = tx.query(&sql, &[&month.start(), &month.end()]).await?;
    rows.iter()
        .map(|r| {
            let workspace_id: String = r.try_get(0)?;
            let n: i64 = r.try_get(1)?;
            let cost: String = r.try_get(2)?;
            Ok(MonthTotal {
                records: codec::count_from_db("records", n)?,
                cost: codec::sum_from_text(&format!("{month} cost of {workspace_id}"), &cost)?,
                workspace_id,
            })
        })
        .collect()
}

/// An archived month's carried-forward rows.
async fn insert_archived(
    tx: &Transaction<'_>,
    archived: &ArchivedMonth,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    let insert = sql::archived_total_insert_sql('$');
    for t in &archived.totals {
        execute(tx, &insert, &params::archived_total(archived.month, t, at)?).await?;
    }
    Ok(())
}

/// Every workspace's books in one statement, one snapshot. SUM over BIGINT is NUMERIC (exact,
/// unbounded): read as text and converted exactly.
const LEDGER_VERIFY: &str = "SELECT w.id AS workspace_id,
           COALESCE(b.balance_pico, 0) AS balance_pico,
           COALESCE(b.credited_pico, 0) AS credited_pico,
           COALESCE(l.total, 0)::text AS ledger_sum,
           COALESCE(l.debits, 0)::text AS debit_sum,
           COALESCE(u.total, 0)::text AS usage_cost_sum
    FROM workspaces w
    LEFT JOIN balances b ON b.workspace_id = w.id
    LEFT JOIN (SELECT workspace_id, SUM(amount_pico) AS total,
                      SUM(amount_pico) FILTER (WHERE kind = 'debit') AS debits
               FROM ledger_entries GROUP BY workspace_id) l
           ON l.workspace_id = w.id
    LEFT JOIN (SELECT workspace_id, SUM(total) AS total
               FROM (SELECT workspace_id, SUM(cost_pico) AS total
                     FROM usage_records GROUP BY workspace_id
                     UNION ALL
                     SELECT workspace_id, SUM(cost_pico) AS total
                     FROM archived_totals GROUP BY workspace_id) t
               GROUP BY workspace_id) u
           ON u.workspace_id = w.id
    ORDER BY w.id COLLATE \"C\"";

/// `import_catalog`'s writes: profiles and models upserted, then the routes of every model
/// named replaced.
async fn import_rows(tx: &Transaction<'_>, rows: &CatalogRows) -> StoreResult<()> {
    let profile = sql::upsert_sql("profiles", PROFILE_COLS, '$');
    for p in &rows.profiles {
        execute(tx, &profile, &params::profile(p)).await?;
    }
    let model = sql::upsert_sql("models", MODEL_COLS, '$');
    for m in &rows.models {
        execute(tx, &model, &params::model(m)?)
            .await
            .map_err(|e| StoreError::Backend(format!("model {}: {}", m.id, pg_err(e))))?;
    }
    for id in params::catalog_model_ids(rows) {
        execute(tx, "DELETE FROM routes WHERE model_id = $1", &[id.into()]).await?;
    }
    let route = sql::insert_sql("routes", ROUTE_COLS, '$');
    for r in &rows.routes {
        execute(tx, &route, &params::route(r)).await.map_err(|e| {
            if is_code(&e, &SqlState::FOREIGN_KEY_VIOLATION) {
                StoreError::NotFound(format!("model {} (named by a route)", r.model_id))
            } else {
                StoreError::Backend(format!("route of {}: {}", r.model_id, pg_err(e)))
            }
        })?;
    }
    Ok(())
}

/// Applies `m` inside `tx` unless it is recorded already; whether it was applied.
async fn apply_migration(tx: &Transaction<'_>, m: &Migration) -> StoreResult<bool> {
    // Held until commit: replicas starting together migrate one after another, and the later
    // ones find the version recorded.
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&migrations::PG_MIGRATION_LOCK],
    )
    .await?;
    tx.batch_execute(migrations::PG_SCHEMA_MIGRATIONS).await?;
    let done = tx
        .query_opt(
            "SELECT 1 FROM schema_migrations WHERE version = $1",
            &[&m.version],
        )
        .await?
        .is_some();
    if done {
        return Ok(false);
    }
    tx.batch_execute(m.sql).await.map_err(|e| {
        StoreError::Backend(format!(
            "migration {:04}_{}: {}",
            m.version,
            m.name,
            pg_err(e)
        ))
    })?;
    tx.execute(
        "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
        &[&m.version, &m.name],
    )
    .await?;
    Ok(true)
}

#[async_trait]
impl Store for PgStore {
    async fn migrate(&self) -> StoreResult<usize> {
        let mut client = self.client().await?;
        let mut applied = 0;
        for m in migrations::migrations(Dialect::Postgres) {
            let tx = client.transaction().await?;
            if apply_migration(&tx, m).await? {
                tx.commit().await?;
                applied += 1;
            }
        }
        drop(client);
        self.ensure_usage_partitions(Utc::now(), months::PARTITIONS_AHEAD)
            .await?;
        Ok(applied)
    }

    async fn create_workspace(
        &self,
        id: &str,
        name: &str,
        audit: Option<Audit<Workspace>>,
    ) -> StoreResult<Workspace> {
        let ws = Workspace {
            id: id.to_owned(),
            name: name.to_owned(),
            created_at: codec::now(),
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let insert = sql::insert_sql("workspaces", WORKSPACE_COLS, '$');
        execute(&tx, &insert, &params::workspace(&ws))
            .await
            .map_err(exists(format!("workspace {id}")))?;
        audited(&tx, audit, &ws).await?;
        tx.commit().await?;
        Ok(ws)
    }

    async fn list_workspaces(&self) -> StoreResult<Vec<Workspace>> {
        let rows = self
            .query_rows(
                &format!("SELECT {WORKSPACE_COLS} FROM workspaces ORDER BY created_at, id"),
                &[],
            )
            .await?;
        rows::all(rows, rows::workspace)
    }

    async fn get_workspace(&self, id: &str) -> StoreResult<Option<Workspace>> {
        let rows = self
            .query_rows(
                &format!("SELECT {WORKSPACE_COLS} FROM workspaces WHERE id = $1"),
                &[&id],
            )
            .await?;
        rows.first().map(rows::workspace).transpose()
    }

    async fn create_key(&self, key: NewKey, audit: Option<Audit<ApiKey>>) -> StoreResult<ApiKey> {
        let out = params::new_api_key(key);
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        insert_key(&tx, &out).await?;
        audited(&tx, audit, &out).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn get_key(&self, id: &str) -> StoreResult<Option<ApiKey>> {
        let rows = self
            .query_rows(
                &format!("SELECT {KEY_COLS} FROM api_keys WHERE id = $1"),
                &[&id],
            )
            .await?;
        rows.first().map(rows::api_key).transpose()
    }

    async fn list_keys(&self, workspace_id: &str) -> StoreResult<Vec<ApiKey>> {
        let rows = self
            .query_rows(
                &format!(
                    "SELECT {KEY_COLS} FROM api_keys WHERE workspace_id = $1 ORDER BY created_at, id"
                ),
                &[&workspace_id],
            )
            .await?;
        rows::all(rows, rows::api_key)
    }

    async fn all_keys(&self) -> StoreResult<Vec<ApiKey>> {
        let rows = self
            .query_rows(
                &format!("SELECT {KEY_COLS} FROM api_keys ORDER BY created_at, id"),
                &[],
            )
            .await?;
        rows::all(rows, rows::api_key)
    }

    async fn revoke_key(
        &self,
        id: &str,
        at: DateTime<Utc>,
        audit: Option<Audit<ApiKey>>,
    ) -> StoreResult<bool> {
        let at = codec::trunc(at);
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let stmt = tx
            .prepare_cached(&format!(
                "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL \
                 RETURNING {KEY_COLS}"
            ))
            .await?;
        if let Some(row) = tx.query_opt(&stmt, &[&id, &at]).await? {
            audited(&tx, audit, &rows::api_key(&row)?).await?;
            tx.commit().await?;
            return Ok(true);
        }
        let stmt = tx
            .prepare_cached("SELECT 1 FROM api_keys WHERE id = $1")
            .await?;
        if tx.query_opt(&stmt, &[&id]).await?.is_some() {
            Ok(false)
        } else {
            Err(StoreError::NotFound(format!("key {id}")))
        }
    }

    async fn rotate_key(&self, r: &KeyRotation) -> StoreResult<(ApiKey, ApiKey)> {
        let new = params::new_api_key(r.new.clone());
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        insert_key(&tx, &new).await?;
        let stmt = tx.prepare_cached(&sql::rotate_old_sql('$')).await?;
        let (revoked, expires) = (
            r.old_revoked_at.map(codec::trunc),
            r.old_expires_at.map(codec::trunc),
        );
        // A concurrent rotation holding the row makes this wait for its commit; the row it
        // then re-checks is replaced, so nothing is returned.
        let old = tx
            .query_opt(&stmt, &[&r.old_id, &new.id, &revoked, &expires, &r.now])
            .await?;
        let Some(old) = old else {
            let stmt = tx
                .prepare_cached(&format!("SELECT {KEY_COLS} FROM api_keys WHERE id = $1"))
                .await?;
            let current = tx.query_opt(&stmt, &[&r.old_id]).await?;
            let current = current.as_ref().map(rows::api_key).transpose()?;
            // Dropping `tx` rolls the new key back.
            return Err(StoreError::rotation_refused(&r.old_id, current));
        };
        let old = rows::api_key(&old)?;
        insert_audit(&tx, &r.audit).await?;
        tx.commit().await?;
        Ok((new, old))
    }

    async fn update_key(
        &self,
        id: &str,
        update: &KeyUpdate,
        audit: Option<Audit<ApiKey>>,
    ) -> StoreResult<ApiKey> {
        let values = params::key_update(id, update)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let stmt = tx.prepare_cached(&sql::key_update_sql('$')).await?;
        let row = tx.query_opt(&stmt, &refs(&values)).await?;
        let key = row
            .as_ref()
            .map(rows::api_key)
            .transpose()?
            .ok_or_else(|| StoreError::NotFound(format!("key {id}")))?;
        audited(&tx, audit, &key).await?;
        tx.commit().await?;
        Ok(key)
    }

    async fn create_management_key(
        &self,
        key: &ManagementKey,
        audit: Option<Audit<ManagementKey>>,
    ) -> StoreResult<ManagementKey> {
        let out = params::stored_management_key(key);
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        if !workspace_exists(&tx, &out.workspace_id).await? {
            return Err(StoreError::no_workspace(&out.workspace_id));
        }
        let insert = sql::insert_sql("management_keys", MANAGEMENT_KEY_COLS, '$');
        execute(&tx, &insert, &params::management_key(&out))
            .await
            .map_err(exists(format!("management key {}", out.id)))?;
        audited(&tx, audit, &out).await?;
        tx.commit().await?;
        Ok(out)
    }

    async fn management_key(&self, id: &str) -> StoreResult<Option<ManagementKey>> {
        let rows = self
            .query_rows(&sql::management_key_sql("id", '$'), &[&id])
            .await?;
        rows.first().map(rows::management_key).transpose()
    }

    async fn management_key_by_hash(
        &self,
        secret_hash: &str,
    ) -> StoreResult<Option<ManagementKey>> {
        let rows = self
            .query_rows(
                &sql::management_key_sql("secret_hash", '$'),
                &[&secret_hash],
            )
            .await?;
        rows.first().map(rows::management_key).transpose()
    }

    async fn management_keys(&self, workspace_id: &str) -> StoreResult<Vec<ManagementKey>> {
        let rows = self
            .query_rows(&sql::management_keys_sql('$'), &[&workspace_id])
            .await?;
        rows::all(rows, rows::management_key)
    }

    async fn revoke_management_key(
        &self,
        id: &str,
        at: DateTime<Utc>,
        audit: Option<Audit<ManagementKey>>,
    ) -> StoreResult<bool> {
        let at = codec::trunc(at);
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let stmt = tx.prepare_cached(&sql::management_revoke_sql('$')).await?;
        if let Some(row) = tx.query_opt(&stmt, &[&id, &at]).await? {
            audited(&tx, audit, &rows::management_key(&row)?).await?;
            tx.commit().await?;
            return Ok(true);
        }
        let stmt = tx
            .prepare_cached(&sql::management_key_sql("id", '$'))
            .await?;
        if tx.query_opt(&stmt, &[&id]).await?.is_some() {
            Ok(false)
        } else {
            Err(StoreError::NotFound(format!("management key {id}")))
        }
    }

    async fn move_credit(
        &self,
        movement: &CreditMovement,
        audit: Option<Audit<(LedgerEntry, Usd)>>,
        once: Option<Once<(LedgerEntry, Usd)>>,
    ) -> StoreResult<Done<(LedgerEntry, Usd)>> {
        let entry = params::movement_entry(movement)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        if !workspace_exists(&tx, &entry.workspace_id).await? {
            return Err(StoreError::no_workspace(&entry.workspace_id));
        }
        if let Some(once) = &once {
            if let Some(held) = claim(&tx, &once.key).await? {
                return Ok(held); // dropping `tx` writes nothing
            }
        }
        let insert = sql::insert_sql("ledger_entries", LEDGER_COLS, '$');
        execute(&tx, &insert, &params::ledger_entry(&entry))
            .await
            .map_err(exists(format!("ledger entry {}", entry.id)))?;
        let balance = move_balance(&tx, movement).await?;
        let made = (entry, balance);
        audited(&tx, audit, &made).await?;
        if let Some(once) = once {
            let args = params::idempotency_answer(&once.key, (once.answer)(&made));
            execute(&tx, &sql::idempotency_answer_sql('$'), &args).await?;
        }
        tx.commit().await?;
        Ok(Done::Made(made))
    }

    async fn balance_row(&self, workspace_id: &str) -> StoreResult<BalanceRow> {
        let rows = self
            .query_rows(&sql::balance_row_sql('$'), &[&workspace_id])
            .await?;
        rows.first()
            .map_or(Ok(BalanceRow::default()), |r| rows::balance_row(r, 0))
    }

    async fn ledger(&self, workspace_id: &str) -> StoreResult<Vec<LedgerEntry>> {
        let rows = self
            .query_rows(
                &format!(
                    "SELECT {LEDGER_COLS}, usage_id FROM ledger_entries WHERE workspace_id = $1
                     ORDER BY created_at, seq"
                ),
                &[&workspace_id],
            )
            .await?;
        rows::all(rows, rows::ledger_entry)
    }

    async fn record_usage(&self, batch: &[UsageRecord]) -> StoreResult<u64> {
        let batch = UsageBatch::prepare(batch)?;
        if batch.is_empty() {
            return Ok(0);
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let new = insert_usage(&tx, &batch).await?;
        // Nothing new: nothing was written, and no balance row is locked.
        if !new.is_empty() {
            apply_totals(&tx, &batch.totals(|id| new.contains(id))?).await?;
        }
        tx.commit().await?;
        Ok(new.len() as u64)
    }

    async fn usage(
        &self,
        workspace_id: &str,
        since: Option<DateTime<Utc>>,
    ) -> StoreResult<Vec<UsageRecord>> {
        let rows = self
            .query_rows(
                &format!(
                    "SELECT {USAGE_COLS} FROM usage_records
                     WHERE workspace_id = $1 AND ($2::timestamptz IS NULL OR finished_at >= $2)
                     ORDER BY finished_at, id"
                ),
                &[&workspace_id, &since.map(codec::trunc)],
            )
            .await?;
        rows::all(rows, rows::usage)
    }

    async fn usage_record_within(
        &self,
        workspace_id: &str,
        id: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> StoreResult<Option<UsageRecord>> {
        let rows = self
            .query_rows(
                &sql::usage_record_within_sql('$'),
                &[&id, &workspace_id, &from, &to],
            )
            .await?;
        Ok(rows::all(rows, rows::usage)?.pop())
    }

    async fn usage_record(&self, workspace_id: &str, id: &str) -> StoreResult<Option<UsageRecord>> {
        let rows = self
            .query_rows(
                &format!(
                    "SELECT {USAGE_COLS} FROM usage_records WHERE id = $1 AND workspace_id = $2"
                ),
                &[&id, &workspace_id],
            )
            .await?;
        Ok(rows::all(rows, rows::usage)?.pop())
    }

    async fn balance_rows(&self) -> StoreResult<Vec<(String, BalanceRow)>> {
        // Byte order, as SQLite's default collation sorts.
        let sql = format!("{} COLLATE \"C\"", sql::BALANCE_ROWS);
        let rows = self.query_rows(&sql, &[]).await?;
        rows.iter()
            .map(|r| Ok((at(r, 0)?, rows::balance_row(r, 1)?)))
            .collect()
    }

    async fn key_spends(
        &self,
        since_window_starts: &[(String, DateTime<Utc>)],
    ) -> StoreResult<Vec<(String, Usd)>> {
        if since_window_starts.is_empty() {
            return Ok(Vec::new());
        }
        let (keys, starts): (Vec<&str>, Vec<DateTime<Utc>>) = since_window_starts
            .iter()
            .map(|(k, w)| (k.as_str(), codec::trunc(*w)))
            .unzip();
        let rows = self
            .query_rows(
                "SELECT t.key_id, COALESCE(s.spend_pico, 0) AS spend_pico
                 FROM unnest($1::text[], $2::timestamptz[]) WITH ORDINALITY AS t(key_id, ws, ord)
                 LEFT JOIN key_spend s ON s.key_id = t.key_id AND s.window_start = t.ws
                 ORDER BY t.ord",
                &[&keys, &starts],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((col(r, "key_id")?, Usd::from_pico(col(r, "spend_pico")?))))
            .collect()
    }

    async fn ledger_verify(&self) -> StoreResult<Vec<LedgerCheck>> {
        let rows = self.query_rows(LEDGER_VERIFY, &[]).await?;
        rows.iter()
            .map(|r| {
                let workspace_id: String = col(r, "workspace_id")?;
                let sum = |name: &str| -> StoreResult<Usd> {
                    let text: String = col(r, name)?;
                    codec::sum_from_text(&format!("{name} of {workspace_id}"), &text)
                };
                Ok(LedgerCheck {
                    balance_row: Usd::from_pico(col(r, "balance_pico")?),
                    credited_row: Usd::from_pico(col(r, "credited_pico")?),
                    ledger_sum: sum("ledger_sum")?,
                    usage_cost_sum: sum("usage_cost_sum")?,
                    debit_sum: sum("debit_sum")?,
                    workspace_id,
                })
            })
            .collect()
    }

    async fn ensure_usage_partitions(&self, at: DateTime<Utc>, ahead: u32) -> StoreResult<u32> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // Replicas starting together (and the daily job) create one after another.
        lock_partitions(&tx).await?;
        let ahead = i32::try_from(ahead).unwrap_or(i32::MAX);
        let row = tx
            .query_one(
                "SELECT tollgate_usage_partitions_ahead($1, $2)",
                &[&at, &ahead],
            )
            .await?;
        let made: i32 = row.try_get(0)?;
        tx.commit().await?;
        Ok(u32::try_from(made).unwrap_or(0))
    }

    async fn default_partition_records(&self) -> StoreResult<u64> {
        let rows = self
            .query_rows("SELECT COUNT(*) FROM usage_records_default", &[])
            .await?;
        let n: i64 = rows.first().map_or(Ok(0), |r| r.try_get(0))?;
        codec::count_from_db("default partition rows", n)
    }

    async fn usage_months(&self, before: UsageMonth) -> StoreResult<Vec<UsageMonth>> {
        let client = self.client().await?;
        let mut months = BTreeSet::new();
        // Each month partition before `before` that holds a row (one index probe each), and
        // the months of the rows the default partition holds (it should hold none).
        let parts = client.query(PARTITIONS, &[]).await?;
        for part in &parts {
            let name: String = part.try_get(0)?;
            let Some(month) = partition_month(&name).filter(|m| *m < before) else {
                continue;
            };
            let any = client
                .query_opt(
                    "SELECT 1 FROM usage_records WHERE finished_at >= $1 AND finished_at < $2 \
                     LIMIT 1",
                    &[&month.start(), &month.end()],
                )
                .await?;
            if any.is_some() {
                months.insert(month);
            }
        }
        let stray = client
            .query(
                "SELECT DISTINCT to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM') \
                 FROM usage_records_default WHERE finished_at < $1",
                &[&before.start()],
            )
            .await?;
        for row in &stray {
            let text: String = row.try_get(0)?;
            let month = text
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("{e}")))?;
            months.insert(month);
        }
        Ok(months.into_iter().collect())
    }

    async fn month_usage_page(
        &self,
        month: UsageMonth,
        after_id: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query_rows(
                &sql::month_usage_sql('$'),
                &[
                    &month.start(),
                    &month.end(),
                    &after_id.unwrap_or(""),
                    &limit,
                ],
            )
            .await?;
        rows::all(rows, rows::usage)
    }

    async fn archive_usage_month(
        &self,
        archived: &ArchivedMonth,
        at: DateTime<Utc>,
        audit: Option<Audit<ArchivedMonth>>,
    ) -> StoreResult<()> {
        let month = archived.month;
        months::not_current(month, at)?;
        let partition = month.partition();
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        lock_partitions(&tx).await?;
        if !partition_exists(&tx, &partition).await? {
            return Err(StoreError::Conflict(format!(
                "{month} has no partition ({partition}): its records are in the default \
                 partition, which must stay empty"
            )));
        }
        // The month's partition alone is locked against writes while it is summed (a scan
        // of the month: about a second per million records here), so what is checked is what
        // goes, and writers of other months go on. Only the detach and the drop, at the end,
        // lock the parent, for as long as the commit takes.
        tx.batch_execute(&format!("LOCK TABLE {partition} IN SHARE MODE"))
            .await?;
        let stray = pg_month_totals(&tx, "usage_records_default", month).await?;
        if !stray.is_empty() {
            return Err(StoreError::Conflict(format!(
                "the default partition holds records of {month}"
            )));
        }
        let found = pg_month_totals(&tx, &partition, month).await?;
        months::same_totals("usage records", month, &archived.totals, &found)?;
        insert_archived(&tx, archived, at).await?;
        tx.batch_execute(&format!(
            "ALTER TABLE usage_records DETACH PARTITION {partition}; DROP TABLE {partition}"
        ))
        .await?;
        audited(&tx, audit, archived).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn restore_usage_month(
        &self,
        month: UsageMonth,
        records: &[UsageRecord],
        audit: Option<Audit<ArchivedMonth>>,
    ) -> StoreResult<u64> {
        let restored = months::restored(month, records)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        lock_partitions(&tx).await?;
        let stmt = tx.prepare_cached(&sql::archived_month_sql('$')).await?;
        let month_text = month.to_string();
        let carried = rows::all(tx.query(&stmt, &[&month_text]).await?, rows::archived_total)?;
        let carried: Vec<MonthTotal> = carried.into_iter().map(|(_, t)| t).collect();
        months::same_totals("carried-forward totals", month, &restored.totals, &carried)?;
        tx.execute("SELECT tollgate_usage_partition($1)", &[&month.start()])
            .await?;
        let batch = UsageBatch::prepare(records)?;
        let insert = format!(
            "{} ON CONFLICT DO NOTHING",
            sql::insert_sql("usage_records", USAGE_COLS, '$')
        );
        let mut inserted = 0;
        for (_, row) in batch.rows() {
            inserted += execute(&tx, &insert, &row).await.map_err(usage_err)?;
        }
        months::all_inserted(month, inserted, records.len())?;
        execute(
            &tx,
            &sql::archived_month_delete_sql('$'),
            &[month_text.into()],
        )
        .await?;
        audited(&tx, audit, &restored).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn archived_months(&self) -> StoreResult<Vec<ArchivedMonth>> {
        let rows = self.query_rows(sql::ARCHIVED_TOTALS, &[]).await?;
        Ok(months::group_months(rows::all(rows, rows::archived_total)?))
    }

    async fn load_catalog(&self) -> StoreResult<CatalogRows> {
        let mut client = self.client().await?;
        // One snapshot for every table.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let [models, routes, profiles] = sql::catalog_selects();
        let rows = CatalogRows {
            models: select(&tx, &models, rows::model).await?,
            routes: select(&tx, &routes, rows::route).await?,
            profiles: select(&tx, &profiles, rows::profile).await?,
        };
        tx.commit().await?;
        Ok(rows)
    }

    async fn import_catalog(
        &self,
        rows: &CatalogRows,
        audit: Option<Audit<CatalogRows>>,
    ) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        import_rows(&tx, rows).await?;
        audited(&tx, audit, rows).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn catalog_is_empty(&self) -> StoreResult<bool> {
        let rows = self
            .query_rows("SELECT NOT EXISTS (SELECT 1 FROM models) AS empty", &[])
            .await?;
        match rows.first() {
            Some(r) => col(r, "empty"),
            None => Err(StoreError::Corrupt(
                "catalog_is_empty returned no row".to_owned(),
            )),
        }
    }

    async fn rename_workspace(
        &self,
        id: &str,
        name: &str,
        audit: Option<Audit<Workspace>>,
    ) -> StoreResult<Workspace> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let stmt = tx
            .prepare_cached(&format!(
                "UPDATE workspaces SET name = $2 WHERE id = $1 RETURNING {WORKSPACE_COLS}"
            ))
            .await?;
        let row = tx.query_opt(&stmt, &[&id, &name]).await?;
        let ws = row
            .as_ref()
            .map(rows::workspace)
            .transpose()?
            .ok_or_else(|| StoreError::no_workspace(id))?;
        audited(&tx, audit, &ws).await?;
        tx.commit().await?;
        Ok(ws)
    }

    async fn workspaces_page(
        &self,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<Workspace>> {
        self.page(Page::workspaces(after, limit), rows::workspace)
            .await
    }

    async fn keys_page(
        &self,
        workspace_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<ApiKey>> {
        self.page(Page::keys(workspace_id, after, limit), rows::api_key)
            .await
    }

    async fn set_key_expiry(&self, id: &str, expires_at: DateTime<Utc>) -> StoreResult<()> {
        let at = codec::trunc(expires_at);
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("UPDATE api_keys SET expires_at = $2 WHERE id = $1")
            .await?;
        match client.execute(&stmt, &[&id, &at]).await? {
            0 => Err(StoreError::NotFound(format!("key {id}"))),
            _ => Ok(()),
        }
    }

    async fn ledger_page(
        &self,
        workspace_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<LedgerEntry>> {
        self.page(Page::ledger(workspace_id, after, limit), rows::ledger_entry)
            .await
    }

    async fn usage_page(
        &self,
        workspace_id: &str,
        filter: &UsageFilter,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        self.page(Page::usage(workspace_id, filter, after, limit), rows::usage)
            .await
    }

    async fn usage_daily(
        &self,
        workspace_id: &str,
        from: chrono::NaiveDate,
        to: chrono::NaiveDate,
    ) -> StoreResult<Vec<DailyUsage>> {
        let (from, to) = (from.to_string(), to.to_string());
        let rows = self
            .query_rows(
                &format!(
                    "SELECT {DAILY_COLS} FROM usage_daily WHERE workspace_id = $1 \
                     AND day >= $2 AND day <= $3 ORDER BY day, model_id"
                ),
                &[&workspace_id, &from, &to],
            )
            .await?;
        rows::all(rows, rows::daily_usage)
    }

    async fn audit_page(
        &self,
        workspace_id: Option<&str>,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        self.page(Page::audit(workspace_id, after, limit), rows::audit_entry)
            .await
    }

    async fn put_alerts(
        &self,
        s: &AlertSettings,
        audit: Option<Audit<AlertSettings>>,
    ) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let upsert = sql::upsert_sql("alert_settings", ALERT_COLS, '$');
        execute(&tx, &upsert, &params::alert_settings(s))
            .await
            .map_err(|e| {
                if is_code(&e, &SqlState::FOREIGN_KEY_VIOLATION) {
                    StoreError::no_workspace(&s.workspace_id)
                } else {
                    pg_err(e)
                }
            })?;
        audited(&tx, audit, s).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn get_alerts(&self, workspace_id: &str) -> StoreResult<Option<AlertSettings>> {
        let rows = self
            .query_rows(
                &format!("SELECT {ALERT_COLS} FROM alert_settings WHERE workspace_id = $1"),
                &[&workspace_id],
            )
            .await?;
        rows.first().map(rows::alert_settings).transpose()
    }

    async fn all_alerts(&self) -> StoreResult<Vec<AlertSettings>> {
        let rows = self
            .query_rows(
                &format!("SELECT {ALERT_COLS} FROM alert_settings ORDER BY workspace_id"),
                &[],
            )
            .await?;
        rows::all(rows, rows::alert_settings)
    }

    async fn claim_alert(
        &self,
        workspace_id: &str,
        alert_key: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let at = codec::trunc(at);
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "INSERT INTO alert_claims (workspace_id, alert_key, claimed_at) \
                 VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .await?;
        Ok(client
            .execute(&stmt, &[&workspace_id, &alert_key, &at])
            .await?
            == 1)
    }

    async fn release_alert(&self, workspace_id: &str, alert_key: &str) -> StoreResult<bool> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("DELETE FROM alert_claims WHERE workspace_id = $1 AND alert_key = $2")
            .await?;
        Ok(client.execute(&stmt, &[&workspace_id, &alert_key]).await? == 1)
    }

    async fn record_delivery(&self, d: &Delivery) -> StoreResult<()> {
        let insert = sql::insert_sql("webhook_deliveries", DELIVERY_COLS, '$');
        execute(&self.client().await?, &insert, &params::delivery(d)).await?;
        Ok(())
    }

    async fn deliveries_page(
        &self,
        workspace_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<Delivery>> {
        self.page(Page::deliveries(workspace_id, after, limit), rows::delivery)
            .await
    }

    async fn create_session(
        &self,
        session: &ConsoleSession,
        audit: Option<Audit<ConsoleSession>>,
    ) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let insert = sql::insert_sql("console_sessions", SESSION_COLS, '$');
        execute(&tx, &insert, &params::console_session(session))
            .await
            .map_err(exists("console session".to_owned()))?;
        audited(&tx, audit, session).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn touch_session(
        &self,
        id_hash: &str,
        now: DateTime<Utc>,
        idle_since: DateTime<Utc>,
    ) -> StoreResult<Option<ConsoleSession>> {
        let args = [
            Param::from(id_hash),
            codec::trunc(now).into(),
            codec::trunc(idle_since).into(),
        ];
        let client = self.client().await?;
        let stmt = client.prepare_cached(&sql::session_touch_sql('$')).await?;
        let live = client.query_opt(&stmt, &refs(&args)).await?;
        if live.is_none() {
            execute(&client, SESSION_DELETE, &args[..1]).await?;
        }
        live.as_ref().map(rows::console_session).transpose()
    }

    async fn delete_session(&self, id_hash: &str) -> StoreResult<bool> {
        let client = self.client().await?;
        Ok(execute(&client, SESSION_DELETE, &[id_hash.into()]).await? > 0)
    }

    async fn purge_sessions(
        &self,
        now: DateTime<Utc>,
        idle_since: DateTime<Utc>,
        keep: usize,
    ) -> StoreResult<u64> {
        let ended = [
            Param::from(codec::trunc(now)),
            codec::trunc(idle_since).into(),
        ];
        let keep = [Param::from(i64::try_from(keep).unwrap_or(i64::MAX))];
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let expired = execute(&tx, &sql::sessions_purge_sql('$'), &ended).await?;
        let surplus = execute(&tx, &sql::sessions_cap_sql('$'), &keep).await?;
        tx.commit().await?;
        Ok(expired.saturating_add(surplus))
    }

    async fn keep_responses(&self, batch: &[StoredResponse]) -> StoreResult<u64> {
        let batch = params::response_batch(batch)?;
        if batch.is_empty() {
            return Ok(0);
        }
        let columns = columns(batch.iter().map(params::stored_response));
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let stmt = tx.prepare_cached(&insert_responses_sql()).await?;
        let new = tx
            .execute(&stmt, &refs(&columns))
            .await
            .map_err(|e| refused("response", e))?;
        tx.commit().await?;
        Ok(new)
    }

    async fn stored_response(
        &self,
        workspace_id: &str,
        id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<StoredResponse>> {
        let args = [
            Param::from(id),
            workspace_id.into(),
            codec::trunc(now).into(),
        ];
        let rows = self
            .query_rows(&sql::response_select_sql('$'), &refs(&args))
            .await?;
        rows.first().map(rows::stored_response).transpose()
    }

    async fn delete_response(&self, workspace_id: &str, id: &str) -> StoreResult<bool> {
        let args = [Param::from(id), workspace_id.into()];
        let client = self.client().await?;
        Ok(execute(&client, &sql::response_delete_sql('$'), &args).await? > 0)
    }

    async fn purge_responses(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let client = self.client().await?;
        let args = [Param::from(before), PURGE_CHUNK.into()];
        let mut purged = 0;
        loop {
            // A statement at a time: each holds its rows' locks briefly.
            let n = execute(&client, &sql::responses_purge_sql('$'), &args).await?;
            purged += n;
            if n < PURGE_CHUNK as u64 {
                return Ok(purged);
            }
        }
    }

    async fn changes_since(&self, after: i64) -> StoreResult<Vec<Change>> {
        let rows = self
            .query_rows(
                "SELECT seq, kind, ref_id FROM change_log WHERE seq > $1 ORDER BY seq",
                &[&after],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Change {
                    seq: col(r, "seq")?,
                    kind: codec::change_kind_from(col(r, "kind")?)?,
                    ref_id: col(r, "ref_id")?,
                })
            })
            .collect()
    }

    async fn prune_changes(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("DELETE FROM change_log WHERE created_at < $1")
            .await?;
        Ok(client.execute(&stmt, &[&before]).await?)
    }

    async fn latest_change(&self) -> StoreResult<i64> {
        let rows = self
            .query_rows(
                "SELECT COALESCE(MAX(seq), 0) AS latest FROM change_log",
                &[],
            )
            .await?;
        match rows.first() {
            Some(r) => col(r, "latest"),
            None => Err(StoreError::Corrupt(
                "latest_change returned no row".to_owned(),
            )),
        }
    }

    async fn wait_for_change(&self, max: Duration) {
        // Timing out is the normal "nothing happened" outcome.
        let _ = tokio::time::timeout(max, self.changed.notified()).await;
    }
}

#[cfg(test)]
mod plan_tests {
    //! What PostgreSQL plans for the queries that read the partitioned `usage_records`, on
    //! three months of records (10,000 each, ten workspaces), analysed: every partition a
    //! query reads is read through an index, and a lookup by id reads only the partitions of
    //! the time its id allows. Runs at `TOLLGATE_TEST_PG_URL` in a schema of its own. (The
    //! daily rollups read `usage_daily`, which is not partitioned: one primary-key range.)

    use super::*;
    use crate::store::sql::Page;

    const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

    /// The rows: `w0`…`w9` with a key each, and per month of August–October 2026, 10,000
    /// records (1 input token at 1 micro-USD per 1M: cost 1 pico-USD) spread over the month.
    const LOAD: &str = "
        INSERT INTO workspaces (id, name, created_at)
            SELECT 'w' || i, 'w', now() FROM generate_series(0, 9) i;
        INSERT INTO api_keys (id, workspace_id, secret_hash, hint, created_at)
            SELECT 'k' || i, 'w' || i, 'h' || i, 'h', now() FROM generate_series(0, 9) i;
        INSERT INTO usage_records (id, workspace_id, key_id, model_id, route, endpoint, stream,
            input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
            input_price_micro, output_price_micro, cost_pico, outcome, started_at, finished_at)
        SELECT 'chatcmpl-' || lpad(n::text, 8, '0'), 'w' || (n % 10), 'k' || (n % 10),
               'm' || (n % 3), 'r', 'chat', false, 1, 0, 0, 0, 0, 1, 0, 1, 'complete',
               t, t
        FROM generate_series(0, 29999) n,
             LATERAL (SELECT timestamptz '2026-08-01 00:00:00+00'
                             + (n / 10000) * interval '1 month'
                             + (n % 10000) * interval '4 minutes' AS t) at;
        ANALYZE usage_records;";

    async fn plan(client: &Client, sql: &str, args: &[Param<'_>]) -> Vec<String> {
        let rows = client
            .query(&format!("EXPLAIN {sql}"), &refs(args))
            .await
            .unwrap();
        rows.iter().map(|r| r.get::<_, String>(0)).collect()
    }

    /// No partition with rows is read whole; every scan of one uses an index. Returns the
    /// month partitions the plan reads.
    fn read_by_index(sql: &str, plan: &[String]) -> BTreeSet<String> {
        let mut months = BTreeSet::new();
        for line in plan {
            let Some(at) = line.find(" on usage_records_2026_") else {
                continue;
            };
            assert!(!line.contains("Seq Scan"), "{sql}\n{}", plan.join("\n"));
            assert!(line.contains("Index"), "{sql}\n{}", plan.join("\n"));
            let name = line[at + 4..].split_whitespace().next().unwrap_or("");
            months.insert(name.to_owned());
        }
        months
    }

    #[tokio::test]
    async fn every_query_of_the_records_reads_each_partition_by_an_index() {
        if std::env::var("TOLLGATE_SKIP_PG").as_deref() == Ok("1") {
            return;
        }
        let base = std::env::var("TOLLGATE_TEST_PG_URL").unwrap_or_else(|_| DEFAULT_URL.into());
        let (admin, conn) = tokio_postgres::connect(&base, NoTls).await.unwrap();
        #[expect(
            clippy::disallowed_methods,
            reason = "the test's admin connection, awaited at its end"
        )]
        let admin_conn = tokio::spawn(conn);
        let schema = format!("plan_{:016x}", rand::random::<u64>());
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
        let store = PgStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let start: DateTime<Utc> = "2026-08-01T00:00:00Z".parse().unwrap();
        store.ensure_usage_partitions(start, 2).await.unwrap();
        let client = store.client().await.unwrap();
        client.batch_execute(LOAD).await.unwrap();

        let cursor = Cursor {
            at: "2026-10-15T00:00:00Z".parse().unwrap(),
            id: "chatcmpl-00025000".into(),
        };
        let filters = [
            UsageFilter::default(),
            UsageFilter {
                key_id: Some("k3".into()),
                ..Default::default()
            },
            UsageFilter {
                model_id: Some("m1".into()),
                from: Some("2026-08-20T00:00:00Z".parse().unwrap()),
                to: Some("2026-10-10T00:00:00Z".parse().unwrap()),
                ..Default::default()
            },
        ];
        for f in &filters {
            for after in [None, Some(&cursor)] {
                let page = Page::usage("w3", f, after, 50);
                let sql = page.q.sql(|n| format!("${n}"));
                let read = read_by_index(&sql, &plan(&client, &sql, &page.args).await);
                assert!(!read.is_empty(), "{sql}");
            }
        }
        // /v1/generation: by id, within the time its id allows — one or two partitions.
        let sql = sql::usage_record_within_sql('$');
        let made: DateTime<Utc> = "2026-09-30T12:00:00Z".parse().unwrap();
        let args = [
            "chatcmpl-00019990".into(),
            "w0".into(),
            (made - chrono::TimeDelta::days(1)).into(),
            (made + chrono::TimeDelta::days(7)).into(),
        ];
        let read = read_by_index(&sql, &plan(&client, &sql, &args).await);
        assert_eq!(
            read.into_iter().collect::<Vec<_>>(),
            ["usage_records_2026_09", "usage_records_2026_10"]
        );
        // An archive's read of a month: that month's partition, by its primary key.
        let sql = sql::month_usage_sql('$');
        let sep: UsageMonth = "2026-09".parse().unwrap();
        let args = [
            sep.start().into(),
            sep.end().into(),
            "chatcmpl-00012000".into(),
            1000i64.into(),
        ];
        let read = read_by_index(&sql, &plan(&client, &sql, &args).await);
        assert_eq!(
            read.into_iter().collect::<Vec<_>>(),
            ["usage_records_2026_09"]
        );

        drop(client);
        drop(store);
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
        drop(admin);
        let _ = admin_conn.await;
    }
}
