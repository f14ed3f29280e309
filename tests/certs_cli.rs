//! `hyperplan certs` end to end: the real binary writes the CA and certificates into a
//! temporary directory with private modes, refuses to replace a CA, and explains itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn hyperplan(args: &[&str], cert_dir_env: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hyperplan"));
    command.args(args).env_remove("HYPERPLAN_CERT_DIR");
    if let Some(dir) = cert_dir_env {
        command.env("HYPERPLAN_CERT_DIR", dir);
    }
    command.output().unwrap()
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn init_then_issue_writes_private_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("certs");
    let d = dir.to_str().unwrap();

    let out = ok(&hyperplan(
        &[
            "certs",
            "init",
            "--dir",
            d,
            "--planner-host",
            "head01",
            "--planner-host",
            "10.0.0.1",
        ],
        None,
    ));
    assert!(out.contains("head01") && out.contains("10.0.0.1"), "{out}");
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("ca.key")), 0o600);
    assert_eq!(mode(&dir.join("planner.key")), 0o600);
    assert!(dir.join("ca.pem").is_file() && dir.join("planner.pem").is_file());

    let out = ok(&hyperplan(
        &["certs", "issue", "--dir", d, "--node", "n001", "--node", "n002"],
        None,
    ));
    assert!(out.contains("copy to node n001"), "{out}");
    // The directory can come from the environment too.
    ok(&hyperplan(
        &["certs", "issue", "--user", "alice", "--role", "admin"],
        Some(&dir),
    ));
    ok(&hyperplan(
        &["certs", "issue", "--dir", d, "--planner", "--host", "head02"],
        None,
    ));

    for key in ["nodes/n001.key", "nodes/n002.key", "users/alice.key", "planner.key"] {
        assert_eq!(mode(&dir.join(key)), 0o600, "{key}");
    }
    for cert in ["nodes/n001.pem", "nodes/n002.pem", "users/alice.pem"] {
        let text = std::fs::read_to_string(dir.join(cert)).unwrap();
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
    }
    assert_eq!(mode(&dir.join("nodes")), 0o700);
    assert_eq!(mode(&dir.join("users")), 0o700);
}

#[test]
fn init_refuses_to_replace_a_ca_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    ok(&hyperplan(&["certs", "init", "--dir", d], None));
    let key = std::fs::read(tmp.path().join("ca.key")).unwrap();
    let again = hyperplan(&["certs", "init", "--dir", d], None);
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read(tmp.path().join("ca.key")).unwrap(), key);
    ok(&hyperplan(&["certs", "init", "--dir", d, "--force"], None));
    assert_ne!(std::fs::read(tmp.path().join("ca.key")).unwrap(), key);
}

#[test]
fn refusals_are_clear() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    let no_ca = hyperplan(&["certs", "issue", "--dir", d, "--node", "n1"], None);
    assert!(!no_ca.status.success());
    assert!(String::from_utf8_lossy(&no_ca.stderr).contains("hyperplan certs init"));

    ok(&hyperplan(&["certs", "init", "--dir", d], None));
    let bad = hyperplan(&["certs", "issue", "--dir", d, "--node", "../x"], None);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid node name"));
    // --user needs --role; one of --node/--user/--planner is required.
    assert!(
        !hyperplan(&["certs", "issue", "--dir", d, "--user", "bob"], None)
            .status
            .success()
    );
    assert!(!hyperplan(&["certs", "issue", "--dir", d], None).status.success());

    // A bad planner host is caught before a CA is written.
    let fresh = tmp.path().join("fresh");
    let bad_host = hyperplan(
        &[
            "certs",
            "init",
            "--dir",
            fresh.to_str().unwrap(),
            "--planner-host",
            "a_b",
        ],
        None,
    );
    assert!(String::from_utf8_lossy(&bad_host.stderr).contains("invalid planner host name"));
    assert!(!fresh.join("ca.pem").exists());
}

#[test]
fn help_says_what_to_copy_where() {
    for args in [
        &["certs", "--help"][..],
        &["certs", "init", "--help"],
        &["certs", "issue", "--help"],
    ] {
        let out = ok(&hyperplan(args, None));
        assert!(
            out.contains("ca.key") && out.contains("copy it nowhere") && out.contains("nodes/NAME.pem"),
            "{out}"
        );
        assert!(out.contains("/etc/hyperplan/certs"), "{out}");
    }
}
