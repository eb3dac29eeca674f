//! Token usage in disjoint buckets, the only shape billing prices, and its OpenAI rendering.
//!
//! `prompt_tokens = input + audio_input + cache_read + cache_write + cache_write_1h` (all
//! input tokens, cached or not), `completion_tokens = output` (reasoning included),
//! `cached_tokens = cache_read`, `cache_write_tokens = cache_write + cache_write_1h`.

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens neither read from nor written to a cache, audio excepted.
    pub input: u64,
    /// Uncached audio input tokens (Gemini prices audio apart).
    pub audio_input: u64,
    pub cache_read: u64,
    /// Tokens written to a cache that lives 5 minutes (Anthropic's default), or to a cache
    /// the gateway created for the request (Gemini's explicit caches).
    pub cache_write: u64,
    /// Tokens written to Anthropic's 1-hour cache.
    pub cache_write_1h: u64,
    /// All output tokens, reasoning included.
    pub output: u64,
    /// The part of `output` spent thinking.
    pub reasoning: u64,
    /// Tokens × seconds of cache storage the request bought (the TTL of a Gemini cache it
    /// created); not a prompt token.
    pub cache_storage_token_seconds: u64,
}

impl Usage {
    /// Every input token (saturating: the counts are the upstream's, and a hostile one could
    /// send any).
    pub fn prompt_tokens(&self) -> u64 {
        [
            self.audio_input,
            self.cache_read,
            self.cache_write,
            self.cache_write_1h,
        ]
        .into_iter()
        .fold(self.input, u64::saturating_add)
    }
    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }

    /// The OpenAI `usage` object.
    pub fn to_openai(&self) -> OpenAiUsage {
        OpenAiUsage {
            prompt_tokens: self.prompt_tokens(),
            completion_tokens: self.output,
            total_tokens: self.prompt_tokens().saturating_add(self.output),
            prompt_tokens_details: PromptDetails {
                cached_tokens: self.cache_read,
                cache_write_tokens: self.cache_write.saturating_add(self.cache_write_1h),
            },
            completion_tokens_details: CompletionDetails {
                reasoning_tokens: self.reasoning,
            },
        }
    }

    /// Reads an OpenAI-shaped usage object (as sent by OpenAI-compatible upstreams).
    pub fn from_openai(v: &OpenAiUsageIn) -> Usage {
        let details = v.prompt_tokens_details.clone().unwrap_or_default();
        let reasoning = v
            .completion_tokens_details
            .as_ref()
            .map_or(0, |d| d.reasoning_tokens);
        Usage {
            input: v.prompt_tokens.saturating_sub(
                details
                    .cached_tokens
                    .saturating_add(details.cache_write_tokens)
                    .saturating_add(details.audio_tokens),
            ),
            audio_input: details.audio_tokens,
            cache_read: details.cached_tokens,
            cache_write: details.cache_write_tokens,
            output: v.completion_tokens,
            reasoning,
            ..Usage::default()
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct OpenAiUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub prompt_tokens_details: PromptDetails,
    pub completion_tokens_details: CompletionDetails,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PromptDetails {
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CompletionDetails {
    pub reasoning_tokens: u64,
}

/// Lenient reader for upstream usage objects; absent fields are zero.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct OpenAiUsageIn {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub prompt_tokens_details: Option<PromptDetailsIn>,
    pub completion_tokens_details: Option<CompletionDetailsIn>,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct PromptDetailsIn {
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
    pub audio_tokens: u64,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct CompletionDetailsIn {
    pub reasoning_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_round_trip_keeps_buckets_disjoint() {
        // The OpenRouter fixture: 3329 prompt = 3 uncached + 115 written + 3211 read.
        let v: OpenAiUsageIn = serde_json::from_str(
            r#"{"prompt_tokens":3329,"completion_tokens":53,"total_tokens":3382,
                "prompt_tokens_details":{"cached_tokens":3211,"cache_write_tokens":115},
                "completion_tokens_details":{"reasoning_tokens":7}}"#,
        )
        .unwrap();
        let u = Usage::from_openai(&v);
        assert_eq!(
            u,
            Usage {
                input: 3,
                cache_read: 3211,
                cache_write: 115,
                output: 53,
                reasoning: 7,
                ..Usage::default()
            }
        );
        let out = u.to_openai();
        assert_eq!((out.prompt_tokens, out.total_tokens), (3329, 3382));
        assert_eq!(out.prompt_tokens_details.cached_tokens, 3211);
    }

    #[test]
    fn openai_audio_tokens_are_their_own_bucket() {
        let v: OpenAiUsageIn = serde_json::from_str(
            r#"{"prompt_tokens":120,"completion_tokens":5,
                "prompt_tokens_details":{"cached_tokens":20,"audio_tokens":70}}"#,
        )
        .unwrap();
        let u = Usage::from_openai(&v);
        assert_eq!((u.input, u.audio_input, u.cache_read), (30, 70, 20));
        assert_eq!(u.to_openai().prompt_tokens, 120);
    }
}
