//! The client's JSON body, parsed once into its top-level fields, each kept as a borrowed raw
//! slice of the original bytes.
//!
//! Why raw: the gateway needs only a few fields to route (`model`, `stream`); the adapter of
//! the chosen provider family then reads the fields it translates, straight from their slices,
//! and copies the ones it forwards byte for byte. Nothing is turned into a `Value` tree, and
//! unknown fields survive untouched for upstreams that understand them — except the gateway's
//! own ([`RoutingFields`]), which are taken out at parse, so that no adapter can forward them.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{GatewayError, Operation, Str};

/// The most choices a request may ask for (`n`), as OpenAI allows.
pub const MAX_CHOICES: u64 = 128;

/// The most top-level fields a body may have: OpenAI's request has about forty, and the
/// duplicate check and field lookups stay cheap under a hostile body.
pub const MAX_FIELDS: usize = 256;

/// Top-level fields in body order; keys are unique (a duplicate key is a 400).
#[derive(Debug)]
pub struct RawRequest<'a> {
    fields: Vec<(Cow<'a, str>, &'a RawValue)>,
    /// The `model` field, validated as a string (without one, the first of `models`).
    pub model: Cow<'a, str>,
    /// The `stream` field (false when absent or null).
    pub stream: bool,
    /// The fields addressed to the gateway itself, not among [`fields`](Self::fields).
    pub routing: RoutingFields<'a>,
}

/// OpenRouter's request-level routing fields, `models` (fallback models) and `provider` (route
/// preferences): admission reads them; they are never forwarded (an upstream would refuse an
/// unknown field, or, behind another router, act on it).
#[derive(Debug, Default, Clone, Copy)]
pub struct RoutingFields<'a> {
    pub models: Option<&'a RawValue>,
    pub provider: Option<&'a RawValue>,
}

impl<'a> RoutingFields<'a> {
    /// Takes the routing fields out of `fields`.
    fn take(fields: &mut ObjectFields<'a>) -> Self {
        let mut routing = RoutingFields::default();
        fields.retain(|(name, raw)| {
            let slot = match name.as_ref() {
                "models" => &mut routing.models,
                "provider" => &mut routing.provider,
                _ => return true,
            };
            *slot = Some(*raw);
            false
        });
        routing
    }
}

impl<'a> RawRequest<'a> {
    /// Parses and checks the fields every request of `op` must have.
    pub fn parse(body: &'a [u8], op: Operation) -> Result<Self, GatewayError> {
        let req = Self::parse_head(body)?;
        req.check(op)?;
        Ok(req)
    }

    /// Parses the fields every door's body has: a JSON object naming a `model`, maybe
    /// `stream`ed. What a door whose body is not the request model's reads before translating.
    pub fn parse_head(body: &'a [u8]) -> Result<Self, GatewayError> {
        let mut fields = object_fields(body)
            .map_err(|e| GatewayError::invalid(format!("request body is not valid JSON: {e}")))?;
        let routing = RoutingFields::take(&mut fields);
        if !fields.iter().any(|(name, _)| name == "model") {
            // OpenRouter's rule: without `model`, the first of `models` is the model, and the
            // body reads as if it had named it (adapters rewrite or forward `model`).
            if let Some(first) = first_model(routing.models) {
                fields.insert(0, (Cow::Borrowed("model"), first));
            }
        }
        let mut req = RawRequest {
            fields,
            model: Cow::Borrowed(""),
            stream: false,
            routing,
        };
        req.model = req
            .typed::<Str<'a>>("model")?
            .ok_or_else(|| GatewayError::invalid("missing required field: model"))?
            .0;
        if req.model.is_empty() {
            return Err(GatewayError::invalid("model must not be empty"));
        }
        req.stream = req
            .typed::<Option<bool>>("stream")?
            .flatten()
            .unwrap_or(false);
        Ok(req)
    }

    /// The fields a request of `op` must have beyond [`parse_head`](Self::parse_head)'s.
    fn check(&self, op: Operation) -> Result<(), GatewayError> {
        let req = self;
        let required = match op {
            Operation::Chat => "messages",
            Operation::Embeddings => "input",
        };
        if req.get(required).is_none() {
            return Err(GatewayError::invalid(format!(
                "missing required field: {required}"
            )));
        }
        if op == Operation::Chat {
            // Shape only: the elements are walked once, bounded, by `Limits::check`.
            let messages = req.get("messages").map_or("", |v| v.get());
            let inner = messages.strip_prefix('[').unwrap_or("]").trim_start();
            if inner.starts_with(']') {
                return Err(GatewayError::invalid("messages must be a non-empty array"));
            }
            match req.typed::<Option<u64>>("n").map(Option::flatten) {
                Ok(None) | Ok(Some(1..=MAX_CHOICES)) => {}
                Ok(Some(n)) => {
                    return Err(GatewayError::invalid(format!(
                        "invalid value for n: expected an integer from 1 to {MAX_CHOICES}, got {n}"
                    )))
                }
                Err(_) => {
                    return Err(GatewayError::invalid(format!(
                        "invalid value for n: expected an integer from 1 to {MAX_CHOICES}"
                    )))
                }
            }
            // No model writes billions of tokens, and a bound keeps the worst case that
            // admission reserves computable for every model, capped or not.
            for field in ["max_tokens", "max_completion_tokens"] {
                if req.typed::<Option<u32>>(field).is_err() {
                    return Err(GatewayError::invalid(format!(
                        "invalid value for {field}: expected an integer from 0 to {}",
                        u32::MAX
                    )));
                }
            }
        }
        Ok(())
    }

    /// The raw slice of a top-level field.
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// Reads a field as `T`; a present field of the wrong type is a 400 naming it.
    pub fn typed<T: Deserialize<'a>>(&self, name: &str) -> Result<Option<T>, GatewayError> {
        match self.get(name) {
            None => Ok(None),
            Some(raw) => serde_json::from_str(raw.get())
                .map(Some)
                .map_err(|e| GatewayError::invalid(format!("invalid value for {name}: {e}"))),
        }
    }

    /// Whether the client asked for reasoning text to be left out of the answer: `reasoning.exclude`
    /// (OpenRouter), or the deprecated `include_reasoning: false`.
    pub fn excludes_reasoning(&self) -> bool {
        #[derive(Deserialize)]
        struct Reasoning {
            #[serde(default)]
            exclude: Option<bool>,
        }
        let exclude = self
            .typed::<Option<Reasoning>>("reasoning")
            .ok()
            .flatten()
            .flatten()
            .and_then(|r| r.exclude);
        let include = self
            .typed::<Option<bool>>("include_reasoning")
            .ok()
            .flatten()
            .flatten();
        exclude.or(include.map(|i| !i)).unwrap_or(false)
    }

    /// All fields in body order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &'a RawValue)> + '_ {
        self.fields.iter().map(|(k, v)| (k.as_ref(), *v))
    }
}

/// The first element of a `models` array, if it is one with an element: the model of a body
/// that names none ([`RawRequest::parse_head`]; the doors that translate a body read it too).
pub fn first_model(models: Option<&RawValue>) -> Option<&RawValue> {
    let (first, _) = bounded_list(models?, 1).ok()?;
    first.into_iter().next()
}

/// The first `keep` elements of a JSON array, raw, and how many it has in all: the rest are
/// skipped without being kept, so a hostile list costs no memory.
pub fn bounded_list(
    array: &RawValue,
    keep: usize,
) -> Result<(Vec<&RawValue>, usize), serde_json::Error> {
    struct V(usize);
    impl<'de> Visitor<'de> for V {
        type Value = (Vec<&'de RawValue>, usize);
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
            let mut kept = Vec::with_capacity(self.0.min(16));
            while kept.len() < self.0 {
                match seq.next_element::<&'de RawValue>()? {
                    Some(raw) => kept.push(raw),
                    None => {
                        let count = kept.len();
                        return Ok((kept, count));
                    }
                }
            }
            let mut count = kept.len();
            while seq.next_element::<IgnoredAny>()?.is_some() {
                count = count.saturating_add(1);
            }
            Ok((kept, count))
        }
    }
    let mut de = serde_json::Deserializer::from_str(array.get());
    let list = de.deserialize_seq(V(keep))?;
    de.end()?;
    Ok(list)
}

/// A JSON object's top-level (key, raw value) pairs, in order, without building a tree.
pub type ObjectFields<'a> = Vec<(Cow<'a, str>, &'a RawValue)>;

/// Parses a JSON object into its top-level fields; a duplicate key is an error.
pub fn object_fields(json: &[u8]) -> Result<ObjectFields<'_>, serde_json::Error> {
    crate::api::json::from_slice::<Fields>(json).map(|f| f.0)
}

/// Writes `{"k":raw,...}`: keys re-escaped, values copied byte for byte.
pub fn write_object<'v>(out: &mut Vec<u8>, fields: impl IntoIterator<Item = (&'v str, &'v str)>) {
    out.push(b'{');
    for (i, (key, raw)) in fields.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        super::json::string(out, key);
        out.push(b':');
        out.extend_from_slice(raw.as_bytes());
    }
    out.push(b'}');
}

struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Fields<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Fields<'a>, M::Error> {
                let mut out: Vec<(Cow<'a, str>, &'a RawValue)> =
                    Vec::with_capacity(map.size_hint().unwrap_or(8));
                // `Str`, not `Cow<str>`: serde's `Cow` always copies, and this runs on every
                // body; a key is owned only when it has escapes.
                while let Some(Str(key)) = map.next_key::<Str<'de>>()? {
                    if out.len() == MAX_FIELDS {
                        return Err(serde::de::Error::custom(format!(
                            "more than {MAX_FIELDS} top-level fields"
                        )));
                    }
                    let value: &'de RawValue = map.next_value()?;
                    if out.iter().any(|(k, _)| *k == key) {
                        return Err(serde::de::Error::custom(format!("duplicate field {key:?}")));
                    }
                    out.push((key, value));
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str, op: Operation) -> String {
        RawRequest::parse(body.as_bytes(), op)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn keeps_fields_raw_and_in_order() {
        let body = br#"{"model":"a/b","messages":[{"role":"user","content":"hi"}],"x_vendor":{"k":[1, 2]},"stream":true}"#;
        let r = RawRequest::parse(body, Operation::Chat).unwrap();
        assert_eq!(r.model, "a/b");
        assert!(r.stream);
        let names: Vec<&str> = r.fields().map(|(k, _)| k).collect();
        assert_eq!(names, ["model", "messages", "x_vendor", "stream"]);
        assert_eq!(
            r.get("x_vendor").unwrap().get(),
            r#"{"k":[1, 2]}"#,
            "byte-exact"
        );
    }

    #[test]
    fn rejects_bad_bodies_with_clear_messages() {
        assert!(err("{", Operation::Chat).contains("not valid JSON"));
        assert!(err("[1]", Operation::Chat).contains("not valid JSON"));
        assert!(
            err(r#"{"messages":[{}]}"#, Operation::Chat).contains("missing required field: model")
        );
        assert!(err(r#"{"model":"m"}"#, Operation::Chat).contains("messages"));
        assert!(err(r#"{"model":"m","messages":[]}"#, Operation::Chat).contains("non-empty"));
        assert!(err(r#"{"model":7,"messages":[1]}"#, Operation::Chat)
            .contains("invalid value for model"));
        assert!(err(
            r#"{"model":"m","messages":[1],"stream":"yes"}"#,
            Operation::Chat
        )
        .contains("stream"));
        assert!(err(
            r#"{"model":"m","model":"n","messages":[1]}"#,
            Operation::Chat
        )
        .contains("duplicate"));
        assert!(err(r#"{"model":"m"}"#, Operation::Embeddings).contains("input"));
        assert!(err(r#"{"model":"m","messages":{}}"#, Operation::Chat).contains("non-empty"));
        assert!(err(r#"{"model":"m","messages":[ ]}"#, Operation::Chat).contains("non-empty"));
    }

    #[test]
    fn n_must_be_between_1_and_128() {
        let chat = |n: &str| format!(r#"{{"model":"m","messages":[1],"n":{n}}}"#);
        for bad in ["0", "129", "-1", "1.5", "\"2\""] {
            let e = err(&chat(bad), Operation::Chat);
            assert!(
                e.starts_with("invalid value for n: expected an integer from 1 to 128"),
                "{bad}: {e}"
            );
        }
        for good in ["1", "128", "null"] {
            assert!(
                RawRequest::parse(chat(good).as_bytes(), Operation::Chat).is_ok(),
                "{good}"
            );
        }
    }

    #[test]
    fn output_caps_must_be_token_counts_a_model_could_write() {
        for field in ["max_tokens", "max_completion_tokens"] {
            let chat = |v: &str| format!(r#"{{"model":"m","messages":[1],"{field}":{v}}}"#);
            for bad in [
                "1e18",
                "1000000000000000000",
                "4294967296",
                "-1",
                "1.5",
                "\"9\"",
            ] {
                let e = err(&chat(bad), Operation::Chat);
                assert!(
                    e.starts_with(&format!("invalid value for {field}")),
                    "{bad}: {e}"
                );
            }
            for good in ["0", "4096", "4294967295", "null"] {
                let body = chat(good);
                let ok = RawRequest::parse(body.as_bytes(), Operation::Chat);
                assert!(ok.is_ok(), "{field} {good}");
            }
        }
    }

    #[test]
    fn many_top_level_fields_are_refused_early() {
        let fields: Vec<String> = (0..MAX_FIELDS).map(|i| format!(r#""f{i}":0"#)).collect();
        let at_limit = format!(r#"{{{}}}"#, fields.join(","));
        // MAX_FIELDS fields parse (then miss model); one more is refused.
        assert!(err(&at_limit, Operation::Chat).contains("model"));
        let over = format!(r#"{{{},"x":1}}"#, fields.join(","));
        assert!(err(&over, Operation::Chat).contains("more than 256 top-level fields"));
    }

    #[test]
    fn the_routing_fields_are_taken_out_so_that_nothing_forwards_them() {
        let body = br#"{"model":"a/b","models":["c/d"],"messages":[1],"provider":{"only":["vertex"]},"x":1}"#;
        let r = RawRequest::parse(body, Operation::Chat).unwrap();
        let names: Vec<&str> = r.fields().map(|(k, _)| k).collect();
        assert_eq!(names, ["model", "messages", "x"]);
        assert_eq!(r.get("models").map(RawValue::get), None);
        assert_eq!(r.routing.models.map(RawValue::get), Some(r#"["c/d"]"#));
        assert_eq!(
            r.routing.provider.map(RawValue::get),
            Some(r#"{"only":["vertex"]}"#)
        );
    }

    #[test]
    fn without_a_model_the_first_of_models_is_the_model() {
        let body = br#"{"models":["c/d","e/f"],"messages":[1],"stream":true}"#;
        let r = RawRequest::parse(body, Operation::Chat).unwrap();
        assert_eq!(r.model, "c/d");
        let fields: Vec<(&str, &str)> = r.fields().map(|(k, v)| (k, v.get())).collect();
        assert_eq!(
            fields,
            [
                ("model", r#""c/d""#),
                ("messages", "[1]"),
                ("stream", "true")
            ],
            "the body reads as if it had named it"
        );
        assert!(err(r#"{"models":[],"messages":[1]}"#, Operation::Chat).contains("model"));
        assert!(err(r#"{"models":[7],"messages":[1]}"#, Operation::Chat)
            .contains("invalid value for model"));
        let named = br#"{"model":"a/b","models":["c/d"],"messages":[1]}"#;
        assert_eq!(
            RawRequest::parse(named, Operation::Chat).unwrap().model,
            "a/b"
        );
    }

    #[test]
    fn plain_keys_and_the_model_are_borrowed_from_the_body() {
        let fields = object_fields(br#"{"model":"a","mod\u0065l2":1}"#).unwrap();
        assert!(matches!(fields[0].0, Cow::Borrowed("model")));
        assert!(matches!(&fields[1].0, Cow::Owned(k) if k == "model2"));
        let req = RawRequest::parse_head(br#"{"model":"a/b"}"#).unwrap();
        assert!(matches!(req.model, Cow::Borrowed("a/b")));
    }

    #[test]
    fn escaped_keys_and_values_are_understood() {
        let r = RawRequest::parse(
            br#"{"mod\u0065l":"a\/b","input":"x"}"#,
            Operation::Embeddings,
        )
        .unwrap();
        assert_eq!(r.model, "a/b");
    }
}
