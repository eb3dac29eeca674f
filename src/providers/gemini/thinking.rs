//! OpenAI / OpenRouter reasoning controls → Gemini `thinkingConfig`, within the model's profile.
//!
//! Inputs: `reasoning: {effort, max_tokens, exclude, enabled}` (OpenRouter), top-level
//! `reasoning_effort` (OpenAI), deprecated `include_reasoning`. Why clamping lives here:
//! Google rejects out-of-range budgets and unsupported levels with a 400 instead of adjusting
//! them (`docs/wire.md#gemini-thinking`; fixtures `gemini-error-400-thinking-*.json`), so the
//! gateway decides:
//!
//! | profile kind | from `max_tokens` | from `effort` | `enabled: true` |
//! |---|---|---|---|
//! | budget `[min, max]` | clamped; `0` stays only if `can_disable`, else `min`; `-1` dynamic | none 0, minimal 512, low 1024, medium 8192, high 24576, xhigh 32768, then clamped | `-1` |
//! | level (lowest first) | mapped to an effort by the same table, then as effort | nearest allowed level, rounding up; `none` → lowest | model default |
//! | effort (Anthropic's adaptive kind) | dropped: no Gemini knob | dropped | dropped |
//!
//! `includeThoughts` is true unless the client excluded reasoning (`reasoning.exclude` or
//! `include_reasoning: false`). No reasoning field at all → no `thinkingConfig`; a budget and a
//! level are never sent together (400 `You can only set only one of thinking budget and
//! thinking level.`).

use serde::Serialize;

use crate::api::{GatewayError, RawRequest};
use crate::catalog::{Profile, Thinking};
use crate::providers::common::{reasoning_ask, Ask, Effort};

#[derive(Serialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) struct ThinkingConfig {
    include_thoughts: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_budget: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_level: Option<String>,
}

pub(super) fn thinking_config(
    req: &RawRequest<'_>,
    p: &Profile,
) -> Result<Option<ThinkingConfig>, GatewayError> {
    // Adaptive effort is Anthropic's control: Gemini has no such knob (its levels are
    // `Level`), so a profile of that kind drops reasoning here, as `None` does.
    let no_controls = matches!(p.thinking, Thinking::None | Thinking::Effort { .. });
    if !p.forwards("reasoning") || no_controls {
        return Ok(None);
    }
    let Some(asked) = reasoning_ask(req)? else {
        return Ok(None);
    };
    let (ask, exclude) = (asked.ask, asked.exclude);
    let mut config = ThinkingConfig {
        include_thoughts: !exclude,
        thinking_budget: None,
        thinking_level: None,
    };
    match &p.thinking {
        Thinking::None | Thinking::Effort { .. } => return Ok(None),
        Thinking::Budget {
            min,
            max,
            can_disable,
        } => {
            config.thinking_budget = budget(ask).map(|b| clamp_budget(b, *min, *max, *can_disable));
        }
        Thinking::Level { levels } => {
            config.thinking_level = level_effort(ask)
                .and_then(|e| e.nearest_level(levels))
                .map(str::to_owned);
        }
    }
    Ok(Some(config))
}

fn budget(ask: Ask) -> Option<i64> {
    match ask {
        Ask::Default => None,
        Ask::Dynamic => Some(-1),
        Ask::Budget(n) => Some(n),
        Ask::Effort(e) => Some(e.budget()),
    }
}

/// Into the model's accepted range: Google rejects out-of-range budgets instead of clamping.
fn clamp_budget(budget: i64, min: u32, max: u32, can_disable: bool) -> i64 {
    match budget {
        -1 => -1,
        0 if can_disable => 0,
        b => b.max(i64::from(min)).min(i64::from(max)),
    }
}

fn level_effort(ask: Ask) -> Option<Effort> {
    match ask {
        Ask::Default | Ask::Dynamic => None,
        Ask::Budget(n) => Some(Effort::of_budget(n)),
        Ask::Effort(e) => Some(e),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use serde_json::{json, Value};

    use crate::catalog::Profile;

    fn thinking(extra: Value, profile: Profile) -> Value {
        body(with(extra), profile)["generationConfig"]["thinkingConfig"].clone()
    }

    #[test]
    fn thinking_budget_is_clamped_per_profile() {
        let flash = profile_25_flash;
        let pro = profile_25_pro;
        let cases = [
            (
                json!({"reasoning": {"max_tokens": 2000}}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 2000}),
            ),
            (
                json!({"reasoning": {"max_tokens": 99999}}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 24576}),
            ),
            (
                json!({"reasoning": {"max_tokens": 0}}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 0}),
            ),
            (
                json!({"reasoning": {"max_tokens": 0}}),
                pro(),
                json!({"includeThoughts": true, "thinkingBudget": 128}),
            ),
            (
                json!({"reasoning": {"max_tokens": 50}}),
                pro(),
                json!({"includeThoughts": true, "thinkingBudget": 128}),
            ),
            (
                json!({"reasoning": {"max_tokens": 99999}}),
                pro(),
                json!({"includeThoughts": true, "thinkingBudget": 32768}),
            ),
            (
                json!({"reasoning": {"max_tokens": -1}}),
                pro(),
                json!({"includeThoughts": true, "thinkingBudget": -1}),
            ),
            (
                json!({"reasoning": {"effort": "none"}}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 0}),
            ),
            (
                json!({"reasoning_effort": "none"}),
                pro(),
                json!({"includeThoughts": true, "thinkingBudget": 128}),
            ),
            (
                json!({"reasoning_effort": "minimal"}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 512}),
            ),
            (
                json!({"reasoning_effort": "low"}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 1024}),
            ),
            (
                json!({"reasoning_effort": "medium"}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 8192}),
            ),
            (
                json!({"reasoning_effort": "high"}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 24576}),
            ),
            (
                json!({"reasoning_effort": "xhigh"}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 24576}),
            ),
            (
                json!({"reasoning_effort": "xhigh"}),
                pro(),
                json!({"includeThoughts": true, "thinkingBudget": 32768}),
            ),
            (
                json!({"reasoning": {"effort": "low", "max_tokens": 3000}}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 3000}),
            ),
            (
                json!({"reasoning": {"effort": "high"}, "reasoning_effort": "low"}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 24576}),
            ),
            (
                json!({"reasoning": {"enabled": true}}),
                pro(),
                json!({"includeThoughts": true, "thinkingBudget": -1}),
            ),
            (
                json!({"reasoning": {"enabled": false}}),
                flash(),
                json!({"includeThoughts": true, "thinkingBudget": 0}),
            ),
            (
                json!({"reasoning": {"exclude": true, "effort": "low"}}),
                flash(),
                json!({"includeThoughts": false, "thinkingBudget": 1024}),
            ),
            (
                json!({"include_reasoning": false, "reasoning_effort": "low"}),
                flash(),
                json!({"includeThoughts": false, "thinkingBudget": 1024}),
            ),
            (
                json!({"include_reasoning": true}),
                flash(),
                json!({"includeThoughts": true}),
            ),
            (
                json!({"reasoning": {}}),
                flash(),
                json!({"includeThoughts": true}),
            ),
            (json!({}), flash(), Value::Null),
            (
                json!({"reasoning": null, "reasoning_effort": null}),
                flash(),
                Value::Null,
            ),
            (
                json!({"reasoning_effort": "high"}),
                profile_20(),
                Value::Null,
            ),
        ];
        for (extra, profile, want) in cases {
            assert_eq!(thinking(extra.clone(), profile), want, "{extra}");
        }
    }

    #[test]
    fn thinking_level_maps_to_the_nearest_allowed_level() {
        let pro3 = || profile_levels(&["low", "high"]);
        let flash3 = || profile_levels(&["minimal", "low", "medium", "high"]);
        let level = |extra: Value, p: Profile| thinking(extra, p)["thinkingLevel"].clone();
        for (effort, on_pro, on_flash) in [
            ("none", "low", "minimal"),
            ("minimal", "low", "minimal"),
            ("low", "low", "low"),
            ("medium", "high", "medium"),
            ("high", "high", "high"),
            ("xhigh", "high", "high"),
        ] {
            assert_eq!(
                level(json!({"reasoning_effort": effort}), pro3()),
                on_pro,
                "{effort} on [low, high]"
            );
            assert_eq!(
                level(json!({"reasoning": {"effort": effort}}), flash3()),
                on_flash,
                "{effort} on 3 flash"
            );
        }
        for (tokens, on_pro, on_flash) in [
            (0, "low", "minimal"),
            (300, "low", "minimal"),
            (1000, "low", "low"),
            (5000, "high", "medium"),
            (30000, "high", "high"),
        ] {
            assert_eq!(
                level(json!({"reasoning": {"max_tokens": tokens}}), pro3()),
                on_pro,
                "{tokens}"
            );
            assert_eq!(
                level(json!({"reasoning": {"max_tokens": tokens}}), flash3()),
                on_flash,
                "{tokens}"
            );
        }
        let t = thinking(json!({"reasoning": {"enabled": true}}), pro3());
        assert_eq!(
            t,
            json!({"includeThoughts": true}),
            "dynamic is the default level; never a budget too"
        );
        let t = thinking(
            json!({"reasoning": {"effort": "low", "exclude": true}}),
            pro3(),
        );
        assert_eq!(t, json!({"includeThoughts": false, "thinkingLevel": "low"}));
    }

    #[test]
    fn an_effort_profile_sends_no_thinking_config() {
        // Anthropic's adaptive kind; nothing in it maps onto Gemini's knobs.
        let mut p = profile_levels(&["low", "high"]);
        p.thinking = crate::catalog::Thinking::Effort {
            levels: vec!["low".into(), "high".into()],
            can_disable: true,
        };
        for extra in [
            json!({"reasoning_effort": "high"}),
            json!({"reasoning": {"max_tokens": 0}}),
        ] {
            assert_eq!(thinking(extra.clone(), p.clone()), Value::Null, "{extra}");
        }
    }

    #[test]
    fn thinking_inputs_are_type_checked() {
        for (extra, want) in [
            (
                json!({"reasoning_effort": "max"}),
                "invalid value for reasoning_effort: \"max\"",
            ),
            (
                json!({"reasoning": {"effort": "turbo"}}),
                "invalid value for reasoning.effort: \"turbo\"",
            ),
            (
                json!({"reasoning": {"max_tokens": -2}}),
                "invalid value for reasoning.max_tokens",
            ),
            (json!({"reasoning": "high"}), "invalid value for reasoning"),
            (
                json!({"include_reasoning": "yes"}),
                "invalid value for include_reasoning",
            ),
        ] {
            let e = err(with(extra.clone()), profile_25_flash());
            assert!(e.starts_with(want), "{extra}: {e}");
        }
        body(with(json!({"reasoning_effort": "max"})), profile_20());
    }
}
