//! What the harnesses that run the daemons share (`mod common;` in each).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

/// A daemon binary next to this harness (release), built once when missing.
pub fn daemon(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join(name);
    if !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-q", "--release", "-p", package, "--bin", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success());
    }
    path
}

/// An environment variable's number, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
