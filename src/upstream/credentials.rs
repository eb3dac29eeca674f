//! Upstream credentials: static API keys read from the environment once, and the Vertex AI
//! OAuth2 access token, minted from a service-account key file by `gcp_auth` and kept fresh by
//! a background refresher so that no proxy phase ever waits for a token.
//!
//! The token endpoint is the conf's `tollgate.providers.vertex.token_url` (it replaces the key
//! file's `token_uri`), so tests point it at the simulator's fake endpoint.

use std::sync::Arc;
use std::time::Duration;

use gcp_auth::{CustomServiceAccount, TokenProvider};

use crate::config::{ProvidersConf, VertexConf};
use crate::providers::{Credentials, Secret, TokenCell};

const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Refresh this long before the token expires.
const EARLY: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("cannot read the Vertex service-account key {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid Vertex service-account key {path}: {message}")]
    Invalid { path: String, message: String },
}

/// The static credentials, read once from the environment variables the config names.
pub fn from_env(p: &ProvidersConf, env: impl Fn(&str) -> Option<String>) -> Credentials {
    let read = |name: &str| env(name).filter(|v| !v.is_empty()).map(Secret::new);
    Credentials {
        openai: read(&p.openai.api_key_env),
        gemini: read(&p.gemini.api_key_env),
        anthropic: read(&p.anthropic.api_key_env),
        anthropic_version: p.anthropic.version.clone(),
        vertex_token: Arc::new(TokenCell::default()),
        vertex_project: env(&p.vertex.project_env).filter(|v| !v.is_empty()),
    }
}

/// The Vertex service account, if the conf's `credentials_env` names a key file.
pub struct VertexAccount {
    key_json: String,
    pub project_id: Option<String>,
}

impl VertexAccount {
    pub fn from_env(
        conf: &VertexConf,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, CredentialError> {
        let Some(path) = env(&conf.credentials_env).filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(&path).map_err(|source| CredentialError::Read {
            path: path.clone(),
            source,
        })?;
        let invalid = |message: String| CredentialError::Invalid {
            path: path.clone(),
            message,
        };
        let mut key: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let obj = key
            .as_object_mut()
            .ok_or_else(|| invalid("not a JSON object".into()))?;
        obj.insert(
            "token_uri".into(),
            serde_json::Value::String(conf.token_url.clone()),
        );
        let project_id = obj
            .get("project_id")
            .and_then(|p| p.as_str())
            .map(str::to_owned);
        let account = VertexAccount {
            key_json: key.to_string(),
            project_id,
        };
        account.provider().map_err(|e| invalid(e.to_string()))?;
        Ok(Some(account))
    }

    /// A token provider bound to the calling runtime (its HTTP client lives there).
    fn provider(&self) -> Result<CustomServiceAccount, gcp_auth::Error> {
        CustomServiceAccount::from_json(&self.key_json)
    }

    /// Fetches one token into `cell` (start-up, so the first request finds one).
    pub async fn fetch_once(&self, cell: &TokenCell) -> Result<Duration, String> {
        let provider = self.provider().map_err(|e| e.to_string())?;
        fetch(&provider, cell).await
    }

    /// Keeps `cell` fresh until `shutdown` resolves.
    pub async fn refresh_forever(
        &self,
        cell: Arc<TokenCell>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let provider = match self.provider() {
            Ok(p) => p,
            Err(e) => return tracing::error!("vertex credentials unusable: {e}"),
        };
        let mut backoff = Duration::from_secs(1);
        loop {
            let wait = match fetch(&provider, &cell).await {
                Ok(valid_for) => {
                    backoff = Duration::from_secs(1);
                    valid_for.saturating_sub(EARLY).max(Duration::from_secs(10))
                }
                Err(e) => {
                    tracing::warn!("vertex token refresh failed, retrying in {backoff:?}: {e}");
                    let w = backoff;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    w
                }
            };
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// One token into the cell; returns how long it stays valid.
async fn fetch(provider: &CustomServiceAccount, cell: &TokenCell) -> Result<Duration, String> {
    let token = provider.token(&[SCOPE]).await.map_err(|e| e.to_string())?;
    cell.set(Some(Secret::new(token.as_str())));
    let left = token.expires_at() - chrono::Utc::now();
    Ok(left.to_std().unwrap_or_default())
}
