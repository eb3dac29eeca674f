//! The store's records: what the backends write and read, shared with the rest of the crate
//! (re-exported as `crate::store::*`).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::money::{Price, Usd};

mod json_line;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Workspace {
    pub id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// The period of a key's spend window (UTC calendar windows).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LimitReset {
    Daily,
    Weekly,
    Monthly,
}

impl LimitReset {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Daily => "daily",
            Self::Weekly => "weekly",
            Self::Monthly => "monthly",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "daily" => Some(Self::Daily),
            "weekly" => Some(Self::Weekly),
            "monthly" => Some(Self::Monthly),
            _ => None,
        }
    }
}

/// An API key as stored: never the secret, only its SHA-256 (hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    pub id: String,
    pub workspace_id: String,
    pub name: Option<String>,
    /// Hex SHA-256 of the full secret.
    #[serde(skip)]
    pub secret_hash: String,
    /// Display hint such as `sk-tg-AbCd…wxyz`; not enough to use the key.
    pub hint: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub spend_limit: Option<Usd>,
    pub limit_reset: Option<LimitReset>,
    /// The key a rotation made to replace this one; a replaced key is never rotated again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<String>,
    /// The model id patterns the key may call (`*` matches any run of characters); empty:
    /// every model (`auth::ModelAllowlist`).
    #[serde(default)]
    pub allowed_models: Vec<String>,
}

/// What `create_key` needs; the caller (auth) made the secret and its hash.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub id: String,
    pub workspace_id: String,
    pub name: Option<String>,
    pub secret_hash: String,
    pub hint: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub spend_limit: Option<Usd>,
    pub limit_reset: Option<LimitReset>,
    pub allowed_models: Vec<String>,
}

/// A key's settings as an update leaves them, written whole by
/// [`Store::update_key`](super::Store::update_key) (the command layer merges a partial change
/// with the key as it was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUpdate {
    pub name: Option<String>,
    pub spend_limit: Option<Usd>,
    pub limit_reset: Option<LimitReset>,
    pub allowed_models: Vec<String>,
}

/// A management key as stored: a credential of the admin API scoped to one workspace
/// (`admin::scope`). Never the secret, only its SHA-256 (hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ManagementKey {
    pub id: String,
    /// The one workspace it may manage.
    pub workspace_id: String,
    pub name: Option<String>,
    /// Hex SHA-256 of the full secret.
    #[serde(skip)]
    pub secret_hash: String,
    /// Display hint such as `mk-tg-AbCd…wxyz`; not enough to use the key.
    pub hint: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A key rotation, made in one transaction by [`Store::rotate_key`](super::Store::rotate_key):
/// the replacement is created, the old key marked replaced by it and ended (revoked or given an
/// earlier expiry), and the audit entry appended — all of it, or nothing.
#[derive(Debug, Clone)]
pub struct KeyRotation {
    pub old_id: String,
    pub new: NewKey,
    /// The old key's `revoked_at` and `expires_at` after the rotation.
    pub old_revoked_at: Option<DateTime<Utc>>,
    pub old_expires_at: Option<DateTime<Utc>>,
    /// The instant of the rotation: the old key must still work then (not expired).
    pub now: DateTime<Utc>,
    pub audit: AuditEntry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LedgerKind {
    /// A top-up (positive amount).
    Credit,
    /// A charge for a usage record (negative amount).
    Debit,
    /// Credit taken back (negative amount), its reason in the note: a refund of credit not
    /// spent, never below a zero balance.
    Refund,
}

/// A workspace's balance row: what the credit gate and `GET /v1/credits` are set from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BalanceRow {
    /// The sum of every ledger entry.
    pub balance: Usd,
    /// Credit granted less credit refunded: the sum of the credit and refund entries. What was
    /// charged is `credited - balance`.
    pub credited: Usd,
}

/// A credit or a refund, as [`Store::move_credit`](super::Store::move_credit) writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreditMovement {
    pub entry_id: String,
    pub workspace_id: String,
    /// `Credit` or `Refund` (a debit is written only with its usage record).
    pub kind: LedgerKind,
    /// How much, positive: a refund's entry holds it negated.
    pub amount: Usd,
    /// A refund's reason (required), a credit's note.
    pub note: Option<String>,
}

/// A credit movement's idempotency key (the admin API's `Idempotency-Key` header): the
/// movement is made at most once per (workspace, operation, key) while the key is kept; the
/// same request again gets the first answer, another request under the key is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub workspace_id: String,
    /// `credit.add` or `credit.refund`.
    pub operation: &'static str,
    /// 1 to 255 printable ASCII characters, as the client sent them.
    pub key: String,
    /// Hex SHA-256 of what the request asked (not of its bytes).
    pub request_hash: String,
    pub created_at: DateTime<Utc>,
    /// When the key may be used for another request (24 hours on).
    pub expires_at: DateTime<Utc>,
}

/// A change made at most once: its key, and how its answer (kept with the key, returned to
/// a repeat) is made from what the change wrote, inside the change's own transaction.
pub struct Once<T> {
    pub key: IdempotencyKey,
    pub answer: Box<dyn FnOnce(&T) -> String + Send>,
}

/// What a change given a [`Once`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done<T> {
    /// Made now.
    Made(T),
    /// Made before under the same key for the same request: the answer kept then (JSON), as it
    /// was.
    Replayed(String),
}

impl<T: serde::de::DeserializeOwned> Done<T> {
    /// What was made, a replayed answer read back.
    pub fn into_value(self) -> Result<T, super::StoreError> {
        match self {
            Done::Made(value) => Ok(value),
            Done::Replayed(json) => serde_json::from_str(&json).map_err(|e| {
                super::StoreError::Corrupt(format!("an idempotency key's answer: {e}"))
            }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LedgerEntry {
    pub id: String,
    pub workspace_id: String,
    pub kind: LedgerKind,
    /// Signed: credits positive, debits negative.
    pub amount: Usd,
    pub note: Option<String>,
    pub created_at: DateTime<Utc>,
    /// For a debit: the usage record it charges (each record is charged at most once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_id: Option<String>,
}

/// A catalog model row. Prices are USD per 1M tokens; `None` cache prices mean "no distinct
/// cache price".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelRow {
    pub id: String,
    pub provider: String,
    pub family: String,
    pub kind: String,
    pub upstream_model: String,
    #[serde(default)]
    pub profile: String,
    pub input_price: Price,
    pub output_price: Price,
    #[serde(default)]
    pub cache_read_price: Option<Price>,
    #[serde(default)]
    pub cache_write_price: Option<Price>,
    /// Anthropic's 1-hour cache writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_price: Option<Price>,
    /// Uncached audio input (Gemini).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_input_price: Option<Price>,
    /// Explicit cache storage, USD per 1M tokens per hour (Gemini).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_storage_price: Option<Price>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_context: Option<LongContextRow>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Other ids clients call the model by (the upstream's own names, such as
    /// `claude-sonnet-4-5-20250929`): each names this model only, never another model's id or
    /// alias. Not listed by `/v1/models`.
    #[serde(default)]
    pub aliases: Vec<String>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// The most input tokens a request may carry (estimated; see `api::limits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    #[serde(default = "yes")]
    pub active: bool,
    /// The day the provider stops (or stopped) serving the model: announced for a deprecated
    /// model that is still served, past for a retired one (kept, inactive, for its records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown: Option<NaiveDate>,
    /// Where the prices and limits come from and when they were checked (free text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A model's long-context tier: above `above` prompt tokens, the whole request is billed at
/// these prices (a cache price left out: the tier's input price; audio: the tier's input
/// price; storage: the model's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LongContextRow {
    pub above: u64,
    pub input_price: Price,
    pub output_price: Price,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_price: Option<Price>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_price: Option<Price>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_price: Option<Price>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteRow {
    pub model_id: String,
    pub kind: String,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    /// The id this route calls when it differs from the model's `upstream_model` (Vertex names
    /// older Claude models with an `@date` suffix the Anthropic API does not use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_model: Option<String>,
    #[serde(default)]
    pub priority: i32,
    /// Share of the load among the model's routes of equal priority (1–1000).
    #[serde(default = "one_weight")]
    pub weight: i32,
    #[serde(default = "yes")]
    pub active: bool,
    /// The upstream API an `openai` route calls: `chat` (Chat Completions, the default) or
    /// `responses` (the Responses door passes its requests through to it).
    #[serde(default = "chat_api")]
    pub api: String,
}

fn yes() -> bool {
    true
}

fn chat_api() -> String {
    "chat".into()
}

fn one_weight() -> i32 {
    1
}

/// A named parameter profile; `spec` is its JSON (interpreted by `catalog::Profile`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileRow {
    pub name: String,
    pub spec: serde_json::Value,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogRows {
    #[serde(default)]
    pub profiles: Vec<ProfileRow>,
    #[serde(default)]
    pub models: Vec<ModelRow>,
    #[serde(default)]
    pub routes: Vec<RouteRow>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Key,
    Workspace,
    Balance,
    Catalog,
    /// Usage records of this key (ref id) were written: its window spend changed.
    Spend,
}

/// One row of the change feed: what changed, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub seq: i64,
    pub kind: ChangeKind,
    pub ref_id: String,
}

/// Which billed endpoint a usage record is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum UsageEndpoint {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `POST /v1/messages` (the Anthropic Messages front door).
    Messages,
    /// `POST /v1/responses` (the OpenAI Responses front door).
    Responses,
}

/// How the request ended. Every outcome is billed for the tokens the upstream reported (or,
/// for a stream cut short, the tokens received so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsageOutcome {
    /// The response was delivered in full.
    Complete,
    /// The client went away mid-response; the upstream still produced (and billed) tokens.
    ClientDisconnected,
    /// The upstream failed after producing billable tokens.
    UpstreamFailed,
}

/// Where a usage record's token counts come from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum UsageSource {
    /// The upstream's own counts.
    #[default]
    Reported,
    /// Raised to the gateway's estimate where the upstream had not reported final counts (a
    /// stream the client left, or the upstream broke).
    Estimated,
}

/// One successful request's bill: written once (idempotent by `id`), never changed.
///
/// Invariants (the database refuses a record breaking them): `cost` is exactly the tokens ×
/// the prices recorded here (cached buckets without their own price at the input price —
/// see `billing::cost`), `reasoning_tokens <= output_tokens`, and the key belongs to the
/// workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageRecord {
    /// The completion id returned to the client.
    pub id: String,
    pub workspace_id: String,
    pub key_id: String,
    pub model_id: String,
    pub route: String,
    pub endpoint: UsageEndpoint,
    pub stream: bool,
    /// Input tokens neither read from nor written to a cache.
    pub input_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// All output tokens, reasoning included.
    pub output_tokens: u64,
    /// The part of `output_tokens` spent thinking.
    pub reasoning_tokens: u64,
    /// Prices in force at the time of the request, of the tier it fell in (USD per 1M
    /// tokens).
    pub input_price: Price,
    pub output_price: Price,
    pub cache_read_price: Option<Price>,
    pub cache_write_price: Option<Price>,
    /// The dimensions added by migration 0003 (records spooled before it read as zero/none).
    #[serde(flatten)]
    pub extra: ExtraUsage,
    pub cost: Usd,
    pub outcome: UsageOutcome,
    #[serde(serialize_with = "utc_text::serialize")]
    pub started_at: DateTime<Utc>,
    #[serde(serialize_with = "utc_text::serialize")]
    pub finished_at: DateTime<Utc>,
    /// Microseconds from sending the upstream request to its response head.
    pub upstream_latency_us: Option<u64>,
    /// Microseconds from the client's request to the first byte of the response body.
    pub ttft_us: Option<u64>,
    /// Start of the key's spend window (`billing::window::window_start`) this cost counts
    /// towards; `None` when the key has no spend limit (no `key_spend` row is touched).
    #[serde(serialize_with = "utc_text::option")]
    pub spend_window_start: Option<DateTime<Utc>>,
    /// Whether the token counts are the upstream's or an estimate (records spooled before
    /// this field existed read as reported).
    #[serde(default)]
    pub usage_source: UsageSource,
    /// Routes tried, the answering one included (failover; records spooled before this
    /// field existed read as one).
    #[serde(default = "one_attempt")]
    pub attempts: u32,
    /// The request's `x-request-id` (none on records from before it was kept).
    #[serde(default)]
    pub request_id: Option<String>,
    /// The client's address (behind trusted proxies, the one they name); none on records
    /// from before it was kept.
    #[serde(default)]
    pub client_addr: Option<String>,
    /// The answering upstream's own id for the call (Anthropic's `request-id`, Gemini's
    /// `responseId`, Google's trace id), to quote in a ticket with the provider.
    #[serde(default)]
    pub upstream_request_id: Option<String>,
    /// Why the record needs an operator's review (none for an ordinary record): the usage the
    /// upstream reported could not be priced, so the request's reserved worst case was billed
    /// instead. See `billing::record`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<String>,
    /// The request produced no output and failed, and the operator waives such requests
    /// (`tollgate.waive_empty_failures`): the tokens and prices are kept, `cost` is 0 (records
    /// spooled before this field existed read as not waived).
    #[serde(default)]
    pub waived: bool,
}

fn one_attempt() -> u32 {
    1
}

/// `serialize_with` for a usage record's times: chrono's own text for a `DateTime<Utc>`
/// (RFC 3339, `Z`, a fraction of 0, 3, 6 or 9 digits as needed), written on the stack. Every
/// request journals a record with two or three, and chrono writes them through `fmt` at about
/// ten times the cost. Years outside 0–9999 and leap seconds are left to chrono.
mod utc_text {
    use chrono::{DateTime, Datelike, Timelike, Utc};
    use serde::{Serialize, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        match Text::of(t) {
            Some(text) => s.serialize_str(text.as_str()),
            None => t.serialize(s),
        }
    }

    pub fn option<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => serialize(t, s),
            None => s.serialize_none(),
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fff|.ffffff|.fffffffff]Z`.
    pub(super) struct Text {
        buf: [u8; 30],
        len: usize,
    }

    impl Text {
        pub(super) fn of(t: &DateTime<Utc>) -> Option<Text> {
            let nanos = t.nanosecond();
            let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
            if nanos >= 1_000_000_000 {
                return None;
            }
            let mut text = Text {
                buf: *b"0000-00-00T00:00:00.000000000Z",
                len: 19,
            };
            let fields = [
                (0, year / 100),
                (2, year % 100),
                (5, t.month()),
                (8, t.day()),
                (11, t.hour()),
                (14, t.minute()),
                (17, t.second()),
            ];
            for (at, value) in fields {
                text.digits(at, 2, value);
            }
            let fraction = match nanos {
                0 => None,
                n if n % 1_000_000 == 0 => Some((3, n / 1_000_000)),
                n if n % 1_000 == 0 => Some((6, n / 1_000)),
                n => Some((9, n)),
            };
            if let Some((width, value)) = fraction {
                text.digits(20, width, value);
                text.len = 20 + width;
            }
            text.buf[text.len] = b'Z';
            text.len += 1;
            Some(text)
        }

        /// `value`'s last `width` decimal digits at `at`.
        fn digits(&mut self, at: usize, width: usize, mut value: u32) {
            for place in self.buf[at..at + width].iter_mut().rev() {
                *place = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }

        pub(super) fn as_str(&self) -> &str {
            // Digits and ASCII punctuation only.
            std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
        }
    }

    #[cfg(test)]
    mod tests {
        use chrono::{DateTime, TimeZone, Utc};

        #[derive(serde::Serialize)]
        struct Ours(#[serde(serialize_with = "super::serialize")] DateTime<Utc>);

        /// The text is chrono's for any time: every fraction width, the edges of the fast path
        /// and what falls back (years past 9999, a leap second).
        #[test]
        fn the_text_is_chronos() {
            let mut times: Vec<DateTime<Utc>> = vec![
                Utc.timestamp_opt(0, 0).unwrap(),
                Utc.timestamp_opt(253_402_300_799, 999_999_999).unwrap(),
                Utc.timestamp_opt(253_402_300_800, 0).unwrap(),
                Utc.timestamp_opt(-62_167_219_200, 0).unwrap(),
                Utc.timestamp_opt(-62_167_219_201, 5).unwrap(),
                Utc.timestamp_opt(1_483_228_799, 1_500_000_000).unwrap(),
            ];
            let mut x: u64 = 0x2545_F491_4F6C_DD1D;
            for _ in 0..20_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let nanos = (x >> 34) as u32 % 1_000_000_000;
                let nanos = match x % 4 {
                    0 => 0,
                    1 => nanos / 1_000_000 * 1_000_000,
                    2 => nanos / 1_000 * 1_000,
                    _ => nanos,
                };
                let secs = (x % 253_402_300_800) as i64;
                let t = Utc.timestamp_opt(secs, nanos).unwrap();
                assert!(
                    super::Text::of(&t).is_some(),
                    "{t:?} is written on the stack"
                );
                times.push(t);
            }
            for t in times {
                let ours = serde_json::to_string(&Ours(t)).unwrap();
                assert_eq!(ours, serde_json::to_string(&t).unwrap(), "{t:?}");
            }
        }
    }
}

/// A usage record's audio, 1-hour cache-write and cache-storage buckets and their prices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ExtraUsage {
    pub audio_input_tokens: u64,
    pub cache_write_1h_tokens: u64,
    /// Tokens × seconds of explicit-cache storage.
    pub cache_storage_token_seconds: u64,
    pub audio_input_price: Option<Price>,
    pub cache_write_1h_price: Option<Price>,
    /// USD per 1M tokens per hour.
    pub cache_storage_price: Option<Price>,
}

/// One workspace's books, every sum computed by the database: consistent when
/// `balance_row == ledger_sum`, `credited_row == ledger_sum - debit_sum` (the credits and
/// refunds) and `-debit_sum == usage_cost_sum`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerCheck {
    pub workspace_id: String,
    /// The cached balance row (zero when the workspace has none).
    pub balance_row: Usd,
    /// The balance row's credited total (zero when the workspace has none).
    pub credited_row: Usd,
    /// Sum of every ledger entry (credits, refunds and debits).
    pub ledger_sum: Usd,
    /// Sum of `cost` over the workspace's usage records.
    pub usage_cost_sum: Usd,
    /// Sum of the debits (negative or zero).
    pub debit_sum: Usd,
}

impl LedgerCheck {
    /// Whether the balance row equals the ledger, its credited total the credits and refunds,
    /// and the debits the usage costs.
    pub fn is_consistent(&self) -> bool {
        self.balance_row == self.ledger_sum
            && self.ledger_sum.checked_sub(self.debit_sum) == Some(self.credited_row)
            && Usd::ZERO.checked_sub(self.debit_sum) == Some(self.usage_cost_sum)
    }
}

/// Where a page of a newest-first listing ends: the sort key of its last row. Every paged
/// listing is ordered by (time, id) descending, and the next page holds the rows strictly
/// after the cursor in that order, found through an index (no OFFSET scans).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at: DateTime<Utc>,
    pub id: String,
}

/// Which of a workspace's usage records a page shows (all bounds optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageFilter {
    pub key_id: Option<String>,
    pub model_id: Option<String>,
    /// `finished_at >= from`.
    pub from: Option<DateTime<Utc>>,
    /// `finished_at < to`.
    pub to: Option<DateTime<Utc>>,
}

/// One (UTC day, model) of a workspace's usage, summed by the database as records are written
/// (a rollup table kept by a trigger, so charts never scan the records).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DailyUsage {
    pub day: chrono::NaiveDate,
    pub model_id: String,
    pub requests: u64,
    /// Every prompt-side token: uncached, cache read, cache writes (5 min and 1 h), audio.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: Usd,
}

/// One change made by an operator, kept forever (the table refuses UPDATE and DELETE).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntry {
    pub id: String,
    pub at: DateTime<Utc>,
    /// Who: `admin-token`, `console`, `cli:<user>`.
    pub actor: String,
    /// What, as `noun.verb`: `workspace.create`, `key.revoke`, `credit.add`, …
    pub action: String,
    /// The workspace concerned, when there is one (the catalog's changes have none).
    pub workspace_id: Option<String>,
    /// The id of the thing changed (workspace, key, ledger entry, model).
    pub target: String,
    #[schema(value_type = Option<Object>)]
    pub before: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub after: Option<serde_json::Value>,
}

/// How a change is audited: its audit entry, made from what the change wrote (a new row's
/// time, a balance after a credit) inside the change's own transaction, so the change and its
/// entry commit together or not at all. A store method that takes one writes no change without
/// its entry.
pub type Audit<T> = Box<dyn FnOnce(&T) -> AuditEntry + Send>;

/// A signed-in console session, as the store keeps it: never its id (the cookie's value), only
/// the id's hex SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    pub id_hash: String,
    /// A short, non-secret name for the audit log.
    pub name: String,
    /// The CSRF token the console sends back on every change.
    pub csrf: String,
    pub created_at: DateTime<Utc>,
    /// The session's last use: it ends when idle too long since then.
    pub last_seen: DateTime<Utc>,
    /// When it ends however busy it is.
    pub expires_at: DateTime<Utc>,
}

/// A workspace's alert settings: where its signed webhooks go and what triggers them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AlertSettings {
    pub workspace_id: String,
    pub webhook_url: String,
    /// The HMAC-SHA256 key the deliveries are signed with.
    #[serde(rename = "signing_secret")]
    pub secret: String,
    /// Fire when the balance falls below this (re-armed once it is back above).
    #[serde(rename = "low_balance_usd")]
    pub low_balance: Option<Usd>,
    /// Fire when a key's window spend reaches these percentages of its limit (1–100).
    pub key_limit_percents: Vec<u8>,
}

/// One attempt to deliver one webhook event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Delivery {
    pub id: String,
    pub workspace_id: String,
    /// The event's id (the same on every attempt of one event).
    pub event_id: String,
    /// `balance.low`, `key.spend_limit`.
    pub event: String,
    pub attempt: u32,
    pub at: DateTime<Utc>,
    /// The class of the receiver's HTTP status (`2xx` … `5xx`) when it answered.
    #[schema(value_type = Option<String>, example = "2xx")]
    pub status: Option<StatusClass>,
    /// What the attempt came to, never the receiver's words or a raw connection error:
    /// `delivered 2xx in 120 ms`, `refused: non-2xx (4xx) in 35 ms`, `refused: address not
    /// allowed`, `failed: connection error`, `failed: timeout`.
    pub result: String,
    pub delivered: bool,
}

/// An HTTP status class: all a delivery keeps of its receiver's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusClass(u8);

impl StatusClass {
    pub fn of(status: u16) -> Self {
        StatusClass(u8::try_from(status / 100).unwrap_or(9))
    }

    /// As the store keeps it: the class's first status (`4xx` → 400).
    pub fn code(self) -> u16 {
        u16::from(self.0) * 100
    }
}

impl std::fmt::Display for StatusClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}xx", self.0)
    }
}

impl Serialize for StatusClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StatusClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.strip_suffix("xx")
            .and_then(|n| n.parse::<u8>().ok())
            .filter(|n| (1..=9).contains(n))
            .map(StatusClass)
            .ok_or_else(|| serde::de::Error::custom("a status class such as 2xx expected"))
    }
}

/// An answer of the Responses door kept so that a later request can continue it with
/// `previous_response_id`; read only by its own workspace, and only until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The response id given to the client (`resp_…`).
    pub id: String,
    pub workspace_id: String,
    /// The key that made the request, when known.
    pub key_id: Option<String>,
    /// The catalog model that answered.
    pub model: String,
    pub created_at: DateTime<Utc>,
    /// From this instant on the response reads as absent, and the purge deletes it.
    pub expires_at: DateTime<Utc>,
    /// The conversation the answer continued, before the answer: a JSON array.
    pub items: String,
    /// The response object, as JSON.
    pub response: String,
}

/// A UTC calendar month, written `YYYY-MM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsageMonth {
    year: i32,
    month: u32,
}

impl UsageMonth {
    /// `None` unless `1 <= month <= 12` and the year is a four-digit one.
    pub fn new(year: i32, month: u32) -> Option<Self> {
        ((1..=12).contains(&month) && (1000..=9999).contains(&year))
            .then_some(UsageMonth { year, month })
    }

    /// The month `at` falls in (UTC).
    pub fn of(at: DateTime<Utc>) -> Self {
        UsageMonth {
            year: at.year(),
            month: at.month(),
        }
    }

    /// Its first instant (inclusive).
    pub fn start(self) -> DateTime<Utc> {
        let first = NaiveDate::from_ymd_opt(self.year, self.month, 1).unwrap_or(NaiveDate::MIN);
        Utc.from_utc_datetime(&first.and_time(chrono::NaiveTime::MIN))
    }

    /// The next month's first instant (exclusive end).
    pub fn end(self) -> DateTime<Utc> {
        self.next().start()
    }

    pub fn next(self) -> Self {
        if self.month == 12 {
            UsageMonth {
                year: self.year + 1,
                month: 1,
            }
        } else {
            UsageMonth {
                year: self.year,
                month: self.month + 1,
            }
        }
    }

    /// Its PostgreSQL partition's name, `usage_records_YYYY_MM`.
    pub fn partition(self) -> String {
        format!("usage_records_{:04}_{:02}", self.year, self.month)
    }
}

impl fmt::Display for UsageMonth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

/// A month that is not `YYYY-MM`.
#[derive(Debug, thiserror::Error)]
#[error("month {0:?}: expected YYYY-MM")]
pub struct BadMonth(String);

impl FromStr for UsageMonth {
    type Err = BadMonth;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadMonth(s.to_owned());
        let (y, m) = s.split_once('-').ok_or_else(bad)?;
        if y.len() != 4 || m.len() != 2 || !(y.bytes().chain(m.bytes())).all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let (y, m) = (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
        UsageMonth::new(y, m).ok_or_else(bad)
    }
}

impl Serialize for UsageMonth {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for UsageMonth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One workspace's records of one month: how many, and their cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonthTotal {
    pub workspace_id: String,
    pub records: u64,
    pub cost: Usd,
}

/// An archived month's totals as `archived_totals` keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchivedMonth {
    pub month: UsageMonth,
    pub totals: Vec<MonthTotal>,
}
