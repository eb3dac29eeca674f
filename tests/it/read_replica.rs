//! `tollgate.store_read_url`: the admin API's pages and rollups and `/v1/generation` read the
//! replica; money checks and every write stay on the store. The "replica" here is a second
//! database with the same schema and different rows, so where each read went is visible.

use serde_json::{json, Value};

use crate::harness::{Gateway, PgDatabase, Sim, ADMIN_TOKEN};

async fn admin(gw: &Gateway, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let res = reqwest::Client::new()
        .request(method, format!("{}{path}", gw.admin))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    (
        res.status().as_u16(),
        res.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn pages_and_generations_read_the_replica_money_and_writes_never_do() {
    let (primary, replica) = (PgDatabase::create().await, PgDatabase::create().await);
    let seen = tollgate::store::open(&replica.url).await.unwrap();
    seen.migrate().await.unwrap();
    let only_on_replica = seen
        .create_workspace("ws_000000000replicaonly", "on the replica", None)
        .await
        .unwrap()
        .id;
    let sim = Sim::start();
    let settings = format!("  store_read_url: \"{}\"\n", replica.url);
    let gw = Gateway::builder()
        .store(primary.url.clone())
        .settings(Box::leak(settings.into_boxed_str()))
        .simulator(&sim)
        .start();
    // Written to the store (the CLI), funded there: the gates see it, so requests pass.
    let (ws, key) = gw.workspace_with_key();
    let res = gw
        .chat(
            &key,
            json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(res.status(), 200, "the money checks read the store");
    let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(
        gw.usage_records(&ws, 1).await.len(),
        1,
        "the record is on the store"
    );

    // Pages read the replica: its workspace, not the store's.
    let (status, page) = admin(
        &gw,
        reqwest::Method::GET,
        "/admin/v1/workspaces",
        json!(null),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let ids: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [only_on_replica.as_str()], "{page}");
    let usage = format!("/admin/v1/workspaces/{ws}/usage");
    let (status, _) = admin(&gw, reqwest::Method::GET, &usage, json!(null)).await;
    assert_eq!(status, 404, "the store's workspace is not on the replica");
    // So does /v1/generation: the record is on the store only.
    let res = reqwest::Client::new()
        .get(gw.url(&format!("/v1/generation?id={id}")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404, "{}", res.text().await.unwrap());

    // Writes go to the store: a credit for the store's workspace succeeds (the replica has no
    // such workspace), and a refund is checked against the store's balance.
    let credits = format!("/admin/v1/workspaces/{ws}/credits");
    let (status, v) = admin(
        &gw,
        reqwest::Method::POST,
        &credits,
        json!({"amount_usd": "1"}),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let refunds = format!("/admin/v1/workspaces/{ws}/refunds");
    let body = json!({"amount_usd": "0.5", "reason": "test"});
    let (status, v) = admin(&gw, reqwest::Method::POST, &refunds, body).await;
    assert_eq!(status, 201, "{v}");
    let (status, v) = admin(
        &gw,
        reqwest::Method::POST,
        "/admin/v1/workspaces",
        json!({"name": "new"}),
    )
    .await;
    assert_eq!(status, 201, "{v}");

    // Nothing was written to the replica.
    let (db, conn) = tokio_postgres::connect(&replica.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    for (table, rows) in [
        ("workspaces", 1),
        ("usage_records", 0),
        ("ledger_entries", 0),
    ] {
        let n: i64 = db
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, rows, "{table} on the replica");
    }
}
