//! Changes to the catalog from the admin API: a model's prices and activity, a route's
//! activity. Each rewrites the model's row and routes through `import_catalog` (validated like
//! a catalog file), whose change-feed rows bring every replica's `/v1/models` along.

use serde::Deserialize;

use super::audit::{self, Actor, Change};
use super::{CommandError, CommandResult};
use crate::catalog::import;
use crate::money::{exact, Price};
use crate::store::{CatalogRows, ModelRow, RouteRow, Store, StoreError};

/// The fields of a model an operator may change (all optional). Prices are read from their
/// exact JSON text: more than six decimals is refused, never rounded.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPatch {
    pub active: Option<bool>,
    #[serde(default, deserialize_with = "exact")]
    pub input_price: Option<Price>,
    #[serde(default, deserialize_with = "exact")]
    pub output_price: Option<Price>,
    #[serde(default, deserialize_with = "exact")]
    pub cache_read_price: Option<Price>,
    #[serde(default, deserialize_with = "exact")]
    pub cache_write_price: Option<Price>,
}

/// A model and its routes, as the catalog holds them.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ModelView {
    #[serde(flatten)]
    pub model: ModelRow,
    pub routes: Vec<RouteRow>,
}

/// Every model with its routes, by id.
pub async fn catalog_view(store: &dyn Store) -> CommandResult<Vec<ModelView>> {
    let rows = store.load_catalog().await?;
    let mut models: Vec<ModelView> = rows
        .models
        .into_iter()
        .map(|model| ModelView {
            routes: rows
                .routes
                .iter()
                .filter(|r| r.model_id == model.id)
                .cloned()
                .collect(),
            model,
        })
        .collect();
    models.sort_by(|a, b| a.model.id.cmp(&b.model.id));
    Ok(models)
}

async fn model(store: &dyn Store, id: &str) -> CommandResult<ModelView> {
    catalog_view(store)
        .await?
        .into_iter()
        .find(|m| m.model.id == id)
        .ok_or_else(|| StoreError::NotFound(format!("model {id}")).into())
}

/// Writes `after` (validated), audited as a change from `before`.
async fn save(
    store: &dyn Store,
    actor: &Actor,
    action: &'static str,
    before: ModelView,
    after: ModelView,
) -> CommandResult<ModelView> {
    let rows = CatalogRows {
        profiles: Vec::new(),
        models: vec![after.model.clone()],
        routes: after.routes.clone(),
    };
    import::validate(&rows)?;
    let change = Change {
        action,
        workspace: None,
        target: &after.model.id,
    };
    let now = audit::snapshot(&after);
    let audit = audit::of(actor, change, audit::snapshot(&before), move |_| now);
    store.import_catalog(&rows, Some(audit)).await?;
    Ok(after)
}

pub async fn update_model(
    store: &dyn Store,
    actor: &Actor,
    id: &str,
    patch: ModelPatch,
) -> CommandResult<ModelView> {
    let before = model(store, id).await?;
    let mut after = before.clone();
    let m = &mut after.model;
    m.active = patch.active.unwrap_or(m.active);
    m.input_price = patch.input_price.unwrap_or(m.input_price);
    m.output_price = patch.output_price.unwrap_or(m.output_price);
    m.cache_read_price = patch.cache_read_price.or(m.cache_read_price);
    m.cache_write_price = patch.cache_write_price.or(m.cache_write_price);
    save(store, actor, "catalog.model.update", before, after).await
}

/// Activates or deactivates the model's route at `index` (its position in the model's list).
pub async fn set_route_active(
    store: &dyn Store,
    actor: &Actor,
    id: &str,
    index: usize,
    active: bool,
) -> CommandResult<ModelView> {
    let before = model(store, id).await?;
    let mut after = before.clone();
    let route = after.routes.get_mut(index).ok_or_else(|| {
        CommandError::Invalid(format!("model {id} has no route {index} (0-based)"))
    })?;
    route.active = active;
    save(store, actor, "catalog.route.update", before, after).await
}
