//! The core's rooms stay layered (issue 22): no two root modules of `src/` import each
//! other, directly or around a circle, and the vocabulary (`model`) imports no system.
//! Read from the source: every `crate::…` and `super::…` path outside tests and
//! comments, resolved to the root module it names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Root modules `model` may stand on: plain libraries, no ECS system.
const BELOW_MODEL: &[&str] = &["numa", "checksum"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `model/ids.rs` → `[model, ids]`, `discovery/mod.rs` →
/// `[discovery]`, `lib.rs` → `[]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The root modules `text` (the code of the file whose module is `module`) names.
fn named_roots(text: &str, module: &[String]) -> BTreeSet<String> {
    let mut roots = BTreeSet::new();
    let bytes = text.as_bytes();
    for (at, _) in text.match_indices("::") {
        // Only the start of a path: `crate::x` or `super::…::x`, not `a::crate`.
        let head_start = text[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |i| i + 1);
        if head_start > 0 && bytes[head_start - 1] == b'$' {
            continue;
        }
        if text[head_start..at].contains("::") {
            continue; // not the first `::` of this path
        }
        let path: Vec<&str> = text[head_start..]
            .split("::")
            .map(|s| {
                let end = s
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(s.len());
                &s[..end]
            })
            .take_while(|s| !s.is_empty())
            .collect();
        let root = match path.first() {
            Some(&"crate") => path.get(1).map(|s| s.to_string()),
            Some(&"super") => {
                let ups = path.iter().take_while(|s| **s == "super").count();
                let base = module.len().checked_sub(ups);
                base.and_then(|b| {
                    module[..b]
                        .first()
                        .cloned()
                        .or_else(|| path.get(ups).map(|s| s.to_string()))
                })
            }
            _ => None,
        };
        if let Some(root) = root {
            roots.insert(root);
        }
    }
    roots
}

/// Code only: everything before the first `#[cfg(test)]`, without comment lines.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src/");
        let module = module_of(rel);
        let Some(top) = module.first().cloned() else {
            continue; // lib.rs wires everything
        };
        let text = std::fs::read_to_string(&file).expect("readable source");
        let roots = named_roots(&code(&text), &module);
        let entry = edges.entry(top.clone()).or_default();
        let is_module = |r: &String| src.join(r).is_dir() || src.join(format!("{r}.rs")).is_file();
        entry.extend(roots.into_iter().filter(|r| *r != top && is_module(r)));
    }
    edges
}

/// A circle through `start`, if any (depth-first, in name order).
fn circle(edges: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn visit(
        edges: &BTreeMap<String, BTreeSet<String>>,
        at: &str,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges.get(at).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if visit(edges, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    visit(edges, start, start, &mut path, &mut seen).then_some(path)
}

#[test]
fn no_two_root_modules_import_each_other_around_a_circle() {
    let edges = graph();
    assert!(edges.len() > 20, "the core's root modules were found: {edges:?}");
    for start in edges.keys() {
        if let Some(c) = circle(&edges, start) {
            panic!("a circle of imports: {} → {start}", c.join(" → "));
        }
    }
}

#[test]
fn the_model_imports_no_system() {
    let edges = graph();
    let model = edges.get("model").expect("core/src/model/");
    let above: Vec<&String> = model.iter().filter(|m| !BELOW_MODEL.contains(&m.as_str())).collect();
    assert!(above.is_empty(), "model imports {above:?}");
}

#[test]
fn the_reader_sees_paths_as_the_compiler_does() {
    let module: Vec<String> = vec!["cache".into(), "numa".into()];
    let roots = named_roots(
        "use super::capacity::X;\nuse super::super::model::ids::Y;\nuse crate::topology::Z;\nlet a = b::crate;",
        &module,
    );
    assert_eq!(
        roots,
        BTreeSet::from(["cache".into(), "model".into(), "topology".into()])
    );
}
