//! Management keys: the admin API's credentials scoped to one workspace, for a reseller's
//! backend that creates and revokes its customer's API keys without holding the admin token.
//! What one may do is decided by `admin::scope`; here they are minted (`mk-tg-` + 32 base62
//! characters, only the SHA-256 stored, the secret shown once), listed, revoked, and
//! recognised.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::accounts::checked_name;
use super::audit::{self, Actor, Change};
use super::{CommandError, CommandResult};
use crate::auth::{mint_secret, new_id, secret_hash_hex, MANAGEMENT_KEY_PREFIX};
use crate::store::{ManagementKey, Store, StoreError};

/// What a new management key should be.
#[derive(Debug, Clone, Default)]
pub struct ManagementKeyRequest {
    pub workspace: String,
    pub name: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// A new management key and its secret, which is never available again.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedManagementKey {
    pub key: ManagementKeyView,
    pub secret: String,
}

/// Whether a management key works now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ManagementKeyStatus {
    Active,
    Expired,
    Revoked,
}

/// A management key as operators see it: never its secret nor its hash.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ManagementKeyView {
    #[serde(flatten)]
    pub key: ManagementKey,
    pub status: ManagementKeyStatus,
}

impl ManagementKeyView {
    pub fn new(key: ManagementKey, now: DateTime<Utc>) -> Self {
        let status = if key.revoked_at.is_some_and(|at| at <= now) {
            ManagementKeyStatus::Revoked
        } else if key.expires_at.is_some_and(|at| at <= now) {
            ManagementKeyStatus::Expired
        } else {
            ManagementKeyStatus::Active
        };
        ManagementKeyView { key, status }
    }
}

/// Mints a management key for a workspace (`NotFound` when it does not exist), audited as
/// `management_key.create`.
pub async fn create_management_key(
    store: &dyn Store,
    actor: &Actor,
    req: ManagementKeyRequest,
    now: DateTime<Utc>,
) -> CommandResult<CreatedManagementKey> {
    let name = req.name.as_deref().map(checked_name).transpose()?;
    if let Some(at) = req.expires_at {
        super::accounts::checked_expiry(at)?;
        if at <= now {
            return Err(CommandError::Invalid(
                "expires_at: a time in the future expected".into(),
            ));
        }
    }
    let minted = mint_secret(MANAGEMENT_KEY_PREFIX);
    let key = ManagementKey {
        id: new_id("mkey"),
        workspace_id: req.workspace,
        name: name.map(str::to_owned),
        secret_hash: minted.hash_hex,
        hint: minted.hint,
        created_at: now,
        expires_at: req.expires_at,
        revoked_at: None,
    };
    let change = Change {
        action: "management_key.create",
        workspace: Some(&key.workspace_id),
        target: &key.id,
    };
    let audit = audit::of(actor, change, None, audit::snapshot);
    let key = store.create_management_key(&key, Some(audit)).await?;
    Ok(CreatedManagementKey {
        key: ManagementKeyView::new(key, now),
        secret: minted.secret,
    })
}

/// A workspace's management keys, newest first; `NotFound` when it does not exist.
pub async fn management_keys(
    store: &dyn Store,
    workspace: &str,
    now: DateTime<Utc>,
) -> CommandResult<Vec<ManagementKeyView>> {
    if store.get_workspace(workspace).await?.is_none() {
        return Err(StoreError::no_workspace(workspace).into());
    }
    let keys = store.management_keys(workspace).await?;
    Ok(keys
        .into_iter()
        .map(|k| ManagementKeyView::new(k, now))
        .collect())
}

/// Revokes a management key (its next call is refused, on every replica: they read the table
/// on each call), audited as `management_key.revoke`; revoking it again changes nothing.
pub async fn revoke_management_key(
    store: &dyn Store,
    actor: &Actor,
    id: &str,
    now: DateTime<Utc>,
) -> CommandResult<ManagementKeyView> {
    let before = store
        .management_key(id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("management key {id}")))?;
    let change = Change {
        action: "management_key.revoke",
        workspace: Some(&before.workspace_id),
        target: id,
    };
    let audit = audit::of(actor, change, audit::snapshot(&before), audit::snapshot);
    store.revoke_management_key(id, now, Some(audit)).await?;
    let after = store
        .management_key(id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("management key {id}")))?;
    Ok(ManagementKeyView::new(after, now))
}

/// The working management key whose secret is `secret`, if any: `None` for an unknown,
/// revoked or expired one (the caller answers all three alike, 401).
pub async fn management_caller(
    store: &dyn Store,
    secret: &str,
    now: DateTime<Utc>,
) -> CommandResult<Option<ManagementKey>> {
    if !secret.starts_with(MANAGEMENT_KEY_PREFIX) {
        return Ok(None);
    }
    let key = store
        .management_key_by_hash(&secret_hash_hex(secret))
        .await?;
    Ok(
        key.filter(|k| {
            ManagementKeyView::new(k.clone(), now).status == ManagementKeyStatus::Active
        }),
    )
}
