//! Credit, usage records and the ledger.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{CommandError, CommandResult};
use crate::auth::new_id;
use crate::money::Usd;
use crate::store::{LedgerCheck, LedgerEntry, Store, UsageRecord};

/// A credit entry and the balance after it.
#[derive(Debug, Serialize)]
pub struct Credited {
    pub entry: LedgerEntry,
    pub balance: Usd,
}

/// Adds prepaid credit (`usd`, an exact positive decimal) to a workspace.
pub async fn add_credit(
    store: &dyn Store,
    workspace: &str,
    usd: &str,
    note: Option<&str>,
) -> CommandResult<Credited> {
    let amount: Usd = usd.parse()?;
    if !amount.is_positive() {
        return Err(CommandError::Invalid("--usd must be positive".into()));
    }
    let entry = store
        .add_credit(&new_id("le"), workspace, amount, note)
        .await?;
    let balance = store.balance(workspace).await?;
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
