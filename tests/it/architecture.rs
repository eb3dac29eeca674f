//! The layout's rules, checked on the source: Pingora stays in the proxy and the server wiring,
//! the rooms of `src/` import each other one way only, and providers stay pure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where Pingora may be named: the proxy, the server wiring, and the configuration's copy of
/// Pingora's own server settings (`ServerConf`).
const PINGORA_ALLOWED: &[&str] = &["src/proxy/", "src/server/", "src/config/mod.rs"];

/// What the provider families may import: pure translation over the wire types and catalog.
const PROVIDERS_MAY_IMPORT: &[&str] = &["api", "catalog", "money"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `(path relative to the crate, code lines)` of every source file; comments left out.
fn code() -> Vec<(String, Vec<String>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let lines = text
                .lines()
                .map(str::trim_start)
                .filter(|l| !l.starts_with("//"))
                .map(str::to_owned)
                .collect();
            (rel, lines)
        })
        .collect()
}

/// `src/proxy/mod.rs` → `proxy`, `src/sync.rs` → `sync`.
fn room(rel: &str) -> String {
    let tail = rel.trim_start_matches("src/");
    let first = tail.split('/').next().unwrap();
    first.trim_end_matches(".rs").to_owned()
}

/// The rooms each line names through `crate::<room>`.
fn named_rooms(line: &str) -> impl Iterator<Item = String> + '_ {
    line.match_indices("crate::").map(move |(i, _)| {
        line[i + "crate::".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    })
}

fn room_graph() -> Graph {
    let mut graph = Graph::new();
    for (rel, lines) in code() {
        let from = room(&rel);
        let edges = graph.entry(from.clone()).or_default();
        for line in &lines {
            edges.extend(named_rooms(line).filter(|to| !to.is_empty() && *to != from));
        }
    }
    graph
}

/// Whether the line names a Pingora crate path (`pingora::…`, `pingora_core::…`, …).
fn names_pingora(line: &str) -> bool {
    line.match_indices("pingora").any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let word: String = line[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && line[i + word.len()..].starts_with("::")
    })
}

#[test]
fn pingora_stays_in_the_proxy_and_the_server_wiring() {
    let mut offenders = Vec::new();
    for (rel, lines) in code() {
        let allowed = PINGORA_ALLOWED.iter().any(|a| rel.starts_with(a));
        for line in lines.iter().filter(|l| names_pingora(l)) {
            let config_server_conf = rel == "src/config/mod.rs" && line.contains("ServerConf");
            if !allowed || (rel == "src/config/mod.rs" && !config_server_conf) {
                offenders.push(format!("{rel}: {line}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "Pingora named outside src/proxy/ and src/server/ (config may name only ServerConf):\n{}",
        offenders.join("\n")
    );
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// An import circle in `graph`, as the path that closes it, if there is one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(start, graph, &mut Vec::new(), &mut done))
}

#[test]
fn rooms_import_each_other_one_way() {
    let graph = room_graph();
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle between rooms: {}", cycle.join(" → "));
    }
    assert!(
        graph.contains_key("proxy") && graph.contains_key("admission"),
        "{graph:?}"
    );
    for (room, edges) in graph.iter().filter(|(room, _)| *room != "server") {
        assert!(
            !edges.contains("proxy"),
            "{room} imports proxy: only the server wiring may"
        );
    }
}

#[test]
fn the_cycle_check_finds_circles() {
    let edge = |a: &str, b: &[&str]| (a.to_owned(), b.iter().map(|s| (*s).to_owned()).collect());
    let one_way: Graph = [edge("proxy", &["store"]), edge("store", &["money"])].into();
    assert_eq!(find_cycle(&one_way), None);
    let circle: Graph = [
        edge("store", &["billing"]),
        edge("billing", &["money", "store"]),
        edge("money", &[]),
    ]
    .into();
    assert_eq!(
        find_cycle(&circle).unwrap(),
        ["billing", "store", "billing"],
        "the path that closes the circle"
    );
}

#[test]
fn the_pingora_check_sees_paths_not_words() {
    assert!(names_pingora(
        "use pingora_core::protocols::http::ServerSession;"
    ));
    assert!(names_pingora(
        "let s = pingora_core::server::Server::new(None);"
    ));
    assert!(!names_pingora("fn reject_unknown_pingora_keys(map)"));
    assert!(!names_pingora("Pingora's replay buffer"));
}

/// The rooms `room` imports beyond `allowed`.
fn imports_beyond<'g>(graph: &'g Graph, room: &str, allowed: &[&str]) -> Vec<&'g String> {
    graph[room]
        .iter()
        .filter(|r| !allowed.contains(&r.as_str()))
        .collect()
}

#[test]
fn providers_import_only_wire_types_catalog_and_money() {
    let graph = room_graph();
    let extra = imports_beyond(&graph, "providers", PROVIDERS_MAY_IMPORT);
    assert!(extra.is_empty(), "providers import {extra:?}");
}

/// A door is a translation at the edge: the request model, the adapters it wraps, the catalog
/// (which headers a model's price allows) — never admission, billing or the proxy.
#[test]
fn doors_import_only_the_request_model_providers_and_catalog() {
    let graph = room_graph();
    let extra = imports_beyond(&graph, "doors", &["api", "catalog", "money", "providers"]);
    assert!(extra.is_empty(), "doors import {extra:?}");
}

#[test]
fn the_money_leaf_imports_no_room() {
    let graph = room_graph();
    assert!(
        graph["money"].is_empty(),
        "money imports {:?}",
        graph["money"]
    );
}

/// Every file of the repository (no build output, no installed packages), relative to its root.
fn repository_files() -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if path.is_dir() {
                if !["target", "node_modules", ".git", ".venv"].contains(&name.as_ref()) {
                    walk(&path, root, out);
                }
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(root, root, &mut files);
    files
}

/// What is wrong with the documents one doc-comment line cites: a path that leaves the
/// repository (`shared/…`, `../…`), or a Markdown file (`name.md`, `docs/x.md#anchor`) that is
/// not in it, or whose anchor names no heading. `files` are the repository's, relative to its
/// root; a bare file name may be any of them.
fn outside_citations(line: &str, files: &[String], root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let words = line.split(|c: char| {
        c.is_whitespace() || matches!(c, '`' | '(' | ')' | '[' | ']' | ',' | ';' | '"' | '\'')
    });
    for word in words.filter(|w| !w.is_empty()) {
        let word = word.trim_end_matches(['.', ':']);
        if word.starts_with("shared/") || word.contains("/shared/") || word.contains("../") {
            found.push(format!("{word}: outside the repository"));
            continue;
        }
        let (path, anchor) = match word.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (word, None),
        };
        if !path.ends_with(".md") || path.contains("://") {
            continue;
        }
        let hit = files
            .iter()
            .find(|f| *f == path || (!path.contains('/') && f.rsplit('/').next() == Some(path)));
        let Some(hit) = hit else {
            found.push(format!("{word}: not a file of the repository"));
            continue;
        };
        if let Some(anchor) = anchor {
            let text = std::fs::read_to_string(root.join(hit)).unwrap();
            if !crate::docs::anchors(&text).contains(anchor) {
                found.push(format!("{word}: {hit} has no heading with that anchor"));
            }
        }
    }
    found
}

#[test]
fn doc_comments_cite_only_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = repository_files();
    let mut rs_files = Vec::new();
    sources(&root.join("src"), &mut rs_files);
    sources(&root.join("sim/src"), &mut rs_files);
    rs_files.sort();
    let mut offenders = Vec::new();
    for path in rs_files {
        let rel = path.strip_prefix(root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_start();
            if !(line.starts_with("//!") || line.starts_with("///")) {
                continue;
            }
            for problem in outside_citations(line, &files, root) {
                offenders.push(format!("{rel}:{}: {problem}", n + 1));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "doc comments cite documents the repository does not hold (write what is needed in \
         docs/ and cite that):\n{}",
        offenders.join("\n")
    );
}

/// `src/store/`'s own files by module name (`mod.rs` is `mod`), with their code lines.
fn store_files() -> Vec<(String, Vec<String>)> {
    code()
        .into_iter()
        .filter_map(|(rel, lines)| {
            let name = rel.strip_prefix("src/store/")?.strip_suffix(".rs")?;
            (!name.contains('/')).then(|| (name.to_owned(), lines))
        })
        .collect()
}

/// The leading identifier of `text`.
fn ident(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The first names a path or `use` tree takes: `codec::trunc` → `codec`,
/// `{Store, rows::{self, DbRow}}` → `Store`, `rows`.
fn first_names(tree: &str) -> Vec<String> {
    let Some(group) = tree.strip_prefix('{') else {
        return vec![ident(tree)];
    };
    let (mut depth, mut start, mut names) = (0, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            ',' | '}' if depth == 0 => {
                names.push(ident(&group[start..i]));
                start = i + 1;
                if c == '}' {
                    break;
                }
            }
            _ => {}
        }
    }
    names
}

/// The public names each file declares (`pub`, `pub(crate)`, … items).
fn declared(lines: &[String]) -> BTreeSet<String> {
    const KINDS: &[&str] = &[
        "fn", "struct", "enum", "trait", "type", "const", "static", "mod",
    ];
    let mut names = BTreeSet::new();
    for line in lines.iter().filter(|l| l.starts_with("pub")) {
        let mut words = line.split_whitespace().skip(1);
        while let Some(word) = words.next() {
            if KINDS.contains(&word) {
                names.insert(ident(words.next().unwrap_or_default()));
                break;
            }
            if !matches!(word, "async" | "unsafe") && !word.starts_with("pub") {
                break;
            }
        }
    }
    names
}

/// Which files of one module's folder each file imports: a sibling named as a module
/// (`super::codec`, `crate::store::rows`, from `mod.rs` `rows::…`), or the file that declares
/// a name taken through the parent (`super::{StoreError, ApiKey}`). A `pub use` or `mod` line of
/// `mod.rs` only hands names on or declares a file: the module's face, not an import.
fn folder_graph(files: &[(String, Vec<String>)]) -> Graph {
    let modules: BTreeSet<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let decls: Vec<(&str, BTreeSet<String>)> = files
        .iter()
        .map(|(n, lines)| (n.as_str(), declared(lines)))
        .collect();
    let mut graph = Graph::new();
    for (name, lines) in files {
        let text = lines
            .iter()
            .filter(|l| name != "mod" || !is_face(l))
            .cloned()
            .collect::<Vec<_>>()
            .join(" ");
        let mut taken = Vec::new();
        for prefix in ["super::", "crate::store::", "self::"] {
            for (i, _) in text.match_indices(prefix) {
                taken.extend(first_names(&text[i + prefix.len()..]));
            }
        }
        if name == "mod" {
            taken.extend(
                modules
                    .iter()
                    .filter(|m| names_path(&text, m))
                    .map(|m| m.to_string()),
            );
        }
        let edges = graph.entry(name.clone()).or_default();
        for n in taken.iter().filter(|n| !n.is_empty()) {
            if modules.contains(n.as_str()) {
                edges.insert(n.clone());
            } else if !decls.iter().any(|(f, d)| f == name && d.contains(n)) {
                let owners = decls.iter().filter(|(_, d)| d.contains(n));
                edges.extend(owners.map(|(f, _)| (*f).to_owned()));
            }
        }
        edges.remove(name);
    }
    graph
}

/// Whether a line of `mod.rs` declares a file (`mod rows;`) or hands names on (`pub use …`).
fn is_face(line: &str) -> bool {
    let rest = line.strip_prefix("pub").map(|r| {
        let r = r.trim_start();
        r.strip_prefix('(')
            .and_then(|r| r.split_once(')'))
            .map_or(r, |(_, r)| r.trim_start())
    });
    rest.unwrap_or(line).starts_with("mod ") || rest.is_some_and(|r| r.starts_with("use "))
}

/// Whether `text` names a path through module `m` (`m::…`, not `xm::…`).
fn names_path(text: &str, m: &str) -> bool {
    text.match_indices(&format!("{m}::")).any(|(i, _)| {
        !text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    })
}

#[test]
fn store_files_import_each_other_one_way() {
    let graph = folder_graph(&store_files());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle in src/store/: {}", cycle.join(" → "));
    }
    assert!(
        graph["sqlite"].contains("rows") && graph["sqlite"].contains("mod"),
        "{graph:?}"
    );
}

#[test]
fn the_citation_check_sees_paths_outside_and_missing_documents() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = repository_files();
    let check = |line: &str| outside_citations(line, &files, root);
    assert!(
        check("//! Wire notes: `docs/wire.md#gemini-errors`; fixtures (`SOURCES.md`).").is_empty()
    );
    assert!(check("/// the prices (docs/providers.md): see `README.md`.").is_empty());
    assert_eq!(
        check("//! Wire notes: `shared/wire/gemini.md` §10").len(),
        1
    );
    assert_eq!(check("//! see ../notes/x.txt").len(), 1);
    assert_eq!(check("//! (gemini.md §9)").len(), 1);
    assert_eq!(check("//! docs/wire.md#no-such-heading").len(), 1);
    assert!(check("//! `POST /v1/messages`, https://example.com/a.md").is_empty());
}

#[test]
fn the_folder_reader_sees_use_trees_and_the_face() {
    let file = |n: &str, lines: &[&str]| {
        let lines = lines.iter().map(|l| (*l).to_owned()).collect();
        (n.to_owned(), lines)
    };
    let files = [
        file(
            "mod",
            &[
                "mod a;",
                "pub use b::*;",
                "pub enum E {}",
                "fn f() { a::g() }",
            ],
        ),
        file(
            "a",
            &["use super::{E, b::{self, X}};", "pub(crate) fn g() {}"],
        ),
        file("b", &["pub struct X;", "mod tests {", "use super::*;", "}"]),
        file("c", &["use crate::store::X;", "fn h() -> super::E {}"]),
    ];
    let graph = folder_graph(&files);
    let edges = |n: &str| graph[n].iter().map(String::as_str).collect::<Vec<_>>();
    assert_eq!(edges("mod"), ["a"]);
    assert_eq!(edges("a"), ["b", "mod"]);
    assert!(edges("b").is_empty());
    assert_eq!(edges("c"), ["b", "mod"]);
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "mod", "a"]);
}
