//! Getting a store ready (schema, first catalog) and the catalog commands.

use std::path::Path;

use serde::Serialize;

use super::audit::{self, Actor, Change};
use super::CommandResult;
use crate::catalog::{import, lifecycle};
use crate::metrics::METRICS;
use crate::store::{CatalogRows, Store};

/// How many schema migrations ran.
#[derive(Debug, Serialize)]
pub struct Migrated {
    pub applied: usize,
}

/// How much of a catalog file was imported.
#[derive(Debug, Serialize)]
pub struct Imported {
    pub models: usize,
    pub routes: usize,
}

/// Migrations, then the default catalog if the catalog is empty, then a warning for each
/// active model near or past its provider's shutdown date and still routed to that provider.
/// Idempotent.
pub async fn prepare_store(store: &dyn Store, catalog_file: &str) -> CommandResult<()> {
    let Migrated { applied } = migrate(store).await?;
    if applied > 0 {
        tracing::info!(applied, "schema migrations applied");
    }
    if store.catalog_is_empty().await? && Path::new(catalog_file).exists() {
        let Imported { models, .. } =
            import_catalog(store, &Actor::system(), Path::new(catalog_file)).await?;
        tracing::info!(models, file = catalog_file, "default catalog imported");
    }
    warn_default_partition(store).await?;
    let rows = store.load_catalog().await?;
    let today = chrono::Utc::now().date_naive();
    for notice in lifecycle::shutdown_notices(&rows, today) {
        tracing::warn!(model = %notice.model, shutdown = %notice.shutdown, "{notice}");
    }
    Ok(())
}

/// Warns when PostgreSQL's default partition of `usage_records` holds records (it must stay
/// empty: they are of a month whose partition was never made), and sets the metric that says
/// so; how many it holds.
pub async fn warn_default_partition(store: &dyn Store) -> CommandResult<u64> {
    let stray = store.default_partition_records().await?;
    METRICS.default_partition_records(stray);
    if stray > 0 {
        tracing::warn!(
            records = stray,
            "the default partition of usage_records is not empty: a month has no partition \
             (see docs/operations.md)"
        );
    }
    Ok(stray)
}

pub async fn migrate(store: &dyn Store) -> CommandResult<Migrated> {
    let applied = store.migrate().await?;
    Ok(Migrated { applied })
}

/// Upserts the models and routes of a catalog file (validated first, its aliases against the
/// whole catalog it leaves: the models already stored that it does not replace included).
pub async fn import_catalog(
    store: &dyn Store,
    actor: &Actor,
    file: &Path,
) -> CommandResult<Imported> {
    let rows = import::read_file(file)?;
    let current = store.load_catalog().await?;
    import::check_names(&import::merged_models(&current, &rows))?;
    let imported = Imported {
        models: rows.models.len(),
        routes: rows.routes.len(),
    };
    let file = file.display().to_string();
    let change = Change {
        action: "catalog.import",
        workspace: None,
        target: &file,
    };
    let counts = audit::snapshot(&imported);
    let audit = audit::of(actor, change, None, move |_| counts);
    store.import_catalog(&rows, Some(audit)).await?;
    Ok(imported)
}

pub async fn list_catalog(store: &dyn Store) -> CommandResult<CatalogRows> {
    Ok(store.load_catalog().await?)
}
