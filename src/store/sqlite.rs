//! Embedded SQLite backend: a single-node gateway (or a developer's laptop) needs no
//! database server.
//!
//! rusqlite is synchronous, so the one connection sits behind a `Mutex` and every call runs
//! on tokio's blocking pool (`spawn_blocking`); the async runtime never waits on disk. Write
//! transactions start `IMMEDIATE`, so two processes sharing a file queue on `busy_timeout`
//! instead of failing mid-transaction. SQLite has no NOTIFY: `wait_for_change` sleeps briefly
//! and followers poll `changes_since`.
//!
//! `record_usage` runs a batch as one `IMMEDIATE` transaction of cached prepared statements:
//! a record whose id is already stored inserts nothing (`ON CONFLICT DO NOTHING`) and gets no
//! debit; balances, window spend and the daily rollup are then updated once per workspace,
//! per (key, window) and per (workspace, day, model), from the totals the shared `batch` code
//! sums over the records actually inserted.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{
    ffi, params, params_from_iter, Connection, OptionalExtension, Row, ToSql, Transaction,
    TransactionBehavior,
};

use super::batch::{self, BatchTotals, UsageBatch};
use super::codec;
use super::migrations::{self, Dialect};
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

/// How long a statement waits for another process's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `wait_for_change` sleeps: the polling period of a SQLite follower.
const POLL_PERIOD: Duration = Duration::from_millis(200);

pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Backend(format!("sqlite: {e}"))
    }
}

/// The extended result code of a failed statement, if it is an SQLite failure.
fn extended_code(e: &rusqlite::Error) -> Option<i32> {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.extended_code),
        _ => None,
    }
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(
        extended_code(e),
        Some(ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
    )
}

fn is_fk_violation(e: &rusqlite::Error) -> bool {
    extended_code(e) == Some(ffi::SQLITE_CONSTRAINT_FOREIGNKEY)
}

/// Maps an insert's error, a unique violation meaning that `what` already exists.
fn exists(what: String) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(format!("{what} already exists"))
        } else {
            e.into()
        }
    }
}

/// Maps an error of `record_usage`: a record the schema refuses (a CHECK such as the exact
/// cost, a key not in its workspace) is a `Conflict` / `NotFound` — retrying the same batch
/// cannot succeed — while anything else stays a (possibly transient) `Backend` error.
fn usage_err(e: rusqlite::Error) -> StoreError {
    refused("usage", e)
}

/// Maps an error of a batch of `what` as `usage_err` does.
fn refused(what: &str, e: rusqlite::Error) -> StoreError {
    match extended_code(&e) {
        Some(ffi::SQLITE_CONSTRAINT_FOREIGNKEY) => {
            StoreError::NotFound(format!("{what} batch refused: {e}"))
        }
        Some(
            ffi::SQLITE_CONSTRAINT_CHECK
            | ffi::SQLITE_CONSTRAINT_NOTNULL
            | ffi::SQLITE_CONSTRAINT_UNIQUE
            | ffi::SQLITE_CONSTRAINT_DATATYPE,
        ) => StoreError::Conflict(format!("{what} batch refused: {e}")),
        _ => e.into(),
    }
}

/// SQLite keeps times as microseconds since the epoch and booleans as integers.
impl DbRow for Row<'_> {
    fn text(&self, i: usize) -> StoreResult<String> {
        self.get(i).map_err(|e| corrupt(i, e))
    }
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
        self.get(i).map_err(|e| corrupt(i, e))
    }
    fn int(&self, i: usize) -> StoreResult<i64> {
        self.get(i).map_err(|e| corrupt(i, e))
    }
    fn opt_int(&self, i: usize) -> StoreResult<Option<i64>> {
        self.get(i).map_err(|e| corrupt(i, e))
    }
    fn int32(&self, i: usize) -> StoreResult<i32> {
        self.get(i).map_err(|e| corrupt(i, e))
    }
    fn flag(&self, i: usize) -> StoreResult<bool> {
        self.get(i).map_err(|e| corrupt(i, e))
    }
    fn time(&self, i: usize) -> StoreResult<DateTime<Utc>> {
        codec::from_micros(self.int(i)?)
    }
    fn opt_time(&self, i: usize) -> StoreResult<Option<DateTime<Utc>>> {
        self.opt_int(i)?.map(codec::from_micros).transpose()
    }
}

fn corrupt(i: usize, e: rusqlite::Error) -> StoreError {
    StoreError::Corrupt(format!("column {i}: {e}"))
}

/// SQLite binds times as microseconds since the epoch and flags as integers.
impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        let int = |n: i64| ToSqlOutput::Owned(SqlValue::Integer(n));
        Ok(match self {
            Param::Null => ToSqlOutput::Owned(SqlValue::Null),
            Param::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Param::Int(n) => int(*n),
            Param::Int32(n) => int(i64::from(*n)),
            Param::Count32(n) => int(i64::from(*n)),
            Param::Flag(b) => int(i64::from(*b)),
            Param::Time(t) => int(codec::to_micros(*t)),
        })
    }
}

/// Executes the cached statement `sql` with `params`; returns the number of rows changed.
fn execute(conn: &Connection, sql: &str, params: &[Param<'_>]) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params_from_iter(params))
}

/// Runs `sql` with `params` and converts every row with `f`.
fn query_all<T, P: rusqlite::Params>(
    conn: &Connection,
    sql: &str,
    params: P,
    f: impl Fn(&Row<'_>) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(f(row)?);
    }
    Ok(out)
}

/// Runs a newest-first page query.
fn page_in<T>(
    conn: &Connection,
    page: &Page<'_>,
    f: impl Fn(&Row<'_>) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let sql = page.q.sql(|n| format!("?{n}"));
    query_all(conn, &sql, params_from_iter(&page.args), f)
}

fn workspace_exists(conn: &Connection, id: &str) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM workspaces WHERE id = ?1")?
        .query_row([id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Applies the pending migrations, each in its own transaction (foreign keys already off):
/// a migration that leaves a dangling reference is refused before it commits.
fn apply_migrations(conn: &mut Connection) -> StoreResult<usize> {
    let mut applied = 0;
    for m in migrations::migrations(Dialect::Sqlite) {
        let tx = write_tx(conn)?;
        tx.execute_batch(migrations::SQLITE_SCHEMA_MIGRATIONS)?;
        let done = tx
            .query_row(
                "SELECT 1 FROM schema_migrations WHERE version = ?1",
                [m.version],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if done {
            continue;
        }
        let failed =
            |e: String| StoreError::Backend(format!("migration {:04}_{}: {e}", m.version, m.name));
        tx.execute_batch(m.sql).map_err(|e| failed(e.to_string()))?;
        let dangling = tx
            .query_row("PRAGMA foreign_key_check", [], |r| r.get::<_, String>(0))
            .optional()?;
        if let Some(table) = dangling {
            return Err(failed(format!("leaves a dangling foreign key in {table}")));
        }
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            params![m.version, m.name, codec::to_micros(codec::now())],
        )?;
        tx.commit()?;
        applied += 1;
    }
    Ok(applied)
}

fn write_tx(conn: &mut Connection) -> StoreResult<Transaction<'_>> {
    Ok(conn.transaction_with_behavior(TransactionBehavior::Immediate)?)
}

/// Inserts a new key (its workspace must exist).
fn insert_key(tx: &Connection, out: &ApiKey) -> StoreResult<()> {
    if !workspace_exists(tx, &out.workspace_id)? {
        return Err(StoreError::no_workspace(&out.workspace_id));
    }
    let insert = sql::insert_sql("api_keys", KEY_COLS, '?');
    execute(tx, &insert, &params::api_key(out)?).map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::duplicate_key(out, e.to_string().contains("secret_hash"))
        } else if is_fk_violation(&e) {
            StoreError::no_workspace(&out.workspace_id)
        } else {
            e.into()
        }
    })?;
    Ok(())
}

fn key_in(conn: &Connection, id: &str) -> StoreResult<Option<ApiKey>> {
    let found = query_all(
        conn,
        &format!("SELECT {KEY_COLS} FROM api_keys WHERE id = ?1"),
        [id],
        |r| rows::api_key(r),
    )?;
    Ok(found.into_iter().next())
}

/// The management key whose `column` (`id` or `secret_hash`) is `value`.
fn management_key_in(
    conn: &Connection,
    column: &str,
    value: &str,
) -> StoreResult<Option<ManagementKey>> {
    let found = query_all(conn, &sql::management_key_sql(column, '?'), [value], |r| {
        rows::management_key(r)
    })?;
    Ok(found.into_iter().next())
}

fn insert_audit(conn: &Connection, e: &AuditEntry) -> StoreResult<()> {
    let insert = sql::insert_sql("audit_log", AUDIT_COLS, '?');
    execute(conn, &insert, &params::audit_entry(e))?;
    Ok(())
}

/// Appends the audit entry of what `tx` just made, when the change is audited: inside the
/// change's transaction, so both commit or neither.
fn audited<T>(tx: &Transaction<'_>, audit: Option<Audit<T>>, made: &T) -> StoreResult<()> {
    audit.map_or(Ok(()), |audit| insert_audit(tx, &audit(made)))
}

/// The workspace's balance row (zeros when it has none).
fn balance_row_in(conn: &Connection, workspace_id: &str) -> StoreResult<BalanceRow> {
    let found = query_all(conn, &sql::balance_row_sql('?'), [workspace_id], |r| {
        rows::balance_row(r, 0)
    })?;
    Ok(found.into_iter().next().unwrap_or_default())
}

/// Claims `key` inside `tx`, the keys expired by its time deleted first: `None` when it is
/// this transaction's now, else what the request it is held for answered (`held_key`).
/// SQLite's writers are serialised, so no other claim is in progress meanwhile.
fn claim<T>(tx: &Connection, key: &IdempotencyKey) -> StoreResult<Option<Done<T>>> {
    let now = [Param::from(codec::trunc(key.created_at))];
    execute(tx, &sql::idempotency_purge_sql('?'), &now)?;
    let claimed = execute(
        tx,
        &sql::idempotency_claim_sql('?'),
        &params::idempotency_claim(key),
    )
    .map_err(|e| refused("idempotency key", e))?;
    if claimed == 1 {
        return Ok(None);
    }
    let held = query_all(
        tx,
        &sql::idempotency_held_sql('?'),
        params![key.workspace_id, key.operation, key.key],
        |r| rows::held_key(r, key),
    )?;
    held.into_iter().next().map(Some).ok_or_else(|| {
        StoreError::Corrupt(format!(
            "idempotency key {:?} neither claimed nor held",
            key.key
        ))
    })
}

/// Moves the balance row and its credited total by `m` (an entry already written in `tx`);
/// returns the balance it left, or refuses the movement (see `Store::move_credit`).
fn move_balance(tx: &Connection, m: &CreditMovement) -> StoreResult<Usd> {
    let args = [Param::from(&m.workspace_id), m.amount.pico().into()];
    let sql = match m.kind {
        LedgerKind::Refund => sql::refund_balance_sql('?'),
        _ => sql::credit_balance_sql('?'),
    };
    let balance: Option<i64> = tx
        .prepare_cached(&sql)?
        .query_row(params_from_iter(&args), |r| r.get(0))
        .optional()?;
    match (balance, m.kind) {
        (Some(balance), _) => Ok(Usd::from_pico(balance)),
        (None, LedgerKind::Refund) => {
            let now = balance_row_in(tx, &m.workspace_id)?.balance;
            Err(StoreError::refund_over_balance(
                &m.workspace_id,
                m.amount,
                now,
            ))
        }
        (None, _) => Err(StoreError::balance_overflow(&m.workspace_id, m.amount)),
    }
}

/// Deletes a console session (parameter: id_hash).
const SESSION_DELETE: &str = "DELETE FROM console_sessions WHERE id_hash = ?1";

/// A usage record's ledger debit (parameters: `batch::debit`).
const INSERT_DEBIT: &str = "INSERT INTO ledger_entries
    (id, workspace_id, kind, amount_pico, note, created_at, usage_id)
    VALUES (?1, ?2, 'debit', ?3, NULL, ?4, ?5)";

/// Adds a balance change to its workspace's row (creating it). STRICT tables: an overflowing
/// sum (which SQLite turns into a REAL) is refused.
const ADD_BALANCE: &str = "INSERT INTO balances (workspace_id, balance_pico) VALUES (?1, ?2)
    ON CONFLICT (workspace_id) DO UPDATE
    SET balance_pico = balances.balance_pico + excluded.balance_pico";

const ADD_KEY_SPEND: &str = "INSERT INTO key_spend (key_id, window_start, spend_pico)
    VALUES (?1, ?2, ?3)
    ON CONFLICT (key_id, window_start) DO UPDATE
    SET spend_pico = key_spend.spend_pico + excluded.spend_pico";

const ADD_DAILY: &str = "INSERT INTO usage_daily (workspace_id, day, model_id, requests,
    input_tokens, output_tokens, cost_pico) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
    ON CONFLICT (workspace_id, day, model_id) DO UPDATE SET
    requests = requests + excluded.requests,
    input_tokens = input_tokens + excluded.input_tokens,
    output_tokens = output_tokens + excluded.output_tokens,
    cost_pico = cost_pico + excluded.cost_pico";

/// A usage record, unless its id is stored already (parameters: `UsageBatch::rows`). Built
/// once: formatting it took about forty `format!`s, paid by every batch the writer commits.
static INSERT_USAGE: LazyLock<String> = LazyLock::new(|| {
    let insert = sql::insert_sql("usage_records", USAGE_COLS, '?');
    format!("{insert} ON CONFLICT (id) DO NOTHING")
});

/// A kept Responses answer, unless its id is stored already (parameters:
/// `params::stored_response`); built once, as [`INSERT_USAGE`].
static KEEP_RESPONSE: LazyLock<String> = LazyLock::new(|| {
    let insert = sql::insert_sql("responses", RESPONSE_COLS, '?');
    format!("{insert} ON CONFLICT (id) DO NOTHING")
});

/// `record_usage`'s first step: each record not yet stored, with its debit. The id's UNIQUE
/// index is the idempotency guard: a stored id inserts nothing and is not debited. Returns
/// the ids newly stored.
fn insert_usage<'b>(tx: &Connection, batch: &'b UsageBatch) -> StoreResult<HashSet<&'b str>> {
    let mut insert = tx.prepare_cached(&INSERT_USAGE)?;
    let mut debit = tx.prepare_cached(INSERT_DEBIT)?;
    let mut new = HashSet::new();
    for (r, row) in batch.rows() {
        if insert.execute(params_from_iter(&row)).map_err(usage_err)? == 0 {
            continue;
        }
        debit
            .execute(params_from_iter(&batch::debit(r)))
            .map_err(usage_err)?;
        new.insert(r.id.as_str());
    }
    Ok(new)
}

/// A key's spend changed (parameter: its id): followers re-read its window spend.
const LOG_SPEND: &str = "INSERT INTO change_log (kind, ref_id) VALUES ('spend', ?1)";

/// `record_usage`'s last steps: the balances, the window spend, the daily rollup and the
/// change feed's `spend` rows, a statement per row of the batch's totals. One `spend` row per
/// key and batch, as PostgreSQL's statement trigger writes (SQLite's triggers run per row:
/// the one it had wrote a row per record, about a tenth of the writer's work).
fn apply_totals(tx: &Connection, totals: &BatchTotals) -> StoreResult<()> {
    for_each_row(tx, ADD_BALANCE, totals.balances())?;
    for_each_row(tx, ADD_KEY_SPEND, totals.key_spends())?;
    for_each_row(tx, ADD_DAILY, totals.daily())?;
    for_each_row(tx, LOG_SPEND, totals.spent_keys())
}

/// Executes the cached statement `sql` once for each of `rows`.
fn for_each_row<'p, const N: usize>(
    tx: &Connection,
    sql: &str,
    rows: impl Iterator<Item = [Param<'p>; N]>,
) -> StoreResult<()> {
    let mut stmt = tx.prepare_cached(sql)?;
    for row in rows {
        stmt.execute(params_from_iter(&row)).map_err(usage_err)?;
    }
    Ok(())
}

/// The months before a time (parameter: its microseconds) that hold records, oldest first.
const USAGE_MONTHS: &str = "SELECT DISTINCT strftime('%Y-%m', finished_at / 1000000, 'unixepoch') \
     FROM usage_records WHERE finished_at < ?1 ORDER BY 1";

/// An archived month's records (parameters: its start and end), deleted by its archive only.
const DELETE_MONTH: &str = "DELETE FROM usage_records WHERE finished_at >= ?1 AND finished_at < ?2";

/// The append-only trigger of `usage_records` as the migrations make it, made again by an
/// archive once it has deleted a month.
const USAGE_NO_DELETE: &str =
    "CREATE TRIGGER usage_records_no_delete BEFORE DELETE ON usage_records
BEGIN
    SELECT RAISE(ABORT, 'usage_records is append-only: DELETE refused');
END;";

/// Per-workspace count and cost of a month's records, in workspace byte order, each sum from
/// its two halves (see `LEDGER_VERIFY`).
fn month_totals_in(conn: &Connection, month: UsageMonth) -> StoreResult<Vec<MonthTotal>> {
    let bounds: [Param<'_>; 2] = [month.start().into(), month.end().into()];
    query_all(
        conn,
        "SELECT workspace_id, COUNT(*), SUM(cost_pico >> 32), SUM(cost_pico & 4294967295) \
         FROM usage_records WHERE finished_at >= ?1 AND finished_at < ?2 \
         GROUP BY workspace_id ORDER BY workspace_id",
        params_from_iter(&bounds),
        |r| {
            let workspace_id: String = r.get(0)?;
            let what = format!("{month} cost of {workspace_id}");
            Ok(MonthTotal {
                records: codec::count_from_db("records", r.get(1)?)?,
                cost: codec::sum_from_parts(&what, r.get(2)?, r.get(3)?)?,
                workspace_id,
            })
        },
    )
}

/// Every workspace's books in one statement, one snapshot. SQLite's SUM over INTEGER raises
/// "integer overflow" as soon as a running total leaves i64 (it never silently turns REAL
/// here: the STRICT columns hold only integers), even when the final sum would fit. So every
/// sum is taken in two exact halves, x >> 32 and x & 0xFFFFFFFF, recombined in i128.
const LEDGER_VERIFY: &str = "SELECT w.id,
           COALESCE(b.balance_pico, 0),
           COALESCE(b.credited_pico, 0),
           COALESCE(l.hi, 0), COALESCE(l.lo, 0),
           COALESCE(l.debit_hi, 0), COALESCE(l.debit_lo, 0),
           COALESCE(u.hi, 0), COALESCE(u.lo, 0)
    FROM workspaces w
    LEFT JOIN balances b ON b.workspace_id = w.id
    LEFT JOIN (SELECT workspace_id,
                      SUM(amount_pico >> 32) AS hi,
                      SUM(amount_pico & 4294967295) AS lo,
                      SUM(CASE WHEN kind = 'debit' THEN amount_pico >> 32 END)
                          AS debit_hi,
                      SUM(CASE WHEN kind = 'debit' THEN amount_pico & 4294967295 END)
                          AS debit_lo
               FROM ledger_entries GROUP BY workspace_id) l
           ON l.workspace_id = w.id
    LEFT JOIN (SELECT workspace_id, SUM(hi) AS hi, SUM(lo) AS lo
               FROM (SELECT workspace_id,
                            SUM(cost_pico >> 32) AS hi,
                            SUM(cost_pico & 4294967295) AS lo
                     FROM usage_records GROUP BY workspace_id
                     UNION ALL
                     SELECT workspace_id,
                            SUM(cost_pico >> 32) AS hi,
                            SUM(cost_pico & 4294967295) AS lo
                     FROM archived_totals GROUP BY workspace_id)
               GROUP BY workspace_id) u
           ON u.workspace_id = w.id
    ORDER BY w.id";

/// A row of `LEDGER_VERIFY`: each sum from its two halves.
fn ledger_check(r: &Row<'_>) -> StoreResult<LedgerCheck> {
    let workspace_id: String = r.get(0)?;
    let sum = |name: &str, hi: usize| {
        codec::sum_from_parts(
            &format!("{name} of {workspace_id}"),
            r.get(hi)?,
            r.get(hi + 1)?,
        )
    };
    Ok(LedgerCheck {
        balance_row: Usd::from_pico(r.get(1)?),
        credited_row: Usd::from_pico(r.get(2)?),
        ledger_sum: sum("ledger_sum", 3)?,
        debit_sum: sum("debit_sum", 5)?,
        usage_cost_sum: sum("usage_cost_sum", 7)?,
        workspace_id,
    })
}

/// `import_catalog`'s writes: profiles and models upserted, then the routes of every model
/// named replaced.
fn import_rows(tx: &Connection, rows: &CatalogRows) -> StoreResult<()> {
    let profile = sql::upsert_sql("profiles", PROFILE_COLS, '?');
    for p in &rows.profiles {
        execute(tx, &profile, &params::profile(p))?;
    }
    let model = sql::upsert_sql("models", MODEL_COLS, '?');
    for m in &rows.models {
        execute(tx, &model, &params::model(m)?)
            .map_err(|e| StoreError::Backend(format!("model {}: {e}", m.id)))?;
    }
    for id in params::catalog_model_ids(rows) {
        execute(tx, "DELETE FROM routes WHERE model_id = ?1", &[id.into()])?;
    }
    let route = sql::insert_sql("routes", ROUTE_COLS, '?');
    for r in &rows.routes {
        execute(tx, &route, &params::route(r)).map_err(|e| {
            if is_fk_violation(&e) {
                StoreError::NotFound(format!("model {} (named by a route)", r.model_id))
            } else {
                StoreError::Backend(format!("route of {}: {e}", r.model_id))
            }
        })?;
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if missing, with its parent directories) the database at `path`, or a
    /// private in-memory database for `:memory:`. Does not migrate: call `migrate()`.
    pub fn open(path: &str) -> StoreResult<Self> {
        if path.is_empty() {
            return Err(StoreError::BadUrl("sqlite://".to_owned()));
        }
        let in_memory = path == ":memory:";
        if !in_memory {
            if let Some(parent) = Path::new(path).parent() {
                if !parent.as_os_str().is_empty() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        StoreError::Backend(format!("creating {}: {e}", parent.display()))
                    })?;
                }
            }
        }
        let conn = Connection::open(path)
            .map_err(|e| StoreError::Backend(format!("opening sqlite database {path}: {e}")))?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        let fk: bool = conn.pragma_query_value(None, "foreign_keys", |r| r.get(0))?;
        if !fk {
            return Err(StoreError::Backend(
                "this SQLite build cannot enforce foreign keys".to_owned(),
            ));
        }
        if !in_memory {
            let mode: String =
                conn.pragma_update_and_check(None, "journal_mode", "wal", |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(path, mode, "sqlite: WAL journal mode unavailable");
            }
        }
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn run<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            // A panic inside `f` rolled its transaction back on unwind; the connection is
            // still usable, so a poisoned lock is not fatal.
            let mut guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("sqlite worker: {e}")))?
    }

    /// Executes one raw SQL statement; returns the number of rows changed. For tests that
    /// check what the schema itself refuses.
    #[doc(hidden)]
    pub async fn execute_raw(&self, sql: &str) -> StoreResult<u64> {
        let sql = sql.to_owned();
        self.run(move |conn| Ok(conn.execute(&sql, [])? as u64))
            .await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn migrate(&self) -> StoreResult<usize> {
        self.run(|conn| {
            // A migration may rebuild a table (SQLite's only way to change a constraint):
            // foreign keys are off while it runs and checked before it commits.
            conn.pragma_update(None, "foreign_keys", false)?;
            let applied = apply_migrations(conn);
            conn.pragma_update(None, "foreign_keys", true)?;
            applied
        })
        .await
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
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let insert = sql::insert_sql("workspaces", WORKSPACE_COLS, '?');
            execute(&tx, &insert, &params::workspace(&ws))
                .map_err(exists(format!("workspace {}", ws.id)))?;
            audited(&tx, audit, &ws)?;
            tx.commit()?;
            Ok(ws)
        })
        .await
    }

    async fn list_workspaces(&self) -> StoreResult<Vec<Workspace>> {
        self.run(|conn| {
            query_all(
                conn,
                &format!("SELECT {WORKSPACE_COLS} FROM workspaces ORDER BY created_at, id"),
                [],
                |r| rows::workspace(r),
            )
        })
        .await
    }

    async fn get_workspace(&self, id: &str) -> StoreResult<Option<Workspace>> {
        let id = id.to_owned();
        self.run(move |conn| {
            let found = query_all(
                conn,
                &format!("SELECT {WORKSPACE_COLS} FROM workspaces WHERE id = ?1"),
                [&id],
                |r| rows::workspace(r),
            )?;
            Ok(found.into_iter().next())
        })
        .await
    }

    async fn create_key(&self, key: NewKey, audit: Option<Audit<ApiKey>>) -> StoreResult<ApiKey> {
        let out = params::new_api_key(key);
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            insert_key(&tx, &out)?;
            audited(&tx, audit, &out)?;
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn get_key(&self, id: &str) -> StoreResult<Option<ApiKey>> {
        let id = id.to_owned();
        self.run(move |conn| key_in(conn, &id)).await
    }

    async fn list_keys(&self, workspace_id: &str) -> StoreResult<Vec<ApiKey>> {
        let ws = workspace_id.to_owned();
        self.run(move |conn| {
            query_all(
                conn,
                &format!(
                    "SELECT {KEY_COLS} FROM api_keys WHERE workspace_id = ?1 ORDER BY created_at, id"
                ),
                [&ws],
                |r| rows::api_key(r),
            )
        })
        .await
    }

    async fn all_keys(&self) -> StoreResult<Vec<ApiKey>> {
        self.run(|conn| {
            query_all(
                conn,
                &format!("SELECT {KEY_COLS} FROM api_keys ORDER BY created_at, id"),
                [],
                |r| rows::api_key(r),
            )
        })
        .await
    }

    async fn revoke_key(
        &self,
        id: &str,
        at: DateTime<Utc>,
        audit: Option<Audit<ApiKey>>,
    ) -> StoreResult<bool> {
        let id = id.to_owned();
        let at = codec::to_micros(codec::trunc(at));
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let changed = tx
                .prepare_cached(
                    "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                )?
                .execute(params![id, at])?;
            if changed == 0 {
                let exists = tx
                    .prepare_cached("SELECT 1 FROM api_keys WHERE id = ?1")?
                    .query_row([&id], |_| Ok(()))
                    .optional()?
                    .is_some();
                return if exists {
                    Ok(false)
                } else {
                    Err(StoreError::NotFound(format!("key {id}")))
                };
            }
            if audit.is_some() {
                let revoked =
                    key_in(&tx, &id)?.ok_or_else(|| StoreError::NotFound(format!("key {id}")))?;
                audited(&tx, audit, &revoked)?;
            }
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn rotate_key(&self, rotation: &KeyRotation) -> StoreResult<(ApiKey, ApiKey)> {
        let r = rotation.clone();
        let new = params::new_api_key(r.new.clone());
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            insert_key(&tx, &new)?;
            let old = query_all(
                &tx,
                &sql::rotate_old_sql('?'),
                params![
                    r.old_id,
                    new.id,
                    r.old_revoked_at.map(|t| codec::to_micros(codec::trunc(t))),
                    r.old_expires_at.map(|t| codec::to_micros(codec::trunc(t))),
                    codec::to_micros(r.now),
                ],
                |row| rows::api_key(row),
            )?;
            // Nothing changed: dropping `tx` rolls the new key back.
            let Some(old) = old.into_iter().next() else {
                return Err(StoreError::rotation_refused(
                    &r.old_id,
                    key_in(&tx, &r.old_id)?,
                ));
            };
            insert_audit(&tx, &r.audit)?;
            tx.commit()?;
            Ok((new, old))
        })
        .await
    }

    async fn update_key(
        &self,
        id: &str,
        update: &KeyUpdate,
        audit: Option<Audit<ApiKey>>,
    ) -> StoreResult<ApiKey> {
        let values: Vec<Param<'static>> = params::key_update(id, update)?
            .into_iter()
            .map(Param::into_owned)
            .collect();
        let id = id.to_owned();
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let found = query_all(
                &tx,
                &sql::key_update_sql('?'),
                params_from_iter(&values),
                |r| rows::api_key(r),
            )?;
            let key = found
                .into_iter()
                .next()
                .ok_or_else(|| StoreError::NotFound(format!("key {id}")))?;
            audited(&tx, audit, &key)?;
            tx.commit()?;
            Ok(key)
        })
        .await
    }

    async fn create_management_key(
        &self,
        key: &ManagementKey,
        audit: Option<Audit<ManagementKey>>,
    ) -> StoreResult<ManagementKey> {
        let out = params::stored_management_key(key);
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            if !workspace_exists(&tx, &out.workspace_id)? {
                return Err(StoreError::no_workspace(&out.workspace_id));
            }
            let insert = sql::insert_sql("management_keys", MANAGEMENT_KEY_COLS, '?');
            execute(&tx, &insert, &params::management_key(&out))
                .map_err(exists(format!("management key {}", out.id)))?;
            audited(&tx, audit, &out)?;
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn management_key(&self, id: &str) -> StoreResult<Option<ManagementKey>> {
        let id = id.to_owned();
        self.run(move |conn| management_key_in(conn, "id", &id))
            .await
    }

    async fn management_key_by_hash(
        &self,
        secret_hash: &str,
    ) -> StoreResult<Option<ManagementKey>> {
        let hash = secret_hash.to_owned();
        self.run(move |conn| management_key_in(conn, "secret_hash", &hash))
            .await
    }

    async fn management_keys(&self, workspace_id: &str) -> StoreResult<Vec<ManagementKey>> {
        let ws = workspace_id.to_owned();
        self.run(move |conn| {
            query_all(conn, &sql::management_keys_sql('?'), [&ws], |r| {
                rows::management_key(r)
            })
        })
        .await
    }

    async fn revoke_management_key(
        &self,
        id: &str,
        at: DateTime<Utc>,
        audit: Option<Audit<ManagementKey>>,
    ) -> StoreResult<bool> {
        let id = id.to_owned();
        let at = codec::to_micros(codec::trunc(at));
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let revoked = query_all(
                &tx,
                &sql::management_revoke_sql('?'),
                params![id, at],
                |r| rows::management_key(r),
            )?;
            let Some(revoked) = revoked.into_iter().next() else {
                return match management_key_in(&tx, "id", &id)? {
                    Some(_) => Ok(false),
                    None => Err(StoreError::NotFound(format!("management key {id}"))),
                };
            };
            audited(&tx, audit, &revoked)?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn move_credit(
        &self,
        movement: &CreditMovement,
        audit: Option<Audit<(LedgerEntry, Usd)>>,
        once: Option<Once<(LedgerEntry, Usd)>>,
    ) -> StoreResult<Done<(LedgerEntry, Usd)>> {
        let entry = params::movement_entry(movement)?;
        let movement = movement.clone();
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            if !workspace_exists(&tx, &entry.workspace_id)? {
                return Err(StoreError::no_workspace(&entry.workspace_id));
            }
            if let Some(once) = &once {
                if let Some(held) = claim(&tx, &once.key)? {
                    return Ok(held); // dropping `tx` writes nothing
                }
            }
            let insert = sql::insert_sql("ledger_entries", LEDGER_COLS, '?');
            execute(&tx, &insert, &params::ledger_entry(&entry))
                .map_err(exists(format!("ledger entry {}", entry.id)))?;
            let balance = move_balance(&tx, &movement)?;
            let made = (entry, balance);
            audited(&tx, audit, &made)?;
            if let Some(once) = once {
                let args = params::idempotency_answer(&once.key, (once.answer)(&made));
                execute(&tx, &sql::idempotency_answer_sql('?'), &args)?;
            }
            tx.commit()?;
            Ok(Done::Made(made))
        })
        .await
    }

    async fn balance_row(&self, workspace_id: &str) -> StoreResult<BalanceRow> {
        let ws = workspace_id.to_owned();
        self.run(move |conn| balance_row_in(conn, &ws)).await
    }

    async fn ledger(&self, workspace_id: &str) -> StoreResult<Vec<LedgerEntry>> {
        let ws = workspace_id.to_owned();
        self.run(move |conn| {
            query_all(
                conn,
                &format!(
                    "SELECT {LEDGER_COLS}, usage_id FROM ledger_entries WHERE workspace_id = ?1
                     ORDER BY created_at, seq"
                ),
                [&ws],
                |r| rows::ledger_entry(r),
            )
        })
        .await
    }

    async fn record_usage(&self, batch: &[UsageRecord]) -> StoreResult<u64> {
        let batch = UsageBatch::prepare(batch)?;
        if batch.is_empty() {
            return Ok(0);
        }
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let new = insert_usage(&tx, &batch)?;
            apply_totals(&tx, &batch.totals(|id| new.contains(id))?)?;
            let applied = new.len() as u64;
            tx.commit()?;
            Ok(applied)
        })
        .await
    }

    async fn usage(
        &self,
        workspace_id: &str,
        since: Option<DateTime<Utc>>,
    ) -> StoreResult<Vec<UsageRecord>> {
        let ws = workspace_id.to_owned();
        let since = since.map(|t| codec::to_micros(codec::trunc(t)));
        self.run(move |conn| {
            query_all(
                conn,
                &format!(
                    "SELECT {USAGE_COLS} FROM usage_records
                     WHERE workspace_id = ?1 AND (?2 IS NULL OR finished_at >= ?2)
                     ORDER BY finished_at, id"
                ),
                params![ws, since],
                |r| rows::usage(r),
            )
        })
        .await
    }

    async fn usage_record_within(
        &self,
        workspace_id: &str,
        id: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> StoreResult<Option<UsageRecord>> {
        let args: [Param<'static>; 4] = [
            id.to_owned().into(),
            workspace_id.to_owned().into(),
            from.into(),
            to.into(),
        ];
        let found = self
            .run(move |conn| {
                query_all(
                    conn,
                    &sql::usage_record_within_sql('?'),
                    params_from_iter(&args),
                    |r| rows::usage(r),
                )
            })
            .await?;
        Ok(found.into_iter().next())
    }

    async fn usage_record(&self, workspace_id: &str, id: &str) -> StoreResult<Option<UsageRecord>> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        let found = self
            .run(move |conn| {
                query_all(
                    conn,
                    &format!(
                        "SELECT {USAGE_COLS} FROM usage_records WHERE id = ?1 AND workspace_id = ?2"
                    ),
                    params![id, ws],
                    |r| rows::usage(r),
                )
            })
            .await?;
        Ok(found.into_iter().next())
    }

    async fn balance_rows(&self) -> StoreResult<Vec<(String, BalanceRow)>> {
        self.run(|conn| {
            query_all(conn, sql::BALANCE_ROWS, [], |r| {
                Ok((r.get(0)?, rows::balance_row(r, 1)?))
            })
        })
        .await
    }

    async fn key_spends(
        &self,
        since_window_starts: &[(String, DateTime<Utc>)],
    ) -> StoreResult<Vec<(String, Usd)>> {
        let wanted: Vec<(String, i64)> = since_window_starts
            .iter()
            .map(|(k, w)| (k.clone(), codec::to_micros(codec::trunc(*w))))
            .collect();
        self.run(move |conn| {
            // One read transaction: every answer from the same snapshot.
            let tx = conn.transaction()?;
            let mut out = Vec::with_capacity(wanted.len());
            {
                let mut stmt = tx.prepare_cached(
                    "SELECT spend_pico FROM key_spend WHERE key_id = ?1 AND window_start = ?2",
                )?;
                for (key, start) in wanted {
                    let spend: Option<i64> = stmt
                        .query_row(params![key, start], |r| r.get(0))
                        .optional()?;
                    out.push((key, Usd::from_pico(spend.unwrap_or(0))));
                }
            }
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn ledger_verify(&self) -> StoreResult<Vec<LedgerCheck>> {
        self.run(|conn| query_all(conn, LEDGER_VERIFY, [], ledger_check))
            .await
    }

    async fn ensure_usage_partitions(&self, _at: DateTime<Utc>, _ahead: u32) -> StoreResult<u32> {
        Ok(0)
    }

    async fn default_partition_records(&self) -> StoreResult<u64> {
        Ok(0)
    }

    async fn usage_months(&self, before: UsageMonth) -> StoreResult<Vec<UsageMonth>> {
        let before = codec::to_micros(before.start());
        self.run(move |conn| {
            let texts = query_all(conn, USAGE_MONTHS, [before], |r| Ok(r.get::<_, String>(0)?))?;
            texts
                .iter()
                .map(|t| t.parse().map_err(|e| StoreError::Corrupt(format!("{e}"))))
                .collect()
        })
        .await
    }

    async fn month_usage_page(
        &self,
        month: UsageMonth,
        after_id: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        let args: [Param<'static>; 4] = [
            month.start().into(),
            month.end().into(),
            after_id.unwrap_or("").to_owned().into(),
            i64::try_from(limit).unwrap_or(i64::MAX).into(),
        ];
        self.run(move |conn| {
            query_all(
                conn,
                &sql::month_usage_sql('?'),
                params_from_iter(&args),
                |r| rows::usage(r),
            )
        })
        .await
    }

    async fn archive_usage_month(
        &self,
        archived: &ArchivedMonth,
        at: DateTime<Utc>,
        audit: Option<Audit<ArchivedMonth>>,
    ) -> StoreResult<()> {
        months::not_current(archived.month, at)?;
        let archived = archived.clone();
        self.run(move |conn| {
            let month = archived.month;
            let tx = write_tx(conn)?;
            let found = month_totals_in(&tx, month)?;
            months::same_totals("usage records", month, &archived.totals, &found)?;
            let insert = sql::archived_total_insert_sql('?');
            for t in &archived.totals {
                execute(&tx, &insert, &params::archived_total(month, t, at)?)?;
            }
            // The one way around the append-only trigger: lifted and made again inside this
            // transaction, so no other statement ever runs without it.
            tx.execute_batch("DROP TRIGGER usage_records_no_delete")?;
            let bounds: [Param<'_>; 2] = [month.start().into(), month.end().into()];
            execute(&tx, DELETE_MONTH, &bounds)?;
            tx.execute_batch(USAGE_NO_DELETE)?;
            audited(&tx, audit, &archived)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn restore_usage_month(
        &self,
        month: UsageMonth,
        records: &[UsageRecord],
        audit: Option<Audit<ArchivedMonth>>,
    ) -> StoreResult<u64> {
        let restored = months::restored(month, records)?;
        let records = records.to_vec();
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let month_text = month.to_string();
            let carried = query_all(&tx, &sql::archived_month_sql('?'), [&month_text], |r| {
                rows::archived_total(r)
            })?;
            let carried: Vec<MonthTotal> = carried.into_iter().map(|(_, t)| t).collect();
            months::same_totals("carried-forward totals", month, &restored.totals, &carried)?;
            let batch = UsageBatch::prepare(&records)?;
            let mut inserted = 0;
            for (_, row) in batch.rows() {
                inserted += execute(&tx, &INSERT_USAGE, &row).map_err(usage_err)? as u64;
            }
            months::all_inserted(month, inserted, records.len())?;
            let totals = batch.totals(|_| true)?;
            for_each_row(&tx, LOG_SPEND, totals.spent_keys())?;
            execute(
                &tx,
                &sql::archived_month_delete_sql('?'),
                &[month_text.into()],
            )?;
            audited(&tx, audit, &restored)?;
            tx.commit()?;
            Ok(inserted)
        })
        .await
    }

    async fn archived_months(&self) -> StoreResult<Vec<ArchivedMonth>> {
        self.run(|conn| {
            let rows = query_all(conn, sql::ARCHIVED_TOTALS, [], |r| rows::archived_total(r))?;
            Ok(months::group_months(rows))
        })
        .await
    }

    async fn load_catalog(&self) -> StoreResult<CatalogRows> {
        self.run(|conn| {
            // One read transaction: every table from the same snapshot.
            let tx = conn.transaction()?;
            let [models, routes, profiles] = sql::catalog_selects();
            let rows = CatalogRows {
                models: query_all(&tx, &models, [], |r| rows::model(r))?,
                routes: query_all(&tx, &routes, [], |r| rows::route(r))?,
                profiles: query_all(&tx, &profiles, [], |r| rows::profile(r))?,
            };
            tx.commit()?;
            Ok(rows)
        })
        .await
    }

    async fn import_catalog(
        &self,
        rows: &CatalogRows,
        audit: Option<Audit<CatalogRows>>,
    ) -> StoreResult<()> {
        let rows = rows.clone();
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            import_rows(&tx, &rows)?;
            audited(&tx, audit, &rows)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn catalog_is_empty(&self) -> StoreResult<bool> {
        self.run(|conn| {
            let any: bool = conn
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM models)")?
                .query_row([], |r| r.get(0))?;
            Ok(!any)
        })
        .await
    }

    async fn rename_workspace(
        &self,
        id: &str,
        name: &str,
        audit: Option<Audit<Workspace>>,
    ) -> StoreResult<Workspace> {
        let (id, name) = (id.to_owned(), name.to_owned());
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let changed = tx
                .prepare_cached("UPDATE workspaces SET name = ?2 WHERE id = ?1")?
                .execute(params![id, name])?;
            if changed == 0 {
                return Err(StoreError::no_workspace(&id));
            }
            let ws = query_all(
                &tx,
                &format!("SELECT {WORKSPACE_COLS} FROM workspaces WHERE id = ?1"),
                [&id],
                |r| rows::workspace(r),
            )?
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::no_workspace(&id))?;
            audited(&tx, audit, &ws)?;
            tx.commit()?;
            Ok(ws)
        })
        .await
    }

    async fn workspaces_page(
        &self,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<Workspace>> {
        let page = Page::workspaces(after, limit).into_owned();
        self.run(move |conn| page_in(conn, &page, |r| rows::workspace(r)))
            .await
    }

    async fn keys_page(
        &self,
        workspace_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<ApiKey>> {
        let page = Page::keys(workspace_id, after, limit).into_owned();
        self.run(move |conn| page_in(conn, &page, |r| rows::api_key(r)))
            .await
    }

    async fn set_key_expiry(&self, id: &str, expires_at: DateTime<Utc>) -> StoreResult<()> {
        let id = id.to_owned();
        let at = codec::to_micros(codec::trunc(expires_at));
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let changed = tx
                .prepare_cached("UPDATE api_keys SET expires_at = ?2 WHERE id = ?1")?
                .execute(params![id, at])?;
            if changed == 0 {
                return Err(StoreError::NotFound(format!("key {id}")));
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn ledger_page(
        &self,
        workspace_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<LedgerEntry>> {
        let page = Page::ledger(workspace_id, after, limit).into_owned();
        self.run(move |conn| page_in(conn, &page, |r| rows::ledger_entry(r)))
            .await
    }

    async fn usage_page(
        &self,
        workspace_id: &str,
        filter: &UsageFilter,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        let page = Page::usage(workspace_id, filter, after, limit).into_owned();
        self.run(move |conn| page_in(conn, &page, |r| rows::usage(r)))
            .await
    }

    async fn usage_daily(
        &self,
        workspace_id: &str,
        from: chrono::NaiveDate,
        to: chrono::NaiveDate,
    ) -> StoreResult<Vec<DailyUsage>> {
        let ws = workspace_id.to_owned();
        let (from, to) = (from.to_string(), to.to_string());
        self.run(move |conn| {
            query_all(
                conn,
                &format!(
                    "SELECT {DAILY_COLS} FROM usage_daily WHERE workspace_id = ?1 \
                     AND day >= ?2 AND day <= ?3 ORDER BY day, model_id"
                ),
                params![ws, from, to],
                |r| rows::daily_usage(r),
            )
        })
        .await
    }

    async fn audit_page(
        &self,
        workspace_id: Option<&str>,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<AuditEntry>> {
        let page = Page::audit(workspace_id, after, limit).into_owned();
        self.run(move |conn| page_in(conn, &page, |r| rows::audit_entry(r)))
            .await
    }

    async fn put_alerts(
        &self,
        settings: &AlertSettings,
        audit: Option<Audit<AlertSettings>>,
    ) -> StoreResult<()> {
        let s = settings.clone();
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            if !workspace_exists(&tx, &s.workspace_id)? {
                return Err(StoreError::no_workspace(&s.workspace_id));
            }
            let upsert = sql::upsert_sql("alert_settings", ALERT_COLS, '?');
            execute(&tx, &upsert, &params::alert_settings(&s))?;
            audited(&tx, audit, &s)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn get_alerts(&self, workspace_id: &str) -> StoreResult<Option<AlertSettings>> {
        let ws = workspace_id.to_owned();
        self.run(move |conn| {
            let found = query_all(
                conn,
                &format!("SELECT {ALERT_COLS} FROM alert_settings WHERE workspace_id = ?1"),
                [&ws],
                |r| rows::alert_settings(r),
            )?;
            Ok(found.into_iter().next())
        })
        .await
    }

    async fn all_alerts(&self) -> StoreResult<Vec<AlertSettings>> {
        self.run(|conn| {
            query_all(
                conn,
                &format!("SELECT {ALERT_COLS} FROM alert_settings ORDER BY workspace_id"),
                [],
                |r| rows::alert_settings(r),
            )
        })
        .await
    }

    async fn claim_alert(
        &self,
        workspace_id: &str,
        alert_key: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let (ws, key) = (workspace_id.to_owned(), alert_key.to_owned());
        let at = codec::to_micros(codec::trunc(at));
        self.run(move |conn| {
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO alert_claims (workspace_id, alert_key, claimed_at) \
                     VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
                )?
                .execute(params![ws, key, at])?;
            Ok(inserted == 1)
        })
        .await
    }

    async fn release_alert(&self, workspace_id: &str, alert_key: &str) -> StoreResult<bool> {
        let (ws, key) = (workspace_id.to_owned(), alert_key.to_owned());
        self.run(move |conn| {
            let deleted = conn
                .prepare_cached(
                    "DELETE FROM alert_claims WHERE workspace_id = ?1 AND alert_key = ?2",
                )?
                .execute(params![ws, key])?;
            Ok(deleted == 1)
        })
        .await
    }

    async fn record_delivery(&self, delivery: &Delivery) -> StoreResult<()> {
        let d = delivery.clone();
        self.run(move |conn| {
            let insert = sql::insert_sql("webhook_deliveries", DELIVERY_COLS, '?');
            execute(conn, &insert, &params::delivery(&d))?;
            Ok(())
        })
        .await
    }

    async fn deliveries_page(
        &self,
        workspace_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<Vec<Delivery>> {
        let page = Page::deliveries(workspace_id, after, limit).into_owned();
        self.run(move |conn| page_in(conn, &page, |r| rows::delivery(r)))
            .await
    }

    async fn create_session(
        &self,
        session: &ConsoleSession,
        audit: Option<Audit<ConsoleSession>>,
    ) -> StoreResult<()> {
        let session = session.clone();
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let insert = sql::insert_sql("console_sessions", SESSION_COLS, '?');
            execute(&tx, &insert, &params::console_session(&session))
                .map_err(exists("console session".to_owned()))?;
            audited(&tx, audit, &session)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn touch_session(
        &self,
        id_hash: &str,
        now: DateTime<Utc>,
        idle_since: DateTime<Utc>,
    ) -> StoreResult<Option<ConsoleSession>> {
        let args = [
            Param::from(id_hash.to_owned()),
            codec::trunc(now).into(),
            codec::trunc(idle_since).into(),
        ];
        self.run(move |conn| {
            let live = query_all(
                conn,
                &sql::session_touch_sql('?'),
                params_from_iter(&args),
                |r| rows::console_session(r),
            )?;
            let live = live.into_iter().next();
            if live.is_none() {
                execute(conn, SESSION_DELETE, &args[..1])?;
            }
            Ok(live)
        })
        .await
    }

    async fn delete_session(&self, id_hash: &str) -> StoreResult<bool> {
        let args = [Param::from(id_hash.to_owned())];
        let deleted = self
            .run(move |conn| Ok(execute(conn, SESSION_DELETE, &args)?))
            .await?;
        Ok(deleted > 0)
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
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let expired = execute(&tx, &sql::sessions_purge_sql('?'), &ended)?;
            let surplus = execute(&tx, &sql::sessions_cap_sql('?'), &keep)?;
            tx.commit()?;
            Ok(expired.saturating_add(surplus) as u64)
        })
        .await
    }

    async fn keep_responses(&self, batch: &[StoredResponse]) -> StoreResult<u64> {
        let batch = params::response_batch(batch)?;
        if batch.is_empty() {
            return Ok(0);
        }
        self.run(move |conn| {
            let tx = write_tx(conn)?;
            let mut new = 0;
            {
                let mut insert = tx.prepare_cached(&KEEP_RESPONSE)?;
                for r in &batch {
                    new += insert
                        .execute(params_from_iter(&params::stored_response(r)))
                        .map_err(|e| refused("response", e))?;
                }
            }
            tx.commit()?;
            Ok(new as u64)
        })
        .await
    }

    async fn stored_response(
        &self,
        workspace_id: &str,
        id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<StoredResponse>> {
        let args = [
            Param::from(id.to_owned()),
            workspace_id.to_owned().into(),
            codec::trunc(now).into(),
        ];
        let found = self
            .run(move |conn| {
                query_all(
                    conn,
                    &sql::response_select_sql('?'),
                    params_from_iter(&args),
                    |r| rows::stored_response(r),
                )
            })
            .await?;
        Ok(found.into_iter().next())
    }

    async fn delete_response(&self, workspace_id: &str, id: &str) -> StoreResult<bool> {
        let args = [Param::from(id.to_owned()), workspace_id.to_owned().into()];
        let deleted = self
            .run(move |conn| Ok(execute(conn, &sql::response_delete_sql('?'), &args)?))
            .await?;
        Ok(deleted > 0)
    }

    async fn purge_responses(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let mut purged = 0;
        loop {
            // A statement at a time: other writers take the lock between chunks.
            let args = [Param::from(before), PURGE_CHUNK.into()];
            let n = self
                .run(move |conn| Ok(execute(conn, &sql::responses_purge_sql('?'), &args)?))
                .await? as u64;
            purged += n;
            if n < PURGE_CHUNK as u64 {
                return Ok(purged);
            }
        }
    }

    async fn changes_since(&self, after: i64) -> StoreResult<Vec<Change>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, kind, ref_id FROM change_log WHERE seq > ?1 ORDER BY seq",
            )?;
            let mut rows = stmt.query([after])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(Change {
                    seq: r.get(0)?,
                    kind: codec::change_kind_from(&r.get::<_, String>(1)?)?,
                    ref_id: r.get(2)?,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn prune_changes(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let before = codec::to_micros(before);
        self.run(move |conn| {
            let n = conn
                .prepare_cached("DELETE FROM change_log WHERE created_at < ?1")?
                .execute([before])?;
            Ok(n as u64)
        })
        .await
    }

    async fn latest_change(&self) -> StoreResult<i64> {
        self.run(|conn| {
            Ok(conn
                .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM change_log")?
                .query_row([], |r| r.get(0))?)
        })
        .await
    }

    async fn wait_for_change(&self, max: Duration) {
        tokio::time::sleep(max.min(POLL_PERIOD)).await;
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;
    use crate::store::sql::PageSql;

    /// What SQLite plans for `sql` (its `EXPLAIN QUERY PLAN` details), parameters null.
    async fn plan(store: &SqliteStore, sql: String) -> Vec<String> {
        store
            .run(move |conn| {
                let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                let n = stmt.parameter_count();
                let mut rows = stmt.query(params_from_iter(vec![SqlValue::Null; n]))?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    out.push(r.get::<_, String>(3)?);
                }
                Ok(out)
            })
            .await
            .unwrap()
    }

    /// A page deep into 10 million records costs what the first does: every listing's next
    /// page is one range of an index in the listing's order — no table scan, no sort.
    #[tokio::test]
    async fn every_page_is_one_index_range_without_a_sort() {
        let store = SqliteStore::open(":memory:").unwrap();
        store.migrate().await.unwrap();
        let some = || Some(String::from("x"));
        let filters = [
            UsageFilter::default(),
            UsageFilter {
                key_id: some(),
                ..Default::default()
            },
            UsageFilter {
                model_id: some(),
                from: Some(Utc::now()),
                to: Some(Utc::now()),
                ..Default::default()
            },
        ];
        let mut pages = vec![
            PageSql::workspaces(true),
            PageSql::keys(true),
            PageSql::ledger(true),
            PageSql::audit(true, true),
            PageSql::audit(false, true),
            PageSql::deliveries(true),
        ];
        pages.extend(filters.iter().map(|f| PageSql::usage(f, true)));
        for page in pages {
            let sql = page.sql(|n| format!("?{n}"));
            let plan = plan(&store, sql.clone()).await;
            assert_eq!(plan.len(), 1, "{sql}: {plan:?}");
            assert!(
                plan[0].starts_with("SEARCH") && plan[0].contains("INDEX"),
                "{sql}: {plan:?}"
            );
            assert!(plan[0].contains("(workspace_id=?") || !page.equal.contains(&"workspace_id"));
        }
    }

    /// The hourly purge reaches the expired responses through `expires_at`'s index, however
    /// many are kept.
    #[tokio::test]
    async fn the_purge_finds_expired_responses_by_their_index() {
        let store = SqliteStore::open(":memory:").unwrap();
        store.migrate().await.unwrap();
        let plan = plan(&store, sql::responses_purge_sql('?')).await;
        assert!(
            plan.iter()
                .any(|p| p.starts_with("SEARCH") && p.contains("responses_expires_idx")),
            "{plan:?}"
        );
        assert!(!plan.iter().any(|p| p.starts_with("SCAN")), "{plan:?}");
    }
}
