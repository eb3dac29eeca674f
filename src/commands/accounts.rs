//! Workspaces and their API keys.

use chrono::{DateTime, Datelike, SubsecRound, Utc};
use serde::Serialize;

use super::audit::{self, Actor, Change};
use super::page::{Page, PageRequest};
use super::{plain_text, CommandError, CommandResult};
use crate::auth::allowlist::checked_patterns;
use crate::auth::{mint_secret, new_id};
use crate::billing::window::{current_spends, window_start};
use crate::money::Usd;
use crate::store::{
    ApiKey, KeyRotation, KeyUpdate, LimitReset, NewKey, Store, StoreError, Workspace,
};

/// The longest grace period a rotated key keeps working: 30 days.
pub const MAX_GRACE: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

/// The longest workspace or key name.
const MAX_NAME: usize = 100;

pub(super) fn checked_name(name: &str) -> CommandResult<&str> {
    let name = plain_text("name", name.trim())?;
    if name.is_empty() || name.chars().count() > MAX_NAME {
        return Err(CommandError::Invalid(format!(
            "name: 1 to {MAX_NAME} characters expected"
        )));
    }
    Ok(name)
}

pub async fn create_workspace(
    store: &dyn Store,
    actor: &Actor,
    name: &str,
) -> CommandResult<Workspace> {
    let name = checked_name(name)?;
    let id = new_id("ws");
    let change = Change {
        action: "workspace.create",
        workspace: Some(&id),
        target: &id,
    };
    let audit = audit::of(actor, change, None, audit::snapshot);
    Ok(store.create_workspace(&id, name, Some(audit)).await?)
}

pub async fn rename_workspace(
    store: &dyn Store,
    actor: &Actor,
    id: &str,
    name: &str,
) -> CommandResult<Workspace> {
    let name = checked_name(name)?;
    let before = workspace(store, id).await?;
    let change = Change {
        action: "workspace.rename",
        workspace: Some(id),
        target: id,
    };
    let audit = audit::of(actor, change, audit::snapshot(&before), audit::snapshot);
    Ok(store.rename_workspace(id, name, Some(audit)).await?)
}

pub async fn list_workspaces(store: &dyn Store) -> CommandResult<Vec<Workspace>> {
    Ok(store.list_workspaces().await?)
}

/// A workspace and its balance.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WorkspaceView {
    #[serde(flatten)]
    pub workspace: Workspace,
    pub balance: Usd,
}

async fn workspace(store: &dyn Store, id: &str) -> CommandResult<Workspace> {
    store
        .get_workspace(id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("workspace {id}")).into())
}

pub async fn workspace_view(store: &dyn Store, id: &str) -> CommandResult<WorkspaceView> {
    let workspace = workspace(store, id).await?;
    let balance = store.balance(id).await?;
    Ok(WorkspaceView { workspace, balance })
}

/// Workspaces, newest first, with their balances.
pub async fn workspaces_page(
    store: &dyn Store,
    page: &PageRequest,
) -> CommandResult<Page<WorkspaceView>> {
    let rows = store
        .workspaces_page(page.after.as_ref(), page.fetch())
        .await?;
    let page = page.finish(rows, |w| (w.created_at, &w.id));
    let mut data = Vec::with_capacity(page.data.len());
    for workspace in page.data {
        let balance = store.balance(&workspace.id).await?;
        data.push(WorkspaceView { workspace, balance });
    }
    Ok(Page {
        data,
        next_cursor: page.next_cursor,
    })
}

/// What a new key should be.
#[derive(Debug, Clone, Default)]
pub struct KeyRequest {
    pub workspace: String,
    pub name: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Exact decimal USD per window; comes with `limit_reset`.
    pub spend_limit_usd: Option<String>,
    pub limit_reset: Option<LimitReset>,
    /// Model id patterns the key may call (`auth::allowlist`); empty: every model.
    pub allowed_models: Vec<String>,
}

/// A new key and its secret, which is never available again.
#[derive(Debug, Serialize)]
pub struct CreatedKey {
    #[serde(flatten)]
    pub key: ApiKey,
    pub secret: String,
}

/// Mints a key (`key_prefix` + random secret; only its hash is stored).
pub async fn create_key(
    store: &dyn Store,
    actor: &Actor,
    key_prefix: &str,
    req: KeyRequest,
) -> CommandResult<CreatedKey> {
    let spend_limit = req
        .spend_limit_usd
        .as_deref()
        .map(str::parse::<Usd>)
        .transpose()?;
    if spend_limit.is_some_and(|l| !l.is_positive()) {
        return Err(CommandError::Invalid(
            "--spend-limit-usd must be positive".into(),
        ));
    }
    if spend_limit.is_some() != req.limit_reset.is_some() {
        return Err(CommandError::Invalid(
            "a spend limit needs a reset period, and a reset period a spend limit".into(),
        ));
    }
    let name = req.name.as_deref().map(checked_name).transpose()?;
    if let Some(at) = req.expires_at {
        checked_expiry(at)?;
    }
    let allowed_models = checked_patterns(&req.allowed_models).map_err(CommandError::Invalid)?;
    let minted = mint_secret(key_prefix);
    let new = NewKey {
        id: new_id("key"),
        workspace_id: req.workspace,
        name: name.map(str::to_owned),
        secret_hash: minted.hash_hex,
        hint: minted.hint,
        expires_at: req.expires_at,
        spend_limit,
        limit_reset: req.limit_reset,
        allowed_models,
    };
    let change = Change {
        action: "key.create",
        workspace: Some(&new.workspace_id),
        target: &new.id,
    };
    let audit = audit::of(actor, change, None, audit::snapshot);
    let key = store.create_key(new, Some(audit)).await?;
    Ok(CreatedKey {
        key,
        secret: minted.secret,
    })
}

/// A key's expiry must be a time both databases hold exactly (PostgreSQL's range ends 4713
/// BC, chrono's later): years 1970 to 9999.
pub(super) fn checked_expiry(at: DateTime<Utc>) -> CommandResult<()> {
    if (1970..=9999).contains(&at.year()) {
        Ok(())
    } else {
        Err(CommandError::Invalid(
            "expires_at: a time in the years 1970 to 9999 expected".into(),
        ))
    }
}

pub async fn list_keys(store: &dyn Store, workspace: &str) -> CommandResult<Vec<ApiKey>> {
    Ok(store.list_keys(workspace).await?)
}

/// What a key is now, as the console's badge shows it. A revoked key never works again; an
/// expired one no longer works; a spend-limited one works again when its window resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyStatus {
    Active,
    Expired,
    Revoked,
    SpendLimited,
}

impl KeyStatus {
    pub fn of(key: &ApiKey, window_spend: Option<Usd>, now: DateTime<Utc>) -> Self {
        if key.revoked_at.is_some_and(|at| at <= now) {
            Self::Revoked
        } else if key.expires_at.is_some_and(|at| at <= now) {
            Self::Expired
        } else if matches!((key.spend_limit, window_spend), (Some(l), Some(s)) if s >= l) {
            Self::SpendLimited
        } else {
            Self::Active
        }
    }
}

/// A key as operators see it: its settings, its spend in the current window, its status.
/// Never the secret nor its hash.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct KeyView {
    pub id: String,
    pub workspace_id: String,
    pub name: Option<String>,
    /// The display prefix and last four characters, e.g. `sk-tg-AbCd…wxyz`.
    pub hint: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub spend_limit_usd: Option<Usd>,
    pub limit_reset: Option<LimitReset>,
    /// The current spend window's start, for a key with a limit.
    pub window_start: Option<DateTime<Utc>>,
    pub spend_usd: Option<Usd>,
    pub status: KeyStatus,
    /// The key that replaced this one in a rotation (then this one cannot be rotated again).
    pub replaced_by: Option<String>,
    /// The model id patterns the key may call (`*`: any run of characters); empty: every model.
    pub allowed_models: Vec<String>,
}

impl KeyView {
    pub fn new(key: ApiKey, window_spend: Option<Usd>, now: DateTime<Utc>) -> Self {
        KeyView {
            status: KeyStatus::of(&key, window_spend, now),
            window_start: key.limit_reset.map(|r| window_start(r, now)),
            spend_usd: window_spend,
            id: key.id,
            workspace_id: key.workspace_id,
            name: key.name,
            hint: key.hint,
            created_at: key.created_at,
            expires_at: key.expires_at,
            revoked_at: key.revoked_at,
            spend_limit_usd: key.spend_limit,
            limit_reset: key.limit_reset,
            replaced_by: key.replaced_by,
            allowed_models: key.allowed_models,
        }
    }
}

/// Keys with their window spend (read in one query for the whole list).
pub async fn key_views(
    store: &dyn Store,
    keys: Vec<ApiKey>,
    now: DateTime<Utc>,
) -> CommandResult<Vec<KeyView>> {
    let spends = current_spends(store, &keys, now).await?;
    Ok(keys
        .into_iter()
        .zip(spends)
        .map(|(k, spend)| KeyView::new(k, spend, now))
        .collect())
}

/// One key's view now; `NotFound` when absent.
pub async fn key_view(store: &dyn Store, id: &str, now: DateTime<Utc>) -> CommandResult<KeyView> {
    let key = key(store, id).await?;
    let mut views = key_views(store, vec![key], now).await?;
    views
        .pop()
        .ok_or_else(|| StoreError::NotFound(format!("key {id}")).into())
}

async fn key(store: &dyn Store, id: &str) -> CommandResult<ApiKey> {
    store
        .get_key(id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("key {id}")).into())
}

/// A workspace's keys, newest first, with their status and spend.
pub async fn keys_page(
    store: &dyn Store,
    workspace_id: &str,
    page: &PageRequest,
    now: DateTime<Utc>,
) -> CommandResult<Page<KeyView>> {
    workspace(store, workspace_id).await?;
    let rows = store
        .keys_page(workspace_id, page.after.as_ref(), page.fetch())
        .await?;
    let page = page.finish(rows, |k| (k.created_at, &k.id));
    Ok(Page {
        data: key_views(store, page.data, now).await?,
        next_cursor: page.next_cursor,
    })
}

/// A change of a key's settings; each `None` leaves that setting as it is.
#[derive(Debug, Clone, Default)]
pub struct KeyPatch {
    /// `Some(None)`: no name.
    pub name: Option<Option<String>>,
    /// Exact decimal USD per window, positive.
    pub spend_limit_usd: Option<String>,
    pub limit_reset: Option<LimitReset>,
    /// The whole new list; `Some(vec![])`: every model.
    pub allowed_models: Option<Vec<String>>,
}

/// Changes a key's name, spend limit or model allowlist, audited as `key.update`; the change
/// feed carries it to every gateway within its delay, so the key's next requests obey it.
///
/// A limit's period is fixed once a key has one: the gates count spend per window of that
/// period, and windows of two periods do not follow each other, so a key's limit may be given
/// (with its period) or raised and lowered, never moved to another period nor removed (a key
/// without a limit never had a window). Such a change is refused; create a new key instead.
pub async fn update_key(
    store: &dyn Store,
    actor: &Actor,
    id: &str,
    patch: KeyPatch,
) -> CommandResult<ApiKey> {
    let before = key(store, id).await?;
    let name = match &patch.name {
        None => before.name.clone(),
        Some(None) => None,
        Some(Some(name)) => Some(checked_name(name)?.to_owned()),
    };
    let allowed_models = match &patch.allowed_models {
        None => before.allowed_models.clone(),
        Some(list) => checked_patterns(list).map_err(CommandError::Invalid)?,
    };
    let (spend_limit, limit_reset) = limit_after(&before, &patch)?;
    let update = KeyUpdate {
        name,
        spend_limit,
        limit_reset,
        allowed_models,
    };
    let change = Change {
        action: "key.update",
        workspace: Some(&before.workspace_id),
        target: id,
    };
    let audit = audit::of(actor, change, audit::snapshot(&before), audit::snapshot);
    Ok(store.update_key(id, &update, Some(audit)).await?)
}

/// The limit and period a patch leaves `key` with ([`update_key`]'s rule).
fn limit_after(key: &ApiKey, patch: &KeyPatch) -> CommandResult<(Option<Usd>, Option<LimitReset>)> {
    if let (Some(had), Some(asked)) = (key.limit_reset, patch.limit_reset) {
        if had != asked {
            return Err(CommandError::Invalid(format!(
                "limit_reset: key {} counts its spend {}; a limit's period is fixed once set \
                 (create a new key for another period)",
                key.id,
                had.as_str()
            )));
        }
    }
    let limit = patch
        .spend_limit_usd
        .as_deref()
        .map(str::parse::<Usd>)
        .transpose()?;
    if limit.is_some_and(|l| !l.is_positive()) {
        return Err(CommandError::Invalid(
            "spend_limit_usd must be positive".into(),
        ));
    }
    let limit = limit.or(key.spend_limit);
    let reset = patch.limit_reset.or(key.limit_reset);
    if limit.is_some() != reset.is_some() {
        return Err(CommandError::Invalid(
            "a spend limit needs a reset period, and a reset period a spend limit".into(),
        ));
    }
    Ok((limit, reset))
}

/// A revocation: `changed` is false when the key was revoked already.
#[derive(Debug, Serialize)]
pub struct Revoked {
    pub id: String,
    pub revoked: bool,
    pub changed: bool,
}

pub async fn revoke_key(
    store: &dyn Store,
    actor: &Actor,
    id: &str,
    now: DateTime<Utc>,
) -> CommandResult<Revoked> {
    let before = key(store, id).await?;
    let change = Change {
        action: "key.revoke",
        workspace: Some(&before.workspace_id),
        target: id,
    };
    let audit = audit::of(actor, change, audit::snapshot(&before), audit::snapshot);
    let changed = store.revoke_key(id, now, Some(audit)).await?;
    Ok(Revoked {
        id: id.to_owned(),
        revoked: true,
        changed,
    })
}

/// A rotation: the new key (its secret shown once) and the old one as it is now.
#[derive(Debug, Serialize)]
pub struct Rotated {
    pub key: ApiKey,
    pub secret: String,
    pub old: ApiKey,
}

/// A new key with the old one's settings (its name, limit and original expiry); the old one
/// is revoked now, or after `grace` (its `expires_at` brought forward, never pushed back).
/// Everything is checked first, then the store makes the whole rotation — new key, old key
/// ended and marked replaced, audit entry — in one transaction. A key already rotated (in its
/// grace period, or revoked by its rotation) is refused with `Conflict`: rotate its
/// replacement instead; so is the loser of two concurrent rotations.
pub async fn rotate_key(
    store: &dyn Store,
    actor: &Actor,
    key_prefix: &str,
    id: &str,
    grace: Option<std::time::Duration>,
    now: DateTime<Utc>,
) -> CommandResult<Rotated> {
    let until = grace_end(grace, now)?;
    let old = key(store, id).await?;
    check_rotatable(&old, now)?;
    let minted = mint_secret(key_prefix);
    let new = NewKey {
        id: new_id("key"),
        workspace_id: old.workspace_id.clone(),
        name: old.name.clone(),
        secret_hash: minted.hash_hex,
        hint: minted.hint,
        expires_at: old.expires_at,
        spend_limit: old.spend_limit,
        limit_reset: old.limit_reset,
        allowed_models: old.allowed_models.clone(),
    };
    let (old_revoked_at, old_expires_at) = match until {
        None => (Some(now), old.expires_at),
        Some(u) => (None, Some(old.expires_at.map_or(u, |e| e.min(u)))),
    };
    // The old key as the rotation leaves it, at storage precision (microseconds).
    let after = ApiKey {
        revoked_at: old_revoked_at.map(|t| t.trunc_subsecs(6)),
        expires_at: old_expires_at.map(|t| t.trunc_subsecs(6)),
        replaced_by: Some(new.id.clone()),
        ..old.clone()
    };
    let change = Change {
        action: "key.rotate",
        workspace: Some(&old.workspace_id),
        target: id,
    };
    let snapshot = serde_json::json!({ "old": after, "new_key": new.id });
    let audit = audit::entry(actor, change, audit::snapshot(&old), Some(snapshot));
    let rotation = KeyRotation {
        old_id: id.to_owned(),
        new,
        old_revoked_at,
        old_expires_at,
        now,
        audit,
    };
    let (key, old) = store.rotate_key(&rotation).await?;
    Ok(Rotated {
        key,
        secret: minted.secret,
        old,
    })
}

/// When a grace period of `grace` from `now` ends (`None`: no grace, revoke now). Checked:
/// at most [`MAX_GRACE`], and never past the end of representable time.
fn grace_end(
    grace: Option<std::time::Duration>,
    now: DateTime<Utc>,
) -> CommandResult<Option<DateTime<Utc>>> {
    let Some(grace) = grace.filter(|g| !g.is_zero()) else {
        return Ok(None);
    };
    if grace > MAX_GRACE {
        return Err(CommandError::Invalid(format!(
            "grace_seconds: at most {} (30 days)",
            MAX_GRACE.as_secs()
        )));
    }
    chrono::Duration::from_std(grace)
        .ok()
        .and_then(|g| now.checked_add_signed(g))
        .map(Some)
        .ok_or_else(|| {
            CommandError::Invalid("grace_seconds: the grace period ends past the last date".into())
        })
}

/// Only a working key that was not rotated before is rotated.
fn check_rotatable(old: &ApiKey, now: DateTime<Utc>) -> CommandResult<()> {
    if let Some(new) = &old.replaced_by {
        return Err(CommandError::Conflict(format!(
            "key {} was already rotated: its replacement is {new}; rotate the replacement instead",
            old.id
        )));
    }
    if KeyStatus::of(old, None, now) != KeyStatus::Active {
        return Err(CommandError::Invalid(format!(
            "key {} is revoked or expired: only a working key is rotated",
            old.id
        )));
    }
    Ok(())
}
