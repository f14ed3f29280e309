//! End-to-end: faults of the planner's store file (issue 21). Real `hyperplan-planner`
//! and `hyperplan` binaries on 127.0.0.1, real files: an empty store and a store removed
//! under a running planner stop the start (unless `--init`); a byte changed inside a
//! record is an error naming the job at `--check`, `state export` and start; `state
//! import` refuses ids at the top of the range and jobs a start would not load; a store
//! cut short, or on a read-only mount, is said to be so (never "damaged, move it aside").
//! Issue 37: a store belongs to the cluster of the CA of the planner that first wrote it,
//! and a planner of another CA refuses it (`--check` says so); `state import` refuses
//! another cluster's export unless `--force`; every offer of `--init` says that it
//! forgets every job.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Cluster, bin, path_str, wait_for};

const LONG: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `hyperplan-planner ARGS` on `store` (no config file).
fn planner(store: &Path, args: &[&str]) -> Output {
    Command::new(bin("hyperplan-planner"))
        .args(["--config", "/dev/null", "--store"])
        .arg(store)
        .args(args)
        .output()
        .unwrap()
}

/// A start of the planner on `c`'s store that must fail: its stderr.
fn refused_start(c: &Cluster) -> String {
    let out = planner(
        &c.store(),
        &["--listen", "127.0.0.1:0", "--cert-dir", path_str(&c.certs())],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Starts the planner of `c` with `--init` (as `Cluster::start_planner`, one flag more).
fn start_with_init(c: &mut Cluster) {
    let log = std::fs::File::create(c.dir.path().join("planner.log")).unwrap();
    let mut child = Command::new(bin("hyperplan-planner"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--init",
            "--tick-interval",
            "0.2",
            "--cert-dir",
        ])
        .arg(c.certs())
        .args(["--config", "/dev/null", "--store"])
        .arg(c.store())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    c.addr = line
        .trim()
        .strip_prefix("hyperplan-planner listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}; log: {}", c.planner_log()))
        .to_string();
    c.planner = Some(child);
}

/// A cluster without nodes whose store holds job `name` (alice's), planner stopped.
fn store_with_job(name: &str) -> Cluster {
    let c = Cluster::start(&[]);
    let file = c.write(
        &format!("{name}.yaml"),
        &format!("name: {name}\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n"),
    );
    let out = c.cli("alice", &["submit", path_str(&file)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c
}

/// The error line of `stderr` (not the log lines before it), `c`'s directory as `[DIR]`.
fn redact(c: &Cluster, stderr: &str) -> String {
    let line = stderr
        .lines()
        .filter(|l| l.starts_with("hyperplan-planner: ") || !l.contains(" INFO "))
        .collect::<Vec<_>>()
        .join("\n");
    line.replace(path_str(c.dir.path()), "[DIR]")
}

#[test]
fn an_empty_store_stops_the_start_naming_the_file_and_init() {
    let mut c = store_with_job("one");
    c.stop_planner();
    std::fs::write(c.store(), b"").unwrap();

    let err = refused_start(&c);
    assert!(err.contains(path_str(&c.store())), "{err}");
    insta::assert_snapshot!("empty_store_start", redact(&c, &err));
    let out = planner(&c.store(), &["--check"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("FAILING"), "{stdout}");
    assert!(stdout.contains("the store is empty (0 bytes)"), "{stdout}");

    // Told --init, it begins an empty store: its epoch above the lost one's.
    start_with_init(&mut c);
    assert!(c.jobs("alice", &["--all"]).is_empty());
    c.stop_planner();
    let out = planner(&c.store(), &["--check"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("ok: format 3, epoch 2,"), "{stdout}");
}

#[test]
fn a_store_removed_under_a_running_planner_stops_it_and_the_restart_refuses() {
    let mut c = store_with_job("before");
    std::fs::remove_file(c.store()).unwrap();

    // The next submit is not acknowledged: the planner stops (exit 1) instead.
    let file = c.write(
        "after.yaml",
        "name: after\ntasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n",
    );
    let out = c.cli("alice", &["submit", path_str(&file)]);
    assert!(!out.status.success(), "acknowledged into a removed store");
    let status = wait_for(LONG, "the planner to exit", || {
        c.planner.as_mut().unwrap().try_wait().unwrap()
    });
    c.planner = None;
    assert_eq!(status.code(), Some(1), "{}", c.planner_log());
    let log = c.planner_log();
    assert!(
        log.contains(&format!("{}: the store file was removed", path_str(&c.store()))),
        "{log}"
    );

    // Started again (as systemd would), it refuses: the marker says a store was there.
    let err = refused_start(&c);
    assert!(err.contains(path_str(&c.store())), "{err}");
    insta::assert_snapshot!("missing_store_start", redact(&c, &err));
    let out = planner(&c.store(), &["--check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("the store is missing"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_flipped_byte_in_a_record_is_an_error_naming_the_job_at_check_export_and_start() {
    let mut c = store_with_job("flipme-7c1e");
    c.stop_planner();
    // Every copy of the job's name in the file (redb may keep an older page) gets one bit
    // flipped: "flipme-7c1e" becomes "flipme-7c1d".
    let mut bytes = std::fs::read(c.store()).unwrap();
    let needle = b"flipme-7c1e";
    let mut flipped = 0;
    for i in 0..bytes.len() - needle.len() {
        if &bytes[i..i + needle.len()] == needle {
            bytes[i + needle.len() - 1] ^= 0x01;
            flipped += 1;
        }
    }
    assert!(flipped > 0, "the job's name is not in the file");
    std::fs::write(c.store(), &bytes).unwrap();

    let named = "live job 1 cannot be read: checksum mismatch";
    let out = planner(&c.store(), &["--check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains(named), "{}", text(&out.stdout));
    let export = c.dir.path().join("backup.jsonl");
    let out = planner(&c.store(), &["state", "export", path_str(&export)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(named), "{}", text(&out.stderr));
    let err = refused_start(&c);
    assert!(err.contains(named), "{err}");
    assert!(!err.contains("flipme-7c1d"), "{err}");
}

#[test]
fn import_refuses_ids_at_the_top_of_the_range_and_two_live_jobs_of_one_name() {
    let mut c = store_with_job("dup");
    c.stop_planner();
    let export = c.dir.path().join("backup.jsonl");
    let out = planner(&c.store(), &["state", "export", path_str(&export)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let exported = std::fs::read_to_string(&export).unwrap();
    let mut lines = exported.lines();
    let (header, job) = (lines.next().unwrap(), lines.next().unwrap());
    assert!(job.contains("\"id\":1,"), "{job}");
    let copy = c.dir.path().join("copy.redb");
    let import = |name: &str, body: String| {
        let file = c.write(name, &body);
        let out = planner(&copy, &["state", "import", path_str(&file)]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        text(&out.stderr)
    };

    let top = job.replacen("\"id\":1,", &format!("\"id\":{},", u64::MAX), 1);
    let err = import("top.jsonl", format!("{header}\n{top}\n"));
    assert!(
        err.contains("top.jsonl:2: job \"dup\" has id 18446744073709551615"),
        "{err}"
    );
    insta::assert_snapshot!("import_top_id", redact(&c, &err));

    let twin = job.replacen("\"id\":1,", "\"id\":2,", 1);
    let err = import("twins.jsonl", format!("{header}\n{job}\n{twin}\n"));
    insta::assert_snapshot!("import_twins", redact(&c, &err));
    // Nothing was imported.
    let out = planner(&copy, &["--check"]);
    assert!(text(&out.stdout).contains("0 live job(s)"), "{}", text(&out.stdout));
}

#[test]
fn a_store_cut_short_or_on_a_read_only_mount_is_said_so() {
    let mut c = store_with_job("cut");
    c.stop_planner();
    // Cut short by 100 bytes (a partial copy): --check and export say so, as a start does.
    let cut = c.dir.path().join("cut.redb");
    let bytes = std::fs::read(c.store()).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    for args in [&["--check"][..], &["state", "export", "-"][..]] {
        let out = planner(&cut, args);
        // --check reports on stdout, export fails on stderr.
        let err = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("cut short"), "{args:?}: {err}");
    }
    let err = planner(&cut, &["--listen", "127.0.0.1:0", "--cert-dir", path_str(&c.certs())]);
    let err = text(&err.stderr);
    assert!(err.contains("truncated"), "{err}");

    // The store's directory read-only, in a mount namespace of the planner's own.
    if !common::euid_is_root() {
        println!("SKIPPED (read-only half): needs root for a mount namespace");
        return;
    }
    let dir = path_str(c.dir.path()).to_string();
    let in_ro = |args: &[&str]| {
        Command::new("unshare")
            .args(["-m", "sh", "-c"])
            .arg(format!(
                "mount --bind {dir} {dir} && mount -o remount,ro,bind {dir} || exit 97; exec \"$@\""
            ))
            .arg("sh")
            .arg(bin("hyperplan-planner"))
            .args(["--config", "/dev/null", "--store"])
            .arg(c.store())
            .args(args)
            .output()
            .unwrap()
    };
    let out = in_ro(&["--check"]);
    if out.status.code() == Some(97) || !out.status.success() && text(&out.stderr).contains("unshare") {
        println!(
            "SKIPPED (read-only half): no mount namespace here: {}",
            text(&out.stderr)
        );
        return;
    }
    assert!(
        out.status.success(),
        "--check reads a read-only store: {}",
        text(&out.stderr)
    );
    let out = in_ro(&["--listen", "127.0.0.1:0", "--cert-dir", path_str(&c.certs())]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("Read-only file system") && err.contains("mount it read-write"),
        "{err}"
    );
    assert!(!err.contains("damaged"), "not called damaged: {err}");
    // And nothing was moved aside: the store is as it was.
    let out = planner(&c.store(), &["--check"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The cluster (CA fingerprint) of the certificates in `dir`.
fn fingerprint(dir: &Path) -> String {
    hyperplan_planner::store::Cluster::from_ca_file(&dir.join("ca.pem"))
        .unwrap()
        .fingerprint
}

#[test]
fn a_planner_of_another_cluster_refuses_the_store_naming_both_cas_and_touches_nothing() {
    let mut c = store_with_job("ours");
    c.stop_planner();
    let other = common::foreign_user_certs();
    let (ours, theirs) = (fingerprint(&c.certs()), fingerprint(other.path()));

    let out = planner(
        &c.store(),
        &["--listen", "127.0.0.1:0", "--cert-dir", path_str(other.path())],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{}: the store belongs to another cluster",
            path_str(&c.store())
        )),
        "{err}"
    );
    assert!(err.contains(&ours) && err.contains(&theirs), "{err}");
    assert!(
        err.contains("of its own") && err.contains("with the CA of the cluster that owns the store"),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");

    // --check says it with the same certificates, and is fine with the right ones: the
    // refused start changed nothing (the epoch of the one start, the job).
    let out = planner(&c.store(), &["--check", "--cert-dir", path_str(other.path())]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("FAILING: the store belongs to another cluster"),
        "{stdout}"
    );
    let out = planner(&c.store(), &["--check", "--cert-dir", path_str(&c.certs())]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("cluster: CA SHA-256 {ours} (this planner's ca.pem: the same)")),
        "{stdout}"
    );
    assert!(stdout.contains("ok: format 3, epoch 1, 1 live job(s)"), "{stdout}");

    // The cluster's own planner starts on it with its job.
    c.start_planner("127.0.0.1:0");
    assert_eq!(c.jobs("alice", &["--all"]).len(), 1);
}

#[test]
fn import_refuses_another_clusters_export_unless_forced() {
    let mut c = store_with_job("theirs");
    c.stop_planner();
    let export = c.dir.path().join("backup.jsonl");
    let out = planner(&c.store(), &["state", "export", path_str(&export)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let header = std::fs::read_to_string(&export).unwrap();
    let (exported, other) = (fingerprint(&c.certs()), common::foreign_user_certs());
    let ours = fingerprint(other.path());
    assert!(
        header
            .lines()
            .next()
            .unwrap()
            .contains(&format!("\"caSha256\":\"{exported}\"")),
        "{header}"
    );

    let copy = c.dir.path().join("copy.redb");
    let import = |extra: &[&str]| {
        let mut args = vec!["--cert-dir", path_str(other.path()), "state", "import"];
        args.extend_from_slice(extra);
        args.push(path_str(&export));
        planner(&copy, &args)
    };
    let out = import(&[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("backup.jsonl:1: the export is of another cluster"),
        "{err}"
    );
    assert!(
        err.contains(&exported) && err.contains(&ours) && err.contains("--force"),
        "{err}"
    );
    let out = planner(&copy, &["--check"]);
    assert!(text(&out.stdout).contains("0 live job(s)"), "{}", text(&out.stdout));

    let out = import(&["--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("imported 1 job(s)"), "{}", text(&out.stderr));
    // The store is the importing cluster's now.
    let out = planner(&copy, &["--check", "--cert-dir", path_str(other.path())]);
    assert!(out.status.success(), "{}", text(&out.stdout));

    // --help says it.
    let out = planner(&copy, &["state", "import", "--help"]);
    let help = text(&out.stdout);
    assert!(help.contains("--force") && help.contains("another cluster"), "{help}");
}
