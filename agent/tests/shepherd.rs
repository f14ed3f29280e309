//! End-to-end tests of `hyperplan-agent shepherd --spec FILE`: the real binary runs real
//! tasks and the tests read the exit record it leaves in the state directory. Every
//! process a test starts is killed by pid when the test ends (guards), whatever happened.
//! The user tests need root; elsewhere they skip with a printed reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_hyperplan-agent");

fn is_root() -> bool {
    status_field(Path::new("/proc/self/status"), "Uid")
        .and_then(|uids| uids.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

/// The user name these tests run as.
fn me() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn status_field(path: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_string())
}

/// True while `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    match status_field(&PathBuf::from(format!("/proc/{pid}/status")), "State") {
        Some(state) => !state.starts_with('Z') && !state.starts_with('X'),
        None => false,
    }
}

fn kill(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One task: a state directory, its spec, and the shepherd when started. Dropping it
/// kills the shepherd and the task's process group by pid.
struct Task {
    dir: tempfile::TempDir,
    spec: Value,
    shepherd: Option<Child>,
    /// Pids to kill when the test ends (a detached shepherd, grandchildren).
    pids: Vec<u32>,
}

impl Task {
    fn new(argv: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.txt");
        let user = me();
        let spec = json!({
            "job": "j1",
            "jobId": 5,
            "task": "worker-0",
            "rank": 0,
            "argv": argv,
            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
            "workingDir": dir.path(),
            "stdout": out,
            "stderr": out,
            "user": user,
            "allowRoot": user == "root",
            "cpus": "",
            "numaNodes": [],
            "memoryPolicy": "none",
            "stateDir": dir.path().join("state"),
        });
        Task {
            dir,
            spec,
            shepherd: None,
            pids: Vec::new(),
        }
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.spec[key] = value;
        self
    }

    fn task_dir(&self) -> PathBuf {
        self.dir.path().join("state/tasks/j1.5/worker-0")
    }

    fn write_spec(&self) -> PathBuf {
        let dir = self.task_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("spec.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&self.spec).unwrap()).unwrap();
        path
    }

    fn start(&mut self) {
        let spec = self.write_spec();
        let child = Command::new(BIN)
            .args(["shepherd", "--spec"])
            .arg(&spec)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.shepherd = Some(child);
    }

    fn shepherd_pid(&self) -> u32 {
        self.shepherd.as_ref().map(Child::id).unwrap()
    }

    /// The task's pid once it runs (from `started.json`).
    fn task_pid(&mut self) -> u32 {
        let path = self.task_dir().join("started.json");
        wait_until("started.json", Duration::from_secs(10), || path.exists());
        let started: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let pid = started["pid"].as_u64().unwrap() as u32;
        self.pids.push(pid);
        pid
    }

    /// Waits for the shepherd to exit (it must succeed) and returns the record.
    fn finish(&mut self) -> Value {
        let mut child = self.shepherd.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                kill(child.id(), "KILL");
                let _ = child.wait();
                panic!("the shepherd did not finish in 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "shepherd: {status}");
        self.record()
    }

    fn record(&self) -> Value {
        let path = self.task_dir().join("record.json");
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
    }

    fn run(mut self) -> (Self, Value) {
        self.start();
        let record = self.finish();
        (self, record)
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("out.txt")).unwrap_or_default()
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if let Some(mut child) = self.shepherd.take() {
            kill(child.id(), "KILL");
            let _ = child.wait();
        }
        if let Ok(text) = std::fs::read_to_string(self.task_dir().join("pid"))
            && let Ok(pid) = text.trim().parse::<u32>()
            && alive(pid)
        {
            kill(pid, "KILL");
        }
        for &pid in &self.pids {
            if alive(pid) {
                kill(pid, "KILL");
            }
        }
    }
}

#[test]
fn exit_code_is_recorded() {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let (task, record) = Task::new(&["sh", "-c", "echo hello; exit 3"]).run();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    assert_eq!(record["exitCode"], 3);
    assert_eq!(record["signal"], Value::Null);
    assert_eq!(record["job"], "j1");
    assert_eq!(record["jobId"], 5);
    assert_eq!(record["task"], "worker-0");
    assert!(record["pid"].as_u64().unwrap() > 1);
    let start = record["startTimeMs"].as_u64().unwrap();
    let end = record["endTimeMs"].as_u64().unwrap();
    assert!(start >= started && end >= start, "{record:#}");
    assert!(record["cpuSeconds"].as_f64().unwrap() >= 0.0);
    assert!(record["maxRssBytes"].as_u64().unwrap() > 0);
    assert_eq!(task.output(), "hello\n");
    let pid_file = std::fs::read_to_string(task.task_dir().join("pid")).unwrap();
    assert!(pid_file.trim().parse::<u32>().is_ok(), "{pid_file:?}");
}

#[test]
fn a_signal_is_recorded() {
    let (_task, record) = Task::new(&["sh", "-c", "kill -9 $$"]).run();
    assert_eq!(record["outcome"], "signaled", "{record:#}");
    assert_eq!(record["signal"], 9);
    assert_eq!(record["signalName"], "SIGKILL");
    assert_eq!(record["exitCode"], Value::Null);
}

#[test]
fn a_missing_program_is_recorded_by_name() {
    let (_task, record) = Task::new(&["no-such-program-hp", "x"]).run();
    assert_eq!(record["outcome"], "failed", "{record:#}");
    let reason = record["reason"].as_str().unwrap();
    assert!(
        reason.contains("no-such-program-hp") && reason.contains("ENOENT"),
        "{reason}"
    );
    assert_eq!(record["exitCode"], Value::Null);
}

#[test]
fn a_missing_working_dir_is_recorded() {
    let (_task, record) = Task::new(&["true"]).set("workingDir", json!("/no/such/dir-hp")).run();
    assert_eq!(record["outcome"], "failed", "{record:#}");
    let reason = record["reason"].as_str().unwrap();
    assert!(
        reason.contains("/no/such/dir-hp") && reason.contains("chdir"),
        "{reason}"
    );
}

#[test]
fn an_unknown_user_is_recorded() {
    let (_task, record) = Task::new(&["true"]).set("user", json!("no-such-user-hp")).run();
    assert_eq!(record["outcome"], "failed", "{record:#}");
    let reason = record["reason"].as_str().unwrap();
    assert!(
        reason.contains("no-such-user-hp") && reason.contains("unknown"),
        "{reason}"
    );
}

#[test]
fn root_is_refused_unless_allowed() {
    let (_task, record) = Task::new(&["true"])
        .set("user", json!("root"))
        .set("allowRoot", json!(false))
        .run();
    assert_eq!(record["outcome"], "failed", "{record:#}");
    let reason = record["reason"].as_str().unwrap();
    assert!(reason.contains("root") && reason.contains("allowRoot"), "{reason}");
}

#[test]
fn the_time_limit_kills_the_task() {
    let began = Instant::now();
    let (_task, record) = Task::new(&["sleep", "30"]).set("timeLimitSecs", json!(1)).run();
    assert_eq!(record["outcome"], "timeout", "{record:#}");
    assert_eq!(record["signal"], 15);
    assert!(began.elapsed() < Duration::from_secs(10), "{:?}", began.elapsed());
}

/// A limit no clock can hold is no limit, not a panic after the task started.
#[test]
fn a_time_limit_beyond_the_clock_is_no_limit() {
    let (_task, record) = Task::new(&["true"])
        .set("timeLimitSecs", json!(u64::MAX))
        .set("killGraceSecs", json!(u64::MAX))
        .run();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    assert_eq!(record["exitCode"], 0);
}

#[test]
fn the_time_limit_escalates_to_sigkill() {
    let began = Instant::now();
    let (_task, record) = Task::new(&["sh", "-c", "trap '' TERM; sleep 30"])
        .set("timeLimitSecs", json!(1))
        .set("killGraceSecs", json!(1))
        .run();
    assert_eq!(record["outcome"], "timeout", "{record:#}");
    assert_eq!(record["signal"], 9);
    assert!(began.elapsed() < Duration::from_secs(10), "{:?}", began.elapsed());
}

#[test]
fn sigterm_to_the_shepherd_kills_the_whole_group() {
    let mut task = Task::new(&["sh", "-c", "sleep 30 & echo $! > grandchild.pid; wait"]);
    task.start();
    let pid = task.task_pid();
    let gc_file = task.dir.path().join("grandchild.pid");
    wait_until("grandchild.pid", Duration::from_secs(10), || {
        std::fs::read_to_string(&gc_file).is_ok_and(|s| s.ends_with('\n'))
    });
    let grandchild: u32 = std::fs::read_to_string(&gc_file).unwrap().trim().parse().unwrap();
    task.pids.push(grandchild);
    assert!(alive(pid) && alive(grandchild));
    kill(task.shepherd_pid(), "TERM");
    let record = task.finish();
    assert_eq!(record["outcome"], "cancelled", "{record:#}");
    assert_eq!(record["signal"], 15);
    wait_until("the task and its child to be gone", Duration::from_secs(5), || {
        !alive(pid) && !alive(grandchild)
    });
}

/// Without cgroups, what left the task's session and process group (`setsid`, a double
/// fork) is still below the shepherd, its subreaper: a cancel and the task's end reach it.
#[test]
fn what_left_the_session_goes_with_the_task() {
    let script = "setsid sh -c 'sleep 31 & echo $! > escaped.pid' & wait; \
                  setsid sh -c 'exec sleep 32' & echo $! > session.pid; sleep 30";
    let mut task = Task::new(&["sh", "-c", script]);
    task.start();
    task.task_pid();
    let read = |name: &str| -> u32 {
        let f = task.dir.path().join(name);
        wait_until(name, Duration::from_secs(10), || {
            std::fs::read_to_string(&f).is_ok_and(|s| s.ends_with('\n'))
        });
        std::fs::read_to_string(&f).unwrap().trim().parse().unwrap()
    };
    let (escaped, own_session) = (read("escaped.pid"), read("session.pid"));
    task.pids.extend([escaped, own_session]);
    assert!(alive(escaped) && alive(own_session));
    kill(task.shepherd_pid(), "TERM");
    let record = task.finish();
    assert_eq!(record["outcome"], "cancelled", "{record:#}");
    assert!(!alive(escaped), "the double-forked sleep survived");
    assert!(!alive(own_session), "the setsid sleep survived");

    // The task's own end, too: it exits, what it left behind goes.
    let mut task = Task::new(&[
        "sh",
        "-c",
        "setsid sh -c 'exec sleep 33' & echo $! > left.pid; sleep 0.2",
    ]);
    task.start();
    let record = task.finish();
    assert_eq!(record["exitCode"], 0, "{record:#}");
    let left: u32 = std::fs::read_to_string(task.dir.path().join("left.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    task.pids.push(left);
    assert!(!alive(left), "what the task left behind survived its end");
}

/// An output that is not a regular file is refused before the task runs, never waited on:
/// a FIFO without a reader (which would block a plain open for ever), and a device.
#[test]
fn a_fifo_or_a_device_as_output_is_refused_at_once() {
    let task = Task::new(&["true"]);
    let fifo = task.dir.path().join("out.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let began = Instant::now();
    let (task, record) = task.set("stdout", json!(fifo)).set("stderr", json!(fifo)).run();
    assert_eq!(record["outcome"], "failed", "{record:#}");
    let reason = record["reason"].as_str().unwrap();
    assert!(
        reason.contains("not a regular file") && reason.contains("out.fifo"),
        "{reason}"
    );
    assert!(began.elapsed() < Duration::from_secs(10));
    drop(task);
    let (_, record) = Task::new(&["true"]).set("stderr", json!("/dev/zero")).run();
    assert!(
        record["reason"]
            .as_str()
            .unwrap()
            .contains("/dev/zero is not a regular file"),
        "{record:#}"
    );
    // /dev/null is what it is for.
    let (_, record) = Task::new(&["true"])
        .set("stdout", json!("/dev/null"))
        .set("stderr", json!("/dev/null"))
        .run();
    assert_eq!(record["exitCode"], 0, "{record:#}");
}

/// The agent writes the planner's grace into `kill_grace` before its SIGTERM: a task that
/// ignores SIGTERM is killed after that grace, not the spec's.
#[test]
fn a_cancel_uses_the_grace_the_agent_wrote() {
    let mut task = Task::new(&["sh", "-c", "trap '' TERM; sleep 60"]).set("killGraceSecs", json!(60));
    task.start();
    let pid = task.task_pid();
    std::fs::write(task.task_dir().join("kill_grace"), "1\n").unwrap();
    let began = Instant::now();
    kill(task.shepherd_pid(), "TERM");
    let record = task.finish();
    assert_eq!(record["outcome"], "cancelled", "{record:#}");
    assert_eq!(record["signal"], 9);
    assert!(began.elapsed() < Duration::from_secs(20), "{:?}", began.elapsed());
    assert!(!alive(pid));
}

/// A cancel with a day's grace does not outlive the time limit: SIGKILL comes the spec's
/// grace after the limit (issue 38: a task trapping SIGTERM outlived its time limit).
#[test]
fn the_time_limit_wins_over_a_long_cancel_grace() {
    let mut task = Task::new(&["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"])
        .set("timeLimitSecs", json!(3))
        .set("killGraceSecs", json!(1));
    task.start();
    let pid = task.task_pid();
    wait_until("the trap set", Duration::from_secs(10), || {
        task.output().contains("ready")
    });
    std::fs::write(task.task_dir().join("kill_grace"), "86400\n").unwrap();
    let began = Instant::now();
    kill(task.shepherd_pid(), "TERM");
    let record = task.finish();
    assert_eq!(record["outcome"], "cancelled", "{record:#}");
    assert_eq!(record["signal"], 9);
    assert!(began.elapsed() < Duration::from_secs(20), "{:?}", began.elapsed());
    assert!(!alive(pid));
}

/// A second cancel with a shorter grace shortens the first one's; a longer one does not
/// lengthen it.
#[test]
fn a_later_cancel_shortens_the_grace() {
    let mut task = Task::new(&[
        "sh",
        "-c",
        "trap 'echo term' TERM; echo ready; while :; do sleep 1; done",
    ])
    .set("killGraceSecs", json!(600));
    task.start();
    let pid = task.task_pid();
    wait_until("the trap set", Duration::from_secs(10), || {
        task.output().contains("ready")
    });
    let grace = task.task_dir().join("kill_grace");
    std::fs::write(&grace, "86400\n").unwrap();
    kill(task.shepherd_pid(), "TERM");
    // The first cancel was taken: the task got its SIGTERM, and lives on.
    wait_until("the first cancel's SIGTERM", Duration::from_secs(10), || {
        task.output().contains("term")
    });
    std::fs::write(&grace, "7200\n").unwrap();
    kill(task.shepherd_pid(), "TERM");
    wait_until("the second cancel's SIGTERM", Duration::from_secs(10), || {
        task.output().matches("term").count() >= 2
    });
    assert!(alive(pid));
    std::fs::write(&grace, "1\n").unwrap();
    let began = Instant::now();
    kill(task.shepherd_pid(), "TERM");
    let record = task.finish();
    assert_eq!(record["outcome"], "cancelled", "{record:#}");
    assert_eq!(record["signal"], 9);
    assert!(began.elapsed() < Duration::from_secs(20), "{:?}", began.elapsed());
    assert!(!alive(pid));
}

#[test]
fn affinity_pins_the_task_to_its_pus() {
    let ours = status_field(Path::new("/proc/self/status"), "Cpus_allowed_list").unwrap();
    // The last PU this process may use.
    let last = ours.split(',').next_back().unwrap();
    let pu = last.rsplit('-').next().unwrap().to_string();
    let (task, record) = Task::new(&["grep", "Cpus_allowed_list", "/proc/self/status"])
        .set("cpus", json!(pu))
        .run();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    assert_eq!(task.output().trim(), format!("Cpus_allowed_list:\t{pu}"));
}

#[test]
fn memory_bind_to_a_node_we_have() {
    let (task, record) = Task::new(&["grep", "Mems_allowed_list", "/proc/self/status"])
        .set("numaNodes", json!([0]))
        .set("memoryPolicy", json!("bind"))
        .run();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    assert!(task.output().contains("Mems_allowed_list"), "{}", task.output());
}

#[test]
fn the_task_sees_exactly_its_env() {
    let (task, record) = Task::new(&["/usr/bin/env"])
        .set("env", json!({"A": "1", "B": "two words"}))
        .run();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    let mut lines: Vec<String> = task.output().lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, ["A=1", "B=two words"]);
}

#[test]
fn the_task_runs_in_its_working_dir() {
    let dir = tempfile::tempdir().unwrap();
    let wd = dir.path().canonicalize().unwrap();
    let (task, record) = Task::new(&["/bin/pwd", "-P"]).set("workingDir", json!(wd)).run();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    assert_eq!(task.output().trim(), wd.to_str().unwrap());
}

#[test]
fn stderr_to_its_own_file() {
    let mut task = Task::new(&["sh", "-c", "echo out; echo err >&2"]);
    let err = task.dir.path().join("err.txt");
    task = task.set("stderr", json!(err));
    let (task, record) = task.run();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    assert_eq!(task.output(), "out\n");
    assert_eq!(std::fs::read_to_string(err).unwrap(), "err\n");
}

#[test]
fn a_bad_spec_fails_with_a_reason_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.json");
    std::fs::write(&spec, b"{\"job\": 1").unwrap();
    let out = Command::new(BIN)
        .args(["shepherd", "--spec"])
        .arg(&spec)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(spec.to_str().unwrap()), "{stderr}");
}

#[test]
fn a_task_is_not_run_twice_from_one_task_dir() {
    let (mut task, record) = Task::new(&["true"]).run();
    assert_eq!(record["outcome"], "exited");
    task.start();
    let child = task.shepherd.take().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
}

#[test]
fn the_shepherd_survives_its_parent() {
    let task = Task::new(&["sh", "-c", "sleep 1; echo done"]);
    let spec = task.write_spec();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{BIN}' shepherd --spec '{}' </dev/null >/dev/null 2>&1 & exit 0",
            spec.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    let path = task.task_dir().join("record.json");
    wait_until(
        "the record of a shepherd whose parent left",
        Duration::from_secs(20),
        || path.exists(),
    );
    let record = task.record();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    assert_eq!(record["exitCode"], 0);
    assert_eq!(task.output(), "done\n");
}

#[test]
fn shepherd_memory_while_a_task_runs() {
    let mut task = Task::new(&["sleep", "30"]);
    task.start();
    task.task_pid();
    let shepherd = task.shepherd_pid();
    let rss = status_field(&PathBuf::from(format!("/proc/{shepherd}/status")), "VmRSS").unwrap();
    let kb: u64 = rss.trim_end_matches("kB").trim().parse().unwrap();
    eprintln!("shepherd VmRSS while a task runs: {kb} kB");
    // The target is 2 MB (issue 13); this catches a regression far past it.
    assert!(kb < 16 * 1024, "shepherd RSS {kb} kB");
    kill(shepherd, "TERM");
    let record = task.finish();
    assert_eq!(record["outcome"], "cancelled");
}

/// A throwaway user and group, removed when dropped.
struct TempUser {
    user: String,
    group: String,
}

impl TempUser {
    fn create() -> Self {
        Self::create_as("hpshep")
    }

    /// A user `<prefix><pid>` (a prefix of each test's own: tests run at once).
    fn create_as(prefix: &str) -> Self {
        let n = std::process::id();
        let user = TempUser {
            user: format!("{prefix}{n}"),
            group: format!("{prefix}g{n}"),
        };
        let ok = |args: &[&str], cmd: &str| {
            let out = Command::new(cmd).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "{cmd} {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ok(&[&user.group], "groupadd");
        ok(&["-M", "-G", &user.group, "-s", "/bin/sh", &user.user], "useradd");
        user
    }

    fn id(&self, flag: &str) -> String {
        let out = Command::new("id").args([flag, &self.user]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }
}

impl Drop for TempUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.user).output();
        let _ = Command::new("groupdel").arg(&self.group).output();
    }
}

#[test]
fn the_task_runs_as_the_user_with_its_groups() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !is_root() {
        eprintln!("skipped: switching users needs root (this test runs as {})", me());
        return;
    }
    let user = TempUser::create();
    let uid: u32 = user.id("-u").parse().unwrap();
    let extra_gid = user.id("-G").split_whitespace().last().unwrap().to_string();
    let task = Task::new(&["sh", "-c", "id -un; id -G"]).set("user", json!(user.user));
    // Where the user may write: a world-writable output directory.
    std::fs::set_permissions(task.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let outdir = task.dir.path().join("out");
    std::fs::create_dir(&outdir).unwrap();
    std::fs::set_permissions(&outdir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = outdir.join("o.txt");
    let (_task, record) = task
        .set("stdout", json!(out))
        .set("stderr", json!(out))
        .set("workingDir", json!(outdir))
        .set("allowRoot", json!(false))
        .run();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(user.user.as_str()), "{text}");
    let groups: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert!(groups.contains(&extra_gid.as_str()), "{groups:?} lacks {extra_gid}");
    assert_eq!(std::fs::metadata(&out).unwrap().uid(), uid);
}

#[test]
fn a_bad_field_is_recorded_with_the_field_named() {
    let (_task, record) = Task::new(&["true"]).set("cpus", json!("3-1")).run();
    assert_eq!(record["outcome"], "failed", "{record:#}");
    let reason = record["reason"].as_str().unwrap();
    assert!(reason.contains("`cpus`") && reason.contains("spec.json"), "{reason}");
}

/// `tasks::stop::stop_all` (the demo's and the tests' end): every shepherd of a state
/// directory is stopped with its task, and one whose task ignores SIGTERM is killed after
/// the grace, task group included.
#[test]
fn stop_all_stops_every_shepherd_of_a_state_dir() {
    let mut task = Task::new(&["sh", "-c", "trap '' TERM; sleep 60"]).set("killGraceSecs", json!(60));
    task.start();
    let pid = task.task_pid();
    let shepherd = task.shepherd_pid();
    let state = task.dir.path().join("state");
    let n = hyperplan_agent::tasks::stop::stop_all(&state, Duration::from_millis(500));
    assert_eq!(n, 1);
    let _ = task.shepherd.as_mut().map(Child::wait);
    // Killed after stop_all's grace, not the spec's 60 s: had the shepherd waited those
    // out itself, it would have written a record.
    assert!(
        !task.task_dir().join("record.json").exists(),
        "the shepherd was killed after stop_all's grace, before its own"
    );
    wait_until("the task gone", Duration::from_secs(5), || !alive(pid));
    assert!(!alive(shepherd));
    assert_eq!(
        hyperplan_agent::tasks::stop::stop_all(&state, Duration::from_millis(100)),
        0
    );
}

/// Milliseconds since boot, as the node-lost fence counts (`/proc/uptime`).
fn uptime_ms() -> u64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap();
    let secs: f64 = text.split_whitespace().next().unwrap().parse().unwrap();
    (secs * 1000.0) as u64
}

#[test]
fn a_fenced_task_is_stopped_once_the_agents_deadline_has_passed() {
    let mut task = Task::new(&["sleep", "600"]).set("fence", json!(true));
    let state = task.dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    // The planner last acknowledged this node a while ago: 1.5 s of its grace are left.
    std::fs::write(state.join("fence-deadline"), format!("{}\n", uptime_ms() + 1500)).unwrap();
    let began = Instant::now();
    task.start();
    let pid = task.task_pid();
    let record = task.finish();
    assert_eq!(record["outcome"], "fenced", "{record:#}");
    assert!(!alive(pid));
    assert!(began.elapsed() >= Duration::from_millis(1400), "{:?}", began.elapsed());
    assert!(began.elapsed() < Duration::from_secs(10), "{:?}", began.elapsed());
}

#[test]
fn an_unfenced_task_or_an_unreadable_deadline_is_left_running() {
    for (fence, deadline) in [(false, "1\n".to_string()), (true, "garbage\n".to_string())] {
        let mut task = Task::new(&["sleep", "600"]).set("fence", json!(fence));
        let state = task.dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join("fence-deadline"), &deadline).unwrap();
        task.start();
        let pid = task.task_pid();
        std::thread::sleep(Duration::from_millis(1500));
        assert!(alive(pid), "fence={fence} deadline={deadline:?}: stopped");
        kill(task.shepherd_pid(), "TERM");
        assert_eq!(task.finish()["outcome"], "cancelled");
    }
}

#[test]
fn a_task_that_ends_on_a_full_state_directory_is_recorded_once_there_is_room() {
    if !is_root() {
        println!("skipped: mounting a small tmpfs for the state directory needs root");
        return;
    }
    let mut task = Task::new(&["sh", "-c", "until [ -e go ]; do sleep 0.05; done; exit 0"]);
    let state = task.dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "hyperplan-test", path_str(&state)])
        .status()
        .unwrap();
    if !mounted.success() {
        println!("skipped: cannot mount a tmpfs here");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(state.clone());
    // The task runs, and writes its output, beside the state directory.
    task.start();
    task.task_pid();
    // Fill the file system, then let the task end.
    let fill = state.join("fill");
    let mut f = std::fs::File::create(&fill).unwrap();
    let block = vec![0u8; 64 * 1024];
    while std::io::Write::write_all(&mut f, &block).is_ok() {}
    drop(f);
    std::fs::write(task.dir.path().join("go"), b"").unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let record = task.task_dir().join("record.json");
    assert!(!record.exists(), "no room, no record");
    let shepherd = task.shepherd_pid();
    assert!(
        alive(shepherd),
        "the shepherd waits for room rather than lose the task's end"
    );
    std::fs::remove_file(&fill).unwrap();
    let record = task.finish();
    assert_eq!(record["outcome"], "exited", "{record:#}");
    assert_eq!(record["exitCode"], 0);
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn output_is_the_users_alone_unless_the_site_says_otherwise() {
    use std::os::unix::fs::PermissionsExt;
    for (mode, expected) in [(None, 0o600), (Some(0o640), 0o640)] {
        let mut task = Task::new(&["sh", "-c", "env"]);
        if let Some(m) = mode {
            task = task.set("outputMode", json!(m));
        }
        let (task, record) = task.run();
        assert_eq!(record["outcome"], "exited", "{record:#}");
        let meta = std::fs::metadata(task.dir.path().join("out.txt")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, expected, "outputMode {mode:?}");
    }
}

/// `task` as `user`, its output and working directory in a directory the user may write.
fn as_user(task: Task, user: &TempUser) -> Task {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(task.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let outdir = task.dir.path().join("out");
    std::fs::create_dir(&outdir).unwrap();
    std::fs::set_permissions(&outdir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = outdir.join("o.txt");
    task.set("user", json!(user.user))
        .set("allowRoot", json!(false))
        .set("stdout", json!(out))
        .set("stderr", json!(out))
        .set("workingDir", json!(outdir))
}

fn user_output(task: &Task) -> String {
    std::fs::read_to_string(task.dir.path().join("out/o.txt")).unwrap_or_default()
}

/// Bases for a job's own /tmp (a directory of root's on disk) and /dev/shm (on its tmpfs),
/// removed with everything below when dropped.
fn job_tmp_bases() -> (tempfile::TempDir, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let shm = tempfile::Builder::new()
        .prefix("hp-test-shm-")
        .tempdir_in("/dev/shm")
        .unwrap();
    (tmp, shm)
}

/// Issue 38 (d): what a task writes to /tmp and /dev/shm lands in its job's own directories
/// (mounted there in a mount namespace of its own), never in the node's, and every task of
/// the job on the node sees the same ones: two ranks, started at once, each read what the
/// other wrote.
#[test]
fn tasks_of_a_job_share_its_own_tmp_and_dev_shm_and_the_node_s_see_nothing() {
    use std::os::unix::fs::MetadataExt;
    if !is_root() {
        eprintln!(
            "skipped: a mount namespace and the job's directories need root (this test runs as {})",
            me()
        );
        return;
    }
    let user = TempUser::create_as("hpjt");
    let uid: u32 = user.id("-u").parse().unwrap();
    let (tmp_base, shm_base) = job_tmp_bases();
    let dirs = json!({
        "tmp": tmp_base.path().join("j1.5/tmp"),
        "shm": shm_base.path().join("j1.5/shm"),
        "required": true,
    });
    let tag = format!("hp-jobtmp-{}", std::process::id());
    let script = |me: &str, other: &str| {
        format!(
            "echo {me} > /tmp/{tag}.{me}; echo {me} > /dev/shm/{tag}.{me}; \
             until [ -e /tmp/{tag}.{other} ] && [ -e /dev/shm/{tag}.{other} ]; do sleep 0.05; done; \
             cat /tmp/{tag}.{other} /dev/shm/{tag}.{other}; stat -c '%U %a' /tmp /dev/shm; pwd"
        )
    };
    let mut a = as_user(Task::new(&["sh", "-c", &script("a", "b")]), &user)
        .set("privateTmp", dirs.clone())
        .set("timeLimitSecs", json!(20));
    let mut b = as_user(Task::new(&["sh", "-c", &script("b", "a")]), &user)
        .set("task", json!("worker-0"))
        .set("privateTmp", dirs)
        .set("timeLimitSecs", json!(20));
    a.start();
    b.start();
    let (ra, rb) = (a.finish(), b.finish());
    assert_eq!(ra["outcome"], "exited", "{ra:#}");
    assert_eq!(rb["outcome"], "exited", "{rb:#}");
    for (task, other) in [(&a, "b"), (&b, "a")] {
        let workdir = task.dir.path().join("out");
        assert_eq!(
            user_output(task),
            format!(
                "{other}\n{other}\n{u} 700\n{u} 700\n{}\n",
                workdir.display(),
                u = user.user
            ),
            "each read the other's files in the job's /tmp and /dev/shm, the user's own, \
             and ran in its working directory (the node's)"
        );
    }
    for name in [format!("{tag}.a"), format!("{tag}.b")] {
        assert!(!Path::new("/tmp").join(&name).exists(), "/tmp/{name} on the node");
        assert!(
            !Path::new("/dev/shm").join(&name).exists(),
            "/dev/shm/{name} on the node"
        );
        let tmp = tmp_base.path().join("j1.5/tmp").join(&name);
        let shm = shm_base.path().join("j1.5/shm").join(&name);
        assert_eq!(std::fs::metadata(&tmp).unwrap().uid(), uid, "{}", tmp.display());
        assert_eq!(std::fs::metadata(&shm).unwrap().uid(), uid, "{}", shm.display());
    }
    // The job's directory is root's alone; the leaves are the user's.
    let outer = std::fs::metadata(tmp_base.path().join("j1.5")).unwrap();
    assert_eq!((outer.uid(), outer.mode() & 0o777), (0, 0o700));
    let leaf = std::fs::metadata(shm_base.path().join("j1.5/shm")).unwrap();
    assert_eq!((leaf.uid(), leaf.mode() & 0o777), (uid, 0o700));
}

/// A link the user (or anyone) put where the job's directory goes is never followed: a
/// task that requires its own /tmp fails, naming it; one that does not runs with the
/// node's /tmp.
#[test]
fn a_link_in_place_of_the_job_s_directory_is_refused() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if !is_root() {
        eprintln!(
            "skipped: a mount namespace and the job's directories need root (this test runs as {})",
            me()
        );
        return;
    }
    let user = TempUser::create_as("hpjl");
    let (tmp_base, shm_base) = job_tmp_bases();
    let victim = tempfile::tempdir().unwrap();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(tmp_base.path().join("j1.5"))
        .unwrap();
    std::os::unix::fs::symlink(victim.path(), tmp_base.path().join("j1.5/tmp")).unwrap();
    for required in [true, false] {
        let dirs = json!({
            "tmp": tmp_base.path().join("j1.5/tmp"),
            "shm": shm_base.path().join("j1.5/shm"),
            "required": required,
        });
        let task = as_user(Task::new(&["sh", "-c", "stat -c %U /tmp"]), &user).set("privateTmp", dirs);
        let (task, record) = task.run();
        if required {
            assert_eq!(record["outcome"], "failed", "{record:#}");
            let reason = record["reason"].as_str().unwrap();
            assert!(
                reason.contains("j1.5/tmp") && reason.contains("symbolic link"),
                "{reason}"
            );
        } else {
            assert_eq!(record["outcome"], "exited", "{record:#}");
            assert_eq!(user_output(&task), "root\n", "the node's /tmp");
        }
    }
    assert_eq!(std::fs::read_dir(victim.path()).unwrap().count(), 0);
    assert_eq!(std::fs::metadata(victim.path()).unwrap().uid(), 0, "never given away");
}
