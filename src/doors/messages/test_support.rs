//! Shared by the tests of the door's translators: a response context, a Gemini model and its
//! route, and the Anthropic events of a stream as JSON.

use std::sync::Arc;

use crate::api::Operation;
use crate::catalog::{
    Endpoint, Family, Model, ModelKind, Pricing, Profile, Route, RouteKind, Thinking,
};
use crate::providers::{Credentials, ResponseCx, Secret, Target};

pub use crate::providers::test_support::{fixture, stream_fixture};

pub fn cx() -> ResponseCx {
    ResponseCx {
        id: Arc::from("msg_gw7"),
        model_id: Arc::from("google/gemini-test"),
        op: Operation::Chat,
        created: 1_700_000_000,
        exclude_reasoning: false,
    }
}

/// Like conf/catalog.yaml's Gemini 2.5 Flash: tools and reasoning forwarded.
pub fn gemini_model() -> Model {
    let forward = [
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "stop",
        "tools",
        "reasoning",
    ];
    Model {
        aliases: Vec::new(),
        id: Arc::from("google/gemini-test"),
        provider: "google".into(),
        family: Family::Gemini,
        kind: ModelKind::Chat,
        upstream_model: "gemini-test".into(),
        profile_name: "test".into(),
        profile: Arc::new(Profile {
            forward: forward.iter().map(|s| (*s).to_owned()).collect(),
            thinking: Thinking::Budget {
                min: 1,
                max: 24576,
                can_disable: true,
            },
            min_cache_tokens: 2048,
            dimensions: None,
        }),
        pricing: Pricing::default(),
        capabilities: Vec::new(),
        max_output_tokens: None,
        context_window: None,
        routes: Vec::new(),
    }
}

pub fn gemini_route() -> Route {
    Route {
        kind: RouteKind::GeminiApi,
        endpoint: Endpoint::parse("https://upstream.test/base").unwrap(),
        region: None,
        addr: None,
        priority: 0,
        weight: 1,
        health: Default::default(),
        upstream_model: None,
        api: Default::default(),
    }
}

pub fn target<'a>(model: &'a Model, route: &'a Route, stream: bool) -> Target<'a> {
    Target {
        model,
        route,
        op: Operation::Chat,
        stream,
        max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
        forward: &[],
    }
}

pub fn creds() -> Credentials {
    Credentials {
        gemini: Some(Secret::new("test-gemini-key")),
        ..Credentials::default()
    }
}

/// The events of an Anthropic stream as (name, data) pairs; every event is checked to be
/// `event: <name>\ndata: <json>\n\n` with the data's `type` equal to its name.
pub fn events(out: &[u8]) -> Vec<(String, serde_json::Value)> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "events end with a blank line: {text:?}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e
                .strip_prefix("event: ")
                .and_then(|e| e.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not an event: {e:?}"));
            let data: serde_json::Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], name, "{e}");
            (name.to_owned(), data)
        })
        .collect()
}
