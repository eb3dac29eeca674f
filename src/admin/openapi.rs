//! The OpenAPI document at `/admin/v1/openapi.json`, generated from the handlers'
//! `#[utoipa::path]` annotations and the types' `ToSchema` derives: it cannot drift from the
//! code. Its public part documents the two endpoints a client uses to see its own spend.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::api;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tollgate admin API",
        description = "Workspaces, keys, credits, usage, catalog, alerts and the audit log, on \
                       the admin listener. Authenticate with `Authorization: Bearer <admin \
                       token>` (the token is read from the environment variable named by \
                       `tollgate.admin_token_env`). A workspace's management key \
                       (`Authorization: Bearer mk-tg-…`, created under `management keys`) is \
                       accepted too, scoped to its workspace: it may read the workspace (GET \
                       `/workspaces/{ws}`), its credits list and its usage (list and daily), and \
                       list, create, update, rotate and revoke its API keys; anything else is \
                       403 `forbidden`, and another workspace's workspace or key is 404 as if \
                       it did not exist. An API key is refused here (401), a management key on \
                       the public listener (401). The paths tagged `public` are served on the \
                       public listener and authenticate with an API key."
    ),
    paths(
        api::list_workspaces, api::create_workspace, api::get_workspace, api::rename_workspace,
        api::list_keys, api::create_key, api::update_key, api::revoke_key, api::rotate_key,
        api::list_management_keys, api::create_management_key, api::revoke_management_key,
        api::list_credits, api::add_credit, api::refund, api::list_usage, api::daily_usage,
        api::get_alerts, api::put_alerts, api::list_deliveries,
        api::get_catalog, api::update_model, api::update_route, api::list_audit,
        public_key, public_credits, public_generation,
    ),
    modifiers(&Security),
    security(("admin_token" = [])),
)]
pub struct AdminDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let bearer =
            || SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build());
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("admin_token", bearer());
        components.add_security_scheme("api_key", bearer());
        components.add_security_scheme("management_key", bearer());
    }
}

/// The document, rendered once.
pub fn json() -> Vec<u8> {
    AdminDoc::openapi()
        .to_json()
        .unwrap_or_default()
        .into_bytes()
}

/// The calling key's own settings and state: name, expiry, spend limit, the spend of its
/// current window and the workspace's remaining credit; never its secret. Never billed.
#[utoipa::path(get, path = "/v1/key", tag = "public", security(("api_key" = [])),
    responses(
        (status = 200, description = "`{object: \"key\", id, name, hint, created_at, \
            expires_at, spend_limit_usd, limit_reset, window_start, window_spend_usd, \
            allowed_models, \
            workspace: {id, credit_usd}}`"),
        (status = 401, description = "missing, unknown, revoked or expired key")))]
#[allow(dead_code)] // Documentation only: the proxy answers it (`admission`).
fn public_key() {}

/// The caller's workspace's credit, from the gateway's memory: OpenRouter's `total_credits`
/// (credit granted less refunds) and `total_usage` (charged), and tollgate's `balance` (as the
/// credit gate reads it) and `reserved` (this gateway's requests in flight). Never billed or
/// gated: a workspace without credit gets its answer.
#[utoipa::path(get, path = "/v1/credits", tag = "public", security(("api_key" = [])),
    responses(
        (status = 200, description = "`{data: {total_credits, total_usage, balance, reserved, \
            currency: \"USD\"}}`, every amount a JSON number written with the ledger's exact \
            digits (up to 12 decimal places), e.g. `{\"data\": {\"total_credits\": 25.5, \
            \"total_usage\": 0.000123, \"balance\": 25.499877, \"reserved\": 0.0, \
            \"currency\": \"USD\"}}`"),
        (status = 401, description = "missing, unknown, revoked or expired key")))]
#[allow(dead_code)] // Documentation only: the proxy answers it (`admission`).
fn public_credits() {}

/// The usage record of one of the caller's workspace's requests, by completion id (or the
/// `x-request-id` the gateway answered with). Another workspace's id is `404`.
#[utoipa::path(get, path = "/v1/generation", tag = "public", security(("api_key" = [])),
    params(("id" = String, Query, description = "the completion id")),
    responses(
        (status = 200, description = "`{object: \"generation\", data: UsageRecord}`",
            body = crate::store::UsageRecord),
        (status = 404, description = "`generation_not_found`"),
        (status = 503, description = "`store_unavailable`")))]
#[allow(dead_code)] // Documentation only: the proxy answers it.
fn public_generation() {}

#[cfg(test)]
mod tests {
    #[test]
    fn models_show_their_aliases_and_records_every_doors_endpoint() {
        let doc: serde_json::Value = serde_json::from_slice(&super::json()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let aliases = &schemas["ModelRow"]["properties"]["aliases"];
        assert_eq!(aliases["type"], "array", "{aliases}");
        assert_eq!(aliases["items"]["type"], "string", "{aliases}");
        let endpoint = &schemas["UsageEndpoint"];
        let values: Vec<&str> = endpoint["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{endpoint}"))
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(
            values,
            ["chat", "embeddings", "messages", "responses"],
            "{endpoint}"
        );
    }

    #[test]
    fn credit_movements_document_their_idempotency_key_and_public_credits() {
        let doc: serde_json::Value = serde_json::from_slice(&super::json()).unwrap();
        for path in [
            "/admin/v1/workspaces/{ws}/credits",
            "/admin/v1/workspaces/{ws}/refunds",
        ] {
            let op = &doc["paths"][path]["post"];
            let params = op["parameters"]
                .as_array()
                .unwrap_or_else(|| panic!("{op}"));
            assert!(
                params
                    .iter()
                    .any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header"),
                "{path}: {op}"
            );
            assert!(op["responses"]["409"].is_object(), "{path}: {op}");
        }
        let refund = &doc["components"]["schemas"]["RefundBody"]["required"];
        assert!(refund.to_string().contains("reason"), "{refund}");
        assert!(doc["paths"]["/v1/credits"]["get"].is_object());
    }

    #[test]
    fn key_updates_and_management_keys_are_documented() {
        let doc: serde_json::Value = serde_json::from_slice(&super::json()).unwrap();
        let paths = &doc["paths"];
        assert!(paths["/admin/v1/keys/{key}"]["patch"].is_object());
        assert!(paths["/admin/v1/workspaces/{ws}/management-keys"]["get"].is_object());
        assert!(paths["/admin/v1/workspaces/{ws}/management-keys"]["post"].is_object());
        assert!(paths["/admin/v1/management-keys/{id}/revoke"]["post"].is_object());
        let schemas = &doc["components"]["schemas"];
        let patch = &schemas["KeyPatchBody"]["properties"];
        assert!(patch["allowed_models"].is_object() && patch["spend_limit_usd"].is_object());
        assert!(schemas["NewKeyBody"]["properties"]["allowed_models"].is_object());
        assert!(schemas["KeyView"]["properties"]["allowed_models"].is_object());
        let description = doc["info"]["description"].as_str().unwrap();
        assert!(description.contains("management key"), "{description}");
        assert!(doc["components"]["securitySchemes"]["management_key"].is_object());
    }

    #[test]
    fn a_list_answers_a_page_of_its_rows() {
        let doc: serde_json::Value = serde_json::from_slice(&super::json()).unwrap();
        let schema = &doc["paths"]["/admin/v1/workspaces/{ws}/keys"]["get"]["responses"]["200"]
            ["content"]["application/json"]["schema"];
        let text = schema.to_string();
        let page = match schema["$ref"].as_str() {
            Some(r) => doc["components"]["schemas"][r.rsplit('/').next().unwrap()].clone(),
            None => schema.clone(),
        };
        assert!(
            page["properties"]["next_cursor"].is_object(),
            "{text}: {page}"
        );
        let key = &page["properties"]["data"]["items"]["properties"];
        assert!(
            key["status"].is_object() && key["hint"].is_object(),
            "{text}: {page}"
        );
    }
}
