//! What a caller of the admin API may do: one decision, [`permits`], asked by the route table
//! for every call.
//!
//! The admin token and console sessions act for the operator, on everything. A management key
//! acts for one workspace: it may read that workspace and its balance history, list, create,
//! change, rotate and revoke its API keys and read its usage — what a reseller's backend needs
//! to serve one customer — and nothing else: no credit, no catalog, no audit log, no alerts, no
//! other workspace, no management keys. An operation outside that list is refused with 403,
//! whatever workspace it names; one inside it on another workspace's resource is answered as if
//! the resource did not exist (404), so a management key cannot learn which other workspaces
//! or keys exist. An operation the table does not classify is the operator's alone.

use super::error::AdminError;
use crate::commands::Actor;

/// On whose behalf a caller acts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The admin token or a console session: everything.
    Operator,
    /// A management key: this workspace's keys, usage and balance.
    Workspace(String),
}

/// An authenticated caller: who the audit log names, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub actor: Actor,
    pub scope: Scope,
}

impl Caller {
    pub fn operator(actor: Actor) -> Self {
        Caller {
            actor,
            scope: Scope::Operator,
        }
    }
}

/// Every operation of the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    ListWorkspaces,
    CreateWorkspace,
    ReadWorkspace,
    RenameWorkspace,
    ListKeys,
    CreateKey,
    UpdateKey,
    RevokeKey,
    RotateKey,
    ListCredits,
    AddCredit,
    Refund,
    ListUsage,
    DailyUsage,
    ReadAlerts,
    SetAlerts,
    ListDeliveries,
    ReadCatalog,
    UpdateModel,
    UpdateRoute,
    ReadAudit,
    Metrics,
    ListManagementKeys,
    CreateManagementKey,
    RevokeManagementKey,
}

impl Op {
    /// Every operation, each once (the tests walk them all).
    pub const ALL: [Op; 25] = [
        Op::ListWorkspaces,
        Op::CreateWorkspace,
        Op::ReadWorkspace,
        Op::RenameWorkspace,
        Op::ListKeys,
        Op::CreateKey,
        Op::UpdateKey,
        Op::RevokeKey,
        Op::RotateKey,
        Op::ListCredits,
        Op::AddCredit,
        Op::Refund,
        Op::ListUsage,
        Op::DailyUsage,
        Op::ReadAlerts,
        Op::SetAlerts,
        Op::ListDeliveries,
        Op::ReadCatalog,
        Op::UpdateModel,
        Op::UpdateRoute,
        Op::ReadAudit,
        Op::Metrics,
        Op::ListManagementKeys,
        Op::CreateManagementKey,
        Op::RevokeManagementKey,
    ];

    /// Whether a management key may do this to its own workspace. An exhaustive match: a new
    /// operation cannot be added without deciding.
    fn for_management_keys(self) -> bool {
        match self {
            Op::ReadWorkspace
            | Op::ListKeys
            | Op::CreateKey
            | Op::UpdateKey
            | Op::RevokeKey
            | Op::RotateKey
            | Op::ListCredits
            | Op::ListUsage
            | Op::DailyUsage => true,
            Op::ListWorkspaces
            | Op::CreateWorkspace
            | Op::RenameWorkspace
            | Op::AddCredit
            | Op::Refund
            | Op::ReadAlerts
            | Op::SetAlerts
            | Op::ListDeliveries
            | Op::ReadCatalog
            | Op::UpdateModel
            | Op::UpdateRoute
            | Op::ReadAudit
            | Op::Metrics
            | Op::ListManagementKeys
            | Op::CreateManagementKey
            | Op::RevokeManagementKey => false,
        }
    }
}

/// The decision about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Allowed,
    /// 403: the caller may never do this.
    Forbidden,
    /// 404: the resource is not the caller's to see, answered as if it did not exist.
    Hidden,
}

/// Whether a caller of `scope` may do `op` to a resource of `workspace` (`None`: of no
/// workspace, or one that does not exist — a key id nobody has).
pub fn permits(scope: &Scope, op: Op, workspace: Option<&str>) -> Access {
    match scope {
        Scope::Operator => Access::Allowed,
        Scope::Workspace(_) if !op.for_management_keys() => Access::Forbidden,
        Scope::Workspace(own) if workspace == Some(own.as_str()) => Access::Allowed,
        Scope::Workspace(_) => Access::Hidden,
    }
}

impl Access {
    /// The answer to give: `missing` is the message of a resource that does not exist (the
    /// same words, whether it exists elsewhere or nowhere).
    pub fn check(self, missing: impl FnOnce() -> String) -> Result<(), AdminError> {
        match self {
            Access::Allowed => Ok(()),
            Access::Forbidden => Err(AdminError::Forbidden),
            Access::Hidden => Err(AdminError::NotFound(missing())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a management key of `ws_a` may do, by operation.
    fn management_may(op: Op) -> bool {
        matches!(
            op,
            Op::ReadWorkspace
                | Op::ListKeys
                | Op::CreateKey
                | Op::UpdateKey
                | Op::RevokeKey
                | Op::RotateKey
                | Op::ListCredits
                | Op::ListUsage
                | Op::DailyUsage
        )
    }

    #[test]
    fn every_operation_for_every_scope_and_workspace() {
        let operator = Scope::Operator;
        let managed = Scope::Workspace("ws_a".into());
        let mut allowed = 0;
        for op in Op::ALL {
            for ws in [Some("ws_a"), Some("ws_b"), Some(""), None] {
                assert_eq!(permits(&operator, op, ws), Access::Allowed, "{op:?} {ws:?}");
                let want = match (management_may(op), ws) {
                    (false, _) => Access::Forbidden,
                    (true, Some("ws_a")) => Access::Allowed,
                    (true, _) => Access::Hidden,
                };
                assert_eq!(permits(&managed, op, ws), want, "{op:?} {ws:?}");
                allowed += usize::from(permits(&managed, op, ws) == Access::Allowed);
            }
        }
        assert_eq!(allowed, 9, "nine operations, on its own workspace only");
    }

    #[test]
    fn the_operation_list_names_each_operation_once() {
        for (i, a) in Op::ALL.iter().enumerate() {
            assert!(!Op::ALL[i + 1..].contains(a), "{a:?} twice");
        }
    }

    #[test]
    fn a_refusal_is_403_or_the_missing_resources_404() {
        assert!(Access::Allowed.check(|| unreachable!()).is_ok());
        assert!(matches!(
            Access::Forbidden.check(|| unreachable!()),
            Err(AdminError::Forbidden)
        ));
        let hidden = Access::Hidden.check(|| "key key_x not found".into());
        assert!(matches!(hidden, Err(AdminError::NotFound(m)) if m == "key key_x not found"));
    }
}
