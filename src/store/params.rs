//! Writing, once for both backends: every value a statement binds is a [`Param`], and each
//! record's are listed here in its table's `*_COLS` order (`sql`). Each backend binds a `Param`
//! its own way — the only per-dialect part, the mirror of `rows::DbRow`: PostgreSQL keeps
//! `TIMESTAMPTZ` and `BOOLEAN`, SQLite microseconds and integers.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};

use chrono::{DateTime, Utc};

use super::codec;
use super::{
    AlertSettings, ApiKey, AuditEntry, CatalogRows, ConsoleSession, CreditMovement, Delivery,
    IdempotencyKey, KeyUpdate, LedgerEntry, LedgerKind, LimitReset, ManagementKey, ModelRow,
    MonthTotal, NewKey, ProfileRow, RouteRow, StoreError, StoreResult, StoredResponse, UsageMonth,
    Workspace,
};
use crate::money::{Price, Usd};

/// One value a statement binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Param<'a> {
    Null,
    Text(Cow<'a, str>),
    /// A BIGINT column.
    Int(i64),
    /// An INTEGER column (PostgreSQL's int4).
    Int32(i32),
    /// A count in an INTEGER column: SQLite keeps it whole, PostgreSQL's int4 saturates at
    /// `i32::MAX`.
    Count32(u32),
    Flag(bool),
    Time(DateTime<Utc>),
}

impl Param<'_> {
    /// The same value, borrowing nothing (SQLite's statements run on another thread).
    pub(crate) fn into_owned(self) -> Param<'static> {
        match self {
            Param::Null => Param::Null,
            Param::Text(s) => Param::Text(Cow::Owned(s.into_owned())),
            Param::Int(n) => Param::Int(n),
            Param::Int32(n) => Param::Int32(n),
            Param::Count32(n) => Param::Count32(n),
            Param::Flag(b) => Param::Flag(b),
            Param::Time(t) => Param::Time(t),
        }
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(s: &'a str) -> Self {
        Param::Text(Cow::Borrowed(s))
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(s: &'a String) -> Self {
        Param::Text(Cow::Borrowed(s))
    }
}

impl From<String> for Param<'_> {
    fn from(s: String) -> Self {
        Param::Text(Cow::Owned(s))
    }
}

impl From<i64> for Param<'_> {
    fn from(n: i64) -> Self {
        Param::Int(n)
    }
}

impl From<i32> for Param<'_> {
    fn from(n: i32) -> Self {
        Param::Int32(n)
    }
}

impl From<bool> for Param<'_> {
    fn from(b: bool) -> Self {
        Param::Flag(b)
    }
}

impl From<DateTime<Utc>> for Param<'_> {
    fn from(t: DateTime<Utc>) -> Self {
        Param::Time(t)
    }
}

impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Param::Null, Into::into)
    }
}

/// The key as it is stored: created now, times at the database's microsecond precision.
pub(crate) fn new_api_key(key: NewKey) -> ApiKey {
    ApiKey {
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
        replaced_by: None,
        allowed_models: key.allowed_models,
    }
}

/// The management key as it is stored: times at the database's microsecond precision.
pub(crate) fn stored_management_key(key: &ManagementKey) -> ManagementKey {
    ManagementKey {
        created_at: codec::trunc(key.created_at),
        expires_at: key.expires_at.map(codec::trunc),
        revoked_at: key.revoked_at.map(codec::trunc),
        ..key.clone()
    }
}

/// A credit or refund entry as it is stored (created now, a refund's amount negated), once the
/// movement is checked: a positive amount, a refund's reason, never a debit.
pub(crate) fn movement_entry(m: &CreditMovement) -> StoreResult<LedgerEntry> {
    codec::check_credit(m.amount)?;
    let amount = match m.kind {
        LedgerKind::Credit => m.amount,
        LedgerKind::Refund if m.note.as_deref().is_none_or(|n| n.trim().is_empty()) => {
            return Err(StoreError::Conflict("a refund needs a reason".into()));
        }
        LedgerKind::Refund => Usd::from_pico(m.amount.pico().saturating_neg()),
        LedgerKind::Debit => {
            return Err(StoreError::Conflict(
                "a debit is written with its usage record only".into(),
            ));
        }
    };
    Ok(LedgerEntry {
        id: m.entry_id.clone(),
        workspace_id: m.workspace_id.clone(),
        kind: m.kind,
        amount,
        note: m.note.clone(),
        created_at: codec::now(),
        usage_id: None,
    })
}

/// The answer kept with a key just claimed, as `sql::idempotency_answer_sql` binds it.
pub(crate) fn idempotency_answer(k: &IdempotencyKey, answer: String) -> [Param<'_>; 4] {
    [
        (&k.workspace_id).into(),
        k.operation.into(),
        (&k.key).into(),
        answer.into(),
    ]
}

/// An idempotency key's claim, in `IDEMPOTENCY_COLS` order (its answer is set later, in the
/// same transaction).
pub(crate) fn idempotency_claim(k: &IdempotencyKey) -> [Param<'_>; 6] {
    [
        (&k.workspace_id).into(),
        k.operation.into(),
        (&k.key).into(),
        (&k.request_hash).into(),
        codec::trunc(k.created_at).into(),
        codec::trunc(k.expires_at).into(),
    ]
}

/// Every model id whose routes `import_catalog` replaces: those of the models and the routes.
pub(crate) fn catalog_model_ids(rows: &CatalogRows) -> BTreeSet<&str> {
    rows.models
        .iter()
        .map(|m| m.id.as_str())
        .chain(rows.routes.iter().map(|r| r.model_id.as_str()))
        .collect()
}

/// In `WORKSPACE_COLS` order.
pub(crate) fn workspace(w: &Workspace) -> [Param<'_>; 3] {
    [(&w.id).into(), (&w.name).into(), w.created_at.into()]
}

/// In `KEY_COLS` order.
pub(crate) fn api_key(k: &ApiKey) -> StoreResult<[Param<'_>; 12]> {
    Ok([
        (&k.id).into(),
        (&k.workspace_id).into(),
        k.name.as_deref().into(),
        (&k.secret_hash).into(),
        (&k.hint).into(),
        k.created_at.into(),
        k.expires_at.into(),
        k.revoked_at.into(),
        k.spend_limit.map(Usd::pico).into(),
        k.limit_reset.map(LimitReset::as_str).into(),
        k.replaced_by.as_deref().into(),
        codec::strings_to_db("allowed_models", &k.allowed_models)?.into(),
    ])
}

/// `key_update_sql`'s parameters: id, then the settings.
pub(crate) fn key_update<'a>(id: &'a str, u: &'a KeyUpdate) -> StoreResult<[Param<'a>; 5]> {
    Ok([
        id.into(),
        u.name.as_deref().into(),
        u.spend_limit.map(Usd::pico).into(),
        u.limit_reset.map(LimitReset::as_str).into(),
        codec::strings_to_db("allowed_models", &u.allowed_models)?.into(),
    ])
}

/// In `MANAGEMENT_KEY_COLS` order.
pub(crate) fn management_key(k: &ManagementKey) -> [Param<'_>; 8] {
    [
        (&k.id).into(),
        (&k.workspace_id).into(),
        k.name.as_deref().into(),
        (&k.secret_hash).into(),
        (&k.hint).into(),
        k.created_at.into(),
        k.expires_at.into(),
        k.revoked_at.into(),
    ]
}

/// In `LEDGER_COLS` order.
pub(crate) fn ledger_entry(e: &LedgerEntry) -> [Param<'_>; 6] {
    [
        (&e.id).into(),
        (&e.workspace_id).into(),
        codec::ledger_kind_str(e.kind).into(),
        e.amount.pico().into(),
        e.note.as_deref().into(),
        e.created_at.into(),
    ]
}

/// In `PROFILE_COLS` order (the spec as JSON text).
pub(crate) fn profile(p: &ProfileRow) -> [Param<'_>; 2] {
    [(&p.name).into(), p.spec.to_string().into()]
}

/// In `MODEL_COLS` order; a long-context threshold beyond BIGINT is refused.
pub(crate) fn model(m: &ModelRow) -> StoreResult<[Param<'_>; 26]> {
    let micro = |p: Option<Price>| Param::from(p.map(Price::micro_per_mtok));
    let long = m.long_context.as_ref();
    let above = long
        .map(|l| {
            i64::try_from(l.above).map_err(|_| {
                StoreError::Conflict(format!("model {}: long_context.above too large", m.id))
            })
        })
        .transpose()?;
    Ok([
        (&m.id).into(),
        (&m.provider).into(),
        (&m.family).into(),
        (&m.kind).into(),
        (&m.upstream_model).into(),
        (&m.profile).into(),
        m.input_price.micro_per_mtok().into(),
        m.output_price.micro_per_mtok().into(),
        micro(m.cache_read_price),
        micro(m.cache_write_price),
        codec::strings_to_db("capabilities", &m.capabilities)?.into(),
        codec::max_tokens_to_db(m.max_output_tokens).into(),
        m.active.into(),
        micro(m.cache_write_1h_price),
        micro(m.audio_input_price),
        micro(m.cache_storage_price),
        above.into(),
        micro(long.map(|l| l.input_price)),
        micro(long.map(|l| l.output_price)),
        micro(long.and_then(|l| l.cache_read_price)),
        micro(long.and_then(|l| l.cache_write_price)),
        micro(long.and_then(|l| l.cache_write_1h_price)),
        m.context_window.map(i64::from).into(),
        m.shutdown.map(|d| d.to_string()).into(),
        m.source.as_deref().into(),
        codec::strings_to_db("aliases", &m.aliases)?.into(),
    ])
}

/// In `ROUTE_COLS` order.
pub(crate) fn route(r: &RouteRow) -> [Param<'_>; 9] {
    [
        (&r.model_id).into(),
        (&r.kind).into(),
        r.base_url.as_deref().into(),
        r.region.as_deref().into(),
        r.priority.into(),
        r.active.into(),
        r.weight.into(),
        r.upstream_model.as_deref().into(),
        (&r.api).into(),
    ]
}

/// In `AUDIT_COLS` order (`before` and `after` as JSON text).
pub(crate) fn audit_entry(e: &AuditEntry) -> [Param<'_>; 8] {
    let json = |v: &Option<serde_json::Value>| Param::from(v.as_ref().map(|v| v.to_string()));
    [
        (&e.id).into(),
        codec::trunc(e.at).into(),
        (&e.actor).into(),
        (&e.action).into(),
        e.workspace_id.as_deref().into(),
        (&e.target).into(),
        json(&e.before),
        json(&e.after),
    ]
}

/// In `SESSION_COLS` order.
pub(crate) fn console_session(c: &ConsoleSession) -> [Param<'_>; 6] {
    [
        (&c.id_hash).into(),
        (&c.name).into(),
        (&c.csrf).into(),
        codec::trunc(c.created_at).into(),
        codec::trunc(c.last_seen).into(),
        codec::trunc(c.expires_at).into(),
    ]
}

/// In `ALERT_COLS` order (the percentages as a JSON array).
pub(crate) fn alert_settings(s: &AlertSettings) -> [Param<'_>; 5] {
    let percents = serde_json::to_string(&s.key_limit_percents).unwrap_or_else(|_| "[]".into());
    [
        (&s.workspace_id).into(),
        (&s.webhook_url).into(),
        (&s.secret).into(),
        s.low_balance.map(Usd::pico).into(),
        percents.into(),
    ]
}

/// In `DELIVERY_COLS` order (the result line in the `error` column, the status as its class's
/// first code).
pub(crate) fn delivery(d: &Delivery) -> [Param<'_>; 9] {
    [
        (&d.id).into(),
        (&d.workspace_id).into(),
        (&d.event_id).into(),
        (&d.event).into(),
        i64::from(d.attempt).into(),
        codec::trunc(d.at).into(),
        d.status.map(|c| i64::from(c.code())).into(),
        (&d.result).into(),
        d.delivered.into(),
    ]
}

/// `keep_responses`' batch as every writer inserts it: the first occurrence of each id, sorted
/// by id (one lock order for concurrent writers), times at storage precision. A response that
/// cannot be stored fails the whole batch before anything is written: a NUL character
/// (PostgreSQL's text cannot hold one), or an expiry not after its creation.
pub(crate) fn response_batch(batch: &[StoredResponse]) -> StoreResult<Vec<StoredResponse>> {
    let mut seen = HashSet::with_capacity(batch.len());
    let mut out = Vec::with_capacity(batch.len());
    for r in batch.iter().filter(|r| seen.insert(r.id.as_str())) {
        let texts = [&r.id, &r.workspace_id, &r.model, &r.items, &r.response];
        if texts.into_iter().chain(&r.key_id).any(|t| t.contains('\0')) {
            return Err(StoreError::Conflict(format!(
                "response {:?}: a NUL character cannot be stored",
                r.id
            )));
        }
        let mut r = r.clone();
        r.created_at = codec::trunc(r.created_at);
        r.expires_at = codec::trunc(r.expires_at);
        if r.expires_at <= r.created_at {
            return Err(StoreError::Conflict(format!(
                "response {}: expires at {} but was created at {}",
                r.id, r.expires_at, r.created_at
            )));
        }
        out.push(r);
    }
    // Byte order, like the `COLLATE "C"` the PostgreSQL backend sorts with.
    out.sort_by(|a, b| a.id.as_bytes().cmp(b.id.as_bytes()));
    Ok(out)
}

/// In `RESPONSE_COLS` order.
pub(crate) fn stored_response(r: &StoredResponse) -> [Param<'_>; 8] {
    [
        (&r.id).into(),
        (&r.workspace_id).into(),
        r.key_id.as_deref().into(),
        (&r.model).into(),
        r.created_at.into(),
        r.expires_at.into(),
        (&r.items).into(),
        (&r.response).into(),
    ]
}

/// An archived month's totals row, in `sql::archived_total_insert_sql`'s order.
pub(crate) fn archived_total(
    month: UsageMonth,
    t: &MonthTotal,
    at: DateTime<Utc>,
) -> StoreResult<[Param<'_>; 5]> {
    let records = i64::try_from(t.records).map_err(|_| {
        StoreError::Overflow(format!(
            "{month}: {} records of {}",
            t.records, t.workspace_id
        ))
    })?;
    Ok([
        (&t.workspace_id).into(),
        month.to_string().into(),
        records.into(),
        t.cost.pico().into(),
        codec::trunc(at).into(),
    ])
}
