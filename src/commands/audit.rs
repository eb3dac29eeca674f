//! Who changed what: every command that changes something appends one audit entry, so the CLI,
//! the admin API and the console leave the same trail.

use chrono::Utc;
use serde::Serialize;

use super::page::{Page, PageRequest};
use super::CommandResult;
use crate::auth::new_id;
use crate::store::{AuditEntry, Store};

/// Who makes a change, as the audit log names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor(String);

impl Actor {
    /// An operator at the CLI, by login name.
    pub fn cli() -> Self {
        let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
        Actor(format!("cli:{user}"))
    }
    /// A caller of the admin API holding the admin token.
    pub fn admin_token() -> Self {
        Actor("admin-token".into())
    }
    /// A signed-in console session, by a short id of it (never the session secret).
    pub fn console(session: &str) -> Self {
        Actor(format!("console:{session}"))
    }
    /// The gateway itself (the default catalog imported at first start).
    pub fn system() -> Self {
        Actor("system".into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What changed: `noun.verb`, the workspace it belongs to, the thing's id.
pub(super) struct Change<'a> {
    pub action: &'static str,
    pub workspace: Option<&'a str>,
    pub target: &'a str,
}

/// The audit entry of a change, with the thing as it was and as it is now.
pub(super) fn entry(
    actor: &Actor,
    change: Change<'_>,
    before: Option<serde_json::Value>,
    after: Option<serde_json::Value>,
) -> AuditEntry {
    AuditEntry {
        id: new_id("aud"),
        at: Utc::now(),
        actor: actor.0.clone(),
        action: change.action.to_owned(),
        workspace_id: change.workspace.map(str::to_owned),
        target: change.target.to_owned(),
        before,
        after,
    }
}

/// Appends the audit entry of a change, with the thing as it was and as it is now.
pub(super) async fn record(
    store: &dyn Store,
    actor: &Actor,
    change: Change<'_>,
    before: Option<serde_json::Value>,
    after: Option<serde_json::Value>,
) -> CommandResult<()> {
    Ok(store
        .append_audit(&entry(actor, change, before, after))
        .await?)
}

/// A thing as the audit log keeps it.
pub(super) fn snapshot(thing: &impl Serialize) -> Option<serde_json::Value> {
    serde_json::to_value(thing).ok()
}

/// The audit log, one workspace's or all of it, newest first.
pub async fn audit_log(
    store: &dyn Store,
    workspace: Option<&str>,
    page: &PageRequest,
) -> CommandResult<Page<AuditEntry>> {
    let rows = store
        .audit_page(workspace, page.after.as_ref(), page.fetch())
        .await?;
    Ok(page.finish(rows, |e| (e.at, &e.id)))
}

/// A console sign-in (the session's short name, never the token).
pub async fn audit_sign_in(store: &dyn Store, actor: &Actor) -> CommandResult<()> {
    let change = Change {
        action: "session.sign_in",
        workspace: None,
        target: actor.as_str(),
    };
    record(store, actor, change, None, None).await
}
