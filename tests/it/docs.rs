//! The documentation checked against the code, so it cannot drift:
//!
//! - `docs/configuration.md` has one table row for every setting of the configuration types —
//!   tollgate's (found by walking `TollgateConf`'s serde fields, nested sections included) and
//!   Pingora's (the keys of its `ServerConf`) — and no row for a setting that does not exist;
//!   each row's default is the code's default;
//! - `docs/architecture.md` says why each dependency of the gateway and the simulator is there;
//! - every relative link in `README.md` and `docs/*.md` reaches a file, and its `#anchor` a
//!   heading of that file.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeOwned, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;
use tollgate::config::{Config, TollgateConf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The settings the configuration types declare
// ---------------------------------------------------------------------------------------------

/// What walking a type's `Deserialize` saw: the fields of each struct met (by dotted path), and
/// the paths read as an `Option`.
#[derive(Default)]
struct Trace {
    structs: BTreeMap<String, &'static [&'static str]>,
    optional: BTreeSet<String>,
}

/// A deserializer that produces no value: it records the fields a struct declares and then
/// hands the struct exactly one of them (the next step of `target`), so that nested structs are
/// found one path at a time. Any leaf value is an error, which ends that walk after the
/// recording is done (serde's derived visitors take fields in any order, and every walk starts
/// afresh).
struct Probe<'t> {
    trace: &'t RefCell<Trace>,
    at: String,
    target: &'t [&'static str],
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("a leaf"))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.trace.borrow_mut().optional.insert(self.at.clone());
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.trace
            .borrow_mut()
            .structs
            .insert(self.at.clone(), fields);
        visitor.visit_map(OneField {
            probe: Some(self),
            key_sent: false,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// The map a probed struct sees: the next field of the walk's target, or nothing.
struct OneField<'t> {
    probe: Option<Probe<'t>>,
    key_sent: bool,
}

impl<'de> MapAccess<'de> for OneField<'_> {
    type Error = de::value::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some(probe) = &self.probe else {
            return Ok(None);
        };
        match probe.target.first() {
            Some(field) if !self.key_sent => {
                self.key_sent = true;
                seed.deserialize((*field).into_deserializer()).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let probe = self
            .probe
            .take()
            .ok_or_else(|| de::Error::custom("no value"))?;
        let (field, rest) = probe
            .target
            .split_first()
            .ok_or_else(|| de::Error::custom("no field"))?;
        seed.deserialize(Probe {
            trace: probe.trace,
            at: format!("{}.{field}", probe.at),
            target: rest,
        })
    }
}

/// Every setting `T` declares under `prefix`: its leaves (dotted paths) and which of them are
/// `Option`s.
fn settings_of<T: DeserializeOwned>(prefix: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut leaves = BTreeSet::new();
    let mut optional = BTreeSet::new();
    let mut todo: Vec<Vec<&'static str>> = vec![Vec::new()];
    while let Some(target) = todo.pop() {
        let trace = RefCell::new(Trace::default());
        let _ = T::deserialize(Probe {
            trace: &trace,
            at: prefix.to_owned(),
            target: &target,
        });
        let trace = trace.into_inner();
        let at = std::iter::once(prefix)
            .chain(target.iter().copied())
            .collect::<Vec<_>>()
            .join(".");
        match trace.structs.get(&at) {
            Some(fields) => todo.extend(fields.iter().map(|f| {
                let mut next = target.clone();
                next.push(f);
                next
            })),
            None => {
                leaves.insert(at);
            }
        }
        optional.extend(trace.optional);
    }
    (leaves, optional)
}

/// Pingora's server settings, as its `ServerConf` writes them, with their defaults.
fn pingora_defaults() -> serde_yaml::Mapping {
    let conf = Config::parse("").unwrap();
    match serde_yaml::to_value(&conf.server).unwrap() {
        serde_yaml::Value::Mapping(m) => m,
        other => panic!("ServerConf is not a mapping: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The settings docs/configuration.md documents
// ---------------------------------------------------------------------------------------------

/// The cells of a Markdown table row (`| a | b |` → `["a", "b"]`).
fn cells(line: &str) -> Option<Vec<String>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split('|').map(|c| c.trim().to_owned()).collect())
}

/// The text inside the first pair of backticks of `cell`.
fn first_code(cell: &str) -> Option<&str> {
    let start = cell.find('`')? + 1;
    let len = cell[start..].find('`')?;
    Some(&cell[start..start + len])
}

/// `setting → default cell` of every row of the tables whose first column is headed `setting`.
fn documented_settings(markdown: &str) -> BTreeMap<String, String> {
    let mut rows = BTreeMap::new();
    let mut in_settings = false;
    for line in markdown.lines() {
        let Some(cells) = cells(line) else {
            in_settings = false;
            continue;
        };
        if cells.first().is_some_and(|c| c == "setting") {
            in_settings = true;
            continue;
        }
        if !in_settings || cells.iter().all(|c| c.chars().all(|ch| "-: ".contains(ch))) {
            continue;
        }
        let name = first_code(&cells[0]).unwrap_or(&cells[0]).to_owned();
        let default = cells.get(1).cloned().unwrap_or_default();
        assert!(
            rows.insert(name.clone(), default).is_none(),
            "docs/configuration.md documents {name} twice"
        );
    }
    rows
}

/// A default cell that says the setting is unset by default (an `Option` left empty).
fn says_unset(cell: &str) -> bool {
    cell.starts_with("unset")
}

/// The YAML value a default cell gives (its first code span), if it gives one.
fn documented_value(cell: &str) -> Option<serde_yaml::Value> {
    if says_unset(cell) {
        return None;
    }
    let code = first_code(cell)?;
    Some(serde_yaml::from_str(code).unwrap_or_else(|e| panic!("default `{code}`: {e}")))
}

/// A configuration file setting each `(dotted path under tollgate, value)`.
fn conf_with(values: &[(&str, serde_yaml::Value)]) -> String {
    let mut root = serde_yaml::Mapping::new();
    for (path, value) in values {
        let mut map = &mut root;
        let parts: Vec<&str> = path.split('.').collect();
        let (last, parents) = parts.split_last().unwrap();
        for p in parents {
            let entry = map
                .entry(serde_yaml::Value::from(*p))
                .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()));
            map = entry.as_mapping_mut().unwrap();
        }
        map.insert(serde_yaml::Value::from(*last), value.clone());
    }
    serde_yaml::to_string(&root).unwrap()
}

const CONFIGURATION: &str = "docs/configuration.md";

#[test]
fn the_configuration_reference_names_every_setting_and_no_other() {
    let (tollgate, _) = settings_of::<TollgateConf>("tollgate");
    assert!(
        tollgate.contains("tollgate.listen")
            && tollgate.contains("tollgate.upstream.breaker.cooldown")
            && tollgate.contains("tollgate.connections.public.per_address")
            && tollgate.contains("tollgate.providers.vertex.token_url"),
        "the walk missed nested settings: {tollgate:?}"
    );
    let pingora: BTreeSet<String> = pingora_defaults()
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    assert!(pingora.contains("threads"), "{pingora:?}");
    let in_code: BTreeSet<String> = tollgate.into_iter().chain(pingora).collect();
    let documented: BTreeSet<String> = documented_settings(&read(CONFIGURATION))
        .into_keys()
        .collect();
    let missing: Vec<_> = in_code.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&in_code).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{CONFIGURATION} is out of step with the configuration types:\n  \
         settings without a row: {missing:?}\n  rows for no setting: {unknown:?}"
    );
}

#[test]
fn the_configuration_reference_gives_the_code_defaults() {
    let rows = documented_settings(&read(CONFIGURATION));
    let (leaves, optional) = settings_of::<TollgateConf>("tollgate");
    let defaults = format!("{:?}", Config::parse("").unwrap().tollgate);
    // Settings are set in groups (a section's documented defaults together), since some
    // sections must be written whole (`connections.public` needs both its limits).
    let mut groups: BTreeMap<String, Vec<(String, serde_yaml::Value)>> = BTreeMap::new();
    for leaf in &leaves {
        let Some(cell) = rows.get(leaf) else { continue };
        // Inside an optional section (`listeners.public.tls`) a default holds only once the
        // section is written, with its required settings: nothing to compare with the code's.
        if optional.iter().any(|o| leaf.starts_with(&format!("{o}."))) {
            continue;
        }
        let value = documented_value(cell);
        if optional.contains(leaf) {
            // An `Option`: unset by default; a documented value must at least be accepted.
            if let Some(v) = value {
                let text = conf_with(&[(leaf.as_str(), v)]);
                if let Err(e) = Config::parse(&text) {
                    panic!("{leaf}: the documented default is refused: {e}");
                }
            }
            continue;
        }
        let value = value.unwrap_or_else(|| {
            panic!("{leaf}: the default cell ({cell:?}) gives no `value`, and the setting is not optional")
        });
        let (parent, _) = leaf.rsplit_once('.').unwrap();
        groups
            .entry(parent.to_owned())
            .or_default()
            .push((leaf.clone(), value));
    }
    assert!(
        groups.contains_key("tollgate.upstream.breaker"),
        "{groups:?}"
    );
    for (group, values) in &groups {
        let pairs: Vec<(&str, serde_yaml::Value)> = values
            .iter()
            .map(|(path, value)| (path.as_str(), value.clone()))
            .collect();
        let text = conf_with(&pairs);
        let parsed = Config::parse(&text)
            .unwrap_or_else(|e| panic!("{group}: the documented defaults are refused: {e}"));
        assert_eq!(
            format!("{:?}", parsed.tollgate),
            defaults,
            "{group}: the documented defaults ({values:?}) are not the code's"
        );
    }
    for (key, value) in pingora_defaults() {
        let key = key.as_str().unwrap();
        let cell = &rows[key];
        let documented = documented_value(cell).unwrap_or(serde_yaml::Value::Null);
        assert_eq!(
            documented, value,
            "{key}: the documented default ({cell:?}) is not Pingora's"
        );
    }
}

#[test]
fn the_settings_walk_sees_nested_and_optional_fields() {
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        b: u32,
        c: Option<String>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        a: Inner,
        d: bool,
        #[serde(default, with = "humantime_like")]
        e: Option<u64>,
    }
    mod humantime_like {
        pub fn deserialize<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Option<u64>, D::Error> {
            serde::Deserialize::deserialize(d)
        }
    }
    let (leaves, optional) = settings_of::<Outer>("x");
    assert_eq!(
        leaves.iter().map(String::as_str).collect::<Vec<_>>(),
        ["x.a.b", "x.a.c", "x.d", "x.e"]
    );
    assert!(optional.contains("x.a.c") && optional.contains("x.e"));
    assert!(!optional.contains("x.d"));
}

// ---------------------------------------------------------------------------------------------
// The dependencies docs/architecture.md explains
// ---------------------------------------------------------------------------------------------

/// The names under `[dependencies]` and `[dev-dependencies]` of a Cargo manifest.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]" || line == "[dev-dependencies]";
            continue;
        }
        if !in_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((name, _)) = line.split_once('=') {
            names.insert(name.trim().to_owned());
        }
    }
    names
}

/// The crates named in the first column of the tables headed `crate`.
fn documented_crates(markdown: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_table = false;
    for line in markdown.lines() {
        let Some(cells) = cells(line) else {
            in_table = false;
            continue;
        };
        if cells.first().is_some_and(|c| c == "crate") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        // The crates are the code spans outside parentheses (which hold features and notes).
        let mut depth = 0usize;
        let names_only: String = cells[0]
            .chars()
            .filter(|c| {
                match c {
                    '(' => depth += 1,
                    ')' => depth = depth.saturating_sub(1),
                    _ => return depth == 0,
                }
                false
            })
            .collect();
        let mut rest = names_only.as_str();
        while let Some(code) = first_code(rest) {
            names.insert(code.to_owned());
            let end = rest.find(code).unwrap() + code.len() + 1;
            rest = &rest[end..];
        }
    }
    names
}

#[test]
fn the_architecture_explains_every_dependency() {
    let documented = documented_crates(&read("docs/architecture.md"));
    let gateway = dependencies(&read("Cargo.toml"));
    let sim = dependencies(&read("sim/Cargo.toml"));
    let fuzz = dependencies(&read("fuzz/Cargo.toml"));
    assert!(gateway.contains("pingora-core") && sim.contains("axum"));
    let missing: Vec<_> = gateway
        .union(&sim)
        .filter(|d| !documented.contains(*d))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md does not say why these dependencies are there: {missing:?}"
    );
    let all: BTreeSet<&String> = gateway.iter().chain(&sim).chain(&fuzz).collect();
    let gone: Vec<_> = documented.iter().filter(|d| !all.contains(d)).collect();
    assert!(
        gone.is_empty(),
        "docs/architecture.md explains crates no manifest names: {gone:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Links
// ---------------------------------------------------------------------------------------------

/// The lines of a Markdown text outside fenced code blocks.
fn prose_lines(markdown: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// `line` without its code spans.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// GitHub's anchor of a heading's text: lower case, punctuation dropped but for `-` and `_`,
/// spaces as `-`.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown text's headings (`-1`, `-2` … for repeated ones).
pub fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose_lines(markdown) {
        let trimmed = line.trim_start_matches('#');
        if trimmed.len() == line.len() || !trimmed.starts_with(' ') {
            continue;
        }
        let base = slug(trimmed);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of a Markdown text's inline links (`[text](target)`), outside code.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(markdown) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
    }
    targets
}

/// What is wrong with the relative links of `file` (a Markdown file): targets that do not exist,
/// anchors that name no heading.
pub fn broken_links(file: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for target in link_targets(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let dest = file.parent().unwrap().join(path);
        if !path.is_empty() && !dest.exists() {
            broken.push(format!("{target}: no such file"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        let heads = if path.is_empty() {
            anchors(text)
        } else {
            match std::fs::read_to_string(&dest) {
                Ok(t) if dest.extension().is_some_and(|e| e == "md") => anchors(&t),
                _ => {
                    broken.push(format!(
                        "{target}: an anchor into a file that is not Markdown"
                    ));
                    continue;
                }
            }
        };
        if !heads.contains(anchor) {
            broken.push(format!("{target}: no heading with that anchor"));
        }
    }
    broken
}

/// README.md and every Markdown file directly in docs/.
fn documentation() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[test]
fn every_relative_link_of_the_documentation_resolves() {
    let mut broken = Vec::new();
    for file in documentation() {
        let text = std::fs::read_to_string(&file).unwrap();
        let rel = file.strip_prefix(root()).unwrap().display().to_string();
        broken.extend(
            broken_links(&file, &text)
                .into_iter()
                .map(|b| format!("{rel}: {b}")),
        );
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_finds_missing_files_and_anchors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("other.md"),
        "# Other page\n## The `tollgate.limits` table\n## Twice\n## Twice\n```\n# not a heading\n```\n",
    )
    .unwrap();
    let file = dir.path().join("page.md");
    let text = "# Page\n\
        [ok](other.md) [ok](other.md#the-tollgatelimits-table) [ok](other.md#twice-1) \
        [ok](#page) [web](https://example.com/x#y)\n\
        [gone](missing.md) [bad](other.md#nowhere) [bad](other.md#not-a-heading) \
        [bad](#elsewhere)\n\
        `[code](missing.md)`\n```\n[fenced](missing.md)\n```\n";
    let broken = broken_links(&file, text);
    assert_eq!(
        broken,
        [
            "missing.md: no such file",
            "other.md#nowhere: no heading with that anchor",
            "other.md#not-a-heading: no heading with that anchor",
            "#elsewhere: no heading with that anchor",
        ]
    );
}
