//! The workspace's error rule, kept: library code says what went wrong with `thiserror`
//! types, never `Result<_, String>` (`anyhow`, and `String` for clap's value parsers, in
//! binaries only). This walks every library crate's sources, leaves out `#[cfg(test)]`
//! items and comments, and fails naming each `FILE:LINE` whose code has a `Result` whose
//! error type is `String`.

use std::path::{Path, PathBuf};

/// The library sources, relative to the workspace root.
const LIBRARY_DIRS: [&str; 7] = [
    "shared/src",
    "core/src",
    "net/src",
    "fabric/src",
    "agent/src",
    "planner/src",
    "accounting/src",
];

/// Binaries inside those directories, where the rule does not hold.
const BINARIES: [&str; 3] = ["agent/src/main.rs", "agent/src/bin", "planner/src/main.rs"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from(".."), Path::to_path_buf)
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        panic!("cannot list {}", dir.display());
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` with `#[cfg(test)]` items and `//` comments blanked; lines stay where they were.
fn without_tests(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start().starts_with("#[cfg(test)]") {
            // The item it applies to: to the `}` that closes its first `{`, or to its `;`.
            let (mut depth, mut opened) = (0i64, false);
            while i < lines.len() {
                let line = lines[i];
                depth += braces(line);
                opened |= line.contains('{');
                out.push(String::new());
                i += 1;
                if (opened && depth <= 0) || (!opened && line.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        let line = lines[i];
        out.push(line.find("//").map_or(line, |at| &line[..at]).to_string());
        i += 1;
    }
    out
}

/// `{` less `}` on a line, outside string and character literals and comments.
fn braces(line: &str) -> i64 {
    let (mut depth, mut in_string, mut escaped) = (0, false, false);
    let bytes = line.as_bytes();
    let mut k = 0;
    while k < bytes.len() {
        let c = bytes[k];
        if in_string {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match c {
                b'"' => in_string = true,
                b'/' if bytes.get(k + 1) == Some(&b'/') => break,
                b'\'' if matches!(bytes.get(k + 1..k + 3), Some(b"{'" | b"}'")) => k += 2,
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => {}
            }
        }
        k += 1;
    }
    depth
}

/// The 1-based lines of `code` where a `Result<…, String>` begins.
fn string_results(code: &[String]) -> Vec<usize> {
    let text = code.join("\n");
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("Result<").map(|a| a + from) {
        from = at + "Result<".len();
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `TaskResult<`: another type
        }
        // The generic arguments, split at the top level.
        let (mut depth, mut args, mut k) = (1usize, vec![String::new()], from);
        while k < bytes.len() && depth > 0 {
            let c = bytes[k];
            if c == b'-' && bytes.get(k + 1) == Some(&b'>') {
                k += 2; // `Fn() -> T` inside an argument
                continue;
            }
            match c {
                b'<' | b'(' | b'[' => depth += 1,
                b'>' | b')' | b']' => depth -= 1,
                _ => {}
            }
            if depth == 1 && c == b',' {
                args.push(String::new());
            } else if depth > 0
                && let Some(arg) = args.last_mut()
            {
                arg.push(char::from(c));
            }
            k += 1;
        }
        let last: String = args
            .iter()
            .rev()
            .find(|a| !a.trim().is_empty()) // a trailing comma
            .map(|a| a.split_whitespace().collect())
            .unwrap_or_default();
        let arguments = args.iter().filter(|a| !a.trim().is_empty()).count();
        if arguments >= 2
            && matches!(
                last.as_str(),
                "String" | "std::string::String" | "alloc::string::String"
            )
        {
            found.push(text[..at].matches('\n').count() + 1);
        }
    }
    found
}

#[test]
fn library_code_has_no_string_errors() {
    let root = workspace_root();
    let mut offenders = Vec::new();
    for dir in LIBRARY_DIRS {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files);
        assert!(!files.is_empty(), "no Rust files under {dir}: has the layout changed?");
        for file in files {
            let relative = file.strip_prefix(&root).unwrap_or(&file).to_path_buf();
            if BINARIES.iter().any(|b| relative.starts_with(b)) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&file) else {
                panic!("cannot read {}", file.display());
            };
            let lines: Vec<&str> = text.lines().collect();
            for line in string_results(&without_tests(&text)) {
                let shown = lines.get(line - 1).map_or("", |l| l.trim());
                offenders.push(format!("{}:{line}: {shown}", relative.display()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "library code returns `Result<_, String>`; give these a thiserror type \
         (anyhow and String errors belong in binaries):\n{}",
        offenders.join("\n")
    );
}

/// The scan itself: what it finds and what it leaves.
#[test]
fn the_scan_finds_string_errors_and_only_them() {
    let scan = |text: &str| string_results(&without_tests(text));
    assert_eq!(scan("fn f() -> Result<u8, String> {\n    Ok(1)\n}\n"), vec![1]);
    assert_eq!(scan("pub type Released = Result<(), String>;"), vec![1]);
    assert_eq!(
        scan("fn f()\n-> Result<\n    Vec<u8>,\n    std::string::String,\n> {}"),
        vec![2],
        "across lines"
    );
    assert_eq!(scan("let x: oneshot::Sender<Result<Plan, String>> = y;"), vec![1]);
    assert_eq!(scan("fn f() -> Result<Box<dyn Fn() -> u8>, String> {}"), vec![1]);
    // Not String errors.
    assert!(scan("fn f() -> std::io::Result<String> {}").is_empty());
    assert!(scan("fn f() -> Result<BTreeMap<String, String>, TaskEnvError> {}").is_empty());
    assert!(scan("fn f() -> Result<String, E> {}").is_empty());
    assert!(scan("fn f() -> TaskResult<u8, String> {}").is_empty());
    assert!(scan("/// Not `Result<(), String>`: a thiserror enum.\nfn f() {}").is_empty());
    // Test code may.
    let tests = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() -> Result<(), String> {\n        \
                 let s = \"}\";\n        Ok(())\n    }\n}\nfn c() -> Result<(), String> {}\n";
    assert_eq!(scan(tests), vec![9], "after the test module, not in it");
    assert!(scan("#[cfg(test)]\nuse x::y;\n#[cfg(test)]\nfn t() -> Result<(), String> { Ok(()) }").is_empty());
}

/// A module's path in its crate (`["model", "jobstate"]`; `mod.rs` and `lib.rs` are their
/// directory's module).
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Every path that starts with `crate::` or `super::` in `code`, from `module`'s view, as
/// segments from the crate's root; `{a, b::c}` groups expanded.
fn paths_from(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let word_start = |at: usize| at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let (base, skip) = if rest.starts_with("crate::") && word_start(at) {
            (Vec::new(), "crate::".len())
        } else if rest.starts_with("super::") && word_start(at) {
            (module[..module.len().saturating_sub(1)].to_vec(), "super::".len())
        } else if rest.starts_with("self::") && word_start(at) {
            (module.to_vec(), "self::".len())
        } else if rest.starts_with("use ") && word_start(at) {
            // `use child::…` (2018 paths): from this module; names that are no child of
            // it (std, other crates) resolve to nothing and are left out below.
            (module.to_vec(), "use ".len())
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let (tail, used) = path_text(rest[skip..].trim_start());
        let used = used + (rest[skip..].len() - rest[skip..].trim_start().len());
        let relative_use = rest.starts_with("use ");
        if relative_use
            && ["crate::", "super::", "self::", "::"]
                .iter()
                .any(|p| tail.starts_with(p))
        {
            // Read again as what it starts with.
            at += skip;
            continue;
        }
        for p in expand(&tail) {
            // A relative `use` counts only when it names a child module of this one.
            if relative_use && p.is_empty() {
                continue;
            }
            let mut full = base.clone();
            for seg in p {
                if seg == "super" {
                    full.pop();
                } else if seg != "self" {
                    full.push(seg);
                }
            }
            out.push(full);
        }
        at += skip + used.max(1);
    }
    out
}

/// The path text at the start of `s` (segments, `::` and balanced `{…}` groups) and its length.
fn path_text(s: &str) -> (String, usize) {
    let mut depth = 0usize;
    let mut end = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            c if c.is_ascii_alphanumeric() || c == '_' || c == ':' => {}
            c if depth > 0 && (c == ',' || c.is_whitespace()) => {}
            _ if depth > 0 => {}
            _ => {
                end = i;
                return (s[..end].to_string(), end);
            }
        }
        end = i + c.len_utf8();
        if depth == 0 && c == '}' {
            return (s[..end].to_string(), end);
        }
    }
    (s[..end].to_string(), end)
}

/// `a::b::{c, d::{e, f}}` as its paths: `a::b::c`, `a::b::d::e`, `a::b::d::f`.
fn expand(text: &str) -> Vec<Vec<String>> {
    let Some(open) = text.find('{') else {
        return vec![text.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect()];
    };
    let prefix: Vec<String> = text[..open]
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let inner = text[open + 1..].strip_suffix('}').unwrap_or(&text[open + 1..]);
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .map(|p| p.split_whitespace().collect::<String>())
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(&p))
        .map(|tail| prefix.iter().cloned().chain(tail).collect())
        .collect()
}

/// The strongly connected components of more than one node (Tarjan), each sorted.
fn circles(edges: &[std::collections::BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct T<'a> {
        edges: &'a [std::collections::BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on: Vec<bool>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in t.edges[v].iter() {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort_unstable();
                t.out.push(c);
            }
        }
    }
    let n = edges.len();
    let mut t = T {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on: vec![false; n],
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
}

/// The import graph of the crate whose sources are `root`: an edge from a file to each
/// module its code (not its comments or tests) names, the longest module path a name
/// starts with. A module's use of its own ancestors is left out: a child sees its
/// parent's room (and a parent re-exporting its children is no circle).
/// A crate's binaries (`main.rs`, `bin/`) are crates of their own and left out.
fn import_circles(root: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.retain(|f| f != &root.join("main.rs") && !f.starts_with(root.join("bin")));
    let modules: Vec<Vec<String>> = files.iter().map(|f| module_of(root, f)).collect();
    let by_path: std::collections::BTreeMap<&[String], usize> =
        modules.iter().enumerate().map(|(i, m)| (m.as_slice(), i)).collect();
    let mut edges = vec![std::collections::BTreeSet::new(); files.len()];
    for (i, file) in files.iter().enumerate() {
        let code = without_tests(&std::fs::read_to_string(file).unwrap_or_default()).join("\n");
        let me = &modules[i];
        for path in paths_from(me, &code) {
            let Some(target) = (0..=path.len()).rev().find_map(|k| by_path.get(&path[..k]).copied()) else {
                continue;
            };
            let t = &modules[target];
            if target != i && !me.starts_with(t) {
                edges[i].insert(target);
            }
        }
    }
    circles(&edges)
        .into_iter()
        .map(|c| {
            c.into_iter()
                .map(|i| files[i].strip_prefix(root).unwrap_or(&files[i]).display().to_string())
                .collect()
        })
        .collect()
}

/// The circles in `dir` (from the workspace root) of more than `most` files, as the
/// message that names their files; empty when there are none.
fn circles_over(dir: &str, most: usize) -> String {
    import_circles(&workspace_root().join(dir))
        .into_iter()
        .filter(|c| c.len() > most)
        .map(|c| format!("{} files: {}", c.len(), c.join(", ")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The core's vocabulary sits below its systems and no room imports in a circle: a
/// circle is where the walls bent (issue 41 found `commands` → `record` → `components` →
/// `jobstate` → `commands`).
#[test]
fn the_core_has_no_import_circle() {
    let found = circles_over("core/src", 1);
    assert!(
        found.is_empty(),
        "import circles in core/src, the files of each (break it by moving what they share into a module of its own):\n{found}"
    );
}

/// The planner's server talks through its inbox types (`server/inbox/`, at the bottom),
/// not through each other: a circle of more than 3 files is a room that grew around
/// a message type (issue 41 found 12 files around `ToCore`; this scan, which leaves out a
/// child's use of its parent, saw `metrics/serve`, `server/driver`, `server` and `web`
/// around it, and the store's settings reaching planner.toml's reader).
#[test]
fn the_planner_has_no_import_circle_of_more_than_3_files() {
    let found = circles_over("planner/src", 3);
    assert!(
        found.is_empty(),
        "import circles of more than 3 files in planner/src (move the types they share into a module at the bottom, as server/inbox/ holds the driver's messages):\n{found}"
    );
}

/// The circle scan itself, on a crate made for it.
#[test]
fn the_circle_scan_finds_circles_and_only_them() {
    let dir = tempfile_dir();
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap_or(&dir)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(p, text).unwrap_or_else(|e| panic!("{e}"));
    };
    write("lib.rs", "pub mod model;\npub mod sys;\n");
    write("model/mod.rs", "pub mod a;\npub mod b;\npub use a::A;\n");
    write("model/a.rs", "use super::b::B;\npub struct A(B);\n");
    write(
        "model/b.rs",
        "use std::fmt;\nuse crate::{sys::S, model}; // sys: the circle\npub struct B;\n",
    );
    write(
        "sys/mod.rs",
        "use crate::model::a::A;\npub struct S;\n#[cfg(test)]\nmod tests { use crate::model::b::B; }\n",
    );
    let found = import_circles(&dir);
    assert_eq!(found, vec![vec!["model/a.rs", "model/b.rs", "sys/mod.rs"]]);
    // A room's module using its child (`use a::A`, 2018 paths) closes a circle too.
    write("model/b.rs", "pub struct B;\n");
    write("sys/mod.rs", "use crate::model::A;\npub struct S;\n");
    write("model/a.rs", "use crate::sys::S;\npub struct A(S);\n");
    assert_eq!(
        import_circles(&dir),
        vec![vec!["model/a.rs", "model/mod.rs", "sys/mod.rs"]]
    );
    // Without it: none (a child using its parent, `super::`, is no circle).
    write(
        "model/a.rs",
        "use super::b::B;\nuse super::super::model as _;\npub struct A(B);\n",
    );
    assert!(import_circles(&dir).is_empty(), "{:?}", import_circles(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh directory under the system's temp dir (this test file has no tempfile).
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hyperplan-rules-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    dir
}
