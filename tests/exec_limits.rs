//! End-to-end (issue 38, "one local user starves a node"), with the real daemons on
//! 127.0.0.1: another local user holding more connections to the agent's exec socket than
//! it serves at once leaves the job's own `hyperplan exec` working; and a job's steps keep
//! at most the job's bound of output on the node while the caller gets all of it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use common::live::{LONG, Live};
use common::{path_str, wait_for};

/// Connections the intruder holds: more than the 1,024 the exec socket serves at once.
const HELD: usize = 1100;
/// The intruder: an ordinary user with no job.
const INTRUDER: &str = "hp-intruder";

fn text(out: &std::process::Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Not a test of its own: what the intruder runs (this test binary again, as another
/// user, with `HP_HOLD_SOCKET` set; without it, nothing). Connects [`HELD`] times to the
/// socket, says `held N`, and holds them until its standard input closes.
#[test]
fn helper_holds_exec_socket_connections() {
    let Some(socket) = std::env::var_os("HP_HOLD_SOCKET") else {
        return;
    };
    let mut held = Vec::new();
    for _ in 0..HELD {
        match std::os::unix::net::UnixStream::connect(&socket) {
            Ok(s) => held.push(s),
            Err(e) => {
                println!("connect failed after {}: {e}", held.len());
                break;
            }
        }
    }
    println!("held {}", held.len());
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

#[test]
fn another_users_connections_leave_the_jobs_own_exec_working() {
    if !common::euid_is_root() {
        eprintln!("skipped: holding connections as a second user needs root (setpriv)");
        return;
    }
    // The intruder (and the agent) inherit this process' limit on open files.
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let files = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|soft| soft.parse::<usize>().ok())
        .unwrap_or(usize::MAX);
    if files < HELD + 64 {
        eprintln!("skipped: {files} open files allowed, {HELD} connections wanted (ulimit -n)");
        return;
    }
    common::ensure_user(INTRUDER);
    let live = Live::start(&["n1"]);
    let job = live.job(
        "held",
        "tasks:\n  - name: w\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sleep, '300']\n",
    );
    let out = live.cli(&["submit", path_str(&job)]);
    assert!(out.status.success(), "{}", text(&out).2);
    live.wait_running("held");

    // The intruder takes more connections than the socket serves, and holds them.
    let socket = hyperplan_agent::exec::socket_path(&live.state_dir("n1"));
    let mut intruder = Command::new("setpriv")
        .args(["--reuid", INTRUDER, "--regid", INTRUDER, "--init-groups"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "helper_holds_exec_socket_connections",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HP_HOLD_SOCKET", &socket)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Its lines, read aside so that a silent intruder fails the test rather than hangs it
    // (libtest's "test NAME ... " starts the line it says `held N` on).
    let (lines, said) = std::sync::mpsc::channel();
    let stdout = intruder.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let held = loop {
        let line = said.recv_timeout(LONG).expect("the intruder says how many it holds");
        if let Some((_, n)) = line.rsplit_once("held ") {
            break n.trim().parse::<usize>().unwrap();
        }
        assert!(!line.contains("connect failed"), "{line}");
    };
    assert_eq!(held, HELD);
    // The job's own `hyperplan exec` from inside the job (as mpirun's remote
    // shell runs it): a step runs `hyperplan exec` against this node's socket.
    let hyperplan = common::bin("hyperplan");
    let inner = format!("{} exec -- echo inside", path_str(&hyperplan));
    let (code, out, err) = text(&live.cli(&["exec", "held", "--", "sh", "-c", &inner]));
    assert_eq!((code, out.as_str()), (0, "inside\n"), "{err}");

    // The agent closed that user's excess at once, and said so.
    let uid = Command::new("id").args(["-u", INTRUDER]).output().unwrap();
    let uid = String::from_utf8_lossy(&uid.stdout).trim().to_string();
    wait_for(LONG, "the agent closing the intruder's excess connections", || {
        live.agent_log("n1")
            .contains(&format!("exec socket: closed a connection at once: uid {uid} holds"))
            .then_some(())
    });

    drop(intruder.stdin.take());
    let _ = intruder.wait();
}

/// The agent's bound on what one job's steps keep (`exec::kept::BOUNDS`).
const JOB_KEPT: u64 = 256 << 20;
/// What each step writes: under a step's 64 MiB, five of them past the job's bound.
const STEP_WRITES: u64 = 60 << 20;

#[test]
fn a_jobs_steps_keep_at_most_its_bound_on_the_node_and_the_caller_gets_all() {
    let live = Live::start(&["n1"]);
    let job = live.job(
        "big",
        "tasks:\n  - name: w\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sleep, '300']\n",
    );
    let out = live.cli(&["submit", path_str(&job)]);
    assert!(out.status.success(), "{}", text(&out).2);
    live.wait_running("big");
    let writes = STEP_WRITES.to_string();
    for step in 0..5 {
        let out = live.cli(&["exec", "big", "--", "head", "-c", &writes, "/dev/zero"]);
        assert!(out.status.success(), "step {step}: {}", text(&out).2);
        assert_eq!(out.stdout.len() as u64, STEP_WRITES, "step {step}: the caller gets all");
    }
    // What the node kept: the first four steps whole, the fifth cut short, the job's
    // files within its bound.
    let steps = live.state_dir("n1").join("steps");
    let dir = std::fs::read_dir(&steps)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("big."))
        .unwrap()
        .path();
    let sizes: Vec<u64> = (0..5)
        .map(|s| std::fs::metadata(dir.join(format!("{s}.out"))).unwrap().len())
        .collect();
    assert_eq!(&sizes[..4], &[STEP_WRITES; 4], "{sizes:?}");
    assert!(sizes.iter().sum::<u64>() <= JOB_KEPT, "{sizes:?}");
    assert!(sizes[4] < STEP_WRITES, "{sizes:?}");
    // `hyperplan logs` of the cut step ends saying so.
    let out = live.cli(&["logs", "big.4"]);
    assert!(out.status.success(), "{}", text(&out).2);
    assert_eq!(out.stdout.len() as u64, sizes[4]);
    let last = out.stdout.trim_ascii_end().rsplit(|&b| b == b'\n').next().unwrap();
    let last = String::from_utf8_lossy(last);
    assert!(
        last.contains("not kept on this node: a job keeps at most 256 MiB across its steps"),
        "{last}"
    );
}
