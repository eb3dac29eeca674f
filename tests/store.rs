#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The one store suite: every case is written once and runs against both backends —
//! `sqlite::<case>` on a temporary database file, `pg::<case>` in a fresh PostgreSQL schema
//! (at `TOLLGATE_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`), so the two
//! cannot drift apart. An unreachable PostgreSQL fails the `pg::` cases unless
//! `TOLLGATE_SKIP_PG=1`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use tokio_postgres::NoTls;
use tollgate::billing::money::{Price, Usd};
use tollgate::store::migrations;
use tollgate::store::postgres::PgStore;
use tollgate::store::sqlite::SqliteStore;
use tollgate::store::{
    CatalogRows, ChangeKind, LedgerKind, LimitReset, ModelRow, NewKey, ProfileRow, RouteRow, Store,
    StoreError, StoreResult,
};

const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

enum Inst {
    Sqlite(Arc<SqliteStore>),
    Pg(Arc<PgStore>),
}

/// One backend under test: a store instance, plus how to open another instance on the same
/// data (a second replica).
struct Backend {
    inst: Inst,
    /// SQLite file path or PostgreSQL url (with the test's schema).
    target: String,
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    fn store(&self) -> &dyn Store {
        match &self.inst {
            Inst::Sqlite(s) => s.as_ref(),
            Inst::Pg(s) => s.as_ref(),
        }
    }

    fn is_pg(&self) -> bool {
        matches!(self.inst, Inst::Pg(_))
    }

    fn migration_count(&self) -> usize {
        if self.is_pg() {
            migrations::POSTGRES.len()
        } else {
            migrations::SQLITE.len()
        }
    }

    /// The store, migrated.
    async fn ready(&self) -> &dyn Store {
        self.store().migrate().await.unwrap();
        self.store()
    }

    async fn execute_raw(&self, sql: &str) -> StoreResult<u64> {
        match &self.inst {
            Inst::Sqlite(s) => s.execute_raw(sql).await,
            Inst::Pg(s) => s.execute_raw(sql).await,
        }
    }

    /// A second, independent instance on the same database (another replica).
    async fn another(&self) -> Arc<dyn Store> {
        match &self.inst {
            Inst::Sqlite(_) => Arc::new(SqliteStore::open(&self.target).unwrap()),
            Inst::Pg(_) => Arc::new(PgStore::connect(&self.target).await.unwrap()),
        }
    }
}

async fn run_sqlite<F, Fut>(case: F)
where
    F: FnOnce(Arc<Backend>) -> Fut,
    Fut: Future<Output = ()>,
{
    // Inside the crate's target dir, not the system temp dir.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("nested/dir/tollgate.db");
    let path = path.to_str().unwrap().to_owned();
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    case(Arc::new(Backend {
        inst: Inst::Sqlite(store),
        target: path,
        _dir: Some(dir),
    }))
    .await;
}

async fn run_pg<F, Fut>(case: F)
where
    F: FnOnce(Arc<Backend>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    if std::env::var("TOLLGATE_SKIP_PG").as_deref() == Ok("1") {
        eprintln!("TOLLGATE_SKIP_PG=1: PostgreSQL case skipped");
        return;
    }
    let base = std::env::var("TOLLGATE_TEST_PG_URL").unwrap_or_else(|_| DEFAULT_PG_URL.to_owned());
    let (admin, conn) = tokio_postgres::connect(&base, NoTls)
        .await
        .unwrap_or_else(|e| {
            let cause = std::error::Error::source(&e)
                .map(|c| format!(": {c}"))
                .unwrap_or_default();
            panic!(
                "PostgreSQL at {base} is unreachable ({e}{cause}); set TOLLGATE_SKIP_PG=1 to skip"
            )
        });
    tokio::spawn(conn);
    let schema = format!("t_{:016x}", rand::random::<u64>());
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    // `options` reaches the server at connection start-up, so every pooled connection (and
    // the listener) of every instance uses the test's schema.
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-csearch_path%3D{schema}");

    // The case runs as its own task, so that when it panics we still drop the schema.
    let outcome = match PgStore::connect(&url).await {
        Ok(store) => {
            let backend = Arc::new(Backend {
                inst: Inst::Pg(Arc::new(store)),
                target: url.clone(),
                _dir: None,
            });
            Ok(tokio::spawn(case(backend)).await)
        }
        Err(e) => Err(e),
    };
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    match outcome {
        Ok(Ok(())) => {}
        // The panic message was already printed by the task's panic hook.
        Ok(Err(join)) => match join.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(join) => panic!("case task: {join}"),
        },
        Err(e) => panic!("PgStore::connect({url}): {e}"),
    }
}

/// Declares every case once per backend: `sqlite::<case>` and `pg::<case>`.
macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::run_sqlite(super::$case).await;
                }
            )*
        }
        mod pg {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::run_pg(super::$case).await;
                }
            )*
        }
    };
}

suite!(
    migrate_is_idempotent_and_serialised,
    workspaces,
    keys,
    key_fields_round_trip_exactly,
    revoke,
    credits_are_exact_and_atomic,
    ledger_is_append_only,
    catalog_import,
    change_feed,
    wait_for_change_wakes_on_another_instance,
);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn new_key(id: &str, workspace_id: &str, hash: &str) -> NewKey {
    NewKey {
        id: id.to_owned(),
        workspace_id: workspace_id.to_owned(),
        name: None,
        secret_hash: hash.to_owned(),
        hint: format!("sk-tg-{id}…"),
        expires_at: None,
        spend_limit: None,
        limit_reset: None,
    }
}

fn usd(text: &str) -> Usd {
    text.parse().unwrap()
}

fn price(text: &str) -> Price {
    text.parse().unwrap()
}

fn at(secs: i64, nanos: u32) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, nanos).unwrap()
}

fn model(id: &str, input: &str) -> ModelRow {
    ModelRow {
        id: id.to_owned(),
        provider: "openai".to_owned(),
        family: "gpt".to_owned(),
        kind: "chat".to_owned(),
        upstream_model: format!("{id}-upstream"),
        profile: String::new(),
        input_price: price(input),
        output_price: price("10"),
        cache_read_price: None,
        cache_write_price: None,
        capabilities: Vec::new(),
        max_output_tokens: None,
        active: true,
    }
}

fn route(model_id: &str, kind: &str, priority: i32) -> RouteRow {
    RouteRow {
        model_id: model_id.to_owned(),
        kind: kind.to_owned(),
        base_url: None,
        region: None,
        priority,
        active: true,
    }
}

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

async fn migrate_is_idempotent_and_serialised(b: Arc<Backend>) {
    let expected = b.migration_count();
    assert!(expected >= 1);
    // Two replicas migrating the same empty database at once: exactly one applies each version.
    let other = b.another().await;
    let (x, y) = tokio::join!(b.store().migrate(), other.migrate());
    assert_eq!(x.unwrap() + y.unwrap(), expected);
    assert_eq!(b.store().migrate().await.unwrap(), 0);
    assert_eq!(other.migrate().await.unwrap(), 0);
    assert!(b.store().catalog_is_empty().await.unwrap());
}

async fn workspaces(b: Arc<Backend>) {
    let s = b.ready().await;
    assert!(s.list_workspaces().await.unwrap().is_empty());
    let a = s.create_workspace("ws-a", "Acme").await.unwrap();
    assert_eq!((a.id.as_str(), a.name.as_str()), ("ws-a", "Acme"));
    assert_eq!(
        a.created_at.timestamp_subsec_nanos() % 1_000,
        0,
        "microsecond precision"
    );
    let z = s.create_workspace("ws-z", "Zeta").await.unwrap();
    assert_eq!(
        s.list_workspaces().await.unwrap(),
        vec![a.clone(), z.clone()]
    );
    assert_eq!(s.get_workspace("ws-a").await.unwrap(), Some(a));
    assert_eq!(s.get_workspace("ws-z").await.unwrap(), Some(z));
    assert_eq!(s.get_workspace("nope").await.unwrap(), None);
    assert!(matches!(
        s.create_workspace("ws-a", "again").await,
        Err(StoreError::Conflict(_))
    ));
}

async fn keys(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w1", "one").await.unwrap();
    s.create_workspace("w2", "two").await.unwrap();

    let k1 = s.create_key(new_key("k1", "w1", "h1")).await.unwrap();
    let k2 = s.create_key(new_key("k2", "w1", "h2")).await.unwrap();
    let k3 = s.create_key(new_key("k3", "w2", "h3")).await.unwrap();
    assert_eq!(k1.revoked_at, None);
    assert_eq!(k1.secret_hash, "h1");

    assert_eq!(s.get_key("k1").await.unwrap(), Some(k1.clone()));
    assert_eq!(s.get_key("missing").await.unwrap(), None);
    assert_eq!(
        s.list_keys("w1").await.unwrap(),
        vec![k1.clone(), k2.clone()]
    );
    assert_eq!(s.list_keys("w2").await.unwrap(), vec![k3.clone()]);
    assert!(s.list_keys("nope").await.unwrap().is_empty());
    let mut all = s.all_keys().await.unwrap();
    all.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(all, vec![k1, k2, k3]);

    // The same secret hash twice, or the same id twice: Conflict, nothing stored.
    match s.create_key(new_key("k4", "w2", "h1")).await {
        Err(StoreError::Conflict(msg)) => assert!(msg.contains("hash"), "{msg}"),
        other => panic!("duplicate hash: {other:?}"),
    }
    match s.create_key(new_key("k1", "w2", "h-new")).await {
        Err(StoreError::Conflict(msg)) => assert!(msg.contains("k1"), "{msg}"),
        other => panic!("duplicate id: {other:?}"),
    }
    assert_eq!(s.get_key("k4").await.unwrap(), None);

    match s.create_key(new_key("k5", "ghost", "h5")).await {
        Err(StoreError::NotFound(what)) => assert_eq!(what, "workspace ghost"),
        other => panic!("missing workspace: {other:?}"),
    }
    assert_eq!(s.get_key("k5").await.unwrap(), None);
    assert_eq!(s.all_keys().await.unwrap().len(), 3);
}

async fn key_fields_round_trip_exactly(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w").await.unwrap();
    let cases = [
        (
            at(1_767_225_599, 999_999_000),
            "0.000000000001",
            LimitReset::Daily,
        ),
        (
            at(4_102_444_800, 123_456_000),
            "9223372.036854775807",
            LimitReset::Weekly,
        ),
        (at(-86_400, 1_000), "12.345678901234", LimitReset::Monthly),
    ];
    for (i, (expires, limit, reset)) in cases.into_iter().enumerate() {
        let mut k = new_key(&format!("k{i}"), "w", &format!("h{i}"));
        k.name = Some(format!("key «{i}»"));
        k.expires_at = Some(expires);
        k.spend_limit = Some(usd(limit));
        k.limit_reset = Some(reset);
        let created = s.create_key(k).await.unwrap();
        let read = s.get_key(&created.id).await.unwrap().unwrap();
        assert_eq!(read, created);
        assert_eq!(read.expires_at, Some(expires));
        assert_eq!(read.spend_limit, Some(usd(limit)));
        assert_eq!(read.limit_reset, Some(reset));
        assert_eq!(read.name.as_deref(), Some(format!("key «{i}»").as_str()));
    }
    // Sub-microsecond digits are dropped consistently: what create returns is what is read.
    let mut k = new_key("nanos", "w", "hn");
    k.expires_at = Some(at(1_700_000_000, 123_456_789));
    let created = s.create_key(k).await.unwrap();
    assert_eq!(created.expires_at, Some(at(1_700_000_000, 123_456_000)));
    assert_eq!(s.get_key("nanos").await.unwrap(), Some(created));
    // All optional fields empty.
    let created = s.create_key(new_key("bare", "w", "hb")).await.unwrap();
    let read = s.get_key("bare").await.unwrap().unwrap();
    assert_eq!(read, created);
    assert_eq!(
        (
            read.name,
            read.expires_at,
            read.spend_limit,
            read.limit_reset
        ),
        (None, None, None, None)
    );
}

async fn revoke(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w").await.unwrap();
    s.create_key(new_key("k", "w", "h")).await.unwrap();
    let when = at(1_750_000_000, 250_000_000);
    assert!(s.revoke_key("k", when).await.unwrap());
    assert!(!s.revoke_key("k", at(1_760_000_000, 0)).await.unwrap());
    // The first revocation time stands.
    assert_eq!(
        s.get_key("k").await.unwrap().unwrap().revoked_at,
        Some(when)
    );
    match s.revoke_key("unknown", when).await {
        Err(StoreError::NotFound(what)) => assert!(what.contains("unknown"), "{what}"),
        other => panic!("revoking an unknown key: {other:?}"),
    }
    // Revoked keys stay in all_keys (the gateway's cache needs them).
    assert_eq!(s.all_keys().await.unwrap().len(), 1);
}

async fn credits_are_exact_and_atomic(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w").await.unwrap();
    s.create_workspace("empty", "no entries").await.unwrap();
    assert_eq!(s.balance("w").await.unwrap(), Usd::ZERO);
    assert_eq!(s.balance("empty").await.unwrap(), Usd::ZERO);

    let amounts = [
        "0.000000000001",
        "12.345678901234",
        "1000000.5",
        "0.1",
        "0.2",
    ];
    let mut returned = Vec::new();
    for (i, a) in amounts.iter().enumerate() {
        let note = (i % 2 == 0).then(|| format!("top-up {i}"));
        let e = s
            .add_credit(&format!("e{i}"), "w", usd(a), note.as_deref())
            .await
            .unwrap();
        assert_eq!(e.kind, LedgerKind::Credit);
        assert_eq!(e.amount, usd(a));
        assert_eq!(e.note, note);
        returned.push(e);
    }
    // 0.000000000001 + 12.345678901234 + 1000000.5 + 0.1 + 0.2, exactly.
    assert_eq!(s.balance("w").await.unwrap(), usd("1000013.145678901235"));
    assert_eq!(
        s.balance("w").await.unwrap().to_string(),
        "1000013.145678901235"
    );
    let ledger = s.ledger("w").await.unwrap();
    assert_eq!(ledger, returned, "oldest first, exactly as returned");
    assert!(s.ledger("empty").await.unwrap().is_empty());

    // Refused: zero, negative, unknown workspace, reused entry id. None moves the balance.
    for bad in ["0", "-0.000000000001", "-5"] {
        match s.add_credit("bad", "w", usd(bad), None).await {
            Err(StoreError::Conflict(msg)) => assert!(msg.contains("positive"), "{msg}"),
            other => panic!("credit of {bad}: {other:?}"),
        }
    }
    match s.add_credit("e-ghost", "ghost", usd("1"), None).await {
        Err(StoreError::NotFound(what)) => assert_eq!(what, "workspace ghost"),
        other => panic!("credit to a missing workspace: {other:?}"),
    }
    assert!(matches!(
        s.add_credit("e0", "w", usd("7"), None).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(s.balance("w").await.unwrap(), usd("1000013.145678901235"));
    assert_eq!(s.ledger("w").await.unwrap().len(), amounts.len());
    assert_eq!(s.balance("ghost").await.unwrap(), Usd::ZERO);

    // A balance that would overflow i64 pico-dollars is refused, with the entry rolled back.
    s.create_workspace("big", "big").await.unwrap();
    let max = Usd::from_pico(i64::MAX);
    s.add_credit("max", "big", max, None).await.unwrap();
    assert!(s
        .add_credit("one-more", "big", Usd::from_pico(1), None)
        .await
        .is_err());
    assert_eq!(s.balance("big").await.unwrap(), max);
    assert_eq!(s.ledger("big").await.unwrap().len(), 1);
}

async fn ledger_is_append_only(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w").await.unwrap();
    let entry = s
        .add_credit("e1", "w", usd("3.5"), Some("seed"))
        .await
        .unwrap();

    let refused = [
        "UPDATE ledger_entries SET amount_pico = 1",
        "UPDATE ledger_entries SET note = 'edited' WHERE id = 'e1'",
        "DELETE FROM ledger_entries",
        "DELETE FROM ledger_entries WHERE id = 'e1'",
    ];
    for sql in refused {
        match b.execute_raw(sql).await {
            Err(e) => assert!(e.to_string().contains("append-only"), "{sql}: {e}"),
            Ok(n) => panic!("{sql} was accepted ({n} rows)"),
        }
    }
    if b.is_pg() {
        assert!(b.execute_raw("TRUNCATE ledger_entries").await.is_err());
        // Statement-level: refused even when no row matches.
        assert!(b
            .execute_raw("DELETE FROM ledger_entries WHERE id = 'nothing'")
            .await
            .is_err());
    }
    // Inserting is still allowed, and the balance helper is untouched by the refusals.
    assert_eq!(s.ledger("w").await.unwrap(), vec![entry]);
    assert_eq!(s.balance("w").await.unwrap(), usd("3.5"));
    s.add_credit("e2", "w", usd("1"), None).await.unwrap();
    assert_eq!(s.ledger("w").await.unwrap().len(), 2);
}

async fn catalog_import(b: Arc<Backend>) {
    let s = b.ready().await;
    assert!(s.catalog_is_empty().await.unwrap());
    assert_eq!(s.load_catalog().await.unwrap(), CatalogRows::default());

    let mut rich = model("b-rich", "0.025");
    rich.kind = "embedding".to_owned();
    rich.profile = "openai-compatible".to_owned();
    rich.cache_read_price = Some(price("0.000001"));
    rich.cache_write_price = Some(price("3.75"));
    rich.capabilities = vec!["tools".to_owned(), "vision".to_owned(), "a,b".to_owned()];
    rich.max_output_tokens = Some(u32::MAX);
    rich.active = false;
    let mut r_full = route("b-rich", "azure", -3);
    r_full.base_url = Some("https://example.invalid/v1".to_owned());
    r_full.region = Some("eu-west".to_owned());
    r_full.active = false;
    let prof = |name: &str, spec: serde_json::Value| ProfileRow {
        name: name.to_owned(),
        spec,
    };
    let first = CatalogRows {
        profiles: vec![prof(
            "p1",
            serde_json::json!({"forward": ["temperature"], "thinking": {"kind": "budget", "min": 1, "max": 9}}),
        )],
        models: vec![rich.clone(), model("a-plain", "1.5")],
        // Deliberately not grouped: load returns them by model, in import order within one.
        routes: vec![
            route("b-rich", "direct", 5),
            route("a-plain", "direct", 0),
            r_full.clone(),
        ],
    };
    s.import_catalog(&first).await.unwrap();
    assert!(!s.catalog_is_empty().await.unwrap());
    assert_eq!(
        s.load_catalog().await.unwrap(),
        CatalogRows {
            profiles: first.profiles.clone(),
            models: vec![model("a-plain", "1.5"), rich.clone()],
            routes: vec![
                route("a-plain", "direct", 0),
                route("b-rich", "direct", 5),
                r_full.clone(),
            ],
        }
    );

    // Second import: a-plain is updated and its routes replaced; b-rich is named only by a
    // route, so its routes are replaced too; c-new is added with no routes.
    let second = CatalogRows {
        profiles: vec![
            prof("p1", serde_json::json!({"forward": []})),
            prof("p0", serde_json::json!({})),
        ],
        models: vec![model("a-plain", "2"), model("c-new", "0.1")],
        routes: vec![route("b-rich", "bedrock", 1), route("a-plain", "vertex", 2)],
    };
    s.import_catalog(&second).await.unwrap();
    let expected = CatalogRows {
        profiles: vec![
            prof("p0", serde_json::json!({})),
            prof("p1", serde_json::json!({"forward": []})),
        ],
        models: vec![model("a-plain", "2"), rich.clone(), model("c-new", "0.1")],
        routes: vec![route("a-plain", "vertex", 2), route("b-rich", "bedrock", 1)],
    };
    assert_eq!(s.load_catalog().await.unwrap(), expected);

    // A model named with no routes loses its routes.
    s.import_catalog(&CatalogRows {
        profiles: vec![],
        models: vec![model("a-plain", "2")],
        routes: vec![],
    })
    .await
    .unwrap();
    let mut expected = expected;
    expected.routes.retain(|r| r.model_id != "a-plain");
    assert_eq!(s.load_catalog().await.unwrap(), expected);

    // A route naming an unknown model fails the whole import: nothing changes.
    let bad = CatalogRows {
        profiles: vec![],
        models: vec![model("a-plain", "99")],
        routes: vec![route("b-rich", "x", 0), route("ghost", "direct", 0)],
    };
    match s.import_catalog(&bad).await {
        Err(StoreError::NotFound(what)) => assert!(what.contains("ghost"), "{what}"),
        other => panic!("route of an unknown model: {other:?}"),
    }
    assert_eq!(s.load_catalog().await.unwrap(), expected);

    // The schema refuses an unknown model kind.
    let mut odd = model("odd", "1");
    odd.kind = "audio".to_owned();
    assert!(s
        .import_catalog(&CatalogRows {
            profiles: vec![],
            models: vec![odd],
            routes: vec![]
        })
        .await
        .is_err());
    assert_eq!(s.load_catalog().await.unwrap(), expected);
}

async fn change_feed(b: Arc<Backend>) {
    let s = b.ready().await;
    let start = s.latest_change().await.unwrap();
    assert!(s.changes_since(start).await.unwrap().is_empty());

    s.create_workspace("w", "w").await.unwrap();
    let before_key = s.latest_change().await.unwrap();
    assert!(before_key > start);
    s.create_key(new_key("k-feed", "w", "h")).await.unwrap();
    assert!(s.revoke_key("k-feed", Utc::now()).await.unwrap());

    let changes = s.changes_since(before_key).await.unwrap();
    let key_changes: Vec<_> = changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Key && c.ref_id == "k-feed")
        .collect();
    assert!(key_changes.len() >= 2, "create and revoke: {changes:?}");
    assert!(changes.iter().all(|c| c.seq > before_key));
    assert!(
        changes.windows(2).all(|w| w[0].seq < w[1].seq),
        "oldest first"
    );
    assert_eq!(
        s.latest_change().await.unwrap(),
        changes.last().unwrap().seq
    );

    let before = s.latest_change().await.unwrap();
    s.add_credit("e", "w", usd("1"), None).await.unwrap();
    s.import_catalog(&CatalogRows {
        profiles: vec![],
        models: vec![model("m", "1")],
        routes: vec![route("m", "direct", 0)],
    })
    .await
    .unwrap();
    let later = s.changes_since(before).await.unwrap();
    let kinds: Vec<_> = later.iter().map(|c| (c.kind, c.ref_id.as_str())).collect();
    assert!(kinds.contains(&(ChangeKind::Balance, "w")), "{kinds:?}");
    assert!(kinds.contains(&(ChangeKind::Catalog, "m")), "{kinds:?}");
    assert!(
        !kinds.iter().any(|(k, _)| *k == ChangeKind::Key),
        "{kinds:?}"
    );

    let all = s.changes_since(start).await.unwrap();
    assert!(all.contains(&tollgate::store::Change {
        seq: all[0].seq,
        kind: ChangeKind::Workspace,
        ref_id: "w".to_owned(),
    }));
    // Nothing newer than the newest.
    assert!(s
        .changes_since(s.latest_change().await.unwrap())
        .await
        .unwrap()
        .is_empty());
}

async fn wait_for_change_wakes_on_another_instance(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w").await.unwrap();
    // Another replica on the same database makes the change.
    let other = b.another().await;
    let seen = s.latest_change().await.unwrap();
    // Consume any wake-up left over from our own writes.
    s.wait_for_change(Duration::from_millis(50)).await;

    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        other
            .create_key(new_key("remote", "w", "h-remote"))
            .await
            .unwrap();
        other
    });
    let max = Duration::from_secs(5);
    let started = Instant::now();
    loop {
        s.wait_for_change(max).await;
        let changes = s.changes_since(seen).await.unwrap();
        if changes
            .iter()
            .any(|c| c.kind == ChangeKind::Key && c.ref_id == "remote")
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "no wake-up for the other instance's change after {:?}",
            started.elapsed()
        );
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(2), "woke after {elapsed:?}");
    drop(writer.await.unwrap());

    // Without any change, it waits (about) `max` — here a short one.
    if b.is_pg() {
        // Drain notifications from other suites sharing the database's channel, best effort.
        s.wait_for_change(Duration::from_millis(20)).await;
    }
    let quiet = Instant::now();
    s.wait_for_change(Duration::from_millis(100)).await;
    assert!(quiet.elapsed() <= Duration::from_secs(1));
}

// ---------------------------------------------------------------------------------------------
// Backend-specific
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn open_by_url() {
    let s = tollgate::store::open("sqlite://:memory:").await.unwrap();
    assert_eq!(s.migrate().await.unwrap(), migrations::SQLITE.len());
    assert_eq!(s.migrate().await.unwrap(), 0);
    s.create_workspace("w", "w").await.unwrap();
    assert_eq!(s.list_workspaces().await.unwrap().len(), 1);
    assert!(matches!(
        tollgate::store::open("mysql://localhost/db").await,
        Err(StoreError::BadUrl(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_store_closes_its_connections_when_dropped() {
    run_pg(|b: Arc<Backend>| async move {
        // An instance with its own application_name, so its connections can be counted.
        let name = format!("tollgate_drop_{:016x}", rand::random::<u64>());
        let url = format!("{}&application_name={name}", b.target);
        let (admin, conn) = tokio_postgres::connect(&b.target, NoTls).await.unwrap();
        tokio::spawn(conn);
        let live = |name: String| {
            let admin = &admin;
            async move {
                admin
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                        &[&name],
                    )
                    .await
                    .unwrap()
                    .get::<_, i64>(0)
            }
        };
        let store = PgStore::connect(&url).await.unwrap();
        // The pool's checked connection plus the LISTEN connection.
        assert!(live(name.clone()).await >= 2);
        drop(store);
        let started = Instant::now();
        loop {
            let n = live(name.clone()).await;
            if n == 0 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{n} connections still open after the PgStore was dropped"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}
