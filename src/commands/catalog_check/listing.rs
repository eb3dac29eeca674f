//! Asking the providers which models they serve: one paged listing per surface, with the
//! gateway's own credentials, through `reqwest` (the client the alerts webhooks already use).
//!
//! Requests (`{base}` is the route's base URL, as the gateway calls it):
//! - Gemini API: `GET {base}/v1beta/models?pageSize=N[&pageToken=T]`, `x-goog-api-key`;
//!   pages follow `nextPageToken`.
//! - Anthropic: `GET {base}/v1/models?limit=N[&after_id=ID]`, `x-api-key` and
//!   `anthropic-version`; pages follow `last_id` while `has_more`.
//! - Vertex: `GET {base}/v1beta1/publishers/{google|anthropic}/models?pageSize=N[&pageToken=T]`,
//!   `Authorization: Bearer` (a token minted from the service account, as `serve` does).
//!
//! At most [`MAX_PAGES`] pages a listing, each request bounded by the timeout; a listing that
//! fails is reported as the reason its routes are unchecked, with the credential redacted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::compare::{Listed, Listing, Surface, SurfaceKind};
use crate::config::{ProvidersConf, UpstreamConf, VertexConf};
use crate::providers::{Credentials, Secret, TokenCell};
use crate::upstream::credentials::{self, VertexAccount};
use crate::upstream::roots::upstream_tls;

/// Pages read from one listing at most (a provider looping on its page token ends here).
pub const MAX_PAGES: usize = 50;

#[derive(Debug, thiserror::Error)]
pub enum ListingError {
    /// No credential for this surface (the message names the variable to set).
    #[error("{0}")]
    NoCredentials(String),
    #[error("the listing answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the listing request failed: {0}")]
    Transport(String),
    #[error("the listing's answer is not a model list: {0}")]
    Body(String),
    #[error("the listing has more than {MAX_PAGES} pages")]
    TooManyPages,
}

/// The credentials the listings need, each one or why it is missing; `all` redacts them from
/// error texts, the way the gateway does.
pub struct Keys {
    gemini: Result<Secret, String>,
    anthropic: Result<Secret, String>,
    vertex: Result<Secret, String>,
    all: Credentials,
}

impl Keys {
    /// The conf's credentials; a Vertex token is minted only when `need_vertex`.
    pub async fn from_env(
        p: &ProvidersConf,
        env: impl Fn(&str) -> Option<String>,
        need_vertex: bool,
        timeout: Duration,
    ) -> Keys {
        let all = credentials::from_env(p, &env);
        let unset = |what: &str, var: &str| format!("no {what} ({var} is unset)");
        let vertex = if need_vertex {
            vertex_token(&p.vertex, &env, &all.vertex_token, timeout).await
        } else {
            Err("not needed".to_owned())
        };
        Keys {
            gemini: (all.gemini.clone())
                .ok_or_else(|| unset("Gemini API key", &p.gemini.api_key_env)),
            anthropic: (all.anthropic.clone())
                .ok_or_else(|| unset("Anthropic API key", &p.anthropic.api_key_env)),
            vertex,
            all,
        }
    }
}

/// A Vertex access token from the conf's service account, minted into `cell`, or why there is
/// none.
async fn vertex_token(
    conf: &VertexConf,
    env: impl Fn(&str) -> Option<String>,
    cell: &TokenCell,
    timeout: Duration,
) -> Result<Secret, String> {
    let account = VertexAccount::from_env(conf, env)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "no Vertex service account ({} is unset)",
                conf.credentials_env
            )
        })?;
    match tokio::time::timeout(timeout, account.fetch_once(cell)).await {
        Ok(Ok(_)) => cell.current().ok_or_else(|| "no Vertex token".to_owned()),
        Ok(Err(e)) => Err(format!("no Vertex token: {e}")),
        Err(_) => Err(format!("no Vertex token within {}s", timeout.as_secs())),
    }
}

/// The listing client: the gateway reaches upstreams directly, so no proxy from the
/// environment, and trusts what its upstream client trusts (`tollgate.upstream.ca_file`,
/// `system_roots`); every request bounded by `timeout`.
pub fn client(timeout: Duration, upstream: &UpstreamConf) -> Result<reqwest::Client, ListingError> {
    let tls = upstream_tls(upstream).map_err(|e| ListingError::Transport(e.to_string()))?;
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .no_proxy()
        .use_preconfigured_tls(tls)
        .build()
        .map_err(|e| ListingError::Transport(e.to_string()))
}

/// Asks every surface at once.
pub async fn ask_all(
    client: &reqwest::Client,
    keys: &Keys,
    surfaces: BTreeSet<Surface>,
    page_size: usize,
) -> BTreeMap<Surface, Listing> {
    let asks = surfaces.into_iter().map(|s| async move {
        let listing = ask(client, keys, &s, page_size).await;
        (s, listing.map_err(|e| e.to_string()))
    });
    futures_util::future::join_all(asks)
        .await
        .into_iter()
        .collect()
}

async fn ask(
    client: &reqwest::Client,
    keys: &Keys,
    s: &Surface,
    page_size: usize,
) -> Result<Vec<Listed>, ListingError> {
    let missing = |why: &String| ListingError::NoCredentials(why.clone());
    let base = &s.base_url;
    let size = page_size.to_string();
    match s.kind {
        SurfaceKind::GeminiApi => {
            let key = keys.gemini.as_ref().map_err(missing)?;
            let url = format!("{base}/v1beta/models");
            let req = |token: Option<&str>| {
                google_page(client.get(&url), &size, token).header("x-goog-api-key", key.expose())
            };
            paged::<GeminiPage>(req, &keys.all).await
        }
        SurfaceKind::Anthropic => {
            let key = keys.anthropic.as_ref().map_err(missing)?;
            let url = format!("{base}/v1/models");
            let req = |after: Option<&str>| {
                let mut q = vec![("limit", size.as_str())];
                q.extend(after.map(|a| ("after_id", a)));
                client
                    .get(&url)
                    .query(&q)
                    .header("x-api-key", key.expose())
                    .header("anthropic-version", &keys.all.anthropic_version)
            };
            paged::<AnthropicPage>(req, &keys.all).await
        }
        SurfaceKind::VertexGoogle | SurfaceKind::VertexAnthropic => {
            let token = keys.vertex.as_ref().map_err(missing)?;
            let publisher = match s.kind {
                SurfaceKind::VertexAnthropic => "anthropic",
                _ => "google",
            };
            let url = format!("{base}/v1beta1/publishers/{publisher}/models");
            let req = |page: Option<&str>| {
                google_page(client.get(&url), &size, page).bearer_auth(token.expose())
            };
            paged::<VertexPage>(req, &keys.all).await
        }
    }
}

/// A Google-style page request: `pageSize`, and `pageToken` after the first page.
fn google_page(
    req: reqwest::RequestBuilder,
    size: &str,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut q = vec![("pageSize", size)];
    q.extend(token.map(|t| ("pageToken", t)));
    req.query(&q)
}

/// Reads pages until the last (or [`MAX_PAGES`]); `request` builds the request for a cursor.
async fn paged<P: Page>(
    request: impl Fn(Option<&str>) -> reqwest::RequestBuilder,
    credentials: &Credentials,
) -> Result<Vec<Listed>, ListingError> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page: P = fetch(request(cursor.as_deref()), credentials).await?;
        let (items, next) = page.split();
        all.extend(items);
        match next {
            Some(n) => cursor = Some(n),
            None => return Ok(all),
        }
    }
    Err(ListingError::TooManyPages)
}

/// One page; error texts lose every credential (an upstream may quote a key it refuses).
async fn fetch<T: DeserializeOwned>(
    req: reqwest::RequestBuilder,
    credentials: &Credentials,
) -> Result<T, ListingError> {
    let transport = |e: reqwest::Error| ListingError::Transport(credentials.redact(&e.to_string()));
    let res = req.send().await.map_err(transport)?;
    let status = res.status();
    let body = res.bytes().await.map_err(transport)?;
    if !status.is_success() {
        let message = credentials.redact(&error_message(&body));
        return Err(ListingError::Status {
            status: status.as_u16(),
            message,
        });
    }
    serde_json::from_slice(&body).map_err(|e| ListingError::Body(e.to_string()))
}

/// An error answer's `error.message` (Google and Anthropic alike), else its first 200 bytes.
fn error_message(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.pointer("/error/message"))
        .and_then(|m| m.as_str());
    match message {
        Some(m) => m.to_owned(),
        None => String::from_utf8_lossy(body).chars().take(200).collect(),
    }
}

/// One page of a listing: its models, and the cursor of the next page.
trait Page: DeserializeOwned {
    fn split(self) -> (Vec<Listed>, Option<String>);
}

/// A next-page token; an empty one ends the listing like a missing one.
fn next(token: Option<String>) -> Option<String> {
    token.filter(|t| !t.is_empty())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiPage {
    #[serde(default)]
    models: Vec<NamedModel>,
    #[serde(default)]
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
struct NamedModel {
    name: String,
}

impl Page for GeminiPage {
    fn split(self) -> (Vec<Listed>, Option<String>) {
        let items = self
            .models
            .into_iter()
            .map(|m| Listed {
                name: m.name,
                version: None,
            })
            .collect();
        (items, next(self.next_page_token))
    }
}

#[derive(Deserialize)]
struct AnthropicPage {
    #[serde(default)]
    data: Vec<AnthropicModel>,
    #[serde(default)]
    has_more: bool,
    #[serde(default)]
    last_id: Option<String>,
}

#[derive(Deserialize)]
struct AnthropicModel {
    id: String,
}

impl Page for AnthropicPage {
    fn split(self) -> (Vec<Listed>, Option<String>) {
        let cursor = if self.has_more {
            next(self.last_id)
        } else {
            None
        };
        let items = self
            .data
            .into_iter()
            .map(|m| Listed {
                name: m.id,
                version: None,
            })
            .collect();
        (items, cursor)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VertexPage {
    #[serde(default)]
    publisher_models: Vec<PublisherModel>,
    #[serde(default)]
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PublisherModel {
    name: String,
    #[serde(default)]
    version_id: Option<String>,
}

impl Page for VertexPage {
    fn split(self) -> (Vec<Listed>, Option<String>) {
        let items = self
            .publisher_models
            .into_iter()
            .map(|m| Listed {
                name: m.name,
                version: m.version_id,
            })
            .collect();
        (items, next(self.next_page_token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split<P: Page>(json: &str) -> (Vec<Listed>, Option<String>) {
        serde_json::from_str::<P>(json).unwrap().split()
    }

    #[test]
    fn pages_yield_models_and_cursors() {
        let (m, n) = split::<GeminiPage>(
            r#"{"models":[{"name":"models/gemini-3.8-flash","version":"001"}],"nextPageToken":"t2"}"#,
        );
        assert_eq!(m[0].name, "models/gemini-3.8-flash");
        assert_eq!(n.as_deref(), Some("t2"));
        let (_, n) = split::<GeminiPage>(r#"{"models":[],"nextPageToken":""}"#);
        assert_eq!(n, None, "an empty token is the last page");
        let (m, n) = split::<AnthropicPage>(
            r#"{"data":[{"type":"model","id":"claude-opus-5-5"}],"has_more":true,"first_id":"claude-opus-5-5","last_id":"claude-opus-5-5"}"#,
        );
        assert_eq!(m[0].name, "claude-opus-5-5");
        assert_eq!(n.as_deref(), Some("claude-opus-5-5"));
        let (_, n) = split::<AnthropicPage>(r#"{"data":[],"has_more":false,"last_id":null}"#);
        assert_eq!(n, None);
        let (m, n) = split::<VertexPage>(
            r#"{"publisherModels":[{"name":"publishers/anthropic/models/claude-sonnet-4-5","versionId":"20250929","launchStage":"GA"}]}"#,
        );
        assert_eq!(m[0].version.as_deref(), Some("20250929"));
        assert_eq!(n, None);
    }

    #[test]
    fn error_messages_are_redacted() {
        let mut keys = crate::upstream::credentials::from_env(&ProvidersConf::default(), |_| None);
        keys.gemini = Some(Secret::new("AIza-sk-secret"));
        let body = br#"{"error":{"code":400,"message":"API key not valid: AIza-sk-secret"}}"#;
        assert_eq!(
            keys.redact(&error_message(body)),
            "API key not valid: [redacted]"
        );
        assert_eq!(
            error_message(b"<html>bad gateway</html>"),
            "<html>bad gateway</html>"
        );
    }
}
