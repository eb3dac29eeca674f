//! Reading a catalog file (`conf/catalog.yaml`): `models:` and `routes:` lists shaped like the
//! store rows, validated before anything is written.

use std::collections::HashSet;
use std::path::Path;

use crate::store::CatalogRows;

use super::{Family, RouteKind};

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

/// Checks what the database cannot: known families, kinds and route kinds, and routes that
/// point at models of a family they can carry.
pub fn validate(rows: &CatalogRows) -> Result<(), ImportError> {
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
        if m.long_context.as_ref().is_some_and(|l| l.above == 0) {
            return Err(ImportError::Invalid(format!(
                "model {}: long_context.above must be a positive token count",
                m.id
            )));
        }
        let _ = family;
    }
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
        if let Some(url) = &r.base_url {
            super::Endpoint::parse(url)
                .map_err(|e| ImportError::Invalid(format!("route for {}: {e}", r.model_id)))?;
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
}
