//! Parameter profiles: which OpenAI request fields a model forwards upstream and how its thinking
//! controls work. Data, not code: profiles are defined in the catalog file (`profiles:`), stored
//! in the database, and referenced by name from each model row, so an operator can change what a
//! model forwards without a release.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Profile {
    /// OpenAI request fields forwarded (translated) upstream. Any field not listed is parsed,
    /// accepted and dropped. Names are the OpenAI ones: `temperature`, `top_p`, `top_k`,
    /// `max_tokens` (also covers `max_completion_tokens`), `stop`, `n`, `seed`,
    /// `frequency_penalty`, `presence_penalty`, `response_format`, `tools` (with `tool_choice`),
    /// `reasoning` (with `reasoning_effort`, `include_reasoning`), `service_tier`.
    pub forward: Vec<String>,
    pub thinking: Thinking,
    /// Smallest prompt (in tokens, estimated) worth an explicit context cache; 0 disables
    /// explicit caching for the model (implicit caching still applies upstream).
    pub min_cache_tokens: u32,
    /// Embedding models: the output dimensionality asked of the upstream when the client names
    /// none, so that a catalog id keeps its width on a wider successor model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
}

impl Profile {
    pub fn forwards(&self, field: &str) -> bool {
        self.forward.iter().any(|f| f == field)
    }
}

/// How a model's thinking is controlled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Thinking {
    /// No thinking controls: reasoning requests are dropped.
    #[default]
    None,
    /// A token budget (Gemini 2.5 `thinkingBudget`, Anthropic `budget_tokens`), clamped into
    /// `[min, max]`; `0` turns thinking off only when `can_disable`.
    Budget {
        min: u32,
        max: u32,
        #[serde(default)]
        can_disable: bool,
    },
    /// Named levels (Gemini 3 `thinkingLevel`), lowest first; an effort maps to the nearest
    /// allowed level.
    Level { levels: Vec<String> },
    /// Adaptive thinking with an effort level (Anthropic `thinking: {type: adaptive}` plus
    /// `output_config.effort`; Claude Opus / Sonnet 4.6 and later, Haiku 5.5, Fable), levels
    /// lowest first (`[low, medium, high, xhigh, max]`). The model decides how much to think; no token
    /// budget is ever sent (adaptive-only models refuse one). Effort `none` sends
    /// `{type: disabled}` only when `can_disable`, else the lowest level.
    Effort {
        levels: Vec<String>,
        #[serde(default)]
        can_disable: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_read_from_yaml() {
        let p: Profile = serde_yaml::from_str(
            "forward: [temperature, seed]\nthinking: {kind: budget, min: 128, max: 32768}\nmin_cache_tokens: 2048\n",
        )
        .unwrap();
        assert!(p.forwards("seed") && !p.forwards("top_a"));
        assert_eq!(
            p.thinking,
            Thinking::Budget {
                min: 128,
                max: 32768,
                can_disable: false
            }
        );
        let l: Thinking = serde_yaml::from_str("{kind: level, levels: [low, high]}").unwrap();
        assert_eq!(
            l,
            Thinking::Level {
                levels: vec!["low".into(), "high".into()]
            }
        );
        let e: Thinking =
            serde_yaml::from_str("{kind: effort, levels: [low, medium, high, xhigh, max]}")
                .unwrap();
        assert_eq!(
            e,
            Thinking::Effort {
                levels: ["low", "medium", "high", "xhigh", "max"]
                    .map(String::from)
                    .to_vec(),
                can_disable: false
            }
        );
        let e: Thinking =
            serde_yaml::from_str("{kind: effort, levels: [low, high], can_disable: true}").unwrap();
        assert!(matches!(
            e,
            Thinking::Effort {
                can_disable: true,
                ..
            }
        ));
        // Stored as JSON in the database: the same shape round-trips.
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["kind"], "effort");
        assert_eq!(serde_json::from_value::<Thinking>(json).unwrap(), e);
        assert!(
            serde_yaml::from_str::<Thinking>("{kind: effort, levels: [low], budget: 1}").is_err(),
            "unknown fields of a kind are errors"
        );
        assert!(
            serde_yaml::from_str::<Profile>("forwards: []").is_err(),
            "typos are errors"
        );
    }
}
