//! The Anthropic Messages door (being built).
