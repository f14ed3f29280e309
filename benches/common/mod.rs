//! What the harnesses that run the daemons share (`mod common;` in each).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

#[path = "../../tests/common/cargo.rs"]
mod cargo;

/// A daemon binary next to this harness (release), built (again, if stale) first.
pub fn daemon(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join(name);
    // Always: `cargo bench` builds this package's binaries, not another's, and a stale
    // daemon would be measured without a word (a no-op when it is up to date).
    assert!(cargo::build(&["-q", "--release", "-p", package, "--bin", name]));
    path
}

/// An environment variable's number, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A directory on the disk the target directory is on (not a tmpfs: an fsync must cost
/// what it costs) with a cluster CA and a certificate for user `bench`; and the CLI.
pub fn bench_dir() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_hyperplan"));
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let dir = tempfile::tempdir_in(&base).unwrap();
    let certs = dir.path().join("certs");
    let c = certs.to_str().unwrap();
    for args in [
        vec!["certs", "init", "--dir", c],
        vec!["certs", "issue", "--dir", c, "--user", "bench", "--role", "user"],
    ] {
        let out = Command::new(&cli).args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (dir, certs, cli)
}

/// `hyperplan-planner` on 127.0.0.1:0 with these certificates, configuration and store,
/// its stdout piped for [`listening`]; add the environment and stderr.
pub fn planner(
    bin: &std::path::Path,
    certs: &std::path::Path,
    config: &std::path::Path,
    store: &std::path::Path,
) -> Command {
    let mut c = Command::new(bin);
    c.args(["--listen", "127.0.0.1:0", "--cert-dir"])
        .arg(certs)
        .arg("--config")
        .arg(config)
        .arg("--store")
        .arg(store)
        .stdout(std::process::Stdio::piped());
    c
}

/// The address a started planner listens on (its first line of output).
pub fn listening(planner: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(planner.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix("hyperplan-planner listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from the planner: {line:?}"))
        .to_string()
}
