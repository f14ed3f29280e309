//! The planner, the agent and the CLI refuse their own certificate material as ssh does:
//! a key readable by others, a certificate directory writable by others, a certificate
//! of another role (an agent's as planner.pem). Each is a start-up error naming the file,
//! never a daemon that runs anyway.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bin, hyperplan_bin};

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs a command that must fail at start; kills it (by its pid) if it is still up
/// after a generous while, which fails the test.
fn run_to_failure(mut command: Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("still running: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    out
}

fn setup(dir: &Path) {
    let out = Command::new(hyperplan_bin())
        .args(["certs", "init", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for who in [&["--node", "n001"][..], &["--user", "alice", "--role", "user"][..]] {
        let out = Command::new(hyperplan_bin())
            .args(["certs", "issue"])
            .args(who)
            .arg("--dir")
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

fn planner(certs: &Path) -> Output {
    let mut command = Command::new(bin("hyperplan-planner"));
    command
        .args(["--listen", "127.0.0.1:0", "--config", "/dev/null", "--cert-dir"])
        .arg(certs)
        .arg("--store")
        .arg(certs.join("state.redb"));
    run_to_failure(command)
}

fn agent(certs: &Path) -> Output {
    let mut command = Command::new(bin("hyperplan-agent"));
    command
        .args([
            "run",
            "--planner",
            "127.0.0.1:9",
            "--node",
            "n001",
            "--synthetic",
            "pack:1 core:2 pu:1",
        ])
        .arg("--cert-dir")
        .arg(certs);
    run_to_failure(command)
}

fn cli(certs: &Path) -> Output {
    let mut command = Command::new(hyperplan_bin());
    command
        .args(["status", "--planner", "127.0.0.1:9", "--user", "alice", "--cert-dir"])
        .arg(certs)
        .env_remove("HYPERPLAN_PLANNER");
    run_to_failure(command)
}

fn says(out: &Output, file: &Path, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(stderr.contains(what), "{stderr}");
}

#[test]
fn keys_readable_by_others_are_refused_by_planner_agent_and_cli() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path();
    setup(certs);
    let planner_key = certs.join("planner.key");
    chmod(&planner_key, 0o644);
    says(&planner(certs), &planner_key, "0644");
    let node_key = certs.join("nodes/n001.key");
    chmod(&node_key, 0o640);
    says(&agent(certs), &node_key, "0640");
    let user_key = certs.join("users/alice.key");
    chmod(&user_key, 0o604);
    says(&cli(certs), &user_key, "0604");
}

#[test]
fn a_world_writable_certificate_directory_is_refused_by_the_planner() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    fs::create_dir(&certs).unwrap();
    setup(&certs);
    chmod(&certs, 0o777);
    says(&planner(&certs), &certs, "writable by others");
}

#[test]
fn an_agent_certificate_as_planner_pem_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path();
    setup(certs);
    fs::copy(certs.join("nodes/n001.pem"), certs.join("planner.pem")).unwrap();
    fs::copy(certs.join("nodes/n001.key"), certs.join("planner.key")).unwrap();
    says(&planner(certs), &certs.join("planner.pem"), "role agent");
}
