//! PostgreSQL backend: the production store, shared by every gateway replica.
//!
//! Queries go through a deadpool connection pool with per-connection cached prepared
//! statements. Besides the pool, each `PgStore` keeps one dedicated connection that
//! `LISTEN`s on `tollgate_changes` (the schema's triggers `NOTIFY` it for every change-log
//! row, at commit), so `wait_for_change` wakes as soon as any replica — or the CLI — commits a
//! change. That connection is re-established with backoff if it drops, and the task that
//! owns it ends when the `PgStore` is dropped.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::types::FromSql;
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Row, Socket};

use super::codec;
use super::migrations::{self, Dialect};
use super::{
    ApiKey, CatalogRows, Change, LedgerEntry, LedgerKind, ModelRow, NewKey, RouteRow, Store,
    StoreError, StoreResult, Workspace,
};
use crate::billing::money::{Price, Usd};

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

fn is_code(e: &tokio_postgres::Error, code: &SqlState) -> bool {
    e.code() == Some(code)
}

/// Reads column `col`, reporting a type mismatch as a corrupt row.
fn col<'a, T: FromSql<'a>>(row: &'a Row, col: &str) -> StoreResult<T> {
    row.try_get(col)
        .map_err(|e| StoreError::Corrupt(format!("column {col}: {e}")))
}

const WORKSPACE_COLS: &str = "id, name, created_at";
const KEY_COLS: &str = "id, workspace_id, name, secret_hash, hint, created_at, expires_at, \
                        revoked_at, spend_limit_pico, limit_reset";
const LEDGER_COLS: &str = "id, workspace_id, kind, amount_pico, note, created_at";
const MODEL_COLS: &str = "id, provider, family, kind, upstream_model, profile, \
                          input_price_micro, output_price_micro, cache_read_price_micro, \
                          cache_write_price_micro, capabilities, max_output_tokens, active";

fn workspace_from_row(r: &Row) -> StoreResult<Workspace> {
    Ok(Workspace {
        id: col(r, "id")?,
        name: col(r, "name")?,
        created_at: col(r, "created_at")?,
    })
}

fn key_from_row(r: &Row) -> StoreResult<ApiKey> {
    Ok(ApiKey {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        name: col(r, "name")?,
        secret_hash: col(r, "secret_hash")?,
        hint: col(r, "hint")?,
        created_at: col(r, "created_at")?,
        expires_at: col(r, "expires_at")?,
        revoked_at: col(r, "revoked_at")?,
        spend_limit: col::<Option<i64>>(r, "spend_limit_pico")?.map(Usd::from_pico),
        limit_reset: codec::limit_reset_from(col(r, "limit_reset")?)?,
    })
}

fn ledger_from_row(r: &Row) -> StoreResult<LedgerEntry> {
    Ok(LedgerEntry {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        kind: codec::ledger_kind_from(col(r, "kind")?)?,
        amount: Usd::from_pico(col(r, "amount_pico")?),
        note: col(r, "note")?,
        created_at: col(r, "created_at")?,
    })
}

fn model_from_row(r: &Row) -> StoreResult<ModelRow> {
    Ok(ModelRow {
        id: col(r, "id")?,
        provider: col(r, "provider")?,
        family: col(r, "family")?,
        kind: col(r, "kind")?,
        upstream_model: col(r, "upstream_model")?,
        profile: col(r, "profile")?,
        input_price: Price::from_micro_per_mtok(col(r, "input_price_micro")?),
        output_price: Price::from_micro_per_mtok(col(r, "output_price_micro")?),
        cache_read_price: col::<Option<i64>>(r, "cache_read_price_micro")?
            .map(Price::from_micro_per_mtok),
        cache_write_price: col::<Option<i64>>(r, "cache_write_price_micro")?
            .map(Price::from_micro_per_mtok),
        capabilities: codec::capabilities_from_db(col(r, "capabilities")?)?,
        max_output_tokens: codec::max_tokens_from_db(col(r, "max_output_tokens")?)?,
        active: col(r, "active")?,
    })
}

fn route_from_row(r: &Row) -> StoreResult<RouteRow> {
    Ok(RouteRow {
        model_id: col(r, "model_id")?,
        kind: col(r, "kind")?,
        base_url: col(r, "base_url")?,
        region: col(r, "region")?,
        priority: col(r, "priority")?,
        active: col(r, "active")?,
    })
}

fn all<T>(rows: Vec<Row>, f: fn(&Row) -> StoreResult<T>) -> StoreResult<Vec<T>> {
    rows.iter().map(f).collect()
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
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Backend(format!("postgres pool: {e}")))?;
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

/// Whether workspace `id` exists, as seen by `client` (inside its transaction, if any).
async fn workspace_exists(
    client: &deadpool_postgres::Transaction<'_>,
    id: &str,
) -> StoreResult<bool> {
    let stmt = client
        .prepare_cached("SELECT 1 FROM workspaces WHERE id = $1")
        .await?;
    Ok(client.query_opt(&stmt, &[&id]).await?.is_some())
}

#[async_trait]
impl Store for PgStore {
    async fn migrate(&self) -> StoreResult<usize> {
        let mut client = self.client().await?;
        let mut applied = 0;
        for m in migrations::migrations(Dialect::Postgres) {
            let tx = client.transaction().await?;
            // Held until commit: replicas starting together migrate one after another, and
            // the later ones find the version recorded.
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
                continue;
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
            tx.commit().await?;
            applied += 1;
        }
        Ok(applied)
    }

    async fn create_workspace(&self, id: &str, name: &str) -> StoreResult<Workspace> {
        let ws = Workspace {
            id: id.to_owned(),
            name: name.to_owned(),
            created_at: codec::now(),
        };
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("INSERT INTO workspaces (id, name, created_at) VALUES ($1, $2, $3)")
            .await?;
        client
            .execute(&stmt, &[&ws.id, &ws.name, &ws.created_at])
            .await
            .map_err(|e| {
                if is_code(&e, &SqlState::UNIQUE_VIOLATION) {
                    StoreError::Conflict(format!("workspace {id} already exists"))
                } else {
                    pg_err(e)
                }
            })?;
        Ok(ws)
    }

    async fn list_workspaces(&self) -> StoreResult<Vec<Workspace>> {
        let rows = self
            .query_rows(
                &format!("SELECT {WORKSPACE_COLS} FROM workspaces ORDER BY created_at, id"),
                &[],
            )
            .await?;
        all(rows, workspace_from_row)
    }

    async fn get_workspace(&self, id: &str) -> StoreResult<Option<Workspace>> {
        let rows = self
            .query_rows(
                &format!("SELECT {WORKSPACE_COLS} FROM workspaces WHERE id = $1"),
                &[&id],
            )
            .await?;
        rows.first().map(workspace_from_row).transpose()
    }

    async fn create_key(&self, key: NewKey) -> StoreResult<ApiKey> {
        let out = ApiKey {
            id: key.id,
            workspace_id: key.workspace_id,
            name: key.name,
            secret_hash: key.secret_hash,
            hint: key.hint,
            created_at: codec::now(),
            expires_at: key.expires_at.map(codec::trunc),
            revoked_at: None,
            spend_limit: key.spend_limit,
            limit_reset: key.limit_reset,
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        if !workspace_exists(&tx, &out.workspace_id).await? {
            return Err(StoreError::NotFound(format!(
                "workspace {}",
                out.workspace_id
            )));
        }
        let stmt = tx
            .prepare_cached(&format!(
                "INSERT INTO api_keys ({KEY_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ))
            .await?;
        let spend_limit = out.spend_limit.map(Usd::pico);
        let limit_reset = out.limit_reset.map(|l| l.as_str());
        tx.execute(
            &stmt,
            &[
                &out.id,
                &out.workspace_id,
                &out.name,
                &out.secret_hash,
                &out.hint,
                &out.created_at,
                &out.expires_at,
                &None::<DateTime<Utc>>,
                &spend_limit,
                &limit_reset,
            ],
        )
        .await
        .map_err(|e| {
            if is_code(&e, &SqlState::UNIQUE_VIOLATION) {
                let on_hash = e
                    .as_db_error()
                    .and_then(|db| db.constraint())
                    .is_some_and(|c| c.contains("secret_hash"));
                if on_hash {
                    StoreError::Conflict("a key with this secret hash already exists".to_owned())
                } else {
                    StoreError::Conflict(format!("key {} already exists", out.id))
                }
            } else if is_code(&e, &SqlState::FOREIGN_KEY_VIOLATION) {
                StoreError::NotFound(format!("workspace {}", out.workspace_id))
            } else {
                pg_err(e)
            }
        })?;
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
        rows.first().map(key_from_row).transpose()
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
        all(rows, key_from_row)
    }

    async fn all_keys(&self) -> StoreResult<Vec<ApiKey>> {
        let rows = self
            .query_rows(
                &format!("SELECT {KEY_COLS} FROM api_keys ORDER BY created_at, id"),
                &[],
            )
            .await?;
        all(rows, key_from_row)
    }

    async fn revoke_key(&self, id: &str, at: DateTime<Utc>) -> StoreResult<bool> {
        let at = codec::trunc(at);
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
            )
            .await?;
        if client.execute(&stmt, &[&id, &at]).await? == 1 {
            return Ok(true);
        }
        let stmt = client
            .prepare_cached("SELECT 1 FROM api_keys WHERE id = $1")
            .await?;
        if client.query_opt(&stmt, &[&id]).await?.is_some() {
            Ok(false)
        } else {
            Err(StoreError::NotFound(format!("key {id}")))
        }
    }

    async fn add_credit(
        &self,
        entry_id: &str,
        workspace_id: &str,
        amount: Usd,
        note: Option<&str>,
    ) -> StoreResult<LedgerEntry> {
        codec::check_credit(amount)?;
        let entry = LedgerEntry {
            id: entry_id.to_owned(),
            workspace_id: workspace_id.to_owned(),
            kind: LedgerKind::Credit,
            amount,
            note: note.map(str::to_owned),
            created_at: codec::now(),
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        if !workspace_exists(&tx, workspace_id).await? {
            return Err(StoreError::NotFound(format!("workspace {workspace_id}")));
        }
        let insert = tx
            .prepare_cached(&format!(
                "INSERT INTO ledger_entries ({LEDGER_COLS}) VALUES ($1, $2, $3, $4, $5, $6)"
            ))
            .await?;
        tx.execute(
            &insert,
            &[
                &entry.id,
                &entry.workspace_id,
                &codec::ledger_kind_str(entry.kind),
                &amount.pico(),
                &entry.note,
                &entry.created_at,
            ],
        )
        .await
        .map_err(|e| {
            if is_code(&e, &SqlState::UNIQUE_VIOLATION) {
                StoreError::Conflict(format!("ledger entry {entry_id} already exists"))
            } else {
                pg_err(e)
            }
        })?;
        // One statement, so concurrent credits to the same workspace serialise on the row.
        let upsert = tx
            .prepare_cached(
                "INSERT INTO balances (workspace_id, balance_pico) VALUES ($1, $2)
                 ON CONFLICT (workspace_id) DO UPDATE
                 SET balance_pico = balances.balance_pico + EXCLUDED.balance_pico",
            )
            .await?;
        tx.execute(&upsert, &[&workspace_id, &amount.pico()])
            .await?;
        tx.commit().await?;
        Ok(entry)
    }

    async fn balance(&self, workspace_id: &str) -> StoreResult<Usd> {
        let rows = self
            .query_rows(
                "SELECT balance_pico FROM balances WHERE workspace_id = $1",
                &[&workspace_id],
            )
            .await?;
        match rows.first() {
            Some(r) => Ok(Usd::from_pico(col(r, "balance_pico")?)),
            None => Ok(Usd::ZERO),
        }
    }

    async fn ledger(&self, workspace_id: &str) -> StoreResult<Vec<LedgerEntry>> {
        let rows = self
            .query_rows(
                &format!(
                    "SELECT {LEDGER_COLS} FROM ledger_entries WHERE workspace_id = $1
                     ORDER BY created_at, seq"
                ),
                &[&workspace_id],
            )
            .await?;
        all(rows, ledger_from_row)
    }

    async fn load_catalog(&self) -> StoreResult<CatalogRows> {
        let mut client = self.client().await?;
        // One snapshot for both tables.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let stmt = tx
            .prepare_cached(&format!("SELECT {MODEL_COLS} FROM models ORDER BY id"))
            .await?;
        let models = all(tx.query(&stmt, &[]).await?, model_from_row)?;
        let stmt = tx
            .prepare_cached(
                "SELECT model_id, kind, base_url, region, priority, active FROM routes
                 ORDER BY model_id, seq",
            )
            .await?;
        let routes = all(tx.query(&stmt, &[]).await?, route_from_row)?;
        let stmt = tx
            .prepare_cached("SELECT name, spec FROM profiles ORDER BY name")
            .await?;
        let profiles = tx
            .query(&stmt, &[])
            .await?
            .iter()
            .map(|r| Ok((r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?)))
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
        tx.commit().await?;
        let profiles = codec::profiles_from_db(profiles)?;
        Ok(CatalogRows {
            profiles,
            models,
            routes,
        })
    }

    async fn import_catalog(&self, rows: &CatalogRows) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let profile = tx
            .prepare_cached(
                "INSERT INTO profiles (name, spec) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec",
            )
            .await?;
        for p in &rows.profiles {
            tx.execute(&profile, &[&p.name, &p.spec.to_string()])
                .await?;
        }
        let upsert = tx
            .prepare_cached(&format!(
                "INSERT INTO models ({MODEL_COLS})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                 ON CONFLICT (id) DO UPDATE SET
                    provider = EXCLUDED.provider,
                    family = EXCLUDED.family,
                    kind = EXCLUDED.kind,
                    upstream_model = EXCLUDED.upstream_model,
                    profile = EXCLUDED.profile,
                    input_price_micro = EXCLUDED.input_price_micro,
                    output_price_micro = EXCLUDED.output_price_micro,
                    cache_read_price_micro = EXCLUDED.cache_read_price_micro,
                    cache_write_price_micro = EXCLUDED.cache_write_price_micro,
                    capabilities = EXCLUDED.capabilities,
                    max_output_tokens = EXCLUDED.max_output_tokens,
                    active = EXCLUDED.active"
            ))
            .await?;
        for m in &rows.models {
            let capabilities = codec::capabilities_to_db(&m.capabilities)?;
            tx.execute(
                &upsert,
                &[
                    &m.id,
                    &m.provider,
                    &m.family,
                    &m.kind,
                    &m.upstream_model,
                    &m.profile,
                    &m.input_price.micro_per_mtok(),
                    &m.output_price.micro_per_mtok(),
                    &m.cache_read_price.map(Price::micro_per_mtok),
                    &m.cache_write_price.map(Price::micro_per_mtok),
                    &capabilities,
                    &codec::max_tokens_to_db(m.max_output_tokens),
                    &m.active,
                ],
            )
            .await
            .map_err(|e| StoreError::Backend(format!("model {}: {}", m.id, pg_err(e))))?;
        }
        let clear = tx
            .prepare_cached("DELETE FROM routes WHERE model_id = $1")
            .await?;
        for id in codec::catalog_model_ids(rows) {
            tx.execute(&clear, &[&id]).await?;
        }
        let insert = tx
            .prepare_cached(
                "INSERT INTO routes (model_id, kind, base_url, region, priority, active)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .await?;
        for r in &rows.routes {
            tx.execute(
                &insert,
                &[
                    &r.model_id,
                    &r.kind,
                    &r.base_url,
                    &r.region,
                    &r.priority,
                    &r.active,
                ],
            )
            .await
            .map_err(|e| {
                if is_code(&e, &SqlState::FOREIGN_KEY_VIOLATION) {
                    StoreError::NotFound(format!("model {} (named by a route)", r.model_id))
                } else {
                    StoreError::Backend(format!("route of {}: {}", r.model_id, pg_err(e)))
                }
            })?;
        }
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
