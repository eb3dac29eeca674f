//! The model-listing endpoints, each showing the registry (`models.rs`) of its surface:
//!
//! - Gemini API `GET /v1beta/models` (and `/v1/models` with Google key auth): `pageSize`
//!   (default 50, at most 1000), `pageToken` → `{"models":[{name, baseModelId, version,
//!   displayName, inputTokenLimit, outputTokenLimit, supportedGenerationMethods, thinking?}],
//!   "nextPageToken"?}` (shape of Google's published `models.list` reference).
//! - Anthropic `GET /v1/models` (`x-api-key`, `anthropic-version`): `limit` (default 20,
//!   1–1000), `after_id`, `before_id`; newest first → `{"data":[{type, id, display_name,
//!   created_at}], "has_more", "first_id", "last_id"}`.
//! - Vertex `GET /v1beta1/publishers/{google|anthropic}/models` (bearer token): `pageSize`
//!   (default 50, at most 1000), `pageToken` → `{"publisherModels":[{name, versionId,
//!   launchStage}], "nextPageToken"?}`. This shape is Google's REST reference as remembered,
//!   not a captured response. Claude's `name` is the undated model; its `versionId` is the
//!   `@date` a call must carry (4.5 generation), else `"001"` like Google's own models.
//!
//! Page tokens are opaque (base64url of the next offset); a token this simulator did not
//! issue is a 400.

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine as _;
use serde::Serialize;

use crate::faults::Surface;
use crate::models::{Claude, Google, Kind};
use crate::respond::{self, JSON_GOOGLE, JSON_PLAIN};
use crate::{anthropic, fixtures, gemini, oauth, query_param, Req, Sim};

const GOOGLE_PAGE: usize = 50;
const GOOGLE_MAX_PAGE: usize = 1000;
const ANTHROPIC_PAGE: usize = 20;
const ANTHROPIC_MAX_PAGE: usize = 1000;

fn page_token(offset: usize) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(offset.to_string())
}

/// The offset a `pageToken` stands for (none: 0).
fn page_start(query: &str) -> Result<usize, Response> {
    let Some(token) = query_param(query, "pageToken").filter(|t| !t.is_empty()) else {
        return Ok(0);
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.as_bytes())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| fixtures::invalid_argument("Invalid page token."))
}

/// Google's `pageSize`: unset or not positive → the default, above the maximum → the maximum.
fn page_size(query: &str) -> usize {
    query_param(query, "pageSize")
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| *n > 0)
        .map_or(GOOGLE_PAGE, |n| {
            usize::try_from(n).unwrap_or(GOOGLE_MAX_PAGE)
        })
        .min(GOOGLE_MAX_PAGE)
}

/// One Google-style page of `all`: the items and the next page's token.
fn google_page<'a, T>(all: &'a [T], query: &str) -> Result<(&'a [T], Option<String>), Response> {
    let start = page_start(query)?.min(all.len());
    let end = start.saturating_add(page_size(query)).min(all.len());
    let next = (end < all.len()).then(|| page_token(end));
    Ok((&all[start..end], next))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GeminiModel {
    name: String,
    base_model_id: &'static str,
    version: &'static str,
    display_name: &'static str,
    input_token_limit: u32,
    output_token_limit: u32,
    supported_generation_methods: &'static [&'static str],
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<bool>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GeminiList {
    models: Vec<GeminiModel>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_page_token: Option<String>,
}

fn gemini_model(m: &Google) -> GeminiModel {
    let chat = m.kind == Kind::Chat;
    GeminiModel {
        name: format!("models/{}", m.id),
        base_model_id: m.id,
        version: "001",
        display_name: m.display,
        input_token_limit: m.input_limit(),
        output_token_limit: m.output_limit(),
        supported_generation_methods: if chat {
            &["generateContent", "countTokens"]
        } else {
            &["embedContent", "batchEmbedContents"]
        },
        // Every chat model still served thinks (2.5 and later).
        thinking: chat.then_some(true),
    }
}

/// `GET /v1beta/models` (and `/v1/models` with a Google key).
pub fn gemini(sim: &Sim, req: &Req) -> Response {
    if let Err(r) = gemini::dev_auth(sim, req) {
        return r;
    }
    let all = sim.models.google_listing(Surface::Gemini);
    match google_page(&all, req.query) {
        Ok((page, next)) => {
            let body = GeminiList {
                models: page.iter().map(|m| gemini_model(m)).collect(),
                next_page_token: next,
            };
            respond::json_pretty(StatusCode::OK, JSON_GOOGLE, &body)
        }
        Err(r) => r,
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PublisherModel {
    name: String,
    version_id: &'static str,
    launch_stage: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PublisherList<'a> {
    publisher_models: &'a [PublisherModel],
    #[serde(skip_serializing_if = "Option::is_none")]
    next_page_token: Option<String>,
}

fn publisher_models(sim: &Sim, publisher: &str) -> Option<Vec<PublisherModel>> {
    let stage = |id: &str| {
        if id.contains("preview") {
            "PUBLIC_PREVIEW"
        } else {
            "GA"
        }
    };
    let google = |m: &&Google| PublisherModel {
        name: format!("publishers/google/models/{}", m.id),
        version_id: "001",
        launch_stage: stage(m.id),
    };
    let claude = |m: &&Claude| PublisherModel {
        name: format!("publishers/anthropic/models/{}", m.alias),
        version_id: m.date.unwrap_or("001"),
        launch_stage: "GA",
    };
    match publisher {
        "google" => Some(
            sim.models
                .google_listing(Surface::Vertex)
                .iter()
                .map(google)
                .collect(),
        ),
        "anthropic" => Some(
            sim.models
                .claude_listing(Surface::AnthropicVertex)
                .iter()
                .map(claude)
                .collect(),
        ),
        _ => None,
    }
}

/// `GET /v1beta1/publishers/{publisher}/models`.
pub fn vertex(sim: &Sim, req: &Req, publisher: &str) -> Response {
    if let Err(e) = sim.tokens.check(req.headers) {
        let rpc = "google.cloud.aiplatform.v1beta1.ModelGardenService.ListPublisherModels";
        return oauth::bearer_error(e, rpc);
    }
    let Some(all) = publisher_models(sim, publisher) else {
        return fixtures::google_error(
            404,
            "NOT_FOUND",
            &format!("Publisher `publishers/{publisher}` was not found."),
            Vec::new(),
        );
    };
    match google_page(&all, req.query) {
        Ok((page, next)) => {
            let body = PublisherList {
                publisher_models: page,
                next_page_token: next,
            };
            respond::json_pretty(StatusCode::OK, JSON_GOOGLE, &body)
        }
        Err(r) => r,
    }
}

#[derive(Serialize)]
struct AnthropicModel {
    #[serde(rename = "type")]
    kind: &'static str,
    id: String,
    display_name: &'static str,
    created_at: &'static str,
}

#[derive(Serialize)]
struct AnthropicList {
    data: Vec<AnthropicModel>,
    has_more: bool,
    first_id: Option<String>,
    last_id: Option<String>,
}

fn anthropic_limit(query: &str) -> Result<usize, Response> {
    let Some(raw) = query_param(query, "limit") else {
        return Ok(ANTHROPIC_PAGE);
    };
    match raw.parse::<usize>() {
        Ok(n) if (1..=ANTHROPIC_MAX_PAGE).contains(&n) => Ok(n),
        Ok(0) => Err(anthropic::invalid_direct(
            "limit: Input should be greater than or equal to 1",
        )),
        Ok(_) => Err(anthropic::invalid_direct(
            "limit: Input should be less than or equal to 1000",
        )),
        Err(_) => Err(anthropic::invalid_direct(
            "limit: Input should be a valid integer, unable to parse string as an integer",
        )),
    }
}

/// The `[start, end)` of the page a cursor asks for, and whether more lie beyond it.
fn anthropic_window(
    ids: &[String],
    query: &str,
    limit: usize,
) -> Result<(usize, usize, bool), Response> {
    let find = |name: &str, id: &str| {
        ids.iter()
            .position(|i| i == id)
            .ok_or_else(|| anthropic::invalid_direct(&format!("{name}: no model with id {id}")))
    };
    let after = query_param(query, "after_id");
    let before = query_param(query, "before_id");
    match (after, before) {
        (Some(_), Some(_)) => Err(anthropic::invalid_direct(
            "after_id: cannot be combined with before_id",
        )),
        (None, Some(b)) => {
            let end = find("before_id", &b)?;
            let start = end.saturating_sub(limit);
            Ok((start, end, start > 0))
        }
        (after, None) => {
            let start = match after {
                Some(a) => find("after_id", &a)?.saturating_add(1),
                None => 0,
            };
            let end = start.saturating_add(limit).min(ids.len());
            Ok((start, end, end < ids.len()))
        }
    }
}

/// `GET /v1/models` with Anthropic auth.
pub fn anthropic(sim: &Sim, req: &Req) -> Response {
    if let Err(r) = anthropic::direct_auth(sim, req) {
        return r;
    }
    let all = sim.models.claude_listing(Surface::Anthropic);
    let ids: Vec<String> = all.iter().map(|m| m.api_id()).collect();
    let window = anthropic_limit(req.query).and_then(|l| anthropic_window(&ids, req.query, l));
    let (start, end, has_more) = match window {
        Ok(w) => w,
        Err(r) => return r,
    };
    let data: Vec<AnthropicModel> = all[start..end]
        .iter()
        .map(|m| AnthropicModel {
            kind: "model",
            id: m.api_id(),
            display_name: m.display,
            created_at: m.created,
        })
        .collect();
    let body = AnthropicList {
        first_id: data.first().map(|m| m.id.clone()),
        last_id: data.last().map(|m| m.id.clone()),
        data,
        has_more,
    };
    respond::json(StatusCode::OK, JSON_PLAIN, &body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn google_pages_cover_everything_once() {
        let all: Vec<u32> = (0..7).collect();
        let (p, next) = google_page(&all, "pageSize=3").unwrap();
        assert_eq!(p, &[0, 1, 2]);
        let q = format!("pageSize=3&pageToken={}", next.unwrap());
        let (p, next) = google_page(&all, &q).unwrap();
        assert_eq!(p, &[3, 4, 5]);
        let q = format!("pageSize=3&pageToken={}", next.unwrap());
        let (p, next) = google_page(&all, &q).unwrap();
        assert_eq!(p, &[6]);
        assert!(next.is_none());
        assert_eq!(google_page(&all, "").unwrap().0.len(), 7);
        assert!(google_page(&all, "pageToken=!!").is_err());
        assert_eq!(page_size("pageSize=5000"), GOOGLE_MAX_PAGE);
        assert_eq!(page_size("pageSize=0"), GOOGLE_PAGE);
    }

    #[test]
    fn anthropic_cursors() {
        let ids: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
        assert_eq!(anthropic_window(&ids, "", 2).unwrap(), (0, 2, true));
        assert_eq!(
            anthropic_window(&ids, "after_id=m1", 2).unwrap(),
            (2, 4, true)
        );
        assert_eq!(
            anthropic_window(&ids, "after_id=m3", 2).unwrap(),
            (4, 5, false)
        );
        assert_eq!(
            anthropic_window(&ids, "before_id=m3", 2).unwrap(),
            (1, 3, true)
        );
        assert_eq!(
            anthropic_window(&ids, "before_id=m1", 2).unwrap(),
            (0, 1, false)
        );
        assert!(anthropic_window(&ids, "after_id=zz", 2).is_err());
        assert!(anthropic_window(&ids, "after_id=m1&before_id=m3", 2).is_err());
        assert!(anthropic_limit("limit=0").is_err());
        assert!(anthropic_limit("limit=1001").is_err());
        assert_eq!(anthropic_limit("limit=1000").unwrap(), 1000);
    }
}
