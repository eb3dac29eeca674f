//! Who may use the admin API: the holder of the admin token (`Authorization: Bearer`), or a
//! console session signed in with it (an HttpOnly, SameSite=Strict cookie, and a CSRF token
//! the page sends back as `X-CSRF-Token` on every change).
//!
//! Sessions live in this process's memory (a restart or upgrade signs the console out). The
//! token is compared in constant time, through its SHA-256 so lengths leak nothing either.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::Method;
use rand::distributions::{Alphanumeric, DistString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::AdminError;
use super::http::Request;
use crate::commands::Actor;

pub const COOKIE: &str = "tg_session";
/// How long a console session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The most sessions kept at once (the oldest goes first).
const MAX_SESSIONS: usize = 1024;

struct Session {
    csrf: String,
    /// A short, non-secret name for the audit log.
    name: String,
    expires: Instant,
}

pub struct Guard {
    /// SHA-256 of the admin token; `None`: the API and console are off.
    token: Option<[u8; 32]>,
    /// The environment variable the token is read from (named in messages).
    env: String,
    sessions: Mutex<HashMap<String, Session>>,
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

fn random(n: usize) -> String {
    Alphanumeric.sample_string(&mut rand::thread_rng(), n)
}

/// Constant-time equality of two strings (through their digests).
fn same(a: &str, b: &str) -> bool {
    digest(a).ct_eq(&digest(b)).into()
}

impl Guard {
    /// `token`: the admin token (empty counts as none); `env`: where it was read from.
    pub fn new(token: Option<&str>, env: &str) -> Self {
        Guard {
            token: token.filter(|t| !t.is_empty()).map(digest),
            env: env.to_owned(),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    fn token_matches(&self, given: &str) -> Result<bool, AdminError> {
        let want = self
            .token
            .ok_or_else(|| AdminError::Disabled(self.env.clone()))?;
        Ok(bool::from(digest(given).ct_eq(&want)))
    }

    /// Who is calling, or why they may not.
    pub fn check(&self, req: &Request) -> Result<Actor, AdminError> {
        if let Some(auth) = req.header("authorization") {
            let token = auth
                .strip_prefix("Bearer ")
                .or_else(|| auth.strip_prefix("bearer "))
                .unwrap_or_default();
            return match self.token_matches(token.trim())? {
                true => Ok(Actor::admin_token()),
                false => Err(AdminError::Unauthorized),
            };
        }
        if !self.enabled() {
            return Err(AdminError::Disabled(self.env.clone()));
        }
        let id = req.cookie(COOKIE).ok_or(AdminError::Unauthorized)?;
        let sessions = self.sessions.lock().map_err(|_| AdminError::Unauthorized)?;
        let session = sessions
            .get(id)
            .filter(|s| s.expires > Instant::now())
            .ok_or(AdminError::Unauthorized)?;
        let safe = matches!(req.method, Method::GET | Method::HEAD);
        if !safe
            && !same(
                req.header("x-csrf-token").unwrap_or_default(),
                &session.csrf,
            )
        {
            return Err(AdminError::Csrf);
        }
        Ok(Actor::console(&session.name))
    }

    /// Signs in with the admin token: `(session id for the cookie, CSRF token, session name)`.
    pub fn sign_in(&self, token: &str) -> Result<(String, String, String), AdminError> {
        if !self.token_matches(token)? {
            return Err(AdminError::Unauthorized);
        }
        let (id, csrf, name) = (random(40), random(32), random(8));
        let now = Instant::now();
        let mut sessions = self.sessions.lock().map_err(|_| AdminError::Unauthorized)?;
        sessions.retain(|_, s| s.expires > now);
        if sessions.len() >= MAX_SESSIONS {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                sessions.remove(&k);
            }
        }
        let session = Session {
            csrf: csrf.clone(),
            name: name.clone(),
            expires: now + SESSION_TTL,
        };
        sessions.insert(id.clone(), session);
        Ok((id, csrf, name))
    }

    /// The CSRF token of the caller's live session (the console asks for it after a reload).
    pub fn csrf(&self, req: &Request) -> Option<String> {
        let id = req.cookie(COOKIE)?;
        let sessions = self.sessions.lock().ok()?;
        let s = sessions.get(id).filter(|s| s.expires > Instant::now())?;
        Some(s.csrf.clone())
    }

    pub fn sign_out(&self, req: &Request) {
        if let (Some(id), Ok(mut sessions)) = (req.cookie(COOKIE), self.sessions.lock()) {
            sessions.remove(id);
        }
    }
}

/// The `Set-Cookie` value of a new session, and of signing out.
pub fn cookie(id: Option<&str>) -> String {
    match id {
        Some(id) => format!(
            "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            SESSION_TTL.as_secs()
        ),
        None => format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, headers: &[(&'static str, &str)]) -> Request {
        let mut r = Request::new(method, "/admin/v1/workspaces");
        for (k, v) in headers {
            r.headers.insert(*k, v.parse().unwrap());
        }
        r
    }

    #[test]
    fn the_token_or_a_session_with_its_csrf_token_is_needed() {
        let g = Guard::new(Some("t0ken"), "TOLLGATE_ADMIN_TOKEN");
        let bearer = |t: &str| req(Method::POST, &[("authorization", &format!("Bearer {t}"))]);
        assert_eq!(g.check(&bearer("t0ken")).unwrap(), Actor::admin_token());
        assert!(matches!(
            g.check(&bearer("t0ke")),
            Err(AdminError::Unauthorized)
        ));
        assert!(matches!(
            g.check(&req(Method::GET, &[])),
            Err(AdminError::Unauthorized)
        ));
        assert!(matches!(g.sign_in("nope"), Err(AdminError::Unauthorized)));

        let (id, csrf, name) = g.sign_in("t0ken").unwrap();
        let cookie = format!("{COOKIE}={id}");
        let read = req(Method::GET, &[("cookie", &cookie)]);
        assert_eq!(g.check(&read).unwrap(), Actor::console(&name));
        assert_eq!(g.csrf(&read), Some(csrf.clone()));
        let change = req(Method::POST, &[("cookie", &cookie)]);
        assert!(matches!(g.check(&change), Err(AdminError::Csrf)));
        let forged = req(Method::POST, &[("cookie", &cookie), ("x-csrf-token", "x")]);
        assert!(matches!(g.check(&forged), Err(AdminError::Csrf)));
        let good = req(
            Method::POST,
            &[("cookie", &cookie), ("x-csrf-token", &csrf)],
        );
        assert!(g.check(&good).is_ok());

        g.sign_out(&read);
        assert!(matches!(g.check(&read), Err(AdminError::Unauthorized)));
    }

    #[test]
    fn without_a_token_everything_is_off() {
        let g = Guard::new(None, "MY_TOKEN");
        assert!(!g.enabled());
        let e = g.check(&req(Method::GET, &[])).unwrap_err();
        assert!(
            matches!(&e, AdminError::Disabled(v) if v == "MY_TOKEN"),
            "{e:?}"
        );
        assert!(matches!(g.sign_in(""), Err(AdminError::Disabled(_))));
        assert!(!Guard::new(Some(""), "T").enabled());
    }
}
