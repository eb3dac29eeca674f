//! The operations operators run — from the CLI today, from the admin API next. Each validates
//! its input, reads or changes the [`Store`](crate::store::Store) and returns a typed,
//! serialisable result; none prints. The CLI renders the results (`cli::render`); their JSON
//! is the CLI's `--json` output, field for field.

mod accounts;
mod books;
mod setup;

pub use accounts::{
    create_key, create_workspace, list_keys, list_workspaces, revoke_key, CreatedKey, KeyRequest,
    Revoked,
};
pub use books::{add_credit, ledger, usage, verify_ledger, Credited, Ledger, Verified};
pub use setup::{import_catalog, list_catalog, migrate, prepare_store, Imported, Migrated};

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
}

pub type CommandResult<T> = Result<T, CommandError>;

#[cfg(test)]
mod tests;
