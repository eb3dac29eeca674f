//! Upgrading a database that already holds books. Migrations 0003, 0011, 0012 and 0017
//! rebuild SQLite's `usage_records` (SQLite's only way to change a CHECK; 0017 its
//! `ledger_entries` too) and alter PostgreSQL's: the records, the ledger and every guarantee
//! the database gave before survive them.

use std::sync::Arc;

use chrono::Utc;
use tokio_postgres::NoTls;
use tollgate::money::{Price, Usd};
use tollgate::store::migrations::{self, Dialect};
use tollgate::store::postgres::PgStore;
use tollgate::store::sqlite::SqliteStore;
use tollgate::store::{
    BalanceRow, CreditMovement, Done, ExtraUsage, LedgerKind, Store, StoredResponse, UsageEndpoint,
    UsageOutcome, UsageRecord, UsageSource,
};

use crate::harness::PgDatabase;

/// Books written at schema version 2: a credit of 1 USD and one record of 10 input and 5
/// output tokens at 3 / 15 USD per 1M, debited. `{t}` is a timestamp, `{no}` false.
const BOOKS_V2: &str = "
INSERT INTO workspaces (id, name, created_at) VALUES ('ws_1', 'w', {t});
INSERT INTO api_keys (id, workspace_id, secret_hash, hint, created_at)
    VALUES ('key_1', 'ws_1', 'hash', 'hint', {t});
INSERT INTO ledger_entries (id, workspace_id, kind, amount_pico, created_at)
    VALUES ('credit_1', 'ws_1', 'credit', 1000000000000, {t});
INSERT INTO usage_records (id, workspace_id, key_id, model_id, route, endpoint, stream,
    input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
    input_price_micro, output_price_micro, cost_pico, outcome, started_at, finished_at,
    usage_source)
    VALUES ('u_old', 'ws_1', 'key_1', 'm', 'anthropic', 'chat', {no}, 10, 0, 0, 5, 0,
            3000000, 15000000, 105000000, 'complete', {t}, {t}, 'estimated');
INSERT INTO ledger_entries (id, workspace_id, kind, amount_pico, created_at, usage_id)
    VALUES ('debit:u_old', 'ws_1', 'debit', -105000000, {t}, 'u_old');
INSERT INTO balances (workspace_id, balance_pico) VALUES ('ws_1', 999895000000);
";

fn price(micro: i64) -> Price {
    Price::from_micro_per_mtok(micro)
}

/// A record using every dimension 0003 adds: 100 audio tokens at 1 USD/1M, 50 one-hour cache
/// writes at 6, 1,000 tokens stored 1 h at 4.50 per 1M per hour, 10 output at 15.
fn new_record(id: &str, cost_pico: i64) -> UsageRecord {
    let now = Utc::now();
    UsageRecord {
        id: id.into(),
        workspace_id: "ws_1".into(),
        key_id: "key_1".into(),
        model_id: "m".into(),
        route: "anthropic".into(),
        endpoint: UsageEndpoint::Chat,
        stream: false,
        input_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        output_tokens: 10,
        reasoning_tokens: 0,
        input_price: price(3_000_000),
        output_price: price(15_000_000),
        cache_read_price: None,
        cache_write_price: None,
        extra: ExtraUsage {
            audio_input_tokens: 100,
            cache_write_1h_tokens: 50,
            cache_storage_token_seconds: 1_000 * 3_600,
            audio_input_price: Some(price(1_000_000)),
            cache_write_1h_price: Some(price(6_000_000)),
            cache_storage_price: Some(price(4_500_000)),
        },
        cost: Usd::from_pico(cost_pico),
        outcome: UsageOutcome::Complete,
        started_at: now,
        finished_at: now,
        upstream_latency_us: None,
        ttft_us: None,
        spend_window_start: None,
        usage_source: UsageSource::Reported,
        attempts: 1,
        request_id: None,
        review: None,
        client_addr: None,
        upstream_request_id: None,
        waived: false,
    }
}

/// 100 × 1,000,000 + 50 × 6,000,000 + 10 × 15,000,000 + 1,000 × 3,600 × 4,500,000 / 3,600.
const NEW_COST: i64 = 100_000_000 + 300_000_000 + 150_000_000 + 4_500_000_000;

/// What must hold after the upgrade, on either backend.
async fn books_survive(store: Arc<dyn Store>) {
    let old = store.usage("ws_1", None).await.unwrap();
    assert_eq!(old.len(), 1);
    let r = &old[0];
    assert_eq!((r.input_tokens, r.output_tokens), (10, 5));
    assert_eq!(r.cost, Usd::from_pico(105_000_000));
    assert_eq!(r.usage_source, UsageSource::Estimated);
    assert_eq!(
        r.extra,
        ExtraUsage::default(),
        "old records have none of the new buckets"
    );

    // The new CHECK prices every dimension: an exact record is stored, a pico off is not.
    assert!(store
        .record_usage(&[new_record("u_off", NEW_COST - 1)])
        .await
        .is_err());
    assert_eq!(
        store
            .record_usage(&[new_record("u_new", NEW_COST)])
            .await
            .unwrap(),
        1
    );
    let all = store.usage("ws_1", None).await.unwrap();
    let stored = all.iter().find(|r| r.id == "u_new").unwrap();
    assert_eq!(stored.extra, new_record("u_new", NEW_COST).extra);

    let check = store.ledger_verify().await.unwrap();
    assert!(check.iter().all(|c| c.is_consistent()), "{check:?}");
    assert_eq!(
        check[0].balance_row,
        Usd::from_pico(1_000_000_000_000 - 105_000_000 - NEW_COST)
    );
}

#[tokio::test]
async fn sqlite_books_survive_the_price_dimensions_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    sqlite_at(&path, 2, &BOOKS_V2.replace("{t}", "0").replace("{no}", "0"));
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Sqlite, 2),
        "every migration after 0002 is pending"
    );
    books_survive(Arc::new(store)).await;

    // The rebuilt table keeps its triggers and its place in the foreign keys.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "foreign_keys", true).unwrap();
    usage_records_keep_their_rules(&conn, 2);
}

/// A rebuilt SQLite `usage_records` is still append-only and the records stored in it still
/// announce spend (`spent` batches for `key_1` at least: the fixture's rows through the old
/// per-row trigger, the store's batches through its writer since 0021). (Since 0018 a debit no longer needs its record to
/// exist: the debits of archived months outlive their records.)
fn usage_records_keep_their_rules(conn: &rusqlite::Connection, spent: i64) {
    let refused = |sql: &str| conn.execute_batch(sql).is_err();
    assert!(
        refused("UPDATE usage_records SET model_id = 'other'"),
        "append-only"
    );
    assert!(refused("DELETE FROM usage_records"), "append-only");
    let spend_logged: i64 = conn
        .query_row(
            "SELECT count(*) FROM change_log WHERE kind = 'spend' AND ref_id = 'key_1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(spend_logged >= spent, "inserts still announce spend");
}

#[tokio::test]
async fn postgres_books_survive_the_price_dimensions_migration() {
    let db = PgDatabase::create().await;
    let books = BOOKS_V2
        .replace("{t}", "to_timestamp(0)")
        .replace("{no}", "false");
    pg_at(&db.url, 2, &books).await;
    let store = PgStore::connect(&db.url).await.unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Postgres, 2),
        "every migration after 0002 is pending"
    );
    books_survive(Arc::new(store)).await;
}

/// Keys rotated at schema version 8: `key_old` rotated twice (the latest rotation's key
/// exists), `key_lost`'s replacement was never stored, `key_plain` never rotated. `{t}` and
/// `{t2}` are timestamps, `{t2}` the later.
const ROTATED_V8: &str = "
INSERT INTO workspaces (id, name, created_at) VALUES ('ws_1', 'w', {t});
INSERT INTO api_keys (id, workspace_id, secret_hash, hint, created_at) VALUES
    ('key_old', 'ws_1', 'h1', 'hint', {t}), ('key_a', 'ws_1', 'h2', 'hint', {t}),
    ('key_b', 'ws_1', 'h3', 'hint', {t}), ('key_lost', 'ws_1', 'h4', 'hint', {t}),
    ('key_plain', 'ws_1', 'h5', 'hint', {t});
INSERT INTO audit_log (id, at, actor, action, workspace_id, target, before_json, after_json)
VALUES ('aud_1', {t}, 'cli:x', 'key.rotate', 'ws_1', 'key_old', NULL, '{\"new_key\": \"key_a\"}'),
       ('aud_2', {t2}, 'cli:x', 'key.rotate', 'ws_1', 'key_old', NULL, '{\"new_key\": \"key_b\"}'),
       ('aud_3', {t}, 'cli:x', 'key.rotate', 'ws_1', 'key_lost', NULL, '{\"new_key\": \"key_gone\"}');
";

async fn rotations_are_backfilled(store: &dyn Store) {
    let replaced =
        |id: &'static str| async move { store.get_key(id).await.unwrap().unwrap().replaced_by };
    assert_eq!(
        replaced("key_old").await.as_deref(),
        Some("key_b"),
        "the latest"
    );
    assert_eq!(replaced("key_lost").await, None, "no such replacement");
    assert_eq!(replaced("key_plain").await, None);
    assert_eq!(replaced("key_b").await, None);
}

#[tokio::test]
async fn sqlite_key_rotation_migration_backfills_replacements() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v8.db");
    sqlite_at(
        &path,
        8,
        &ROTATED_V8.replace("{t2}", "2").replace("{t}", "1"),
    );
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    let pending = pending_after(Dialect::Sqlite, 8);
    assert_eq!(store.migrate().await.unwrap(), pending);
    rotations_are_backfilled(&store).await;
}

#[tokio::test]
async fn postgres_key_rotation_migration_backfills_replacements() {
    let db = PgDatabase::create().await;
    let rows = ROTATED_V8
        .replace("{t2}", "to_timestamp(2)")
        .replace("{t}", "to_timestamp(1)");
    pg_at(&db.url, 8, &rows).await;
    let store = PgStore::connect(&db.url).await.unwrap();
    let pending = pending_after(Dialect::Postgres, 8);
    assert_eq!(store.migrate().await.unwrap(), pending);
    rotations_are_backfilled(&store).await;
}

/// A catalog written at schema version 9, before models had lifecycles.
const CATALOG_V9: &str = "
INSERT INTO models (id, provider, family, kind, upstream_model, profile, input_price_micro,
                    output_price_micro, capabilities, active)
VALUES ('google/old', 'google', 'gemini', 'chat', 'gemini-old', 'p', 1000000, 2000000, '[]', {yes});
INSERT INTO routes (model_id, kind, priority, active) VALUES ('google/old', 'gemini-api', 0, {yes});
";

async fn catalog_rows_gain_empty_lifecycles(store: &dyn Store) {
    let rows = store.load_catalog().await.unwrap();
    let (m, r) = (&rows.models[0], &rows.routes[0]);
    assert_eq!(
        (m.id.as_str(), m.shutdown, m.source.as_deref()),
        ("google/old", None, None)
    );
    assert_eq!(
        (r.model_id.as_str(), r.upstream_model.as_deref()),
        ("google/old", None)
    );
    let mut next = rows.clone();
    next.models[0].shutdown = "2026-12-01".parse().ok();
    next.routes[0].upstream_model = Some("gemini-old@001".into());
    store.import_catalog(&next, None).await.unwrap();
    assert_eq!(store.load_catalog().await.unwrap(), next);
}

#[tokio::test]
async fn sqlite_catalogs_gain_lifecycles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v9.db");
    sqlite_at(&path, 9, &CATALOG_V9.replace("{yes}", "1"));
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Sqlite, 9)
    );
    catalog_rows_gain_empty_lifecycles(&store).await;
}

#[tokio::test]
async fn postgres_catalogs_gain_lifecycles() {
    let db = PgDatabase::create().await;
    pg_at(&db.url, 9, &CATALOG_V9.replace("{yes}", "true")).await;
    let store = PgStore::connect(&db.url).await.unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Postgres, 9)
    );
    catalog_rows_gain_empty_lifecycles(&store).await;
}

/// Books written at schema version 10: a credit of 1 USD, a chat record (10 input and 5
/// output tokens at 3 / 15 USD per 1M, two attempts, a request id, flagged for review) and an
/// embeddings record (1,000 tokens at 0.025), both debited; and a model with no aliases.
/// `{t}` is a timestamp, `{no}` false, `{yes}` true.
const BOOKS_V10: &str = "
INSERT INTO workspaces (id, name, created_at) VALUES ('ws_1', 'w', {t});
INSERT INTO api_keys (id, workspace_id, secret_hash, hint, created_at)
    VALUES ('key_1', 'ws_1', 'hash', 'hint', {t});
INSERT INTO ledger_entries (id, workspace_id, kind, amount_pico, created_at)
    VALUES ('credit_1', 'ws_1', 'credit', 1000000000000, {t});
INSERT INTO usage_records (id, workspace_id, key_id, model_id, route, endpoint, stream,
    input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
    input_price_micro, output_price_micro, cost_pico, outcome, started_at, finished_at,
    usage_source, attempts, request_id, review)
    VALUES ('u_chat', 'ws_1', 'key_1', 'anthropic/claude-sonnet-4-5', 'anthropic', 'chat', {yes},
            10, 0, 0, 5, 0, 3000000, 15000000, 105000000, 'complete', {t}, {t}, 'reported',
            2, 'req-chat', 'look at me'),
           ('u_emb', 'ws_1', 'key_1', 'google/text-embedding-004', 'gemini-api', 'embeddings',
            {no}, 1000, 0, 0, 0, 0, 25000, 0, 25000000, 'complete', {t}, {t}, 'estimated',
            1, NULL, NULL);
INSERT INTO ledger_entries (id, workspace_id, kind, amount_pico, created_at, usage_id)
    VALUES ('debit:u_chat', 'ws_1', 'debit', -105000000, {t}, 'u_chat'),
           ('debit:u_emb', 'ws_1', 'debit', -25000000, {t}, 'u_emb');
INSERT INTO balances (workspace_id, balance_pico) VALUES ('ws_1', 999870000000);
INSERT INTO models (id, provider, family, kind, upstream_model, profile, input_price_micro,
                    output_price_micro, capabilities, active, source)
VALUES ('anthropic/claude-sonnet-4-5', 'anthropic', 'anthropic', 'chat', 'claude-sonnet-4-5',
        'claude', 3000000, 15000000, '[\"thinking\"]', {yes}, 'v10');
";

/// A `messages` record: 7 input and 3 output tokens at 3 / 15 USD per 1M.
fn messages_record(id: &str) -> UsageRecord {
    let mut r = new_record(id, 7 * 3_000_000 + 3 * 15_000_000);
    r.endpoint = UsageEndpoint::Messages;
    r.model_id = "anthropic/claude-sonnet-4-5".into();
    r.stream = true;
    (r.input_tokens, r.output_tokens) = (7, 3);
    r.extra = ExtraUsage::default();
    r
}

/// What must hold after the upgrade from 0010, on either backend: the records and the ledger
/// are as they were, a `messages` record is accepted (and read back as one), the models gain
/// empty aliases that can then be set.
async fn books_and_catalog_survive_0011(store: &dyn Store) {
    let old = store.usage("ws_1", None).await.unwrap();
    let by_id = |id: &str| old.iter().find(|r| r.id == id).unwrap().clone();
    assert_eq!(old.len(), 2);
    let chat = by_id("u_chat");
    assert_eq!(chat.endpoint, UsageEndpoint::Chat);
    assert!(chat.stream);
    assert_eq!((chat.input_tokens, chat.output_tokens), (10, 5));
    assert_eq!(chat.cost, Usd::from_pico(105_000_000));
    assert_eq!(chat.attempts, 2);
    assert_eq!(chat.request_id.as_deref(), Some("req-chat"));
    assert_eq!(chat.review.as_deref(), Some("look at me"));
    assert_eq!(chat.usage_source, UsageSource::Reported);
    let emb = by_id("u_emb");
    assert_eq!(emb.endpoint, UsageEndpoint::Embeddings);
    assert_eq!(
        (emb.input_tokens, emb.cost),
        (1_000, Usd::from_pico(25_000_000))
    );
    assert_eq!(emb.usage_source, UsageSource::Estimated);
    assert_eq!((emb.attempts, emb.request_id, emb.review), (1, None, None));

    let messages = messages_record("u_msg");
    assert_eq!(
        store
            .record_usage(std::slice::from_ref(&messages))
            .await
            .unwrap(),
        1
    );
    let stored = store.usage_record("ws_1", "u_msg").await.unwrap().unwrap();
    assert_eq!(stored.endpoint, UsageEndpoint::Messages);
    assert_eq!(stored.cost, messages.cost);
    assert_eq!(
        store.record_usage(&[messages]).await.unwrap(),
        0,
        "still written once by id"
    );
    // The whole table still pages by (finished_at, id), newest first.
    let page = store
        .usage_page("ws_1", &Default::default(), None, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["u_msg", "u_emb", "u_chat"]);

    let check = store.ledger_verify().await.unwrap();
    assert!(check.iter().all(|c| c.is_consistent()), "{check:?}");
    assert_eq!(
        check[0].balance_row,
        Usd::from_pico(1_000_000_000_000 - 105_000_000 - 25_000_000 - 66_000_000)
    );

    let rows = store.load_catalog().await.unwrap();
    let m = &rows.models[0];
    assert_eq!(
        (
            m.id.as_str(),
            m.capabilities.as_slice(),
            m.source.as_deref()
        ),
        (
            "anthropic/claude-sonnet-4-5",
            &["thinking".to_owned()][..],
            Some("v10")
        )
    );
    assert!(m.aliases.is_empty(), "{:?}", m.aliases);
    let mut next = rows.clone();
    next.models[0].aliases = vec![
        "claude-sonnet-4-5".into(),
        "claude-sonnet-4-5-20250929".into(),
    ];
    store.import_catalog(&next, None).await.unwrap();
    assert_eq!(store.load_catalog().await.unwrap(), next);
}

/// `usage_records`' columns, indexes (with their columns) and triggers, as SQLite describes
/// them, and the ledger's references: what a rebuild must keep. (The ledger's reference to
/// the records is left out: 0018 drops it, the debits of archived months outliving their
/// records.)
fn sqlite_usage_shape(conn: &rusqlite::Connection) -> Vec<String> {
    let mut shape = sqlite_table_shape(conn, "usage_records");
    shape.extend(sqlite_strings(
        conn,
        "SELECT 'references', \"table\", \"from\", \"to\" FROM pragma_foreign_key_list('ledger_entries') \
         WHERE \"table\" <> 'usage_records' ORDER BY id, seq",
    ));
    shape
}

/// A table's columns, indexes (with their columns) and triggers, as SQLite describes them.
fn sqlite_table_shape(conn: &rusqlite::Connection, table: &str) -> Vec<String> {
    let strings = |sql: &str| sqlite_strings(conn, sql);
    let mut shape = strings(&format!(
        "SELECT 'column', * FROM pragma_table_xinfo('{table}')"
    ));
    for index in strings(&format!(
        "SELECT name || '|' || \"unique\" || '|' || origin FROM pragma_index_list('{table}') \
         ORDER BY name"
    )) {
        let name = index.split('|').next().unwrap().to_owned();
        shape.push(format!("index|{index}"));
        shape.extend(strings(&format!(
            "SELECT 'index column', seqno, name FROM pragma_index_info('{name}') ORDER BY seqno"
        )));
    }
    shape.extend(strings(&format!(
        "SELECT 'trigger', name, sql FROM sqlite_schema WHERE type = 'trigger' \
         AND tbl_name = '{table}' ORDER BY name"
    )));
    shape
}

/// Every row of `sql`, its columns joined by `|`.
fn sqlite_strings(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let mut stmt = conn.prepare(sql).unwrap();
    let rows = stmt
        .query_map([], |r| {
            let n = r.as_ref().column_count();
            let cols: Vec<String> = (0..n)
                .map(|i| match r.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Null => "NULL".to_owned(),
                    rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                    rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                    other => format!("{other:?}"),
                })
                .collect();
            Ok(cols.join("|"))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

#[tokio::test]
async fn sqlite_books_survive_the_aliases_and_messages_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v10.db");
    sqlite_at(
        &path,
        10,
        &BOOKS_V10
            .replace("{t}", "0")
            .replace("{no}", "0")
            .replace("{yes}", "1"),
    );
    let before = sqlite_usage_shape(&rusqlite::Connection::open(&path).unwrap());
    assert!(
        before
            .iter()
            .any(|l| l.contains("usage_records_key_page_idx"))
            && before.iter().any(|l| l.contains("usage_records_no_delete")),
        "{before:#?}"
    );
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Sqlite, 10),
        "every migration after 0010 is pending"
    );
    books_and_catalog_survive_0011(&store).await;

    // The rebuilt table is the old one, column for column, index for index, trigger for
    // trigger, and the ledger still references it.
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(
        without_added_columns(sqlite_usage_shape(&conn)),
        without_spend_trigger(before)
    );
    let create: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'usage_records'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    // Every later version keeps accepting 'messages' (0012 adds 'responses'; 0020 writes the
    // lists as ORs).
    assert!(create.contains("endpoint = 'messages'"), "{create}");
    conn.pragma_update(None, "foreign_keys", true).unwrap();
    let fk_problems: i64 = conn
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(fk_problems, 0);
    usage_records_keep_their_rules(&conn, 3);
    let refused = |sql: &str| conn.execute_batch(sql).is_err();
    assert!(
        refused(
            "INSERT INTO usage_records (id, workspace_id, key_id, model_id, route, endpoint,
                stream, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
                reasoning_tokens, input_price_micro, output_price_micro, cost_pico, outcome,
                started_at, finished_at)
             VALUES ('u_bad', 'ws_1', 'key_1', 'm', 'r', 'completions', 0, 0, 0, 0, 0, 0, 0, 0,
                     0, 'complete', 0, 0)"
        ),
        "an unknown endpoint is still refused"
    );
}

#[tokio::test]
async fn postgres_books_survive_the_aliases_and_messages_migration() {
    let db = PgDatabase::create().await;
    let books = BOOKS_V10
        .replace("{t}", "to_timestamp(0)")
        .replace("{no}", "false")
        .replace("{yes}", "true");
    pg_at(&db.url, 10, &books).await;
    let store = PgStore::connect(&db.url).await.unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Postgres, 10),
        "every migration after 0010 is pending"
    );
    books_and_catalog_survive_0011(&store).await;

    let (client, conn) = tokio_postgres::connect(&db.url, NoTls).await.unwrap();
    tokio::spawn(conn);
    let check: String = client
        .query_one(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint \
             WHERE conrelid = 'usage_records'::regclass AND conname = 'usage_records_endpoint_check'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(check.contains("'messages'"), "{check}");
    let refused = |sql: &'static str| {
        let client = &client;
        async move { client.batch_execute(sql).await.is_err() }
    };
    assert!(
        refused("UPDATE usage_records SET model_id = 'other'").await,
        "append-only"
    );
    assert!(
        refused(
            "INSERT INTO usage_records (id, workspace_id, key_id, model_id, route, endpoint,
                stream, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
                reasoning_tokens, input_price_micro, output_price_micro, cost_pico, outcome,
                started_at, finished_at)
             VALUES ('u_bad', 'ws_1', 'key_1', 'm', 'r', 'completions', false, 0, 0, 0, 0, 0,
                     0, 0, 0, 'complete', now(), now())"
        )
        .await,
        "an unknown endpoint is still refused"
    );
}

/// What must hold after the upgrade from 0011, on either backend: everything 0011 promised
/// (the same books, read the same way, at schema version 11 this time), and a `responses`
/// record is accepted and read back as one, and answers are kept in the new table.
async fn books_survive_0012(store: &dyn Store) {
    books_and_catalog_survive_0011(store).await;
    let mut r = messages_record("u_resp");
    r.endpoint = UsageEndpoint::Responses;
    assert_eq!(
        store.record_usage(std::slice::from_ref(&r)).await.unwrap(),
        1
    );
    let stored = store.usage_record("ws_1", "u_resp").await.unwrap().unwrap();
    assert_eq!(stored.endpoint, UsageEndpoint::Responses);
    let check = store.ledger_verify().await.unwrap();
    assert!(check.iter().all(|c| c.is_consistent()), "{check:?}");
    assert_eq!(
        check[0].balance_row,
        Usd::from_pico(1_000_000_000_000 - 105_000_000 - 25_000_000 - 2 * 66_000_000)
    );

    let created_at = Utc::now();
    let kept = StoredResponse {
        id: "resp_1".into(),
        workspace_id: "ws_1".into(),
        key_id: Some("key_1".into()),
        model: "anthropic/claude-sonnet-4-5".into(),
        created_at,
        expires_at: created_at + chrono::Duration::days(30),
        items: "[]".into(),
        response: r#"{"id":"resp_1"}"#.into(),
    };
    assert_eq!(
        store
            .keep_responses(std::slice::from_ref(&kept))
            .await
            .unwrap(),
        1
    );
    let found = store
        .stored_response("ws_1", "resp_1", created_at)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((found.items.as_str(), found.key_id), ("[]", kept.key_id));
}

#[tokio::test]
async fn sqlite_books_survive_the_responses_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v11.db");
    sqlite_at(
        &path,
        11,
        &BOOKS_V10
            .replace("{t}", "0")
            .replace("{no}", "0")
            .replace("{yes}", "1"),
    );
    let before = sqlite_usage_shape(&rusqlite::Connection::open(&path).unwrap());
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Sqlite, 11),
        "every migration after 0011 is pending"
    );
    books_survive_0012(&store).await;

    // Rebuilt again: column for column, index for index, trigger for trigger, still the
    // ledger's reference, still append-only, still announcing spend.
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(
        without_added_columns(sqlite_usage_shape(&conn)),
        without_spend_trigger(before)
    );
    let create: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'usage_records'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(create.contains("endpoint = 'responses'"), "{create}");
    conn.pragma_update(None, "foreign_keys", true).unwrap();
    let fk_problems: i64 = conn
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(fk_problems, 0);
    usage_records_keep_their_rules(&conn, 4);
    // Kept responses, unlike the books, can be deleted.
    assert_eq!(conn.execute("DELETE FROM responses", []).unwrap(), 1);
}

#[tokio::test]
async fn postgres_books_survive_the_responses_migration() {
    let db = PgDatabase::create().await;
    let books = BOOKS_V10
        .replace("{t}", "to_timestamp(0)")
        .replace("{no}", "false")
        .replace("{yes}", "true");
    pg_at(&db.url, 11, &books).await;
    let store = PgStore::connect(&db.url).await.unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Postgres, 11),
        "every migration after 0011 is pending"
    );
    books_survive_0012(&store).await;

    let (client, conn) = tokio_postgres::connect(&db.url, NoTls).await.unwrap();
    tokio::spawn(conn);
    let check: String = client
        .query_one(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint \
             WHERE conrelid = 'usage_records'::regclass AND conname = 'usage_records_endpoint_check'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        check.contains("'responses'") && check.contains("'messages'"),
        "{check}"
    );
    assert!(
        client
            .batch_execute("DELETE FROM usage_records")
            .await
            .is_err(),
        "still append-only"
    );
    assert_eq!(
        client.execute("DELETE FROM responses", &[]).await.unwrap(),
        1
    );
}

/// Columns later migrations add at the end of `usage_records` (0014, 0017), left out of a
/// shape compared with one from before them.
fn without_added_columns(shape: Vec<String>) -> Vec<String> {
    const ADDED: [&str; 3] = ["client_addr", "upstream_request_id", "waived"];
    without_spend_trigger(shape)
        .into_iter()
        .filter(|l| {
            !(l.starts_with("column|") && l.split('|').nth(2).is_some_and(|c| ADDED.contains(&c)))
        })
        .collect()
}

/// `shape` less the per-row trigger that logged spend, which 0021 drops (the ledger writer
/// logs a key's spend once per batch since).
fn without_spend_trigger(shape: Vec<String>) -> Vec<String> {
    shape
        .into_iter()
        .filter(|l| !l.starts_with("trigger|usage_records_log_spend|"))
        .collect()
}

/// A ledger's shape as 0022 leaves it: without `ledger_entries_workspace_idx` (its line and its
/// columns' lines).
fn without_workspace_index(shape: Vec<String>) -> Vec<String> {
    let mut dropped = false;
    shape
        .into_iter()
        .filter(|l| {
            if !l.starts_with("index column|") {
                dropped = l.starts_with("index|ledger_entries_workspace_idx|");
            }
            !dropped
        })
        .collect()
}

/// What must hold after 0014, on either backend: the old records read without a client
/// address or upstream request id, a new record keeps both, and an id too long for the column
/// is refused by the database.
async fn books_survive_0014(store: &dyn Store) {
    let old = store.usage("ws_1", None).await.unwrap();
    assert_eq!(old.len(), 2);
    assert!(
        old.iter()
            .all(|r| r.client_addr.is_none() && r.upstream_request_id.is_none()),
        "{old:?}"
    );
    let mut r = messages_record("u_traced");
    r.client_addr = Some("2001:db8::7".into());
    r.upstream_request_id = Some("req_011CVEA3SF7rnb3DuBZytqQa".into());
    assert_eq!(
        store.record_usage(std::slice::from_ref(&r)).await.unwrap(),
        1
    );
    let stored = store
        .usage_record("ws_1", "u_traced")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.client_addr.as_deref(), Some("2001:db8::7"));
    assert_eq!(
        stored.upstream_request_id.as_deref(),
        Some("req_011CVEA3SF7rnb3DuBZytqQa")
    );
    let mut long = messages_record("u_long");
    long.upstream_request_id = Some("x".repeat(129));
    assert!(store.record_usage(&[long]).await.is_err());
    let check = store.ledger_verify().await.unwrap();
    assert!(check.iter().all(|c| c.is_consistent()), "{check:?}");
}

#[tokio::test]
async fn sqlite_records_gain_client_addresses_and_upstream_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v13.db");
    let books = BOOKS_V10
        .replace("{t}", "0")
        .replace("{no}", "0")
        .replace("{yes}", "1");
    sqlite_at(&path, 13, &books);
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Sqlite, 13)
    );
    books_survive_0014(&store).await;
    usage_records_keep_their_rules(&rusqlite::Connection::open(&path).unwrap(), 3);
}

#[tokio::test]
async fn postgres_records_gain_client_addresses_and_upstream_ids() {
    let db = PgDatabase::create().await;
    let books = BOOKS_V10
        .replace("{t}", "to_timestamp(0)")
        .replace("{no}", "false")
        .replace("{yes}", "true");
    pg_at(&db.url, 13, &books).await;
    let store = PgStore::connect(&db.url).await.unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Postgres, 13)
    );
    books_survive_0014(&store).await;
}

/// How many migrations come before 0017 (`money`): the schema a database it upgrades has.
fn before_money(dialect: Dialect) -> usize {
    migrations::migrations(dialect)
        .iter()
        .position(|m| m.name == "money")
        .unwrap()
}

/// What must hold after 0017, on either backend: the books as they were, the credited total
/// summed from the credits, the old records not waived; then a refund and a waived record
/// are accepted, and the books still balance (the credited total included).
async fn books_survive_0017(store: &dyn Store) {
    let old = store.usage("ws_1", None).await.unwrap();
    assert_eq!(old.len(), 2);
    assert!(old.iter().all(|r| !r.waived), "{old:?}");
    let row = store.balance_row("ws_1").await.unwrap();
    let balance = Usd::from_pico(999_870_000_000);
    assert_eq!(
        row,
        BalanceRow {
            balance,
            credited: Usd::from_pico(1_000_000_000_000)
        }
    );
    let check = store.ledger_verify().await.unwrap();
    assert!(check.iter().all(|c| c.is_consistent()), "{check:?}");

    let refund = CreditMovement {
        entry_id: "refund_1".into(),
        workspace_id: "ws_1".into(),
        kind: LedgerKind::Refund,
        amount: Usd::from_pico(500_000_000_000),
        note: Some("unused".into()),
    };
    let done = store.move_credit(&refund, None, None).await.unwrap();
    let left = Usd::from_pico(499_870_000_000);
    assert!(matches!(done, Done::Made((_, b)) if b == left), "{done:?}");
    let mut waived = messages_record("u_waived");
    (waived.output_tokens, waived.cost, waived.waived) = (0, Usd::ZERO, true);
    assert_eq!(
        store
            .record_usage(std::slice::from_ref(&waived))
            .await
            .unwrap(),
        1
    );
    assert!(
        store
            .usage_record("ws_1", "u_waived")
            .await
            .unwrap()
            .unwrap()
            .waived
    );
    assert_eq!(store.balance("ws_1").await.unwrap(), left);
    let check = store.ledger_verify().await.unwrap();
    assert!(check.iter().all(|c| c.is_consistent()), "{check:?}");
    assert_eq!(check[0].credited_row, Usd::from_pico(500_000_000_000));
}

#[tokio::test]
async fn sqlite_books_survive_the_money_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v16.db");
    let books = BOOKS_V10
        .replace("{t}", "0")
        .replace("{no}", "0")
        .replace("{yes}", "1");
    sqlite_at(&path, before_money(Dialect::Sqlite), &books);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (usage_before, ledger_before) = (
        sqlite_usage_shape(&conn),
        sqlite_table_shape(&conn, "ledger_entries"),
    );
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    let pending = pending_after(Dialect::Sqlite, before_money(Dialect::Sqlite));
    assert_eq!(store.migrate().await.unwrap(), pending);
    books_survive_0017(&store).await;

    // Both rebuilt tables are the old ones, column for column, index for index, trigger for
    // trigger (usage_records gains `waived`; 0018 drops the ledger's reference to the
    // records, rebuilding the ledger once more).
    let without_waived: Vec<String> = sqlite_usage_shape(&conn)
        .into_iter()
        .filter(|l| !l.starts_with("column|36|waived|"))
        .collect();
    assert_eq!(without_waived, without_spend_trigger(usage_before));
    assert_eq!(
        sqlite_table_shape(&conn, "ledger_entries"),
        without_workspace_index(ledger_before)
    );
    conn.pragma_update(None, "foreign_keys", true).unwrap();
    let fk_problems: i64 = conn
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(fk_problems, 0);
    usage_records_keep_their_rules(&conn, 3);
    let refused = |sql: &str| conn.execute_batch(sql).is_err();
    assert!(refused("DELETE FROM ledger_entries"), "still append-only");
    assert!(
        refused("UPDATE ledger_entries SET note = 'x'"),
        "still append-only"
    );
}

#[tokio::test]
async fn postgres_books_survive_the_money_migration() {
    let db = PgDatabase::create().await;
    let books = BOOKS_V10
        .replace("{t}", "to_timestamp(0)")
        .replace("{no}", "false")
        .replace("{yes}", "true");
    pg_at(&db.url, before_money(Dialect::Postgres), &books).await;
    let store = PgStore::connect(&db.url).await.unwrap();
    let pending = pending_after(Dialect::Postgres, before_money(Dialect::Postgres));
    assert_eq!(store.migrate().await.unwrap(), pending);
    books_survive_0017(&store).await;
}

/// How many migrations a database at `version` has still to run.
fn pending_after(dialect: Dialect, version: usize) -> usize {
    migrations::migrations(dialect).len() - version
}

/// A SQLite database at `path` migrated to `version` only (foreign keys on, as the store runs),
/// then holding `rows`.
fn sqlite_at(path: &std::path::Path, version: usize, rows: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(migrations::SQLITE_SCHEMA_MIGRATIONS)
        .unwrap();
    for m in &migrations::migrations(Dialect::Sqlite)[..version] {
        conn.execute_batch(m.sql).unwrap();
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, 0)",
            rusqlite::params![m.version, m.name],
        )
        .unwrap();
    }
    conn.pragma_update(None, "foreign_keys", true).unwrap();
    conn.execute_batch(rows).unwrap();
}

/// The PostgreSQL database at `url` migrated to `version` only, then holding `rows`.
async fn pg_at(url: &str, version: usize, rows: &str) {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(migrations::PG_SCHEMA_MIGRATIONS)
        .await
        .unwrap();
    for m in &migrations::migrations(Dialect::Postgres)[..version] {
        client.batch_execute(m.sql).await.unwrap();
        client
            .execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                &[&m.version, &m.name],
            )
            .await
            .unwrap();
    }
    client.batch_execute(rows).await.unwrap();
}

/// Keys made before migration 0016 may call every model (an empty allowlist) and can be given
/// a list; management keys start from none.
async fn keys_survive_0016(store: &dyn Store) {
    let key = store.get_key("key_1").await.unwrap().unwrap();
    assert!(key.allowed_models.is_empty(), "{key:?}");
    let update = tollgate::store::KeyUpdate {
        name: key.name.clone(),
        spend_limit: key.spend_limit,
        limit_reset: key.limit_reset,
        allowed_models: vec!["google/*".into()],
    };
    let updated = store.update_key("key_1", &update, None).await.unwrap();
    assert_eq!(updated.allowed_models, ["google/*"]);
    assert!(store.management_keys("ws_1").await.unwrap().is_empty());
    let check = store.ledger_verify().await.unwrap();
    assert!(check.iter().all(|c| c.is_consistent()), "{check:?}");
}

#[tokio::test]
async fn sqlite_keys_gain_allowlists() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v15.db");
    let books = BOOKS_V2.replace("{t}", "0").replace("{no}", "0");
    sqlite_at(&path, 15, &books);
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    let pending = pending_after(Dialect::Sqlite, 15);
    assert_eq!(store.migrate().await.unwrap(), pending);
    keys_survive_0016(&store).await;
}

#[tokio::test]
async fn postgres_keys_gain_allowlists() {
    let db = PgDatabase::create().await;
    let books = BOOKS_V2
        .replace("{t}", "to_timestamp(0)")
        .replace("{no}", "false");
    pg_at(&db.url, 15, &books).await;
    let store = PgStore::connect(&db.url).await.unwrap();
    let pending = pending_after(Dialect::Postgres, 15);
    assert_eq!(store.migrate().await.unwrap(), pending);
    keys_survive_0016(&store).await;
}

/// How many migrations come before 0018 (`partitions`).
fn before_partitions(dialect: Dialect) -> usize {
    migrations::migrations(dialect)
        .iter()
        .position(|m| m.name == "partitions")
        .unwrap()
}

/// Books written by the version-17 store: a credit per workspace and records of August,
/// September (its last microsecond) and October 2026 in two workspaces, debited.
async fn books_of_three_months(store: &dyn Store) -> Vec<UsageRecord> {
    for ws in ["ws_1", "ws_2"] {
        store.create_workspace(ws, ws, None).await.unwrap();
        let key = tollgate::store::NewKey {
            id: format!("key_{ws}"),
            workspace_id: ws.into(),
            name: None,
            secret_hash: format!("hash-{ws}"),
            hint: "hint".into(),
            expires_at: None,
            spend_limit: None,
            limit_reset: None,
            allowed_models: vec![],
        };
        store.create_key(key, None).await.unwrap();
        let credit = CreditMovement {
            entry_id: format!("credit_{ws}"),
            workspace_id: ws.into(),
            kind: LedgerKind::Credit,
            amount: Usd::from_pico(1_000_000_000_000),
            note: None,
        };
        store.move_credit(&credit, None, None).await.unwrap();
    }
    let times = [
        ("ws_1", "2026-08-03T10:00:00.000001Z"),
        ("ws_2", "2026-08-31T23:59:59.999999Z"),
        ("ws_1", "2026-09-30T23:59:59.999999Z"),
        ("ws_2", "2026-09-01T00:00:00Z"),
        ("ws_1", "2026-10-01T00:00:00Z"),
        ("ws_1", "2026-10-20T08:00:00Z"),
    ];
    let records: Vec<UsageRecord> = times
        .iter()
        .enumerate()
        .map(|(i, (ws, t))| {
            let mut r = new_record(&format!("u_{i}"), NEW_COST);
            r.workspace_id = (*ws).into();
            r.key_id = format!("key_{ws}");
            r.finished_at = t.parse().unwrap();
            r.started_at = r.finished_at - chrono::Duration::seconds(1);
            r
        })
        .collect();
    assert_eq!(store.record_usage(&records).await.unwrap(), 6);
    records
}

/// What must hold after 0018 on either backend: every record, count and sum as it was, the
/// books clean, and new records (and replays of old ones) written as before.
async fn books_survive_0018(
    store: &dyn Store,
    records: &[UsageRecord],
    balances: &[(String, Usd)],
) {
    for ws in ["ws_1", "ws_2"] {
        let mut expected: Vec<UsageRecord> = records
            .iter()
            .filter(|r| r.workspace_id == ws)
            .cloned()
            .collect();
        expected.sort_by(|a, b| (a.finished_at, &a.id).cmp(&(b.finished_at, &b.id)));
        assert_eq!(store.usage(ws, None).await.unwrap(), expected);
    }
    assert_eq!(store.balances().await.unwrap(), balances);
    let verified = tollgate::commands::verify_ledger(store).await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
    assert_eq!(verified.checked, 2);
    // A replay of an old record is skipped; a new one is written and debited.
    assert_eq!(store.record_usage(&records[..2]).await.unwrap(), 0);
    let fresh = new_record("u_fresh", NEW_COST);
    let mut fresh_ws1 = fresh.clone();
    fresh_ws1.key_id = "key_ws_1".into();
    assert_eq!(store.record_usage(&[fresh_ws1]).await.unwrap(), 1);
    let verified = tollgate::commands::verify_ledger(store).await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
}

#[tokio::test]
async fn postgres_records_move_into_their_month_partitions() {
    let db = PgDatabase::create().await;
    pg_at(&db.url, before_partitions(Dialect::Postgres), "").await;
    let store = PgStore::connect(&db.url).await.unwrap();
    let records = books_of_three_months(&store).await;
    let balances = store.balances().await.unwrap();
    let pending = pending_after(Dialect::Postgres, before_partitions(Dialect::Postgres));
    assert_eq!(store.migrate().await.unwrap(), pending);
    books_survive_0018(&store, &records, &balances).await;

    let (client, conn) = tokio_postgres::connect(&db.url, NoTls).await.unwrap();
    tokio::spawn(conn);
    let placed = client
        .query(
            "SELECT tableoid::regclass::text, id FROM usage_records WHERE id LIKE 'u\\_%' \
             AND id <> 'u_fresh' ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let placed: Vec<(String, String)> = placed.iter().map(|r| (r.get(0), r.get(1))).collect();
    let expected: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            let month = r.finished_at.format("%Y_%m");
            (format!("usage_records_{month}"), r.id.clone())
        })
        .collect();
    assert_eq!(placed, expected);
    let partitioned: String = client
        .query_one(
            "SELECT partstrat::text FROM pg_partitioned_table \
             WHERE partrelid = 'usage_records'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(partitioned, "r");
    // The old table is gone; the ledger no longer references the records.
    let old: Option<String> = client
        .query_one("SELECT to_regclass('usage_records_v17')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(old, None);
}

#[tokio::test]
async fn sqlite_books_survive_the_partitions_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v17.db");
    sqlite_at(&path, before_partitions(Dialect::Sqlite), "");
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    let records = books_of_three_months(&store).await;
    let balances = store.balances().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let ledger_before = sqlite_table_shape(&conn, "ledger_entries");
    let pending = pending_after(Dialect::Sqlite, before_partitions(Dialect::Sqlite));
    assert_eq!(store.migrate().await.unwrap(), pending);
    books_survive_0018(&store, &records, &balances).await;
    // The ledger is rebuilt without its reference to the records, its indexes and triggers
    // as they were (but the one 0022 drops).
    let ledger_after = sqlite_table_shape(&conn, "ledger_entries");
    assert_eq!(ledger_after, without_workspace_index(ledger_before));
    let refused = |sql: &str| conn.execute_batch(sql).is_err();
    assert!(refused("DELETE FROM ledger_entries"), "still append-only");
    assert!(refused("DELETE FROM usage_records"), "still append-only");
}

/// Temporary b-trees SQLite builds to run `insert` (its CHECKs and triggers included).
fn temporary_btrees(conn: &rusqlite::Connection, insert: &str) -> usize {
    let mut explain = conn.prepare(&format!("EXPLAIN {insert}")).unwrap();
    let ops = explain.query_map([], |r| r.get::<_, String>(1)).unwrap();
    ops.filter(|op| op.as_deref() == Ok("OpenEphemeral"))
        .count()
}

/// What the ledger writer inserts for a record: the record (its trigger writes to change_log)
/// and its debit.
const WRITER_INSERTS: [&str; 2] = [
    "INSERT INTO usage_records (endpoint, outcome) VALUES ('chat', 'complete')",
    "INSERT INTO ledger_entries (kind) VALUES ('debit')",
];

#[tokio::test]
async fn sqlite_books_survive_the_checks_migration_and_records_build_no_temporary_btrees() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v19.db");
    let before = migrations::migrations(Dialect::Sqlite)
        .iter()
        .position(|m| m.name == "checks")
        .unwrap();
    sqlite_at(&path, before, "");
    let store = SqliteStore::open(path.to_str().unwrap()).unwrap();
    let records = books_of_three_months(&store).await;
    let balances = store.balances().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    // The feed was pruned: its high-water mark is above every row left.
    let high: i64 = conn
        .query_row("SELECT MAX(seq) FROM change_log", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch("DELETE FROM change_log").unwrap();
    let built: usize = WRITER_INSERTS
        .iter()
        .map(|i| temporary_btrees(&conn, i))
        .sum();
    assert!(built >= 3, "before: {built}");

    assert_eq!(
        store.migrate().await.unwrap(),
        pending_after(Dialect::Sqlite, before)
    );
    books_survive_0018(&store, &records, &balances).await;
    // A connection compiles with the schema it last read: open one on the new schema.
    let conn = rusqlite::Connection::open(&path).unwrap();
    for insert in WRITER_INSERTS {
        assert_eq!(temporary_btrees(&conn, insert), 0, "{insert}");
    }
    // The rules hold as before: kinds outside the lists are refused, the tables append-only,
    // and a change's seq is never one handed out before the rebuild.
    let refused = |sql: &str| conn.execute_batch(sql).is_err();
    assert!(refused(
        "INSERT INTO change_log (kind, ref_id) VALUES ('nope', 'x')"
    ));
    assert!(refused("DELETE FROM ledger_entries"), "still append-only");
    assert!(
        refused("UPDATE usage_records SET endpoint = 'embeddings'"),
        "still append-only"
    );
    conn.execute_batch("INSERT INTO change_log (kind, ref_id) VALUES ('spend', 'x')")
        .unwrap();
    let seq: i64 = conn
        .query_row("SELECT MAX(seq) FROM change_log", [], |r| r.get(0))
        .unwrap();
    assert!(seq > high, "{seq} after {high}");
}
