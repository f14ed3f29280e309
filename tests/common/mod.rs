//! A real cluster on 127.0.0.1 for end-to-end tests: certificates in a temp dir, the
//! `hyperplan-planner` daemon on port 0, `hyperplan-agent run` processes with synthetic
//! machines, and the `hyperplan` CLI pointed at them. Processes are killed on drop.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod blackhole;
pub mod cargo;
pub mod etcd;
pub mod ha;
pub mod live;
pub mod netns;
pub mod postgres;
pub mod ufm;

/// A binary of the workspace, built on first use when this test run did not build it
/// (`cargo test --test daemon` builds only the root package's binaries).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join(name);
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        assert!(
            cargo::build(&["-q", "-p", "hyperplan-planner", "-p", "hyperplan-agent", "--bins"]),
            "building the daemons failed"
        );
    });
    assert!(path.exists(), "{} missing", path.display());
    path
}

/// Whether process `pid` runs (a zombie does not: its state is Z).
pub fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// The pids of a job's tasks (`status --output json`), those that have one.
pub fn pids(job: &Value) -> Vec<u64> {
    job["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["pid"].as_u64())
        .collect()
}

/// The job runs and every one of its tasks has started (has a pid): a job is `running`
/// from its first task's start, and a task being started has no pid yet.
pub fn all_running(job: &Value) -> bool {
    job["status"] == "running"
        && job["tasks"]
            .as_array()
            .is_some_and(|ts| ts.iter().all(|t| t["pid"].as_u64().is_some()))
}

/// Created (as root) for the tasks to run as.
pub const TEST_USER: &str = "hyperplan-e2e";

pub fn euid_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The user tasks run as: `hyperplan-e2e` (created when missing) as root, else you.
pub fn task_user() -> String {
    if euid_is_root() {
        ensure_user(TEST_USER);
        TEST_USER.to_string()
    } else {
        let out = Command::new("id").arg("-un").output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

/// Creates the system user `name` (as root) unless it exists.
pub fn ensure_user(name: &str) {
    if Command::new("id").arg(name).output().is_ok_and(|o| o.status.success()) {
        return;
    }
    let out = Command::new("useradd")
        .args(["--system", "--no-create-home", "--shell", "/bin/sh", name])
        .output()
        .unwrap();
    // Another test may have created it meanwhile (exit 9: already exists).
    assert!(
        out.status.success() || out.status.code() == Some(9),
        "useradd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn hyperplan_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hyperplan"))
}

/// A user certificate (alice, admin) from another cluster's CA, in a fresh directory:
/// what a planner must refuse at the TLS handshake.
pub fn foreign_user_certs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let d = path_str(dir.path());
    for args in [
        vec!["certs", "init", "--dir", d],
        vec!["certs", "issue", "--dir", d, "--user", "alice", "--role", "admin"],
    ] {
        let ok = Command::new(hyperplan_bin())
            .args(&args)
            .status()
            .unwrap_or_else(|e| panic!("hyperplan {args:?}: {e}"));
        assert!(ok.success(), "hyperplan {args:?}");
    }
    dir
}

/// `hyperplan nodes` against `addr` as alice with the certificates in `certs`.
pub fn nodes_with_certs(addr: &str, certs: &Path) -> Output {
    Command::new(hyperplan_bin())
        .args(["nodes"])
        .env("HYPERPLAN_PLANNER", addr)
        .env("HYPERPLAN_CERT_DIR", certs)
        .env("HYPERPLAN_USER", "alice")
        .env("XDG_CONFIG_HOME", certs)
        .output()
        .unwrap_or_else(|e| panic!("hyperplan nodes: {e}"))
}

/// Waits for `f` to return `Some`, polling; panics with `what` after `timeout`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    /// planner.toml the planner starts with (`/dev/null` when `None`).
    pub config: Option<PathBuf>,
    pub planner: Option<Child>,
    pub addr: String,
    pub agents: Vec<(String, Child)>,
    /// Seconds; agents are told to heartbeat at this interval.
    pub heartbeat: f64,
    pub missed: u32,
    /// More `hyperplan-planner` arguments, for the next `start_planner`.
    pub planner_args: Vec<String>,
    /// (node, network namespace): the agent of such a node runs inside it (see `netns`).
    pub namespaces: Vec<(String, String)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, a) in &mut self.agents {
            let _ = a.kill();
            let _ = a.wait();
        }
        // The agents' shepherds left their session on purpose: stop them and their tasks.
        if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
            for e in entries.filter_map(|e| e.ok()) {
                if e.file_name().to_string_lossy().starts_with("state-") {
                    hyperplan_agent::tasks::stop::stop_all(&e.path(), Duration::from_secs(2));
                }
            }
        }
        if let Some(p) = &mut self.planner {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

impl Cluster {
    /// Certificates for the planner, nodes `nodes` and users alice (user), bob (user),
    /// root (admin); the planner started on 127.0.0.1:0.
    pub fn start(nodes: &[&str]) -> Self {
        Self::start_with(nodes, None)
    }

    /// As [`Cluster::start`], the planner reading `planner_toml` (written into the
    /// cluster's directory first: relative paths in it are relative to that directory).
    pub fn start_with(nodes: &[&str], planner_toml: Option<&str>) -> Self {
        let mut cluster = Self::prepare(nodes, planner_toml);
        cluster.start_planner("127.0.0.1:0");
        cluster
    }

    /// Certificates and planner.toml, no planner yet: write the files the config names,
    /// then [`Cluster::start_planner`].
    pub fn prepare(nodes: &[&str], planner_toml: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = planner_toml.map(|text| {
            let p = dir.path().join("planner.toml");
            std::fs::write(&p, text).unwrap();
            p
        });
        let certs = dir.path().join("certs");
        let run = |args: &[&str]| {
            let out = Command::new(hyperplan_bin()).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let c = certs.to_str().unwrap();
        run(&["certs", "init", "--dir", c]);
        for n in nodes {
            run(&["certs", "issue", "--dir", c, "--node", n]);
        }
        run(&["certs", "issue", "--dir", c, "--user", "alice", "--role", "user"]);
        run(&["certs", "issue", "--dir", c, "--user", "bob", "--role", "user"]);
        run(&["certs", "issue", "--dir", c, "--user", "root", "--role", "admin"]);
        Cluster {
            dir,
            config,
            planner: None,
            addr: String::new(),
            agents: Vec::new(),
            heartbeat: 0.3,
            missed: 3,
            planner_args: Vec::new(),
            namespaces: Vec::new(),
        }
    }

    pub fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// The planner's store file (kept across `start_planner` calls: a restart reloads it).
    pub fn store(&self) -> PathBuf {
        self.dir.path().join("state.redb")
    }

    /// Starts the planner on `listen` and reads the address it serves on.
    pub fn start_planner(&mut self, listen: &str) {
        let log = std::fs::File::create(self.dir.path().join("planner.log")).unwrap();
        let mut child = Command::new(bin("hyperplan-planner"))
            .args(["--listen", listen, "--cert-dir"])
            .arg(self.certs())
            .args(["--heartbeat-interval", &self.heartbeat.to_string()])
            .args(["--missed-heartbeats", &self.missed.to_string()])
            .args(["--tick-interval", "0.2", "--config"])
            .arg(self.config.clone().unwrap_or_else(|| PathBuf::from("/dev/null")))
            .arg("--store")
            .arg(self.store())
            .args(&self.planner_args)
            .stdout(Stdio::piped())
            .stderr(log)
            .env("RUST_LOG", "info")
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("hyperplan-planner listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}; log: {}", self.planner_log()))
            .to_string();
        self.addr = addr;
        self.planner = Some(child);
    }

    pub fn planner_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("planner.log")).unwrap_or_default()
    }

    /// Sends the planner a signal (`HUP`, `TERM`, …) without waiting.
    pub fn signal_planner(&self, signal: &str) {
        let pid = self.planner.as_ref().expect("planner running").id();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// SIGTERM, and waits for a clean exit.
    pub fn stop_planner(&mut self) {
        if let Some(mut p) = self.planner.take() {
            let _ = Command::new("kill").args(["-TERM", &p.id().to_string()]).status();
            let status = p.wait().unwrap();
            assert!(
                status.success(),
                "planner exit: {status:?}; log: {}",
                self.planner_log()
            );
        }
    }

    /// Starts `hyperplan-agent run` for `node` with a synthetic machine and labels.
    pub fn start_agent(&mut self, node: &str, synthetic: &str, labels: &[(&str, &str)]) {
        self.start_agent_with(node, synthetic, labels, &[]);
    }

    /// As [`Cluster::start_agent`], with more `hyperplan-agent run` arguments.
    pub fn start_agent_with(&mut self, node: &str, synthetic: &str, labels: &[(&str, &str)], extra: &[&str]) {
        let log = std::fs::File::create(self.dir.path().join(format!("agent-{node}.log"))).unwrap();
        let mut cmd = match self.namespaces.iter().find(|(n, _)| n == node) {
            // `ip netns exec` execs the agent: the child's pid is the agent's.
            Some((_, ns)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin("hyperplan-agent"));
                c
            }
            None => Command::new(bin("hyperplan-agent")),
        };
        cmd.args([
            "run",
            "--planner",
            &self.addr,
            "--node",
            node,
            "--synthetic",
            synthetic,
            "--cert-dir",
        ])
        .arg(self.certs());
        // An agent.toml of the test's own (`--config` in `extra`), else none.
        if !extra.contains(&"--config") {
            cmd.args(["--config", "/dev/null"]);
        }
        cmd.arg("--state-dir")
            .arg(self.dir.path().join(format!("state-{node}")))
            .stdout(Stdio::null())
            .stderr(log)
            .env("RUST_LOG", "info");
        for (k, v) in labels {
            cmd.args(["--label", &format!("{k}={v}")]);
        }
        // Tasks see the node's /tmp, where the tests' files are, unless the test says.
        if !extra.contains(&"--private-tmp") {
            cmd.args(["--private-tmp", "off"]);
        }
        cmd.args(extra);
        let child = cmd.spawn().unwrap();
        self.agents.push((node.to_string(), child));
    }

    pub fn kill_agent(&mut self, node: &str) {
        if let Some(i) = self.agents.iter().position(|(n, _)| n == node) {
            let (_, mut c) = self.agents.remove(i);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The directory the CLI runs in (as `getcwd` reports it).
    pub fn dir_str(&self) -> String {
        let dir = self.dir.path().canonicalize().unwrap();
        dir.to_str().unwrap().to_string()
    }

    /// Runs the CLI as `user` against this planner.
    pub fn cli(&self, user: &str, args: &[&str]) -> Output {
        self.cli_command(user, args).output().unwrap()
    }

    /// The CLI as `user` against this planner, to start (`cli` waits for it).
    pub fn cli_command(&self, user: &str, args: &[&str]) -> Command {
        let mut command = Command::new(hyperplan_bin());
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("HYPERPLAN_PLANNER", &self.addr)
            .env("HYPERPLAN_CERT_DIR", self.certs())
            .env("HYPERPLAN_USER", user)
            .env("XDG_CONFIG_HOME", self.dir.path())
            .env_remove("RUST_LOG");
        command
    }

    pub fn cli_json(&self, user: &str, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["--output", "json"]);
        let out = self.cli(user, &a);
        assert!(
            out.status.success(),
            "{args:?}: {}\nplanner log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.planner_log()
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Node name → state, from `hyperplan nodes --output json`.
    pub fn states(&self) -> Vec<(String, String)> {
        let v = self.cli_json("alice", &["nodes"]);
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                (
                    n["name"].as_str().unwrap().to_string(),
                    n["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    pub fn wait_state(&self, node: &str, state: &str, timeout: Duration) {
        wait_for(timeout, &format!("{node} {state}"), || {
            self.states().iter().any(|(n, s)| n == node && s == state).then_some(())
        });
    }

    /// A user certificate for `user` (role `user`), beside the others.
    pub fn issue_user(&self, user: &str) {
        let out = Command::new(hyperplan_bin())
            .args([
                "certs",
                "issue",
                "--dir",
                path_str(&self.certs()),
                "--user",
                user,
                "--role",
                "user",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// A job file: `replicas` tasks of `cpu` each running `sh -c script` in `work`, with
    /// their output thrown away.
    pub fn job_file(&self, name: &str, replicas: u32, cpu: u32, work: &Path, script: &str) -> PathBuf {
        self.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\ntasks:\n  - name: t\n    replicas: {replicas}\n    resources: {{cpu: {cpu}}}\n    \
                 workingDir: {}\n    output: /dev/null\n    command: [sh, -c, '{script}']\n",
                path_str(work)
            ),
        )
    }

    /// `hyperplan ARGS` as `user`, which must succeed: its stdout (the test fails with
    /// its stderr and the planner's log otherwise).
    pub fn ok(&self, user: &str, args: &[&str]) -> String {
        let out = self.cli(user, args);
        assert!(
            out.status.success(),
            "{args:?}: {}\nplanner log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.planner_log()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `hyperplan status ARGS --output json` as `user`: its jobs.
    pub fn jobs(&self, user: &str, args: &[&str]) -> Vec<Value> {
        let mut a = vec!["status"];
        a.extend(args);
        self.cli_json(user, &a)["jobs"].as_array().unwrap().clone()
    }

    pub fn write(&self, name: &str, body: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    }
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The time of day, in ms, of the first line of a daemon's `log` holding `needle` (from
/// its RFC 3339 timestamp, `…T12:34:56.789012Z`), if any: to order what two daemons did.
pub fn logged_at(log: &str, needle: &str) -> Option<u64> {
    let line = log.lines().find(|l| l.contains(needle))?;
    let time = line.split_whitespace().next()?.split('T').nth(1)?.trim_end_matches('Z');
    let mut parts = time.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    let secs: f64 = s.parse().ok()?;
    Some((h.parse::<u64>().ok()? * 3600 + m.parse::<u64>().ok()? * 60) * 1000 + (secs * 1000.0) as u64)
}
