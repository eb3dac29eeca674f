//! A client body: parsed, checked against the limits and planned for every model and route
//! of the default catalog. Never a panic, whatever the bytes.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tollgate::api::limits::Limits;
use tollgate::api::{Operation, RawRequest};
use tollgate::catalog::Snapshot;
use tollgate::providers::{adapter_for, Credentials, Target};

static WORLD: OnceLock<(Snapshot, Credentials)> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let (catalog, creds) = WORLD.get_or_init(|| (common::catalog(), common::credentials()));
    for op in [Operation::Chat, Operation::Embeddings] {
        let Ok(req) = RawRequest::parse(data, op) else {
            continue;
        };
        let _ = req.excludes_reasoning();
        for model in catalog.models() {
            if Limits::default()
                .check(&req, op, data.len(), model.context_window)
                .is_err()
            {
                continue;
            }
            for route in &model.routes {
                for stream in [false, true] {
                    let target = Target {
                        model,
                        route,
                        op,
                        stream,
                        max_cache_ttl: common::MAX_CACHE_TTL,
                        forward: &[],
                    };
                    let _ = adapter_for(model.family).plan(&req, &target, creds);
                }
            }
        }
    }
});
