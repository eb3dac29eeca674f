//! The one store suite: every case is written once and runs against both backends —
//! `sqlite::<case>` on a temporary database file, `pg::<case>` in a fresh PostgreSQL schema
//! (at `TOLLGATE_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`), so the two
//! cannot drift apart. An unreachable PostgreSQL fails the `pg::` cases unless
//! `TOLLGATE_SKIP_PG=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use tokio_postgres::NoTls;
use tollgate::api::usage::Usage;
use tollgate::billing::cost::cost;
use tollgate::billing::window::window_start;
use tollgate::catalog::Rates;
use tollgate::commands;
use tollgate::kept::ResponseKeeper;
use tollgate::money::{Price, Usd};
use tollgate::store::migrations;
use tollgate::store::postgres::PgStore;
use tollgate::store::sqlite::SqliteStore;
use tollgate::store::{
    AlertSettings, AuditEntry, CatalogRows, ChangeKind, ConsoleSession, CreditMovement, Cursor,
    Delivery, Done, IdempotencyKey, KeyUpdate, LedgerEntry, LedgerKind, LimitReset, ManagementKey,
    ModelRow, NewKey, Once, ProfileRow, RouteRow, StatusClass, Store, StoreError, StoreResult,
    StoredResponse, UsageEndpoint, UsageFilter, UsageOutcome, UsageRecord, Workspace,
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
                    crate::store::run_sqlite(super::$case).await;
                }
            )*
        }
        mod pg {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::store::run_pg(super::$case).await;
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
    pruning_keeps_recent_changes,
    wait_for_change_wakes_on_another_instance,
    usage_is_recorded_exactly,
    replaying_usage_applies_nothing_twice,
    usage_records_are_immutable,
    invalid_usage_fails_the_whole_batch,
    ledger_verify_agrees,
    usage_batch_commit_time,
    concurrent_writers_apply_each_id_once,
    a_large_batch_of_two_months_round_trips_exactly,
    overlapping_large_replays_on_two_replicas_count_once,
    a_refused_record_fails_a_large_batch_and_parents_stay,
    usage_pages_filter_and_break_ties_by_id,
    daily_rollup_is_exact_and_replays_add_nothing,
    audit_log_pages_and_refuses_changes,
    alerts_claims_and_deliveries,
    rename_and_expiry,
    rotation_with_a_huge_grace_changes_nothing,
    concurrent_rotations_make_one_replacement,
    rotation_is_one_transaction_with_its_audit_entry,
    a_change_whose_audit_entry_fails_leaves_neither,
    console_sessions_end_idle_or_expired_and_are_capped,
    a_balance_overflow_is_refused_and_typed,
    responses_are_kept_per_workspace_until_they_expire,
    replaying_responses_stores_each_id_once,
    a_refused_response_fails_its_whole_batch,
    responses_are_deleted_by_their_owner_and_purged_when_expired,
    a_keeper_serves_its_responses_before_and_after_they_are_written,
    refunds_take_back_credit_not_spent,
    a_key_moves_credit_once_per_workspace_and_operation,
    concurrent_duplicates_move_credit_once,
    waived_records_cost_nothing_and_the_books_balance,
    allowlists_round_trip_and_an_update_is_a_key_change,
    management_keys_are_stored_hashed_listed_and_revoked,
    partitions_are_made_ahead_and_split_at_the_month_boundary,
    archive_drop_verify_restore_round_trip_is_exact,
    archiving_the_current_month_is_refused,
    an_archive_that_cannot_be_written_changes_nothing,
    a_record_is_found_by_id_within_its_time_range,
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
        allowed_models: Vec::new(),
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
        cache_write_1h_price: None,
        audio_input_price: None,
        cache_storage_price: None,
        long_context: None,
        capabilities: Vec::new(),
        aliases: vec![format!("{id}-alias")],
        max_output_tokens: None,
        context_window: Some(1_048_576),
        active: true,
        shutdown: chrono::NaiveDate::from_ymd_opt(2027, 5, 7),
        source: Some(format!(
            "https://example.com/pricing/{id} (checked 2026-11-26)"
        )),
    }
}

fn no_aliases(m: ModelRow) -> ModelRow {
    ModelRow {
        aliases: Vec::new(),
        ..m
    }
}

fn route(model_id: &str, kind: &str, priority: i32) -> RouteRow {
    RouteRow {
        model_id: model_id.to_owned(),
        kind: kind.to_owned(),
        base_url: None,
        region: None,
        upstream_model: (priority > 0).then(|| format!("{model_id}@20251001")),
        priority,
        weight: 1,
        active: true,
        api: "chat".to_owned(),
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
    let a = s.create_workspace("ws-a", "Acme", None).await.unwrap();
    assert_eq!((a.id.as_str(), a.name.as_str()), ("ws-a", "Acme"));
    assert_eq!(
        a.created_at.timestamp_subsec_nanos() % 1_000,
        0,
        "microsecond precision"
    );
    let z = s.create_workspace("ws-z", "Zeta", None).await.unwrap();
    assert_eq!(
        s.list_workspaces().await.unwrap(),
        vec![a.clone(), z.clone()]
    );
    assert_eq!(s.get_workspace("ws-a").await.unwrap(), Some(a));
    assert_eq!(s.get_workspace("ws-z").await.unwrap(), Some(z));
    assert_eq!(s.get_workspace("nope").await.unwrap(), None);
    assert!(matches!(
        s.create_workspace("ws-a", "again", None).await,
        Err(StoreError::Conflict(_))
    ));
}

async fn keys(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w1", "one", None).await.unwrap();
    s.create_workspace("w2", "two", None).await.unwrap();

    let k1 = s.create_key(new_key("k1", "w1", "h1"), None).await.unwrap();
    let k2 = s.create_key(new_key("k2", "w1", "h2"), None).await.unwrap();
    let k3 = s.create_key(new_key("k3", "w2", "h3"), None).await.unwrap();
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
    match s.create_key(new_key("k4", "w2", "h1"), None).await {
        Err(StoreError::Conflict(msg)) => assert!(msg.contains("hash"), "{msg}"),
        other => panic!("duplicate hash: {other:?}"),
    }
    match s.create_key(new_key("k1", "w2", "h-new"), None).await {
        Err(StoreError::Conflict(msg)) => assert!(msg.contains("k1"), "{msg}"),
        other => panic!("duplicate id: {other:?}"),
    }
    assert_eq!(s.get_key("k4").await.unwrap(), None);

    match s.create_key(new_key("k5", "ghost", "h5"), None).await {
        Err(StoreError::NotFound(what)) => assert_eq!(what, "workspace ghost"),
        other => panic!("missing workspace: {other:?}"),
    }
    assert_eq!(s.get_key("k5").await.unwrap(), None);
    assert_eq!(s.all_keys().await.unwrap().len(), 3);
}

async fn key_fields_round_trip_exactly(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w", None).await.unwrap();
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
        let created = s.create_key(k, None).await.unwrap();
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
    let created = s.create_key(k, None).await.unwrap();
    assert_eq!(created.expires_at, Some(at(1_700_000_000, 123_456_000)));
    assert_eq!(s.get_key("nanos").await.unwrap(), Some(created));
    // All optional fields empty.
    let created = s
        .create_key(new_key("bare", "w", "hb"), None)
        .await
        .unwrap();
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
    s.create_workspace("w", "w", None).await.unwrap();
    s.create_key(new_key("k", "w", "h"), None).await.unwrap();
    let when = at(1_750_000_000, 250_000_000);
    assert!(s.revoke_key("k", when, None).await.unwrap());
    assert!(!s.revoke_key("k", at(1_760_000_000, 0), None).await.unwrap());
    // The first revocation time stands.
    assert_eq!(
        s.get_key("k").await.unwrap().unwrap().revoked_at,
        Some(when)
    );
    match s.revoke_key("unknown", when, None).await {
        Err(StoreError::NotFound(what)) => assert!(what.contains("unknown"), "{what}"),
        other => panic!("revoking an unknown key: {other:?}"),
    }
    // Revoked keys stay in all_keys (the gateway's cache needs them).
    assert_eq!(s.all_keys().await.unwrap().len(), 1);
}

async fn credits_are_exact_and_atomic(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w", None).await.unwrap();
    s.create_workspace("empty", "no entries", None)
        .await
        .unwrap();
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
        let (e, balance) = s
            .add_credit(&format!("e{i}"), "w", usd(a), note.as_deref(), None)
            .await
            .unwrap();
        assert_eq!(
            balance,
            s.balance("w").await.unwrap(),
            "the balance it left"
        );
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
        match s.add_credit("bad", "w", usd(bad), None, None).await {
            Err(StoreError::Conflict(msg)) => assert!(msg.contains("positive"), "{msg}"),
            other => panic!("credit of {bad}: {other:?}"),
        }
    }
    match s.add_credit("e-ghost", "ghost", usd("1"), None, None).await {
        Err(StoreError::NotFound(what)) => assert_eq!(what, "workspace ghost"),
        other => panic!("credit to a missing workspace: {other:?}"),
    }
    assert!(matches!(
        s.add_credit("e0", "w", usd("7"), None, None).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(s.balance("w").await.unwrap(), usd("1000013.145678901235"));
    assert_eq!(s.ledger("w").await.unwrap().len(), amounts.len());
    assert_eq!(s.balance("ghost").await.unwrap(), Usd::ZERO);

    // A balance that would overflow i64 pico-dollars is refused, with the entry rolled back.
    s.create_workspace("big", "big", None).await.unwrap();
    let max = Usd::from_pico(i64::MAX);
    s.add_credit("max", "big", max, None, None).await.unwrap();
    assert!(s
        .add_credit("one-more", "big", Usd::from_pico(1), None, None)
        .await
        .is_err());
    assert_eq!(s.balance("big").await.unwrap(), max);
    assert_eq!(s.ledger("big").await.unwrap().len(), 1);
}

async fn ledger_is_append_only(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w", None).await.unwrap();
    let entry = s
        .add_credit("e1", "w", usd("3.5"), Some("seed"), None)
        .await
        .unwrap()
        .0;

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
    s.add_credit("e2", "w", usd("1"), None, None).await.unwrap();
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
    rich.aliases = vec![
        "b-rich-20251001".to_owned(),
        "rich@2025".to_owned(),
        "ünïcode/\"quoted\",[x]".to_owned(),
    ];
    rich.max_output_tokens = Some(u32::MAX);
    rich.active = false;
    let mut r_full = route("b-rich", "azure", -3);
    r_full.base_url = Some("https://example.invalid/v1".to_owned());
    r_full.region = Some("eu-west".to_owned());
    r_full.active = false;
    r_full.weight = 7;
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
    s.import_catalog(&first, None).await.unwrap();
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
        models: vec![model("a-plain", "2"), no_aliases(model("c-new", "0.1"))],
        routes: vec![route("b-rich", "bedrock", 1), route("a-plain", "vertex", 2)],
    };
    s.import_catalog(&second, None).await.unwrap();
    let expected = CatalogRows {
        profiles: vec![
            prof("p0", serde_json::json!({})),
            prof("p1", serde_json::json!({"forward": []})),
        ],
        models: vec![
            model("a-plain", "2"),
            rich.clone(),
            no_aliases(model("c-new", "0.1")),
        ],
        routes: vec![route("a-plain", "vertex", 2), route("b-rich", "bedrock", 1)],
    };
    assert_eq!(s.load_catalog().await.unwrap(), expected);

    // A model named with no routes loses its routes.
    s.import_catalog(
        &CatalogRows {
            profiles: vec![],
            models: vec![model("a-plain", "2")],
            routes: vec![],
        },
        None,
    )
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
    match s.import_catalog(&bad, None).await {
        Err(StoreError::NotFound(what)) => assert!(what.contains("ghost"), "{what}"),
        other => panic!("route of an unknown model: {other:?}"),
    }
    assert_eq!(s.load_catalog().await.unwrap(), expected);

    // The schema refuses an unknown model kind.
    let mut odd = model("odd", "1");
    odd.kind = "audio".to_owned();
    assert!(s
        .import_catalog(
            &CatalogRows {
                profiles: vec![],
                models: vec![odd],
                routes: vec![]
            },
            None
        )
        .await
        .is_err());
    assert_eq!(s.load_catalog().await.unwrap(), expected);
}

async fn pruning_keeps_recent_changes(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w-prune", "w", None).await.unwrap();
    let latest = s.latest_change().await.unwrap();
    assert_eq!(
        s.prune_changes(Utc::now() - chrono::Duration::minutes(10))
            .await
            .unwrap(),
        0,
        "recent rows stay"
    );
    assert!(!s.changes_since(0).await.unwrap().is_empty());
    let pruned = s
        .prune_changes(Utc::now() + chrono::Duration::seconds(1))
        .await
        .unwrap();
    assert!(pruned > 0, "older rows go");
    assert!(s.changes_since(0).await.unwrap().is_empty());
    s.create_workspace("w-prune-2", "w", None).await.unwrap();
    assert!(
        s.latest_change().await.unwrap() > latest,
        "seqs are never reused after pruning"
    );
}

async fn change_feed(b: Arc<Backend>) {
    let s = b.ready().await;
    let start = s.latest_change().await.unwrap();
    assert!(s.changes_since(start).await.unwrap().is_empty());

    s.create_workspace("w", "w", None).await.unwrap();
    let before_key = s.latest_change().await.unwrap();
    assert!(before_key > start);
    s.create_key(new_key("k-feed", "w", "h"), None)
        .await
        .unwrap();
    assert!(s.revoke_key("k-feed", Utc::now(), None).await.unwrap());

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
    s.add_credit("e", "w", usd("1"), None, None).await.unwrap();
    s.import_catalog(
        &CatalogRows {
            profiles: vec![],
            models: vec![model("m", "1")],
            routes: vec![route("m", "direct", 0)],
        },
        None,
    )
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
    s.create_workspace("w", "w", None).await.unwrap();
    // Another replica on the same database makes the change.
    let other = b.another().await;
    let seen = s.latest_change().await.unwrap();
    // Consume any wake-up left over from our own writes.
    s.wait_for_change(Duration::from_millis(50)).await;

    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        other
            .create_key(new_key("remote", "w", "h-remote"), None)
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
// Billing: usage records, ledger debits, balances, key spend
// ---------------------------------------------------------------------------------------------

/// Anthropic-shaped prices with odd micro digits, so costs have odd pico values:
/// 3.000001 in, 15.000003 out, 0.300007 cache read, 3.750001 cache write.
fn odd_pricing() -> Rates {
    Rates {
        input: price("3.000001"),
        output: price("15.000003"),
        cache_read: Some(price("0.300007")),
        cache_write: Some(price("3.750001")),
        ..Rates::default()
    }
}

fn tokens(input: u64, cache_read: u64, cache_write: u64, output: u64, reasoning: u64) -> Usage {
    Usage {
        input,
        cache_read,
        cache_write,
        output,
        reasoning,
        ..Usage::default()
    }
}

/// A usage record priced with `billing::cost`, finished at `finished`.
fn record(
    id: &str,
    (workspace, key): (&str, &str),
    pricing: Rates,
    u: Usage,
    finished: DateTime<Utc>,
    window: Option<DateTime<Utc>>,
) -> UsageRecord {
    UsageRecord {
        id: id.to_owned(),
        workspace_id: workspace.to_owned(),
        key_id: key.to_owned(),
        model_id: "claude-sonnet".to_owned(),
        route: "anthropic".to_owned(),
        endpoint: UsageEndpoint::Chat,
        stream: true,
        input_tokens: u.input,
        cache_read_tokens: u.cache_read,
        cache_write_tokens: u.cache_write,
        output_tokens: u.output,
        reasoning_tokens: u.reasoning,
        input_price: pricing.input,
        output_price: pricing.output,
        cache_read_price: pricing.cache_read,
        cache_write_price: pricing.cache_write,
        cost: cost(&u, &pricing).unwrap(),
        outcome: UsageOutcome::Complete,
        started_at: finished - chrono::Duration::microseconds(1_234_567),
        finished_at: finished,
        upstream_latency_us: Some(210_001),
        ttft_us: Some(350_003),
        spend_window_start: window,
        usage_source: Default::default(),
        attempts: 2,
        request_id: Some(format!("trace-{id}")),
        review: None,
        client_addr: None,
        upstream_request_id: None,
        waived: false,
        extra: Default::default(),
    }
}

fn limited_key(id: &str, workspace: &str, reset: LimitReset) -> NewKey {
    let mut k = new_key(id, workspace, &format!("hash-{id}"));
    k.spend_limit = Some(usd("5"));
    k.limit_reset = Some(reset);
    k
}

fn pico(n: i64) -> Usd {
    Usd::from_pico(n)
}

fn sum(costs: impl IntoIterator<Item = Usd>) -> Usd {
    costs
        .into_iter()
        .fold(Usd::ZERO, |a, c| a.checked_add(c).unwrap())
}

/// Workspaces w1 (keys k1: daily limit, k2: no limit) and w2 (key k3: weekly limit).
async fn billing_fixture(s: &dyn Store) {
    s.create_workspace("w1", "one", None).await.unwrap();
    s.create_workspace("w2", "two", None).await.unwrap();
    s.create_key(limited_key("k1", "w1", LimitReset::Daily), None)
        .await
        .unwrap();
    s.create_key(new_key("k2", "w1", "hash-k2"), None)
        .await
        .unwrap();
    s.create_key(limited_key("k3", "w2", LimitReset::Weekly), None)
        .await
        .unwrap();
}

async fn usage_is_recorded_exactly(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    s.add_credit("top-up", "w1", usd("10"), None, None)
        .await
        .unwrap();

    let day = at(1_767_225_600, 0); // 2026-01-01T00:00:00Z, a Thursday
    let t1 = day + chrono::Duration::microseconds(3_600_000_001);
    let t2 = t1 + chrono::Duration::seconds(7);
    let t3 = t2 + chrono::Duration::seconds(7);
    let before_day = day - chrono::Duration::microseconds(1);
    let daily = |t| Some(window_start(LimitReset::Daily, t));
    let weekly = |t| Some(window_start(LimitReset::Weekly, t));

    // 3 uncached + 3211 read + 115 written, 53 out (7 reasoning):
    // 3 × 3,000,001 + 3211 × 300,007 + 115 × 3,750,001 + 53 × 15,000,003 pico.
    let a = record(
        "chatcmpl-a",
        ("w1", "k1"),
        odd_pricing(),
        tokens(3, 3_211, 115, 53, 7),
        t1,
        daily(t1),
    );
    assert_eq!(a.cost, pico(2_198_572_754));
    // A request through the Messages door.
    let mut b_ = record(
        "chatcmpl-b",
        ("w1", "k1"),
        odd_pricing(),
        tokens(1, 0, 0, 1, 0),
        t2,
        daily(t2),
    );
    b_.endpoint = UsageEndpoint::Messages;
    assert_eq!(b_.cost, pico(3_000_001 + 15_000_003));
    // The previous day's window of the same key.
    let c = record(
        "chatcmpl-c",
        ("w1", "k1"),
        odd_pricing(),
        tokens(0, 0, 0, 0, 0),
        before_day,
        daily(before_day),
    );
    assert_eq!(c.cost, Usd::ZERO);
    // No limit on k2: no window; an embeddings record with no cache prices.
    let mut d = record(
        "emb-d",
        ("w1", "k2"),
        Rates::flat(price("0.025"), price("0")),
        tokens(1_001, 0, 0, 0, 0),
        t3,
        None,
    );
    d.endpoint = UsageEndpoint::Embeddings;
    d.stream = false;
    d.ttft_us = None;
    d.upstream_latency_us = None;
    // A record flagged for an operator's review (a usage that could not be priced).
    d.review = Some("unpriceable usage: billed the request's reserved worst case".into());
    assert_eq!(d.cost, pico(25_025_000));
    // Workspace w2 has no credit at all: its balance goes negative (overdraft is bounded
    // by the gate, not the store).
    let mut e = record(
        "chatcmpl-e",
        ("w2", "k3"),
        odd_pricing(),
        tokens(999_999, 1, 1, 77_777, 77_000),
        t2,
        weekly(t2),
    );
    e.outcome = UsageOutcome::ClientDisconnected;
    assert_eq!(
        e.cost,
        pico(999_999 * 3_000_001 + 300_007 + 3_750_001 + 77_777 * 15_000_003)
    );

    let before = s.latest_change().await.unwrap();
    // Given out of order: the store sorts.
    let batch = vec![e.clone(), d.clone(), a.clone(), c.clone(), b_.clone()];
    assert_eq!(s.record_usage(&batch).await.unwrap(), 5);

    let w1_costs = sum([a.cost, b_.cost, c.cost, d.cost]);
    assert_eq!(
        s.balance("w1").await.unwrap(),
        usd("10").checked_sub(w1_costs).unwrap()
    );
    // 10 USD − (2,198,572,754 + 18,000,004 + 0 + 25,025,000) pico.
    assert_eq!(s.balance("w1").await.unwrap(), usd("9.997758402242"));
    assert_eq!(
        s.balance("w2").await.unwrap(),
        Usd::ZERO.checked_sub(e.cost).unwrap()
    );
    assert!(s.balance("w2").await.unwrap() < Usd::ZERO);
    assert_eq!(
        s.balances().await.unwrap(),
        vec![
            ("w1".to_owned(), usd("9.997758402242")),
            ("w2".to_owned(), Usd::ZERO.checked_sub(e.cost).unwrap()),
        ]
    );

    // Window spend: exact, per (key, window start); zero where nothing was spent.
    let spends = s
        .key_spends(&[
            ("k1".to_owned(), day),
            ("k1".to_owned(), window_start(LimitReset::Daily, before_day)),
            ("k3".to_owned(), window_start(LimitReset::Weekly, t2)),
            ("k2".to_owned(), day),
            ("k3".to_owned(), day),
            ("ghost".to_owned(), day),
        ])
        .await
        .unwrap();
    assert_eq!(
        spends,
        vec![
            ("k1".to_owned(), pico(2_198_572_754 + 18_000_004)),
            ("k1".to_owned(), Usd::ZERO),
            ("k3".to_owned(), e.cost),
            ("k2".to_owned(), Usd::ZERO),
            ("k3".to_owned(), Usd::ZERO),
            ("ghost".to_owned(), Usd::ZERO),
        ]
    );
    assert!(s.key_spends(&[]).await.unwrap().is_empty());

    // One debit per record: −cost, linked to it, dated when the request finished.
    let ledger = s.ledger("w1").await.unwrap();
    assert_eq!(ledger.len(), 5);
    assert_eq!(
        ledger
            .iter()
            .filter(|l| l.kind == LedgerKind::Credit)
            .count(),
        1
    );
    for r in [&a, &b_, &c, &d] {
        let debit = ledger
            .iter()
            .find(|l| l.usage_id.as_deref() == Some(r.id.as_str()))
            .unwrap_or_else(|| panic!("no debit for {}", r.id));
        assert_eq!(debit.kind, LedgerKind::Debit);
        assert_eq!(debit.amount, Usd::ZERO.checked_sub(r.cost).unwrap());
        assert_eq!(debit.note, None);
        assert_eq!(debit.created_at, r.finished_at);
        assert_eq!(debit.workspace_id, "w1");
    }
    assert!(ledger
        .iter()
        .all(|l| (l.kind == LedgerKind::Debit) == l.usage_id.is_some()));

    // Records read back exactly, oldest (finished) first.
    assert_eq!(
        s.usage("w1", None).await.unwrap(),
        vec![c.clone(), a.clone(), b_.clone(), d.clone()]
    );
    assert_eq!(
        s.usage("w1", Some(t2)).await.unwrap(),
        vec![b_.clone(), d.clone()]
    );
    assert_eq!(s.usage("w2", None).await.unwrap(), vec![e.clone()]);
    assert!(s.usage("nobody", None).await.unwrap().is_empty());
    // One record by id, only in its own workspace.
    assert_eq!(s.usage_record("w1", &a.id).await.unwrap(), Some(a.clone()));
    assert_eq!(s.usage_record("w2", &a.id).await.unwrap(), None);
    assert_eq!(s.usage_record("w1", "chatcmpl-none").await.unwrap(), None);
    // Serde round trip of a record: amounts as exact decimal strings, prices as numbers.
    let json = serde_json::to_string(&a).unwrap();
    assert!(json.contains(r#""cost":"0.002198572754""#), "{json}");
    assert!(json.contains(r#""input_price":3.000001"#), "{json}");
    assert_eq!(serde_json::from_str::<UsageRecord>(&json).unwrap(), a);
    let json = serde_json::to_value(&b_).unwrap();
    assert_eq!(json["endpoint"], "messages");
    assert_eq!(serde_json::from_value::<UsageRecord>(json).unwrap(), b_);

    // The change feed: a Spend change per key written, a Balance change per workspace.
    let changes = s.changes_since(before).await.unwrap();
    let kinds: Vec<_> = changes
        .iter()
        .map(|c| (c.kind, c.ref_id.as_str()))
        .collect();
    for expected in [
        (ChangeKind::Spend, "k1"),
        (ChangeKind::Spend, "k2"),
        (ChangeKind::Spend, "k3"),
        (ChangeKind::Balance, "w1"),
        (ChangeKind::Balance, "w2"),
    ] {
        assert!(
            kinds.contains(&expected),
            "{expected:?} missing from {kinds:?}"
        );
    }
    // One Spend change per key per batch (PostgreSQL's statement trigger, SQLite's writer).
    let k1 = changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Spend && c.ref_id == "k1")
        .count();
    assert_eq!(k1, 1, "{changes:?}");
}

async fn replaying_usage_applies_nothing_twice(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    s.add_credit("top-up", "w1", usd("1"), None, None)
        .await
        .unwrap();
    let t0 = at(1_767_225_600, 0);
    let mk = |i: i64, key: &str| {
        let t = t0 + chrono::Duration::seconds(i);
        let window = (key != "k2").then(|| window_start(LimitReset::Daily, t));
        record(
            &format!("r{i:03}"),
            ("w1", key),
            odd_pricing(),
            tokens(100 + i as u64, 7 * i as u64, 3, 11 + i as u64, 0),
            t,
            window,
        )
    };
    let first: Vec<_> = (0..10)
        .map(|i| mk(i, if i % 3 == 0 { "k2" } else { "k1" }))
        .collect();
    assert_eq!(s.record_usage(&first).await.unwrap(), 10);

    let snapshot = || async {
        (
            s.balances().await.unwrap(),
            s.ledger("w1").await.unwrap(),
            s.usage("w1", None).await.unwrap(),
            s.key_spends(&[("k1".to_owned(), t0)]).await.unwrap(),
            s.latest_change().await.unwrap(),
        )
    };
    let after_first = snapshot().await;
    let first_cost = sum(first.iter().map(|r| r.cost));
    assert_eq!(
        after_first.0,
        vec![("w1".to_owned(), usd("1").checked_sub(first_cost).unwrap())]
    );

    // The same batch again (a spool replay after a crash): nothing applied, nothing changed —
    // not even a change-feed row.
    assert_eq!(s.record_usage(&first).await.unwrap(), 0);
    assert_eq!(snapshot().await, after_first);
    // Replaying a part of it, reversed.
    let mut part: Vec<_> = first[3..7].to_vec();
    part.reverse();
    assert_eq!(s.record_usage(&part).await.unwrap(), 0);
    assert_eq!(snapshot().await, after_first);
    assert_eq!(s.record_usage(&[]).await.unwrap(), 0);

    // A batch mixing old and new ids applies only the new ones. A repeated id within the
    // batch counts once: the first occurrence wins.
    let new_a = mk(10, "k1");
    let new_b = mk(11, "k2");
    let mut new_a_again = mk(10, "k1");
    new_a_again.input_tokens += 1_000_000;
    new_a_again.cost = cost(
        &tokens(
            new_a_again.input_tokens,
            new_a_again.cache_read_tokens,
            new_a_again.cache_write_tokens,
            new_a_again.output_tokens,
            0,
        ),
        &odd_pricing(),
    )
    .unwrap();
    let mixed = vec![
        first[2].clone(),
        new_a.clone(),
        first[9].clone(),
        new_b.clone(),
        new_a_again,
        first[0].clone(),
    ];
    assert_eq!(s.record_usage(&mixed).await.unwrap(), 2);
    assert_eq!(s.record_usage(&mixed).await.unwrap(), 0);
    let all_cost = sum(first.iter().chain([&new_a, &new_b]).map(|r| r.cost));
    assert_eq!(
        s.balance("w1").await.unwrap(),
        usd("1").checked_sub(all_cost).unwrap()
    );
    let usage = s.usage("w1", None).await.unwrap();
    assert_eq!(usage.len(), 12);
    assert_eq!(usage.iter().find(|r| r.id == "r010"), Some(&new_a));
    let ids: BTreeSet<_> = usage.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids.len(), 12, "each id once");
    let ledger = s.ledger("w1").await.unwrap();
    assert_eq!(ledger.len(), 13, "one credit and one debit per record");
    let k1_cost = sum(first
        .iter()
        .chain([&new_a])
        .filter(|r| r.key_id == "k1")
        .map(|r| r.cost));
    assert_eq!(
        s.key_spends(&[("k1".to_owned(), t0)]).await.unwrap(),
        vec![("k1".to_owned(), k1_cost)]
    );
    let checks = s.ledger_verify().await.unwrap();
    assert!(checks.iter().all(|c| c.is_consistent()), "{checks:?}");
}

async fn usage_records_are_immutable(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let t = at(1_767_225_600, 0);
    let r = record(
        "chatcmpl-x",
        ("w1", "k1"),
        odd_pricing(),
        tokens(10, 20, 30, 40, 5),
        t,
        Some(t),
    );
    assert_eq!(s.record_usage(std::slice::from_ref(&r)).await.unwrap(), 1);

    let refused = [
        "UPDATE usage_records SET cost_pico = 0",
        "UPDATE usage_records SET outcome = 'upstream_failed' WHERE id = 'chatcmpl-x'",
        "DELETE FROM usage_records",
        "DELETE FROM usage_records WHERE id = 'chatcmpl-x'",
        // The debit is just as fixed.
        "UPDATE ledger_entries SET amount_pico = 0 WHERE usage_id = 'chatcmpl-x'",
        "DELETE FROM ledger_entries WHERE usage_id = 'chatcmpl-x'",
    ];
    for sql in refused {
        match b.execute_raw(sql).await {
            Err(e) => assert!(e.to_string().contains("append-only"), "{sql}: {e}"),
            Ok(n) => panic!("{sql} was accepted ({n} rows)"),
        }
    }
    if b.is_pg() {
        assert!(b
            .execute_raw("TRUNCATE usage_records CASCADE")
            .await
            .is_err());
        assert!(b
            .execute_raw("DELETE FROM usage_records WHERE id = 'nothing'")
            .await
            .is_err());
    }
    // A debit without a usage record or a second debit of the same record is refused. (A
    // debit's record may be gone: archived months keep their debits, so there is no foreign
    // key to the records since 0018.)
    for (sql, why) in [
        (
            "INSERT INTO ledger_entries (id, workspace_id, kind, amount_pico, created_at) \
             VALUES ('manual', 'w1', 'debit', -5, 0)",
            "check",
        ),
        (
            "INSERT INTO ledger_entries (id, workspace_id, kind, amount_pico, created_at, usage_id) \
             VALUES ('again', 'w1', 'debit', -5, 0, 'chatcmpl-x')",
            "unique",
        ),
    ] {
        let sql = if b.is_pg() {
            sql.replace(", 0)", ", now())").replace(", 0, ", ", now(), ")
        } else {
            sql.to_owned()
        };
        match b.execute_raw(&sql).await {
            Err(e) => assert!(e.to_string().to_lowercase().contains(why), "{sql}: {e}"),
            Ok(n) => panic!("{sql} was accepted ({n} rows)"),
        }
    }
    assert_eq!(s.usage("w1", None).await.unwrap(), vec![r.clone()]);
    assert_eq!(
        s.balance("w1").await.unwrap(),
        Usd::ZERO.checked_sub(r.cost).unwrap()
    );
    assert_eq!(s.ledger("w1").await.unwrap().len(), 1);
}

async fn invalid_usage_fails_the_whole_batch(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    s.add_credit("top-up", "w1", usd("2"), None, None)
        .await
        .unwrap();
    let t = at(1_767_225_600, 0);
    let good = record(
        "good",
        ("w1", "k1"),
        odd_pricing(),
        tokens(1, 2, 3, 4, 0),
        t,
        Some(t),
    );
    let state = || async {
        (
            s.balances().await.unwrap(),
            s.usage("w1", None).await.unwrap(),
            s.ledger("w1").await.unwrap().len(),
            s.key_spends(&[("k1".to_owned(), t)]).await.unwrap(),
        )
    };
    let before = state().await;

    // The database refuses a cost that is not exactly tokens × prices.
    let mut wrong_cost = record(
        "wrong",
        ("w1", "k1"),
        odd_pricing(),
        tokens(1, 0, 0, 0, 0),
        t,
        None,
    );
    wrong_cost.cost = wrong_cost.cost.checked_add(pico(1)).unwrap();
    // A cached bucket without its own price must be billed at the input price.
    let mut cheap_cache = record(
        "cheap",
        ("w1", "k1"),
        odd_pricing(),
        tokens(0, 1_000, 0, 0, 0),
        t,
        None,
    );
    cheap_cache.cache_read_price = None;
    // Reasoning is a part of output.
    let mut reasoning = record(
        "think",
        ("w1", "k1"),
        odd_pricing(),
        tokens(1, 0, 0, 2, 0),
        t,
        None,
    );
    reasoning.reasoning_tokens = 3;
    // A key of another workspace.
    let foreign = record(
        "foreign",
        ("w1", "k3"),
        odd_pricing(),
        tokens(1, 0, 0, 0, 0),
        t,
        None,
    );
    // A count no BIGINT holds.
    let mut huge = record(
        "huge",
        ("w1", "k1"),
        odd_pricing(),
        tokens(0, 0, 0, 0, 0),
        t,
        None,
    );
    huge.ttft_us = Some(u64::MAX);

    for (bad, conflict, why) in [
        (wrong_cost, true, "usage_records_cost_exact"),
        (cheap_cache, true, "usage_records_cost_exact"),
        (reasoning, true, "usage_records_reasoning_in_output"),
        (foreign, false, "foreign key"),
        (huge, true, "ttft_us"),
    ] {
        let result = s.record_usage(&[good.clone(), bad.clone()]).await;
        match (&result, conflict) {
            (Err(e @ StoreError::Conflict(_)), true)
            | (Err(e @ StoreError::NotFound(_)), false) => {
                assert!(
                    e.to_string().to_lowercase().contains(why),
                    "{}: {e}",
                    bad.id
                );
            }
            _ => panic!("{}: {result:?}", bad.id),
        }
        assert_eq!(state().await, before, "{}: nothing applied", bad.id);
    }
    // The good record alone goes through.
    assert_eq!(s.record_usage(&[good]).await.unwrap(), 1);
}

async fn ledger_verify_agrees(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    s.create_workspace("idle", "no activity", None)
        .await
        .unwrap();
    let t0 = at(1_767_225_600, 0);
    let mut expected: BTreeMap<&str, (i128, i128)> = BTreeMap::new(); // (credits, costs)
    for round in 0..4i64 {
        let credit = pico(1_000_000_007 * (round + 1));
        s.add_credit(&format!("c{round}"), "w1", credit, Some("top-up"), None)
            .await
            .unwrap();
        expected.entry("w1").or_default().0 += i128::from(credit.pico());
        let batch: Vec<_> = (0..25)
            .map(|i| {
                let n = round * 100 + i;
                let t = t0 + chrono::Duration::hours(n);
                let (ws, key, window) = match n % 3 {
                    0 => ("w1", "k1", Some(window_start(LimitReset::Daily, t))),
                    1 => ("w1", "k2", None),
                    _ => ("w2", "k3", Some(window_start(LimitReset::Weekly, t))),
                };
                record(
                    &format!("v{n}"),
                    (ws, key),
                    odd_pricing(),
                    tokens(n as u64 * 13, n as u64 * 7 % 5, 1, n as u64 % 17, 0),
                    t,
                    window,
                )
            })
            .collect();
        assert_eq!(s.record_usage(&batch).await.unwrap(), 25);
        for r in &batch {
            let ws = if r.workspace_id == "w1" { "w1" } else { "w2" };
            expected.entry(ws).or_default().1 += i128::from(r.cost.pico());
        }
    }
    let checks = s.ledger_verify().await.unwrap();
    assert_eq!(
        checks
            .iter()
            .map(|c| c.workspace_id.as_str())
            .collect::<Vec<_>>(),
        vec!["idle", "w1", "w2"]
    );
    for c in &checks {
        assert!(c.is_consistent(), "{c:?}");
        let (credits, costs) = expected
            .get(c.workspace_id.as_str())
            .copied()
            .unwrap_or_default();
        assert_eq!(i128::from(c.usage_cost_sum.pico()), costs, "{c:?}");
        assert_eq!(i128::from(c.debit_sum.pico()), -costs, "{c:?}");
        assert_eq!(i128::from(c.ledger_sum.pico()), credits - costs, "{c:?}");
        assert_eq!(c.balance_row, s.balance(&c.workspace_id).await.unwrap());
    }

    // Sums at the edge of i64: a credit of i64::MAX, then a debit. The credited total is
    // bounded like the balance, so a refill of the debit's amount (credits summing past i64)
    // is refused whole, and no sum of the ledger leaves i64. Exact on both backends.
    s.create_workspace("big", "big", None).await.unwrap();
    s.create_key(new_key("kb", "big", "hash-kb"), None)
        .await
        .unwrap();
    s.add_credit("max", "big", pico(i64::MAX), None, None)
        .await
        .unwrap();
    let r = record(
        "big-1",
        ("big", "kb"),
        odd_pricing(),
        tokens(5, 0, 0, 9, 0),
        t0,
        None,
    );
    assert_eq!(s.record_usage(std::slice::from_ref(&r)).await.unwrap(), 1);
    assert!(matches!(
        s.add_credit("refill", "big", r.cost, None, None).await,
        Err(StoreError::Overflow(_))
    ));
    let big = s
        .ledger_verify()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.workspace_id == "big")
        .unwrap();
    let left = pico(i64::MAX).checked_sub(r.cost).unwrap();
    assert_eq!(big.balance_row, left);
    assert_eq!(big.ledger_sum, left);
    assert_eq!(big.credited_row, pico(i64::MAX));
    assert_eq!(big.usage_cost_sum, r.cost);
    assert_eq!(big.debit_sum, Usd::ZERO.checked_sub(r.cost).unwrap());
    assert!(big.is_consistent());

    // A tampered balance row (the cache is mutable; the ledger is not) is caught.
    b.execute_raw("UPDATE balances SET balance_pico = balance_pico + 1 WHERE workspace_id = 'w2'")
        .await
        .unwrap();
    let w2 = s
        .ledger_verify()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.workspace_id == "w2")
        .unwrap();
    assert!(!w2.is_consistent());
    assert_eq!(w2.balance_row.pico() - w2.ledger_sum.pico(), 1);
    // And so is a tampered credited total.
    b.execute_raw(
        "UPDATE balances SET credited_pico = credited_pico - 1 WHERE workspace_id = 'w1'",
    )
    .await
    .unwrap();
    let w1 = s
        .ledger_verify()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.workspace_id == "w1")
        .unwrap();
    assert!(!w1.is_consistent(), "{w1:?}");
}

/// Group-commit cost: one transaction of 500 new records, then the same 500 replayed.
/// Prints the timings; asserts nothing about them.
async fn usage_batch_commit_time(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    s.add_credit("top-up", "w1", usd("1000"), None, None)
        .await
        .unwrap();
    let t0 = at(1_767_225_600, 0);
    let backend = if b.is_pg() { "postgres" } else { "sqlite" };
    let mut times = Vec::new();
    for round in 0..5 {
        let batch: Vec<_> = (0..500)
            .map(|i| {
                let t = t0 + chrono::Duration::milliseconds(round * 1_000 + i);
                let (key, window) = match i % 4 {
                    0 => ("k2", None),
                    _ => ("k1", Some(window_start(LimitReset::Daily, t))),
                };
                record(
                    &format!("chatcmpl-{round}-{i:04}"),
                    ("w1", key),
                    odd_pricing(),
                    tokens(1_000 + i as u64, 50, 5, 200 + i as u64, 20),
                    t,
                    window,
                )
            })
            .collect();
        let started = Instant::now();
        assert_eq!(s.record_usage(&batch).await.unwrap(), 500);
        let fresh = started.elapsed();
        let started = Instant::now();
        assert_eq!(s.record_usage(&batch).await.unwrap(), 0);
        let replay = started.elapsed();
        times.push((fresh, replay));
    }
    for (round, (fresh, replay)) in times.iter().enumerate() {
        eprintln!(
            "record_usage[{backend}] round {round}: 500 new records committed in {:.2} ms; \
             replayed (0 applied) in {:.2} ms",
            fresh.as_secs_f64() * 1e3,
            replay.as_secs_f64() * 1e3
        );
    }
    let mut fresh: Vec<_> = times.iter().map(|t| t.0).collect();
    fresh.sort();
    println!(
        "record_usage[{backend}]: batch of 500 — median {:.2} ms, best {:.2} ms",
        fresh[fresh.len() / 2].as_secs_f64() * 1e3,
        fresh[0].as_secs_f64() * 1e3
    );
    let checks = s.ledger_verify().await.unwrap();
    assert!(checks.iter().all(|c| c.is_consistent()), "{checks:?}");
}

/// Books after a ledger write, as the store reads them back: balances, each workspace's
/// ledger (credits and debits), its usage records, key spend and daily rollup.
type Books = (
    Vec<(String, Usd)>,
    Vec<Vec<LedgerEntry>>,
    Vec<Vec<UsageRecord>>,
    Vec<(String, Usd)>,
    Vec<Vec<tollgate::store::DailyUsage>>,
);

async fn books(s: &dyn Store, windows: &[(String, DateTime<Utc>)]) -> Books {
    let from = chrono::NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    let to = chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
    let (mut ledgers, mut usage, mut daily) = (Vec::new(), Vec::new(), Vec::new());
    for ws in ["w1", "w2"] {
        ledgers.push(s.ledger(ws).await.unwrap());
        usage.push(s.usage(ws, None).await.unwrap());
        daily.push(s.usage_daily(ws, from, to).await.unwrap());
    }
    (
        s.balances().await.unwrap(),
        ledgers,
        usage,
        s.key_spends(windows).await.unwrap(),
        daily,
    )
}

/// Record `i` of a large batch: three keys of two workspaces, odd prices, spread over the last
/// hours of January 2026 and the first of February (two months, two daily and two monthly
/// windows), its content a function of `i` alone so any writer of it writes the same record.
fn month_end_record(i: usize) -> UsageRecord {
    let (ws, key, reset) = match i % 3 {
        0 => ("w1", "k1", Some(LimitReset::Daily)),
        1 => ("w1", "k2", None),
        _ => ("w2", "k3", Some(LimitReset::Monthly)),
    };
    let feb = at(1_769_904_000, 0); // 2026-02-01T00:00:00Z
    let t = feb + chrono::Duration::microseconds((i as i64 - 10_000) * 360_001 + 7);
    let i = i as u64;
    record(
        &format!("big-{i:05}"),
        (ws, key),
        odd_pricing(),
        tokens(
            i % 4_000 + 1,
            (i * 7) % 3_000,
            (i * 13) % 500,
            i % 900,
            i % 17 % (i % 900 + 1),
        ),
        t,
        reset.map(|r| window_start(r, t)),
    )
}

/// Debits per workspace, spend per (key, window), (requests, cost) per (workspace, day).
type ExpectedBooks = (
    BTreeMap<String, Usd>,
    BTreeMap<(String, DateTime<Utc>), Usd>,
    BTreeMap<(String, chrono::NaiveDate), (u64, Usd)>,
);

/// What `records` must add up to, computed here independently of the store: per workspace the
/// debits, per (key, window) the spend, per (workspace, day) the requests and cost.
fn expected_books(records: &[UsageRecord]) -> ExpectedBooks {
    let (mut by_ws, mut by_window, mut by_day) =
        (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for r in records {
        let ws: &mut Usd = by_ws.entry(r.workspace_id.clone()).or_insert(Usd::ZERO);
        *ws = ws.checked_add(r.cost).unwrap();
        if let Some(w) = r.spend_window_start {
            let spend: &mut Usd = by_window.entry((r.key_id.clone(), w)).or_insert(Usd::ZERO);
            *spend = spend.checked_add(r.cost).unwrap();
        }
        let day = by_day
            .entry((r.workspace_id.clone(), r.finished_at.date_naive()))
            .or_insert((0, Usd::ZERO));
        day.0 += 1;
        day.1 = day.1.checked_add(r.cost).unwrap();
    }
    (by_ws, by_window, by_day)
}

/// Checks the store's books against `records` (all of them written once) and `credit` per
/// workspace, to the pico-USD.
async fn assert_books_match(s: &dyn Store, records: &[UsageRecord], credit: Usd) {
    let (by_ws, by_window, by_day) = expected_books(records);
    let windows: Vec<(String, DateTime<Utc>)> = by_window.keys().cloned().collect();
    let (balances, ledgers, usage, spends, daily) = books(s, &windows).await;
    let expected: Vec<(String, Usd)> = by_ws
        .iter()
        .map(|(ws, debits)| (ws.clone(), credit.checked_sub(*debits).unwrap()))
        .collect();
    assert_eq!(balances, expected, "balances");
    let stored: usize = usage.iter().map(Vec::len).sum();
    assert_eq!(stored, records.len(), "each record once");
    let mut wanted: Vec<&UsageRecord> = records.iter().collect();
    wanted.sort_by(|a, b| a.id.cmp(&b.id));
    let mut got: Vec<&UsageRecord> = usage.iter().flatten().collect();
    got.sort_by(|a, b| a.id.cmp(&b.id));
    assert!(got == wanted, "every record reads back field for field");
    for (ws, ledger) in ["w1", "w2"].iter().zip(&ledgers) {
        let debits: Vec<_> = ledger
            .iter()
            .filter(|e| e.kind == LedgerKind::Debit)
            .collect();
        let n = records.iter().filter(|r| r.workspace_id == *ws).count();
        assert_eq!(debits.len(), n, "{ws}: one debit per record");
        let total = debits
            .iter()
            .fold(Usd::ZERO, |a, e| a.checked_add(e.amount).unwrap());
        assert_eq!(
            Usd::ZERO.checked_sub(total).unwrap(),
            by_ws[*ws],
            "{ws}: debits"
        );
    }
    // One row per (key, window) asked, in the order asked.
    let per_window: Vec<(String, Usd)> = by_window
        .iter()
        .map(|((key, _), spend)| (key.clone(), *spend))
        .collect();
    assert_eq!(spends, per_window, "key spend per window");
    let mut days = BTreeMap::new();
    for (ws, rows) in ["w1", "w2"].iter().zip(&daily) {
        for d in rows {
            let e = days
                .entry((ws.to_string(), d.day))
                .or_insert((0, Usd::ZERO));
            e.0 += d.requests;
            e.1 = e.1.checked_add(d.cost).unwrap();
        }
    }
    assert_eq!(days, by_day, "daily rollup");
    let checks = s.ledger_verify().await.unwrap();
    assert!(checks.iter().all(|c| c.is_consistent()), "{checks:?}");
}

/// The billing fixture with 1,000 USD in each workspace: room for the large batches below.
async fn large_batch_fixture(s: &dyn Store) {
    billing_fixture(s).await;
    for ws in ["w1", "w2"] {
        s.add_credit(&format!("top-up-{ws}"), ws, usd("1000"), None, None)
            .await
            .unwrap();
    }
}

/// 20,000 records spanning two months in one batch: stored, debited, summed into balances,
/// spend windows and the daily rollup exactly to the pico-USD; replayed twice, nothing moves.
async fn a_large_batch_of_two_months_round_trips_exactly(b: Arc<Backend>) {
    let s = b.ready().await;
    large_batch_fixture(s).await;
    let records: Vec<UsageRecord> = (0..20_000).map(month_end_record).collect();
    let months: BTreeSet<_> = records
        .iter()
        .map(|r| r.finished_at.format("%Y-%m").to_string())
        .collect();
    assert_eq!(months.len(), 2, "{months:?}");
    // In reverse id order: the store sorts.
    let reversed: Vec<UsageRecord> = records.iter().rev().cloned().collect();
    assert_eq!(s.record_usage(&reversed).await.unwrap(), 20_000);
    assert_books_match(s, &records, usd("1000")).await;
    let windows: Vec<_> = expected_books(&records).1.into_keys().collect();
    let after = books(s, &windows).await;
    let feed = s.latest_change().await.unwrap();
    for _ in 0..2 {
        assert_eq!(s.record_usage(&records).await.unwrap(), 0);
    }
    assert!(
        books(s, &windows).await == after,
        "a replay changes nothing"
    );
    assert_eq!(
        s.latest_change().await.unwrap(),
        feed,
        "not even the change feed"
    );
}

/// Two replicas replay overlapping large batches at once (a spool replayed by two processes
/// while the writers run): every record is written once, the books balance to the pico-USD.
async fn overlapping_large_replays_on_two_replicas_count_once(b: Arc<Backend>) {
    let s = b.ready().await;
    large_batch_fixture(s).await;
    let records: Vec<UsageRecord> = (0..9_000).map(month_end_record).collect();
    // Already stored before the race: a third of them.
    assert_eq!(s.record_usage(&records[3_000..6_000]).await.unwrap(), 3_000);
    let instances = [b.another().await, b.another().await];
    let barrier = Arc::new(tokio::sync::Barrier::new(4));
    let mut tasks = Vec::new();
    // Each task: 6,000 records overlapping its neighbours' and the stored third.
    for (task, range) in [0..6_000, 3_000..9_000, 0..9_000, 1_500..7_500]
        .into_iter()
        .enumerate()
    {
        let mut batch = records[range].to_vec();
        if task % 2 == 1 {
            batch.reverse();
        }
        let store = Arc::clone(&instances[task % 2]);
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store.record_usage(&batch).await.unwrap()
        }));
    }
    let mut applied = 0;
    for t in tasks {
        applied += tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("a writer is stuck (deadlock?)")
            .unwrap();
    }
    assert_eq!(
        applied, 6_000,
        "the ids not stored before, each applied by one writer"
    );
    assert_books_match(s, &records, usd("1000")).await;
}

/// A batch naming a key that does not exist, or a key of another workspace, among thousands of
/// good records is refused as a whole (not found, as a foreign key refuses it), and a key or
/// workspace the books name cannot be deleted from under them.
async fn a_refused_record_fails_a_large_batch_and_parents_stay(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    s.add_credit("top-up", "w1", usd("10"), None, None)
        .await
        .unwrap();
    let good: Vec<UsageRecord> = (0..3_000).map(month_end_record).collect();
    let windows: Vec<_> = expected_books(&good).1.into_keys().collect();
    s.add_credit("top-up-w2", "w2", usd("10"), None, None)
        .await
        .unwrap();
    let mut ghost = month_end_record(3_000);
    ghost.key_id = "no-such-key".into();
    ghost.spend_window_start = None;
    let mut foreign = month_end_record(3_001);
    foreign.workspace_id = "w2".into();
    foreign.key_id = "k1".into();
    let before = books(s, &windows).await;
    for bad in [ghost, foreign] {
        let mut batch = good.clone();
        batch.insert(1_500, bad.clone());
        match s.record_usage(&batch).await {
            Err(e @ StoreError::NotFound(_)) => {
                assert!(
                    e.to_string().to_lowercase().contains("foreign key"),
                    "{}: {e}",
                    bad.id
                );
            }
            other => panic!("{}: {other:?}", bad.id),
        }
        assert!(
            books(s, &windows).await == before,
            "{}: nothing applied",
            bad.id
        );
    }
    assert_eq!(s.record_usage(&good).await.unwrap(), 3_000);
    for sql in [
        "DELETE FROM api_keys WHERE id = 'k1'",
        "UPDATE api_keys SET id = 'k1-renamed' WHERE id = 'k1'",
        "DELETE FROM workspaces WHERE id = 'w1'",
        "UPDATE workspaces SET id = 'w1-renamed' WHERE id = 'w1'",
    ] {
        match b.execute_raw(sql).await {
            Err(e) => assert!(
                e.to_string().to_lowercase().contains("foreign key"),
                "{sql}: {e}"
            ),
            Ok(n) => panic!("{sql} was accepted ({n} rows)"),
        }
    }
    assert_books_match(s, &good, usd("10")).await;
}

/// A deterministic number from an id (FNV-1a), so a record's content depends only on its id
/// and every writer of a duplicate id writes the same record.
fn id_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Two store instances (two replicas) write 20 overlapping batches of 50 concurrently, ~30%
/// of the ids shared across tasks and instances, each batch in a random order: each id is
/// written once, the books agree to the last pico, no deadlock.
async fn concurrent_writers_apply_each_id_once(b: Arc<Backend>) {
    use rand::seq::SliceRandom;

    let s = b.ready().await;
    s.create_workspace("cw1", "one", None).await.unwrap();
    s.create_workspace("cw2", "two", None).await.unwrap();
    s.create_key(limited_key("ck1", "cw1", LimitReset::Daily), None)
        .await
        .unwrap();
    s.create_key(new_key("ck2", "cw1", "hash-ck2"), None)
        .await
        .unwrap();
    s.create_key(limited_key("ck3", "cw2", LimitReset::Monthly), None)
        .await
        .unwrap();
    s.create_key(new_key("ck4", "cw2", "hash-ck4"), None)
        .await
        .unwrap();
    s.add_credit("seed-1", "cw1", usd("3.000000000001"), None, None)
        .await
        .unwrap();
    let before = s.latest_change().await.unwrap();

    let t0 = at(1_767_268_800, 0); // 2026-01-01T12:00:00Z
    let make = |id: &str| {
        let h = id_hash(id);
        let (ws, key, reset) = match h % 4 {
            0 => ("cw1", "ck1", Some(LimitReset::Daily)),
            1 => ("cw1", "ck2", None),
            2 => ("cw2", "ck3", Some(LimitReset::Monthly)),
            _ => ("cw2", "ck4", None),
        };
        // Spread over two days, so ck1 has two daily windows.
        let t = t0 + chrono::Duration::microseconds((h % 86_400_000_000) as i64 + 1);
        record(
            id,
            (ws, key),
            odd_pricing(),
            tokens(
                h % 5_000 + 1,
                (h >> 8) % 3_000,
                (h >> 16) % 700,
                (h >> 24) % 2_000,
                0,
            ),
            t,
            reset.map(|r| window_start(r, t)),
        )
    };
    let instances = [b.another().await, b.another().await];
    let shared: Vec<String> = (0..60).map(|i| format!("shared-{i:02}")).collect();
    let mut tasks = Vec::new();
    let mut all_ids = BTreeSet::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    for task in 0..20usize {
        let mut rng = rand::thread_rng();
        let mut ids: Vec<String> = (0..35).map(|i| format!("t{task:02}-{i:02}")).collect();
        ids.extend(shared.choose_multiple(&mut rng, 15).cloned());
        ids.shuffle(&mut rng);
        all_ids.extend(ids.iter().cloned());
        let batch: Vec<UsageRecord> = ids.iter().map(|id| make(id)).collect();
        let store = Arc::clone(&instances[task % 2]);
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let first = store.record_usage(&batch).await.unwrap();
            // And once more, racing the others: nothing new.
            let again = store.record_usage(&batch).await.unwrap();
            assert_eq!(again, 0);
            first
        }));
    }
    let started = Instant::now();
    let mut applied = 0;
    for t in tasks {
        applied += tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("a writer is stuck (deadlock?)")
            .unwrap();
    }
    let elapsed = started.elapsed();
    eprintln!(
        "concurrent record_usage: 20 tasks x 50 records on 2 instances, {} distinct ids, \
         in {:.1} ms",
        all_ids.len(),
        elapsed.as_secs_f64() * 1e3
    );
    assert_eq!(
        applied,
        all_ids.len() as u64,
        "applied once per distinct id"
    );

    // Each id exactly once; the books agree to the last pico.
    let mut stored = Vec::new();
    for ws in ["cw1", "cw2"] {
        stored.extend(s.usage(ws, None).await.unwrap());
    }
    let stored_ids: Vec<_> = stored.iter().map(|r| r.id.clone()).collect();
    assert_eq!(stored_ids.len(), all_ids.len());
    assert_eq!(stored_ids.iter().cloned().collect::<BTreeSet<_>>(), all_ids);
    for r in &stored {
        assert_eq!(r, &make(&r.id));
    }
    let mut costs: BTreeMap<&str, Usd> = BTreeMap::new();
    let mut spend: BTreeMap<(String, DateTime<Utc>), Usd> = BTreeMap::new();
    for id in &all_ids {
        let r = make(id);
        let c = costs
            .entry(if r.workspace_id == "cw1" {
                "cw1"
            } else {
                "cw2"
            })
            .or_default();
        *c = c.checked_add(r.cost).unwrap();
        if let Some(w) = r.spend_window_start {
            let e = spend.entry((r.key_id.clone(), w)).or_default();
            *e = e.checked_add(r.cost).unwrap();
        }
    }
    let cw1 = usd("3.000000000001").checked_sub(costs["cw1"]).unwrap();
    let cw2 = Usd::ZERO.checked_sub(costs["cw2"]).unwrap();
    assert_eq!(s.balance("cw1").await.unwrap(), cw1);
    assert_eq!(s.balance("cw2").await.unwrap(), cw2);
    for c in s.ledger_verify().await.unwrap() {
        assert!(c.is_consistent(), "{c:?}");
        let expected_cost = costs[c.workspace_id.as_str()];
        assert_eq!(c.usage_cost_sum, expected_cost);
        assert_eq!(c.debit_sum, Usd::ZERO.checked_sub(expected_cost).unwrap());
        assert_eq!(c.ledger_sum, c.balance_row);
    }
    for ws in ["cw1", "cw2"] {
        let ledger = s.ledger(ws).await.unwrap();
        let debits: BTreeSet<_> = ledger.iter().filter_map(|l| l.usage_id.clone()).collect();
        assert_eq!(
            debits.len(),
            ledger
                .iter()
                .filter(|l| l.kind == LedgerKind::Debit)
                .count()
        );
    }
    let wanted: Vec<(String, DateTime<Utc>)> = spend.keys().cloned().collect();
    assert!(wanted.iter().any(|(k, _)| k == "ck1") && wanted.iter().any(|(k, _)| k == "ck3"));
    let got = s.key_spends(&wanted).await.unwrap();
    let expected: Vec<(String, Usd)> = spend.iter().map(|((k, _), v)| (k.clone(), *v)).collect();
    assert_eq!(got, expected);

    // The change feed shows Spend for every key written, seen from either instance.
    let changes = instances[1].changes_since(before).await.unwrap();
    for key in ["ck1", "ck2", "ck3", "ck4"] {
        assert!(
            changes
                .iter()
                .any(|c| c.kind == ChangeKind::Spend && c.ref_id == key),
            "no Spend change for {key}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Backend-specific
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn open_by_url() {
    let s = tollgate::store::open("sqlite://:memory:").await.unwrap();
    assert_eq!(s.migrate().await.unwrap(), migrations::SQLITE.len());
    assert_eq!(s.migrate().await.unwrap(), 0);
    s.create_workspace("w", "w", None).await.unwrap();
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

// ---------------------------------------------------------------------------------------------
// The admin API's pages and changes
// ---------------------------------------------------------------------------------------------

/// Follows `next` page by page (`limit` rows each) and returns every row's id in order.
async fn all_pages<T, F, Fut>(
    limit: usize,
    mut next: F,
    key: fn(&T) -> (DateTime<Utc>, String),
) -> Vec<String>
where
    F: FnMut(Option<Cursor>, usize) -> Fut,
    Fut: Future<Output = Vec<T>>,
{
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let rows = next(after.clone(), limit).await;
        assert!(rows.len() <= limit);
        ids.extend(rows.iter().map(|r| key(r).1));
        match rows.last() {
            Some(last) if rows.len() == limit => {
                let (at, id) = key(last);
                after = Some(Cursor { at, id });
            }
            _ => return ids,
        }
    }
}

async fn usage_pages_filter_and_break_ties_by_id(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let tie = at(1_764_000_000, 0);
    let mut batch = Vec::new();
    for (i, (key, secs)) in [("k1", 0), ("k2", 0), ("k1", 0), ("k2", -60), ("k1", 60)]
        .into_iter()
        .enumerate()
    {
        let mut r = record(
            &format!("u{i}"),
            ("w1", key),
            odd_pricing(),
            tokens(10, 0, 0, 5, 0),
            tie + chrono::Duration::seconds(secs),
            None,
        );
        if i == 4 {
            r.model_id = "gemini".into();
        }
        batch.push(r);
    }
    s.record_usage(&batch).await.unwrap();
    let filter = UsageFilter::default();
    let ids = all_pages(
        2,
        |after, n| {
            let f = filter.clone();
            async move { s.usage_page("w1", &f, after.as_ref(), n).await.unwrap() }
        },
        |r: &UsageRecord| (r.finished_at, r.id.clone()),
    )
    .await;
    assert_eq!(
        ids,
        ["u4", "u2", "u1", "u0", "u3"],
        "newest first, ties by id, each once"
    );

    let by = |key: Option<&str>,
              model: Option<&str>,
              from: Option<DateTime<Utc>>,
              to: Option<DateTime<Utc>>| UsageFilter {
        key_id: key.map(str::to_owned),
        model_id: model.map(str::to_owned),
        from,
        to,
    };
    let ids = |rows: Vec<UsageRecord>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let page = |f: UsageFilter| async move { ids(s.usage_page("w1", &f, None, 10).await.unwrap()) };
    assert_eq!(page(by(Some("k2"), None, None, None)).await, ["u1", "u3"]);
    assert_eq!(page(by(None, Some("gemini"), None, None)).await, ["u4"]);
    assert_eq!(
        page(by(
            None,
            None,
            Some(tie),
            Some(tie + chrono::Duration::seconds(1))
        ))
        .await,
        ["u2", "u1", "u0"]
    );
    assert!(page(by(Some("k3"), None, None, None)).await.is_empty());
    assert!(s
        .usage_page("w2", &filter, None, 10)
        .await
        .unwrap()
        .is_empty());
}

async fn daily_rollup_is_exact_and_replays_add_nothing(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let day1 = at(1_764_028_800, 0); // 2025-11-25T00:00:00Z
    let mk = |id: &str, model: &str, t: DateTime<Utc>, input: u64| {
        let mut r = record(
            id,
            ("w1", "k2"),
            odd_pricing(),
            tokens(input, 3, 2, 7, 1),
            t,
            None,
        );
        r.model_id = model.into();
        r
    };
    let batch = vec![
        mk("d1", "a", day1 + chrono::Duration::seconds(1), 10),
        mk("d2", "a", day1 + chrono::Duration::hours(23), 20),
        mk("d3", "b", day1 + chrono::Duration::hours(1), 30),
        mk("d4", "a", day1 + chrono::Duration::hours(25), 40),
    ];
    s.record_usage(&batch).await.unwrap();
    s.record_usage(&batch).await.unwrap(); // a replay: nothing twice
    let d = |y, m, day| chrono::NaiveDate::from_ymd_opt(y, m, day).unwrap();
    let rows = s
        .usage_daily("w1", d(2025, 11, 25), d(2025, 11, 26))
        .await
        .unwrap();
    let got: Vec<(String, String, u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r.day.to_string(),
                r.model_id.clone(),
                r.requests,
                r.input_tokens,
                r.output_tokens,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("2025-11-25".into(), "a".into(), 2, 10 + 20 + 2 * 5, 14),
            ("2025-11-25".into(), "b".into(), 1, 35, 7),
            ("2025-11-26".into(), "a".into(), 1, 45, 7),
        ]
    );
    assert_eq!(
        rows[0].cost,
        sum([batch[0].cost, batch[1].cost]),
        "exact to the pico"
    );
    assert!(s
        .usage_daily("w1", d(2025, 11, 27), d(2025, 12, 1))
        .await
        .unwrap()
        .is_empty());
}

async fn audit_log_pages_and_refuses_changes(b: Arc<Backend>) {
    let s = b.ready().await;
    for i in 0..5 {
        let entry = AuditEntry {
            id: format!("a{i}"),
            at: at(1_764_000_000 + i / 2, 0),
            actor: "cli:test".into(),
            action: "workspace.create".into(),
            workspace_id: (i % 2 == 0).then(|| "w1".to_owned()),
            target: format!("t{i}"),
            before: (i == 4).then(|| serde_json::json!({"name": "old"})),
            after: Some(serde_json::json!({"n": i})),
        };
        // Each entry comes with a change, written in the change's transaction.
        let audit = Box::new(move |_: &Workspace| entry);
        s.create_workspace(&format!("t{i}"), "w", Some(audit))
            .await
            .unwrap();
    }
    let ids = all_pages(
        2,
        |after, n| async move { s.audit_page(None, after.as_ref(), n).await.unwrap() },
        |e: &AuditEntry| (e.at, e.id.clone()),
    )
    .await;
    assert_eq!(ids, ["a4", "a3", "a2", "a1", "a0"]);
    let w1 = s.audit_page(Some("w1"), None, 10).await.unwrap();
    assert_eq!(
        w1.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["a4", "a2", "a0"]
    );
    assert_eq!(w1[0].before, Some(serde_json::json!({"name": "old"})));
    assert_eq!(w1[0].after, Some(serde_json::json!({"n": 4})));
    assert!(b
        .execute_raw("UPDATE audit_log SET actor = 'x'")
        .await
        .is_err());
    assert!(b.execute_raw("DELETE FROM audit_log").await.is_err());
    assert_eq!(s.audit_page(None, None, 10).await.unwrap().len(), 5);
}

async fn alerts_claims_and_deliveries(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let settings = AlertSettings {
        workspace_id: "w1".into(),
        webhook_url: "http://127.0.0.1:9/hook".into(),
        secret: "whsec_1".into(),
        low_balance: Some(usd("2.5")),
        key_limit_percents: vec![80, 100],
    };
    s.put_alerts(&settings, None).await.unwrap();
    let changed = AlertSettings {
        low_balance: None,
        ..settings.clone()
    };
    s.put_alerts(&changed, None).await.unwrap();
    assert_eq!(s.get_alerts("w1").await.unwrap(), Some(changed.clone()));
    assert_eq!(s.get_alerts("w2").await.unwrap(), None);
    assert_eq!(s.all_alerts().await.unwrap(), [changed]);
    let missing = AlertSettings {
        workspace_id: "nope".into(),
        ..settings
    };
    assert!(matches!(
        s.put_alerts(&missing, None).await,
        Err(StoreError::NotFound(_))
    ));

    let now = at(1_764_000_000, 0);
    assert!(s.claim_alert("w1", "balance.low", now).await.unwrap());
    assert!(
        !s.claim_alert("w1", "balance.low", now).await.unwrap(),
        "claimed once"
    );
    assert!(s.claim_alert("w2", "balance.low", now).await.unwrap());
    assert!(s.release_alert("w1", "balance.low").await.unwrap());
    assert!(!s.release_alert("w1", "balance.low").await.unwrap());
    assert!(
        s.claim_alert("w1", "balance.low", now).await.unwrap(),
        "re-armed"
    );

    for attempt in 1..=3u32 {
        let d = Delivery {
            id: format!("dl{attempt}"),
            workspace_id: "w1".into(),
            event_id: "evt_1".into(),
            event: "balance.low".into(),
            attempt,
            at: now + chrono::Duration::seconds(i64::from(attempt)),
            status: (attempt > 1).then_some(StatusClass::of(if attempt == 3 { 204 } else { 503 })),
            result: match attempt {
                1 => "failed: connection error".to_owned(),
                2 => "refused: non-2xx (5xx) in 40 ms".to_owned(),
                _ => "delivered 2xx in 12 ms".to_owned(),
            },
            delivered: attempt == 3,
        };
        s.record_delivery(&d).await.unwrap();
    }
    let page = s.deliveries_page("w1", None, 2).await.unwrap();
    assert_eq!(
        (page[0].attempt, page[0].status, page[0].delivered),
        (3, Some(StatusClass::of(200)), true)
    );
    assert_eq!(page[0].result, "delivered 2xx in 12 ms");
    assert_eq!(
        page[1].status.map(|c| c.to_string()).as_deref(),
        Some("5xx")
    );
    let rest = s
        .deliveries_page(
            "w1",
            Some(&Cursor {
                at: page[1].at,
                id: page[1].id.clone(),
            }),
            2,
        )
        .await
        .unwrap();
    assert_eq!(
        (rest.len(), rest[0].result.as_str()),
        (1, "failed: connection error")
    );
}

async fn rename_and_expiry(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let ws = s.rename_workspace("w1", "renamed", None).await.unwrap();
    assert_eq!(ws.name, "renamed");
    assert_eq!(
        s.get_workspace("w1").await.unwrap().unwrap().name,
        "renamed"
    );
    assert!(matches!(
        s.rename_workspace("nope", "x", None).await,
        Err(StoreError::NotFound(_))
    ));
    let until = at(1_900_000_000, 123_456_000);
    s.set_key_expiry("k1", until).await.unwrap();
    assert_eq!(
        s.get_key("k1").await.unwrap().unwrap().expires_at,
        Some(until)
    );
    assert!(matches!(
        s.set_key_expiry("nope", until).await,
        Err(StoreError::NotFound(_))
    ));
    let keys = all_pages(
        1,
        |after, n| async move { s.keys_page("w1", after.as_ref(), n).await.unwrap() },
        |k: &tollgate::store::ApiKey| (k.created_at, k.id.clone()),
    )
    .await;
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(sorted, ["k1", "k2"]);
    let spaces = all_pages(
        1,
        |after, n| async move { s.workspaces_page(after.as_ref(), n).await.unwrap() },
        |w: &tollgate::store::Workspace| (w.created_at, w.id.clone()),
    )
    .await;
    assert_eq!(spaces.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Key rotation and credit limits (issue 26): through the command layer, on both backends.
// ---------------------------------------------------------------------------------------------

/// A workspace `w` with one working key named `svc`; the key.
async fn rotatable(s: &dyn Store, expires_at: Option<DateTime<Utc>>) -> tollgate::store::ApiKey {
    let a = commands::Actor::cli();
    let ws = commands::create_workspace(s, &a, "w").await.unwrap();
    let req = commands::KeyRequest {
        workspace: ws.id,
        name: Some("svc".into()),
        expires_at,
        ..commands::KeyRequest::default()
    };
    commands::create_key(s, &a, "sk-", req).await.unwrap().key
}

async fn audit_actions(s: &dyn Store) -> Vec<String> {
    let page = commands::PageRequest::default();
    let log = commands::audit_log(s, None, &page).await.unwrap();
    log.data.into_iter().map(|e| e.action).collect()
}

async fn rotation_with_a_huge_grace_changes_nothing(b: Arc<Backend>) {
    let s = b.ready().await;
    let key = rotatable(s, None).await;
    let grace = Some(Duration::from_secs(10_000_000_000_000));
    let a = commands::Actor::cli();
    let e = commands::rotate_key(s, &a, "sk-", &key.id, grace, Utc::now())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("grace"), "{e}");
    assert_eq!(
        s.list_keys(&key.workspace_id).await.unwrap(),
        std::slice::from_ref(&key)
    );
    assert_eq!(audit_actions(s).await, ["key.create", "workspace.create"]);
}

async fn concurrent_rotations_make_one_replacement(b: Arc<Backend>) {
    let s = b.ready().await;
    let key = rotatable(s, None).await;
    let mut tasks = Vec::new();
    for i in 0..6 {
        // Every rotation through its own instance: six replicas racing.
        let (store, id) = (b.another().await, key.id.clone());
        let grace = (i % 2 == 0).then(|| Duration::from_secs(3600));
        tasks.push(tokio::spawn(async move {
            let a = commands::Actor::cli();
            commands::rotate_key(store.as_ref(), &a, "sk-", &id, grace, Utc::now()).await
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    let (made, refused): (Vec<_>, Vec<_>) = done.into_iter().partition(Result::is_ok);
    assert_eq!((made.len(), refused.len()), (1, 5), "{refused:?}");
    for e in refused {
        let e = e.unwrap_err();
        assert!(
            matches!(
                e,
                commands::CommandError::Conflict(_)
                    | commands::CommandError::Store(StoreError::Conflict(_))
            ),
            "{e:?}"
        );
    }
    let keys = s.list_keys(&key.workspace_id).await.unwrap();
    assert_eq!(keys.len(), 2, "one replacement: {keys:?}");
    let rotations = audit_actions(s).await;
    assert_eq!(rotations.iter().filter(|a| *a == "key.rotate").count(), 1);
}

async fn rotation_is_one_transaction_with_its_audit_entry(b: Arc<Backend>) {
    let s = b.ready().await;
    let original = Utc::now() + chrono::Duration::days(10);
    let key = rotatable(s, Some(original)).await;
    let a = commands::Actor::cli();
    let grace = Some(Duration::from_secs(60));
    let r = commands::rotate_key(s, &a, "sk-", &key.id, grace, Utc::now())
        .await
        .unwrap();
    assert_eq!(r.key.expires_at, key.expires_at, "the original expiry");
    assert_eq!(r.key.name.as_deref(), Some("svc"));
    let old = s.get_key(&key.id).await.unwrap().unwrap();
    assert_eq!(old, r.old, "the old key as stored");
    assert!(old.expires_at < key.expires_at && old.revoked_at.is_none());
    assert_eq!(
        audit_actions(s).await,
        ["key.rotate", "key.create", "workspace.create"]
    );
    // Rotating it again during its grace period is refused, naming its replacement.
    let e = commands::rotate_key(s, &a, "sk-", &key.id, None, Utc::now())
        .await
        .unwrap_err();
    assert!(e.to_string().contains(&r.key.id), "{e}");
    assert_eq!(s.list_keys(&key.workspace_id).await.unwrap().len(), 2);
}

/// Makes the audit log refuse every insert from now on (a trigger of the test's own).
async fn refuse_audit_entries(b: &Backend) {
    if b.is_pg() {
        b.execute_raw(
            "CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'audit entry refused by the test'; END $$",
        )
        .await
        .unwrap();
        b.execute_raw(
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log \
             FOR EACH ROW EXECUTE FUNCTION refuse_audit()",
        )
        .await
        .unwrap();
    } else {
        b.execute_raw(
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log \
             BEGIN SELECT RAISE(ABORT, 'audit entry refused by the test'); END",
        )
        .await
        .unwrap();
    }
}

/// Every audited change commits with its audit entry or not at all: once the audit log
/// refuses inserts, each command fails and the store is as it was.
async fn a_change_whose_audit_entry_fails_leaves_neither(b: Arc<Backend>) {
    let s = b.ready().await;
    let a = commands::Actor::cli();
    let key = rotatable(s, None).await;
    let ws = key.workspace_id.clone();
    let catalog = CatalogRows {
        profiles: Vec::new(),
        models: vec![ModelRow {
            family: "openai".to_owned(),
            ..model("acme/m", "1")
        }],
        routes: vec![route("acme/m", "openai", 0)],
    };
    s.import_catalog(&catalog, None).await.unwrap();
    let mkey = commands::ManagementKeyRequest {
        workspace: ws.clone(),
        ..commands::ManagementKeyRequest::default()
    };
    let made = commands::create_management_key(s, &a, mkey.clone(), Utc::now())
        .await
        .unwrap();
    let audited = audit_actions(s).await;
    refuse_audit_entries(&b).await;

    let now = Utc::now();
    let new_key = commands::KeyRequest {
        workspace: ws.clone(),
        ..commands::KeyRequest::default()
    };
    let key_patch = commands::KeyPatch {
        allowed_models: Some(vec!["acme/*".into()]),
        ..commands::KeyPatch::default()
    };
    let alerts = commands::AlertRequest {
        webhook_url: "http://127.0.0.1:9/hook".into(),
        low_balance_usd: None,
        key_limit_percents: Vec::new(),
    };
    let patch = commands::ModelPatch {
        input_price: Some(price("2")),
        ..commands::ModelPatch::default()
    };
    let failures = [
        commands::create_workspace(s, &a, "another").await.err(),
        commands::rename_workspace(s, &a, &ws, "renamed")
            .await
            .err(),
        commands::create_key(s, &a, "sk-", new_key).await.err(),
        commands::revoke_key(s, &a, &key.id, now).await.err(),
        commands::rotate_key(s, &a, "sk-", &key.id, None, now)
            .await
            .err(),
        commands::add_credit(s, &a, &ws, "5", None).await.err(),
        commands::put_alerts(s, &a, &ws, alerts, true).await.err(),
        commands::update_model(s, &a, "acme/m", patch).await.err(),
        commands::set_route_active(s, &a, "acme/m", 0, false)
            .await
            .err(),
        commands::update_key(s, &a, &key.id, key_patch).await.err(),
        commands::create_management_key(s, &a, mkey, now)
            .await
            .err(),
        commands::revoke_management_key(s, &a, &made.key.key.id, now)
            .await
            .err(),
    ];
    for (i, e) in failures.iter().enumerate() {
        let e = e
            .as_ref()
            .unwrap_or_else(|| panic!("change {i} succeeded unaudited"));
        assert!(
            e.to_string().contains("refused by the test"),
            "change {i}: {e}"
        );
    }

    let workspaces = s.list_workspaces().await.unwrap();
    assert_eq!(workspaces.len(), 1, "{workspaces:?}");
    assert_eq!(workspaces[0].name, "w", "not renamed");
    assert_eq!(
        s.list_keys(&ws).await.unwrap(),
        [key],
        "no new key, none revoked, rotated or changed"
    );
    assert_eq!(
        s.management_keys(&ws).await.unwrap(),
        [made.key.key],
        "no new management key, none revoked"
    );
    assert!(s.ledger(&ws).await.unwrap().is_empty(), "no credit");
    assert_eq!(s.balance(&ws).await.unwrap(), Usd::ZERO);
    assert_eq!(s.get_alerts(&ws).await.unwrap(), None);
    assert_eq!(s.load_catalog().await.unwrap().models, catalog.models);
    assert_eq!(s.load_catalog().await.unwrap().routes, catalog.routes);
    assert_eq!(audit_actions(s).await, audited);
}

fn console_session(n: u8, created: DateTime<Utc>) -> ConsoleSession {
    ConsoleSession {
        id_hash: format!("{n:02x}").repeat(32),
        name: format!("s{n}"),
        csrf: format!("csrf-{n}"),
        created_at: created,
        last_seen: created,
        expires_at: created + chrono::Duration::hours(2),
    }
}

async fn console_sessions_end_idle_or_expired_and_are_capped(b: Arc<Backend>) {
    let s = b.ready().await;
    let t0 = at(1_770_000_000, 123_456_789);
    let minutes = chrono::Duration::minutes;
    let first = console_session(1, t0);
    s.create_session(&first, None).await.unwrap();
    assert!(matches!(
        s.create_session(&first, None).await,
        Err(StoreError::Conflict(_))
    ));
    // Touched within the idle time, it lives on with its last use moved.
    let t = t0 + minutes(20);
    let live = s
        .touch_session(&first.id_hash, t, t - minutes(30))
        .await
        .unwrap();
    let want = ConsoleSession {
        created_at: at(1_770_000_000, 123_456_000),
        expires_at: at(1_770_007_200, 123_456_000),
        last_seen: at(1_770_001_200, 123_456_000),
        ..first.clone()
    };
    assert_eq!(live, Some(want));
    // Idle too long: gone, and deleted.
    let t = t0 + minutes(51);
    assert_eq!(
        s.touch_session(&first.id_hash, t, t - minutes(30))
            .await
            .unwrap(),
        None
    );
    assert!(!s.delete_session(&first.id_hash).await.unwrap());
    // Past its maximum, however busy.
    let busy = console_session(2, t0);
    s.create_session(&busy, None).await.unwrap();
    let t = t0 + minutes(120);
    assert_eq!(
        s.touch_session(&busy.id_hash, t, t - minutes(30))
            .await
            .unwrap(),
        None
    );

    // The purge drops the ended sessions and keeps the most recently seen.
    for n in 3..8 {
        let created = t0 + minutes(i64::from(n));
        s.create_session(&console_session(n, created), None)
            .await
            .unwrap();
    }
    let t = t0 + minutes(36);
    // Sessions 3, 4 and 5, last seen 31 minutes ago or earlier, have ended; of 6 and 7 only
    // the most recently seen is kept.
    assert_eq!(s.purge_sessions(t, t - minutes(31), 1).await.unwrap(), 4);
    let alive = |n: u8| {
        let hash = console_session(n, t0).id_hash;
        async move {
            s.touch_session(&hash, t, t - minutes(31))
                .await
                .unwrap()
                .is_some()
        }
    };
    assert_eq!(
        [alive(5).await, alive(6).await, alive(7).await],
        [false, false, true]
    );
    assert!(s
        .delete_session(&console_session(7, t0).id_hash)
        .await
        .unwrap());
    assert!(!alive(7).await, "signed out");
}

async fn a_balance_overflow_is_refused_and_typed(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w", None).await.unwrap();
    s.add_credit("e1", "w", usd("9000000"), None, None)
        .await
        .unwrap();
    let e = s
        .add_credit("e2", "w", usd("9000000"), None, None)
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Overflow(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("balance") && !text.contains("sqlite") && !text.contains("postgres"),
        "{text}"
    );
    assert_eq!(s.balance("w").await.unwrap(), usd("9000000"));
    assert_eq!(s.ledger("w").await.unwrap().len(), 1, "nothing written");
    // Up to the last pico still fits.
    let room = Usd::from_pico(i64::MAX)
        .checked_sub(usd("9000000"))
        .unwrap();
    s.add_credit("e3", "w", room, None, None).await.unwrap();
    assert_eq!(s.balance("w").await.unwrap(), Usd::from_pico(i64::MAX));
}

// ---------------------------------------------------------------------------------------------
// Kept responses (the Responses door's `previous_response_id`)
// ---------------------------------------------------------------------------------------------

/// A response of `workspace` (its key `key`), created at `created` seconds (with sub-microsecond
/// digits the store drops) and kept a day.
fn kept(id: &str, (workspace, key): (&str, Option<&str>), created: i64) -> StoredResponse {
    let created_at = at(created, 123_456_789);
    StoredResponse {
        id: id.to_owned(),
        workspace_id: workspace.to_owned(),
        key_id: key.map(str::to_owned),
        model: "google/gemini-2.5-flash".to_owned(),
        created_at,
        expires_at: created_at + chrono::Duration::days(1),
        items: format!(
            r#"[{{"type":"message","role":"user","content":"{id}: héllo ✓ \"quoted\" \\n"}}]"#
        ),
        response: format!(r#"{{"id":"{id}","object":"response","status":"completed"}}"#),
    }
}

/// `r` as the store keeps it: times at microsecond precision.
fn as_stored(mut r: StoredResponse) -> StoredResponse {
    let micros = |t: DateTime<Utc>| DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap();
    r.created_at = micros(r.created_at);
    r.expires_at = micros(r.expires_at);
    r
}

async fn responses_are_kept_per_workspace_until_they_expire(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let mut big = kept("resp_big", ("w2", Some("k3")), 1_900_000_000);
    big.items = format!("[{}]", vec![r#""0123456789""#; 100_000].join(","));
    let batch = [
        kept("resp_a", ("w1", Some("k1")), 1_900_000_000),
        kept("resp_b", ("w2", None), 1_900_000_001),
        big.clone(),
    ];
    assert_eq!(s.keep_responses(&batch).await.unwrap(), 3);
    let now = at(1_900_000_100, 0);
    for r in &batch {
        let found = s
            .stored_response(&r.workspace_id, &r.id, now)
            .await
            .unwrap();
        assert_eq!(
            found,
            Some(as_stored(r.clone())),
            "read back exactly: {}",
            r.id
        );
    }
    // Another workspace's id reads as absent, like an unknown one.
    assert_eq!(s.stored_response("w2", "resp_a", now).await.unwrap(), None);
    assert_eq!(s.stored_response("w1", "resp_zz", now).await.unwrap(), None);
    // Absent from the instant it expires.
    let expires = as_stored(batch[0].clone()).expires_at;
    let just_before = expires - chrono::Duration::microseconds(1);
    assert!(s
        .stored_response("w1", "resp_a", just_before)
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        s.stored_response("w1", "resp_a", expires).await.unwrap(),
        None
    );
    assert_eq!(s.keep_responses(&[]).await.unwrap(), 0);
}

async fn replaying_responses_stores_each_id_once(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let first = kept("resp_a", ("w1", Some("k1")), 1_900_000_000);
    let mut other = first.clone();
    other.response = r#"{"id":"resp_a","status":"other"}"#.to_owned();
    // Within a batch the first occurrence wins; a replayed id is skipped.
    assert_eq!(
        s.keep_responses(&[first.clone(), other.clone()])
            .await
            .unwrap(),
        1
    );
    let second = kept("resp_b", ("w1", None), 1_900_000_000);
    assert_eq!(s.keep_responses(&[other, second.clone()]).await.unwrap(), 1);
    assert_eq!(s.keep_responses(&[first.clone(), second]).await.unwrap(), 0);
    let now = at(1_900_000_100, 0);
    let found = s.stored_response("w1", "resp_a", now).await.unwrap();
    assert_eq!(found, Some(as_stored(first)), "the first write stands");
    // Another replica replaying the same ids writes nothing either.
    let other_replica = b.another().await;
    let replay = [
        kept("resp_b", ("w1", None), 1),
        kept("resp_c", ("w2", None), 1),
    ];
    assert_eq!(other_replica.keep_responses(&replay).await.unwrap(), 1);
}

async fn a_refused_response_fails_its_whole_batch(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let good = kept("resp_good", ("w1", Some("k1")), 1_900_000_000);
    let mut no_workspace = kept("resp_x", ("w9", None), 1_900_000_000);
    let mut foreign_key = kept("resp_x", ("w1", Some("k3")), 1_900_000_000);
    let mut nul = kept("resp_x", ("w1", None), 1_900_000_000);
    nul.items = "[\"a\u{0}b\"]".to_owned();
    let mut expired_at_birth = kept("resp_x", ("w1", None), 1_900_000_000);
    expired_at_birth.expires_at = expired_at_birth.created_at;
    for (what, bad) in [
        ("an unknown workspace", &mut no_workspace),
        ("a key of another workspace", &mut foreign_key),
        ("a NUL character", &mut nul),
        ("an expiry not after its creation", &mut expired_at_birth),
    ] {
        let e = s
            .keep_responses(&[good.clone(), bad.clone()])
            .await
            .unwrap_err();
        assert!(!e.is_retryable(), "{what}: {e:?}");
        assert!(
            matches!(e, StoreError::Conflict(_) | StoreError::NotFound(_)),
            "{what}: {e:?}"
        );
    }
    let now = at(1_900_000_100, 0);
    assert_eq!(
        s.stored_response("w1", "resp_good", now).await.unwrap(),
        None,
        "nothing written"
    );
    assert_eq!(s.keep_responses(&[good]).await.unwrap(), 1);
}

async fn responses_are_deleted_by_their_owner_and_purged_when_expired(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let now = at(1_900_000_100, 0);
    s.keep_responses(&[kept("resp_a", ("w1", Some("k2")), 1_900_000_000)])
        .await
        .unwrap();
    assert!(
        !s.delete_response("w2", "resp_a").await.unwrap(),
        "not w2's"
    );
    assert!(s
        .stored_response("w1", "resp_a", now)
        .await
        .unwrap()
        .is_some());
    assert!(s.delete_response("w1", "resp_a").await.unwrap());
    assert!(!s.delete_response("w1", "resp_a").await.unwrap(), "once");
    assert_eq!(s.stored_response("w1", "resp_a", now).await.unwrap(), None);

    // More expired responses than one purge statement deletes, one expiring exactly at the
    // purge's instant, and one a microsecond later.
    let before = at(1_900_000_000, 0);
    let expired: Vec<StoredResponse> = (0..2_345)
        .map(|i| {
            let mut r = kept(&format!("resp_old_{i:05}"), ("w1", None), 1_800_000_000 + i);
            r.items = "[]".to_owned();
            r
        })
        .collect();
    assert_eq!(s.keep_responses(&expired).await.unwrap(), 2_345);
    let mut edge = kept("resp_edge", ("w2", None), 1_800_000_000);
    edge.expires_at = before;
    let mut live = kept("resp_live", ("w2", None), 1_800_000_000);
    live.expires_at = before + chrono::Duration::microseconds(1);
    s.keep_responses(&[edge, live]).await.unwrap();
    assert_eq!(s.purge_responses(before).await.unwrap(), 2_346);
    assert_eq!(s.purge_responses(before).await.unwrap(), 0);
    let earlier = at(1_800_000_000, 0);
    assert!(s
        .stored_response("w2", "resp_live", earlier)
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        s.stored_response("w2", "resp_edge", earlier).await.unwrap(),
        None
    );
    assert_eq!(
        s.stored_response("w1", "resp_old_00000", earlier)
            .await
            .unwrap(),
        None
    );
}

/// The keeper on either backend: a response is found the moment it is kept, before its batch
/// is written, then in the store, where another replica finds it too.
async fn a_keeper_serves_its_responses_before_and_after_they_are_written(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let (keeper, writer) = ResponseKeeper::over(Duration::from_secs(3_600), b.another().await);
    // Far in the future: the writer's purge at start (at the real now) leaves it.
    let r = kept("resp_new", ("w1", Some("k1")), 4_000_000_000);
    let now = r.created_at;
    keeper.keep(r.clone());
    let mine = keeper.lookup("w1", "resp_new", now).await.unwrap().unwrap();
    assert_eq!(
        mine.expires_at,
        as_stored(r).created_at + chrono::Duration::hours(1)
    );
    assert_eq!(
        s.stored_response("w1", "resp_new", now).await.unwrap(),
        None,
        "not yet written"
    );
    assert_eq!(keeper.lookup("w2", "resp_new", now).await.unwrap(), None);

    writer
        .run(b.another().await, std::future::ready(()), Duration::ZERO)
        .await;
    let stored = s.stored_response("w1", "resp_new", now).await.unwrap();
    assert_eq!(stored.as_ref(), Some(mine.as_ref()));
    let found = keeper.lookup("w1", "resp_new", now).await.unwrap().unwrap();
    assert_eq!(found, mine);
    assert!(keeper.delete("w1", "resp_new").await.unwrap());
    assert_eq!(
        s.stored_response("w1", "resp_new", now).await.unwrap(),
        None
    );
}

// ---------------------------------------------------------------------------------------------
// Refunds, idempotent credit movements, waived records (issue 32)
// ---------------------------------------------------------------------------------------------

fn refund(id: &str, workspace: &str, amount: &str, reason: Option<&str>) -> CreditMovement {
    CreditMovement {
        entry_id: id.to_owned(),
        workspace_id: workspace.to_owned(),
        kind: LedgerKind::Refund,
        amount: usd(amount),
        note: reason.map(str::to_owned),
    }
}

/// The entry and balance a movement made now (not replayed).
async fn made(s: &dyn Store, m: &CreditMovement) -> StoreResult<(LedgerEntry, Usd)> {
    match s.move_credit(m, None, None).await? {
        Done::Made(made) => Ok(made),
        Done::Replayed(answer) => panic!("replayed without a key: {answer}"),
    }
}

async fn refunds_take_back_credit_not_spent(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    s.add_credit("c1", "w1", usd("10"), None, None)
        .await
        .unwrap();
    let spent = record(
        "u1",
        ("w1", "k2"),
        odd_pricing(),
        tokens(1_000, 0, 0, 100, 0),
        at(1_767_225_600, 0),
        None,
    );
    s.record_usage(std::slice::from_ref(&spent)).await.unwrap();
    let balance = usd("10").checked_sub(spent.cost).unwrap();

    let (entry, after) = made(s, &refund("r1", "w1", "2.5", Some("unused prepaid")))
        .await
        .unwrap();
    assert_eq!(
        (entry.kind, entry.amount, entry.note.as_deref()),
        (LedgerKind::Refund, usd("-2.5"), Some("unused prepaid"))
    );
    let balance = balance.checked_sub(usd("2.5")).unwrap();
    assert_eq!(after, balance);
    let row = s.balance_row("w1").await.unwrap();
    assert_eq!((row.balance, row.credited), (balance, usd("7.5")));
    assert_eq!(
        row.credited.checked_sub(row.balance),
        Some(spent.cost),
        "charged = credited - balance"
    );
    assert_eq!(s.ledger("w1").await.unwrap().last(), Some(&entry));

    // Refused, writing nothing: more than the balance, no reason, nothing, a debit, a
    // workspace without a balance row, an unknown workspace.
    let over = Usd::from_pico(balance.pico() + 1).to_string();
    match made(s, &refund("r2", "w1", &over, Some("too much"))).await {
        Err(StoreError::Conflict(m)) => assert!(m.contains("more than the balance"), "{m}"),
        other => panic!("a refund past the balance: {other:?}"),
    }
    for (why, m) in [
        ("no reason", refund("r3", "w1", "1", None)),
        ("blank reason", refund("r4", "w1", "1", Some(" "))),
        ("zero", refund("r5", "w1", "0", Some("x"))),
        (
            "a debit",
            CreditMovement {
                kind: LedgerKind::Debit,
                ..refund("r6", "w1", "1", Some("x"))
            },
        ),
        ("no balance row", refund("r7", "w2", "1", Some("x"))),
    ] {
        assert!(
            matches!(made(s, &m).await, Err(StoreError::Conflict(_))),
            "{why}"
        );
    }
    assert!(matches!(
        made(s, &refund("r8", "ghost", "1", Some("x"))).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(s.balance_row("w1").await.unwrap(), row, "nothing moved");
    assert_eq!(s.ledger("w1").await.unwrap().len(), 3);
    // Exactly the balance empties it; the books still balance.
    made(
        s,
        &refund("r9", "w1", &balance.to_string(), Some("closing")),
    )
    .await
    .unwrap();
    assert_eq!(s.balance("w1").await.unwrap(), Usd::ZERO);
    let checks = s.ledger_verify().await.unwrap();
    assert!(checks.iter().all(|c| c.is_consistent()), "{checks:?}");
    let w1 = checks.iter().find(|c| c.workspace_id == "w1").unwrap();
    assert_eq!(w1.credited_row, spent.cost);
    // The schema refuses a refund entry that is positive or has no reason.
    for sql in [
        "INSERT INTO ledger_entries (id, workspace_id, kind, amount_pico, note, created_at) \
         VALUES ('bad1', 'w1', 'refund', 1, 'x', {t})",
        "INSERT INTO ledger_entries (id, workspace_id, kind, amount_pico, note, created_at) \
         VALUES ('bad2', 'w1', 'refund', -1, NULL, {t})",
    ] {
        let t = if b.is_pg() { "now()" } else { "0" };
        assert!(
            b.execute_raw(&sql.replace("{t}", t)).await.is_err(),
            "{sql}"
        );
    }
}

/// An idempotency key for `operation` on `workspace`, asking `hash` (any 64 characters),
/// made `at`.
fn key_for(
    workspace: &str,
    operation: &'static str,
    key: &str,
    hash: char,
    at: DateTime<Utc>,
) -> IdempotencyKey {
    IdempotencyKey {
        workspace_id: workspace.to_owned(),
        operation,
        key: key.to_owned(),
        request_hash: hash.to_string().repeat(64),
        created_at: at,
        expires_at: at + chrono::Duration::hours(24),
    }
}

fn once(key: IdempotencyKey) -> Option<Once<(LedgerEntry, Usd)>> {
    Some(Once {
        key,
        answer: Box::new(|(entry, balance)| format!("{} {balance}", entry.id)),
    })
}

fn credit(id: &str, workspace: &str, amount: &str) -> CreditMovement {
    CreditMovement {
        kind: LedgerKind::Credit,
        note: None,
        ..refund(id, workspace, amount, None)
    }
}

async fn a_key_moves_credit_once_per_workspace_and_operation(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let t0 = Utc::now();
    let k = |ws, op, hash, at| once(key_for(ws, op, "evt_1", hash, at));
    let first = s
        .move_credit(
            &credit("c1", "w1", "5"),
            None,
            k("w1", "credit.add", 'a', t0),
        )
        .await
        .unwrap();
    assert_eq!(
        first,
        Done::Made((s.ledger("w1").await.unwrap()[0].clone(), usd("5")))
    );
    // The same key and request: the first answer, nothing written (not even the new entry id).
    let again = s
        .move_credit(
            &credit("c2", "w1", "5"),
            None,
            k("w1", "credit.add", 'a', t0),
        )
        .await
        .unwrap();
    assert_eq!(again, Done::Replayed("c1 5.0".into()));
    // Another request under the key: refused, nothing written.
    match s
        .move_credit(
            &credit("c3", "w1", "6"),
            None,
            k("w1", "credit.add", 'b', t0),
        )
        .await
    {
        Err(StoreError::IdempotencyKeyReused(key)) => assert_eq!(key, "evt_1"),
        other => panic!("a key reused for another request: {other:?}"),
    }
    assert_eq!(s.ledger("w1").await.unwrap().len(), 1);
    assert_eq!(s.balance("w1").await.unwrap(), usd("5"));
    // Keys are per workspace and per operation.
    let other_ws = s
        .move_credit(
            &credit("c4", "w2", "1"),
            None,
            k("w2", "credit.add", 'a', t0),
        )
        .await
        .unwrap();
    assert!(matches!(other_ws, Done::Made(_)), "{other_ws:?}");
    let other_op = s
        .move_credit(
            &refund("r1", "w1", "1", Some("x")),
            None,
            k("w1", "credit.refund", 'a', t0),
        )
        .await
        .unwrap();
    assert!(matches!(other_op, Done::Made(_)), "{other_op:?}");
    // A refused movement keeps no key: the same key may be tried again once it can succeed.
    let too_much = refund("r2", "w2", "2", Some("x"));
    assert!(s
        .move_credit(&too_much, None, k("w2", "credit.refund", 'c', t0))
        .await
        .is_err());
    s.add_credit("c5", "w2", usd("5"), None, None)
        .await
        .unwrap();
    let retried = s
        .move_credit(&too_much, None, k("w2", "credit.refund", 'c', t0))
        .await
        .unwrap();
    assert!(matches!(retried, Done::Made(_)), "{retried:?}");
    // Kept 24 hours: a day later the key is free, and the expired one is deleted.
    let later = t0 + chrono::Duration::hours(24) + chrono::Duration::seconds(1);
    let fresh = s
        .move_credit(
            &credit("c6", "w1", "6"),
            None,
            k("w1", "credit.add", 'b', later),
        )
        .await
        .unwrap();
    assert!(matches!(fresh, Done::Made(_)), "{fresh:?}");
    assert_eq!(s.balance("w1").await.unwrap(), usd("10"));
    let kept = b
        .execute_raw("UPDATE idempotency_keys SET answer = answer")
        .await
        .unwrap();
    assert_eq!(kept, 1, "the expired keys were purged, the new one kept");
    let checks = s.ledger_verify().await.unwrap();
    assert!(checks.iter().all(|c| c.is_consistent()), "{checks:?}");
}

/// Concurrent requests with one key, each on its own store instance (as several admin API
/// replicas, or a payment provider's retry racing its first delivery): one entry, and every
/// answer the winner's.
async fn concurrent_duplicates_move_credit_once(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(b.another().await);
    }
    for round in 0..5 {
        let key = format!("evt_{round}");
        let start = Arc::new(tokio::sync::Barrier::new(stores.len()));
        let tasks: Vec<_> = stores
            .iter()
            .map(|store| {
                let (store, start, key) = (store.clone(), start.clone(), key.clone());
                tokio::spawn(async move {
                    let req = commands::CreditRequest {
                        workspace: "w1",
                        usd: "1.000000000001",
                        note: Some("stripe"),
                        idempotency_key: Some(&key),
                    };
                    start.wait().await;
                    commands::grant_credit(store.as_ref(), &commands::Actor::cli(), &req)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        let made: Vec<_> = answers
            .iter()
            .filter_map(|a| match a {
                Done::Made(c) => Some(serde_json::to_string(c).unwrap()),
                Done::Replayed(_) => None,
            })
            .collect();
        assert_eq!(made.len(), 1, "round {round}: {answers:?}");
        for a in &answers {
            if let Done::Replayed(json) = a {
                assert_eq!(json, &made[0], "round {round}: the winner's answer");
            }
        }
    }
    let credits: Vec<_> = s.ledger("w1").await.unwrap();
    assert_eq!(credits.len(), 5, "one entry per key: {credits:?}");
    assert_eq!(s.balance("w1").await.unwrap(), usd("5.000000000005"));
    let audited = audit_actions(s).await;
    assert_eq!(
        audited.iter().filter(|a| *a == "credit.add").count(),
        5,
        "{audited:?}"
    );
}

async fn waived_records_cost_nothing_and_the_books_balance(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    s.add_credit("c1", "w1", usd("1"), None, None)
        .await
        .unwrap();
    let t = at(1_767_225_600, 0);
    let window = Some(window_start(LimitReset::Daily, t));
    let empty = tokens(1_000, 0, 0, 0, 0);
    let waived = |id: &str| UsageRecord {
        cost: Usd::ZERO,
        waived: true,
        outcome: UsageOutcome::UpstreamFailed,
        ..record(id, ("w1", "k1"), odd_pricing(), empty, t, window)
    };
    assert_eq!(s.record_usage(&[waived("u_waived")]).await.unwrap(), 1);
    let stored = s.usage_record("w1", "u_waived").await.unwrap().unwrap();
    assert_eq!(stored, waived("u_waived"));
    assert_eq!((stored.input_tokens, stored.cost), (1_000, Usd::ZERO));
    let debit = s
        .ledger("w1")
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.usage_id.as_deref() == Some("u_waived"))
        .expect("a zero debit");
    assert_eq!((debit.kind, debit.amount), (LedgerKind::Debit, Usd::ZERO));
    assert_eq!(s.balance("w1").await.unwrap(), usd("1"));
    // The database refuses a waived record with a cost, or with output; an unwaived one
    // still costs its tokens.
    let with_cost = UsageRecord {
        cost: pico(1),
        ..waived("u_bad1")
    };
    let mut with_output = waived("u_bad2");
    with_output.output_tokens = 1;
    let unwaived_free = UsageRecord {
        waived: false,
        ..waived("u_bad3")
    };
    for bad in [with_cost, with_output, unwaived_free] {
        assert!(
            s.record_usage(std::slice::from_ref(&bad)).await.is_err(),
            "{}",
            bad.id
        );
    }
    let checks = s.ledger_verify().await.unwrap();
    assert!(checks.iter().all(|c| c.is_consistent()), "{checks:?}");
}

// ---------------------------------------------------------------------------------------------
// Model allowlists, key updates, management keys (issue 32)
// ---------------------------------------------------------------------------------------------

/// A key's allowlist is stored as given, an update writes a key's settings whole (and is a key
/// change on the feed, which is how it reaches every gateway), a rotation carries the list.
async fn allowlists_round_trip_and_an_update_is_a_key_change(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w", "w", None).await.unwrap();
    let mut k = new_key("k", "w", "h");
    k.allowed_models = vec!["google/gemini-*".into(), "«modèle»/*".into()];
    let created = s.create_key(k, None).await.unwrap();
    let read = s.get_key("k").await.unwrap().unwrap();
    assert_eq!(read, created);
    assert_eq!(read.allowed_models, ["google/gemini-*", "«modèle»/*"]);
    let bare = s
        .create_key(new_key("bare", "w", "hb"), None)
        .await
        .unwrap();
    assert!(s
        .get_key("bare")
        .await
        .unwrap()
        .unwrap()
        .allowed_models
        .is_empty());
    assert!(bare.allowed_models.is_empty());

    let before = s.latest_change().await.unwrap();
    let update = KeyUpdate {
        name: Some("renamed".into()),
        spend_limit: Some(usd("2.5")),
        limit_reset: Some(LimitReset::Weekly),
        allowed_models: vec!["acme/*".into()],
    };
    let updated = s.update_key("k", &update, None).await.unwrap();
    assert_eq!(updated, s.get_key("k").await.unwrap().unwrap());
    assert_eq!(
        (
            updated.name.as_deref(),
            updated.spend_limit,
            updated.limit_reset,
            updated.allowed_models.as_slice()
        ),
        (
            Some("renamed"),
            Some(usd("2.5")),
            Some(LimitReset::Weekly),
            ["acme/*".to_owned()].as_slice()
        )
    );
    assert_eq!(
        (
            updated.hint.as_str(),
            updated.created_at,
            updated.revoked_at
        ),
        (created.hint.as_str(), created.created_at, None),
        "nothing else changes"
    );
    let changes = s.changes_since(before).await.unwrap();
    assert!(
        changes
            .iter()
            .any(|c| c.kind == ChangeKind::Key && c.ref_id == "k"),
        "an update is on the feed: {changes:?}"
    );
    let cleared = KeyUpdate {
        name: None,
        spend_limit: None,
        limit_reset: None,
        allowed_models: Vec::new(),
    };
    let read = s.update_key("k", &cleared, None).await.unwrap();
    assert_eq!(
        (read.name, read.spend_limit, read.allowed_models),
        (None, None, vec![])
    );
    match s.update_key("ghost", &cleared, None).await {
        Err(StoreError::NotFound(what)) => assert_eq!(what, "key ghost"),
        other => panic!("updating a missing key: {other:?}"),
    }

    // A rotation's replacement keeps the old key's list.
    let a = commands::Actor::cli();
    let patch = commands::KeyPatch {
        allowed_models: Some(vec!["openai/*".into()]),
        ..commands::KeyPatch::default()
    };
    commands::update_key(s, &a, "bare", patch).await.unwrap();
    let r = commands::rotate_key(s, &a, "sk-", "bare", None, Utc::now())
        .await
        .unwrap();
    assert_eq!(r.key.allowed_models, ["openai/*"]);
    assert_eq!(
        s.get_key(&r.key.id).await.unwrap().unwrap().allowed_models,
        ["openai/*"]
    );
    assert!(audit_actions(s).await.contains(&"key.update".to_owned()));
}

fn management_key(
    id: &str,
    workspace: &str,
    hash_byte: char,
    created: DateTime<Utc>,
) -> ManagementKey {
    ManagementKey {
        id: id.to_owned(),
        workspace_id: workspace.to_owned(),
        name: Some(format!("backend {id}")),
        secret_hash: hash_byte.to_string().repeat(64),
        hint: format!("mk-tg-{id}…"),
        created_at: created,
        expires_at: None,
        revoked_at: None,
    }
}

/// Management keys: stored with times at microseconds, found by id and by secret hash, listed
/// per workspace newest first, revoked once; never on the change feed (every call reads them).
async fn management_keys_are_stored_hashed_listed_and_revoked(b: Arc<Backend>) {
    let s = b.ready().await;
    s.create_workspace("w1", "one", None).await.unwrap();
    s.create_workspace("w2", "two", None).await.unwrap();
    let feed = s.latest_change().await.unwrap();
    let mut first = management_key("mk1", "w1", 'a', at(1_750_000_000, 123_456_789));
    first.expires_at = Some(at(4_102_444_800, 999_999_999));
    let first = s.create_management_key(&first, None).await.unwrap();
    assert_eq!(first.created_at, at(1_750_000_000, 123_456_000));
    assert_eq!(first.expires_at, Some(at(4_102_444_800, 999_999_000)));
    let second = management_key("mk2", "w1", 'b', at(1_760_000_000, 0));
    let second = s.create_management_key(&second, None).await.unwrap();
    let other = s
        .create_management_key(
            &management_key("mk3", "w2", 'c', at(1_760_000_001, 0)),
            None,
        )
        .await
        .unwrap();

    assert_eq!(s.management_key("mk1").await.unwrap(), Some(first.clone()));
    assert_eq!(s.management_key("nope").await.unwrap(), None);
    let by_hash = s.management_key_by_hash(&"b".repeat(64)).await.unwrap();
    assert_eq!(by_hash, Some(second.clone()));
    assert_eq!(
        s.management_key_by_hash(&"d".repeat(64)).await.unwrap(),
        None
    );
    assert_eq!(
        s.management_keys("w1").await.unwrap(),
        [second.clone(), first.clone()],
        "newest first, this workspace's only"
    );
    assert_eq!(s.management_keys("w2").await.unwrap(), [other]);
    assert!(s.management_keys("ghost").await.unwrap().is_empty());

    // Duplicates and a missing workspace are refused, storing nothing.
    let dup_hash = management_key("mk4", "w1", 'a', Utc::now());
    assert!(matches!(
        s.create_management_key(&dup_hash, None).await,
        Err(StoreError::Conflict(_))
    ));
    let dup_id = management_key("mk1", "w1", 'e', Utc::now());
    assert!(matches!(
        s.create_management_key(&dup_id, None).await,
        Err(StoreError::Conflict(_))
    ));
    match s
        .create_management_key(&management_key("mk5", "ghost", 'f', Utc::now()), None)
        .await
    {
        Err(StoreError::NotFound(what)) => assert_eq!(what, "workspace ghost"),
        other => panic!("missing workspace: {other:?}"),
    }
    assert_eq!(s.management_keys("w1").await.unwrap().len(), 2);

    let when = at(1_770_000_000, 500_000_500);
    assert!(s.revoke_management_key("mk1", when, None).await.unwrap());
    assert!(!s
        .revoke_management_key("mk1", Utc::now(), None)
        .await
        .unwrap());
    let revoked = s.management_key("mk1").await.unwrap().unwrap();
    assert_eq!(
        revoked.revoked_at,
        Some(at(1_770_000_000, 500_000_000)),
        "the first stands"
    );
    match s.revoke_management_key("nope", when, None).await {
        Err(StoreError::NotFound(what)) => assert_eq!(what, "management key nope"),
        other => panic!("revoking a missing management key: {other:?}"),
    }
    assert!(
        s.changes_since(feed).await.unwrap().is_empty(),
        "management keys are read on each call, never followed"
    );

    // Through the commands: the secret is shown once, only its hash kept; audited.
    let a = commands::Actor::cli();
    let req = commands::ManagementKeyRequest {
        workspace: "w2".into(),
        name: Some("reseller".into()),
        expires_at: None,
    };
    let made = commands::create_management_key(s, &a, req, Utc::now())
        .await
        .unwrap();
    assert!(made.secret.starts_with("mk-tg-"), "{}", made.secret);
    let stored = s.management_key(&made.key.key.id).await.unwrap().unwrap();
    assert!(!stored.secret_hash.contains(&made.secret));
    let found = commands::management_caller(s, &made.secret, Utc::now())
        .await
        .unwrap();
    assert_eq!(found, Some(stored));
    let sk = made.secret.replacen("mk-tg-", "sk-tg-", 1);
    assert_eq!(
        commands::management_caller(s, &sk, Utc::now())
            .await
            .unwrap(),
        None,
        "an API key's form is no management key"
    );
    commands::revoke_management_key(s, &a, &made.key.key.id, Utc::now())
        .await
        .unwrap();
    assert_eq!(
        commands::management_caller(s, &made.secret, Utc::now())
            .await
            .unwrap(),
        None,
        "revoked"
    );
    let actions = audit_actions(s).await;
    for want in ["management_key.create", "management_key.revoke"] {
        assert!(actions.contains(&want.to_owned()), "{want}: {actions:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Monthly partitions, archive and restore (issue 33)
// ---------------------------------------------------------------------------------------------

fn utc(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

/// PostgreSQL: `ensure_usage_partitions` makes the month of its time and the months ahead,
/// once; a record at the last microsecond of a month goes to that month's partition and the
/// next one's first to the next; the default partition stays empty until a record comes for a
/// month with no partition, which then cannot get one. SQLite has no partitions.
async fn partitions_are_made_ahead_and_split_at_the_month_boundary(b: Arc<Backend>) {
    let s = b.ready().await;
    billing_fixture(s).await;
    let last = utc("2030-01-31T23:59:59.999999Z");
    if !b.is_pg() {
        assert_eq!(s.ensure_usage_partitions(last, 1).await.unwrap(), 0);
        assert_eq!(s.default_partition_records().await.unwrap(), 0);
        return;
    }
    assert_eq!(s.ensure_usage_partitions(last, 1).await.unwrap(), 2);
    assert_eq!(s.ensure_usage_partitions(last, 1).await.unwrap(), 0);
    let first = utc("2030-02-01T00:00:00Z");
    let rec = |id: &str, t| {
        record(
            id,
            ("w1", "k2"),
            odd_pricing(),
            tokens(1, 0, 0, 2, 0),
            t,
            None,
        )
    };
    s.record_usage(&[rec("chatcmpl-jan", last), rec("chatcmpl-feb", first)])
        .await
        .unwrap();
    let in_partition = |table: &str, id: &str| format!("SELECT 1 FROM {table} WHERE id = '{id}'");
    assert_eq!(
        b.execute_raw(&in_partition("usage_records_2030_01", "chatcmpl-jan"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        b.execute_raw(&in_partition("usage_records_2030_02", "chatcmpl-feb"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        b.execute_raw(&in_partition("usage_records_2030_01", "chatcmpl-feb"))
            .await
            .unwrap(),
        0
    );
    assert_eq!(s.default_partition_records().await.unwrap(), 0);
    // Each partition refuses changes by its own name too (a parent's statement trigger does
    // not fire for a statement on a partition).
    for sql in [
        "DELETE FROM usage_records_2030_01",
        "TRUNCATE usage_records_2030_02",
        "UPDATE usage_records_2030_01 SET cost_pico = 0",
    ] {
        let e = b.execute_raw(sql).await.unwrap_err();
        assert!(e.to_string().contains("append-only"), "{sql}: {e}");
    }
    // A month nobody made a partition for lands in the default partition — loudly: it is
    // counted, and the month's partition can no longer be made over it.
    let stray = utc("2031-06-10T12:00:00Z");
    s.record_usage(&[rec("chatcmpl-stray", stray)])
        .await
        .unwrap();
    assert_eq!(s.default_partition_records().await.unwrap(), 1);
    assert!(s.ensure_usage_partitions(stray, 0).await.is_err());
    let verified = commands::verify_ledger(s).await.unwrap();
    assert!(verified.inconsistent.is_empty());
    assert_eq!(verified.default_partition_records, 1);
    assert!(!verified.is_clean());
    // Its month has no partition to drop: archiving it is refused (each month on its own:
    // the months before it with a partition are archived first), and it stays.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let actor = commands::Actor::cli();
    let later = utc("2031-07-15T00:00:00Z");
    let e = commands::archive_usage(s, &actor, "2031-07", dir.path(), later)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no partition"), "{e}");
    assert_eq!(s.default_partition_records().await.unwrap(), 1);
    let archived: Vec<String> = s
        .archived_months()
        .await
        .unwrap()
        .iter()
        .map(|m| m.month.to_string())
        .collect();
    assert_eq!(archived, ["2030-01", "2030-02"]);
    assert!(!dir.path().join("usage-2031-06.jsonl.zst").exists());
    let verified = commands::verify_ledger(s).await.unwrap();
    assert!(verified.inconsistent.is_empty(), "{verified:?}");
}

/// `/v1/generation`'s lookup: a record is found by id within a range of `finished_at` that
/// holds it, and not outside it (on PostgreSQL the range picks the partitions read).
async fn a_record_is_found_by_id_within_its_time_range(b: Arc<Backend>) {
    let s = b.ready().await;
    let records = three_months(s).await;
    let r = &records[3];
    let day = chrono::TimeDelta::days(1);
    let found = s
        .usage_record_within("w1", &r.id, r.finished_at - day, r.finished_at + day)
        .await
        .unwrap();
    assert_eq!(found.as_ref(), Some(r));
    // The range's end is exclusive, its start inclusive.
    let at_start = s
        .usage_record_within("w1", &r.id, r.finished_at, r.finished_at + day)
        .await
        .unwrap();
    assert_eq!(at_start.as_ref(), Some(r));
    for (from, to) in [
        (r.finished_at - day, r.finished_at),
        (
            r.finished_at + chrono::TimeDelta::microseconds(1),
            r.finished_at + day,
        ),
    ] {
        assert_eq!(
            s.usage_record_within("w1", &r.id, from, to).await.unwrap(),
            None
        );
    }
    // Another workspace's record is not found.
    let other = s
        .usage_record_within("w2", &r.id, r.finished_at - day, r.finished_at + day)
        .await
        .unwrap();
    assert_eq!(other, None);
}

/// Records of August, September (its last microsecond) and October 2026 in two workspaces.
async fn three_months(s: &dyn Store) -> Vec<UsageRecord> {
    billing_fixture(s).await;
    s.ensure_usage_partitions(utc("2026-08-01T00:00:00Z"), 3)
        .await
        .unwrap();
    let rec = |id: &str, ws: (&str, &str), n: u64, t: &str| {
        record(
            id,
            ws,
            odd_pricing(),
            tokens(n, 7, 3, n * 2, 1),
            utc(t),
            None,
        )
    };
    let records = vec![
        rec(
            "chatcmpl-a1",
            ("w1", "k2"),
            11,
            "2026-08-03T10:00:00.000001Z",
        ),
        rec(
            "chatcmpl-a2",
            ("w2", "k3"),
            13,
            "2026-08-31T23:59:59.999999Z",
        ),
        rec("chatcmpl-a3", ("w1", "k2"), 17, "2026-08-15T00:00:00Z"),
        rec(
            "chatcmpl-s1",
            ("w1", "k2"),
            19,
            "2026-09-30T23:59:59.999999Z",
        ),
        rec("chatcmpl-o1", ("w1", "k2"), 23, "2026-10-01T00:00:00Z"),
        rec("chatcmpl-o2", ("w2", "k3"), 29, "2026-10-20T08:00:00Z"),
    ];
    assert_eq!(s.record_usage(&records).await.unwrap(), 6);
    records
}

fn sorted(mut v: Vec<UsageRecord>) -> Vec<UsageRecord> {
    v.sort_by(|a, b| (a.finished_at, &a.id).cmp(&(b.finished_at, &b.id)));
    v
}

async fn all_usage(s: &dyn Store) -> Vec<UsageRecord> {
    let mut all = s.usage("w1", None).await.unwrap();
    all.extend(s.usage("w2", None).await.unwrap());
    sorted(all)
}

async fn books_balance(s: &dyn Store) {
    let verified = commands::verify_ledger(s).await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
    assert_eq!(verified.checked, 2);
}

async fn archive_drop_verify_restore_round_trip_is_exact(b: Arc<Backend>) {
    let s = b.ready().await;
    let records = three_months(s).await;
    let balances = s.balances().await.unwrap();
    books_balance(s).await;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let actor = commands::Actor::cli();
    let now = utc("2026-11-15T00:00:00Z");

    let archived = commands::archive_usage(s, &actor, "2026-10", dir.path(), now)
        .await
        .unwrap();
    let months: Vec<String> = archived
        .months
        .iter()
        .map(|m| m.month.to_string())
        .collect();
    assert_eq!(months, ["2026-08", "2026-09"]);
    assert_eq!(archived.months[0].records, 3);
    assert_eq!(
        archived.months[0].cost,
        sum(records[..3].iter().map(|r| r.cost))
    );
    // Only October is left; the books still balance, through the carried-forward totals.
    assert_eq!(all_usage(s).await, sorted(records[4..].to_vec()));
    books_balance(s).await;
    assert_eq!(s.balances().await.unwrap(), balances);
    let carried = s.archived_months().await.unwrap();
    assert_eq!(carried.len(), 2);
    let aug = &carried[0];
    assert_eq!(aug.month.to_string(), "2026-08");
    let w1: Vec<_> = aug
        .totals
        .iter()
        .map(|t| (t.workspace_id.as_str(), t.records, t.cost))
        .collect();
    assert_eq!(
        w1,
        [
            (
                "w1",
                2,
                records[0].cost.checked_add(records[2].cost).unwrap()
            ),
            ("w2", 1, records[1].cost)
        ]
    );
    if b.is_pg() {
        let gone = b.execute_raw("SELECT 1 FROM usage_records_2026_08").await;
        assert!(gone.is_err(), "the partition is dropped");
    }
    // The manifest tells what the file holds, exactly.
    let text = std::fs::read_to_string(dir.path().join("usage-2026-08.manifest.json")).unwrap();
    let manifest: commands::Manifest = serde_json::from_str(&text).unwrap();
    assert_eq!(manifest.records, 3);
    assert_eq!(manifest.totals, aug.totals);
    assert_eq!(manifest.sha256.len(), 64);
    // Nothing more to archive; an archive is never overwritten.
    let again = commands::archive_usage(s, &actor, "2026-10", dir.path(), now)
        .await
        .unwrap();
    assert!(again.months.is_empty());

    // A file that does not match its manifest is refused, and changes nothing.
    let aug_file = dir.path().join("usage-2026-08.jsonl.zst");
    let tampered = dir.path().join("tampered");
    std::fs::create_dir(&tampered).unwrap();
    let bad = tampered.join("usage-2026-08.jsonl.zst");
    let mut bytes = std::fs::read(&aug_file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&bad, bytes).unwrap();
    std::fs::copy(
        dir.path().join("usage-2026-08.manifest.json"),
        tampered.join("usage-2026-08.manifest.json"),
    )
    .unwrap();
    let refused = commands::restore_usage(s, &actor, &bad).await.unwrap_err();
    assert!(refused.to_string().contains("SHA-256"), "{refused}");
    assert_eq!(s.archived_months().await.unwrap().len(), 2);

    // Restored, August counts once: in its records, no longer in the carried totals.
    let restored = commands::restore_usage(s, &actor, &aug_file).await.unwrap();
    assert_eq!(restored.records, 3);
    books_balance(s).await;
    assert_eq!(s.archived_months().await.unwrap().len(), 1);
    let twice = commands::restore_usage(s, &actor, &aug_file)
        .await
        .unwrap_err();
    assert!(twice.to_string().contains("do not match"), "{twice}");
    books_balance(s).await;
    commands::restore_usage(s, &actor, &dir.path().join("usage-2026-09.jsonl.zst"))
        .await
        .unwrap();
    // Every record back, field for field, to the pico-USD.
    assert_eq!(all_usage(s).await, sorted(records.clone()));
    assert!(s.archived_months().await.unwrap().is_empty());
    books_balance(s).await;
    assert_eq!(s.balances().await.unwrap(), balances);
    // A restored month is immutable again, and can be archived again.
    let e = b
        .execute_raw("DELETE FROM usage_records WHERE id = 'chatcmpl-a1'")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("append-only"), "{e}");
    let dir2 = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let again = commands::archive_usage(s, &actor, "2026-09", dir2.path(), now)
        .await
        .unwrap();
    assert_eq!(again.months.len(), 1);
    books_balance(s).await;
    let actions = audit_actions(s).await;
    assert_eq!(actions.iter().filter(|a| *a == "usage.archive").count(), 3);
    assert_eq!(actions.iter().filter(|a| *a == "usage.restore").count(), 2);
}

async fn archiving_the_current_month_is_refused(b: Arc<Backend>) {
    let s = b.ready().await;
    three_months(s).await;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let actor = commands::Actor::cli();
    // On 2026-10-15, October is not over: --before 2026-11 is refused, nothing written.
    let now = utc("2026-10-15T00:00:00Z");
    let e = commands::archive_usage(s, &actor, "2026-11", dir.path(), now)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not over"), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // The store refuses it on its own too.
    let october = tollgate::store::ArchivedMonth {
        month: "2026-10".parse().unwrap(),
        totals: vec![],
    };
    let e = s
        .archive_usage_month(&october, now, None)
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
    // Totals that differ from the store's are refused, changing nothing.
    let wrong = tollgate::store::ArchivedMonth {
        month: "2026-08".parse().unwrap(),
        totals: vec![],
    };
    let e = s.archive_usage_month(&wrong, now, None).await.unwrap_err();
    assert!(e.to_string().contains("do not match"), "{e}");
    assert_eq!(all_usage(s).await.len(), 6);
    assert!(s.archived_months().await.unwrap().is_empty());
    // --before this month archives up to last month.
    let done = commands::archive_usage(s, &actor, "2026-10", dir.path(), now)
        .await
        .unwrap();
    assert_eq!(done.months.len(), 2);
    books_balance(s).await;
}

async fn an_archive_that_cannot_be_written_changes_nothing(b: Arc<Backend>) {
    let s = b.ready().await;
    let records = three_months(s).await;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // A regular file where the archive's directory should be: nothing can be written there.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let actor = commands::Actor::cli();
    let now = utc("2026-11-15T00:00:00Z");
    for to in [blocker.clone(), blocker.join("sub")] {
        assert!(commands::archive_usage(s, &actor, "2026-10", &to, now)
            .await
            .is_err());
    }
    assert_eq!(all_usage(s).await, sorted(records.clone()));
    assert!(s.archived_months().await.unwrap().is_empty());
    books_balance(s).await;
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // The records' file written, its manifest cannot be (a directory holds its temporary
    // name): the month stays, and the file written is removed.
    let to = dir.path().join("half");
    std::fs::create_dir_all(to.join("usage-2026-08.manifest.json.partial")).unwrap();
    assert!(commands::archive_usage(s, &actor, "2026-10", &to, now)
        .await
        .is_err());
    assert!(!to.join("usage-2026-08.jsonl.zst").exists());
    assert!(!to.join("usage-2026-08.jsonl.zst.partial").exists());
    assert_eq!(all_usage(s).await, sorted(records));
    assert!(s.archived_months().await.unwrap().is_empty());
    books_balance(s).await;
}
