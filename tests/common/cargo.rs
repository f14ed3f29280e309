//! Builds the workspace's binaries from inside a test or bench harness, as a shell would.

use std::path::Path;
use std::process::Command;

/// Runs `cargo build ARGS` in the workspace and says whether it succeeded.
///
/// Without the variables cargo sets for a running test or bench (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*`, …): build scripts that watch one of them (ring's watches
/// `CARGO_MANIFEST_DIR`) would see it change, and everything above them (rustls, quinn,
/// both daemons) would be built again here and once more by the next build from a shell.
pub fn build(args: &[&str]) -> bool {
    let mut command = Command::new(env!("CARGO"));
    command
        .arg("build")
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let set_by_cargo = [
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_BIN_EXE_",
            "CARGO_CRATE_",
            "CARGO_PRIMARY_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
            || matches!(name, "CARGO_TARGET_TMPDIR" | "OUT_DIR");
        if set_by_cargo {
            command.env_remove(name);
        }
    }
    command.status().is_ok_and(|s| s.success())
}
