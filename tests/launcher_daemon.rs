//! End-to-end, issue 27 ("GPU fabrics", item 4): the agent unit's rights do not leak into
//! tasks. Agents are started as a unit would start them (`unshare --mount`: a mount view
//! of their own, as `ProtectSystem=`/`PrivateMounts=` give; `setpriv --bounding-set
//! -sys_admin --no-new-privs`: a capability dropped, as `CapabilityBoundingSet=` does,
//! and no new privileges). A task the agent forks inherits all of it; a task whose
//! shepherd the launcher (`hyperplan-agent launcher`) started has none of it. The
//! launcher hands the PMI socket on, can be restarted under running tasks, and answers
//! only root.
//!
//! Needs root (users, setuid) and util-linux's `setpriv` and `unshare`; elsewhere each
//! test says SKIPPED and why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::live::{LONG, Live};
use common::{alive, bin, path_str, pids, wait_for};

/// CAP_SYS_ADMIN's bit in a capability mask.
const SYS_ADMIN: u64 = 1 << 21;

fn can_run() -> bool {
    let has = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !common::euid_is_root() || !has("setpriv") || !has("unshare") {
        eprintln!("SKIPPED: needs root (users, setuid) and util-linux's setpriv and unshare");
        return false;
    }
    true
}

/// A launcher for one agent's state directory, stopped on drop.
struct Launcher {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
    state: PathBuf,
    /// How many times it was started (each start logs `launcher ready` once).
    starts: usize,
}

impl Launcher {
    fn start(dir: &Path, state: &Path) -> Launcher {
        std::fs::create_dir_all(dir).unwrap();
        let socket = dir.join("run/launcher.sock");
        let log = dir.join("launcher.log");
        let child = Self::spawn(&socket, &log, state);
        let mut l = Launcher {
            child,
            socket,
            log,
            state: state.to_path_buf(),
            starts: 1,
        };
        l.wait_ready();
        l
    }

    fn spawn(socket: &Path, log: &Path, state: &Path) -> Child {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        Command::new(bin("hyperplan-agent"))
            .args(["launcher", "--config", "/dev/null", "--socket"])
            .arg(socket)
            .arg("--state-dir")
            .arg(state)
            .stdout(Stdio::null())
            .stderr(log)
            .env("RUST_LOG", "info")
            .spawn()
            .unwrap()
    }

    /// Starts it again (after [`Launcher::stop`]).
    fn restart(&mut self) {
        self.child = Self::spawn(&self.socket, &self.log, &self.state);
        self.starts += 1;
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        wait_for(LONG, "the launcher listening", || {
            let log = self.log();
            assert!(matches!(self.child.try_wait(), Ok(None)), "the launcher exited:\n{log}");
            (log.matches("launcher ready").count() >= self.starts).then_some(())
        });
    }

    /// SIGTERM, as systemd stops it; waits for its exit.
    fn stop(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- launcher log:\n{}", self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a task sees of its restrictions, one line per node.
const SEEN: &str = "s=/proc/self/status\n\
                    echo \"$HYPERPLAN_NODE $(grep CapBnd $s | cut -f2) $(grep NoNewPrivs $s | cut -f2) \
                    $(readlink /proc/self/ns/mnt) $(cut -d' ' -f4 /proc/$PPID/stat)\"\n";

/// The same for a step of `hyperplan exec`, with its parent's pid.
const STEP: &str = "s=/proc/self/status\n\
                    echo \"$(grep CapBnd $s | cut -f2) $(grep NoNewPrivs $s | cut -f2) \
                    $(readlink /proc/self/ns/mnt) $PPID\"\n";

/// This process's own view: its capability bounding set, no-new-privileges flag and
/// mount namespace.
fn own_view() -> (u64, String, String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .trim()
            .to_string()
    };
    let bounding = u64::from_str_radix(&field("CapBnd:"), 16).unwrap();
    let mount = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    (bounding, field("NoNewPrivs:"), mount.to_string_lossy().into_owned())
}

#[test]
fn tasks_started_through_the_launcher_inherit_none_of_the_agent_s_restrictions() {
    if !can_run() {
        return;
    }
    let (bounding, no_new_privs, mount) = own_view();
    assert!(
        bounding & SYS_ADMIN != 0,
        "this test needs CAP_SYS_ADMIN in its own bounding set"
    );
    let mut live = Live::prepare(&["n1", "n2"]);
    live.agent_wrap = [
        "unshare",
        "--mount",
        "--",
        "setpriv",
        "--bounding-set",
        "-sys_admin",
        "--no-new-privs",
        "--",
    ]
    .map(String::from)
    .to_vec();
    // n1 starts its tasks through the launcher, n2 forks them itself.
    let mut launcher = Launcher::start(&live.c.dir.path().join("launcher-n1"), &live.state_dir("n1"));
    live.agent_args = vec!["--launcher".into(), path_str(&launcher.socket).into()];
    live.start_agent("n1");
    live.agent_args = Vec::new();
    live.start_agent("n2");
    for n in ["n1", "n2"] {
        live.c.wait_state(n, "Ready", LONG);
    }
    std::fs::write(live.work.path().join("seen.sh"), SEEN).unwrap();
    // Each task takes a whole node (this machine's CPUs): one on each.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let job = live.job(
        "seen",
        &format!(
            "tasks:\n  - name: t\n    replicas: 2\n    resources: {{cpu: {cpus}}}\n    workingDir: WORKDIR\n    \
             command: [sh, seen.sh]\n"
        ),
    );
    let (code, err) = live.submit_wait(&job);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<String> = ["t-0", "t-1"].iter().map(|t| live.output("seen", t)).collect();
    let line = |node: &str| {
        let l = lines
            .iter()
            .find(|l| l.starts_with(&format!("{node} ")))
            .unwrap_or_else(|| panic!("no task on {node}: {lines:?}"));
        let f: Vec<String> = l.split_whitespace().map(String::from).collect();
        assert_eq!(f.len(), 5, "{l}");
        (
            u64::from_str_radix(&f[1], 16).unwrap(),
            f[2].clone(),
            f[3].clone(),
            f[4].parse::<u32>().unwrap(),
        )
    };
    // The agent's child inherits what the agent was started with.
    let (n2_bounding, n2_nnp, n2_mount, _) = line("n2");
    assert_eq!(n2_bounding, bounding & !SYS_ADMIN, "n2: {lines:?}");
    assert_eq!(n2_nnp, "1", "n2: {lines:?}");
    assert_ne!(n2_mount, mount, "n2: {lines:?}");
    // The launcher's shepherd's task has what the node has.
    let (n1_bounding, n1_nnp, n1_mount, shepherd_parent) = line("n1");
    assert_eq!(n1_bounding, bounding, "n1: {lines:?}");
    assert_eq!(n1_nnp, no_new_privs, "n1: {lines:?}");
    assert_eq!(n1_mount, mount, "n1: {lines:?}");
    assert_eq!(
        shepherd_parent,
        launcher.child.id(),
        "n1's shepherd is the launcher's child"
    );
    assert!(launcher.log().contains("started a shepherd"), "{}", launcher.log());
    assert!(
        live.agent_log("n1").contains("tasks start through the launcher"),
        "{}",
        live.agent_log("n1")
    );

    // `hyperplan exec` steps likewise: the launcher starts them on n1, the agent on n2.
    std::fs::write(live.work.path().join("step.sh"), STEP).unwrap();
    let held = live.job(
        "held",
        &format!(
            "tasks:\n  - name: h\n    replicas: 2\n    resources: {{cpu: {cpus}}}\n    workingDir: WORKDIR\n    \
             command: [sleep, '300']\n"
        ),
    );
    let out = live.cli(&["submit", path_str(&held)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    live.wait_running("held");
    let step = |node: &str| {
        let out = live.cli(&["exec", "--node", node, "held", "--", "sh", "step.sh"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        let f: Vec<String> = text.split_whitespace().map(String::from).collect();
        assert_eq!(f.len(), 4, "{text}");
        (
            u64::from_str_radix(&f[0], 16).unwrap(),
            f[1].clone(),
            f[2].clone(),
            f[3].parse::<u32>().unwrap(),
        )
    };
    let (b, nnp, m, parent) = step("n1");
    assert_eq!(
        (b, nnp.as_str(), m.as_str()),
        (bounding, no_new_privs.as_str(), mount.as_str())
    );
    assert_eq!(parent, launcher.child.id(), "n1's step is the launcher's child");
    let (b, nnp, m, _) = step("n2");
    assert_eq!((b, nnp.as_str()), (bounding & !SYS_ADMIN, "1"));
    assert_ne!(m, mount);
    assert!(launcher.log().contains("started a step"), "{}", launcher.log());
    let out = live.cli(&["cancel", "held"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    live.wait_status("held", "cancelled");

    assert!(launcher.stop().success());
    assert!(!launcher.socket.exists(), "the socket is removed on the way out");
}

#[test]
fn pmi_crosses_the_launcher_and_its_restart_loses_no_task() {
    if !can_run() {
        return;
    }
    let mut live = Live::prepare(&["n1"]);
    let mut launcher = Launcher::start(&live.c.dir.path().join("launcher"), &live.state_dir("n1"));
    live.agent_args = vec!["--launcher".into(), path_str(&launcher.socket).into()];
    live.start_agent("n1");
    live.c.wait_state("n1", "Ready", LONG);

    // The task's end of its PMI socket reaches it under the number PMI_FD says.
    let script = "import os, socket\n\
                  s = socket.socket(fileno=int(os.environ['PMI_FD']))\n\
                  s.sendall(b'cmd=init pmi_version=1 pmi_subversion=1\\n')\n\
                  print(s.recv(200).decode().strip(), os.environ['PMI_RANK'], os.environ['PMI_SIZE'])\n";
    std::fs::write(live.work.path().join("pmi.py"), script).unwrap();
    let job = live.job(
        "pmi",
        "mpi: pmi\ntasks:\n  - name: r\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [python3, pmi.py]\n",
    );
    let (code, err) = live.submit_wait(&job);
    let out = live.output("pmi", "r-0");
    assert_eq!(code, 0, "{err}\n{out}");
    assert_eq!(out, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0 0 1\n");

    // A task runs on while the launcher stops.
    let sleeper = live.job(
        "sleeper",
        "tasks:\n  - name: s\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    command: [sleep, '300']\n",
    );
    let out = live.cli(&["submit", path_str(&sleeper)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let running = live.wait_running("sleeper");
    let pid = pids(&running)[0];
    // A step through the launcher: its input in, its output and exit code out.
    let mut exec = live
        .c
        .cli_command(
            &live.user,
            &["exec", "sleeper", "--", "sh", "-c", "wc -c; echo oops >&2; exit 7"],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut exec.stdin.take().unwrap(), b"hello\n").unwrap();
    let out = exec.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(
        (out.status.code(), stdout.trim(), stderr.trim()),
        (Some(7), "6", "oops"),
        "{stderr}"
    );
    assert!(launcher.stop().success());
    assert!(alive(pid));

    // A task placed while no launcher answers waits for it (tries again every second).
    let late = live.job(
        "late",
        "tasks:\n  - name: l\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    \
         command: [echo, late]\n",
    );
    let out = live.cli(&["submit", path_str(&late)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for(LONG, "the agent waiting for the launcher", || {
        live.agent_log("n1").contains("no launcher answers on").then_some(())
    });
    launcher.restart();
    live.wait_status("late", "completed");
    assert_eq!(live.output("late", "l-0"), "late\n");

    // The shepherd of the first launcher still runs its task: cancel reaches it.
    assert!(alive(pid));
    let out = live.cli(&["cancel", "sleeper"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    live.wait_status("sleeper", "cancelled");
    wait_for(LONG, "the sleeper gone", || (!alive(pid)).then_some(()));
    assert!(
        !live.agent_log("n1").contains("died without a record"),
        "{}",
        live.agent_log("n1")
    );
}

#[test]
fn only_root_may_ask_the_launcher_and_only_for_its_own_tasks() {
    if !can_run() {
        return;
    }
    // A Python another user may run (not one under root's home, as pyenv's).
    let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
    else {
        eprintln!("SKIPPED: no system python3 (/usr/bin/python3) for a client of another user");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let launcher = Launcher::start(dir.path(), &state);
    // Opened up, as a careless admin might: the launcher still checks who asks.
    std::fs::set_permissions(
        launcher.socket.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&launcher.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    // A refused peer's request is never read: the launcher may have answered and closed
    // before the request goes out (a broken pipe), and its answer is still there to read.
    let ask = |as_nobody: bool, spec: &str| {
        let script = format!(
            "import os, socket\n\
             s = socket.socket(socket.AF_UNIX)\n\
             s.connect({socket:?})\n\
             try:\n    socket.send_fds(s, [b'{{\"spec\": \"{spec}\"}}\\n'], [os.open('/dev/null', os.O_WRONLY)])\n\
             except BrokenPipeError:\n    pass\n\
             print(s.recv(4096).decode().strip())\n",
            socket = path_str(&launcher.socket),
        );
        let mut command = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", python]);
            c
        } else {
            Command::new(python)
        };
        let out = command.args(["-c", &script]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let refused = ask(true, "/tmp/spec.json");
    assert!(refused.contains("only uid 0 (the agent) may ask"), "{refused}");
    let shadow = ask(false, "/etc/shadow");
    assert!(
        shadow.contains("is not STATE/tasks/JOB.JOBID/TASK/spec.json"),
        "{shadow}"
    );
    let log = launcher.log();
    assert!(!log.contains("started a shepherd"), "{log}");
    assert!(log.contains("refused a request: only uid 0"), "{log}");
}

#[test]
fn a_launcher_for_another_state_directory_fails_the_task_saying_why() {
    if !can_run() {
        return;
    }
    // A careless admin: the launcher's stateDir is not the agent's.
    let mut live = Live::prepare(&["n1"]);
    let elsewhere = live.c.dir.path().join("other-state");
    let launcher = Launcher::start(&live.c.dir.path().join("launcher"), &elsewhere);
    live.agent_args = vec!["--launcher".into(), path_str(&launcher.socket).into()];
    live.start_agent("n1");
    live.c.wait_state("n1", "Ready", LONG);
    let job = live.job(
        "astray",
        "tasks:\n  - name: a\n    replicas: 1\n    resources: {cpu: 1}\n    workingDir: WORKDIR\n    command: [echo, hi]\n",
    );
    let (code, _) = live.submit_wait(&job);
    assert_ne!(code, 0);
    let j = live.wait_status("astray", "failed");
    let reason = j.to_string();
    assert!(
        reason.contains("cannot start the shepherd through the launcher")
            && reason.contains("is not STATE/tasks/JOB.JOBID/TASK/spec.json of this launcher's state directory"),
        "{reason}"
    );
}
