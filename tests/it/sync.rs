//! The running gateway follows the database: revocations within a second, catalog edits
//! after a refresh, on SQLite and on PostgreSQL.

use std::time::Duration;

use crate::harness::{eventually, Gateway, PgDatabase, Sim};

async fn status(gw: &Gateway, key: &str) -> u16 {
    reqwest::Client::new()
        .get(gw.url("/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn revocation_reaches_running_gateway(gw: Gateway) {
    let (ws, key) = gw.workspace_with_key();
    // A key created after start arrives through the change feed too.
    assert!(
        eventually(Duration::from_secs(2), || async {
            status(&gw, &key).await == 200
        })
        .await
        .is_some(),
        "new key never became valid"
    );
    gw.cli(&["key", "revoke", &gw.key_id(&ws, &key)]);
    let took = eventually(Duration::from_secs(1), || async {
        status(&gw, &key).await == 401
    })
    .await;
    assert!(took.is_some(), "revocation not seen within a second");
}

#[tokio::test]
async fn revocation_takes_effect_within_a_second_sqlite() {
    revocation_reaches_running_gateway(Gateway::builder().start()).await;
}

#[tokio::test]
async fn revocation_takes_effect_within_a_second_postgres() {
    let db = PgDatabase::create().await;
    revocation_reaches_running_gateway(Gateway::builder().store(db.url.clone()).start()).await;
}

#[tokio::test]
async fn catalog_edits_appear_without_restart_sqlite() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .catalog_refresh("1s")
        .start();
    let (_, key) = gw.workspace_with_key();
    assert!(gw
        .model_ids(&key)
        .await
        .contains(&"google/gemini-2.5-pro".to_owned()));
    // An edit made straight in the database, not through tollgate.
    let path = gw.store_url.trim_start_matches("sqlite://").to_owned();
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute(
        "UPDATE models SET active = 0 WHERE id = 'google/gemini-2.5-pro'",
        [],
    )
    .unwrap();
    let gone = eventually(Duration::from_secs(5), || async {
        !gw.model_ids(&key)
            .await
            .contains(&"google/gemini-2.5-pro".to_owned())
    })
    .await;
    let active: i64 = conn
        .query_row(
            "SELECT active FROM models WHERE id = 'google/gemini-2.5-pro'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let feed: i64 = conn
        .query_row("SELECT max(seq) FROM change_log", [], |r| r.get(0))
        .unwrap();
    let status = reqwest::get(format!("{}/status", gw.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        gone.is_some(),
        "deactivated model still listed (db active={active}, feed={feed}, {status})"
    );
}

#[tokio::test]
async fn catalog_edits_appear_without_restart_postgres() {
    let db = PgDatabase::create().await;
    let gw = Gateway::builder()
        .store(db.url.clone())
        .catalog_refresh("1s")
        .start();
    let (_, key) = gw.workspace_with_key();
    let file = gw.dir.path().join("more.yaml");
    std::fs::write(
        &file,
        "models:\n  - {id: extra/new-model, provider: extra, family: openai, kind: chat, upstream_model: n, input_price: 1, output_price: 2}\nroutes:\n  - {model_id: extra/new-model, kind: openai, base_url: \"http://127.0.0.1:9/v1\"}\n",
    )
    .unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    let seen = eventually(Duration::from_secs(5), || async {
        gw.model_ids(&key)
            .await
            .contains(&"extra/new-model".to_owned())
    })
    .await;
    assert!(seen.is_some(), "imported model never listed");
    let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .execute(
            "UPDATE models SET active = false WHERE id = 'extra/new-model'",
            &[],
        )
        .await
        .unwrap();
    let gone = eventually(Duration::from_secs(5), || async {
        !gw.model_ids(&key)
            .await
            .contains(&"extra/new-model".to_owned())
    })
    .await;
    assert!(gone.is_some(), "deactivated model still listed");
}
