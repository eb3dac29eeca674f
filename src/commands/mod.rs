//! The operations operators run, from the CLI and the admin API alike. Each validates its
//! input, reads or changes the [`Store`](crate::store::Store) and returns a typed,
//! serialisable result; none prints. Every change is made by an [`Actor`] and leaves an audit
//! entry, so the two front ends cannot drift. The CLI renders the results (`cli::render`);
//! their JSON is the CLI's `--json` output, field for field.
#![warn(clippy::arithmetic_side_effects)]

mod accounts;
mod alerts;
mod archive;
mod audit;
mod books;
mod catalog;
mod catalog_check;
mod management;
mod page;
mod setup;

pub use accounts::{
    create_key, create_workspace, key_view, key_views, keys_page, list_keys, list_workspaces,
    rename_workspace, revoke_key, rotate_key, update_key, workspace_view, workspaces_page,
    CreatedKey, KeyPatch, KeyRequest, KeyStatus, KeyView, Revoked, Rotated, WorkspaceView,
    MAX_GRACE,
};
pub use alerts::{deliveries, put_alerts, AlertRequest};
pub use archive::{archive_usage, restore_usage, Archived, ArchivedFile, Manifest, Restored};
pub use audit::{audit_log, sign_in, Actor};
pub use books::{
    add_credit, grant_credit, ledger, ledger_page, refund_credit, usage, usage_daily, usage_page,
    verify_ledger, CreditRequest, Credited, Ledger, LedgerPage, Verified, IDEMPOTENCY_TTL,
    MAX_DAYS,
};
pub use catalog::{catalog_view, set_route_active, update_model, ModelPatch, ModelView};
pub use catalog_check::{
    check_catalog, CheckOptions, DriftReport, RouteCheck, Status as RouteStatus,
};
pub use management::{
    create_management_key, management_caller, management_keys, revoke_management_key,
    CreatedManagementKey, ManagementKeyRequest, ManagementKeyStatus, ManagementKeyView,
};
pub use page::{Page, PageRequest};
pub use setup::{
    import_catalog, list_catalog, migrate, prepare_store, warn_default_partition, Imported,
    Migrated,
};

use crate::catalog::import::ImportError;
use crate::money::MoneyError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Money(#[from] MoneyError),
    /// The input is not acceptable (the message names the flag or field).
    #[error("{0}")]
    Invalid(String),
    /// The change collides with the current state (e.g. a key already rotated).
    #[error("{0}")]
    Conflict(String),
}

pub type CommandResult<T> = Result<T, CommandError>;

/// Whether `c` may not appear in a name or note an operator sets: a control character
/// (Unicode `Cc`: terminal escapes, newlines, NUL) or a bidirectional embedding, override or
/// isolate (U+202A–U+202E, U+2066–U+2069), which make text display as something else.
pub(crate) fn is_hidden_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Refuses free text holding [hidden controls](is_hidden_control); the message names `field`.
fn plain_text<'a>(field: &str, text: &'a str) -> CommandResult<&'a str> {
    match text.chars().find(|&c| is_hidden_control(c)) {
        Some(c) => Err(CommandError::Invalid(format!(
            "{field}: control characters and bidirectional overrides are not allowed (found \
             U+{:04X})",
            u32::from(c)
        ))),
        None => Ok(text),
    }
}

#[cfg(test)]
mod tests;
