//! The operations against a real (temporary SQLite) store, as the CLI and the admin API use them.

use std::path::Path;
use std::sync::Arc;

use chrono::Utc;

use super::*;
use crate::money::usd;
use crate::store::{self, LimitReset, Store};

/// A migrated store in a temporary directory (kept alive by the returned guard).
async fn store() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = store::open(&url).await.unwrap();
    migrate(store.as_ref()).await.unwrap();
    (store, dir)
}

fn catalog_file() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/conf/catalog.yaml"))
}

fn invalid(e: CommandError) -> String {
    match e {
        CommandError::Invalid(m) => m,
        other => panic!("expected an invalid input, got {other:?}"),
    }
}

#[tokio::test]
async fn workspaces_are_created_and_listed() {
    let (s, _dir) = store().await;
    let ws = create_workspace(s.as_ref(), &Actor::cli(), "acme")
        .await
        .unwrap();
    assert!(ws.id.starts_with("ws_"), "{}", ws.id);
    let list = list_workspaces(s.as_ref()).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].id.as_str(), list[0].name.as_str()),
        (ws.id.as_str(), "acme")
    );
}

#[tokio::test]
async fn a_key_is_minted_with_the_prefix_and_only_its_hash_kept() {
    let (s, _dir) = store().await;
    let ws = create_workspace(s.as_ref(), &Actor::cli(), "acme")
        .await
        .unwrap();
    let req = KeyRequest {
        workspace: ws.id.clone(),
        name: Some("ci".into()),
        spend_limit_usd: Some("2.50".into()),
        limit_reset: Some(LimitReset::Daily),
        ..KeyRequest::default()
    };
    let created = create_key(s.as_ref(), &Actor::cli(), "sk-test-", req)
        .await
        .unwrap();
    assert!(created.secret.starts_with("sk-test-"));
    assert!(!created.key.secret_hash.contains(&created.secret));
    assert_eq!(created.key.spend_limit, Some("2.5".parse().unwrap()));
    let json = serde_json::to_value(&created).unwrap();
    assert_eq!(
        json["secret"],
        created.secret.as_str(),
        "the secret beside the key's fields"
    );
    assert_eq!(
        json["id"],
        created.key.id.as_str(),
        "the key's fields are flattened"
    );
    let keys = list_keys(s.as_ref(), &ws.id).await.unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].name.as_deref(), Some("ci"));
}

#[tokio::test]
async fn key_inputs_are_checked() {
    let (s, _dir) = store().await;
    let ws = create_workspace(s.as_ref(), &Actor::cli(), "acme")
        .await
        .unwrap();
    let with_limit = |usd: &str, reset: Option<LimitReset>| KeyRequest {
        workspace: ws.id.clone(),
        spend_limit_usd: Some(usd.into()),
        limit_reset: reset,
        ..KeyRequest::default()
    };
    let e = create_key(
        s.as_ref(),
        &Actor::cli(),
        "sk-",
        with_limit("0", Some(LimitReset::Weekly)),
    )
    .await
    .unwrap_err();
    assert_eq!(invalid(e), "--spend-limit-usd must be positive");
    let e = create_key(s.as_ref(), &Actor::cli(), "sk-", with_limit("1", None))
        .await
        .unwrap_err();
    assert!(invalid(e).contains("reset period"));
    let e = create_key(
        s.as_ref(),
        &Actor::cli(),
        "sk-",
        with_limit("1.2.3", Some(LimitReset::Daily)),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, CommandError::Money(_)), "{e:?}");
    assert!(
        list_keys(s.as_ref(), &ws.id).await.unwrap().is_empty(),
        "nothing created"
    );
}

#[tokio::test]
async fn revoking_twice_changes_once() {
    let (s, _dir) = store().await;
    let ws = create_workspace(s.as_ref(), &Actor::cli(), "acme")
        .await
        .unwrap();
    let req = KeyRequest {
        workspace: ws.id,
        ..KeyRequest::default()
    };
    let key = create_key(s.as_ref(), &Actor::cli(), "sk-", req)
        .await
        .unwrap()
        .key;
    let first = revoke_key(s.as_ref(), &Actor::cli(), &key.id, Utc::now())
        .await
        .unwrap();
    let again = revoke_key(s.as_ref(), &Actor::cli(), &key.id, Utc::now())
        .await
        .unwrap();
    assert!(first.revoked && first.changed);
    assert!(again.revoked && !again.changed);
}

#[tokio::test]
async fn credit_is_exact_and_positive_and_the_books_balance() {
    let (s, _dir) = store().await;
    let ws = create_workspace(s.as_ref(), &Actor::cli(), "acme")
        .await
        .unwrap();
    let e = add_credit(s.as_ref(), &Actor::cli(), &ws.id, "0", None)
        .await
        .unwrap_err();
    assert_eq!(invalid(e), "--usd must be positive");
    let e = add_credit(s.as_ref(), &Actor::cli(), &ws.id, "-3", None)
        .await
        .unwrap_err();
    assert_eq!(invalid(e), "--usd must be positive");
    add_credit(s.as_ref(), &Actor::cli(), &ws.id, "7", Some("first"))
        .await
        .unwrap();
    let c = add_credit(s.as_ref(), &Actor::cli(), &ws.id, "3.000000000001", None)
        .await
        .unwrap();
    assert_eq!(c.balance.pico(), usd(10).pico() + 1, "to the pico");
    let l = ledger(s.as_ref(), &ws.id).await.unwrap();
    assert_eq!((l.entries.len(), l.balance), (2, c.balance));
    assert_eq!(l.entries[0].note.as_deref(), Some("first"));
    let v = verify_ledger(s.as_ref()).await.unwrap();
    assert_eq!((v.checked, v.inconsistent.len()), (1, 0));
    assert!(usage(s.as_ref(), &ws.id, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_default_catalog_is_imported_once_into_an_empty_store() {
    let (s, _dir) = store().await;
    let file = catalog_file().to_str().unwrap();
    prepare_store(s.as_ref(), file).await.unwrap();
    let rows = list_catalog(s.as_ref()).await.unwrap();
    assert!(!rows.models.is_empty(), "imported at first start");
    let imported = import_catalog(s.as_ref(), &Actor::cli(), catalog_file())
        .await
        .unwrap();
    assert_eq!(
        imported.models,
        rows.models.len(),
        "a re-import upserts the same models"
    );
    prepare_store(s.as_ref(), file).await.unwrap();
    assert_eq!(
        list_catalog(s.as_ref()).await.unwrap().models.len(),
        rows.models.len()
    );
    assert_eq!(
        migrate(s.as_ref()).await.unwrap().applied,
        0,
        "migrations are idempotent"
    );
}

/// A workspace with one working key (`name`, optional original expiry).
async fn one_key(
    s: &dyn Store,
    expires_at: Option<chrono::DateTime<Utc>>,
) -> (String, crate::store::ApiKey) {
    let ws = create_workspace(s, &Actor::cli(), "acme").await.unwrap();
    let req = KeyRequest {
        workspace: ws.id.clone(),
        name: Some("svc".into()),
        expires_at,
        ..KeyRequest::default()
    };
    let key = create_key(s, &Actor::cli(), "sk-", req).await.unwrap().key;
    (ws.id, key)
}

async fn actions(s: &dyn Store, ws: &str) -> Vec<String> {
    audit_log(s, Some(ws), &PageRequest::default())
        .await
        .unwrap()
        .data
        .into_iter()
        .map(|e| e.action)
        .collect()
}

#[tokio::test]
async fn a_huge_grace_is_refused_before_anything_changes() {
    let (s, _dir) = store().await;
    let (ws, key) = one_key(s.as_ref(), None).await;
    let huge = std::time::Duration::from_secs(10_000_000_000_000);
    for grace in [huge, MAX_GRACE + std::time::Duration::from_secs(1)] {
        let e = rotate_key(
            s.as_ref(),
            &Actor::cli(),
            "sk-",
            &key.id,
            Some(grace),
            Utc::now(),
        )
        .await
        .unwrap_err();
        assert!(invalid(e).contains("grace"));
    }
    assert_eq!(
        list_keys(s.as_ref(), &ws).await.unwrap(),
        std::slice::from_ref(&key)
    );
    assert_eq!(
        actions(s.as_ref(), &ws).await,
        ["key.create", "workspace.create"]
    );
    // The longest grace allowed works.
    rotate_key(
        s.as_ref(),
        &Actor::cli(),
        "sk-",
        &key.id,
        Some(MAX_GRACE),
        Utc::now(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn rotation_is_total_at_the_end_of_time() {
    let (s, _dir) = store().await;
    let (_, key) = one_key(s.as_ref(), None).await;
    let end = chrono::DateTime::<Utc>::MAX_UTC - chrono::Duration::seconds(10);
    let grace = Some(std::time::Duration::from_secs(3600));
    let e = rotate_key(s.as_ref(), &Actor::cli(), "sk-", &key.id, grace, end)
        .await
        .unwrap_err();
    assert!(invalid(e).contains("grace"));
}

#[tokio::test]
async fn a_key_in_its_grace_period_is_not_rotated_again() {
    let (s, _dir) = store().await;
    let (ws, key) = one_key(s.as_ref(), None).await;
    let grace = Some(std::time::Duration::from_secs(3600));
    let now = Utc::now();
    let r = rotate_key(s.as_ref(), &Actor::cli(), "sk-", &key.id, grace, now)
        .await
        .unwrap();
    assert_eq!(r.key.expires_at, None, "the replacement inherits no grace");
    assert!(r.old.expires_at.is_some());
    let e = rotate_key(s.as_ref(), &Actor::cli(), "sk-", &key.id, grace, now)
        .await
        .unwrap_err();
    match e {
        CommandError::Conflict(m) => assert!(m.contains("replacement"), "{m}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(list_keys(s.as_ref(), &ws).await.unwrap().len(), 2);
    // Its replacement rotates.
    rotate_key(s.as_ref(), &Actor::cli(), "sk-", &r.key.id, None, now)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_replacement_keeps_the_original_expiry_and_one_audit_entry_is_written() {
    let (s, _dir) = store().await;
    let now = Utc::now();
    let original = now + chrono::Duration::days(10);
    let (ws, key) = one_key(s.as_ref(), Some(original)).await;
    let grace = Some(std::time::Duration::from_secs(3600));
    let r = rotate_key(s.as_ref(), &Actor::cli(), "sk-", &key.id, grace, now)
        .await
        .unwrap();
    assert_eq!(r.key.expires_at, key.expires_at, "the original expiry");
    assert!(r.old.expires_at < key.expires_at, "the grace is shorter");
    assert_eq!(
        actions(s.as_ref(), &ws).await,
        ["key.rotate", "key.create", "workspace.create"],
        "one entry for the rotation"
    );
}

#[tokio::test]
async fn names_and_notes_refuse_control_characters() {
    let (s, _dir) = store().await;
    let a = Actor::cli();
    let ws = create_workspace(s.as_ref(), &a, "acme").await.unwrap();
    for bad in [
        "\u{1b}[31mred",
        "a\nb",
        "tab\there",
        "\u{202e}txt.exe",
        "x\u{2066}y",
        "nul\0",
    ] {
        let e = create_workspace(s.as_ref(), &a, bad).await.unwrap_err();
        assert!(invalid(e).starts_with("name:"), "{bad:?}");
        let e = rename_workspace(s.as_ref(), &a, &ws.id, bad)
            .await
            .unwrap_err();
        assert!(invalid(e).starts_with("name:"), "{bad:?}");
        let req = KeyRequest {
            workspace: ws.id.clone(),
            name: Some(bad.into()),
            ..KeyRequest::default()
        };
        let e = create_key(s.as_ref(), &a, "sk-", req).await.unwrap_err();
        assert!(invalid(e).starts_with("name:"), "{bad:?}");
        let e = add_credit(s.as_ref(), &a, &ws.id, "1", Some(bad))
            .await
            .unwrap_err();
        assert!(invalid(e).starts_with("note:"), "{bad:?}");
    }
    assert!(list_keys(s.as_ref(), &ws.id).await.unwrap().is_empty());
    assert_eq!(ledger(s.as_ref(), &ws.id).await.unwrap().entries.len(), 0);
    // Ordinary text, accents and emoji included, is kept.
    let ok = create_workspace(s.as_ref(), &a, "Café 東京 🚀")
        .await
        .unwrap();
    assert_eq!(ok.name, "Café 東京 🚀");
}

#[tokio::test]
async fn a_credit_past_the_largest_balance_is_refused_as_invalid() {
    let (s, _dir) = store().await;
    let (ws, _) = one_key(s.as_ref(), None).await;
    add_credit(s.as_ref(), &Actor::cli(), &ws, "9000000", None)
        .await
        .unwrap();
    let e = add_credit(s.as_ref(), &Actor::cli(), &ws, "9000000", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            CommandError::Store(crate::store::StoreError::Overflow(_))
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("balance"), "{e}");
    let l = ledger(s.as_ref(), &ws).await.unwrap();
    assert_eq!((l.entries.len(), l.balance), (1, usd(9_000_000)));
    assert_eq!(actions(s.as_ref(), &ws).await[0], "credit.add");
    assert_eq!(
        actions(s.as_ref(), &ws).await.len(),
        3,
        "no entry for the refusal"
    );
}

#[tokio::test]
async fn an_expiry_out_of_the_databases_range_is_refused() {
    let (s, _dir) = store().await;
    let ws = create_workspace(s.as_ref(), &Actor::cli(), "acme")
        .await
        .unwrap();
    for at in [
        chrono::DateTime::<Utc>::MIN_UTC,
        chrono::DateTime::<Utc>::MAX_UTC,
    ] {
        let req = KeyRequest {
            workspace: ws.id.clone(),
            expires_at: Some(at),
            ..KeyRequest::default()
        };
        let e = create_key(s.as_ref(), &Actor::cli(), "sk-", req)
            .await
            .unwrap_err();
        assert!(invalid(e).starts_with("expires_at:"));
    }
    assert!(list_keys(s.as_ref(), &ws.id).await.unwrap().is_empty());
}

#[test]
fn model_patch_prices_are_read_from_their_exact_text() {
    let patch = |json: &str| serde_json::from_str::<super::ModelPatch>(json);
    let p = patch(r#"{"input_price": 0.35, "output_price": "1.25"}"#).unwrap();
    assert_eq!(p.input_price.map(|p| p.micro_per_mtok()), Some(350_000));
    assert_eq!(p.output_price.map(|p| p.micro_per_mtok()), Some(1_250_000));
    // A double would read this as 0.1 and store it silently.
    let err = patch(r#"{"input_price": 0.1000000000000000001}"#).unwrap_err();
    assert!(err.to_string().contains("decimal places"), "{err}");
    assert!(patch(r#"{"cache_read_price": null}"#)
        .unwrap()
        .cache_read_price
        .is_none());
}

#[tokio::test]
async fn an_import_whose_alias_names_a_stored_model_is_refused_whole() {
    let (s, dir) = store().await;
    import_catalog(s.as_ref(), &Actor::cli(), catalog_file())
        .await
        .unwrap();
    let before = list_catalog(s.as_ref()).await.unwrap();
    let file = dir.path().join("mine.yaml");
    let model = |id: &str, aliases: &str| {
        format!(
            "  - {{id: {id}, provider: acme, family: openai, kind: chat, upstream_model: m, \
             input_price: 1, output_price: 1, aliases: [{aliases}]}}\n"
        )
    };
    std::fs::write(
        &file,
        format!(
            "models:\n{}{}",
            model("acme/fine", "fine"),
            model("acme/sonnet", "claude-sonnet-4-5-20250929")
        ),
    )
    .unwrap();
    let err = match import_catalog(s.as_ref(), &Actor::cli(), &file).await {
        Err(CommandError::Import(e)) => e.to_string(),
        other => panic!("expected a refused import, got {other:?}"),
    };
    assert_eq!(
        err,
        r#"model acme/sonnet: alias "claude-sonnet-4-5-20250929" is already model anthropic/claude-sonnet-4-5's alias; an alias must name one model only"#
    );
    assert_eq!(
        list_catalog(s.as_ref()).await.unwrap(),
        before,
        "nothing of the file was written"
    );

    // The same file with a model of its own name: imported, aliases and all.
    std::fs::write(
        &file,
        format!("models:\n{}", model("acme/fine", "fine, fine-2")),
    )
    .unwrap();
    import_catalog(s.as_ref(), &Actor::cli(), &file)
        .await
        .unwrap();
    let rows = list_catalog(s.as_ref()).await.unwrap();
    let fine = rows.models.iter().find(|m| m.id == "acme/fine").unwrap();
    assert_eq!(fine.aliases, ["fine", "fine-2"]);
}

#[tokio::test]
async fn an_update_changes_only_what_it_names_and_keeps_a_limits_period() {
    let (s, _dir) = store().await;
    let a = Actor::cli();
    let ws = create_workspace(s.as_ref(), &a, "acme").await.unwrap();
    let req = KeyRequest {
        workspace: ws.id.clone(),
        name: Some("ci".into()),
        allowed_models: vec![" google/* ".into(), "google/*".into()],
        ..KeyRequest::default()
    };
    let key = create_key(s.as_ref(), &a, "sk-", req).await.unwrap().key;
    assert_eq!(key.allowed_models, ["google/*"], "trimmed, once");

    let patch = |f: fn(&mut KeyPatch)| {
        let mut p = KeyPatch::default();
        f(&mut p);
        p
    };
    let same = update_key(s.as_ref(), &a, &key.id, KeyPatch::default())
        .await
        .unwrap();
    assert_eq!(same, key, "an empty patch changes nothing");

    // A limit is given with its period, then raised; the name is cleared.
    let e = update_key(
        s.as_ref(),
        &a,
        &key.id,
        patch(|p| p.spend_limit_usd = Some("5".into())),
    )
    .await
    .unwrap_err();
    assert!(invalid(e).contains("reset period"));
    let limited = update_key(
        s.as_ref(),
        &a,
        &key.id,
        patch(|p| {
            p.spend_limit_usd = Some("5".into());
            p.limit_reset = Some(LimitReset::Daily);
            p.name = Some(None);
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        (limited.spend_limit, limited.limit_reset, limited.name),
        (Some(usd(5)), Some(LimitReset::Daily), None)
    );
    assert_eq!(limited.allowed_models, ["google/*"], "left as it was");
    let raised = update_key(
        s.as_ref(),
        &a,
        &key.id,
        patch(|p| p.spend_limit_usd = Some("7.25".into())),
    )
    .await
    .unwrap();
    assert_eq!(raised.spend_limit, Some("7.25".parse().unwrap()));

    // The period is fixed once set; zero and nonsense are refused; a bad pattern too.
    let e = update_key(
        s.as_ref(),
        &a,
        &key.id,
        patch(|p| p.limit_reset = Some(LimitReset::Monthly)),
    )
    .await
    .unwrap_err();
    assert!(invalid(e).contains("fixed once set"));
    let same_period = update_key(
        s.as_ref(),
        &a,
        &key.id,
        patch(|p| p.limit_reset = Some(LimitReset::Daily)),
    )
    .await;
    assert!(same_period.is_ok(), "naming the period it has is no change");
    let e = update_key(
        s.as_ref(),
        &a,
        &key.id,
        patch(|p| p.spend_limit_usd = Some("0".into())),
    )
    .await
    .unwrap_err();
    assert!(invalid(e).contains("positive"));
    let e = update_key(
        s.as_ref(),
        &a,
        &key.id,
        patch(|p| p.allowed_models = Some(vec!["a b".into()])),
    )
    .await
    .unwrap_err();
    assert!(invalid(e).starts_with("allowed_models"));

    // An empty list allows every model again.
    let open = update_key(
        s.as_ref(),
        &a,
        &key.id,
        patch(|p| p.allowed_models = Some(Vec::new())),
    )
    .await
    .unwrap();
    assert!(open.allowed_models.is_empty());
    assert_eq!(open.spend_limit, Some("7.25".parse().unwrap()));

    let log = audit_log(s.as_ref(), Some(&ws.id), &PageRequest::default())
        .await
        .unwrap();
    let updates = log.data.iter().filter(|e| e.action == "key.update").count();
    assert_eq!(updates, 5, "each change audited, refusals not");
    let missing = update_key(s.as_ref(), &a, "key_nope", KeyPatch::default()).await;
    assert!(matches!(
        missing,
        Err(CommandError::Store(crate::store::StoreError::NotFound(_)))
    ));
}
