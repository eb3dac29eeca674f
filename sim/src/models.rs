//! The upstream model registry: which model ids each surface serves, as the real services
//! list them as of 2026-12-07. Every generate, count, embed and predict call asks it whether
//! its id exists on its surface, so a catalog typo or a retired model gets the provider's real
//! 404 here as it would in production; the listing endpoints (`listing.rs`) show the same
//! table. `POST /_sim/models/withdraw` takes a model off one surface (listing and calls),
//! `POST /_sim/reset` brings the table back.
//!
//! Surfaces and ids:
//! - Gemini Developer API: the chat ids of [`GOOGLE`], embeddings `gemini-embedding-001`,
//!   `gemini-embedding-2`. Retired there ([`RETIRED_GOOGLE`]): unknown. Gemini 2.5 Pro and
//!   Flash shut down there on 2026-12-01: Google answers them with a successor model, which
//!   the simulator answers 404 instead, so that a route still calling them fails loudly.
//! - Vertex, publisher `google` (regional and global alike): the same chat ids, embeddings
//!   `gemini-embedding-001`, `text-embedding-005`, `text-multilingual-embedding-002`.
//! - Anthropic API: every [`CLAUDE`] model but Sonnet 4.5 (retired there on 2026-11-30), by
//!   its alias (`claude-haiku-4-5`) or, for the dated 4.5 generation, its dated id
//!   (`claude-haiku-4-5-20251001`); an alias answers as the dated id, as the real API does.
//!   Retired ([`RETIRED_CLAUDE`], `claude-3-*`): unknown.
//! - Vertex, publisher `anthropic`: every [`CLAUDE`] model; the 5.x and 4.6+ ids have no `@date`
//!   (`claude-opus-5-5`), the 4.5 generation requires it (`claude-sonnet-4-5@20250929`): an
//!   undated 4.5 id is unknown there.
//!
//! Token limits: Gemini chat 1,048,576 in / 65,536 out; embeddings 2,048 in (1 out, as
//! Google lists them); Claude 5.x 1,000,000 / 128,000, 4.5 200,000 / 64,000. The 4.6–4.8
//! limits (1,000,000 in; Opus 128,000 out, Sonnet 64,000) and the Claude `created_at` dates
//! past the 4.5 generation are this table's assumptions, not captured values.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::faults::Surface;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Embedding,
}

/// Where a Google model is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    Both,
    DevOnly,
    VertexOnly,
}

/// A Google (Gemini Developer API / Vertex `publishers/google`) model.
#[derive(Debug)]
pub struct Google {
    pub id: &'static str,
    pub display: &'static str,
    pub kind: Kind,
    pub on: On,
}

impl Google {
    /// Shut down on the Gemini API, still served on Vertex.
    const fn vertex_only(mut self) -> Google {
        self.on = On::VertexOnly;
        self
    }
    pub fn input_limit(&self) -> u32 {
        match self.kind {
            Kind::Chat => 1_048_576,
            Kind::Embedding => 2_048,
        }
    }
    pub fn output_limit(&self) -> u32 {
        match self.kind {
            Kind::Chat => 65_536,
            Kind::Embedding => 1,
        }
    }
    fn served_on(&self, surface: Surface) -> bool {
        matches!(
            (surface, self.on),
            (Surface::Gemini, On::Both | On::DevOnly)
                | (Surface::Vertex, On::Both | On::VertexOnly)
        )
    }
}

/// A Claude model (Anthropic API and Vertex `publishers/anthropic`).
#[derive(Debug)]
pub struct Claude {
    /// The undated id (`claude-sonnet-4-5`).
    pub alias: &'static str,
    /// `YYYYMMDD` of the dated 4.5 generation.
    pub date: Option<&'static str>,
    pub display: &'static str,
    /// The Anthropic listing's `created_at` (RFC 3339).
    pub created: &'static str,
    pub input_limit: u32,
    pub output_limit: u32,
    /// `Both`, or `VertexOnly` once Anthropic's API has retired it.
    pub on: On,
}

impl Claude {
    /// The id the Anthropic API lists and answers with (`claude-sonnet-4-5-20250929`).
    pub fn api_id(&self) -> String {
        match self.date {
            Some(d) => format!("{}-{d}", self.alias),
            None => self.alias.to_owned(),
        }
    }
    /// The only id Vertex accepts (`claude-sonnet-4-5@20250929`, `claude-opus-5-5`).
    pub fn vertex_id(&self) -> String {
        match self.date {
            Some(d) => format!("{}@{d}", self.alias),
            None => self.alias.to_owned(),
        }
    }
    fn served_on(&self, surface: Surface) -> bool {
        !(surface == Surface::Anthropic && matches!(self.on, On::VertexOnly))
    }
    /// Retired on Anthropic's API, still served on Vertex.
    const fn vertex_only(mut self) -> Claude {
        self.on = On::VertexOnly;
        self
    }
    /// Whether `id` names this model on `surface`.
    fn answers_to(&self, surface: Surface, id: &str) -> bool {
        match surface {
            _ if !self.served_on(surface) => false,
            Surface::Anthropic => id == self.alias || id == self.api_id(),
            Surface::AnthropicVertex => id == self.vertex_id(),
            _ => false,
        }
    }
}

const fn chat(id: &'static str, display: &'static str) -> Google {
    Google {
        id,
        display,
        kind: Kind::Chat,
        on: On::Both,
    }
}

const fn embedding(id: &'static str, display: &'static str, on: On) -> Google {
    Google {
        id,
        display,
        kind: Kind::Embedding,
        on,
    }
}

/// Google models, in listing order.
pub const GOOGLE: &[Google] = &[
    chat("gemini-3.8-flash", "Gemini 3.8 Flash"),
    chat("gemini-3.7-flash", "Gemini 3.7 Flash"),
    chat("gemini-3.6-flash", "Gemini 3.6 Flash"),
    chat("gemini-3.5-flash", "Gemini 3.5 Flash"),
    chat("gemini-3.5-flash-lite", "Gemini 3.5 Flash-Lite"),
    chat("gemini-3.1-flash-lite", "Gemini 3.1 Flash-Lite"),
    chat("gemini-3.1-pro-preview", "Gemini 3.1 Pro Preview"),
    chat("gemini-3-flash-preview", "Gemini 3 Flash Preview"),
    chat("gemini-2.5-pro", "Gemini 2.5 Pro").vertex_only(),
    chat("gemini-2.5-flash", "Gemini 2.5 Flash").vertex_only(),
    chat("gemini-2.5-flash-lite", "Gemini 2.5 Flash-Lite"),
    chat("gemini-4-argon", "Gemini 4 Argon"),
    chat("gemini-4-carbon", "Gemini 4 Carbon"),
    chat("gemini-4-hydrogen", "Gemini 4 Hydrogen"),
    chat("gemini-4-neon", "Gemini 4 Neon"),
    embedding("gemini-embedding-001", "Gemini Embedding 001", On::Both),
    embedding("gemini-embedding-2", "Gemini Embedding 2", On::DevOnly),
    embedding("text-embedding-005", "Text Embedding 005", On::VertexOnly),
    embedding(
        "text-multilingual-embedding-002",
        "Text Multilingual Embedding 002",
        On::VertexOnly,
    ),
];

/// Google ids retired on both surfaces (they 404 like any unknown id).
pub const RETIRED_GOOGLE: &[&str] = &[
    "gemini-2.0-flash",
    "gemini-2.0-flash-001",
    "gemini-2.0-flash-lite",
    "gemini-3-pro-preview",
    "gemini-3.1-flash-lite-preview",
    "text-embedding-004",
];

const fn claude(
    alias: &'static str,
    date: Option<&'static str>,
    display: &'static str,
    created: &'static str,
    limits: (u32, u32),
) -> Claude {
    Claude {
        alias,
        date,
        display,
        created,
        input_limit: limits.0,
        output_limit: limits.1,
        on: On::Both,
    }
}

const GEN5: (u32, u32) = (1_000_000, 128_000);
const OPUS_4X: (u32, u32) = (1_000_000, 128_000);
const SONNET_4X: (u32, u32) = (1_000_000, 64_000);
const GEN45: (u32, u32) = (200_000, 64_000);

/// Claude models, newest first (the Anthropic listing's order).
pub const CLAUDE: &[Claude] = &[
    claude(
        "claude-opus-5-5",
        None,
        "Claude Opus 5.5",
        "2026-09-22T00:00:00Z",
        GEN5,
    ),
    claude(
        "claude-sonnet-5-5",
        None,
        "Claude Sonnet 5.5",
        "2026-09-22T00:00:00Z",
        GEN5,
    ),
    claude(
        "claude-haiku-5-5",
        None,
        "Claude Haiku 5.5",
        "2026-09-22T00:00:00Z",
        GEN5,
    ),
    claude(
        "claude-fable-5-2",
        None,
        "Claude Fable 5.2",
        "2026-08-11T00:00:00Z",
        GEN5,
    ),
    claude(
        "claude-fable-5-1",
        None,
        "Claude Fable 5.1",
        "2026-06-30T00:00:00Z",
        GEN5,
    ),
    claude(
        "claude-opus-5",
        None,
        "Claude Opus 5",
        "2026-05-19T00:00:00Z",
        GEN5,
    ),
    claude(
        "claude-sonnet-5",
        None,
        "Claude Sonnet 5",
        "2026-05-19T00:00:00Z",
        GEN5,
    ),
    claude(
        "claude-fable-5",
        None,
        "Claude Fable 5",
        "2026-05-19T00:00:00Z",
        GEN5,
    ),
    claude(
        "claude-opus-4-8",
        None,
        "Claude Opus 4.8",
        "2026-04-14T00:00:00Z",
        OPUS_4X,
    ),
    claude(
        "claude-opus-4-7",
        None,
        "Claude Opus 4.7",
        "2026-03-17T00:00:00Z",
        OPUS_4X,
    ),
    claude(
        "claude-sonnet-4-6",
        None,
        "Claude Sonnet 4.6",
        "2026-02-17T00:00:00Z",
        SONNET_4X,
    ),
    claude(
        "claude-opus-4-6",
        None,
        "Claude Opus 4.6",
        "2026-02-05T00:00:00Z",
        OPUS_4X,
    ),
    claude(
        "claude-opus-4-5",
        Some("20251101"),
        "Claude Opus 4.5",
        "2025-11-24T00:00:00Z",
        GEN45,
    ),
    claude(
        "claude-haiku-4-5",
        Some("20251001"),
        "Claude Haiku 4.5",
        "2025-10-15T00:00:00Z",
        GEN45,
    ),
    claude(
        "claude-sonnet-4-5",
        Some("20250929"),
        "Claude Sonnet 4.5",
        "2025-09-29T00:00:00Z",
        GEN45,
    )
    .vertex_only(),
];

/// Claude ids retired on both surfaces (and every `claude-3-*`).
pub const RETIRED_CLAUDE: &[&str] = &["claude-opus-4-1", "claude-opus-4-0", "claude-sonnet-4-0"];

/// The table, less what the control API withdrew (per surface, by the model's first id).
#[derive(Default)]
pub struct Registry {
    withdrawn: Mutex<HashSet<(&'static str, &'static str)>>,
}

impl Registry {
    fn is_withdrawn(&self, surface: Surface, key: &'static str) -> bool {
        self.withdrawn
            .lock()
            .map(|w| w.contains(&(surface.name(), key)))
            .unwrap_or(false)
    }

    /// The Google model `id` of `kind` served on `surface` (Gemini or Vertex).
    pub fn google(&self, surface: Surface, id: &str, kind: Kind) -> Option<&'static Google> {
        GOOGLE
            .iter()
            .find(|m| m.id == id && m.kind == kind && m.served_on(surface))
            .filter(|m| !self.is_withdrawn(surface, m.id))
    }

    /// The Claude model `id` names on `surface` (Anthropic or AnthropicVertex).
    pub fn claude(&self, surface: Surface, id: &str) -> Option<&'static Claude> {
        CLAUDE
            .iter()
            .find(|m| m.answers_to(surface, id))
            .filter(|m| !self.is_withdrawn(surface, m.alias))
    }

    /// The Google models `surface` lists now, in table order.
    pub fn google_listing(&self, surface: Surface) -> Vec<&'static Google> {
        GOOGLE
            .iter()
            .filter(|m| m.served_on(surface) && !self.is_withdrawn(surface, m.id))
            .collect()
    }

    /// The Claude models `surface` lists now, newest first.
    pub fn claude_listing(&self, surface: Surface) -> Vec<&'static Claude> {
        CLAUDE
            .iter()
            .filter(|m| m.served_on(surface) && !self.is_withdrawn(surface, m.alias))
            .collect()
    }

    /// Takes `id` off `surface` (its listing and its calls); `Err` says why not.
    pub fn withdraw(&self, surface: &str, id: &str) -> Result<(), String> {
        let s = match surface {
            "gemini" => Surface::Gemini,
            "vertex" => Surface::Vertex,
            "anthropic" => Surface::Anthropic,
            "anthropic-vertex" => Surface::AnthropicVertex,
            _ => {
                return Err(format!(
                    "unknown surface {surface:?} (gemini, vertex, anthropic, anthropic-vertex)"
                ))
            }
        };
        let key = match s {
            Surface::Gemini | Surface::Vertex => GOOGLE
                .iter()
                .find(|m| m.id == id && m.served_on(s))
                .map(|m| m.id),
            _ => CLAUDE.iter().find(|m| m.answers_to(s, id)).map(|m| m.alias),
        };
        let key = key.ok_or_else(|| format!("{id:?} is not served on {surface}"))?;
        if let Ok(mut w) = self.withdrawn.lock() {
            w.insert((s.name(), key));
        }
        Ok(())
    }

    pub fn reset(&self) {
        if let Ok(mut w) = self.withdrawn.lock() {
            w.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn google_ids_per_surface() {
        let r = Registry::default();
        for s in [Surface::Gemini, Surface::Vertex] {
            assert!(r.google(s, "gemini-3.8-flash", Kind::Chat).is_some());
            assert!(r
                .google(s, "gemini-embedding-001", Kind::Embedding)
                .is_some());
            assert!(r.google(s, "gemini-embedding-001", Kind::Chat).is_none());
            for retired in RETIRED_GOOGLE {
                assert!(r.google(s, retired, Kind::Chat).is_none(), "{retired}");
                assert!(r.google(s, retired, Kind::Embedding).is_none(), "{retired}");
            }
        }
        assert!(r
            .google(Surface::Gemini, "gemini-embedding-2", Kind::Embedding)
            .is_some());
        assert!(r
            .google(Surface::Vertex, "gemini-embedding-2", Kind::Embedding)
            .is_none());
        assert!(r
            .google(Surface::Vertex, "text-embedding-005", Kind::Embedding)
            .is_some());
        assert!(r
            .google(Surface::Gemini, "text-embedding-005", Kind::Embedding)
            .is_none());
        // Shut down on the Gemini API on 2026-12-01, still on Vertex.
        for id in ["gemini-2.5-pro", "gemini-2.5-flash"] {
            assert!(r.google(Surface::Gemini, id, Kind::Chat).is_none(), "{id}");
            assert!(r.google(Surface::Vertex, id, Kind::Chat).is_some(), "{id}");
            assert!(r.google_listing(Surface::Gemini).iter().all(|m| m.id != id));
        }
        assert!(r
            .google(Surface::Gemini, "gemini-2.5-flash-lite", Kind::Chat)
            .is_some());
    }

    #[test]
    fn claude_ids_per_surface() {
        let r = Registry::default();
        let a = Surface::Anthropic;
        let v = Surface::AnthropicVertex;
        assert_eq!(
            r.claude(a, "claude-haiku-4-5").unwrap().api_id(),
            "claude-haiku-4-5-20251001"
        );
        assert!(r.claude(a, "claude-haiku-4-5-20251001").is_some());
        assert!(r.claude(a, "claude-haiku-4-5@20251001").is_none());
        assert!(r.claude(v, "claude-haiku-4-5@20251001").is_some());
        assert!(
            r.claude(v, "claude-haiku-4-5").is_none(),
            "Vertex needs the date on 4.5"
        );
        // Retired on Anthropic's API on 2026-11-30, still on Vertex.
        assert!(r.claude(a, "claude-sonnet-4-5").is_none());
        assert!(r.claude(a, "claude-sonnet-4-5-20250929").is_none());
        assert!(r.claude(v, "claude-sonnet-4-5@20250929").is_some());
        assert!(r
            .claude_listing(a)
            .iter()
            .all(|m| m.alias != "claude-sonnet-4-5"));
        assert!(r
            .claude_listing(v)
            .iter()
            .any(|m| m.alias == "claude-sonnet-4-5"));
        assert!(r.claude(v, "claude-opus-5-5").is_some());
        assert!(r.claude(v, "claude-opus-5-5@20260922").is_none());
        for retired in RETIRED_CLAUDE
            .iter()
            .chain(&["claude-3-5-haiku-20241022", "claude-x"])
        {
            assert!(r.claude(a, retired).is_none(), "{retired}");
            assert!(r.claude(v, retired).is_none(), "{retired}");
        }
    }

    #[test]
    fn withdraw_is_per_surface_until_reset() {
        let r = Registry::default();
        let listed = r.claude_listing(Surface::Anthropic).len();
        r.withdraw("anthropic", "claude-haiku-4-5").unwrap();
        assert!(r
            .claude(Surface::Anthropic, "claude-haiku-4-5-20251001")
            .is_none());
        assert!(r
            .claude(Surface::AnthropicVertex, "claude-haiku-4-5@20251001")
            .is_some());
        assert_eq!(r.claude_listing(Surface::Anthropic).len(), listed - 1);
        assert!(r.withdraw("anthropic", "claude-sonnet-4-5").is_err());
        r.withdraw("vertex", "gemini-2.5-flash-lite").unwrap();
        assert!(r
            .google(Surface::Vertex, "gemini-2.5-flash-lite", Kind::Chat)
            .is_none());
        assert!(r
            .google(Surface::Gemini, "gemini-2.5-flash-lite", Kind::Chat)
            .is_some());
        assert!(r.withdraw("vertex", "gemini-embedding-2").is_err());
        assert!(r.withdraw("openai", "gpt-4o").is_err());
        r.reset();
        assert!(r.claude(Surface::Anthropic, "claude-haiku-4-5").is_some());
        assert!(r
            .google(Surface::Vertex, "gemini-2.5-flash-lite", Kind::Chat)
            .is_some());
    }
}
