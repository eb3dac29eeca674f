//! Every file shipped in `conf/` parses as what it is: a configuration (with `Config::load`, its
//! validation included) or a catalog (with the importer's parser and checks). A new file must
//! be named in one of the lists, so none is silently skipped.

use std::path::Path;

use tollgate::catalog::import;
use tollgate::config::Config;

const CONFIGS: &[&str] = &["tollgate.yaml", "demo.yaml"];
const CATALOGS: &[&str] = &["catalog.yaml", "openai-compatible.example.yaml"];

#[test]
fn every_shipped_file_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if CONFIGS.contains(&name.as_str()) {
            Config::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        } else if CATALOGS.contains(&name.as_str()) {
            let rows = import::read_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!rows.models.is_empty(), "{name} names no model");
        } else {
            panic!("conf/{name} is neither a known configuration nor a catalog: add it to a list");
        }
        seen += 1;
    }
    assert_eq!(
        seen,
        CONFIGS.len() + CATALOGS.len(),
        "a listed file is missing"
    );
}
