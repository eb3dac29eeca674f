//! What one request may carry, checked in one linear pass over its messages (or embeddings
//! inputs) before the gates, so that every request costs bounded CPU and memory before it is
//! refused or admitted, whatever family serves it (`tollgate.limits`).
//!
//! - counts: messages, content parts (all messages together), embeddings inputs;
//! - URLs in content parts (an Anthropic block's `source.url` too): `https:` and `data:` only
//!   (`http:` when allowed) — a `gs://` URL would make Vertex read the operator's storage with
//!   the operator's identity;
//! - the estimated input tokens against the model's context window: the body's bytes at 4 a
//!   token, inline media payloads (data: URLs, `input_audio.data`, Anthropic's base64
//!   `source.data`) left out since images and audio count far fewer tokens than their bytes.
//!   An estimate, not a bound: text denser than 4 bytes a token (CJK, code) passes below it
//!   and the upstream refuses what it must.

use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{Deserializer as _, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{GatewayError, Operation, RawRequest, Str};

/// Per-request bounds; defaults as documented in docs/operations.md#request-limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_messages: u64,
    /// Content parts of all messages together.
    pub max_content_parts: u64,
    pub max_embedding_inputs: u64,
    /// Estimated input tokens a chat request may carry; `None`: the model's context window.
    pub max_input_tokens: Option<u64>,
    /// Accept `http:` URLs in content parts (for upstreams on a private network).
    pub allow_http_urls: bool,
    /// Request header fields, and their bytes (names and values), a request may carry.
    pub max_header_count: u64,
    pub max_header_bytes: u64,
    /// The whole request body must arrive within this (slow uploads).
    pub body_timeout: Duration,
    /// Each write to the client must complete within this (slow readers).
    pub client_write_timeout: Duration,
    /// A kept-alive connection waiting for its next request is closed after this (whole
    /// seconds, at least one); a request's head must arrive whole within it.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_messages: 10_000,
            max_content_parts: 10_000,
            max_embedding_inputs: 2_048,
            max_input_tokens: None,
            allow_http_urls: false,
            max_header_count: 100,
            max_header_bytes: 32 * 1024,
            body_timeout: Duration::from_secs(30),
            client_write_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

impl Limits {
    /// The request head's size: `count` header fields of `bytes` in all.
    pub fn check_headers(&self, count: usize, bytes: usize) -> Result<(), GatewayError> {
        if count as u64 > self.max_header_count {
            return Err(GatewayError::HeadersTooLarge {
                what: "fields",
                limit: self.max_header_count,
            });
        }
        if bytes as u64 > self.max_header_bytes {
            return Err(GatewayError::HeadersTooLarge {
                what: "bytes",
                limit: self.max_header_bytes,
            });
        }
        Ok(())
    }

    /// Checks `req` (whose whole body is `body_len` bytes) against these bounds and the model's
    /// context window.
    pub fn check(
        &self,
        req: &RawRequest<'_>,
        op: Operation,
        body_len: usize,
        context_window: Option<u32>,
    ) -> Result<(), GatewayError> {
        match op {
            Operation::Embeddings => self.check_inputs(req),
            Operation::Chat => {
                let media = self.check_messages(req)?;
                let estimate = (body_len as u64).saturating_sub(media).div_ceil(4);
                match self.max_input_tokens.or(context_window.map(u64::from)) {
                    Some(limit) if estimate > limit => {
                        Err(GatewayError::ContextLengthExceeded { limit, estimate })
                    }
                    _ => Ok(()),
                }
            }
        }
    }

    fn check_inputs(&self, req: &RawRequest<'_>) -> Result<(), GatewayError> {
        let Some(input) = req.get("input").filter(|v| v.get().starts_with('[')) else {
            return Ok(()); // one string (or a type error the family reports)
        };
        let mut n = 0;
        each::<IgnoredAny>(input, "input", |_, _| {
            n += 1;
            bound(n, self.max_embedding_inputs, "embeddings inputs")
        })
    }

    /// Walks every message and part once: counts, URL schemes; returns the bytes of inline
    /// media payloads.
    fn check_messages(&self, req: &RawRequest<'_>) -> Result<u64, GatewayError> {
        let Some(messages) = req.get("messages") else {
            return Ok(0);
        };
        let (mut count, mut parts, mut media) = (0, 0, 0u64);
        each::<MessageScan<'_>>(messages, "messages", |i, m| {
            count += 1;
            bound(count, self.max_messages, "messages")?;
            let Some(content) = m.content.filter(|c| c.get().starts_with('[')) else {
                return Ok(());
            };
            each::<PartScan<'_>>(content, "content", |j, p| {
                let at = || format!("messages[{i}].content[{j}]");
                media += self.check_part(p, &at, &mut parts)?;
                Ok(())
            })
        })?;
        Ok(media)
    }

    /// Counts one content part (and the blocks of an Anthropic `tool_result` in it) against
    /// `parts`, checks its URLs; returns the bytes of its inline media payloads.
    fn check_part(
        &self,
        p: PartScan<'_>,
        at: &dyn Fn() -> String,
        parts: &mut u64,
    ) -> Result<u64, GatewayError> {
        *parts += 1;
        bound(*parts, self.max_content_parts, "content parts")?;
        let mut media = 0;
        if let Some(url) = p.image_url.as_ref().and_then(|u| u.url.as_ref()) {
            media += self.check_url(url, || format!("{}.image_url.url", at()))?;
        }
        if let Some(data) = p.file.as_ref().and_then(|f| f.file_data.as_ref()) {
            media += self.check_url(data, || format!("{}.file.file_data", at()))?;
        }
        if let Some(audio) = p.input_audio.and_then(|a| a.data) {
            media += audio.get().len() as u64;
        }
        if let Some(source) = p.source {
            if let Some(url) = source.url.as_ref() {
                self.check_url(url, || format!("{}.source.url", at()))?;
            }
            media += source.data.map_or(0, |d| d.get().len() as u64);
        }
        if let Some(inner) = p.content.filter(|c| c.get().starts_with('[')) {
            each::<PartScan<'_>>(inner, "content", |k, q| {
                let at = || format!("{}.content[{k}]", at());
                media += self.check_part(q, &at, parts)?;
                Ok(())
            })?;
        }
        Ok(media)
    }

    /// An accepted URL's inline payload size (0 for a remote URL), or a 400 naming the part.
    fn check_url(&self, url: &str, at: impl Fn() -> String) -> Result<u64, GatewayError> {
        if url.starts_with("data:") {
            return Ok(url.len() as u64);
        }
        let scheme = url.split_once(':').map_or("", |(s, _)| s);
        if scheme.eq_ignore_ascii_case("https")
            || self.allow_http_urls && scheme.eq_ignore_ascii_case("http")
        {
            return Ok(0);
        }
        let accepted = if self.allow_http_urls {
            "https:, http: and data: URLs"
        } else {
            "https: and data: URLs"
        };
        Err(GatewayError::invalid(format!(
            "{}: only {accepted} are accepted (got {:?})",
            at(),
            scheme_of(url)
        )))
    }
}

/// The scheme of a refused URL, shortened for the error message.
fn scheme_of(url: &str) -> String {
    match url.split_once(':') {
        Some((scheme, _)) if scheme.len() <= 16 => format!("{scheme}:"),
        _ => url.chars().take(16).collect(),
    }
}

fn bound(n: u64, limit: u64, what: &'static str) -> Result<(), GatewayError> {
    if n > limit {
        Err(GatewayError::TooMany { what, limit })
    } else {
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(expecting = "a message object")]
struct MessageScan<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(expecting = "a content part object")]
struct PartScan<'a> {
    #[serde(borrow, default)]
    image_url: Option<UrlScan<'a>>,
    #[serde(borrow, default)]
    file: Option<FileScan<'a>>,
    #[serde(borrow, default)]
    input_audio: Option<AudioScan<'a>>,
    /// Anthropic's image and document blocks (the Messages door's body is walked the same).
    #[serde(borrow, default)]
    source: Option<SourceScan<'a>>,
    /// An Anthropic `tool_result`'s own blocks (a string otherwise).
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(expecting = "a source object")]
struct SourceScan<'a> {
    #[serde(borrow, default)]
    url: Option<Str<'a>>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(expecting = "an image_url object")]
struct UrlScan<'a> {
    #[serde(borrow, default)]
    url: Option<Str<'a>>,
}

#[derive(Deserialize)]
#[serde(expecting = "a file object")]
struct FileScan<'a> {
    #[serde(borrow, default)]
    file_data: Option<Str<'a>>,
}

#[derive(Deserialize)]
#[serde(expecting = "an input_audio object")]
struct AudioScan<'a> {
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

/// Calls `f(index, element)` on each element of the JSON array `raw` as it is parsed — never
/// holding them all — and stops at the first error `f` returns.
fn each<'a, T: Deserialize<'a>>(
    raw: &'a RawValue,
    name: &str,
    mut f: impl FnMut(usize, T) -> Result<(), GatewayError>,
) -> Result<(), GatewayError> {
    struct Each<'f, T, F> {
        f: &'f mut F,
        failure: &'f mut Option<GatewayError>,
        item: PhantomData<T>,
    }
    impl<'de, T, F> Visitor<'de> for Each<'_, T, F>
    where
        T: Deserialize<'de>,
        F: FnMut(usize, T) -> Result<(), GatewayError>,
    {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while let Some(item) = seq.next_element::<T>()? {
                if let Err(e) = (self.f)(i, item) {
                    *self.failure = Some(e);
                    return Err(serde::de::Error::custom("stopped"));
                }
                i += 1;
            }
            Ok(())
        }
    }
    let mut failure = None;
    let visitor = Each {
        f: &mut f,
        failure: &mut failure,
        item: PhantomData,
    };
    let walked = serde_json::Deserializer::from_str(raw.get()).deserialize_seq(visitor);
    match (failure, walked) {
        (Some(e), _) => Err(e),
        (None, Err(e)) => Err(GatewayError::invalid(format!(
            "invalid value for {name}: {e}"
        ))),
        (None, Ok(())) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        body: &str,
        op: Operation,
        limits: &Limits,
        window: Option<u32>,
    ) -> Result<(), GatewayError> {
        let req = RawRequest::parse(body.as_bytes(), op).unwrap();
        limits.check(&req, op, body.len(), window)
    }

    fn chat_with_parts(parts: &str) -> String {
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":[{parts}]}}]}}"#)
    }

    #[test]
    fn headers_are_bounded_in_count_and_size() {
        let limits = Limits {
            max_header_count: 3,
            max_header_bytes: 100,
            ..Limits::default()
        };
        assert_eq!(limits.check_headers(3, 100), Ok(()));
        assert_eq!(
            limits.check_headers(4, 10),
            Err(GatewayError::HeadersTooLarge {
                what: "fields",
                limit: 3
            })
        );
        let e = limits.check_headers(1, 101).unwrap_err();
        assert_eq!((e.status(), e.code()), (431, "headers_too_large"));
    }

    #[test]
    fn counts_are_bounded() {
        let limits = Limits {
            max_messages: 2,
            max_content_parts: 3,
            max_embedding_inputs: 2,
            ..Limits::default()
        };
        let msg = r#"{"role":"user","content":"hi"}"#;
        let two = format!(r#"{{"model":"m","messages":[{msg},{msg}]}}"#);
        let three = format!(r#"{{"model":"m","messages":[{msg},{msg},{msg}]}}"#);
        assert_eq!(check(&two, Operation::Chat, &limits, None), Ok(()));
        assert_eq!(
            check(&three, Operation::Chat, &limits, None),
            Err(GatewayError::TooMany {
                what: "messages",
                limit: 2
            })
        );
        let part = r#"{"type":"text","text":"a"}"#;
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":[{part},{part}]}},{{"role":"user","content":[{part},{part}]}}]}}"#
        );
        assert_eq!(
            check(&body, Operation::Chat, &limits, None),
            Err(GatewayError::TooMany {
                what: "content parts",
                limit: 3
            }),
            "parts of all messages count together"
        );
        let inputs = |n: usize| {
            format!(
                r#"{{"model":"m","input":[{}]}}"#,
                vec![r#""x""#; n].join(",")
            )
        };
        assert_eq!(
            check(&inputs(2), Operation::Embeddings, &limits, None),
            Ok(())
        );
        assert_eq!(
            check(&inputs(3), Operation::Embeddings, &limits, None),
            Err(GatewayError::TooMany {
                what: "embeddings inputs",
                limit: 2
            })
        );
        assert_eq!(
            check(
                r#"{"model":"m","input":"one string"}"#,
                Operation::Embeddings,
                &limits,
                None
            ),
            Ok(())
        );
    }

    #[test]
    fn only_https_and_data_urls_are_accepted() {
        let limits = Limits::default();
        let image = |url: &str| {
            chat_with_parts(&format!(
                r#"{{"type":"image_url","image_url":{{"url":"{url}"}}}}"#
            ))
        };
        for ok in [
            "https://example.com/a.png",
            "HTTPS://EXAMPLE.COM/A.PNG",
            "data:image/png;base64,iVBO",
        ] {
            assert_eq!(
                check(&image(ok), Operation::Chat, &limits, None),
                Ok(()),
                "{ok}"
            );
        }
        for (bad, scheme) in [
            ("gs://bucket/secret.png", "gs:"),
            ("http://169.254.169.254/latest", "http:"),
            ("file:///etc/passwd", "file:"),
            ("ftp://x/y", "ftp:"),
            ("no-scheme", "no-scheme"),
        ] {
            let e = check(&image(bad), Operation::Chat, &limits, None).unwrap_err();
            let msg = e.to_string();
            assert_eq!(e.status(), 400);
            assert!(
                msg.starts_with("messages[0].content[0].image_url.url: only https: and data:"),
                "{msg}"
            );
            assert!(msg.contains(scheme), "{msg}");
        }
        let file = chat_with_parts(
            r#"{"type":"text","text":"a"},{"type":"file","file":{"file_data":"gs://b/x.pdf"}}"#,
        );
        let msg = check(&file, Operation::Chat, &limits, None)
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("messages[0].content[1].file.file_data:"),
            "{msg}"
        );
        let http = Limits {
            allow_http_urls: true,
            ..Limits::default()
        };
        assert_eq!(
            check(
                &image("http://10.0.0.2/a.png"),
                Operation::Chat,
                &http,
                None
            ),
            Ok(())
        );
        assert!(check(&image("gs://b/x"), Operation::Chat, &http, None).is_err());
    }

    #[test]
    fn the_context_window_bounds_the_estimated_input_media_aside() {
        let limits = Limits::default();
        let text = "a".repeat(4_000);
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}]}}"#);
        let estimate = (body.len() as u64).div_ceil(4);
        assert_eq!(
            check(&body, Operation::Chat, &limits, Some(estimate as u32)),
            Ok(())
        );
        assert_eq!(
            check(&body, Operation::Chat, &limits, Some(estimate as u32 - 1)),
            Err(GatewayError::ContextLengthExceeded {
                limit: estimate - 1,
                estimate
            })
        );
        assert_eq!(
            check(&body, Operation::Chat, &limits, None),
            Ok(()),
            "no window, no bound"
        );
        let capped = Limits {
            max_input_tokens: Some(100),
            ..Limits::default()
        };
        assert!(
            check(&body, Operation::Chat, &capped, Some(1_000_000)).is_err(),
            "the override wins"
        );
        // A large inline image barely counts.
        let image = format!("data:image/png;base64,{}", "A".repeat(400_000));
        let body = chat_with_parts(&format!(
            r#"{{"type":"image_url","image_url":{{"url":"{image}"}}}}"#
        ));
        assert_eq!(check(&body, Operation::Chat, &limits, Some(1_000)), Ok(()));
        let audio = chat_with_parts(&format!(
            r#"{{"type":"input_audio","input_audio":{{"data":"{}","format":"wav"}}}}"#,
            "A".repeat(400_000)
        ));
        assert_eq!(check(&audio, Operation::Chat, &limits, Some(1_000)), Ok(()));
        // Nor does an Anthropic block's (the Messages door), whose URL is checked like any.
        let anthropic = chat_with_parts(&format!(
            r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{}"}}}}"#,
            "A".repeat(400_000)
        ));
        assert_eq!(
            check(&anthropic, Operation::Chat, &limits, Some(1_000)),
            Ok(())
        );
        let remote =
            chat_with_parts(r#"{"type":"image","source":{"type":"url","url":"gs://b/x.png"}}"#);
        let e = check(&remote, Operation::Chat, &limits, None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("messages[0].content[0].source.url: only https:"),
            "{e}"
        );
        // A screenshot a tool returned (Claude Code's Read): inside the tool_result.
        let result = chat_with_parts(&format!(
            r#"{{"type":"tool_result","tool_use_id":"t","content":[{{"type":"text","text":"x"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{}"}}}}]}}"#,
            "A".repeat(400_000)
        ));
        assert_eq!(
            check(&result, Operation::Chat, &limits, Some(1_000)),
            Ok(())
        );
        let two = Limits {
            max_content_parts: 2,
            ..Limits::default()
        };
        let e = check(&result, Operation::Chat, &two, None).unwrap_err();
        assert_eq!(
            e.code(),
            "limit_exceeded",
            "a tool result's blocks are parts too"
        );
    }

    #[test]
    fn a_malformed_array_is_a_400_naming_it() {
        let limits = Limits::default();
        let body = r#"{"model":"m","messages":[{"role":"user","content":[7]}]}"#;
        let e = check(body, Operation::Chat, &limits, None).unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(e.to_string().contains("invalid value for content"), "{e}");
        assert!(
            e.to_string().contains("expected a content part object"),
            "{e}"
        );
    }
}
