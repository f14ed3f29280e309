//! `hyperplan simulate --swf`: a Parallel Workloads Archive log replayed on the bench's
//! cluster (`examples/kth-sp2-cluster.yaml`), its figures, and the errors a log or the
//! command line can give. They run the real binary.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

const KTH: &str = "testdata/traces/KTH-SP2-1996-2.1-cln.swf";
const CLUSTER: &str = "examples/kth-sp2-cluster.yaml";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `hyperplan ARGS` in `dir`; a run that has not ended after 60 s is killed and fails
/// the test (a FIFO opened for reading would block for ever).
fn hyperplan_in(dir: &Path, args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_hyperplan"))
        .current_dir(dir)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run hyperplan: {e}"));
    // A watchdog instead of polling: it kills the process if it is still running after
    // 60 s (a FIFO that blocked it, say); the wait below ends when the process does.
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let pid = child.id().to_string();
    let watchdog = std::thread::spawn(move || {
        let late = finished.recv_timeout(Duration::from_secs(60)).is_err();
        if late {
            let _ = Command::new("kill").args(["-9", &pid]).status();
        }
        late
    });
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("reading hyperplan's output: {e}"));
    let _ = done.send(());
    assert!(
        !watchdog.join().unwrap_or(true),
        "hyperplan {args:?} still running after 60 s"
    );
    output
}

fn hyperplan(args: &[&str]) -> Output {
    hyperplan_in(root(), args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

/// A failure with exit code `code`, nothing on stdout; its stderr.
fn failure(out: &Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "no partial result on error: {}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

fn replay(topology: &str) -> Value {
    replay_with(topology, &[])
}

/// As [`replay`], with more arguments.
fn replay_with(topology: &str, more: &[&str]) -> Value {
    let args = [
        "simulate",
        "--swf",
        KTH,
        "--cluster",
        CLUSTER,
        "--jobs",
        "300",
        "--topology",
        topology,
        "--output",
        "json",
    ];
    json(&hyperplan(&[&args[..], more].concat()))
}

#[test]
fn kth_log_replays_and_prints_its_credit_and_figures() {
    let out = hyperplan(&["simulate", "--swf", KTH, "--cluster", CLUSTER, "--jobs", "300"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let table = text(&out.stdout);
    for needle in [
        "log: testdata/traces/KTH-SP2-1996-2.1-cln.swf (IBM SP2, Swedish Royal Institute of Technology (KTH))",
        "acknowledge: Lars Malinowsky",
        "jobs: 300 read, 300 replayed, 0 skipped",
        "100 nodes, leaves of up to 10 nodes; topology hard",
        "jobs started                            300 of 300",
        "mean wait",
        "p95 wait",
        "max wait",
        "bounded slowdown (τ = 10 s)",
        "utilisation",
        "leaves per multi-node job",
        "leaf-sized multi-node jobs in one leaf  100.0 %",
    ] {
        assert!(table.contains(needle), "missing {needle:?} in:\n{table}");
    }
    let v = replay("hard");
    assert_eq!(v["acknowledge"], "Lars Malinowsky");
    assert_eq!((v["jobsRead"].as_u64(), v["replayed"].as_u64()), (Some(300), Some(300)));
    assert_eq!((v["nodes"].as_u64(), v["leafSize"].as_u64()), (Some(100), Some(10)));
    let m = &v["metrics"];
    assert_eq!(m["started"], 300, "{m}");
    let figure = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {m}"));
    assert!(
        figure("meanWait") > 0.0 && figure("p95Wait") >= figure("meanWait"),
        "{m}"
    );
    assert!(figure("maxWait") >= figure("p95Wait"), "{m}");
    assert!(figure("boundedSlowdown") >= 1.0, "{m}");
    assert!(figure("utilisation") > 0.0 && figure("utilisation") <= 1.0, "{m}");
    assert_eq!(
        figure("leafSizedInOneLeaf"),
        1.0,
        "hard topology: a leaf-sized job gets one leaf"
    );
}

#[test]
fn without_topology_jobs_spread_over_more_leaves() {
    let (hard, none) = (replay("hard"), replay("none"));
    let leaves = |v: &Value| v["metrics"]["leavesPerJob"].as_f64().unwrap_or_else(|| panic!("{v}"));
    let in_one = |v: &Value| {
        v["metrics"]["leafSizedInOneLeaf"]
            .as_f64()
            .unwrap_or_else(|| panic!("{v}"))
    };
    assert_eq!(none["topology"], "none");
    assert!(
        leaves(&none) > leaves(&hard),
        "none {} vs hard {}",
        leaves(&none),
        leaves(&hard)
    );
    assert!(
        in_one(&none) < in_one(&hard),
        "none {} vs hard {}",
        in_one(&none),
        in_one(&hard)
    );
}

/// `--topology leaf`: every leaf-sized job still gets one leaf, as with `hard`, and the
/// wider jobs are not held to one spine; the yardstick asks the same.
#[test]
fn leaf_topology_keeps_leaf_sized_jobs_in_one_leaf_and_lets_wide_jobs_span_spines() {
    let (hard, leaf) = (replay("hard"), replay("leaf"));
    assert_eq!(leaf["topology"], "leaf");
    assert_eq!(leaf["metrics"]["leafSizedInOneLeaf"], 1.0, "{leaf}");
    assert_eq!(leaf["metrics"]["started"], 300, "{leaf}");
    let wait = |v: &Value| v["metrics"]["meanWait"].as_f64().unwrap_or_else(|| panic!("{v}"));
    assert!(
        wait(&leaf) <= wait(&hard),
        "leaf {} vs hard {}",
        wait(&leaf),
        wait(&hard)
    );
    let v = replay_with("leaf", &["--baselines"]);
    let b = &v["baselines"]["topologyAwareEasy"];
    assert_eq!(b["leafSizedInOneLeaf"], 1.0, "{b}");
    assert_eq!(b["started"], 300, "{b}");
}

#[test]
fn a_bad_log_is_an_error_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cluster = root().join(CLUSTER);
    let cluster = cluster.to_str().unwrap_or_else(|| panic!("path"));
    let header = "; Computer: test\n";
    let good = "1 0 0 60 2 -1 -1 2 120 -1 1 1 1 -1 -1 -1 -1 -1\n";
    for (body, expected) in [
        // Cut off in the middle of a job line.
        (
            format!("{header}{good}2 10 0 60"),
            "bad.swf:3: expected 18 fields, got 4",
        ),
        (
            format!("{header}{good}{}", good.replace("60 2", "sixty 2")),
            "bad.swf:3: field 4 (run time): expected an integer (or -1 for unknown), got \"sixty\"",
        ),
        (
            "garbage\u{0}\u{1}\n".to_string(),
            "bad.swf:1: expected 18 fields, got 1",
        ),
        (header.to_string(), "bad.swf: no jobs"),
    ] {
        std::fs::write(dir.path().join("bad.swf"), &body).unwrap_or_else(|e| panic!("{e}"));
        let out = hyperplan_in(dir.path(), &["simulate", "--swf", "bad.swf", "--cluster", cluster]);
        let err = failure(&out, 1);
        assert!(err.starts_with(&format!("hyperplan: {expected}")), "{body:?}: {err}");
    }
}

#[test]
fn a_fifo_as_the_log_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let fifo = dir.path().join("log.swf");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    let cluster = root().join(CLUSTER);
    let cluster = cluster.to_str().unwrap_or_else(|| panic!("path"));
    let out = hyperplan_in(
        dir.path(),
        &["simulate", "--swf", "log.swf", "--cluster", cluster, "--jobs", "10"],
    );
    let err = failure(&out, 1);
    assert!(
        err.contains("log.swf: not a regular file (a FIFO); expected an SWF log file"),
        "{err}"
    );
}

#[test]
fn job_files_and_swf_do_not_mix() {
    let out = hyperplan(&[
        "simulate",
        "--swf",
        KTH,
        "--cluster",
        CLUSTER,
        "--jobs",
        "examples/jobs.yaml",
    ]);
    let err = failure(&out, 2);
    assert!(err.contains("job files and '--swf' do not mix"), "{err}");
    let out = hyperplan(&[
        "simulate",
        "--swf",
        KTH,
        "--cluster",
        CLUSTER,
        "--jobs",
        "3",
        "--jobs",
        "4",
    ]);
    assert!(failure(&out, 2).contains("several '--jobs'"));
    let out = hyperplan(&["simulate", "--swf", KTH, "--cluster", CLUSTER, "--output", "tasks"]);
    assert!(failure(&out, 2).contains("'--output tasks' cannot be used with '--swf <LOG>'"));
    // Log options need a log; a count without one is no job file.
    let out = hyperplan(&[
        "simulate",
        "--cluster",
        CLUSTER,
        "--jobs",
        "examples/jobs.yaml",
        "--topology",
        "none",
    ]);
    assert!(failure(&out, 2).contains("--swf <LOG>"));
    let out = hyperplan(&["simulate", "--cluster", CLUSTER, "--jobs", "300"]);
    assert!(failure(&out, 1).contains("--jobs 300: no such job file"));
    let out = hyperplan(&["simulate", "--swf", KTH, "--cluster", CLUSTER, "--time-scale", "0"]);
    assert!(failure(&out, 2).contains("expected a number above 0"));
}

#[test]
fn help_teaches_the_replay() {
    let out = hyperplan(&["simulate", "--help"]);
    let help = text(&out.stdout);
    for needle in [
        "--swf <LOG>",
        "--jobs <FILE|N>",
        "--topology <TOPOLOGY>",
        "--time-scale <F>",
        "--procs-per-node <P>",
        "--noise <K>",
        "--soft-after <TIME>",
        "Standard Workload Format",
        "job files and `--swf` do not mix",
        "examples/kth-sp2-cluster.yaml",
    ] {
        assert!(help.contains(needle), "missing {needle} in:\n{help}");
    }
}

/// The first 300 jobs of the KTH log on the bench's cluster.
const KTH_300: &[&str] = &["simulate", "--swf", KTH, "--cluster", CLUSTER, "--jobs", "300"];

/// Runs `hyperplan ARGS`, which must succeed, and returns its table, which must hold
/// every one of `needles`.
fn table_with(args: &[&str], needles: &[&str]) -> String {
    let out = hyperplan(args);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let table = text(&out.stdout);
    for needle in needles {
        assert!(table.contains(needle), "missing {needle:?} in:\n{table}");
    }
    table
}

/// `--baselines`: EASY and the topology-aware EASY on the same jobs, beside hyperplan, in
/// the table and in JSON; the tree is read from the cluster. Without it the JSON has no
/// `baselines`, and it does not mix with several log processors per node.
#[test]
fn baselines_replay_the_same_jobs_under_easy_and_a_topology_aware_easy() {
    let args = [KTH_300, &["--baselines"]].concat();
    table_with(
        &args,
        &[
            "FIGURE                                  HYPERPLAN",
            "EASY",
            "TOPOLOGY-AWARE EASY",
            "topology-aware EASY on 2 spine(s) of 5 leaves of 10 nodes",
        ],
    );
    let v = json(&hyperplan(&[&args[..], &["--output", "json"]].concat()));
    let b = &v["baselines"];
    assert_eq!(b["easy"]["started"], 300, "{b}");
    assert_eq!(b["topologyAwareEasy"]["started"], 300, "{b}");
    assert_eq!(b["topologyAwareEasy"]["leafSizedInOneLeaf"], 1.0, "{b}");
    assert_eq!(b["tree"], serde_json::json!([10, 5, 2]));
    assert!(b["easy"]["leavesPerJob"].is_null(), "EASY knows no leaves: {b}");
    assert!(replay("hard").get("baselines").is_none());
    let err = failure(&hyperplan(&[&args[..], &["--procs-per-node", "2"]].concat()), 2);
    assert!(
        err.contains("'--baselines' cannot be used with '--procs-per-node' above 1"),
        "{err}"
    );
}

/// `--noise K`: the run and K copies with submits 0–1 s later, each column's lowest and
/// highest mean and longest wait, in the table and in JSON; the run's own figures lie
/// inside them, and 0 or 101 copies are usage errors.
#[test]
fn noise_shows_how_far_the_figures_move_by_chance() {
    let args = [KTH_300, &["--baselines", "--noise", "2"]].concat();
    table_with(
        &args,
        &[
            "mean wait, 3 runs 0–1 s apart",
            "max wait, 3 runs 0–1 s apart",
            "noise: the jobs again 2 time(s), each job submitted 0 or 1 s later",
            "hyperplan against EASY, run by run: mean wait at or below in ",
        ],
    );
    let v = json(&hyperplan(&[&args[..], &["--output", "json"]].concat()));
    let n = &v["noise"];
    assert_eq!(n["copies"], 2, "{n}");
    for (column, figures) in [
        ("hyperplan", &v["metrics"]),
        ("easy", &v["baselines"]["easy"]),
        ("topologyAwareEasy", &v["baselines"]["topologyAwareEasy"]),
    ] {
        let s = &n[column];
        assert_eq!(s["runs"], 3, "{column}: {s}");
        let num = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("{column}: not a number: {v}"));
        for key in ["meanWait", "maxWait"] {
            let (lo, hi, at) = (num(&s[key][0]), num(&s[key][1]), num(&figures[key]));
            assert!(lo <= at && at <= hi, "{column}: {key} {at} outside {s}");
        }
    }
    // Run by run against EASY on the same copy: counts out of the 3 runs, and the
    // unshifted run's own comparison among them.
    let p = &n["againstEasy"];
    let count = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {p}"));
    assert_eq!(count("runs"), 3, "{p}");
    assert!(
        count("both") <= count("meanAtOrBelow").min(count("maxAtOrBelow")),
        "{p}"
    );
    assert!(count("meanAtOrBelow").max(count("maxAtOrBelow")) <= 3, "{p}");
    let num = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    let unshifted_mean = num(&v["metrics"]["meanWait"]) <= num(&v["baselines"]["easy"]["meanWait"]);
    assert!(count("meanAtOrBelow") >= u64::from(unshifted_mean), "{p}");
    assert!(count("meanAtOrBelow") < 3 || unshifted_mean, "{p}");
    // Without --baselines, hyperplan's spread alone.
    let v = json(&hyperplan(
        &[&args[..7], &["--noise", "1", "--output", "json"]].concat(),
    ));
    assert_eq!(v["noise"]["hyperplan"]["runs"], 2, "{}", v["noise"]);
    assert!(v["noise"].get("easy").is_none(), "{}", v["noise"]);
    assert!(v["noise"].get("againstEasy").is_none(), "{}", v["noise"]);
    for bad in ["0", "101"] {
        let err = failure(&hyperplan(&[&args[..8], &["--noise", bad]].concat()), 2);
        assert!(err.contains("--noise <K>"), "{err}");
    }
}

/// `--soft-after TIME`: a leaf-sized job that waited TIME for one leaf takes any nodes,
/// and the table and JSON say so; it needs hard asks and a duration above zero.
#[test]
fn soft_after_lets_long_waiting_jobs_span_leaves_and_shows_what_it_cost() {
    let hard = replay("leaf");
    let v = replay_with("leaf", &["--soft-after", "1m"]);
    assert_eq!(v["softAfter"], 60, "{v}");
    assert!(hard.get("softAfter").is_none(), "{hard}");
    let in_one = |v: &Value| {
        v["metrics"]["leafSizedInOneLeaf"]
            .as_f64()
            .unwrap_or_else(|| panic!("{v}"))
    };
    assert_eq!(in_one(&hard), 1.0, "{hard}");
    assert!(
        in_one(&v) < 1.0,
        "after a minute's wait some leaf-sized jobs span leaves: {v}"
    );
    assert_eq!(v["metrics"]["started"], 300, "{v}");
    table_with(
        &[KTH_300, &["--topology", "leaf", "--soft-after", "1m"]].concat(),
        &["topology leaf (soft after 1m)"],
    );
    let err = failure(&hyperplan(&[KTH_300, &["--soft-after", "0"]].concat()), 2);
    assert!(
        err.contains("--soft-after <TIME>") && err.contains("above 0 seconds"),
        "{err}"
    );
    let err = failure(
        &hyperplan(&[KTH_300, &["--topology", "none", "--soft-after", "1h"]].concat()),
        2,
    );
    assert!(
        err.contains("cannot be used with '--topology soft' or '--topology none'"),
        "{err}"
    );
}
