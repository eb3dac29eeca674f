//! Credit and refunds (made at most once per idempotency key), usage records and the ledger.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::audit::{self, Actor, Change};
use super::page::{Page, PageRequest};
use super::{plain_text, CommandError, CommandResult};
use crate::auth::new_id;
use crate::money::Usd;
use crate::store::{
    CreditMovement, DailyUsage, Done, IdempotencyKey, LedgerCheck, LedgerEntry, LedgerKind, Once,
    Store, StoreError, UsageFilter, UsageRecord,
};

/// A credit or refund entry and the balance after it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Credited {
    pub entry: LedgerEntry,
    pub balance: Usd,
}

/// How long an idempotency key is kept: the same key within this time gets the first answer.
pub const IDEMPOTENCY_TTL: chrono::Duration = chrono::Duration::hours(24);

/// The longest idempotency key.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// A credit or refund as an operator asks for it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CreditRequest<'a> {
    pub workspace: &'a str,
    /// Exact decimal USD, positive (a refund's too).
    pub usd: &'a str,
    /// A credit's note; a refund's reason (required).
    pub note: Option<&'a str>,
    /// Made at most once per key (1 to 255 printable ASCII characters) for 24 hours.
    pub idempotency_key: Option<&'a str>,
}

/// Adds prepaid credit (`usd`, an exact positive decimal) to a workspace.
pub async fn add_credit(
    store: &dyn Store,
    actor: &Actor,
    workspace: &str,
    usd: &str,
    note: Option<&str>,
) -> CommandResult<Credited> {
    let req = CreditRequest {
        workspace,
        usd,
        note,
        idempotency_key: None,
    };
    Ok(grant_credit(store, actor, &req).await?.into_value()?)
}

/// Adds prepaid credit to a workspace, at most once per idempotency key.
pub async fn grant_credit(
    store: &dyn Store,
    actor: &Actor,
    req: &CreditRequest<'_>,
) -> CommandResult<Done<Credited>> {
    move_credit(store, actor, LedgerKind::Credit, req).await
}

/// Takes credit not spent back from a workspace (a refund, with its reason), at most once per
/// idempotency key. A refund more than the balance is refused (`Conflict`): the balance never
/// goes below zero by a refund.
pub async fn refund_credit(
    store: &dyn Store,
    actor: &Actor,
    req: &CreditRequest<'_>,
) -> CommandResult<Done<Credited>> {
    move_credit(store, actor, LedgerKind::Refund, req).await
}

/// A credit or refund, checked, written with its audit entry (and its idempotency key): what
/// was made, or the JSON first answered under the key.
async fn move_credit(
    store: &dyn Store,
    actor: &Actor,
    kind: LedgerKind,
    req: &CreditRequest<'_>,
) -> CommandResult<Done<Credited>> {
    let (action, field) = match kind {
        LedgerKind::Refund => ("credit.refund", "reason"),
        _ => ("credit.add", "note"),
    };
    let amount: Usd = req.usd.parse()?;
    if !amount.is_positive() {
        return Err(CommandError::Invalid("--usd must be positive".into()));
    }
    let note = req.note.map(|n| plain_text(field, n)).transpose()?;
    if kind == LedgerKind::Refund && note.is_none_or(|n| n.trim().is_empty()) {
        return Err(CommandError::Invalid(
            "reason: a refund needs a reason".into(),
        ));
    }
    let movement = CreditMovement {
        entry_id: new_id("le"),
        workspace_id: req.workspace.to_owned(),
        kind,
        amount,
        note: note.map(str::to_owned),
    };
    let once = req
        .idempotency_key
        .map(|key| once(action, key, &movement))
        .transpose()?;
    let change = Change {
        action,
        workspace: Some(req.workspace),
        target: &movement.entry_id,
    };
    let key = req.idempotency_key.map(str::to_owned);
    let audit = audit::of(
        actor,
        change,
        None,
        move |(entry, balance): &(LedgerEntry, Usd)| {
            let mut after = serde_json::json!({ "entry": entry, "balance": balance });
            if let Some(key) = key {
                after["idempotency_key"] = key.into();
            }
            Some(after)
        },
    );
    Ok(
        match store.move_credit(&movement, Some(audit), once).await? {
            Done::Made((entry, balance)) => Done::Made(Credited { entry, balance }),
            Done::Replayed(json) => Done::Replayed(json),
        },
    )
}

/// The idempotency of `movement` under `key`: the key checked, the request's hash, and the
/// answer kept with it (the JSON of its [`Credited`]).
fn once(
    operation: &'static str,
    key: &str,
    movement: &CreditMovement,
) -> CommandResult<Once<(LedgerEntry, Usd)>> {
    let printable = |c: char| c == ' ' || c.is_ascii_graphic();
    if !(1..=MAX_IDEMPOTENCY_KEY).contains(&key.len()) || !key.chars().all(printable) {
        return Err(CommandError::Invalid(format!(
            "Idempotency-Key: 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters expected"
        )));
    }
    // What was asked, not how it was spelt: `"10.50"` and `10.5` are one request.
    let asked = serde_json::json!([
        operation,
        movement.workspace_id,
        movement.amount.pico(),
        movement.note
    ]);
    let created_at = Utc::now();
    let key = IdempotencyKey {
        workspace_id: movement.workspace_id.clone(),
        operation,
        key: key.to_owned(),
        request_hash: hex::encode(Sha256::digest(asked.to_string())),
        created_at,
        expires_at: created_at
            .checked_add_signed(IDEMPOTENCY_TTL)
            .ok_or_else(|| CommandError::Invalid("the clock is past the last date".into()))?,
    };
    Ok(Once {
        key,
        answer: Box::new(|(entry, balance)| {
            let credited = Credited {
                entry: entry.clone(),
                balance: *balance,
            };
            serde_json::to_string(&credited).unwrap_or_default()
        }),
    })
}

/// A workspace's usage records, oldest first, optionally from `since` on.
pub async fn usage(
    store: &dyn Store,
    workspace: &str,
    since: Option<DateTime<Utc>>,
) -> CommandResult<Vec<UsageRecord>> {
    Ok(store.usage(workspace, since).await?)
}

/// A workspace's ledger and balance.
#[derive(Debug, Serialize)]
pub struct Ledger {
    pub entries: Vec<LedgerEntry>,
    pub balance: Usd,
}

pub async fn ledger(store: &dyn Store, workspace: &str) -> CommandResult<Ledger> {
    let entries = store.ledger(workspace).await?;
    let balance = store.balance(workspace).await?;
    Ok(Ledger { entries, balance })
}

/// Every balance checked against its ledger and usage records; the ones that disagree.
#[derive(Debug, Serialize)]
pub struct Verified {
    pub checked: usize,
    pub inconsistent: Vec<LedgerCheck>,
    /// Records in PostgreSQL's default partition of `usage_records` (always 0 on SQLite): it
    /// must stay empty, a record there is of a month without its partition.
    pub default_partition_records: u64,
}

impl Verified {
    /// Every workspace balances and the default partition is empty.
    pub fn is_clean(&self) -> bool {
        self.inconsistent.is_empty() && self.default_partition_records == 0
    }
}

/// Each workspace's debits are checked against its usage records plus the carried-forward
/// totals of its archived months (`archived_totals`).
pub async fn verify_ledger(store: &dyn Store) -> CommandResult<Verified> {
    let checks = store.ledger_verify().await?;
    let checked = checks.len();
    let inconsistent = checks.into_iter().filter(|c| !c.is_consistent()).collect();
    Ok(Verified {
        checked,
        inconsistent,
        default_partition_records: store.default_partition_records().await?,
    })
}

async fn known_workspace(store: &dyn Store, id: &str) -> CommandResult<()> {
    match store.get_workspace(id).await? {
        Some(_) => Ok(()),
        None => Err(StoreError::NotFound(format!("workspace {id}")).into()),
    }
}

/// A page of a workspace's ledger, newest first, with its balance now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LedgerPage {
    pub balance: Usd,
    #[serde(flatten)]
    pub page: Page<LedgerEntry>,
}

pub async fn ledger_page(
    store: &dyn Store,
    workspace: &str,
    page: &PageRequest,
) -> CommandResult<LedgerPage> {
    known_workspace(store, workspace).await?;
    let rows = store
        .ledger_page(workspace, page.after.as_ref(), page.fetch())
        .await?;
    Ok(LedgerPage {
        balance: store.balance(workspace).await?,
        page: page.finish(rows, |e| (e.created_at, &e.id)),
    })
}

/// A page of a workspace's usage records, newest first.
pub async fn usage_page(
    store: &dyn Store,
    workspace: &str,
    filter: &UsageFilter,
    page: &PageRequest,
) -> CommandResult<Page<UsageRecord>> {
    known_workspace(store, workspace).await?;
    let rows = store
        .usage_page(workspace, filter, page.after.as_ref(), page.fetch())
        .await?;
    Ok(page.finish(rows, |r| (r.finished_at, &r.id)))
}

/// The most days one daily-usage query covers.
pub const MAX_DAYS: i64 = 366;

/// A workspace's usage per UTC day and model, for the days `from..=to`.
pub async fn usage_daily(
    store: &dyn Store,
    workspace: &str,
    from: NaiveDate,
    to: NaiveDate,
) -> CommandResult<Vec<DailyUsage>> {
    let days = to.signed_duration_since(from).num_days();
    if !(0..MAX_DAYS).contains(&days) {
        return Err(CommandError::Invalid(format!(
            "from..to: 1 to {MAX_DAYS} days, from not after to"
        )));
    }
    known_workspace(store, workspace).await?;
    Ok(store.usage_daily(workspace, from, to).await?)
}
