//! A key's model allowlist: the model id patterns it may call, compiled once when the key is
//! loaded into the key cache so that admission's check is a few string comparisons, with no
//! parsing or allocation per request.
//!
//! A pattern is a model name in which `*` stands for any run of characters (none included):
//! `google/gemini-*`, `*-mini`, `anthropic/claude-haiku-4-5`. Names are compared exactly (case
//! included), as the catalog looks them up. A pattern admits a model when it matches the name
//! the client sent, the catalog id that name resolves to, or another of the model's aliases:
//! a list written in catalog ids keeps working for clients that call a model by its upstream
//! name, and a model admitted is callable by all its names and listed by `/v1/models` under
//! its id. An empty list admits every model.

use crate::catalog::Model;

/// The most patterns one key may carry.
pub const MAX_PATTERNS: usize = 64;
/// The longest pattern, in characters.
pub const MAX_PATTERN_CHARS: usize = 200;

/// One compiled pattern: the literal runs between its `*`s.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    /// The literal runs; one run (no `*`) is an exact name.
    parts: Vec<Box<str>>,
}

impl Pattern {
    fn compile(text: &str) -> Self {
        Pattern {
            parts: text.split('*').map(Box::from).collect(),
        }
    }

    /// Whether `name` matches: the first run is its prefix, the last its suffix (neither
    /// overlapping the other), the runs between appear in order in what is left.
    fn matches(&self, name: &str) -> bool {
        let (first, rest) = match self.parts.split_first() {
            Some((first, rest)) => (first.as_ref(), rest),
            None => return name.is_empty(),
        };
        let Some((last, middle)) = rest.split_last() else {
            return name == first;
        };
        if name.len() < first.len().saturating_add(last.len())
            || !name.starts_with(first)
            || !name.ends_with(last.as_ref())
        {
            return false;
        }
        let mut left = &name[first.len()..name.len() - last.len()];
        for part in middle {
            match left.find(part.as_ref()) {
                Some(at) => left = &left[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// A key's compiled allowlist; empty: every model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelAllowlist {
    patterns: Vec<Pattern>,
}

impl ModelAllowlist {
    /// Compiles stored patterns (checked when they were set: see [`checked_patterns`]).
    pub fn compile(patterns: &[String]) -> Self {
        ModelAllowlist {
            patterns: patterns.iter().map(|p| Pattern::compile(p)).collect(),
        }
    }

    /// Whether every model is allowed (no list).
    pub fn is_unrestricted(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether a pattern matches one of `names`.
    fn matches_any<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> bool {
        names
            .into_iter()
            .any(|name| self.patterns.iter().any(|p| p.matches(name)))
    }

    /// Whether the key may call `model`, which the client named `requested`.
    pub fn allows(&self, requested: &str, model: &Model) -> bool {
        self.is_unrestricted() || self.matches_any(model_names(requested, model))
    }

    /// Whether the key may call `model` by some name: what `/v1/models` lists.
    pub fn lists(&self, model: &Model) -> bool {
        self.allows(&model.id, model)
    }
}

fn model_names<'a>(requested: &'a str, model: &'a Model) -> impl Iterator<Item = &'a str> {
    [requested, model.id.as_ref()]
        .into_iter()
        .chain(model.aliases.iter().map(String::as_str))
}

/// Patterns as a key stores them: trimmed, duplicates dropped (the first kept), each 1 to
/// [`MAX_PATTERN_CHARS`] characters without whitespace or control characters, at most
/// [`MAX_PATTERNS`] of them. The error names the offending pattern.
pub fn checked_patterns(patterns: &[String]) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::with_capacity(patterns.len());
    for p in patterns.iter().map(|p| p.trim()) {
        if p.is_empty() || p.chars().count() > MAX_PATTERN_CHARS {
            return Err(format!(
                "allowed_models: each pattern is 1 to {MAX_PATTERN_CHARS} characters (got {p:?})"
            ));
        }
        if p.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "allowed_models: {p:?}: a pattern holds no whitespace or control characters"
            ));
        }
        if !out.iter().any(|seen| seen == p) {
            out.push(p.to_owned());
        }
    }
    if out.len() > MAX_PATTERNS {
        return Err(format!(
            "allowed_models: at most {MAX_PATTERNS} patterns (got {})",
            out.len()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(p: &str) -> Pattern {
        Pattern::compile(p)
    }

    #[test]
    fn a_pattern_without_a_star_is_the_exact_name() {
        let p = pattern("google/gemini-2.5-flash");
        assert!(p.matches("google/gemini-2.5-flash"));
        for other in [
            "google/gemini-2.5-flash-lite",
            "xgoogle/gemini-2.5-flash",
            "Google/gemini-2.5-flash",
            "",
        ] {
            assert!(!p.matches(other), "{other}");
        }
    }

    #[test]
    fn a_star_is_any_run_of_characters_none_included() {
        let cases: &[(&str, &str, bool)] = &[
            ("google/gemini-*", "google/gemini-2.5-flash", true),
            ("google/gemini-*", "google/gemini-", true),
            ("google/gemini-*", "google/gemma-3", false),
            ("google/gemini-*", "anthropic/google/gemini-x", false),
            ("*-mini", "openai/gpt-4o-mini", true),
            ("*-mini", "openai/gpt-4o-mini-2", false),
            ("*", "", true),
            ("*", "anything/at-all", true),
            ("**", "x", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "a-b-c", true),
            ("a*b*c", "acb", false),
            ("a*b*c", "a-c-b", false),
            // Prefix and suffix may not share characters.
            ("ab*ba", "aba", false),
            ("ab*ba", "abba", true),
            ("*flash*", "google/gemini-2.5-flash-lite", true),
            ("*flash*", "google/gemini-2.5-pro", false),
            ("a*a*a", "aaa", true),
            ("a*a*a", "aa", false),
            // Multi-byte characters are compared as text.
            ("é*ü", "éaü", true),
            ("é*ü", "éü", true),
            ("é*ü", "é", false),
        ];
        for &(p, name, want) in cases {
            assert_eq!(pattern(p).matches(name), want, "{p} ~ {name}");
        }
    }

    fn catalog() -> crate::catalog::Snapshot {
        let rows: crate::store::CatalogRows = serde_yaml::from_str(
            "models:\n\
             - {id: anthropic/claude-sonnet-4-5, provider: anthropic, family: openai, \
                kind: chat, upstream_model: s, input_price: 3, output_price: 15, \
                aliases: [claude-sonnet-4-5, claude-sonnet-4-5-20250929]}\n\
             - {id: google/gemini-2.5-flash, provider: google, family: openai, kind: chat, \
                upstream_model: f, input_price: 1, output_price: 2}\n\
             routes: []",
        )
        .unwrap();
        let providers = crate::config::ProvidersConf::default();
        crate::catalog::Snapshot::build(&rows, &providers, &Default::default())
    }

    #[test]
    fn a_list_admits_a_model_by_any_of_its_names() {
        let catalog = catalog();
        let sonnet = catalog.model("claude-sonnet-4-5").unwrap();
        let flash = catalog.model("google/gemini-2.5-flash").unwrap();
        let by_id = ModelAllowlist::compile(&["anthropic/claude-sonnet-*".into()]);
        assert!(
            by_id.allows("claude-sonnet-4-5-20250929", sonnet),
            "alias sent, id listed"
        );
        assert!(by_id.allows("anthropic/claude-sonnet-4-5", sonnet));
        assert!(by_id.lists(sonnet));
        assert!(!by_id.allows("google/gemini-2.5-flash", flash));
        assert!(!by_id.lists(flash));

        let by_alias = ModelAllowlist::compile(&["claude-sonnet-4-5-2025*".into()]);
        assert!(
            by_alias.allows("anthropic/claude-sonnet-4-5", sonnet),
            "id sent, alias listed"
        );
        assert!(by_alias.lists(sonnet));
        assert!(!by_alias.lists(flash));

        let open = ModelAllowlist::default();
        assert!(open.is_unrestricted());
        assert!(open.allows("google/gemini-2.5-flash", flash) && open.lists(sonnet));
        assert!(!by_id.is_unrestricted());
    }

    #[test]
    fn patterns_are_checked_trimmed_and_deduplicated() {
        let got = checked_patterns(&[" google/* ".into(), "google/*".into(), "a".into()]);
        assert_eq!(got, Ok(vec!["google/*".to_owned(), "a".to_owned()]));
        assert_eq!(checked_patterns(&[]), Ok(vec![]));
        for bad in [
            "",
            "  ",
            "a b",
            "a\u{7}",
            &"x".repeat(MAX_PATTERN_CHARS + 1),
        ] {
            let e = checked_patterns(&[bad.to_owned()]).unwrap_err();
            assert!(e.starts_with("allowed_models"), "{bad:?}: {e}");
        }
        assert!(checked_patterns(&[&"x".repeat(MAX_PATTERN_CHARS)].map(|s| s.clone())).is_ok());
        let many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("m{i}")).collect();
        assert!(checked_patterns(&many).unwrap_err().contains("at most 64"));
        assert!(checked_patterns(&many[..MAX_PATTERNS]).is_ok());
    }
}
