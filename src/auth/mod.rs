//! API keys: their format, their hash, and the in-memory cache that answers every request.
//!
//! A secret is `<prefix>` + 32 base62 characters (≈190 bits from the OS RNG). Only its SHA-256
//! is stored; a fast hash suffices because the secret has far more entropy than any attacker
//! can search. The cache maps hash → key record and is an `ArcSwap` snapshot: a lookup is one
//! SHA-256 and one hash-map probe, with no lock and no database. The change-feed follower
//! (`crate::sync`) updates entries when keys are created, changed or revoked anywhere, so a
//! revocation or a new allowlist reaches every replica within the feed's latency (immediate
//! NOTIFY on PostgreSQL, ~200 ms polling on SQLite). Each entry carries its key's model
//! allowlist compiled ([`allowlist`]), so admission checks it without parsing anything.
//!
//! Management keys (the admin API's workspace-scoped credentials) are minted and hashed the
//! same way under their own prefix, [`MANAGEMENT_KEY_PREFIX`], but live in their own table,
//! never in this cache: a management key is no API key, and an API key is no management key.

pub mod allowlist;

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use rand::distributions::{Alphanumeric, DistString};
use sha2::{Digest, Sha256};

pub use allowlist::ModelAllowlist;

use crate::api::GatewayError;
use crate::store::ApiKey;

type Hash = [u8; 32];

/// Every management key's secret starts with this; an API key's with `tollgate.key_prefix`,
/// which may not overlap it (`config`). The prefix tells a reader (and the admin API) what a
/// secret is; each kind is looked up in its own table, so neither is accepted as the other.
pub use crate::config::MANAGEMENT_KEY_PREFIX;

/// The hex SHA-256 of a secret, as the store keeps it.
pub fn secret_hash_hex(secret: &str) -> String {
    hex::encode(hash(secret))
}

/// A freshly minted secret: shown once, then only its hash is kept.
pub struct MintedKey {
    pub secret: String,
    pub hash_hex: String,
    pub hint: String,
}

pub fn mint_secret(prefix: &str) -> MintedKey {
    let body = Alphanumeric.sample_string(&mut rand::rngs::OsRng, 32);
    let secret = format!("{prefix}{body}");
    let hint = format!("{prefix}{}…{}", &body[..4], &body[28..]);
    MintedKey {
        hash_hex: hex::encode(hash(&secret)),
        secret,
        hint,
    }
}

/// An id such as `ws_0Qz8…`: 9 base62 characters of the creation time in microseconds, then
/// 11 random ones (≈65 bits). Ids made later sort after earlier ones, so every index on an id
/// (usage records, their debits, keys, the audit log) grows at its right edge: an insert
/// touches the pages it touched a moment ago instead of a random page of a large index.
pub fn new_id(kind: &str) -> String {
    let mut id = String::with_capacity(kind.len() + 21);
    id.push_str(kind);
    id.push('_');
    let micros = u64::try_from(Utc::now().timestamp_micros()).unwrap_or(0);
    push_base62(&mut id, micros, 9);
    Alphanumeric.append_string(&mut rand::thread_rng(), &mut id, 11);
    id
}

/// When an id made by [`new_id`] (or a completion id: `chatcmpl-…`, `msg_…`) was made: the nine
/// base62 characters after its kind. `None` for an id of another shape.
pub fn id_time(id: &str) -> Option<DateTime<Utc>> {
    let sep = id.find(['_', '-'])?;
    let digits = id.get(sep + 1..sep + 10)?;
    let mut micros: u64 = 0;
    for b in digits.bytes() {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'A'..=b'Z' => b - b'A' + 10,
            b'a'..=b'z' => b - b'a' + 36,
            _ => return None,
        };
        micros = micros.checked_mul(62)?.checked_add(u64::from(d))?;
    }
    DateTime::from_timestamp_micros(i64::try_from(micros).ok()?)
}

/// Appends `n` as exactly `width` base62 digits (`0-9A-Za-z`, ASCII order), most significant
/// first, so equal-width numbers sort as text the way they sort as numbers.
fn push_base62(out: &mut String, mut n: u64, width: usize) {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut buf = [b'0'; 16];
    for slot in buf[..width].iter_mut().rev() {
        *slot = DIGITS[(n % 62) as usize];
        n /= 62;
    }
    out.extend(buf[..width].iter().map(|&b| char::from(b)));
}

fn hash(secret: &str) -> Hash {
    Sha256::digest(secret.as_bytes()).into()
}

/// Extracts the token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
pub fn bearer_token(header: Option<&[u8]>) -> Result<&str, GatewayError> {
    let value = header.ok_or(GatewayError::MissingAuth)?;
    let value = std::str::from_utf8(value).map_err(|_| GatewayError::MissingAuth)?;
    let (scheme, token) = value
        .trim()
        .split_once(' ')
        .ok_or(GatewayError::MissingAuth)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(' ') {
        return Err(GatewayError::MissingAuth);
    }
    Ok(token)
}

/// A key as the cache holds it: the stored record (which it derefs to) and its model
/// allowlist, compiled when the key was loaded.
#[derive(Debug, PartialEq, Eq)]
pub struct CachedKey {
    pub key: ApiKey,
    pub models: ModelAllowlist,
}

impl CachedKey {
    pub fn new(key: ApiKey) -> Self {
        let models = ModelAllowlist::compile(&key.allowed_models);
        CachedKey { key, models }
    }
}

impl Deref for CachedKey {
    type Target = ApiKey;
    fn deref(&self) -> &ApiKey {
        &self.key
    }
}

/// The key cache shared by all proxy threads.
#[derive(Default)]
pub struct KeyCache {
    by_hash: ArcSwap<HashMap<Hash, Arc<CachedKey>>>,
}

impl KeyCache {
    /// Replaces the whole cache (start-up and periodic full reloads).
    pub fn replace_all(&self, keys: Vec<ApiKey>) {
        let map = keys
            .into_iter()
            .filter_map(|k| Some((decode_hash(&k.secret_hash)?, Arc::new(CachedKey::new(k)))))
            .collect();
        self.by_hash.store(Arc::new(map));
    }

    /// Inserts or replaces one key (a creation, change or revocation seen on the change feed).
    pub fn upsert(&self, key: ApiKey) {
        let Some(h) = decode_hash(&key.secret_hash) else {
            return;
        };
        let key = Arc::new(CachedKey::new(key));
        self.by_hash.rcu(|current| {
            let mut next = HashMap::clone(current);
            next.insert(h, key.clone());
            next
        });
    }

    pub fn len(&self) -> usize {
        self.by_hash.load().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Authenticates a bearer token at time `now`.
    pub fn authenticate(
        &self,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<Arc<CachedKey>, GatewayError> {
        let key = self
            .by_hash
            .load()
            .get(&hash(token))
            .cloned()
            .ok_or(GatewayError::InvalidKey)?;
        if key.revoked_at.is_some_and(|at| at <= now) {
            return Err(GatewayError::InvalidKey);
        }
        if key.expires_at.is_some_and(|at| at <= now) {
            return Err(GatewayError::ExpiredKey);
        }
        Ok(key)
    }
}

fn decode_hash(hex_text: &str) -> Option<Hash> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_text, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_id_tells_when_it_was_made() {
        let before = Utc::now();
        for kind in ["ws", "msg"] {
            let t = id_time(&new_id(kind)).unwrap();
            assert!(t >= before - chrono::Duration::microseconds(1) && t <= Utc::now());
        }
        let completion = new_id("chatcmpl").replacen('_', "-", 1);
        assert!(id_time(&completion).unwrap() <= Utc::now());
        for odd in [
            "nodash",
            "x_short",
            "x_!!!!!!!!!aaaaaaaaaaa",
            "chatcmpl-gw1",
        ] {
            assert_eq!(id_time(odd), None, "{odd}");
        }
    }

    use super::*;

    #[test]
    fn ids_sort_by_creation_time_and_stay_unique() {
        let mut made = Vec::new();
        for _ in 0..2_000 {
            made.push(new_id("chatcmpl"));
        }
        assert!(made
            .windows(2)
            .all(|w| w[0] < w[1] || w[0][..18] == w[1][..18]));
        let mut unique = made.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), made.len());
        assert!(made.iter().all(|id| id.len() == "chatcmpl_".len() + 20
            && id[9..].bytes().all(|b| b.is_ascii_alphanumeric())));
        let mut text = String::new();
        push_base62(&mut text, 61 * 62 + 10, 4);
        assert_eq!(text, "00zA");
        let (mut a, mut b) = (String::new(), String::new());
        push_base62(&mut a, 1_764_000_000_000_000, 9);
        push_base62(&mut b, 1_764_000_000_000_001, 9);
        assert!(a < b, "{a} {b}");
    }
    use chrono::Duration;

    fn key(minted: &MintedKey) -> ApiKey {
        ApiKey {
            id: new_id("key"),
            workspace_id: "ws_1".into(),
            name: None,
            secret_hash: minted.hash_hex.clone(),
            hint: minted.hint.clone(),
            created_at: Utc::now(),
            expires_at: None,
            revoked_at: None,
            spend_limit: None,
            limit_reset: None,
            replaced_by: None,
            allowed_models: Vec::new(),
        }
    }

    #[test]
    fn secrets_have_prefix_and_entropy() {
        let a = mint_secret("sk-tg-");
        let b = mint_secret("sk-tg-");
        assert!(a.secret.starts_with("sk-tg-"));
        assert_eq!(
            a.secret.len(),
            "sk-tg-".len() + 32,
            "32 base62 chars ≈ 190 bits"
        );
        assert_ne!(a.secret, b.secret);
        assert!(
            !a.hint.contains(&a.secret[6..20]),
            "hint must not reveal the secret"
        );
        assert_eq!(a.hash_hex.len(), 64);
    }

    #[test]
    fn bearer_header_forms() {
        assert_eq!(bearer_token(Some(b"Bearer abc")).unwrap(), "abc");
        assert_eq!(bearer_token(Some(b"bearer  abc ")).unwrap(), "abc");
        for bad in [
            &b"Basic abc"[..],
            b"Bearer",
            b"Bearer ",
            b"abc",
            b"Bearer a b",
            b"\xff",
        ] {
            assert_eq!(
                bearer_token(Some(bad)),
                Err(GatewayError::MissingAuth),
                "{bad:?}"
            );
        }
        assert_eq!(bearer_token(None), Err(GatewayError::MissingAuth));
    }

    #[test]
    fn authenticates_and_sees_revocation_and_expiry() {
        let cache = KeyCache::default();
        let minted = mint_secret("p-");
        let mut k = key(&minted);
        cache.replace_all(vec![k.clone()]);
        let now = Utc::now();
        assert_eq!(cache.authenticate(&minted.secret, now).unwrap().id, k.id);
        assert_eq!(
            cache.authenticate("p-nope", now),
            Err(GatewayError::InvalidKey)
        );

        k.expires_at = Some(now - Duration::seconds(1));
        cache.upsert(k.clone());
        assert_eq!(
            cache.authenticate(&minted.secret, now),
            Err(GatewayError::ExpiredKey)
        );

        k.allowed_models = vec!["google/*".into()];
        k.expires_at = None;
        cache.upsert(k.clone());
        let found = cache.authenticate(&minted.secret, now).unwrap();
        assert!(
            !found.models.is_unrestricted(),
            "an upsert compiles the new allowlist"
        );
        assert_eq!(found.allowed_models, ["google/*"]);

        k.revoked_at = Some(now);
        cache.upsert(k);
        assert_eq!(
            cache.authenticate(&minted.secret, now),
            Err(GatewayError::InvalidKey),
            "revoked wins"
        );
        assert_eq!(cache.len(), 1);
    }
}
