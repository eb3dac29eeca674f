//! Credit, usage records and the ledger.

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;

use super::audit::{self, Actor, Change};
use super::page::{Page, PageRequest};
use super::{plain_text, CommandError, CommandResult};
use crate::auth::new_id;
use crate::money::Usd;
use crate::store::{
    DailyUsage, LedgerCheck, LedgerEntry, Store, StoreError, UsageFilter, UsageRecord,
};

/// A credit entry and the balance after it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Credited {
    pub entry: LedgerEntry,
    pub balance: Usd,
}

/// Adds prepaid credit (`usd`, an exact positive decimal) to a workspace.
pub async fn add_credit(
    store: &dyn Store,
    actor: &Actor,
    workspace: &str,
    usd: &str,
    note: Option<&str>,
) -> CommandResult<Credited> {
    let amount: Usd = usd.parse()?;
    if !amount.is_positive() {
        return Err(CommandError::Invalid("--usd must be positive".into()));
    }
    let note = note.map(|n| plain_text("note", n)).transpose()?;
    let id = new_id("le");
    let change = Change {
        action: "credit.add",
        workspace: Some(workspace),
        target: &id,
    };
    let audit = audit::of(
        actor,
        change,
        None,
        |(entry, balance): &(LedgerEntry, Usd)| {
            Some(serde_json::json!({ "entry": entry, "balance": balance }))
        },
    );
    let (entry, balance) = store
        .add_credit(&id, workspace, amount, note, Some(audit))
        .await?;
    Ok(Credited { entry, balance })
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
}

pub async fn verify_ledger(store: &dyn Store) -> CommandResult<Verified> {
    let checks = store.ledger_verify().await?;
    let checked = checks.len();
    let inconsistent = checks.into_iter().filter(|c| !c.is_consistent()).collect();
    Ok(Verified {
        checked,
        inconsistent,
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
