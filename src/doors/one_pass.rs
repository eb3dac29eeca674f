//! What the doors' one pass over a conversation shares: a `content` (or a tool output) read
//! with its message, a string or a list. A door reads its list of messages or items in one pass
//! onto typed structs, and only a list that pass cannot read is read item by item, to name the
//! error (serde_json reads a raw slice whole: a list read level by level reads its text once per
//! level).

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::api::chat::Text;

/// A string, or a list of `T`.
pub(crate) enum StringOrList<S, T> {
    Text(S),
    List(Vec<T>),
}

/// How the one pass takes a string: as a [`Text`] only when it has no escapes, so that it is
/// copied as written (serde hands over an escaped string's value, not its text: that declines
/// the pass); as a value (`Cow<str>`), always.
pub(crate) trait StringIn<'a>: Sized {
    fn borrowed(s: &'a str) -> Self;
    fn copied(s: &str) -> Option<Self>;
}

impl<'a> StringIn<'a> for Text<'a> {
    fn borrowed(s: &'a str) -> Self {
        Text::Made(Cow::Borrowed(s))
    }
    fn copied(_: &str) -> Option<Self> {
        None
    }
}

impl<'a> StringIn<'a> for Cow<'a, str> {
    fn borrowed(s: &'a str) -> Self {
        Cow::Borrowed(s)
    }
    fn copied(s: &str) -> Option<Self> {
        Some(Cow::Owned(s.to_owned()))
    }
}

impl<'de, S: StringIn<'de>, T: Deserialize<'de>> Deserialize<'de> for StringOrList<S, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<S, T>(PhantomData<(S, T)>);
        impl<'de, S: StringIn<'de>, T: Deserialize<'de>> Visitor<'de> for Visit<S, T> {
            type Value = StringOrList<S, T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(StringOrList::Text(S::borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                S::copied(s)
                    .map(StringOrList::Text)
                    .ok_or_else(|| E::custom("an escaped string is read with its item"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(item) = seq.next_element()? {
                    list.push(item);
                }
                Ok(StringOrList::List(list))
            }
        }
        d.deserialize_any(Visit(PhantomData))
    }
}

/// Text for the doors' property tests: with nothing to escape, or with quotes, backslashes,
/// line breaks and non-ASCII.
#[cfg(test)]
pub(crate) fn text_strategy(plain: bool) -> proptest::strategy::BoxedStrategy<String> {
    use proptest::strategy::Strategy;
    if plain {
        "[a-z é]{0,12}".boxed()
    } else {
        "[a-z\"\\\\\n\u{e9}/]{0,8}".boxed()
    }
}
