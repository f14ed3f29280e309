//! End-to-end: `hyperplan exec` into running jobs, with the real daemons on 127.0.0.1:
//! exit codes, standard input, `--all`, the refusals a person can act on, and a killed
//! `hyperplan exec` taking its remote command with it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::live::{LONG, Live};
use common::{path_str, wait_for};

fn text(out: &std::process::Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Processes whose command line contains `needle`.
fn procs_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).replace('\0', " ").contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// The step of `job` (its status JSON) whose command contains `needle`.
fn step_with(job: &serde_json::Value, needle: &str) -> Option<serde_json::Value> {
    job["steps"]
        .as_array()?
        .iter()
        .find(|s| s["command"].as_str().is_some_and(|c| c.contains(needle)))
        .cloned()
}

#[test]
fn exec_runs_in_a_running_job_with_its_exit_code_input_and_nodes() {
    // Two nodes for the job, one for another job that tries to get in.
    let live = Live::start(&["n1", "n2", "n3"]);
    let job = live.job(
        "held",
        "tasks:\n  - name: w\n    replicas: 2\n    resources: {cpu: 2}\n    workingDir: WORKDIR\n    \
         command: [sleep, '300']\n",
    );
    let out = live.cli(&["submit", path_str(&job)]);
    assert!(out.status.success(), "{}", text(&out).2);
    let j = live.wait_running("held");
    let rank0 = j["tasks"].as_array().unwrap().iter().find(|t| t["rank"] == 0).unwrap()["node"]
        .as_str()
        .unwrap()
        .to_string();

    // The exit code, the environment and user of the job's task, on rank 0's node.
    let (code, out, err) = text(&live.cli(&[
        "exec",
        "held",
        "--",
        "sh",
        "-c",
        "echo \"$HYPERPLAN_NODE $HYPERPLAN_JOB $(id -un) $(pwd)\"; echo oops >&2; exit 7",
    ]));
    assert_eq!(code, 7, "{out}{err}");
    assert_eq!(
        out,
        format!("{rank0} held {} {}\n", live.user, path_str(live.work.path()))
    );
    assert_eq!(err, "oops\n");

    // Standard input reaches it; ssh-like words without `--`.
    let mut child = live
        .c
        .cli_command(&live.user, &["exec", "held", "wc", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let (code, out, err) = text(&child.wait_with_output().unwrap());
    assert_eq!((code, out.trim()), (0, "6"), "{err}");

    // Every node at once, each line named.
    let (code, out, err) = text(&live.cli(&["exec", "--all", "held", "--", "sh", "-c", "echo $HYPERPLAN_NODE"]));
    assert_eq!(code, 0, "{err}");
    let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
    lines.sort_unstable();
    let mut nodes: Vec<String> = j["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["node"].as_str().unwrap().to_string())
        .collect();
    nodes.sort_unstable();
    assert_eq!(lines, nodes.iter().map(|n| format!("{n}: {n}")).collect::<Vec<_>>());

    // Each exec was a step; its output is kept on its nodes (`JOB.STEP`).
    let (code, out, err) = text(&live.cli(&["logs", "held.0"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("{rank0} held ")) && out.contains("oops\n"),
        "{out}"
    );
    for n in &nodes {
        let (code, out, err) = text(&live.cli(&["logs", "held.2", "--node", n]));
        assert_eq!((code, out.as_str()), (0, format!("{n}\n").as_str()), "{err}");
    }
    let (code, _, err) = text(&live.cli(&["logs", "held.9"]));
    assert_ne!(code, 0);
    assert!(err.contains("job held has no step 9 (its steps: 0,1,2)"), "{err}");
    let (code, _, err) = text(&live.c.cli("bob", &["logs", "held.0"]));
    assert_ne!(code, 0);
    assert!(err.contains("only its owner or an admin"), "{err}");

    // Each step's record (`status --output json`): its nodes, command, when it began
    // and ended, and how (the planner hears the end as the exec session closes, which
    // may be just after the CLI exits).
    let steps = wait_for(LONG, "the three steps' ends in held's record", || {
        let steps = live.status("held")["steps"].as_array().cloned().unwrap_or_default();
        (steps.len() == 3 && steps.iter().all(|s| s["endTime"].is_u64())).then_some(steps)
    });
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["step"], i as u64, "{s}");
        let (begin, end) = (s["startTime"].as_u64().unwrap(), s["endTime"].as_u64().unwrap());
        assert!(begin <= end && begin > 1_600_000_000, "{s}");
        assert!(s["signal"].is_null(), "{s}");
    }
    assert_eq!(steps[0]["exitCode"], 7, "{}", steps[0]);
    assert_eq!(steps[0]["nodes"], serde_json::json!([rank0]));
    let command = steps[0]["command"].as_str().unwrap();
    assert!(command.starts_with("sh -c echo \"$HYPERPLAN_NODE"), "{command}");
    assert_eq!(
        (&steps[1]["exitCode"], &steps[1]["command"]),
        (&0.into(), &"wc -c".into())
    );
    assert_eq!(steps[2]["exitCode"], 0, "{}", steps[2]);
    assert_eq!(steps[2]["nodes"].as_array().unwrap().len(), 2, "{}", steps[2]);

    // Refusals a person can act on.
    let (code, _, err) = text(&live.cli(&["exec", "--node", "n9", "held", "--", "true"]));
    assert_eq!(code, 1);
    assert!(err.contains("node n9 holds no task of job held"), "{err}");
    let spare = ["n1", "n2", "n3"]
        .into_iter()
        .find(|n| !nodes.iter().any(|m| m == n))
        .unwrap();
    let (code, _, err) = text(&live.cli(&["exec", "--node", spare, "held", "--", "true"]));
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!("node {spare} holds no task of job held")),
        "{err}"
    );
    let (code, _, err) = text(&live.c.cli("bob", &["exec", "held", "--", "true"]));
    assert_ne!(code, 0);
    assert!(err.contains("only its owner or an admin"), "{err}");

    // A killed `hyperplan exec` takes its command with it.
    let marker = format!("sleep 4{}", std::process::id() % 1000);
    let mut exec = live
        .c
        .cli_command(&live.user, &["exec", "held", "--", "sh", "-c", &marker])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The remote command, not the CLI (whose arguments name it too).
    wait_for(LONG, "the remote sleep", || {
        procs_with(&marker).iter().any(|&p| p != exec.id()).then_some(())
    });
    Command::new("kill")
        .args(["-TERM", &exec.id().to_string()])
        .status()
        .unwrap();
    let _ = exec.wait();
    wait_for(LONG, "the remote sleep killed", || {
        procs_with(&marker).is_empty().then_some(())
    });
    // Its step ended when its person went away.
    wait_for(LONG, "the killed exec's step ended in held's record", || {
        step_with(&live.status("held"), &marker).filter(|s| s["endTime"].is_u64())
    });

    // A task of another job cannot get in with its own credential, nor with a made-up one.
    let hyperplan = common::bin("hyperplan");
    let spy = live.job(
        "spy",
        &format!(
            "tasks:\n  - name: s\n    replicas: 1\n    resources: {{cpu: 1}}\n    workingDir: WORKDIR\n    \
             command: [sh, -c, 'HYPERPLAN_JOB=held {0} exec -- true; echo rc=$?; HYPERPLAN_CREDENTIAL=00 {0} exec -- true; echo rc=$?']\n",
            path_str(&hyperplan)
        ),
    );
    let (code, err) = live.submit_wait(&spy);
    assert_eq!(code, 0, "{err}");
    let said = live.output("spy", "s-0");
    // Held has no task on the spy's node: its agent relays nothing for it; the spy's own
    // job with a made-up credential goes on to the planner, which refuses it.
    assert_eq!(
        said.matches("refused: no task of job held runs on this node as your user")
            .count(),
        1,
        "{said}"
    );
    assert_eq!(said.matches("the credential is not job").count(), 1, "{said}");
    assert_eq!(said.matches("rc=1").count(), 2, "{said}");

    // The credential alone is worth nothing (issue 38): taken from a task of held (as
    // any reader of a leaked `env` output would), it admits neither another user nor the
    // job's own user from outside the job.
    if common::euid_is_root() {
        let held = live.status("held");
        let pid = held["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["rank"] == 0)
            .and_then(|t| t["pid"].as_u64())
            .unwrap();
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let vars: Vec<(String, String)> = environ
            .split(|&b| b == 0)
            .filter_map(|kv| {
                String::from_utf8_lossy(kv)
                    .split_once('=')
                    .map(|(k, v)| (k.into(), v.into()))
            })
            .filter(|(k, _)| k == "HYPERPLAN_CREDENTIAL" || k == "HYPERPLAN_EXEC_SOCKET" || k == "HYPERPLAN_JOB")
            .collect();
        assert_eq!(vars.len(), 3, "{vars:?}");
        common::ensure_user("hp-intruder");
        for (who, says) in [
            ("hp-intruder", "no task of job held runs on this node as your user"),
            (live.user.as_str(), "is not a process of job held"),
        ] {
            let out = Command::new("setpriv")
                .args(["--reuid", who, "--regid", who, "--init-groups"])
                .arg(&hyperplan)
                .args(["exec", "--", "sh", "-c", "touch /tmp/hp-intruder-was-here"])
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .envs(vars.iter().cloned())
                .current_dir("/")
                .output()
                .unwrap();
            let (code, _, err) = text(&out);
            assert_eq!(code, 1, "{who}: {err}");
            assert!(err.contains(says), "{who}: {err}");
            assert!(!std::path::Path::new("/tmp/hp-intruder-was-here").exists());
        }
    }

    // Nothing a step started outlives its job: a command still running when the job is
    // cancelled goes with the job's tasks (it is in their cgroup).
    let marker = format!("sleep 5{}", std::process::id() % 1000);
    let mut step = live
        .c
        .cli_command(
            &live.user,
            &["exec", "held", "--", "sh", "-c", &format!("setsid {marker} & wait")],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(LONG, "the step's sleep", || {
        procs_with(&marker).iter().any(|&p| p != step.id()).then_some(())
    });
    let out = live.cli(&["cancel", "held"]);
    assert!(out.status.success(), "{}", text(&out).2);
    live.wait_status("held", "cancelled");
    wait_for(LONG, "the step's sleep gone with the job", || {
        procs_with(&marker).is_empty().then_some(())
    });
    let _ = step.wait();
    // An ended job takes no more commands.
    let (code, _, err) = text(&live.cli(&["exec", "held", "--", "true"]));
    assert_ne!(code, 0);
    assert!(err.contains("not running"), "{err}");
    // Its steps' output is still there to read.
    let (code, out, err) = text(&live.cli(&["logs", "held.0"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("oops\n"), "{out}");
    // The step the cancel killed ended too, after its job: the ended job's record has it.
    let last = wait_for(LONG, "the cancelled step's end in held's record", || {
        step_with(&live.status("held"), &marker).filter(|s| s["endTime"].is_u64())
    });
    assert!(
        last["signal"].is_i64() || last["exitCode"].as_i64().is_some_and(|c| c != 0),
        "killed with its job: {last}"
    );
    let _ = Duration::ZERO;
}

#[test]
fn run_streams_every_rank_and_alloc_holds_nodes_for_a_shell() {
    let live = Live::start(&["n1", "n2"]);
    let cli = |args: &[&str]| {
        let mut c = live.c.cli_command(&live.user, args);
        c.current_dir(live.work.path());
        c
    };
    // `run`: every rank's lines, prefixed; the job's exit code.
    let out = cli(&[
        "run",
        "--replicas",
        "2",
        "--",
        "sh",
        "-c",
        "echo hello $HYPERPLAN_RANK; exit 3",
    ])
    .output()
    .unwrap();
    let (code, stdout, stderr) = text(&out);
    assert_eq!(code, 3, "{stdout}{stderr}");
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["0: hello 0", "1: hello 1"], "{stderr}");
    assert!(stderr.contains("failed, exit code 3"), "{stderr}");

    // Ctrl-C cancels the job and waits for its end.
    let running = cli(&["run", "--name", "long", "--", "sleep", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // (Asked for only once the job is there.)
    wait_for(LONG, "job long listed", || {
        live.cli(&["status", "long"]).status.success().then_some(())
    });
    live.wait_running("long");
    Command::new("kill")
        .args(["-INT", &running.id().to_string()])
        .status()
        .unwrap();
    let out = running.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(live.status("long")["status"], "cancelled");

    // `alloc --print-env`: the job's environment on rank 0's node; the job holds on.
    let out = cli(&[
        "alloc",
        "--replicas",
        "2",
        "--cpu",
        "2",
        "--name",
        "held",
        "--print-env",
    ])
    .output()
    .unwrap();
    let (code, stdout, stderr) = text(&out);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.lines().any(|l| l == "HYPERPLAN_NODELIST=n[1-2]"), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("OMPI_MCA_plm_rsh_agent=")),
        "{stdout}"
    );
    assert_eq!(live.status("held")["status"], "running");
    assert!(live.cli(&["cancel", "held"]).status.success());

    // `alloc`: a shell inside the job; leaving it ends the job.
    let mut shell = cli(&["alloc", "--replicas", "2", "--cpu", "2", "--name", "shell"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    shell
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo nodes $HYPERPLAN_NODELIST\nexit 4\n")
        .unwrap();
    let (code, stdout, stderr) = text(&shell.wait_with_output().unwrap());
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert!(stdout.contains("nodes n[1-2]"), "{stdout}{stderr}");
    live.wait_status("shell", "cancelled");
}
