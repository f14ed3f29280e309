//! End-to-end, the real daemons on 127.0.0.1: the "Low" defects of issue 38 that a
//! local user or a second planner user can reach.
//!
//! - The exec socket (open to every local user, no certificate) says the same to a
//!   caller naming a job that is not on the node and one naming another user's job.
//! - `hyperplan run` and `hyperplan alloc` name their jobs so that no one can take the
//!   name first (it was `run-<pid>`: another user's `run-1` made a `run` of pid 1 fail).
//! - `hyperplan logs` does not read the agent's own files for a task whose output is (or
//!   links to) `/proc/self/fd/2`; such an `output` is refused at submit.
//! - `hyperplan-agent run --launcher ''` runs its tasks without a launcher, as the README
//!   says.
//! - A node whose agent cannot fork a shepherd (its processes used up) takes no new job
//!   until it can again, instead of taking each one and failing it.
//!
//! The hostile ones need root (a second Unix user, a PID namespace): skipped otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::live::Live;
use common::{bin, euid_is_root, path_str};

fn text(out: &Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A test that needs root says so and passes.
fn root_or_skip() -> bool {
    let root = euid_is_root();
    if !root {
        eprintln!("SKIPPED: needs root (a second Unix user, a PID namespace)");
    }
    root
}

/// `hyperplan exec` from outside any job, as Unix user `who`, toward the exec socket of
/// node n1, naming `job`, with a made-up credential.
fn exec_as(live: &Live, who: &str, job: &str) -> (i32, String, String) {
    let socket = hyperplan_agent::exec::socket_path(&live.state_dir("n1"));
    let out = Command::new("setpriv")
        .args(["--reuid", who, "--regid", who, "--init-groups"])
        .arg(bin("hyperplan"))
        .args(["exec", "--", "sh", "-c", "touch /tmp/hp-intruder-was-here"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HYPERPLAN_EXEC_SOCKET", &socket)
        .env("HYPERPLAN_CREDENTIAL", "00")
        .env("HYPERPLAN_JOB", job)
        .current_dir("/")
        .output()
        .unwrap();
    text(&out)
}

#[test]
fn the_exec_socket_does_not_tell_which_jobs_exist() {
    if !root_or_skip() {
        return;
    }
    common::ensure_user("hp-intruder");
    let live = Live::start(&["n1"]);
    let job = live.job(
        "held",
        "tasks:\n  - name: w\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sleep, '300']\n",
    );
    let out = live.cli(&["submit", path_str(&job)]);
    assert!(out.status.success(), "{}", text(&out).2);
    live.wait_running("held");

    // Another user's job that runs here, and a job that is not here: the same words.
    let (code, _, there) = exec_as(&live, "hp-intruder", "held");
    assert_eq!(code, 1, "{there}");
    let (code, _, absent) = exec_as(&live, "hp-intruder", "nosuchjob");
    assert_eq!(code, 1, "{absent}");
    assert_eq!(there.replace("held", "J"), absent.replace("nosuchjob", "J"));
    assert!(
        there.contains("refused: no task of job held runs on this node as your user"),
        "{there}"
    );
    assert!(!std::path::Path::new("/tmp/hp-intruder-was-here").exists());
    // The job's own user, from outside the job, may hear that its job is here.
    let (code, _, own) = exec_as(&live, &live.user, "held");
    assert_eq!(code, 1, "{own}");
    assert!(own.contains("is not a process of job held on this node"), "{own}");
}

/// The CLI as `user`, run as pid 1 of a PID namespace of its own: what `run-<pid>`
/// made of its job's name is then known beforehand.
fn cli_as_pid_1(live: &Live, user: &str, args: &[&str]) -> Output {
    let plain = live.c.cli_command(user, args);
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--"])
        .arg(plain.get_program())
        .args(plain.get_args())
        .current_dir(live.work.path());
    for (k, v) in plain.get_envs() {
        match v {
            Some(v) => command.env(k, v),
            None => command.env_remove(k),
        };
    }
    command.output().unwrap()
}

#[test]
fn run_and_alloc_names_cannot_be_taken_first() {
    if !root_or_skip() {
        return;
    }
    common::ensure_user("hp-intruder");
    let live = Live::start(&["n1"]);
    live.c.issue_user("hp-intruder");
    // Another user holds the names a `run` and an `alloc` of pid 1 would have had.
    for name in ["run-1", "alloc-1"] {
        let squat = live.job(
            name,
            "tasks:\n  - name: s\n    replicas: 1\n    resources: {cpu: 100m}\n    workingDir: WORKDIR\n    \
             output: /dev/null\n    command: [sleep, '300']\n",
        );
        let out = live.c.cli("hp-intruder", &["submit", path_str(&squat)]);
        assert!(out.status.success(), "{}", text(&out).2);
        common::wait_for(common::live::LONG, &format!("{name} running"), || {
            let j = &live.c.jobs("hp-intruder", &[name])[0];
            common::all_running(j).then_some(())
        });
    }
    let me = live.user.clone();
    // What `run-<pid>` met: the name held, the run refused.
    let (code, _, err) = text(&live.cli(&["run", "--name", "run-1", "--cpu", "100m", "--", "true"]));
    assert_ne!(code, 0);
    assert!(err.contains("\"run-1\""), "{err}");
    let (code, out, err) = text(&cli_as_pid_1(
        &live,
        &me,
        &["run", "--cpu", "100m", "--", "sh", "-c", "echo ran"],
    ));
    assert_eq!((code, out.as_str()), (0, "0: ran\n"), "{err}");
    let submitted = |err: &str, verb: &str| {
        let name = err
            .split_once(&format!("hyperplan {verb}: job "))
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or_default()
            .to_string();
        assert!(name.starts_with(&format!("{verb}-{me}-")), "{err}");
        assert_eq!(name.len(), verb.len() + me.len() + 18, "{err}");
        name
    };
    submitted(&err, "run");

    let (code, out, err) = text(&cli_as_pid_1(&live, &me, &["alloc", "--cpu", "100m", "--print-env"]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.lines().any(|l| l.starts_with("HYPERPLAN_JOB=alloc-")), "{out}");
    let held = submitted(&err, "alloc");
    assert!(live.cli(&["cancel", &held]).status.success());
}

#[test]
fn logs_never_read_the_agents_own_files() {
    if !root_or_skip() {
        return;
    }
    let live = Live::start(&["n1"]);
    // Named in the job file: refused at submit, the field named.
    let job = live.job(
        "fd1",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         output: /proc/self/fd/1\n    command: [true]\n",
    );
    let (code, _, err) = text(&live.cli(&["submit", path_str(&job)]));
    assert_ne!(code, 0);
    assert!(
        err.contains("output: expected a file outside /proc, /sys and /dev (/dev/null aside), got /proc/self/fd/1"),
        "{err}"
    );

    // The task swaps its output for a link there: the agent's stderr (its log) when the
    // agent opens it.
    let out = live.work.path().join("hyperplan-peek-t-0.out");
    let job = live.job(
        "peek",
        &format!(
            "tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    workingDir: WORKDIR\n    \
             command: [sh, -c, 'rm -f \"$0\"; ln -s /proc/self/fd/2 \"$0\"', {}]\n",
            out.file_name().unwrap().to_str().unwrap()
        ),
    );
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_link(&out).unwrap(),
        std::path::Path::new("/proc/self/fd/2")
    );
    assert!(!live.agent_log("n1").is_empty());
    let (code, stdout, stderr) = text(&live.cli(&["logs", "peek"]));
    assert_ne!(code, 0, "{stdout}");
    assert!(stdout.is_empty(), "the agent's log: {stdout}");
    assert!(
        stderr.contains("not a task's output: in /proc, /sys or /dev, or through /proc's links"),
        "{stderr}"
    );
}

#[test]
fn an_empty_launcher_runs_tasks_without_one() {
    let live = Live::start_with(&["n1"], &["--launcher", ""]);
    let job = live.job(
        "plain",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'echo forked']\n",
    );
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 0, "{err}");
    assert_eq!(live.output("plain", "t-0"), "forked\n");
    assert!(!live.agent_log("n1").contains("through the launcher"));
}

const CGROUPS: &str = "/sys/fs/cgroup";
/// A fork bomb that keeps what it takes: it forks until the kernel says EAGAIN, its
/// children sleep, and it tries again every 10 ms for as long as it lives.
const BOMB: &str = "\"import os, time\\nwhile True:\\n  try:\\n    if os.fork() == 0:\\n      time.sleep(1e6)\\n  except OSError:\\n    time.sleep(0.01)\"";

/// A pids cgroup v1 for the agent (below the test's own), `pids.max` set; removed with
/// everything below it on drop.
struct PidsCap {
    dir: PathBuf,
}

impl PidsCap {
    fn new(max: u32) -> Option<PidsCap> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            list.split(',')
                .any(|c| c == "pids")
                .then(|| path.trim_start_matches('/').to_string())
        })?;
        let hierarchy = Path::new(CGROUPS).join("pids");
        if !hierarchy.join("cgroup.procs").is_file() || !Path::new(CGROUPS).join("freezer/cgroup.procs").is_file() {
            return None;
        }
        let dir = hierarchy
            .join(rel)
            .join(format!("hp-cap-{}-strain", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::write(dir.join("pids.max"), max.to_string()).ok()?;
        Some(PidsCap { dir })
    }

    fn current(&self) -> u32 {
        let text = std::fs::read_to_string(self.dir.join("pids.current")).unwrap_or_default();
        text.trim().parse().unwrap_or(0)
    }
}

impl Drop for PidsCap {
    fn drop(&mut self) {
        fn remove(dir: &Path) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten().filter(|e| e.path().is_dir()) {
                    remove(&e.path());
                }
            }
            hyperplan_agent::tasks::cgroup::kill::kill_all(&[dir.to_path_buf()], Duration::from_secs(2), &mut || {});
            let _ = std::fs::remove_dir(dir);
        }
        remove(&self.dir);
    }
}

/// Node n1's reason in `hyperplan nodes`, if any.
fn node_reason(live: &Live) -> Option<String> {
    let v = live.c.cli_json(&live.user, &["nodes"]);
    v["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == "n1")?
        .get("reason")?
        .as_str()
        .map(str::to_string)
}

#[test]
fn a_node_that_cannot_fork_takes_no_new_job_until_it_can() {
    if !root_or_skip() {
        return;
    }
    let Some(cap) = PidsCap::new(150) else {
        eprintln!("SKIPPED: needs cgroup v1 pids and freezer hierarchies under {CGROUPS}");
        return;
    };
    let live = Live::start_in(&["n1"], &["--task-pids-max", "max"], std::slice::from_ref(&cap.dir));
    let job = |name: &str, command: &str| {
        live.job(
            name,
            &format!(
                "tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 100m}}\n    workingDir: WORKDIR\n    \
                 output: /dev/null\n    command: {command}\n"
            ),
        )
    };
    // A task takes every process the agent's unit may have.
    let bomb = job("bomb", &format!("[python3, -c, {BOMB}, strain]"));
    assert!(live.cli(&["submit", path_str(&bomb)]).status.success());
    common::wait_for(common::live::LONG, "the bomb at the cap", || {
        (cap.current() >= 149).then_some(())
    });

    // The next job's shepherd cannot start: the node says so, and takes no new job.
    assert!(
        live.cli(&["submit", path_str(&job("next", "[\"true\"]"))])
            .status
            .success()
    );
    let reason = common::wait_for(common::live::LONG, "n1 saying it cannot start tasks", || {
        node_reason(&live).filter(|r| r.contains("cannot start a task's shepherd"))
    });
    assert!(
        reason.starts_with("takes no new task until its agent can start them again: "),
        "{reason}"
    );
    assert!(live.c.states().iter().any(|(n, s)| n == "n1" && s == "Ready"));
    assert!(
        live.cli(&["submit", path_str(&job("third", "[\"true\"]"))])
            .status
            .success()
    );
    // Looked at by a walk (it has a reason), and still not given the node.
    let third = common::wait_for(common::live::LONG, "third looked at", || {
        let j = live.status("third");
        j["reason"].is_string().then_some(j)
    });
    assert_eq!(third["status"], "pending", "{third}");
    assert!(third["tasks"][0]["node"].is_null(), "{third}");

    // Processes free again: the node takes jobs again.
    assert!(live.cli(&["cancel", "bomb", "--grace", "1s"]).status.success());
    live.wait_status("bomb", "cancelled");
    let third = live.wait_status("third", "completed");
    assert_eq!(third["tasks"][0]["node"], "n1", "{third}");
    assert_eq!(node_reason(&live), None);
    let log = live.agent_log("n1");
    assert!(
        log.contains("cannot start tasks now") && log.contains("tasks can start again"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}
