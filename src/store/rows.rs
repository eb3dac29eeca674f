//! Reading, written once for both backends: every `SELECT` of a record names its table's
//! `*_COLS` list (`sql`), so a record's columns arrive in the list's order and [`DbRow`] reads
//! them by position. Each backend implements `DbRow` for its own row type — the only
//! per-dialect part is how a value is stored (PostgreSQL keeps `TIMESTAMPTZ` and `BOOLEAN`,
//! SQLite microseconds and integers) — and the mappers below turn a row into a record the same
//! way for both.

use chrono::{DateTime, Utc};

use super::codec;
use super::{
    AlertSettings, ApiKey, AuditEntry, BalanceRow, ConsoleSession, DailyUsage, Delivery, Done,
    ExtraUsage, IdempotencyKey, LedgerEntry, LongContextRow, ManagementKey, ModelRow, MonthTotal,
    ProfileRow, RouteRow, StatusClass, StoreError, StoreResult, StoredResponse, UsageMonth,
    UsageRecord, Workspace,
};
use crate::money::{Price, Usd};

/// A result row of either backend, read by column position; a value of the wrong type is a
/// corrupt row.
pub(crate) trait DbRow {
    fn text(&self, i: usize) -> StoreResult<String>;
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>>;
    fn int(&self, i: usize) -> StoreResult<i64>;
    fn opt_int(&self, i: usize) -> StoreResult<Option<i64>>;
    fn int32(&self, i: usize) -> StoreResult<i32>;
    fn flag(&self, i: usize) -> StoreResult<bool>;
    fn time(&self, i: usize) -> StoreResult<DateTime<Utc>>;
    fn opt_time(&self, i: usize) -> StoreResult<Option<DateTime<Utc>>>;

    /// A price column (micro-USD per 1M tokens).
    fn price(&self, i: usize) -> StoreResult<Price> {
        Ok(Price::from_micro_per_mtok(self.int(i)?))
    }

    fn opt_price(&self, i: usize) -> StoreResult<Option<Price>> {
        Ok(self.opt_int(i)?.map(Price::from_micro_per_mtok))
    }

    /// A count column, named `what` if it is corrupt (negative).
    fn count(&self, i: usize, what: &str) -> StoreResult<u64> {
        codec::count_from_db(what, self.int(i)?)
    }

    fn opt_count(&self, i: usize, what: &str) -> StoreResult<Option<u64>> {
        codec::opt_count_from_db(what, self.opt_int(i)?)
    }
}

pub(crate) fn workspace(r: &impl DbRow) -> StoreResult<Workspace> {
    Ok(Workspace {
        id: r.text(0)?,
        name: r.text(1)?,
        created_at: r.time(2)?,
    })
}

pub(crate) fn api_key(r: &impl DbRow) -> StoreResult<ApiKey> {
    Ok(ApiKey {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        name: r.opt_text(2)?,
        secret_hash: r.text(3)?,
        hint: r.text(4)?,
        created_at: r.time(5)?,
        expires_at: r.opt_time(6)?,
        revoked_at: r.opt_time(7)?,
        spend_limit: r.opt_int(8)?.map(Usd::from_pico),
        limit_reset: codec::limit_reset_from(r.opt_text(9)?)?,
        replaced_by: r.opt_text(10)?,
        allowed_models: codec::strings_from_db("allowed_models", &r.text(11)?)?,
    })
}

pub(crate) fn management_key(r: &impl DbRow) -> StoreResult<ManagementKey> {
    Ok(ManagementKey {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        name: r.opt_text(2)?,
        secret_hash: r.text(3)?,
        hint: r.text(4)?,
        created_at: r.time(5)?,
        expires_at: r.opt_time(6)?,
        revoked_at: r.opt_time(7)?,
    })
}

pub(crate) fn ledger_entry(r: &impl DbRow) -> StoreResult<LedgerEntry> {
    Ok(LedgerEntry {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        kind: codec::ledger_kind_from(&r.text(2)?)?,
        amount: Usd::from_pico(r.int(3)?),
        note: r.opt_text(4)?,
        created_at: r.time(5)?,
        usage_id: r.opt_text(6)?,
    })
}

pub(crate) fn model(r: &impl DbRow) -> StoreResult<ModelRow> {
    Ok(ModelRow {
        id: r.text(0)?,
        provider: r.text(1)?,
        family: r.text(2)?,
        kind: r.text(3)?,
        upstream_model: r.text(4)?,
        profile: r.text(5)?,
        input_price: r.price(6)?,
        output_price: r.price(7)?,
        cache_read_price: r.opt_price(8)?,
        cache_write_price: r.opt_price(9)?,
        cache_write_1h_price: r.opt_price(13)?,
        audio_input_price: r.opt_price(14)?,
        cache_storage_price: r.opt_price(15)?,
        long_context: long_context(r)?,
        capabilities: codec::strings_from_db("capabilities", &r.text(10)?)?,
        aliases: codec::strings_from_db("aliases", &r.text(25)?)?,
        max_output_tokens: codec::max_tokens_from_db(r.opt_int(11)?)?,
        context_window: r
            .opt_int(22)?
            .map(|n| {
                u32::try_from(n)
                    .map_err(|_| StoreError::Corrupt(format!("context_window {n} out of range")))
            })
            .transpose()?,
        active: r.flag(12)?,
        shutdown: r
            .opt_text(23)?
            .map(|d| {
                d.parse()
                    .map_err(|_| StoreError::Corrupt(format!("shutdown_on {d:?} is not a date")))
            })
            .transpose()?,
        source: r.opt_text(24)?,
    })
}

/// A model row's long-context tier: none unless its threshold and both prices are set.
fn long_context(r: &impl DbRow) -> StoreResult<Option<LongContextRow>> {
    let (Some(above), Some(input_price), Some(output_price)) =
        (r.opt_int(16)?, r.opt_price(17)?, r.opt_price(18)?)
    else {
        return Ok(None);
    };
    Ok(Some(LongContextRow {
        above: codec::count_from_db("long_context_threshold", above)?,
        input_price,
        output_price,
        cache_read_price: r.opt_price(19)?,
        cache_write_price: r.opt_price(20)?,
        cache_write_1h_price: r.opt_price(21)?,
    }))
}

pub(crate) fn route(r: &impl DbRow) -> StoreResult<RouteRow> {
    Ok(RouteRow {
        model_id: r.text(0)?,
        kind: r.text(1)?,
        base_url: r.opt_text(2)?,
        region: r.opt_text(3)?,
        priority: r.int32(4)?,
        active: r.flag(5)?,
        weight: r.int32(6)?,
        upstream_model: r.opt_text(7)?,
        api: r.text(8)?,
    })
}

pub(crate) fn usage(r: &impl DbRow) -> StoreResult<UsageRecord> {
    Ok(UsageRecord {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        key_id: r.text(2)?,
        model_id: r.text(3)?,
        route: r.text(4)?,
        endpoint: codec::endpoint_from(&r.text(5)?)?,
        stream: r.flag(6)?,
        input_tokens: r.count(7, "input_tokens")?,
        cache_read_tokens: r.count(8, "cache_read_tokens")?,
        cache_write_tokens: r.count(9, "cache_write_tokens")?,
        output_tokens: r.count(10, "output_tokens")?,
        reasoning_tokens: r.count(11, "reasoning_tokens")?,
        input_price: r.price(12)?,
        output_price: r.price(13)?,
        cache_read_price: r.opt_price(14)?,
        cache_write_price: r.opt_price(15)?,
        extra: extra_usage(r)?,
        cost: Usd::from_pico(r.int(16)?),
        outcome: codec::outcome_from(&r.text(17)?)?,
        started_at: r.time(18)?,
        finished_at: r.time(19)?,
        upstream_latency_us: r.opt_count(20, "upstream_latency_us")?,
        ttft_us: r.opt_count(21, "ttft_us")?,
        spend_window_start: r.opt_time(22)?,
        usage_source: codec::source_from(&r.text(23)?)?,
        attempts: u32::try_from(r.int32(30)?)
            .map_err(|_| StoreError::Corrupt("attempts out of range".into()))?,
        request_id: r.opt_text(31)?,
        review: r.opt_text(32)?,
        client_addr: r.opt_text(33)?,
        upstream_request_id: r.opt_text(34)?,
        waived: r.flag(35)?,
    })
}

/// A balance row read as `sql::balance_row_sql` lists it, from column `at` on.
pub(crate) fn balance_row(r: &impl DbRow, at: usize) -> StoreResult<BalanceRow> {
    Ok(BalanceRow {
        balance: Usd::from_pico(r.int(at)?),
        credited: Usd::from_pico(r.int(at.saturating_add(1))?),
    })
}

/// What a held idempotency key (`sql::idempotency_held_sql`'s row) means for a request with
/// `key`: its kept answer when the request is the same, else `IdempotencyKeyReused`.
pub(crate) fn held_key<T>(r: &impl DbRow, key: &IdempotencyKey) -> StoreResult<Done<T>> {
    if r.text(0)? != key.request_hash {
        return Err(StoreError::IdempotencyKeyReused(key.key.clone()));
    }
    r.opt_text(1)?.map(Done::Replayed).ok_or_else(|| {
        StoreError::Corrupt(format!("idempotency key {:?} without its answer", key.key))
    })
}

/// A usage row's audio, 1-hour cache-write and cache-storage buckets and their prices.
fn extra_usage(r: &impl DbRow) -> StoreResult<ExtraUsage> {
    Ok(ExtraUsage {
        audio_input_tokens: r.count(24, "audio_input_tokens")?,
        cache_write_1h_tokens: r.count(25, "cache_write_1h_tokens")?,
        cache_storage_token_seconds: r.count(26, "cache_storage_token_seconds")?,
        audio_input_price: r.opt_price(27)?,
        cache_write_1h_price: r.opt_price(28)?,
        cache_storage_price: r.opt_price(29)?,
    })
}

/// A profile row (its spec stored as JSON text); bad JSON is a corrupt row.
pub(crate) fn profile(r: &impl DbRow) -> StoreResult<ProfileRow> {
    let name = r.text(0)?;
    let spec = serde_json::from_str(&r.text(1)?)
        .map_err(|e| StoreError::Corrupt(format!("profile {name}: {e}")))?;
    Ok(ProfileRow { name, spec })
}

/// Every row of a query as records.
/// A row of `archived_totals` as `sql::ARCHIVED_TOTALS` reads it: its month and total.
pub(crate) fn archived_total(r: &impl DbRow) -> StoreResult<(UsageMonth, MonthTotal)> {
    let month = r
        .text(0)?
        .parse()
        .map_err(|e| StoreError::Corrupt(format!("archived_totals.month: {e}")))?;
    Ok((
        month,
        MonthTotal {
            workspace_id: r.text(1)?,
            records: r.count(2, "archived_totals.records")?,
            cost: Usd::from_pico(r.int(3)?),
        },
    ))
}

pub(crate) fn all<R: DbRow, T>(
    rows: impl IntoIterator<Item = R>,
    map: fn(&R) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    rows.into_iter().map(|r| map(&r)).collect()
}

fn json_from_db(what: &str, text: Option<String>) -> StoreResult<Option<serde_json::Value>> {
    text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(format!("{what}: {e}"))))
        .transpose()
}

pub(crate) fn audit_entry(r: &impl DbRow) -> StoreResult<AuditEntry> {
    Ok(AuditEntry {
        id: r.text(0)?,
        at: r.time(1)?,
        actor: r.text(2)?,
        action: r.text(3)?,
        workspace_id: r.opt_text(4)?,
        target: r.text(5)?,
        before: json_from_db("audit before", r.opt_text(6)?)?,
        after: json_from_db("audit after", r.opt_text(7)?)?,
    })
}

pub(crate) fn console_session(r: &impl DbRow) -> StoreResult<ConsoleSession> {
    Ok(ConsoleSession {
        id_hash: r.text(0)?,
        name: r.text(1)?,
        csrf: r.text(2)?,
        created_at: r.time(3)?,
        last_seen: r.time(4)?,
        expires_at: r.time(5)?,
    })
}

pub(crate) fn daily_usage(r: &impl DbRow) -> StoreResult<DailyUsage> {
    let day = r.text(0)?;
    Ok(DailyUsage {
        day: chrono::NaiveDate::parse_from_str(&day, "%Y-%m-%d")
            .map_err(|e| StoreError::Corrupt(format!("usage_daily.day {day:?}: {e}")))?,
        model_id: r.text(1)?,
        requests: r.count(2, "requests")?,
        input_tokens: r.count(3, "input_tokens")?,
        output_tokens: r.count(4, "output_tokens")?,
        cost: Usd::from_pico(r.int(5)?),
    })
}

pub(crate) fn alert_settings(r: &impl DbRow) -> StoreResult<AlertSettings> {
    let percents = r.text(4)?;
    Ok(AlertSettings {
        workspace_id: r.text(0)?,
        webhook_url: r.text(1)?,
        secret: r.text(2)?,
        low_balance: r.opt_int(3)?.map(Usd::from_pico),
        key_limit_percents: serde_json::from_str(&percents)
            .map_err(|e| StoreError::Corrupt(format!("key_limit_percents: {e}")))?,
    })
}

pub(crate) fn delivery(r: &impl DbRow) -> StoreResult<Delivery> {
    let status = r
        .opt_int(6)?
        .map(u16::try_from)
        .transpose()
        .map_err(|_| StoreError::Corrupt("delivery status".into()))?
        .map(StatusClass::of);
    let delivered = r.flag(8)?;
    Ok(Delivery {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        event_id: r.text(2)?,
        event: r.text(3)?,
        attempt: u32::try_from(r.int(4)?)
            .map_err(|_| StoreError::Corrupt("delivery attempt".into()))?,
        at: r.time(5)?,
        status,
        result: result_line(r.opt_text(7)?, status, delivered),
        delivered,
    })
}

pub(crate) fn stored_response(r: &impl DbRow) -> StoreResult<StoredResponse> {
    Ok(StoredResponse {
        id: r.text(0)?,
        workspace_id: r.text(1)?,
        key_id: r.opt_text(2)?,
        model: r.text(3)?,
        created_at: r.time(4)?,
        expires_at: r.time(5)?,
        items: r.text(6)?,
        response: r.text(7)?,
    })
}

/// The result line recorded (in the `error` column). Rows from before result lines kept a raw
/// error there, or nothing: they are summed up from their status instead.
fn result_line(recorded: Option<String>, status: Option<StatusClass>, delivered: bool) -> String {
    let current = |r: &String| {
        ["delivered ", "refused: ", "failed: "]
            .iter()
            .any(|p| r.starts_with(p))
    };
    match (recorded, status) {
        (Some(r), _) if current(&r) => r,
        (_, Some(class)) if delivered => format!("delivered {class}"),
        (_, Some(class)) => format!("refused: non-2xx ({class})"),
        (_, None) => "failed: connection error".to_owned(),
    }
}
