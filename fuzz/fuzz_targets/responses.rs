//! A Responses-door body — and, after a NUL byte, the stored conversation a
//! `previous_response_id` continues — parsed onto the chat body for every family, which the
//! chat door's parser must take, checked against the limits and planned (and counted) for
//! every model and route of the default catalog through the door's adapters. The collected
//! items are JSON. Never a panic, whatever the bytes.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tollgate::api::limits::Limits;
use tollgate::api::{Door, Operation, RawRequest};
use tollgate::catalog::{Family, Snapshot};
use tollgate::doors::bridged;
use tollgate::doors::responses::parse;
use tollgate::providers::{Credentials, Target};

static WORLD: OnceLock<(Snapshot, Credentials)> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let (catalog, creds) = WORLD.get_or_init(|| (common::catalog(), common::credentials()));
    let (body, prior) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    for family in [Family::Gemini, Family::Anthropic, Family::OpenAiCompat] {
        let Ok(parsed) = parse(body, prior, family) else {
            continue;
        };
        if parsed.store || prior.is_some() {
            serde_json::from_slice::<&serde_json::value::RawValue>(&parsed.items)
                .expect("the collected items are JSON");
        } else {
            assert!(parsed.items.is_empty());
        }
        let chat = RawRequest::parse(&parsed.chat, Operation::Chat)
            .expect("the chat door's parser takes the translated body");
        let _ = chat.excludes_reasoning();
        let adapter = bridged(Door::Responses, family);
        for model in catalog.models().filter(|m| m.family == family) {
            if Limits::default()
                .check(&chat, Operation::Chat, parsed.chat.len(), model.context_window)
                .is_err()
            {
                continue;
            }
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
                    let _ = adapter.plan(&chat, &target, creds);
                    let _ = adapter.count_tokens(&chat, &target, creds);
                }
            }
        }
    }
});
