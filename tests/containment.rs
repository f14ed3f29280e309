//! End-to-end: no task can take its node down, outlive its job, or make the agent wait on
//! a file it names (issue 20). The real planner, agents that probe this machine and pin
//! (`--pin on`), real Unix users, and this machine's cgroup v1 hierarchies (with the
//! hybrid layout's unified mount): the agent under a process or memory cap made by the
//! test, as a unit's TasksMax or MemoryMax gives.
//!
//! Needs root (users, cgroups); elsewhere each test says SKIPPED and why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::live::{LONG, Live};
use common::{alive, path_str, pids, wait_for};

const CGROUPS: &str = "/sys/fs/cgroup";
/// A fork bomb that keeps what it takes: it forks until the kernel says EAGAIN, its
/// children sleep, and it tries again every 10 ms for as long as it lives.
const BOMB: &str = "\"import os, time\\nwhile True:\\n  try:\\n    if os.fork() == 0:\\n      time.sleep(1e6)\\n  except OSError:\\n    time.sleep(0.01)\"";
/// A second user, whose jobs must not suffer from the first one's.
const OTHER_USER: &str = "hyperplan-e2e2";

/// Root with cgroup v1 hierarchies (freezer, pids, memory), or why not.
fn can_run() -> bool {
    let freezer = Path::new(CGROUPS).join("freezer/cgroup.procs");
    if !common::euid_is_root() || !freezer.is_file() {
        eprintln!(
            "SKIPPED: needs root (users, cgroups) and cgroup v1 hierarchies under {CGROUPS} (no {})",
            freezer.display()
        );
        return false;
    }
    true
}

/// A cgroup the test makes for the agent in `hierarchy` (below the test's own cgroup
/// there), with `file` set to `value`; removed with everything below it on drop.
struct Cap {
    dir: PathBuf,
}

impl Cap {
    /// `tag` names it apart from the other tests' (they run at once).
    fn new(tag: &str, hierarchy: &str, file: &str, value: &str) -> Cap {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let rel = own
            .lines()
            .find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                list.split(',')
                    .any(|c| c == hierarchy)
                    .then(|| path.trim_start_matches('/').to_string())
            })
            .unwrap_or_default();
        let dir = Path::new(CGROUPS)
            .join(hierarchy)
            .join(rel)
            .join(format!("hp-cap-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), value).unwrap();
        Cap { dir }
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }
}

impl Drop for Cap {
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// Kills what is in a cgroup tree and removes it, deepest first.
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                remove_tree(&e.path());
            }
        }
    }
    hyperplan_agent::tasks::cgroup::kill::kill_all(&[dir.to_path_buf()], Duration::from_secs(2), &mut || {});
    let _ = std::fs::remove_dir(dir);
}

/// The task cgroup of `job`'s task `task` below `parent` (any job id), when it exists.
fn task_cgroup(parent: &Path, job: &str, task: &str) -> Option<PathBuf> {
    walk(parent).into_iter().find(|d| {
        d.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("{job}.")) && n.ends_with(&format!(".{task}")))
    })
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                out.push(e.path());
                out.extend(walk(&e.path()));
            }
        }
    }
    out
}

/// Creates the second user (once) and its certificate.
fn other_user(live: &Live) {
    common::ensure_user(OTHER_USER);
    live.c.issue_user(OTHER_USER);
}

/// Live processes of `user` whose command line matches `pattern` (pgrep -f).
fn pgrep(user: &str, pattern: &str) -> Vec<u32> {
    let out = Command::new("pgrep")
        .args(["-u", user, "-f", pattern])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|&p: &u32| alive(u64::from(p)))
        .collect()
}

/// Whether a process here may lower its `oom_score_adj` (a container may refuse it).
fn can_lower_oom_score_adj() -> bool {
    Command::new("sh")
        .args(["-c", "echo -1000 > /proc/self/oom_score_adj"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Submits the job `bomb` (its command line ends in `tag`) and waits until a fork of it
/// failed for a pids limit; returns its task cgroup in the pids hierarchy.
fn start_bomb(live: &Live, cap: &Cap, tag: &str) -> PathBuf {
    let bomb = live.job(
        "bomb",
        &format!(
            "tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    workingDir: WORKDIR\n    \
             command: [python3, -c, {BOMB}, {tag}]\n"
        ),
    );
    assert!(live.cli(&["submit", path_str(&bomb)]).status.success());
    wait_for(LONG, "the bomb at a pids limit", || {
        let dir = task_cgroup(&cap.dir, "bomb", "t-0")?;
        let events = std::fs::read_to_string(dir.join("pids.events")).ok()?;
        let hits: u64 = events
            .lines()
            .find_map(|l| l.strip_prefix("max "))?
            .trim()
            .parse()
            .ok()?;
        (hits > 0).then_some(dir)
    })
}

fn task(j: &serde_json::Value) -> &serde_json::Value {
    &j["tasks"][0]
}

#[test]
fn a_fork_bomb_stops_at_its_own_limit_and_the_node_goes_on() {
    if !can_run() {
        return;
    }
    // The agent, its shepherds and every task under 400 processes, a task under 48.
    let cap = Cap::new("bomb-one", "pids", "pids.max", "400");
    let live = Live::start_in(&["n1"], &["--task-pids-max", "48"], std::slice::from_ref(&cap.dir));
    other_user(&live);
    let cgroup = start_bomb(&live, &cap, "bomb-one");
    let current: u64 = std::fs::read_to_string(cgroup.join("pids.current"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(current <= 48, "{current}");

    // Another user's job runs meanwhile, and the node stays Ready.
    let other = live.job(
        "other",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    command: [\"true\"]\n",
    );
    let out = live.c.cli(OTHER_USER, &["submit", "--wait", path_str(&other)]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        live.agent_log("n1")
    );
    assert!(live.c.states().iter().any(|(n, s)| n == "n1" && s == "Ready"));

    // A job may ask for fewer processes than the node gives a task, not more.
    for (name, asked, got) in [("fewer", 20, "20"), ("more", 1000, "48")] {
        let job = live.job(
            name,
            &format!(
                "tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    workingDir: WORKDIR\n    \
                 maxProcesses: {asked}\n    command: [sh, -c, 'cat /sys/fs/cgroup/pids$(grep :pids: /proc/self/cgroup | cut -d: -f3)/pids.max']\n"
            ),
        );
        let out = live.c.cli(OTHER_USER, &["submit", "--wait", path_str(&job)]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let printed = std::fs::read_to_string(live.work.path().join(format!("hyperplan-{name}-t-0.out"))).unwrap();
        assert_eq!(printed.trim(), got, "{name}");
    }

    // Cancelled, the bomb is gone to the last process, and so is its cgroup.
    assert!(live.cli(&["cancel", "bomb", "--grace", "1s"]).status.success());
    live.wait_status("bomb", "cancelled");
    assert!(pgrep(&live.user, "bomb-one$").is_empty());
    assert!(
        live.status("bomb")["tasks"][0]["pid"]
            .as_u64()
            .is_some_and(|p| !alive(p))
    );
    wait_for(LONG, "the bomb's cgroup removed", || (!cgroup.exists()).then_some(()));
    let log = live.agent_log("n1");
    assert!(!log.contains("panicked"), "{log}");
    assert!(cap.read("pids.current").trim().parse::<u64>().unwrap() < 100);
}

#[test]
fn without_a_task_limit_a_bomb_that_takes_every_process_costs_the_agent_nothing() {
    if !can_run() {
        return;
    }
    // No limit of the task's own: it takes all the agent's unit may have.
    let cap = Cap::new("bomb-two", "pids", "pids.max", "150");
    let live = Live::start_in(&["n1"], &["--task-pids-max", "max"], std::slice::from_ref(&cap.dir));
    start_bomb(&live, &cap, "bomb-two");
    // A second job cannot get a shepherd while the bomb holds every process: the agent
    // tries again instead of failing it, and stays Ready.
    let next = live.job(
        "next",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    command: [\"true\"]\n",
    );
    assert!(live.cli(&["submit", path_str(&next)]).status.success());
    wait_for(LONG, "a shepherd or a task start tried again", || {
        let shepherds = live.states["n1"].join("tasks");
        let again = walk(&shepherds)
            .iter()
            .any(|d| std::fs::read_to_string(d.join("shepherd.log")).is_ok_and(|l| l.contains("trying again")));
        (again || live.agent_log("n1").contains("cannot start the task's shepherd now")).then_some(())
    });
    assert!(live.c.states().iter().any(|(n, s)| n == "n1" && s == "Ready"));
    assert!(live.cli(&["cancel", "bomb", "--grace", "1s"]).status.success());
    live.wait_status("bomb", "cancelled");
    assert!(pgrep(&live.user, "bomb-two$").is_empty());
    let j = live.wait_status("next", "completed");
    assert_eq!(task(&j)["exitCode"], 0, "{j}");
    let log = live.agent_log("n1");
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_fifo_as_output_fails_the_task_at_once_and_frees_its_cpus() {
    if !can_run() {
        return;
    }
    let live = Live::start(&["n1"]);
    let fifo = live.work.path().join("out.fifo");
    assert!(
        Command::new("mkfifo")
            .args(["-m", "666"])
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let job = live.job(
        "fifo",
        "timeLimit: 5\ntasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 2}\n    workingDir: WORKDIR\n    \
         output: out.fifo\n    command: [sleep, '600']\n",
    );
    let (code, err) = live.submit_wait(&job);
    assert_ne!(code, 0, "{err}");
    let j = live.status("fifo");
    assert_eq!(j["status"], "failed", "{j}");
    let reason = task(&j)["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains("not a regular file") && reason.contains("out.fifo"),
        "{reason}"
    );
    // Its CPUs are free: a job that needs them all runs. It writes through `..`, which
    // an output pattern may use.
    std::fs::create_dir(live.work.path().join("run")).unwrap();
    common::live::set_mode(&live.work.path().join("run"), 0o777);
    let after = live.job(
        "after",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 2}\n    workingDir: WORKDIR/run\n    \
         output: '../%j.out'\n    command: [sh, -c, 'echo climbed']\n",
    );
    let (code, err) = live.submit_wait(&after);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(live.work.path().join("after.out")).unwrap(),
        "climbed\n"
    );
}

#[test]
fn what_leaves_the_session_is_gone_after_cancel_and_time_limit() {
    if !can_run() {
        return;
    }
    let live = Live::start(&["n1"]);
    other_user(&live);
    let script = |tag: &str| {
        format!(
            "setsid sh -c \"exec sleep {tag}1\" & setsid sh -c \"sleep {tag}2 & exit\"; \
             cat $HYPERPLAN_HOSTFILE > WORKDIR/{tag}.hosts; sleep {tag}0"
        )
    };
    let job = live.job(
        "escape",
        &format!(
            "tasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    workingDir: WORKDIR\n    \
             command: [sh, -c, '{}']\n",
            script("470")
        ),
    );
    assert!(live.cli(&["submit", path_str(&job)]).status.success());
    live.wait_running("escape");
    wait_for(LONG, "both escapees", || {
        (pgrep(&live.user, "^sleep 470[12]$").len() == 2).then_some(())
    });
    // The task read its job's hostfile; another user cannot.
    let hosts = live.work.path().join("470.hosts");
    wait_for(LONG, "the hostfile copied", || {
        std::fs::read_to_string(&hosts).ok().filter(|h| h == "n1\n")
    });
    let hostfile = live.states["n1"].join("tasks").join("escape.1").join("hostfile");
    let other = Command::new("runuser")
        .args(["-u", OTHER_USER, "--", "cat"])
        .arg(&hostfile)
        .output()
        .unwrap();
    assert!(!other.status.success(), "{OTHER_USER} read {}", hostfile.display());

    assert!(live.cli(&["cancel", "escape", "--grace", "1s"]).status.success());
    let j = live.wait_status("escape", "cancelled");
    assert!(pgrep(&live.user, "^sleep 470").is_empty(), "left after cancel");
    for pid in pids(&j) {
        assert!(!alive(pid));
    }

    // The same at a time limit.
    let job = live.job(
        "escape2",
        &format!(
            "timeLimit: 3\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    workingDir: WORKDIR\n    \
             command: [sh, -c, '{}']\n",
            script("480")
        ),
    );
    let (code, _) = live.submit_wait(&job);
    assert_ne!(code, 0);
    assert!(pgrep(&live.user, "^sleep 480").is_empty(), "left after the time limit");
}

#[test]
fn the_oom_killer_takes_the_task_not_the_agent() {
    if !can_run() {
        return;
    }
    // The agent, its shepherds and its tasks in 256 MiB; the task wants more.
    let cap = Cap::new("oom", "memory", "memory.limit_in_bytes", &(256u64 << 20).to_string());
    let live = Live::start_in(&["n1"], &[], std::slice::from_ref(&cap.dir));
    let agent = live.c.agents[0].1.id();
    let job = live.job(
        "hog",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'cat /proc/self/oom_score_adj > WORKDIR/adj; exec tail /dev/zero']\n",
    );
    let (code, err) = live.submit_wait(&job);
    assert_ne!(code, 0, "{err}");
    let j = live.status("hog");
    assert_eq!(task(&j)["signal"], 9, "{j}");
    assert!(alive(u64::from(agent)), "the agent was killed");
    let adj = std::fs::read_to_string(format!("/proc/{agent}/oom_score_adj")).unwrap();
    if can_lower_oom_score_adj() {
        assert_eq!(adj.trim(), "-1000");
    } else {
        eprintln!("NOTE: this machine refuses a lower oom_score_adj (no CAP_SYS_RESOURCE): the agent runs at {adj}");
        assert!(live.agent_log("n1").contains("cannot lower the agent's oom_score_adj"));
    }
    assert_eq!(
        std::fs::read_to_string(live.work.path().join("adj")).unwrap().trim(),
        "0"
    );
    assert!(live.c.states().iter().any(|(n, s)| n == "n1" && s == "Ready"));
    // The victim is the one that took the memory: it had grown to most of the cap.
    let peak = task(&j)["maxRssBytes"].as_u64().unwrap_or(0);
    assert!(
        peak > 128 << 20,
        "the task peaked at {peak} bytes; cap failcnt {}",
        cap.read("memory.failcnt").trim()
    );
}

#[test]
fn tasks_get_the_site_s_resource_limits_not_the_agent_s() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        "[exec]\nlimitsConf = false\nrlimits = { nofile = 1234, core = { soft = 0, hard = \"unlimited\" }, memlock = \"4M\" }\n",
    )
    .unwrap();
    let live = Live::start_with(&["n1"], &["--config", path_str(&config)]);
    let job = live.job(
        "limits",
        "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [sh, -c, 'echo $(ulimit -n) $(ulimit -c) $(ulimit -Hc) $(ulimit -l)']\n",
    );
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 0, "{err}");
    assert_eq!(live.output("limits", "t-0"), "1234 0 unlimited 4096\n");

    // A bad table stops the agent with the file and the key named.
    std::fs::write(&config, "[exec]\nrlimits = { nofiles = 1 }\n").unwrap();
    let out = Command::new(common::bin("hyperplan-agent"))
        .args([
            "run",
            "--planner",
            "127.0.0.1:1",
            "--node",
            "x",
            "--synthetic",
            "pack:1 core:1 pu:1",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("agent.toml") && err.contains("nofiles"), "{err}");
}

#[test]
fn a_killed_shepherd_takes_its_whole_task_with_it() {
    if !can_run() {
        return;
    }
    // In cgroups (--pin on), and without them (--pin off: by session, user and start).
    for (pin, confine) in [("on", "cgroup"), ("off", "none")] {
        let mut live = Live::start_with(&["n1"], &["--pin", pin]);
        if pin == "off" {
            // The sweep kills what this user started that no shepherd of *this* agent
            // owns: the other tests' agents on this machine run their tasks as the usual
            // user (a fork bomb once died of it), so this agent's tasks run as another.
            other_user(&live);
            live.user = OTHER_USER.to_string();
        }
        let nodes = live.c.cli_json(&live.user, &["nodes"]);
        assert_eq!(nodes["nodes"][0]["confinement"], confine, "{nodes}");
        // Another task of the same user runs on: the sweep must spare it.
        let other = live.job(
            "bystander",
            "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
             command: [sh, -c, 'setsid sh -c \"exec sleep 4911\" & sleep 4910']\n",
        );
        assert!(live.cli(&["submit", path_str(&other)]).status.success());
        live.wait_running("bystander");
        let job = live.job(
            "orphan",
            "tasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
             command: [sh, -c, 'setsid sh -c \"exec sleep 4901\" & sleep 4900']\n",
        );
        assert!(live.cli(&["submit", path_str(&job)]).status.success());
        live.wait_running("orphan");
        wait_for(LONG, "the escapees", || {
            (pgrep(&live.user, "^sleep 4901$").len() == 1 && pgrep(&live.user, "^sleep 4911$").len() == 1).then_some(())
        });
        let pid_file = live.states["n1"].join("tasks/orphan.2/t-0/pid");
        let shepherd: u32 = std::fs::read_to_string(pid_file).unwrap().trim().parse().unwrap();
        assert!(
            Command::new("kill")
                .args(["-9", &shepherd.to_string()])
                .status()
                .unwrap()
                .success()
        );
        let j = live.wait_status("orphan", "failed");
        let reason = task(&j)["reason"].as_str().unwrap_or_default().to_string();
        assert!(reason.contains("died without a record"), "{pin}: {reason}");
        assert!(
            pgrep(&live.user, "^sleep 490").is_empty(),
            "{pin}: left after its shepherd died"
        );
        assert_eq!(
            pgrep(&live.user, "^sleep 491").len(),
            2,
            "{pin}: the other task was hit"
        );
        assert!(live.cli(&["cancel", "bystander", "--grace", "1s"]).status.success());
        live.wait_status("bystander", "cancelled");
    }
}
