//! Workspaces and their API keys.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{CommandError, CommandResult};
use crate::auth::{mint_secret, new_id};
use crate::money::Usd;
use crate::store::{ApiKey, LimitReset, NewKey, Store, Workspace};

pub async fn create_workspace(store: &dyn Store, name: &str) -> CommandResult<Workspace> {
    Ok(store.create_workspace(&new_id("ws"), name).await?)
}

pub async fn list_workspaces(store: &dyn Store) -> CommandResult<Vec<Workspace>> {
    Ok(store.list_workspaces().await?)
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
    let minted = mint_secret(key_prefix);
    let key = store
        .create_key(NewKey {
            id: new_id("key"),
            workspace_id: req.workspace,
            name: req.name,
            secret_hash: minted.hash_hex,
            hint: minted.hint,
            expires_at: req.expires_at,
            spend_limit,
            limit_reset: req.limit_reset,
        })
        .await?;
    Ok(CreatedKey {
        key,
        secret: minted.secret,
    })
}

pub async fn list_keys(store: &dyn Store, workspace: &str) -> CommandResult<Vec<ApiKey>> {
    Ok(store.list_keys(workspace).await?)
}

/// A revocation: `changed` is false when the key was revoked already.
#[derive(Debug, Serialize)]
pub struct Revoked {
    pub id: String,
    pub revoked: bool,
    pub changed: bool,
}

pub async fn revoke_key(store: &dyn Store, id: &str, now: DateTime<Utc>) -> CommandResult<Revoked> {
    let changed = store.revoke_key(id, now).await?;
    Ok(Revoked {
        id: id.to_owned(),
        revoked: true,
        changed,
    })
}
