//! A Messages-door body: parsed, checked against the limits, translated onto the chat model
//! where the family needs it, and planned (and counted) for every model and route of the
//! default catalog through the door's adapters. Never a panic, whatever the bytes.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tollgate::api::limits::Limits;
use tollgate::api::{Operation, RawRequest};
use tollgate::catalog::{Family, Snapshot};
use tollgate::doors::messages::to_chat;
use tollgate::providers::{Credentials, Target};

static WORLD: OnceLock<(Snapshot, Credentials)> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let (catalog, creds) = WORLD.get_or_init(|| (common::catalog(), common::credentials()));
    let Ok(req) = RawRequest::parse(data, Operation::Chat) else {
        return;
    };
    let translated = to_chat(data).ok();
    let chat = translated
        .as_deref()
        .and_then(|body| RawRequest::parse(body, Operation::Chat).ok());
    for model in catalog.models() {
        if Limits::default()
            .check(&req, Operation::Chat, data.len(), model.context_window)
            .is_err()
        {
            continue;
        }
        let planned = match model.family {
            Family::Anthropic => &req,
            _ => match &chat {
                Some(chat) => chat,
                None => continue,
            },
        };
        let adapter = common::messages_adapter(model.family);
        for route in &model.routes {
            for stream in [false, true] {
                let target = Target {
                    model,
                    route,
                    op: Operation::Chat,
                    stream,
                    max_cache_ttl: common::MAX_CACHE_TTL,
                    forward: &[],
                };
                let _ = adapter.plan(planned, &target, creds);
                let _ = adapter.count_tokens(planned, &target, creds);
            }
        }
    }
});
