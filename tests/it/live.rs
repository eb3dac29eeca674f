//! Changes are live at once: a key works the moment it is created, and a top-up admits the
//! next request, without waiting for the change feed's next poll (200 ms on SQLite). The
//! changes are made through the operator commands on the gateway's own store, so the request
//! follows the commit within a millisecond, as in a script that creates a key and uses it.

use std::sync::Arc;

use serde_json::{json, Value};
use tollgate::commands::{self, KeyRequest};
use tollgate::store::{self, Store};

use crate::harness::{Gateway, Sim};

fn hello() -> Value {
    json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}]})
}

async fn create_key(store: &dyn Store, ws: &str) -> String {
    let req = KeyRequest {
        workspace: ws.to_owned(),
        ..KeyRequest::default()
    };
    commands::create_key(store, &commands::Actor::cli(), "sk-tg-", req)
        .await
        .unwrap()
        .secret
}

async fn open(gw: &Gateway) -> Arc<dyn Store> {
    store::open(&gw.store_url).await.unwrap()
}

#[tokio::test]
async fn a_new_key_works_the_moment_it_is_created() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, _) = gw.workspace_with_key();
    let store = open(&gw).await;
    for i in 0..10 {
        let key = create_key(store.as_ref(), &ws).await;
        let status = gw.chat(&key, hello()).await.status();
        assert_eq!(status, 200, "request {i} right after the key was created");
    }
    let unknown = gw.chat("sk-tg-never-issued", hello()).await;
    assert_eq!(unknown.status(), 401, "an unknown key is still refused");
    let v: Value = unknown.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_key");
}

#[tokio::test]
async fn a_top_up_admits_the_next_request() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let store = open(&gw).await;
    for i in 0..5 {
        let ws = commands::create_workspace(store.as_ref(), &commands::Actor::cli(), "live")
            .await
            .unwrap()
            .id;
        let key = create_key(store.as_ref(), &ws).await;
        let res = gw.chat(&key, hello()).await;
        assert_eq!(res.status(), 402, "round {i}: no credit yet");
        commands::add_credit(store.as_ref(), &commands::Actor::cli(), &ws, "1", None)
            .await
            .unwrap();
        let status = gw.chat(&key, hello()).await.status();
        assert_eq!(status, 200, "round {i}: the request right after the top-up");
    }
}
