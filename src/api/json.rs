//! JSON read and written as `serde_json` reads and writes it, with less work on the two things
//! every request, answer and stream event is made of: keys and strings.
//!
//! Reading ([`from_slice`]): the bytes are checked as UTF-8 once, whole, then read as text;
//! serde_json's own `from_slice` checks each string it reads, every key included, in a call
//! of its own. Bytes that are not UTF-8 go to serde_json's `from_slice`, for its own error.
//!
//! Writing ([`to_vec`], [`append`], [`string`]): byte for byte what serde_json writes (compact).
//!
//! - serde_json escapes every key it writes a byte at a time, the field names of derived
//!   structs included; here a struct's field name is checked eight bytes at a time and written
//!   whole with its quotes, comma and colon.
//! - A string is scanned eight bytes at a time for the bytes JSON escapes (`"`, `\` and those
//!   below 0x20); each clean run is copied whole.
//!
//! Integers are written by `itoa`, as serde_json writes them; floats and the rest by serde_json's
//! own code, called on the same buffer. Anything this
//! writer does not take (a map key that is not a string, a `Serialize` that fails) makes it
//! start over with serde_json (so a value may be serialised twice: the wire types are plain
//! data), and the bytes (and the error) are always serde_json's: the tests hold the two equal
//! on arbitrary values and on every derive feature the project uses.

use std::borrow::Cow;
use std::io;

use bytes::BytesMut;
use serde::ser::{self, Serialize};
use serde::Deserialize;
use serde_json::Error;

/// `json` read as serde_json's `from_slice` reads it: the same value, or an error where it
/// fails.
pub fn from_slice<'a, T: Deserialize<'a>>(json: &'a [u8]) -> Result<T, Error> {
    match std::str::from_utf8(json) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(json),
    }
}

/// A growable buffer JSON is appended to.
pub trait Out: AsRef<[u8]> {
    fn put(&mut self, bytes: &[u8]);
    fn truncate(&mut self, len: usize);
}

impl Out for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len);
    }
}

impl Out for BytesMut {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn truncate(&mut self, len: usize) {
        BytesMut::truncate(self, len);
    }
}

/// `value` as JSON.
pub fn to_vec<T: ?Sized + Serialize>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(128);
    append(&mut out, value)?;
    Ok(out)
}

/// Appends `value` as JSON to `out`; on an error `out` is as it was.
pub fn append<O: Out, T: ?Sized + Serialize>(out: &mut O, value: &T) -> Result<(), Error> {
    let start = out.as_ref().len();
    if value.serialize(&mut Writer::new(out)).is_ok() {
        return Ok(());
    }
    out.truncate(start);
    let done = serde_json::to_writer(Io(&mut *out), value);
    if done.is_err() {
        out.truncate(start);
    }
    done
}

/// The serializer.
struct Writer<'a, O> {
    out: &'a mut O,
    /// Writing a map's key, which serde_json takes only as a string.
    key: bool,
}

/// `out` as the `io::Write` serde_json's own serializer writes to.
struct Io<'a, O>(&'a mut O);

impl<O: Out> io::Write for Io<'_, O> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.put(buf);
        Ok(buf.len())
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.put(buf);
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a, O: Out> Writer<'a, O> {
    fn new(out: &'a mut O) -> Self {
        Writer { out, key: false }
    }

    /// serde_json's serializer on the same buffer.
    fn serde(&mut self) -> serde_json::Serializer<Io<'_, O>> {
        serde_json::Serializer::new(Io(&mut *self.out))
    }

    fn string(&mut self, s: &str) {
        string(self.out, s);
    }

    /// `{"<variant>":` (an externally tagged enum's variant with content).
    fn open_variant(&mut self, variant: &str) {
        self.out.put(b"{");
        self.string(variant);
        self.out.put(b":");
    }

    /// A tuple or struct variant: `{"<variant>":` and the compound in its brackets, closed by
    /// `}`.
    fn variant(&mut self, variant: &str, brackets: [u8; 2], len: usize) -> Compound<'_, O> {
        self.open_variant(variant);
        self.open(brackets, Some(len), b"}")
    }

    fn open(
        &mut self,
        [open, close]: [u8; 2],
        len: Option<usize>,
        then: &'static [u8],
    ) -> Compound<'_, O> {
        let state = if len == Some(0) {
            self.out.put(&[open, close]);
            State::Empty
        } else {
            self.out.put(&[open]);
            State::First
        };
        Compound {
            w: Writer::new(&mut *self.out),
            state,
            close,
            then,
            raw: false,
        }
    }
}

/// Appends `s` as a JSON string, escaped as serde_json escapes it.
pub fn string<O: Out>(out: &mut O, s: &str) {
    let bytes = s.as_bytes();
    out.put(b"\"");
    let mut run = 0;
    let mut at = 0;
    while let Some(i) = next_escape(bytes, at) {
        out.put(bytes.get(run..i).unwrap_or_default());
        let byte = bytes.get(i).copied().unwrap_or_default();
        escape(out, byte);
        at = i + 1;
        run = at;
    }
    out.put(bytes.get(run..).unwrap_or_default());
    out.put(b"\"");
}

/// serde_json's escape for `byte` (one JSON escapes).
fn escape<O: Out>(out: &mut O, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0A => b'n',
        0x0C => b'f',
        0x0D => b'r',
        _ => {
            let hex = |n: u8| HEX.get(usize::from(n & 0xF)).copied().unwrap_or(b'0');
            out.put(&[b'\\', b'u', b'0', b'0', hex(byte >> 4), hex(byte)]);
            return;
        }
    };
    out.put(&[b'\\', short]);
}

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// The index of the first byte at or after `from` that JSON escapes.
#[inline]
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    let rest = bytes.get(from..)?;
    let mut words = rest.chunks_exact(8);
    for word in &mut words {
        let w = u64::from_le_bytes(word.try_into().ok()?);
        let found = escapes(w);
        if found != 0 {
            // The lowest flagged byte is always a true one: a false flag needs a borrow from
            // a flagged byte below it.
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = words.remainder().iter().position(|&b| needs_escape(b))?;
    Some(at + tail)
}

/// The high bit of each byte of `w` (little-endian) that JSON escapes, with possible false
/// flags above a true one.
#[inline(always)]
fn escapes(w: u64) -> u64 {
    let below_space = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    (below_space | zero(quote) | zero(backslash)) & HIGHS
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// `json` (valid JSON) with every string, keys included, written as [`string`] writes it: the
/// same text whichever escapes its writer chose (`\u00e9` is `é`, `\/` is `/`), everything else
/// as it was. Borrowed when every escape already is one `string` writes, which one scan for
/// backslashes tells: a string without escapes has one way to be written.
pub fn canonical_strings(json: &[u8]) -> Result<Cow<'_, [u8]>, Error> {
    if escapes_are_canonical(json) {
        return Ok(Cow::Borrowed(json));
    }
    let mut out = Vec::with_capacity(json.len());
    let mut at = 0;
    // Outside strings valid JSON has no backslash, so each quote found from there opens one.
    while let Some(open) = memchr::memchr(b'"', json.get(at..).unwrap_or_default()) {
        let open = at + open;
        out.extend_from_slice(json.get(at..open).unwrap_or_default());
        let close = string_end(json, open + 1)
            .ok_or_else(|| <Error as serde::de::Error>::custom("an unterminated string"))?;
        let literal = json.get(open..=close).unwrap_or_default();
        if memchr::memchr(b'\\', literal).is_some() {
            let text: crate::api::Str = serde_json::from_slice(literal)?;
            string(&mut out, &text);
        } else {
            out.extend_from_slice(literal);
        }
        at = close + 1;
    }
    out.extend_from_slice(json.get(at..).unwrap_or_default());
    Ok(Cow::Owned(out))
}

/// The index of the quote that closes the string whose text starts at `from`.
fn string_end(json: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        let i = at + memchr::memchr2(b'"', b'\\', json.get(at..)?)?;
        if json.get(i) == Some(&b'"') {
            return Some(i);
        }
        at = i + 2; // an escape's second byte is never its string's end
    }
}

/// Whether every escape in `json` is the one [`escape`] writes for its character: a short one
/// (`\"`, `\\`, `\b`, `\t`, `\n`, `\f`, `\r`), or `\u00xx` in lower-case hex for another
/// control character.
fn escapes_are_canonical(json: &[u8]) -> bool {
    let hex = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut at = 0;
    while let Some(i) = memchr::memchr(b'\\', json.get(at..).unwrap_or_default()) {
        let i = at + i;
        at = match json.get(i + 1) {
            Some(b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r') => i + 2,
            Some(b'u') => {
                let Some(&[b'0', b'0', high, low]) = json.get(i + 2..i + 6) else {
                    return false;
                };
                let (Some(high), Some(low)) = (hex(high), hex(low)) else {
                    return false;
                };
                let control = high << 4 | low;
                if control >= 0x20 || matches!(control, 0x08 | 0x09 | 0x0A | 0x0C | 0x0D) {
                    return false;
                }
                i + 6
            }
            _ => return false,
        };
    }
    true
}

/// Where a compound is: serde_json's states, whose `Empty` (a length of 0 announced) has
/// written both brackets already.
#[derive(PartialEq, Eq)]
enum State {
    Empty,
    First,
    Rest,
}

struct Compound<'a, O> {
    w: Writer<'a, O>,
    state: State,
    /// The closing bracket, written at the end unless `Empty` wrote it.
    close: u8,
    /// Written after it: `}` for an enum variant's object.
    then: &'static [u8],
    /// A `RawValue`: its one field is its text, written by serde_json.
    raw: bool,
}

impl<O: Out> Compound<'_, O> {
    /// The comma before an element or member.
    fn next(&mut self) {
        if self.state != State::First {
            self.w.out.put(b",");
        }
        self.state = State::Rest;
    }

    fn element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.next();
        value.serialize(&mut self.w)
    }

    /// A map's member: the key must be written as a string.
    fn key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Error> {
        self.next();
        let at = self.w.out.as_ref().len();
        key.serialize(&mut Writer {
            out: &mut *self.w.out,
            key: true,
        })?;
        // Anything but a string serde_json quotes or refuses: it writes this map.
        if self.w.out.as_ref().get(at) != Some(&b'"') {
            return Err(declined());
        }
        Ok(())
    }

    fn value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.w.out.put(b":");
        value.serialize(&mut self.w)
    }

    /// A struct's member: the field name is a constant.
    fn field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        if self.raw {
            let mut json = self.w.serde();
            let mut raw = ser::Serializer::serialize_struct(&mut json, RAW_VALUE, 1)?;
            ser::SerializeStruct::serialize_field(&mut raw, key, value)?;
            return ser::SerializeStruct::end(raw);
        }
        self.next();
        if next_escape(key.as_bytes(), 0).is_some() {
            self.w.string(key);
        } else {
            self.w.out.put(b"\"");
            self.w.out.put(key.as_bytes());
            self.w.out.put(b"\"");
        }
        self.w.out.put(b":");
        value.serialize(&mut self.w)
    }

    fn end(self) -> Result<(), Error> {
        if self.state != State::Empty {
            self.w.out.put(&[self.close]);
        }
        self.w.out.put(self.then);
        Ok(())
    }
}

/// serde_json's marker for a `RawValue`: a struct of this name with one field of this name,
/// its text.
const RAW_VALUE: &str = "$serde_json::private::RawValue";

/// Written by serde_json: what this writer does not take.
fn declined() -> Error {
    ser::Error::custom("left to serde_json")
}

macro_rules! by_serde {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(
            fn $method(self, value: $ty) -> Result<(), Error> {
                ser::Serializer::$method(&mut self.serde(), value)
            }
        )*
    };
}

macro_rules! integers {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(
            fn $method(self, value: $ty) -> Result<(), Error> {
                self.out.put(itoa::Buffer::new().format(value).as_bytes());
                Ok(())
            }
        )*
    };
}

impl<'a, 'w, O: Out> ser::Serializer for &'a mut Writer<'w, O> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a, O>;
    type SerializeTuple = Compound<'a, O>;
    type SerializeTupleStruct = Compound<'a, O>;
    type SerializeTupleVariant = Compound<'a, O>;
    type SerializeMap = Compound<'a, O>;
    type SerializeStruct = Compound<'a, O>;
    type SerializeStructVariant = Compound<'a, O>;

    integers!(
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
    );
    by_serde!(
        serialize_i128(i128),
        serialize_u128(u128),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_bytes(&[u8]),
    );

    fn serialize_bool(self, value: bool) -> Result<(), Error> {
        self.out.put(if value { b"true" } else { b"false" });
        Ok(())
    }

    fn serialize_char(self, value: char) -> Result<(), Error> {
        self.string(value.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, value: &str) -> Result<(), Error> {
        self.string(value);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }

    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Error> {
        self.out.put(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.open_variant(variant);
        value.serialize(&mut *self)?;
        self.out.put(b"}");
        Ok(())
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a, O>, Error> {
        Ok(self.open(*b"[]", len, b""))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, O>, Error> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a, O>, Error> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, O>, Error> {
        Ok(self.variant(variant, *b"[]", len))
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a, O>, Error> {
        Ok(self.open(*b"{}", len, b""))
    }

    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'a, O>, Error> {
        if name != RAW_VALUE {
            return self.serialize_map(Some(len));
        }
        if self.key {
            return Err(declined());
        }
        Ok(Compound {
            w: Writer::new(&mut *self.out),
            state: State::Empty,
            close: b'}',
            then: b"",
            raw: true,
        })
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, O>, Error> {
        Ok(self.variant(variant, *b"{}", len))
    }

    fn collect_str<T: ?Sized + std::fmt::Display>(self, value: &T) -> Result<(), Error> {
        ser::Serializer::collect_str(&mut self.serde(), value)
    }
}

macro_rules! elements {
    ($($trait:ident :: $method:ident),* $(,)?) => {
        $(
            impl<O: Out> ser::$trait for Compound<'_, O> {
                type Ok = ();
                type Error = Error;

                fn $method<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
                    self.element(value)
                }

                fn end(self) -> Result<(), Error> {
                    Compound::end(self)
                }
            }
        )*
    };
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

macro_rules! fields {
    ($($trait:ident),* $(,)?) => {
        $(
            impl<O: Out> ser::$trait for Compound<'_, O> {
                type Ok = ();
                type Error = Error;

                fn serialize_field<T: ?Sized + Serialize>(
                    &mut self,
                    key: &'static str,
                    value: &T,
                ) -> Result<(), Error> {
                    self.field(key, value)
                }

                fn end(self) -> Result<(), Error> {
                    Compound::end(self)
                }
            }
        )*
    };
}

fields!(SerializeStruct, SerializeStructVariant);

impl<O: Out> ser::SerializeMap for Compound<'_, O> {
    type Ok = ();
    type Error = Error;

    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Error> {
        self.key(key)
    }

    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        self.value(value)
    }

    fn end(self) -> Result<(), Error> {
        Compound::end(self)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;
    use serde::Serialize;
    use serde_json::value::RawValue;
    use serde_json::{json, Value};

    use super::*;

    /// Both writers on `value`: the same bytes, or both an error (and `out` untouched).
    fn same<T: ?Sized + Serialize>(value: &T) {
        let mine = to_vec(value);
        let serde = serde_json::to_vec(value);
        match (&mine, &serde) {
            (Ok(a), Ok(b)) => assert_eq!(
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b),
                "the writers differ"
            ),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            _ => panic!("one writer failed: {mine:?} against {serde:?}"),
        }
        let mut out = BytesMut::from(&b"before"[..]);
        let appended = append(&mut out, value);
        match serde {
            Ok(bytes) => {
                assert!(appended.is_ok());
                assert_eq!(out.get(6..), Some(bytes.as_slice()));
            }
            Err(_) => assert_eq!(&out[..], b"before", "a failed append leaves the buffer"),
        }
    }

    /// What this writer writes without serde_json's help, if it takes `value`.
    fn written_here<T: ?Sized + Serialize>(value: &T) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        value
            .serialize(&mut Writer::new(&mut out))
            .ok()
            .map(|()| out)
    }

    /// Strings of every kind a writer can get wrong: control bytes, quotes, backslashes, DEL,
    /// non-ASCII, at every offset within a word.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[a-z \"\\\\\u{0}-\u{1f}\u{7f}é€😀]{0,40}",
            "[a-zA-Z0-9 .,]{0,70}",
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            text().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
                prop::collection::btree_map(text(), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn any_value_is_written_as_serde_json_writes_it(v in value()) {
            same(&v);
            prop_assert!(written_here(&v).is_some(), "left to serde_json");
        }

        #[test]
        fn any_bytes_are_read_as_serde_json_reads_them(
            v in value(),
            cut in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut bytes = serde_json::to_vec(&v).unwrap();
            let whole = serde_json::from_slice::<Value>(&bytes).ok();
            prop_assert_eq!(from_slice::<Value>(&bytes).ok(), whole);
            // One byte changed (often no longer UTF-8, or no longer JSON).
            let at = cut.index(bytes.len());
            bytes[at] = byte;
            let serde = serde_json::from_slice::<Value>(&bytes);
            let mine = from_slice::<Value>(&bytes);
            prop_assert_eq!(mine.is_ok(), serde.is_ok());
            prop_assert_eq!(mine.ok(), serde.ok());
        }

        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it(s in text()) {
            same(&s);
            same(&json!({ s.clone(): [s.clone(), s.chars().next()] }));
        }

        #[test]
        fn every_derive_shape_is_written_as_serde_json_writes_it(
            s in text(),
            n in any::<i64>(),
            f in any::<f32>(),
            big in any::<u128>(),
            some in any::<bool>(),
        ) {
            for zoo in Zoo::all(&s, n, f, big, some) {
                same(&zoo);
                prop_assert!(written_here(&zoo).is_some(), "left to serde_json");
            }
        }
    }

    /// Every serde shape the gateway's wire types are made of.
    #[derive(Serialize)]
    struct Zoo<'a> {
        id: &'a str,
        #[serde(rename = "type")]
        kind: Kind<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        maybe: Option<u32>,
        nothing: Option<&'a str>,
        #[serde(rename = "odd \"key\"\n")]
        odd: char,
        float: f32,
        big: u128,
        bytes: &'a [u8],
        raw: Box<RawValue>,
        list: Vec<Tagged<'a>>,
        empty: Empty,
        unit: (),
        tuple: (i64, &'a str),
        newtype: Newtype<'a>,
        /// `flatten` makes a struct a map, its field names the map's keys.
        flat: Flat<'a>,
    }

    #[derive(Serialize)]
    struct Flat<'a> {
        #[serde(rename = "odd \"key\"\n")]
        odd: &'a str,
        #[serde(flatten)]
        extra: BTreeMap<&'a str, Value>,
    }

    #[derive(Serialize)]
    enum Kind<'a> {
        Unit,
        Newtype(&'a str),
        Tuple(i64, &'a str),
        Struct { a: i64, b: &'a str },
        Empty {},
        EmptyTuple(),
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Tagged<'a> {
        Text {
            text: &'a str,
        },
        Call {
            id: &'a str,
            arguments: &'a RawValue,
        },
        Done,
    }

    #[derive(Serialize)]
    struct Empty {}

    #[derive(Serialize)]
    struct Newtype<'a>(&'a str);

    impl<'a> Zoo<'a> {
        fn all(s: &'a str, n: i64, f: f32, big: u128, some: bool) -> Vec<Zoo<'a>> {
            let raw = RawValue::from_string(json!([s, n]).to_string()).unwrap();
            let kinds = [
                Kind::Unit,
                Kind::Newtype(s),
                Kind::Tuple(n, s),
                Kind::Struct { a: n, b: s },
                Kind::Empty {},
                Kind::EmptyTuple(),
            ];
            let arguments: &'static RawValue =
                Box::leak(RawValue::from_string(json!({ "q": s }).to_string()).unwrap());
            kinds
                .into_iter()
                .map(|kind| Zoo {
                    id: s,
                    kind,
                    maybe: some.then_some(7),
                    nothing: (!some).then_some(s),
                    odd: s.chars().next().unwrap_or('\u{1}'),
                    float: f,
                    big,
                    bytes: s.as_bytes(),
                    raw: raw.clone(),
                    list: vec![
                        Tagged::Text { text: s },
                        Tagged::Call { id: s, arguments },
                        Tagged::Done,
                    ],
                    empty: Empty {},
                    unit: (),
                    tuple: (n, s),
                    newtype: Newtype(s),
                    flat: Flat {
                        odd: s,
                        extra: BTreeMap::from([(s, json!(n)), ("z", json!(f))]),
                    },
                })
                .collect()
        }
    }

    /// A map of any keys, in order.
    struct Pairs<K, V>(Vec<(K, V)>);

    impl<K: Serialize, V: Serialize> Serialize for Pairs<K, V> {
        fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use ser::SerializeMap;
            let mut map = s.serialize_map(Some(self.0.len()))?;
            for (k, v) in &self.0 {
                map.serialize_entry(k, v)?;
            }
            map.end()
        }
    }

    #[test]
    fn what_serde_json_quotes_or_refuses_is_left_to_it() {
        assert_eq!(written_here(&Pairs(vec![(7u32, 1)])), None);
        assert_eq!(
            written_here(&Pairs(vec![(Some("k"), 1)])).as_deref(),
            Some(&b"{\"k\":1}"[..])
        );
        same(&HashMap::from([(7u32, "seven")]));
        same(&Pairs(vec![(true, 1)]));
        same(&Pairs(vec![(1.5f64, 1)]));
        same(&Pairs(vec![(f64::NAN, 1)]));
        same(&Pairs(vec![((1, 2), 1)]));
        same(&Pairs(vec![(Some("k"), 1)]));
        same(&Pairs(vec![(None::<&str>, 1)]));
        same(&Pairs(vec![('c', 1)]));
        same(&Pairs(vec![(Newtype("k"), 1)]));
        same(&json!([{"a": Pairs(vec![("k", 1), ("l", 2)])}]));
        same(&Pairs(vec![(
            RawValue::from_string("\"k\"".into()).unwrap(),
            1,
        )]));
        same(&Pairs(Vec::<(u8, u8)>::new()));
    }

    #[test]
    fn a_failing_serialize_leaves_the_buffer_as_it_was() {
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use ser::SerializeSeq;
                let mut seq = s.serialize_seq(None)?;
                seq.serialize_element("written")?;
                Err(ser::Error::custom("no"))
            }
        }
        #[derive(Serialize)]
        struct Outer {
            a: u8,
            fails: Fails,
        }
        same(&Fails);
        same(&Outer { a: 1, fails: Fails });
    }

    /// Every byte, at every offset of two words, after every kind of byte: found exactly where
    /// it is, whatever a borrow flags above it.
    #[test]
    fn the_first_byte_to_escape_is_found_in_any_word() {
        for byte in 0..=255u8 {
            for before in [b'a', 0x00, 0x1f, 0x20, b'"', b'\\', 0x7f, 0x80, 0xff] {
                for at in 0..16 {
                    let mut bytes = [b'a'; 19];
                    bytes[..at].fill(if needs_escape(before) { b'b' } else { before });
                    bytes[at] = byte;
                    if at + 1 < bytes.len() {
                        bytes[at + 1] = before;
                    }
                    let want = bytes.iter().position(|&b| needs_escape(b));
                    assert_eq!(
                        next_escape(&bytes, 0),
                        want,
                        "{byte:#x} at {at} after {before:#x}"
                    );
                    assert_eq!(
                        next_escape(&bytes, at.min(3)),
                        bytes
                            .iter()
                            .skip(at.min(3))
                            .position(|&b| needs_escape(b))
                            .map(|i| i + at.min(3))
                    );
                }
            }
        }
    }

    /// `text` as a JSON string whose every character is written as `how` picks (cycled): as
    /// itself where JSON allows, by its short escape, by `\u` in either case (a surrogate pair
    /// above the BMP), or `/` as `\/`.
    fn written_any_way(text: &str, how: &[u8]) -> String {
        let mut out = String::from("\"");
        for (i, c) in text.chars().enumerate() {
            let pick = how.get(i % how.len().max(1)).copied().unwrap_or(0) % 4;
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '\n' => Some("\\n"),
                '/' if pick == 1 => Some("\\/"),
                _ => None,
            };
            let literal_ok = !(c < ' ' || c == '"' || c == '\\');
            match (pick, short) {
                (0, _) if literal_ok => out.push(c),
                (1, Some(esc)) => out.push_str(esc),
                _ => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        if pick == 3 {
                            out.push_str(&format!("\\u{unit:04X}"));
                        } else {
                            out.push_str(&format!("\\u{unit:04x}"));
                        }
                    }
                }
            }
        }
        out.push('"');
        out
    }

    #[test]
    fn canonical_strings_rewrites_only_what_has_another_way() {
        let json = r#"{"k\u0041": ["x\/y", 1.5, {"z": "caf\u00e9 \ud83d\ude00", "n": "a\u000ab\u001F"}], "ok": "a\"b\\c\n\u0001"}"#;
        let canonical = canonical_strings(json.as_bytes()).unwrap();
        assert_eq!(
            std::str::from_utf8(&canonical).unwrap(),
            "{\"kA\": [\"x/y\", 1.5, {\"z\": \"café 😀\", \"n\": \"a\\nb\\u001f\"}], \"ok\": \"a\\\"b\\\\c\\n\\u0001\"}",
            "every string as `string` writes it, keys included; the rest as written"
        );
        let already = r#"{"a": "\"\\\b\t\n\f\r\u0000\u001f é", "\\u00e9": []}"#.as_bytes();
        assert!(matches!(
            canonical_strings(already).unwrap(),
            Cow::Borrowed(b) if b == already
        ));
        assert!(
            canonical_strings(br#"["\ud800"]"#).is_err(),
            "a lone surrogate"
        );
    }

    proptest! {
        #[test]
        fn canonical_strings_is_the_writers_escaping(
            text in "[a-z\"\\\\\n\u{1}\u{1f}/é😀\u{7f}]{0,12}",
            how in proptest::collection::vec(any::<u8>(), 1..8),
            key in "[a-z/é]{0,3}",
        ) {
            let written = written_any_way(&text, &how);
            let key_written = written_any_way(&key, &how);
            let doc = format!("[{written}, {{{key_written}: {written}}}]");
            let mut want = Vec::new();
            string(&mut want, &text);
            let mut want_key = Vec::new();
            string(&mut want_key, &key);
            let (want, want_key) = (String::from_utf8(want).unwrap(), String::from_utf8(want_key).unwrap());
            let got = canonical_strings(doc.as_bytes()).unwrap();
            prop_assert_eq!(
                std::str::from_utf8(&got).unwrap(),
                format!("[{want}, {{{want_key}: {want}}}]")
            );
            let value: Value = serde_json::from_str(&doc).unwrap();
            prop_assert_eq!(serde_json::from_slice::<Value>(&got).unwrap(), value);
        }

        #[test]
        fn canonical_strings_borrows_what_serde_wrote(text in "\\PC{0,16}", key in "\\PC{0,4}") {
            let doc = serde_json::to_vec(&json!({ key: [text, 1] })).unwrap();
            prop_assert!(matches!(
                canonical_strings(&doc).unwrap(),
                Cow::Borrowed(b) if b == doc.as_slice()
            ));
        }
    }
}
