//! Which backend a store URL names.

use std::sync::Arc;

use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{Store, StoreError, StoreResult};

/// Opens the store named by `url`: `sqlite://PATH` (file created if missing; `sqlite::memory:`
/// for tests) or `postgres://…`.
pub async fn open(url: &str) -> StoreResult<Arc<dyn Store>> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        Ok(Arc::new(SqliteStore::open(path)?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PgStore::connect(url).await?))
    } else {
        Err(StoreError::BadUrl(url.to_owned()))
    }
}
