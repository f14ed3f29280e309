//! End-to-end, issue 12 item 18: `hyperplan certs revoke` writes `revoked.txt` beside the
//! CA; the planner reads it at start and on SIGHUP and refuses revoked certificates with a
//! clear reason and a log line naming the holder — a connected agent included. A
//! certificate issued again after the revocation works; the old one stays refused. A
//! malformed list stops the start, and on SIGHUP it keeps the old list.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Cluster, bin, hyperplan_bin, path_str, wait_for};

const MACHINE: &str = "pack:1 numa:1(memory=17179869184) core:4 pu:1";
const LONG: Duration = Duration::from_secs(60);

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn certs(c: &Cluster, args: &[&str]) -> Output {
    Command::new(hyperplan_bin())
        .arg("certs")
        .args(args)
        .args(["--dir", path_str(&c.certs())])
        .env_remove("HYPERPLAN_CERT_DIR")
        .output()
        .unwrap()
}

fn certs_ok(c: &Cluster, args: &[&str]) -> String {
    let out = certs(c, args);
    assert!(out.status.success(), "certs {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// How many times the planner has loaded the revocation list so far.
fn loads(c: &Cluster) -> usize {
    c.planner_log()
        .lines()
        .filter(|l| l.contains("revocation list loaded"))
        .count()
}

/// Lines where the planner read the revocation list, or failed to.
fn reads(c: &Cluster) -> usize {
    c.planner_log()
        .lines()
        .filter(|l| l.contains("revocation list loaded") || l.contains("revocation list not reloaded"))
        .count()
}

/// SIGHUP, then waits for the planner to have read the list again (or failed to).
fn reload(c: &Cluster, what: &str) {
    let before = reads(c);
    c.signal_planner("HUP");
    wait_for(LONG, what, || (reads(c) > before).then_some(()));
}

/// Copies ca.pem and users/NAME.{pem,key} into a fresh directory of private modes.
fn copy_user(from: &Path, to: &Path, user: &str) {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(to.join("users"))
        .unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for f in [
        "ca.pem".to_string(),
        format!("users/{user}.pem"),
        format!("users/{user}.key"),
    ] {
        std::fs::copy(from.join(&f), to.join(&f)).unwrap();
    }
}

fn cli_in(c: &Cluster, cert_dir: &Path, user: &str, args: &[&str]) -> Output {
    Command::new(hyperplan_bin())
        .args(args)
        .env("HYPERPLAN_PLANNER", &c.addr)
        .env("HYPERPLAN_CERT_DIR", cert_dir)
        .env("HYPERPLAN_USER", user)
        .env("XDG_CONFIG_HOME", c.dir.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn a_revoked_user_certificate_is_refused_after_sighup_and_a_new_one_works() {
    let c = Cluster::start(&[]);
    assert_eq!(loads(&c), 1, "{}", c.planner_log());
    let out = c.cli("alice", &["nodes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The lost laptop's certificate, kept aside to try again later.
    let lost = c.dir.path().join("lost");
    copy_user(&c.certs(), &lost, "alice");

    let said = certs_ok(&c, &["revoke", "--user", "alice"]);
    assert!(said.contains("SIGHUP"), "{said}");
    let list = c.certs().join("revoked.txt");
    let text = std::fs::read_to_string(&list).unwrap();
    assert!(text.lines().any(|l| l.starts_with("user alice ")), "{text}");
    assert_eq!(std::fs::metadata(&list).unwrap().permissions().mode() & 0o777, 0o644);

    reload(&c, "the list read again");
    let out = c.cli("alice", &["nodes"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "a revoked certificate must be refused");
    assert!(err.contains("revoked") && err.contains("alice"), "{err}");
    let log = c.planner_log();
    assert!(
        log.lines()
            .any(|l| l.contains("refused") && l.contains("revoked") && l.contains("alice")),
        "the planner names the holder:\n{log}"
    );
    // Others are untouched.
    let out = c.cli("bob", &["nodes"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // A malformed list on SIGHUP: an error naming file and line, the old list kept.
    let good = std::fs::read_to_string(&list).unwrap();
    std::fs::write(&list, format!("{good}user\n")).unwrap();
    reload(&c, "the bad list reported");
    let log = c.planner_log();
    let at = format!("{}:{}", list.display(), good.lines().count() + 1);
    assert!(
        log.lines().any(|l| l.contains(&at) && l.contains("keeping")),
        "the error names {at}:\n{log}"
    );
    assert!(!c.cli("alice", &["nodes"]).status.success());
    std::fs::write(&list, good).unwrap();

    // Alice's new laptop: a certificate issued after the revocation works, without a
    // reload; the lost one stays refused.
    let said = certs_ok(&c, &["issue", "--user", "alice", "--role", "user"]);
    assert!(said.contains("revoked"), "issue mentions the revocation: {said}");
    let out = c.cli("alice", &["nodes"]);
    assert!(
        out.status.success(),
        "a certificate issued after the revocation: {}",
        stderr(&out)
    );
    let out = cli_in(&c, &lost, "alice", &["nodes"]);
    assert!(!out.status.success(), "the lost certificate stays revoked");
    assert!(stderr(&out).contains("revoked"), "{}", stderr(&out));
}

#[test]
fn a_revoked_node_is_disconnected_on_sighup_and_refused_when_it_comes_back() {
    let mut c = Cluster::start(&["n1", "n2"]);
    c.start_agent("n1", MACHINE, &[]);
    c.start_agent("n2", MACHINE, &[]);
    c.wait_state("n1", "Ready", LONG);
    c.wait_state("n2", "Ready", LONG);

    certs_ok(&c, &["revoke", "--node", "n1"]);
    reload(&c, "the list read again");
    c.wait_state("n1", "NotReady", LONG);
    let log = wait_for(LONG, "the planner naming n1", || {
        let log = c.planner_log();
        log.lines()
            .any(|l| l.contains("refused") && l.contains("revoked") && l.contains("n1"))
            .then_some(log)
    });
    assert!(!log.contains("node n2 is revoked"), "{log}");
    // The agent heard why, and is refused again when it reconnects.
    let agent_log = c.dir.path().join("agent-n1.log");
    wait_for(LONG, "the agent refused twice", || {
        let text = std::fs::read_to_string(&agent_log).unwrap_or_default();
        let refusals = text.lines().filter(|l| l.contains("revoked")).count();
        (refusals >= 2).then_some(())
    });
    assert!(
        c.states().contains(&("n2".to_string(), "Ready".to_string())),
        "{:?}",
        c.states()
    );
}

#[test]
fn the_planner_refuses_to_start_on_a_malformed_revocation_list() {
    let c = Cluster::prepare(&[], None);
    let list = c.certs().join("revoked.txt");
    std::fs::write(&list, "# retired\nnode n9\nfrobnicate n1\n").unwrap();
    let mut child = Command::new(bin("hyperplan-planner"))
        .args(["--listen", "127.0.0.1:0", "--config", "/dev/null", "--cert-dir"])
        .arg(c.certs())
        .arg("--store")
        .arg(c.store())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the planner started on a malformed revocation list");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    let at = format!("{}:3", list.display());
    assert!(err.contains(&at) && err.contains("frobnicate"), "{err}");
}

#[test]
fn revoke_and_unrevoke_edit_the_list_and_refuse_bad_names() {
    let c = Cluster::prepare(&[], None);
    let list = c.certs().join("revoked.txt");
    certs_ok(&c, &["revoke", "--user", "bob", "--node", "n7"]);
    let text = std::fs::read_to_string(&list).unwrap();
    assert!(text.lines().any(|l| l.starts_with("user bob ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("node n7 ")), "{text}");
    let out = certs(&c, &["revoke", "--user", "../x"]);
    assert!(
        !out.status.success() && stderr(&out).contains("invalid user name"),
        "{}",
        stderr(&out)
    );
    certs_ok(&c, &["unrevoke", "--user", "bob"]);
    let text = std::fs::read_to_string(&list).unwrap();
    assert!(!text.contains("user bob"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("node n7 ")), "{text}");
    let out = certs(&c, &["unrevoke", "--user", "carol"]);
    assert!(
        !out.status.success() && stderr(&out).contains("carol"),
        "{}",
        stderr(&out)
    );
}
