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
