//! Reading a catalog file (`conf/catalog.yaml`): `models:` and `routes:` lists shaped like the
//! store rows, validated before anything is written.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::money::Price;
use crate::store::{CatalogRows, ModelRow};

use super::{Family, Profile, RouteApi, RouteKind};

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{file}: {path}: {message}")]
    Parse {
        file: String,
        path: String,
        message: String,
    },
    #[error("{0}")]
    Invalid(String),
}

pub fn read_file(path: &Path) -> Result<CatalogRows, ImportError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ImportError::Read(file.clone(), e))?;
    let rows: CatalogRows = serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(
        &text,
    ))
    .map_err(|e| ImportError::Parse {
        file: file.clone(),
        path: e.path().to_string(),
        message: e.into_inner().to_string(),
    })?;
    validate(&rows)?;
    Ok(rows)
}

/// Checks what the database cannot: known families, kinds and route kinds, routes that point
/// at models of a family they can carry, and aliases that each name one model.
pub fn validate(rows: &CatalogRows) -> Result<(), ImportError> {
    for p in &rows.profiles {
        serde_json::from_value::<Profile>(p.spec.clone())
            .map_err(|e| ImportError::Invalid(format!("profile {}: {e}", p.name)))?;
    }
    let mut ids = HashSet::new();
    for m in &rows.models {
        let family = Family::parse(&m.family).ok_or_else(|| {
            ImportError::Invalid(format!("model {}: unknown family {:?}", m.id, m.family))
        })?;
        if !matches!(m.kind.as_str(), "chat" | "embedding") {
            return Err(ImportError::Invalid(format!(
                "model {}: kind must be chat or embedding",
                m.id
            )));
        }
        if !m.id.contains('/') {
            return Err(ImportError::Invalid(format!(
                "model {}: id must be provider/model",
                m.id
            )));
        }
        if !ids.insert(m.id.as_str()) {
            return Err(ImportError::Invalid(format!("model {} listed twice", m.id)));
        }
        if let Some((name, price)) = prices(m).find(|(_, p)| *p > Price::MAX) {
            return Err(ImportError::Invalid(format!(
                "model {}: {name} {price} USD per 1M tokens is above the most a catalog \
                 accepts ({} USD)",
                m.id,
                Price::MAX
            )));
        }
        if m.long_context.as_ref().is_some_and(|l| l.above == 0) {
            return Err(ImportError::Invalid(format!(
                "model {}: long_context.above must be a positive token count",
                m.id
            )));
        }
        let _ = family;
    }
    check_names(&rows.models)?;
    for r in &rows.routes {
        let kind = RouteKind::parse(&r.kind).ok_or_else(|| {
            ImportError::Invalid(format!(
                "route for {}: unknown kind {:?}",
                r.model_id, r.kind
            ))
        })?;
        let Some(model) = rows.models.iter().find(|m| m.id == r.model_id) else {
            return Err(ImportError::Invalid(format!(
                "route for unknown model {}",
                r.model_id
            )));
        };
        if Family::parse(&model.family) != Some(kind.family()) {
            return Err(ImportError::Invalid(format!(
                "route {} cannot carry {} (family {})",
                r.kind, model.id, model.family
            )));
        }
        match RouteApi::parse(&r.api) {
            None => {
                return Err(ImportError::Invalid(format!(
                    "route {} of {}: api must be chat or responses, not {:?}",
                    r.kind, r.model_id, r.api
                )))
            }
            Some(RouteApi::Responses) if kind != RouteKind::OpenAi => {
                return Err(ImportError::Invalid(format!(
                    "route {} of {}: api responses is for openai routes only (the Responses \
                     API is OpenAI's; other families are translated)",
                    r.kind, r.model_id
                )))
            }
            Some(_) => {}
        }
        if let Some(url) = &r.base_url {
            super::Endpoint::parse(url)
                .map_err(|e| ImportError::Invalid(format!("route for {}: {e}", r.model_id)))?;
        }
        if r.upstream_model.as_deref().is_some_and(str::is_empty) {
            return Err(ImportError::Invalid(format!(
                "route {} of {}: upstream_model must not be empty",
                r.kind, r.model_id
            )));
        }
        if !(1..=1000).contains(&r.weight) {
            return Err(ImportError::Invalid(format!(
                "route {} of {}: weight {} is not between 1 and 1000",
                r.kind, r.model_id, r.weight
            )));
        }
    }
    Ok(())
}

/// Checks that every alias is a usable name (not empty, no whitespace) and that every id and
/// alias of `models` names one model only: an alias may be neither another alias (of any
/// model, its own included) nor an id (its own included). Ids are unique already
/// ([`validate`]); inactive models count, since activating one must not make a name ambiguous.
pub fn check_names(models: &[ModelRow]) -> Result<(), ImportError> {
    let mut owners: HashMap<&str, (&str, &str)> = models
        .iter()
        .map(|m| (m.id.as_str(), (m.id.as_str(), "id")))
        .collect();
    for m in models {
        for alias in &m.aliases {
            if alias.is_empty() {
                return Err(ImportError::Invalid(format!(
                    "model {}: an alias must not be empty",
                    m.id
                )));
            }
            if alias.chars().any(char::is_whitespace) {
                return Err(ImportError::Invalid(format!(
                    "model {}: alias {alias:?} must not contain whitespace",
                    m.id
                )));
            }
            if let Some((owner, what)) = owners.insert(alias, (&m.id, "alias")) {
                let whose = if owner == m.id {
                    "its own".to_owned()
                } else {
                    format!("model {owner}'s")
                };
                return Err(ImportError::Invalid(format!(
                    "model {}: alias {alias:?} is already {whose} {what}; an alias must name one \
                     model only",
                    m.id
                )));
            }
        }
    }
    Ok(())
}

/// The catalog `incoming` would leave in a store holding `current`: its models replace those
/// of the same id, the others stay. What [`check_names`] must hold for before an import.
pub fn merged_models(current: &CatalogRows, incoming: &CatalogRows) -> Vec<ModelRow> {
    let replaced: HashSet<&str> = incoming.models.iter().map(|m| m.id.as_str()).collect();
    current
        .models
        .iter()
        .filter(|m| !replaced.contains(m.id.as_str()))
        .chain(&incoming.models)
        .cloned()
        .collect()
}

/// Every price of a model row, named as in the catalog file.
fn prices(m: &ModelRow) -> impl Iterator<Item = (&'static str, Price)> + '_ {
    let long = m.long_context.as_ref();
    [
        ("input_price", Some(m.input_price)),
        ("output_price", Some(m.output_price)),
        ("cache_read_price", m.cache_read_price),
        ("cache_write_price", m.cache_write_price),
        ("cache_write_1h_price", m.cache_write_1h_price),
        ("audio_input_price", m.audio_input_price),
        ("cache_storage_price", m.cache_storage_price),
        ("long_context.input_price", long.map(|l| l.input_price)),
        ("long_context.output_price", long.map(|l| l.output_price)),
        (
            "long_context.cache_read_price",
            long.and_then(|l| l.cache_read_price),
        ),
        (
            "long_context.cache_write_price",
            long.and_then(|l| l.cache_write_price),
        ),
        (
            "long_context.cache_write_1h_price",
            long.and_then(|l| l.cache_write_1h_price),
        ),
    ]
    .into_iter()
    .filter_map(|(name, p)| Some((name, p?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_catalog_is_valid() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/catalog.yaml");
        let rows = read_file(Path::new(path)).unwrap();
        let has = |id: &str| rows.models.iter().any(|m| m.id == id);
        assert!(has("google/text-embedding-004"));
        assert!(rows
            .models
            .iter()
            .any(|m| m.family == "gemini" && m.profile.starts_with("gemini-2.5")));
        assert!(rows
            .models
            .iter()
            .any(|m| m.family == "gemini" && m.profile.starts_with("gemini-3")));
        assert!(rows.models.iter().any(|m| m.family == "anthropic"));
        assert!(
            rows.models.iter().all(|m| m.family != "openai"),
            "openai-compatible models are added by operators"
        );
        for m in &rows.models {
            assert!(
                rows.routes.iter().any(|r| r.model_id == m.id),
                "{} has no route",
                m.id
            );
        }
    }

    #[test]
    fn retired_and_deprecated_models_carry_their_dates() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/catalog.yaml");
        let rows = read_file(Path::new(path)).unwrap();
        let day = |id: &str| {
            let m = rows.models.iter().find(|m| m.id == id).unwrap();
            (m.active, m.shutdown.map(|d| d.to_string()))
        };
        assert_eq!(
            day("google/gemini-2.0-flash"),
            (false, Some("2026-06-01".into()))
        );
        assert_eq!(
            day("google/gemini-3-pro-preview"),
            (false, Some("2026-03-09".into()))
        );
        assert_eq!(
            day("anthropic/claude-opus-4-1"),
            (false, Some("2026-08-05".into()))
        );
        assert_eq!(
            day("google/gemini-2.5-pro"),
            (true, Some("2026-12-01".into()))
        );
        assert_eq!(
            day("anthropic/claude-sonnet-4-5"),
            (true, Some("2026-11-30".into()))
        );
        assert!(
            rows.models
                .iter()
                .all(|m| m.source.as_deref().is_some_and(|s| !s.is_empty())),
            "every model says where its figures come from"
        );
    }

    #[test]
    fn claude_models_answer_to_the_ids_anthropic_gives_them() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/catalog.yaml");
        let rows = read_file(Path::new(path)).unwrap();
        let aliases = |id: &str| {
            let m = rows.models.iter().find(|m| m.id == id).unwrap();
            m.aliases.clone()
        };
        assert_eq!(
            aliases("anthropic/claude-sonnet-4-5"),
            ["claude-sonnet-4-5", "claude-sonnet-4-5-20250929"]
        );
        assert_eq!(
            aliases("anthropic/claude-haiku-4-5"),
            ["claude-haiku-4-5", "claude-haiku-4-5-20251001"]
        );
        assert_eq!(aliases("google/gemini-2.5-flash"), ["gemini-2.5-flash"]);
        for m in &rows.models {
            let bare = m.id.split_once('/').unwrap().1;
            assert!(
                m.aliases.iter().any(|a| a == bare),
                "{} answers to {bare}",
                m.id
            );
            // A dated alias is the model's Vertex `name@date` with Anthropic's dash: the date
            // is one the catalog itself records, never a guess.
            for dated in m.aliases.iter().filter(|a| *a != bare) {
                let vertex = dated.replacen(&format!("{bare}-"), &format!("{bare}@"), 1);
                assert!(
                    rows.routes
                        .iter()
                        .any(|r| r.model_id == m.id && r.upstream_model.as_ref() == Some(&vertex)),
                    "{}: {dated} is no route's {vertex}",
                    m.id
                );
            }
        }
    }

    /// Two models, `a/one` and `a/two`, with the given aliases.
    fn two_models(one: &[&str], two: &[&str]) -> CatalogRows {
        let model = |id: &str, aliases: &[&str]| {
            format!(
                "{{id: {id}, provider: a, family: openai, kind: chat, upstream_model: x, \
                 input_price: 1, output_price: 1, aliases: {}}}",
                serde_json::to_string(aliases).unwrap()
            )
        };
        serde_yaml::from_str(&format!(
            "models: [{}, {}]",
            model("a/one", one),
            model("a/two", two)
        ))
        .unwrap()
    }

    #[test]
    fn an_alias_names_one_model_only() {
        assert!(validate(&two_models(&["one", "one-2025"], &["two"])).is_ok());
        assert!(validate(&two_models(&[], &[])).is_ok());
        let cases: [(&[&str], &[&str], &str); 9] = [
            (
                &["x"],
                &["x"],
                r#"model a/two: alias "x" is already model a/one's alias"#,
            ),
            (
                &["a/two"],
                &[],
                r#"model a/one: alias "a/two" is already model a/two's id"#,
            ),
            (
                &[],
                &["a/one"],
                r#"model a/two: alias "a/one" is already model a/one's id"#,
            ),
            (
                &["a/one"],
                &[],
                r#"model a/one: alias "a/one" is already its own id"#,
            ),
            (
                &["x", "x"],
                &[],
                r#"model a/one: alias "x" is already its own alias"#,
            ),
            (&[""], &[], "model a/one: an alias must not be empty"),
            (
                &["two words"],
                &[],
                r#"model a/one: alias "two words" must not contain whitespace"#,
            ),
            (&["tab\t"], &[], "must not contain whitespace"),
            (&["nl\n"], &[], "must not contain whitespace"),
        ];
        for (one, two, expected) in cases {
            let err = validate(&two_models(one, two)).unwrap_err().to_string();
            assert!(err.contains(expected), "{one:?} {two:?}: {err}");
        }
    }

    #[test]
    fn aliases_are_checked_against_the_models_an_import_leaves_in_place() {
        let stored = two_models(&["one"], &["two"]);
        // A new model taking a stored model's alias.
        let mut other: CatalogRows = serde_yaml::from_str(
            "models: [{id: a/three, provider: a, family: openai, kind: chat, upstream_model: x, \
             input_price: 1, output_price: 1, aliases: [two]}]",
        )
        .unwrap();
        assert!(validate(&other).is_ok(), "alone, the file is fine");
        let err = check_names(&merged_models(&stored, &other))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(r#"alias "two" is already model a/two's alias"#),
            "{err}"
        );
        // ... once a/two gives it up in the same import, it may.
        other
            .models
            .extend(two_models(&["one"], &[]).models.into_iter().skip(1));
        let merged = merged_models(&stored, &other);
        assert_eq!(merged.len(), 3);
        assert!(check_names(&merged).is_ok());
    }

    #[test]
    fn a_mistyped_profile_is_refused_at_import_not_skipped_at_load() {
        let rows: CatalogRows = serde_yaml::from_str(
            "profiles: [{name: p, spec: {forward: [], thinking: {kind: effort, levls: [low]}}}]",
        )
        .unwrap();
        let err = validate(&rows).unwrap_err().to_string();
        assert!(err.starts_with("profile p: "), "{err}");
    }

    #[test]
    fn rejects_routes_of_the_wrong_family() {
        let rows: CatalogRows = serde_yaml::from_str(
            "models: [{id: a/b, provider: a, family: anthropic, kind: chat, upstream_model: b, input_price: 1, output_price: 1}]\nroutes: [{model_id: a/b, kind: gemini-api}]",
        )
        .unwrap();
        assert!(validate(&rows)
            .unwrap_err()
            .to_string()
            .contains("cannot carry"));
    }

    #[test]
    fn the_responses_api_is_for_openai_routes_only() {
        let rows = |family: &str, kind: &str, api: &str| -> CatalogRows {
            serde_yaml::from_str(&format!(
                "models: [{{id: a/b, provider: a, family: {family}, kind: chat, upstream_model: b, \
                 input_price: 1, output_price: 1}}]\n\
                 routes: [{{model_id: a/b, kind: {kind}, api: {api}}}]"
            ))
            .unwrap()
        };
        assert!(validate(&rows("openai", "openai", "responses")).is_ok());
        assert!(validate(&rows("openai", "openai", "chat")).is_ok());
        let plain: CatalogRows = serde_yaml::from_str(
            "models: [{id: a/b, provider: a, family: openai, kind: chat, upstream_model: b, \
             input_price: 1, output_price: 1}]\nroutes: [{model_id: a/b, kind: openai}]",
        )
        .unwrap();
        assert_eq!(plain.routes[0].api, "chat", "chat by default");
        for (family, kind) in [("anthropic", "anthropic"), ("gemini", "vertex")] {
            let err = validate(&rows(family, kind, "responses"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("route {kind} of a/b: api responses is for openai")),
                "{err}"
            );
            assert!(validate(&rows(family, kind, "chat")).is_ok());
        }
        let err = validate(&rows("openai", "openai", "completions"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(r#"api must be chat or responses, not "completions""#),
            "{err}"
        );
    }

    #[test]
    fn refuses_prices_above_the_bound_in_every_field() {
        let base: CatalogRows = serde_yaml::from_str(
            "models: [{id: a/b, provider: a, family: anthropic, kind: chat, upstream_model: b, \
             input_price: 1, output_price: 1, \
             long_context: {above: 1000, input_price: 1, output_price: 1}}]",
        )
        .unwrap();
        type Set = fn(&mut ModelRow, Price);
        let fields: [(&str, Set); 6] = [
            ("input_price", |m, p| m.input_price = p),
            ("output_price", |m, p| m.output_price = p),
            ("cache_read_price", |m, p| m.cache_read_price = Some(p)),
            ("cache_storage_price", |m, p| {
                m.cache_storage_price = Some(p)
            }),
            ("long_context.output_price", |m, p| {
                m.long_context.as_mut().unwrap().output_price = p;
            }),
            ("long_context.cache_write_1h_price", |m, p| {
                m.long_context.as_mut().unwrap().cache_write_1h_price = Some(p);
            }),
        ];
        let with = |set: Set, price: &str| {
            let mut rows = base.clone();
            set(&mut rows.models[0], price.parse().unwrap());
            validate(&rows)
        };
        for (field, set) in fields {
            let err = with(set, "9223372036854.775807").unwrap_err();
            assert!(err.to_string().contains(field), "{field}: {err}");
            assert!(with(set, "10000").is_ok(), "{field}: the bound itself");
            assert!(with(set, "10000.000001").is_err(), "{field}");
        }
    }
}
