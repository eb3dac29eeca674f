//! The chat-model name of a tool inside a `namespace` (Codex groups its MCP servers' tools so:
//! `{type: "namespace", name: "mcp__github__", tools: [{type: "function", name: "create_issue"}]}`),
//! and back. Chat tools have no namespaces, and the model's call must come back to the client
//! as a `function_call` item with `namespace` and `name` apart, exactly as declared (Codex looks
//! its handler up by the pair). Nothing is stored between the request and the answer, so the
//! flat name itself carries both halves:
//!
//! `flat = namespace + "--" + name`, split back at the **first** `--`.
//!
//! - Both halves non-empty; the namespace holds no `--` and does not end with `-` (else the
//!   first `--` would not be the one inserted): [`flat_name`] is `None` otherwise, and the
//!   request is refused. The name may hold anything.
//! - A plain (un-namespaced) tool name holding `--` would read back as namespaced: the request
//!   refuses it too ([`is_plain`]).
//! - `--` rather than Codex's own `__` join: namespaces themselves use `__`
//!   (`mcp__codex_apps__gmail`), and plain tool names do too (`mcp__server__tool` from older
//!   clients), so `__` cannot be split back. Hyphens are valid in every upstream's tool names
//!   (Anthropic `^[a-zA-Z0-9_-]{1,128}$`, Gemini letters, digits, `_ . : -`, at most 64, a
//!   letter or `_` first); what the halves themselves hold is the upstream's to accept, and a
//!   flat name over 64 characters is Gemini's to refuse.

/// Between a namespace and its tool's name.
pub const SEPARATOR: &str = "--";

/// The chat name of tool `name` in `namespace`; `None` when [`split_name`] could not give the
/// pair back.
pub fn flat_name(namespace: &str, name: &str) -> Option<String> {
    if namespace.is_empty() || name.is_empty() {
        return None;
    }
    if namespace.contains(SEPARATOR) || namespace.ends_with('-') {
        return None;
    }
    Some(format!("{namespace}{SEPARATOR}{name}"))
}

/// `(namespace, name)` of a chat name [`flat_name`] wrote; `None` for a plain name.
pub fn split_name(flat: &str) -> Option<(&str, &str)> {
    let (namespace, name) = flat.split_once(SEPARATOR)?;
    (!namespace.is_empty() && !name.is_empty()).then_some((namespace, name))
}

/// A plain tool name [`split_name`] leaves alone.
pub fn is_plain(name: &str) -> bool {
    split_name(name).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_names_round_trip_and_plain_names_stay_plain() {
        for (namespace, name, flat) in [
            ("crm", "lookup", "crm--lookup"),
            (
                "mcp__github__",
                "create_issue",
                "mcp__github__--create_issue",
            ),
            (
                "mcp__codex_apps__gmail",
                "gmail_get_recent_emails",
                "mcp__codex_apps__gmail--gmail_get_recent_emails",
            ),
            ("a", "-b", "a---b"),
            ("a", "b--c", "a--b--c"),
            ("ns_", "__x", "ns_--__x"),
        ] {
            assert_eq!(flat_name(namespace, name).as_deref(), Some(flat));
            assert_eq!(split_name(flat), Some((namespace, name)), "{flat}");
            assert!(!is_plain(flat));
        }
        for plain in [
            "exec_command",
            "mcp__server__tool",
            "a-b",
            "-x",
            "x-",
            "--x",
            "x--",
        ] {
            assert_eq!(split_name(plain), None, "{plain}");
            assert!(is_plain(plain));
        }
        for (namespace, name) in [("a--b", "c"), ("a-", "b"), ("", "b"), ("a", "")] {
            assert_eq!(flat_name(namespace, name), None, "{namespace:?} {name:?}");
        }
    }
}
