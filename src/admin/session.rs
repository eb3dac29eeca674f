//! Who may use the admin API: the holder of the admin token (`Authorization: Bearer`), or a
//! console session signed in with it (an HttpOnly, SameSite=Strict cookie, and a CSRF token
//! the page sends back as `X-CSRF-Token` on every change).
//!
//! Sessions live in this process's memory (a restart or upgrade signs the console out). The
//! token is compared in constant time, through its SHA-256 so lengths leak nothing either; it
//! must be at least [`MIN_TOKEN_CHARS`] long. A wrong token (signing in, or on an API call) is
//! logged with the client's address and counts against it ([`Throttle`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::Method;
use rand::distributions::{Alphanumeric, DistString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::AdminError;
use super::http::Request;
use super::throttle::Throttle;
use crate::commands::Actor;

pub const COOKIE: &str = "tg_session";
/// How long a console session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The most sessions kept at once (the oldest goes first).
const MAX_SESSIONS: usize = 1024;
/// The shortest admin token accepted: guessing it must stay hopeless.
pub const MIN_TOKEN_CHARS: usize = 32;

/// The admin token configured is too short: the gateway does not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "the admin token in {env} is {chars} characters long; it must be at least {MIN_TOKEN_CHARS} \
     characters (e.g. `openssl rand -hex 32`), or unset to turn the admin API and console off"
)]
pub struct WeakToken {
    env: String,
    chars: usize,
}

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
    /// Wrong tokens per client address.
    throttle: Throttle,
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
    pub fn new(token: Option<&str>, env: &str) -> Result<Self, WeakToken> {
        let token = token.filter(|t| !t.is_empty());
        if let Some(chars) = token.map(|t| t.chars().count()) {
            if chars < MIN_TOKEN_CHARS {
                let env = env.to_owned();
                return Err(WeakToken { env, chars });
            }
        }
        Ok(Guard {
            token: token.map(digest),
            env: env.to_owned(),
            sessions: Mutex::new(HashMap::new()),
            throttle: Throttle::default(),
        })
    }

    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    /// Compares a token given by `req`'s client: `Unauthorized` when wrong (counted and
    /// logged), `Throttled` while its address has failed too often.
    fn admit_token(&self, req: &Request, given: &str) -> Result<(), AdminError> {
        let want = self
            .token
            .ok_or_else(|| AdminError::Disabled(self.env.clone()))?;
        // Requests built without a socket (tests) share one address.
        let client = req.peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let now = Instant::now();
        if let Err(wait) = self.throttle.check(client, now) {
            let retry_after = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
            return Err(AdminError::Throttled { retry_after });
        }
        if bool::from(digest(given).ct_eq(&want)) {
            return Ok(());
        }
        self.throttle.failed(client, now);
        tracing::warn!(client = %client, path = %req.path, "admin sign-in failed: wrong admin token");
        Err(AdminError::Unauthorized)
    }

    /// Who is calling, or why they may not.
    pub fn check(&self, req: &Request) -> Result<Actor, AdminError> {
        if let Some(auth) = req.header("authorization") {
            let token = auth
                .strip_prefix("Bearer ")
                .or_else(|| auth.strip_prefix("bearer "))
                .unwrap_or_default();
            self.admit_token(req, token.trim())?;
            return Ok(Actor::admin_token());
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

    /// Signs `req`'s client in with the admin token: `(session id for the cookie, CSRF token,
    /// session name)`.
    pub fn sign_in(
        &self,
        req: &Request,
        token: &str,
    ) -> Result<(String, String, String), AdminError> {
        self.admit_token(req, token)?;
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

    const TOKEN: &str = "t0ken-t0ken-t0ken-t0ken-t0ken-32";

    fn req(method: Method, headers: &[(&'static str, &str)]) -> Request {
        let mut r = Request::new(method, "/admin/v1/workspaces");
        for (k, v) in headers {
            r.headers.insert(*k, v.parse().unwrap());
        }
        r
    }

    fn bearer(t: &str) -> Request {
        req(Method::POST, &[("authorization", &format!("Bearer {t}"))])
    }

    #[test]
    fn the_token_or_a_session_with_its_csrf_token_is_needed() {
        let g = Guard::new(Some(TOKEN), "TOLLGATE_ADMIN_TOKEN").unwrap();
        assert_eq!(g.check(&bearer(TOKEN)).unwrap(), Actor::admin_token());
        assert!(matches!(
            g.check(&bearer(&TOKEN[1..])),
            Err(AdminError::Unauthorized)
        ));
        assert!(matches!(
            g.check(&req(Method::GET, &[])),
            Err(AdminError::Unauthorized)
        ));
        let anyone = req(Method::POST, &[]);
        assert!(matches!(
            g.sign_in(&anyone, "nope"),
            Err(AdminError::Unauthorized)
        ));

        let (id, csrf, name) = g.sign_in(&anyone, TOKEN).unwrap();
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
        let g = Guard::new(None, "MY_TOKEN").unwrap();
        assert!(!g.enabled());
        let e = g.check(&req(Method::GET, &[])).unwrap_err();
        assert!(
            matches!(&e, AdminError::Disabled(v) if v == "MY_TOKEN"),
            "{e:?}"
        );
        let anyone = req(Method::POST, &[]);
        assert!(matches!(
            g.sign_in(&anyone, ""),
            Err(AdminError::Disabled(_))
        ));
        assert!(!Guard::new(Some(""), "T").unwrap().enabled());
    }

    #[test]
    fn a_token_shorter_than_32_characters_is_refused() {
        let short = &TOKEN[..31];
        let e = Guard::new(Some(short), "MY_TOKEN")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("MY_TOKEN") && e.contains("31 characters"), "{e}");
        assert!(e.contains("at least 32"), "{e}");
        assert!(!e.contains(short), "never the token itself: {e}");
        assert!(Guard::new(Some(&TOKEN[..32]), "MY_TOKEN").is_ok());
        let wide = "é".repeat(32); // characters, not bytes
        assert!(Guard::new(Some(&wide), "MY_TOKEN").is_ok());
    }

    #[test]
    fn wrong_tokens_are_throttled_per_client_and_then_the_right_one_too() {
        let g = Guard::new(Some(TOKEN), "T").unwrap();
        let from = |ip: &str, mut r: Request| {
            r.peer = Some(ip.parse().unwrap());
            r
        };
        for i in 0..10 {
            let wrong = from("192.0.2.1", bearer(&format!("guess-{i}")));
            assert!(matches!(g.check(&wrong), Err(AdminError::Unauthorized)));
        }
        let e = g.check(&from("192.0.2.1", bearer(TOKEN))).unwrap_err();
        assert!(
            matches!(e, AdminError::Throttled { retry_after: 6 }),
            "{e:?}"
        );
        let e = g.sign_in(&from("192.0.2.1", req(Method::POST, &[])), TOKEN);
        assert!(matches!(e, Err(AdminError::Throttled { .. })));
        let other = from("192.0.2.2", bearer(TOKEN));
        assert_eq!(g.check(&other).unwrap(), Actor::admin_token());
    }
}
