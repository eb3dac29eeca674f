//! The operators' listener: liveness and a status summary now; the admin API and console
//! arrive with their issue. Handlers are plain functions so tests need no socket.

use std::sync::Arc;

use serde::Serialize;

use crate::auth::KeyCache;
use crate::catalog::Catalog;

pub struct Admin {
    pub catalog: Arc<Catalog>,
    pub keys: Arc<KeyCache>,
    pub store_kind: &'static str,
}

impl Admin {
    /// `(status, JSON body)` for a GET of `path`.
    pub fn get(&self, path: &str) -> (u16, Vec<u8>) {
        #[derive(Serialize)]
        struct Status {
            status: &'static str,
            version: &'static str,
            store: &'static str,
            models: usize,
            keys: usize,
        }
        match path {
            "/health" => (200, br#"{"status":"ok"}"#.to_vec()),
            "/status" => {
                let s = Status {
                    status: "ok",
                    version: env!("CARGO_PKG_VERSION"),
                    store: self.store_kind,
                    models: self.catalog.snapshot().len(),
                    keys: self.keys.len(),
                };
                (200, serde_json::to_vec(&s).unwrap_or_default())
            }
            _ => (
                404,
                crate::api::GatewayError::NotFound(path.into())
                    .envelope()
                    .to_vec(),
            ),
        }
    }
}
