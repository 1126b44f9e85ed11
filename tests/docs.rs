//! docs/design.md's map of the tree is checked against the tree, so that it
//! cannot drift: every `src/...` path it names exists, every `.rs` name it
//! names is a file under `src/`, and every source file of `src/` is named
//! there, with its folder.
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn design() -> String {
    std::fs::read_to_string(format!("{ROOT}/docs/design.md")).unwrap()
}

/// Every `.rs` file under `dir`, relative to the crate root.
fn sources(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.strip_prefix(ROOT).unwrap().to_string_lossy().into_owned());
        }
    }
}

/// The words of `text` that look like paths or file names (`src/a/`, `b.rs`).
fn path_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '/' || c == '.'))
        .map(|w| w.trim_end_matches('.').to_string())
        .filter(|w| w.starts_with("src/") || w.ends_with(".rs") || (w.ends_with('/') && w.len() > 1))
        .collect()
}

#[test]
fn every_path_the_design_names_exists() {
    let mut all = Vec::new();
    sources(&Path::new(ROOT).join("src"), &mut all);
    let mut missing = Vec::new();
    for w in path_words(&design()) {
        let ok = if w.starts_with("src/") || Path::new(ROOT).join(&w).exists() {
            Path::new(ROOT).join(&w).exists()
        } else if w.ends_with('/') {
            // A folder named by its last parts (`fabric/`, `tables/`).
            all.iter().any(|f| f.contains(&format!("/{w}")))
        } else {
            // A bare or partial name (`slots.rs`, `tables/held.rs`): some file ends so.
            all.iter().any(|f| f.ends_with(&format!("/{w}")))
        };
        if !ok && !missing.contains(&w) {
            missing.push(w);
        }
    }
    assert!(missing.is_empty(), "docs/design.md names what is not in the tree: {missing:?}");
}

#[test]
fn every_source_file_is_on_the_design_map() {
    let (doc, mut all) = (design(), Vec::new());
    sources(&Path::new(ROOT).join("src"), &mut all);
    let words = path_words(&doc);
    let mut unnamed = Vec::new();
    for f in &all {
        let p = Path::new(f);
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let folder = format!("{}/", p.parent().unwrap().to_string_lossy());
        // mod.rs and lib.rs are their folder; a file is named by itself
        // (`src/os.rs`) or by its name where its folder is named.
        let named = words.iter().any(|w| w == f)
            || (name == "mod.rs" || name == "lib.rs") && (folder == "src/" || words.contains(&folder))
            || words.iter().any(|w| w.ends_with(&name))
                && words.iter().any(|w| folder.ends_with(w.as_str()) && w.ends_with('/'));
        if !named {
            unnamed.push(f.clone());
        }
    }
    assert!(unnamed.is_empty(), "source files docs/design.md does not name: {unnamed:?}");
}
