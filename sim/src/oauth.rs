//! Fake Google OAuth2 token endpoint (`POST /token`) and the bearer-token check every Vertex
//! route uses, so the gateway's service-account JWT flow and token refresh are exercised.
//!
//! Validates (`docs/wire.md#gemini-endpoints-and-authentication`, RFC 7523 grant):
//! - form body with `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer` (else 400
//!   `unsupported_grant_type`) and an `assertion`;
//! - the assertion is three base64url segments, header and claims decode to JSON objects, the
//!   header names an `alg`, the claims carry `iss`, `scope`, `aud` (strings) and `iat`, `exp`
//!   (numbers), `0 < exp − iat ≤ 3600`, `exp` not past and `iat` not more than 5 min ahead
//!   (else 400 `invalid_grant`, Google's wording). The RS256 signature is not verified.
//!
//! Issues `{"access_token":"sim-…","expires_in":N,"token_type":"Bearer"}` (N =
//! `--token-ttl-secs`). Vertex then requires `Authorization: Bearer <issued, unexpired token>`
//! whose scope includes `…/auth/cloud-platform`: missing → 401 CREDENTIALS_MISSING, unknown →
//! 401 ACCESS_TOKEN_TYPE_UNSUPPORTED, expired → 401 ACCESS_TOKEN_EXPIRED, wrong scope → 403
//! ACCESS_TOKEN_SCOPE_INSUFFICIENT (Google's error bodies, `fixtures.rs`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::content::{random_id, unix_secs};
use crate::fixtures;
use crate::respond::{self, JSON_PLAIN};
use crate::Sim;

pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
pub const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";

struct TokenInfo {
    expires: Instant,
    cloud_platform: bool,
}

#[derive(Default)]
pub struct TokenStore {
    tokens: RwLock<HashMap<String, TokenInfo>>,
}

pub enum BearerError {
    Missing,
    Unknown,
    Expired,
    Scope,
}

impl TokenStore {
    fn issue(&self, ttl: Duration, cloud_platform: bool) -> String {
        let token = format!("sim-{}", random_id(40));
        if let Ok(mut m) = self.tokens.write() {
            // Forget long-expired tokens now and then so the map stays small.
            if m.len() > 10_000 {
                let now = Instant::now();
                m.retain(|_, t| t.expires + Duration::from_secs(3600) > now);
            }
            m.insert(
                token.clone(),
                TokenInfo {
                    expires: Instant::now() + ttl,
                    cloud_platform,
                },
            );
        }
        token
    }

    /// Checks an `Authorization` header value.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), BearerError> {
        let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
            return Err(BearerError::Missing);
        };
        let token = auth
            .strip_prefix("Bearer ")
            .or_else(|| auth.strip_prefix("bearer "))
            .ok_or(BearerError::Unknown)?
            .trim();
        let m = self.tokens.read().map_err(|_| BearerError::Unknown)?;
        let info = m.get(token).ok_or(BearerError::Unknown)?;
        if info.expires <= Instant::now() {
            return Err(BearerError::Expired);
        }
        if !info.cloud_platform {
            return Err(BearerError::Scope);
        }
        Ok(())
    }
}

/// Vertex-side answer for a failed bearer check (`method` = RPC name for the ErrorInfo).
pub fn bearer_error(err: BearerError, method: &str) -> Response {
    match err {
        BearerError::Missing => fixtures::vertex_401_missing(method),
        BearerError::Unknown => {
            fixtures::vertex_401_invalid(method, "ACCESS_TOKEN_TYPE_UNSUPPORTED")
        }
        BearerError::Expired => fixtures::vertex_401_invalid(method, "ACCESS_TOKEN_EXPIRED"),
        BearerError::Scope => fixtures::vertex_403_scope(method),
    }
}

#[derive(Serialize)]
struct TokenResponse {
    access_token: String,
    expires_in: u64,
    token_type: &'static str,
}

fn oauth_error(error: &str, description: &str) -> Response {
    let v = serde_json::json!({ "error": error, "error_description": description });
    respond::json(StatusCode::BAD_REQUEST, JSON_PLAIN, &v)
}

const TIMEFRAME: &str = "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.";

/// `POST /token`.
pub fn token(sim: &Sim, body: &Bytes) -> Response {
    let form = form_decode(&String::from_utf8_lossy(body));
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let grant = get("grant_type").unwrap_or("");
    if grant != JWT_BEARER {
        return oauth_error(
            "unsupported_grant_type",
            &format!("Invalid grant_type: {grant}"),
        );
    }
    let Some(assertion) = get("assertion") else {
        return oauth_error("invalid_request", "Missing required parameter: assertion");
    };
    let claims = match parse_jwt(assertion) {
        Ok(c) => c,
        Err(e) => return oauth_error("invalid_grant", &e),
    };
    let now = unix_secs();
    let (iat, exp) = (claims.iat, claims.exp);
    if exp <= iat || exp - iat > 3600 || exp <= now || iat > now + 300 {
        return oauth_error("invalid_grant", TIMEFRAME);
    }
    let cloud = claims.scope.split_whitespace().any(|s| s == CLOUD_PLATFORM);
    let ttl = sim.cfg.token_ttl_secs;
    let access_token = sim.tokens.issue(Duration::from_secs(ttl), cloud);
    sim.stats.tokens_issued.fetch_add(1, Ordering::Relaxed);
    respond::json(
        StatusCode::OK,
        "application/json; charset=utf-8",
        &TokenResponse {
            access_token,
            expires_in: ttl,
            token_type: "Bearer",
        },
    )
}

#[derive(Debug)]
struct Claims {
    scope: String,
    iat: i64,
    exp: i64,
}

fn b64url(seg: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(seg.trim_end_matches('='))
        .map_err(|_| "Invalid JWT: segment is not base64url".to_owned())
}

fn parse_jwt(jwt: &str) -> Result<Claims, String> {
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = parts.as_slice() else {
        return Err("Invalid JWT: expected three dot-separated segments".into());
    };
    if signature.is_empty() {
        return Err("Invalid JWT Signature.".into());
    }
    b64url(signature)?;
    let header: Value = serde_json::from_slice(&b64url(header)?)
        .map_err(|_| "Invalid JWT: header is not JSON".to_owned())?;
    if !header.get("alg").is_some_and(Value::is_string) {
        return Err("Invalid JWT: header has no alg".into());
    }
    let claims: Value = serde_json::from_slice(&b64url(claims)?)
        .map_err(|_| "Invalid JWT: claim set is not JSON".to_owned())?;
    for k in ["iss", "scope", "aud"] {
        if !claims.get(k).is_some_and(Value::is_string) {
            return Err(format!("Invalid JWT: missing or invalid claim {k}"));
        }
    }
    let num = |k: &str| -> Result<i64, String> {
        claims
            .get(k)
            .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
            .ok_or_else(|| format!("Invalid JWT: missing or invalid claim {k}"))
    };
    Ok(Claims {
        scope: claims
            .get("scope")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        iat: num("iat")?,
        exp: num("exp")?,
    })
}

/// `application/x-www-form-urlencoded` / query-string decoding.
pub fn form_decode(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                match hex
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn seg(v: &Value) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    }

    #[test]
    fn jwt_checks() {
        let now = unix_secs();
        let h = seg(&serde_json::json!({"alg":"RS256","typ":"JWT"}));
        let c = seg(
            &serde_json::json!({"iss":"a@b","scope":CLOUD_PLATFORM,"aud":"x","iat":now,"exp":now+3600}),
        );
        let ok = format!("{h}.{c}.c2ln");
        assert!(parse_jwt(&ok).is_ok());
        assert!(parse_jwt("a.b").is_err());
        let missing = seg(&serde_json::json!({"iss":"a@b","aud":"x","iat":now,"exp":now+60}));
        assert!(parse_jwt(&format!("{h}.{missing}.c2ln")).is_err());
    }

    #[test]
    fn form_decoding() {
        let f = form_decode("grant_type=urn%3Aietf%3Aparams&assertion=a.b.c&x=1+2&bad=%zz&t=%4");
        assert_eq!(f[0].1, "urn:ietf:params");
        assert_eq!(f[1].1, "a.b.c");
        assert_eq!(f[2].1, "1 2");
        assert_eq!(f[3].1, "%zz");
        assert_eq!(f[4].1, "%4");
    }
}
