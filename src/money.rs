//! Exact money: USD amounts as integer pico-dollars (1e-12 USD), prices as integer
//! micro-dollars per million tokens.
//!
//! Why these units: a price of `p` micro-USD per 1M tokens makes `tokens × p` exactly the
//! cost in pico-USD, so the cost of any request is an integer with no rounding anywhere.
//! An `i64` of pico-dollars holds amounts up to about 9.2 million USD; arithmetic is
//! checked and overflow is an error, never a wrap. Decimal text is parsed digit by digit,
//! never through a float.
// Money and token arithmetic is checked or saturating by rule: a wrap here gives credit away
// (tests may use plain operators).
#![cfg_attr(not(test), warn(clippy::arithmetic_side_effects))]

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Pico-dollars per dollar.
const PICO_PER_USD: i64 = 1_000_000_000_000;
/// Micro-dollars per dollar.
const MICRO_PER_USD: i64 = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("not a decimal number: {0:?}")]
    Syntax(String),
    #[error("{0:?} has more than {1} decimal places")]
    TooPrecise(String, u32),
    #[error("{0:?} is out of range")]
    Overflow(String),
    #[error("{0:?} must not be negative")]
    Negative(String),
}

/// An exact USD amount in pico-dollars. May be negative (a debit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Usd(i64);

/// A price in micro-USD per one million tokens. Never negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Price(i64);

impl Usd {
    pub const ZERO: Usd = Usd(0);

    pub const fn from_pico(pico: i64) -> Self {
        Usd(pico)
    }
    pub const fn pico(self) -> i64 {
        self.0
    }
    pub fn checked_add(self, other: Usd) -> Option<Usd> {
        self.0.checked_add(other.0).map(Usd)
    }
    pub fn checked_sub(self, other: Usd) -> Option<Usd> {
        self.0.checked_sub(other.0).map(Usd)
    }
    pub fn is_positive(self) -> bool {
        self.0 > 0
    }

    /// Appends the exact decimal text (`0.000123`), as `Display` writes it but without `fmt`:
    /// an answer's `cost` is written on every request.
    pub fn write_decimal(self, out: &mut Vec<u8>) {
        out.extend_from_slice(Decimal::of(self.0, 12).as_str().as_bytes());
    }
}

impl Price {
    /// The dearest price a catalog accepts: 10,000 USD per 1M tokens (a cent a token), some
    /// fifteen times the dearest list price of 2026. It keeps every request's cost far inside
    /// `i64` pico-USD: at this price a bucket of 900 million tokens still prices.
    pub const MAX: Price = Price(10_000 * MICRO_PER_USD);

    pub const fn from_micro_per_mtok(micro: i64) -> Self {
        Price(micro)
    }
    pub const fn micro_per_mtok(self) -> i64 {
        self.0
    }
    /// Appends the exact decimal text (`0.075`), which is also its JSON number token: a usage
    /// record's prices are journaled on every request.
    pub fn write_decimal(self, out: &mut Vec<u8>) {
        out.extend_from_slice(Decimal::of(self.0, 6).as_str().as_bytes());
    }
    /// Exact cost of `tokens` at this price.
    pub fn cost(self, tokens: u64) -> Option<Usd> {
        i64::try_from(tokens)
            .ok()
            .and_then(|t| t.checked_mul(self.0))
            .map(Usd)
    }
    /// Exact cost of storing tokens for `token_seconds` (tokens × seconds) at this price read
    /// as USD per 1M tokens per hour, rounded up to the pico-dollar.
    pub fn storage_cost(self, token_seconds: u64) -> Option<Usd> {
        i64::try_from(token_seconds)
            .ok()
            .and_then(|t| t.checked_mul(self.0))
            .and_then(|pico_seconds| pico_seconds.checked_add(SECONDS_PER_HOUR - 1))
            .map(|p| Usd(p / SECONDS_PER_HOUR))
    }
}

const SECONDS_PER_HOUR: i64 = 3_600;

/// Parses `[-]digits[.digits]` into an integer scaled by `10^scale`, exactly.
fn parse_scaled(text: &str, scale: u32) -> Result<i64, MoneyError> {
    let s = text.trim();
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && frac.is_empty() || !all_digits(whole) || !all_digits(frac) {
        return Err(MoneyError::Syntax(text.to_owned()));
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale as usize {
        return Err(MoneyError::TooPrecise(text.to_owned(), scale));
    }
    let overflow = || MoneyError::Overflow(text.to_owned());
    let whole: i64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| overflow())?
    };
    let frac_value: i64 = if frac.is_empty() {
        0
    } else {
        // At most `scale` digits (checked above), so the shift fits.
        let shift = scale.saturating_sub(frac.len() as u32);
        (frac.parse::<i64>().ok())
            .and_then(|f| f.checked_mul(10i64.pow(shift)))
            .ok_or_else(overflow)?
    };
    let value = whole
        .checked_mul(10i64.pow(scale))
        .and_then(|w| w.checked_add(frac_value))
        .ok_or_else(overflow)?;
    if negative {
        value.checked_neg().ok_or_else(overflow)
    } else {
        Ok(value)
    }
}

/// The exact decimal text of an integer scaled by `10^scale` (at most 18), the shortest with
/// one fractional digit at least (`12.5`, `10.0`, `-0.000000000001`): built on the stack, for
/// amounts and prices are written on every request (usage records, answers' `cost`).
struct Decimal {
    /// Sign, 19 whole digits, the point and 18 decimals at most.
    buf: [u8; 40],
    len: usize,
}

impl Decimal {
    #[expect(
        clippy::arithmetic_side_effects,
        reason = "digits of a u64 by division by ten; positions stay within the buffer"
    )]
    fn of(value: i64, scale: u32) -> Self {
        // Zeros ahead: at scale 0 the one decimal kept (`10.0`) is already there.
        let mut d = Decimal {
            buf: [b'0'; 40],
            len: 0,
        };
        if value < 0 {
            d.push(b'-');
        }
        let abs = value.unsigned_abs();
        let unit = 10u64.pow(scale);
        d.push_str(itoa::Buffer::new().format(abs / unit).as_bytes());
        d.push(b'.');
        // The decimals, zero-padded to `scale` (the buffer is zeros ahead), then trailing zeros
        // cut (one digit kept).
        let (start, mut text) = (d.len, itoa::Buffer::new());
        let frac = text.format(abs % unit).as_bytes();
        let end = start + scale as usize;
        if scale > 0 {
            d.buf[end - frac.len()..end].copy_from_slice(frac);
        }
        let digits = d.buf[start..end]
            .iter()
            .rposition(|&b| b != b'0')
            .map_or(1, |last| last + 1);
        d.len = start + digits;
        d
    }

    fn push(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len = self.len.saturating_add(1);
    }

    fn push_str(&mut self, bytes: &[u8]) {
        let end = self.len.saturating_add(bytes.len());
        self.buf[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }

    fn as_str(&self) -> &str {
        // ASCII digits, sign and point only.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }

    /// The text as a JSON number token.
    fn serialize_number<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match serde_json::from_str::<&serde_json::value::RawValue>(self.as_str()) {
            Ok(raw) => raw.serialize(s),
            Err(e) => Err(serde::ser::Error::custom(e)),
        }
    }
}

impl FromStr for Usd {
    type Err = MoneyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_scaled(s, 12).map(Usd)
    }
}

impl FromStr for Price {
    type Err = MoneyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v = parse_scaled(s, 6)?;
        if v < 0 {
            return Err(MoneyError::Negative(s.to_owned()));
        }
        Ok(Price(v))
    }
}

impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Decimal::of(self.0, 12).as_str())
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Decimal::of(self.0, 6).as_str())
    }
}

/// Prices serialise as exact JSON numbers (`0.025`, written from their decimal text: at most
/// six decimals, which any JSON reader's double keeps exact). Amounts serialise as decimal
/// strings (`"12.000000000001"`): twelve decimals do not survive a double, and a spooled or
/// exported amount must come back to the last pico.
impl Serialize for Price {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Decimal::of(self.0, 6).serialize_number(s)
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(Decimal::of(self.0, 12).as_str())
    }
}

/// `serialize_with` for an amount a wire format wants as a JSON number (OpenRouter's
/// `total_credits`, `usage.cost`): the number token is written from the exact decimal text
/// (`12.5`, `0.000000000001`), never through a float. A reader that parses it into a double
/// may round it; the digits sent are the ledger's.
pub fn as_number<S: Serializer>(amount: &Usd, s: S) -> Result<S::Ok, S::Error> {
    Decimal::of(amount.0, 12).serialize_number(s)
}

/// In the OpenAPI document: amounts are decimal strings, prices exact decimal numbers.
impl utoipa::PartialSchema for Usd {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .description(Some("Exact decimal USD, e.g. \"12.5\" (never a float)"))
            .examples(["12.5"])
            .into()
    }
}
impl utoipa::ToSchema for Usd {}

impl utoipa::PartialSchema for Price {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::Number)
            .description(Some("USD per 1M tokens, at most six decimals"))
            .examples([0.3])
            .into()
    }
}
impl utoipa::ToSchema for Price {}

macro_rules! decimal_deserialize {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for $t {
            /// Accepts a string (`"1.25"`) or a number; a number is read from its shortest
            /// decimal text, which for prices with at most six decimals is the literal written.
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Text {
                    S(String),
                    I(i64),
                    F(f64),
                }
                let text = match Text::deserialize(d)? {
                    Text::S(s) => s,
                    Text::I(i) => i.to_string(),
                    Text::F(f) => f.to_string(),
                };
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
decimal_deserialize!(Usd);
decimal_deserialize!(Price);

/// The exact text of a decimal sent in JSON, as a string (`"1.25"`) or a number (`1.25`, read
/// from the digits written, never through a double); `None` for null or a blank string.
pub fn json_decimal_text(raw: &serde_json::value::RawValue) -> Result<Option<String>, String> {
    let text = raw.get().trim();
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(text)
            .map(|s| (!s.trim().is_empty()).then_some(s))
            .map_err(|e| e.to_string()),
        Some(b'-' | b'0'..=b'9') => Ok(Some(text.to_owned())),
        _ if text == "null" => Ok(None),
        _ => Err("a decimal expected, as a string or a number".to_owned()),
    }
}

/// `deserialize_with` for an optional amount or price in a JSON body: a string or a number read
/// from its exact text ([`json_decimal_text`]), so `1.0000000000000001` is refused as too
/// precise rather than rounded. Needs serde_json's deserializer (no buffering: no `flatten` or
/// `untagged` around it).
pub fn exact<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = MoneyError>,
{
    let raw: Option<Box<serde_json::value::RawValue>> = Option::deserialize(d)?;
    let text = match raw {
        Some(raw) => json_decimal_text(&raw).map_err(serde::de::Error::custom)?,
        None => None,
    };
    text.map(|t| t.parse())
        .transpose()
        .map_err(serde::de::Error::custom)
}

/// Convenience for tests and literals: whole dollars.
#[expect(
    clippy::arithmetic_side_effects,
    reason = "literals only; an overflowing literal fails at compile time in a const"
)]
pub const fn usd(dollars: i64) -> Usd {
    Usd(dollars * PICO_PER_USD)
}

/// Convenience for literals: a price given in micro-USD per 1M tokens.
pub const fn price_micro(micro: i64) -> Price {
    Price(micro)
}

#[allow(
    dead_code,
    reason = "documents the unit relation used by the cost formula"
)]
const _UNITS: () = assert!(PICO_PER_USD / MICRO_PER_USD == 1_000_000);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prices_exactly() {
        assert_eq!("0.025".parse::<Price>().unwrap().micro_per_mtok(), 25_000);
        assert_eq!("15".parse::<Price>().unwrap().micro_per_mtok(), 15_000_000);
        assert_eq!(
            "1.250000".parse::<Price>().unwrap().micro_per_mtok(),
            1_250_000
        );
        assert!(matches!(
            "0.0000001".parse::<Price>(),
            Err(MoneyError::TooPrecise(..))
        ));
        assert!(matches!(
            "-1".parse::<Price>(),
            Err(MoneyError::Negative(_))
        ));
        assert!(matches!("1e3".parse::<Price>(), Err(MoneyError::Syntax(_))));
        assert!(matches!(".".parse::<Price>(), Err(MoneyError::Syntax(_))));
    }

    #[test]
    fn usd_round_trips_through_text() {
        for text in [
            "0.000000000001",
            "-3.5",
            "9200000.0",
            "0.0",
            "12.345678901234",
        ] {
            let v: Usd = text.parse().unwrap();
            assert_eq!(v.to_string().parse::<Usd>().unwrap(), v, "{text}");
        }
        assert_eq!("10".parse::<Usd>().unwrap(), usd(10));
        assert_eq!(usd(10).to_string(), "10.0");
        assert!(matches!(
            "10000000".parse::<Usd>(),
            Err(MoneyError::Overflow(_))
        ));
    }

    /// The text on the stack is the text `format!` makes, over the whole range: both scales,
    /// both signs, the extremes, every length of decimals.
    #[test]
    fn decimal_text_is_exact_over_the_whole_range() {
        fn reference(value: i64, scale: u32) -> String {
            let unit = 10u64.pow(scale);
            let sign = if value < 0 { "-" } else { "" };
            let (whole, frac) = (value.unsigned_abs() / unit, value.unsigned_abs() % unit);
            let frac = format!("{frac:0width$}", width = scale as usize);
            let frac = frac.trim_end_matches('0');
            let frac = if frac.is_empty() { "0" } else { frac };
            format!("{sign}{whole}.{frac}")
        }
        let mut values = vec![
            0,
            1,
            -1,
            9,
            10,
            999_999,
            1_000_000,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ];
        for digits in 0..19 {
            let p = 10i64.pow(digits);
            values.extend([p, p - 1, p + 1, -p, 7 * p, -(p - 1)]);
        }
        // A fixed pseudo-random walk over the rest.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x as i64 >> (x % 60));
        }
        for v in values {
            for scale in [0, 6, 12, 18] {
                assert_eq!(
                    Decimal::of(v, scale).as_str(),
                    reference(v, scale),
                    "{v} at {scale}"
                );
            }
            assert_eq!(Usd(v).to_string(), reference(v, 12));
            let mut written = b"x".to_vec();
            Usd(v).write_decimal(&mut written);
            assert_eq!(written, format!("x{}", reference(v, 12)).into_bytes());
            let price = serde_json::to_string(&Price(v)).unwrap();
            assert_eq!(price, reference(v, 6));
            assert_eq!(
                serde_json::to_string(&Usd(v)).unwrap(),
                format!("\"{}\"", reference(v, 12))
            );
        }
    }

    #[test]
    fn cost_is_tokens_times_price_in_pico() {
        // 1,000 tokens at 0.025 USD / 1M = 0.000025 USD = 25,000,000 pico.
        let p: Price = "0.025".parse().unwrap();
        assert_eq!(p.cost(1_000), Some(Usd::from_pico(25_000_000)));
        assert_eq!(p.cost(1_000_000).unwrap().to_string(), "0.025");
    }

    #[test]
    fn storage_is_token_seconds_times_the_hourly_price_rounded_up() {
        // 10,000 tokens for one hour at 4.50 USD / 1M tokens / hour = 0.045 USD.
        let p: Price = "4.5".parse().unwrap();
        assert_eq!(
            p.storage_cost(10_000 * 3_600),
            Some(Usd::from_pico(45_000_000_000))
        );
        // 7 tokens for 1 s at 1 micro-USD / 1M / h = 7/3600 pico: rounded up to 1.
        assert_eq!(
            Price::from_micro_per_mtok(1).storage_cost(7),
            Some(Usd::from_pico(1))
        );
        assert_eq!(p.storage_cost(0), Some(Usd::ZERO));
        assert_eq!(p.storage_cost(u64::MAX), None);
    }

    #[test]
    fn amounts_round_trip_through_json_exactly() {
        let v: Usd = "1234567.123456789012".parse().unwrap();
        let text = serde_json::to_string(&v).unwrap();
        assert_eq!(text, "\"1234567.123456789012\"");
        assert_eq!(serde_json::from_str::<Usd>(&text).unwrap(), v);
    }

    #[test]
    fn json_numbers_keep_their_exact_text() {
        let text = |json: &str| {
            let raw: Box<serde_json::value::RawValue> = serde_json::from_str(json).unwrap();
            json_decimal_text(&raw)
        };
        assert_eq!(
            text("1.0000000000000001").unwrap().as_deref(),
            Some("1.0000000000000001")
        );
        assert_eq!(text(" \"2.5\" ").unwrap().as_deref(), Some("2.5"));
        assert_eq!(text("null").unwrap(), None);
        assert_eq!(text("\" \"").unwrap(), None);
        assert!(text("true").is_err() && text("[1]").is_err());

        #[derive(Deserialize)]
        struct Body {
            #[serde(default, deserialize_with = "exact")]
            usd: Option<Usd>,
        }
        let usd = |json: &str| serde_json::from_str::<Body>(json).map(|b| b.usd);
        assert_eq!(
            usd(r#"{"usd": 1.000000000001}"#).unwrap(),
            Some(Usd(1_000_000_000_001))
        );
        assert!(usd(r#"{"usd": 1.0000000000000001}"#)
            .unwrap_err()
            .to_string()
            .contains("decimal places"));
        assert_eq!(usd(r#"{"usd": null}"#).unwrap(), None);
        assert_eq!(usd("{}").unwrap(), None);
    }

    #[test]
    fn amounts_can_be_written_as_exact_json_numbers() {
        #[derive(Serialize)]
        struct Wire {
            #[serde(serialize_with = "as_number")]
            cost: Usd,
        }
        for (pico, text) in [
            (1, r#"{"cost":0.000000000001}"#),
            (12_500_000_000_000, r#"{"cost":12.5}"#),
            (0, r#"{"cost":0.0}"#),
            (-3_000_000_000_001, r#"{"cost":-3.000000000001}"#),
            (i64::MAX, r#"{"cost":9223372.036854775807}"#),
        ] {
            let json = serde_json::to_string(&Wire {
                cost: Usd::from_pico(pico),
            })
            .unwrap();
            assert_eq!(json, text);
            let back: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert!(back["cost"].is_number(), "{json}");
        }
    }

    #[test]
    fn serialises_as_json_numbers() {
        let p: Price = "0.3".parse().unwrap();
        assert_eq!(serde_json::to_string(&p).unwrap(), "0.3");
        let back: Price = serde_json::from_str("0.3").unwrap();
        assert_eq!(back, p);
        let s: Price = serde_json::from_str("\"2.5\"").unwrap();
        assert_eq!(s.micro_per_mtok(), 2_500_000);
    }
}
