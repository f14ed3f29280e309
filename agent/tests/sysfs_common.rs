//! Helpers shared by the `sysfs_*` tests (included with `mod sysfs_common;`): fixture
//! paths, copying a fixture into a writable tempdir, and a `ttar` unpacker.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// The repository's `testdata/` (fixtures with their licences; see `testdata/README.md`).
pub const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata");

pub fn data(rel: &str) -> PathBuf {
    let p = Path::new(DATA).join(rel);
    assert!(
        p.exists(),
        "fixture {} is missing from the repository's testdata/",
        p.display()
    );
    p
}

/// The hwloc-gather-topology sysfs slice: qib0, ib0, 4 NUMA nodes.
pub fn hwloc_sys() -> PathBuf {
    data("sysfs/hwloc/40intel64-2g2n4c+pci/sys")
}

/// prometheus/node_exporter collector fixtures (pre-unpacked part of `sys.ttar`).
pub fn node_exporter_sys() -> PathBuf {
    data("sysfs/node_exporter/sys")
}

pub fn node_exporter_ttar() -> PathBuf {
    data("sysfs/node_exporter/sys.ttar")
}

/// prometheus/procfs testdata.
pub fn procfs_sys() -> PathBuf {
    data("sysfs/procfs/fixtures/sys")
}

/// Copies `from` into `to` with fresh (writable) permissions, so tests can spoil values.
/// With `real_links`, files that are flattened symlinks (content one `../` path) become
/// real symlinks again, as on a live sysfs.
pub fn copy_tree(from: &Path, to: &Path, real_links: bool) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let ft = entry.file_type().unwrap();
        if ft.is_dir() {
            copy_tree(&src, &dst, real_links);
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src).unwrap(), &dst).unwrap();
        } else {
            let bytes = fs::read(&src).unwrap();
            let link = std::str::from_utf8(&bytes)
                .ok()
                .filter(|t| t.starts_with("../") && !t.contains('\n'));
            match link {
                Some(target) if real_links => std::os::unix::fs::symlink(target, &dst).unwrap(),
                _ => fs::write(&dst, &bytes).unwrap(),
            }
        }
    }
}

/// Unpacks a `ttar` ("plain text tar", prometheus/procfs): records split by `# ttar - - -`
/// lines; `Directory: d`, or `Path: p` + `Lines: n` + n lines, or `Path: p` +
/// `SymlinkTo: t`; then `Mode: m`. In content, `NULLBYTE` stands for a NUL and a last line
/// ending in `EOF` means no newline at the end of the file.
pub fn unpack_ttar(ttar: &Path, into: &Path) {
    let text = fs::read_to_string(ttar).unwrap();
    let mut lines = text.lines();
    let mut path: Option<PathBuf> = None;
    while let Some(line) = lines.next() {
        if let Some(dir) = line.strip_prefix("Directory: ") {
            fs::create_dir_all(into.join(dir)).unwrap();
        } else if let Some(p) = line.strip_prefix("Path: ") {
            path = Some(into.join(p));
        } else if let Some(target) = line.strip_prefix("SymlinkTo: ") {
            let p = path.take().expect("SymlinkTo without Path");
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, &p).unwrap();
        } else if let Some(n) = line.strip_prefix("Lines: ") {
            let n: usize = n.trim().parse().unwrap();
            let mut content = String::new();
            for _ in 0..n {
                content.push_str(lines.next().expect("ttar ends inside a file"));
                content.push('\n');
            }
            if content.ends_with("EOF\n") {
                content.truncate(content.len() - "EOF\n".len());
            }
            let content = content.replace("NULLBYTE", "\0");
            let p = path.take().expect("Lines without Path");
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, content).unwrap();
        } else if line.starts_with("Mode: ") || line.starts_with('#') || line.is_empty() {
            // Modes do not matter here; fresh files stay writable for the tests.
        } else {
            panic!("unexpected ttar line {line:?}");
        }
    }
}
