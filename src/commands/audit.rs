//! Who changed what: every command that changes something hands the store its audit entry,
//! which the store writes in the change's own transaction (an [`Audit`]): the change and its
//! entry commit together or not at all, and the CLI, the admin API and the console leave the
//! same trail.

use chrono::Utc;
use serde::Serialize;

use super::page::{Page, PageRequest};
use super::CommandResult;
use crate::auth::new_id;
use crate::store::{Audit, AuditEntry, ConsoleSession, Store};

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
    /// A caller of the admin API holding a workspace's management key, by the key's id.
    pub fn management_key(id: &str) -> Self {
        Actor(format!("management-key:{id}"))
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

/// The audit of a change, with the thing as it was; `after` tells what it is now from what
/// the change wrote (the store calls it inside the change's transaction).
pub(super) fn of<T>(
    actor: &Actor,
    change: Change<'_>,
    before: Option<serde_json::Value>,
    after: impl FnOnce(&T) -> Option<serde_json::Value> + Send + 'static,
) -> Audit<T> {
    let mut entry = entry(actor, change, before, None);
    Box::new(move |made| {
        entry.after = after(made);
        entry
    })
}

/// A thing as the audit log keeps it.
pub(super) fn snapshot<T: Serialize>(thing: &T) -> Option<serde_json::Value> {
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

/// A console sign-in: the session stored with its audit entry, which names the session by its
/// short name (never its id, nor the token).
pub async fn sign_in(store: &dyn Store, session: &ConsoleSession) -> CommandResult<()> {
    let actor = Actor::console(&session.name);
    let change = Change {
        action: "session.sign_in",
        workspace: None,
        target: actor.as_str(),
    };
    let audit = of(&actor, change, None, |_| None);
    Ok(store.create_session(session, Some(audit)).await?)
}
