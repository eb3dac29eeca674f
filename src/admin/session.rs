//! Who may use the admin API: the holder of the admin token (`Authorization: Bearer`), or a
//! console session signed in with it (an HttpOnly, SameSite=Strict cookie — `Secure` when the
//! admin listener speaks TLS — and a CSRF token the page sends back as `X-CSRF-Token` on every
//! change).
//!
//! Sessions live in the store (`console_sessions`), found by the SHA-256 of their id: the id
//! itself, the cookie's value, is never stored, so a copy of the table signs no one in. So a
//! graceful upgrade, a restart or another replica keeps every operator signed in, and
//! signing out ends the session everywhere at once. (Signed cookies would have needed a key to
//! configure, rotate and keep secret, and could neither be ended by signing out nor expire
//! after idle time without server state anyway.) Each console request reads its session from
//! the store and moves its `last_seen` on (the admin path, not the hot path). A session ends
//! after `tollgate.console.session_idle` without use or `session_max` after its sign-in; an
//! ended one is deleted when it is next presented, and every sign-in deletes the ended ones
//! (and the least recently used past [`MAX_SESSIONS`]).
//!
//! The token is compared in constant time, through its SHA-256 so lengths leak nothing either;
//! it must be at least [`MIN_TOKEN_CHARS`] long. Two limits per client address answer 429 with
//! `Retry-After` ([`Throttle`]): sign-in attempts as such (`sign_ins_per_minute`, right token
//! or not), and wrong tokens, signing in or on an API call (each one logged with the address).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use chrono::{DateTime, Utc};
use http::Method;
use rand::distributions::{Alphanumeric, DistString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::AdminError;
use super::http::Request;
use super::throttle::Throttle;
use crate::auth::MANAGEMENT_KEY_PREFIX;
use crate::commands::{self, Actor};
use crate::config::console::ConsoleConf;
use crate::store::{ConsoleSession, Store};

pub const COOKIE: &str = "tg_session";
/// The most sessions kept at once (the least recently used go first).
pub const MAX_SESSIONS: usize = 1024;
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

/// A new session: what its cookie and its page need.
#[derive(Debug)]
pub struct SignedIn {
    /// The `Set-Cookie` value carrying the session id.
    pub cookie: String,
    pub csrf: String,
}

/// What a request's bearer token is, as far as the guard can tell without the store.
#[derive(Debug, PartialEq, Eq)]
pub enum Bearer<'a> {
    /// The admin token.
    Admin,
    /// A secret of the management keys' form, to look up (and [`Guard::refuse`] when it is no
    /// working key).
    Management(&'a str),
}

pub struct Guard {
    /// SHA-256 of the admin token; `None`: the API and console are off.
    token: Option<[u8; 32]>,
    /// The environment variable the token is read from (named in messages).
    env: String,
    /// How long sessions last, how often an address may sign in.
    console: ConsoleConf,
    /// The admin listener speaks TLS: the cookie is `Secure`.
    secure: bool,
    /// Wrong tokens per client address.
    wrong_tokens: Throttle,
    /// Sign-in attempts per client address.
    sign_ins: Throttle,
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// How the store knows a session: the hex SHA-256 of its id.
fn id_hash(id: &str) -> String {
    hex::encode(digest(id))
}

fn random(n: usize) -> String {
    Alphanumeric.sample_string(&mut rand::thread_rng(), n)
}

/// Constant-time equality of two strings (through their digests).
fn same(a: &str, b: &str) -> bool {
    digest(a).ct_eq(&digest(b)).into()
}

/// `Retry-After` seconds for a wait: rounded up, at least 1.
fn retry_after(wait: Duration) -> u64 {
    wait.as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0))
        .max(1)
}

/// The client a request is counted against (requests built without a socket, in tests, share
/// one address).
fn client(req: &Request) -> IpAddr {
    req.peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// `now - d`, or the beginning of time.
fn before(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| now.checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// `now + d`, or the end of time.
fn after(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl Guard {
    /// `token`: the admin token (empty counts as none); `env`: where it was read from. Sessions
    /// follow `ConsoleConf`'s defaults until [`Guard::with_console`].
    pub fn new(token: Option<&str>, env: &str) -> Result<Self, WeakToken> {
        let token = token.filter(|t| !t.is_empty());
        if let Some(chars) = token.map(|t| t.chars().count()) {
            if chars < MIN_TOKEN_CHARS {
                let env = env.to_owned();
                return Err(WeakToken { env, chars });
            }
        }
        let console = ConsoleConf::default();
        Ok(Guard {
            token: token.map(digest),
            env: env.to_owned(),
            console,
            secure: false,
            wrong_tokens: Throttle::default(),
            sign_ins: Throttle::per_minute(console.sign_ins_per_minute),
        })
    }

    /// Sessions and sign-ins as `tollgate.console` says; `secure`: the admin listener speaks
    /// TLS, so the cookie is only ever sent over it.
    pub fn with_console(mut self, console: ConsoleConf, secure: bool) -> Self {
        self.sign_ins = Throttle::per_minute(console.sign_ins_per_minute);
        self.console = console;
        self.secure = secure;
        self
    }

    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    fn disabled(&self) -> AdminError {
        AdminError::Disabled(self.env.clone())
    }

    /// `Disabled` when no admin token is configured.
    pub fn require_enabled(&self) -> Result<(), AdminError> {
        if self.enabled() {
            Ok(())
        } else {
            Err(self.disabled())
        }
    }

    /// Whether `given` is the admin token; `Throttled` while `req`'s address has failed too
    /// often (then no token is even compared).
    fn is_admin_token(&self, req: &Request, given: &str) -> Result<bool, AdminError> {
        let want = self.token.ok_or_else(|| self.disabled())?;
        if let Err(wait) = self
            .wrong_tokens
            .check(client(req), std::time::Instant::now())
        {
            let retry_after = retry_after(wait);
            return Err(AdminError::Throttled { retry_after });
        }
        Ok(bool::from(digest(given).ct_eq(&want)))
    }

    /// Compares a token given by `req`'s client: `Unauthorized` when wrong (counted and
    /// logged), `Throttled` while its address has failed too often.
    fn admit_token(&self, req: &Request, given: &str) -> Result<(), AdminError> {
        if self.is_admin_token(req, given)? {
            Ok(())
        } else {
            Err(self.refuse(req, "wrong admin token"))
        }
    }

    /// A wrong credential from `req`'s client (`what` it was, for the log): counted against
    /// its address, logged, `Unauthorized`.
    pub fn refuse(&self, req: &Request, what: &str) -> AdminError {
        let client = client(req);
        self.wrong_tokens.count(client, std::time::Instant::now());
        tracing::warn!(client = %client, path = %req.path, "admin sign-in failed: {what}");
        AdminError::Unauthorized
    }

    /// What the caller's bearer token (`Authorization: Bearer`) is: the admin token, or one
    /// of a management key's form for the API to look up; `None` when the request carries no
    /// token (then a console session may be its credential). Any other token is refused.
    pub fn bearer<'r>(&self, req: &'r Request) -> Result<Option<Bearer<'r>>, AdminError> {
        let Some(auth) = req.header("authorization") else {
            return if self.enabled() {
                Ok(None)
            } else {
                Err(self.disabled())
            };
        };
        let token = auth
            .strip_prefix("Bearer ")
            .or_else(|| auth.strip_prefix("bearer "))
            .unwrap_or_default()
            .trim();
        if self.is_admin_token(req, token)? {
            Ok(Some(Bearer::Admin))
        } else if token.starts_with(MANAGEMENT_KEY_PREFIX) {
            Ok(Some(Bearer::Management(token)))
        } else {
            Err(self.refuse(req, "wrong admin token"))
        }
    }

    /// The caller's live console session (its last use moved to now), or `Unauthorized`.
    pub async fn session(
        &self,
        req: &Request,
        store: &dyn Store,
    ) -> Result<ConsoleSession, AdminError> {
        self.session_at(req, store, Utc::now()).await
    }

    async fn session_at(
        &self,
        req: &Request,
        store: &dyn Store,
        now: DateTime<Utc>,
    ) -> Result<ConsoleSession, AdminError> {
        self.require_enabled()?;
        let id = req.cookie(COOKIE).ok_or(AdminError::Unauthorized)?;
        let idle_since = before(now, self.console.session_idle);
        store
            .touch_session(&id_hash(id), now, idle_since)
            .await?
            .ok_or(AdminError::Unauthorized)
    }

    /// The console session calling, checked for its CSRF token unless the request is a read.
    pub async fn console(&self, req: &Request, store: &dyn Store) -> Result<Actor, AdminError> {
        let session = self.session(req, store).await?;
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

    /// Signs `req`'s client in with the admin token: a new session in the store, audited.
    /// `Throttled` past `sign_ins_per_minute` attempts from its address.
    pub async fn sign_in(
        &self,
        req: &Request,
        token: &str,
        store: &dyn Store,
    ) -> Result<SignedIn, AdminError> {
        self.require_enabled()?;
        let (client, instant) = (client(req), std::time::Instant::now());
        if let Err(wait) = self.sign_ins.check(client, instant) {
            let retry_after = retry_after(wait);
            return Err(AdminError::TooManySignIns { retry_after });
        }
        self.sign_ins.count(client, instant);
        self.admit_token(req, token)?;
        let now = Utc::now();
        let idle_since = before(now, self.console.session_idle);
        let room = MAX_SESSIONS.saturating_sub(1);
        store.purge_sessions(now, idle_since, room).await?;
        let id = random(40);
        let session = ConsoleSession {
            id_hash: id_hash(&id),
            name: random(8),
            csrf: random(32),
            created_at: now,
            last_seen: now,
            expires_at: after(now, self.console.session_max),
        };
        commands::sign_in(store, &session).await?;
        Ok(SignedIn {
            cookie: set_cookie(Some(&id), self.console.session_max, self.secure),
            csrf: session.csrf,
        })
    }

    /// Ends the caller's session in the store; the `Set-Cookie` value that clears it.
    pub async fn sign_out(&self, req: &Request, store: &dyn Store) -> Result<String, AdminError> {
        if let Some(id) = req.cookie(COOKIE) {
            store.delete_session(&id_hash(id)).await?;
        }
        Ok(set_cookie(None, Duration::ZERO, self.secure))
    }
}

/// The `Set-Cookie` value of a new session lasting `max_age` (`None`: of signing out).
/// `secure`: sent back only over TLS.
pub fn set_cookie(id: Option<&str>, max_age: Duration, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    let (id, max_age) = match id {
        Some(id) => (id, max_age.as_secs()),
        None => ("", 0),
    };
    format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;

    const TOKEN: &str = "t0ken-t0ken-t0ken-t0ken-t0ken-32";

    async fn store() -> SqliteStore {
        let s = SqliteStore::open(":memory:").unwrap();
        s.migrate().await.unwrap();
        s
    }

    fn guard() -> Guard {
        Guard::new(Some(TOKEN), "TOLLGATE_ADMIN_TOKEN").unwrap()
    }

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

    fn from(ip: &str, mut r: Request) -> Request {
        r.peer = Some(ip.parse().unwrap());
        r
    }

    /// The `tg_session=…` pair a browser sends back.
    fn cookie_of(signed: &SignedIn) -> String {
        signed.cookie.split(';').next().unwrap().to_owned()
    }

    fn minutes(n: i64) -> chrono::Duration {
        chrono::Duration::minutes(n)
    }

    #[tokio::test]
    async fn the_token_or_a_session_with_its_csrf_token_is_needed() {
        let (g, s) = (guard(), store().await);
        assert_eq!(g.bearer(&bearer(TOKEN)).unwrap(), Some(Bearer::Admin));
        let management = bearer("mk-tg-0123456789");
        assert_eq!(
            g.bearer(&management).unwrap(),
            Some(Bearer::Management("mk-tg-0123456789")),
            "looked up by the API, not compared"
        );
        assert!(matches!(
            g.bearer(&bearer(&TOKEN[1..])),
            Err(AdminError::Unauthorized)
        ));
        assert_eq!(g.bearer(&req(Method::GET, &[])).unwrap(), None);
        assert!(matches!(
            g.console(&req(Method::GET, &[]), &s).await,
            Err(AdminError::Unauthorized)
        ));
        let anyone = req(Method::POST, &[]);
        assert!(matches!(
            g.sign_in(&anyone, "nope", &s).await,
            Err(AdminError::Unauthorized)
        ));

        let signed = g.sign_in(&anyone, TOKEN, &s).await.unwrap();
        let cookie = cookie_of(&signed);
        let read = req(Method::GET, &[("cookie", &cookie)]);
        let actor = g.console(&read, &s).await.unwrap();
        assert!(actor.as_str().starts_with("console:"), "{actor:?}");
        assert_eq!(g.session(&read, &s).await.unwrap().csrf, signed.csrf);
        let change = req(Method::POST, &[("cookie", &cookie)]);
        assert!(matches!(
            g.console(&change, &s).await,
            Err(AdminError::Csrf)
        ));
        let forged = req(Method::POST, &[("cookie", &cookie), ("x-csrf-token", "x")]);
        assert!(matches!(
            g.console(&forged, &s).await,
            Err(AdminError::Csrf)
        ));
        let good = req(
            Method::POST,
            &[("cookie", &cookie), ("x-csrf-token", &signed.csrf)],
        );
        assert_eq!(g.console(&good, &s).await.unwrap(), actor);

        // The store knows the session by its id's hash only.
        let id = cookie.split_once('=').unwrap().1;
        let stored = g.session(&read, &s).await.unwrap();
        assert_eq!(stored.id_hash, id_hash(id));
        assert!(!stored.id_hash.contains(id));

        let cleared = g.sign_out(&read, &s).await.unwrap();
        assert!(cleared.contains("Max-Age=0"), "{cleared}");
        assert!(matches!(
            g.console(&read, &s).await,
            Err(AdminError::Unauthorized)
        ));
    }

    #[tokio::test]
    async fn a_session_ends_when_left_idle_or_at_its_maximum_however_busy() {
        let console = ConsoleConf {
            session_idle: Duration::from_secs(30 * 60),
            session_max: Duration::from_secs(2 * 3600),
            ..ConsoleConf::default()
        };
        let (g, s) = (guard().with_console(console, false), store().await);
        let busy = g.sign_in(&req(Method::POST, &[]), TOKEN, &s).await.unwrap();
        let idle = g.sign_in(&req(Method::POST, &[]), TOKEN, &s).await.unwrap();
        let t0 = Utc::now();
        let busy = req(Method::GET, &[("cookie", &cookie_of(&busy))]);
        let idle = req(Method::GET, &[("cookie", &cookie_of(&idle))]);

        // Used every 20 minutes, a session lasts until its maximum, then ends.
        for n in 1..6 {
            let t = t0 + minutes(20 * n);
            assert!(
                g.session_at(&busy, &s, t).await.is_ok(),
                "minute {}",
                20 * n
            );
        }
        let end = g.session_at(&busy, &s, t0 + minutes(120)).await;
        assert!(matches!(end, Err(AdminError::Unauthorized)), "{end:?}");

        // Left alone longer than the idle time, a session ends; the ended one is deleted.
        assert!(g.session_at(&idle, &s, t0 + minutes(29)).await.is_ok());
        let end = g.session_at(&idle, &s, t0 + minutes(60)).await;
        assert!(matches!(end, Err(AdminError::Unauthorized)), "{end:?}");
        let id = cookie_of_req(&idle);
        assert!(
            !s.delete_session(&id_hash(&id)).await.unwrap(),
            "deleted when presented"
        );
    }

    fn cookie_of_req(r: &Request) -> String {
        r.cookie(COOKIE).unwrap().to_owned()
    }

    #[tokio::test]
    async fn sign_ins_are_limited_per_client_address_right_token_or_not() {
        let console = ConsoleConf {
            sign_ins_per_minute: 3,
            ..ConsoleConf::default()
        };
        let (g, s) = (guard().with_console(console, false), store().await);
        let here = || from("192.0.2.1", req(Method::POST, &[]));
        for _ in 0..3 {
            assert!(g.sign_in(&here(), TOKEN, &s).await.is_ok());
        }
        let e = g.sign_in(&here(), TOKEN, &s).await.unwrap_err();
        assert!(
            matches!(e, AdminError::TooManySignIns { retry_after: 20 }),
            "{e:?}"
        );
        let res = e.response();
        assert_eq!(res.status, http::StatusCode::TOO_MANY_REQUESTS);
        assert!(res
            .headers
            .iter()
            .any(|(k, v)| k == http::header::RETRY_AFTER && v == "20"));
        let elsewhere = from("192.0.2.2", req(Method::POST, &[]));
        assert!(g.sign_in(&elsewhere, TOKEN, &s).await.is_ok());
        // The API's token is not a sign-in: it is not held up.
        assert!(g.bearer(&from("192.0.2.1", bearer(TOKEN))).is_ok());
    }

    #[tokio::test]
    async fn the_cookie_is_secure_exactly_when_the_admin_listener_speaks_tls() {
        let twelve_hours = Duration::from_secs(12 * 3600);
        let plain = set_cookie(Some("abc"), twelve_hours, false);
        assert_eq!(
            plain,
            "tg_session=abc; HttpOnly; SameSite=Strict; Path=/; Max-Age=43200"
        );
        let tls = set_cookie(Some("abc"), twelve_hours, true);
        assert_eq!(tls, format!("{plain}; Secure"));
        assert!(set_cookie(None, twelve_hours, true).ends_with("Max-Age=0; Secure"));

        let s = store().await;
        let anyone = req(Method::POST, &[]);
        let over_tls = guard().with_console(ConsoleConf::default(), true);
        let signed = over_tls.sign_in(&anyone, TOKEN, &s).await.unwrap();
        assert!(signed.cookie.ends_with("; Secure"), "{}", signed.cookie);
        let read = req(Method::GET, &[("cookie", &cookie_of(&signed))]);
        assert!(over_tls
            .sign_out(&read, &s)
            .await
            .unwrap()
            .ends_with("; Secure"));
        let signed = guard().sign_in(&anyone, TOKEN, &s).await.unwrap();
        assert!(!signed.cookie.contains("Secure"), "{}", signed.cookie);
    }

    #[tokio::test]
    async fn without_a_token_everything_is_off() {
        let (g, s) = (Guard::new(None, "MY_TOKEN").unwrap(), store().await);
        assert!(!g.enabled());
        let e = g.bearer(&req(Method::GET, &[])).unwrap_err();
        assert!(
            matches!(&e, AdminError::Disabled(v) if v == "MY_TOKEN"),
            "{e:?}"
        );
        let anyone = req(Method::POST, &[]);
        assert!(matches!(
            g.sign_in(&anyone, "", &s).await,
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

    #[tokio::test]
    async fn wrong_tokens_are_throttled_per_client_and_then_the_right_one_too() {
        let (g, s) = (guard(), store().await);
        for i in 0..10 {
            let wrong = from("192.0.2.1", bearer(&format!("guess-{i}")));
            assert!(matches!(g.bearer(&wrong), Err(AdminError::Unauthorized)));
        }
        let e = g.bearer(&from("192.0.2.1", bearer(TOKEN))).unwrap_err();
        assert!(
            matches!(e, AdminError::Throttled { retry_after: 6 }),
            "{e:?}"
        );
        let e = g
            .sign_in(&from("192.0.2.1", req(Method::POST, &[])), TOKEN, &s)
            .await;
        assert!(matches!(e, Err(AdminError::Throttled { .. })));
        let other = from("192.0.2.2", bearer(TOKEN));
        assert_eq!(g.bearer(&other).unwrap(), Some(Bearer::Admin));
        let refused = from("192.0.2.3", bearer("mk-tg-unknown"));
        for _ in 0..10 {
            assert!(matches!(
                g.refuse(&refused, "unknown management key"),
                AdminError::Unauthorized
            ));
        }
        let e = g.bearer(&refused).unwrap_err();
        assert!(
            matches!(e, AdminError::Throttled { .. }),
            "wrong management keys are throttled like wrong tokens: {e:?}"
        );
    }
}
