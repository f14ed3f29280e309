//! [`Live`]: a planner and agents that probe this machine and run tasks for real, pinned
//! (`--pin on`), each agent with its own state directory and task cgroups, for the
//! end-to-end tests of task execution and containment. Dropping it stops the agents,
//! their tasks, and removes the cgroups the agents made.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{Cluster, all_running, bin, path_str, task_user, wait_for};

pub const LONG: Duration = Duration::from_secs(60);
/// A cluster of agents that probe this machine and pin (`--pin on`), each with its own
/// state directory, and a certificate for `user`.
pub struct Live {
    pub c: Cluster,
    pub user: String,
    /// Where jobs write: world-writable, so the task user can.
    pub work: tempfile::TempDir,
    pub states: BTreeMap<String, PathBuf>,
    pub agent_args: Vec<String>,
    /// The agents' `--cgroup-name` stem: tests run at once must not share task cgroups.
    pub cgroup_name: String,
    /// cgroups (directories) the agents are started in: a process or memory cap, as a
    /// unit's TasksMax or MemoryMax gives.
    pub agent_cgroups: Vec<PathBuf>,
    /// `RUST_LOG` of the agents started next (`info` unless a test says).
    pub agent_rust_log: String,
    /// Each agent (and so its tasks) in a UTS namespace of its own whose host name is its
    /// node's name, as on real nodes (MPI names its files and segments by host name).
    /// Root only; elsewhere they share this machine's.
    pub own_hostnames: bool,
    /// A command each agent is started through (`setpriv …`, `unshare …`): the
    /// restrictions a unit would put on it.
    pub agent_wrap: Vec<String>,
}

/// Live clusters started by this test process, for unique cgroup names.
static SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Live {
    pub fn start(nodes: &[&str]) -> Live {
        Self::start_with(nodes, &[])
    }

    /// As [`Live::start`], the agents with more `run` arguments.
    pub fn start_with(nodes: &[&str], agent_args: &[&str]) -> Live {
        Self::start_in(nodes, agent_args, &[])
    }

    /// As [`Live::start_with`], each agent started inside the cgroups `agent_cgroups`.
    pub fn start_in(nodes: &[&str], agent_args: &[&str], agent_cgroups: &[PathBuf]) -> Live {
        let mut live = Self::bare(Cluster::start(nodes), agent_args, agent_cgroups);
        live.start_agents(nodes);
        live
    }

    /// As [`Live::start`], each agent with its node's name as its host name (see
    /// `own_hostnames`).
    pub fn start_with_hostnames(nodes: &[&str]) -> Live {
        let c = Cluster::start(nodes);
        let mut live = Self::bare(c, &[], &[]);
        live.own_hostnames = super::euid_is_root();
        if !live.own_hostnames {
            eprintln!("not root: the agents share this machine's host name");
        }
        live.start_agents(nodes);
        live
    }

    /// A planner and the user's certificate, no agent yet: [`Live::start_agent`] starts
    /// each (with `agent_args` and `agent_wrap` as they are then).
    pub fn prepare(nodes: &[&str]) -> Live {
        Self::bare(Cluster::start(nodes), &[], &[])
    }

    /// Where the agent of `node` keeps its tasks (made when it starts).
    pub fn state_dir(&self, node: &str) -> PathBuf {
        self.c.dir.path().join(format!("state-{node}"))
    }

    fn bare(c: Cluster, agent_args: &[&str], agent_cgroups: &[PathBuf]) -> Live {
        let user = task_user();
        c.issue_user(&user);
        let work = tempfile::tempdir().unwrap();
        set_mode(work.path(), 0o777);
        Live {
            c,
            user,
            work,
            states: BTreeMap::new(),
            agent_args: agent_args.iter().map(|a| a.to_string()).collect(),
            cgroup_name: format!(
                "hp-e2e-{}-{}",
                std::process::id(),
                SERIAL.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            ),
            agent_cgroups: agent_cgroups.to_vec(),
            agent_rust_log: "info".into(),
            own_hostnames: false,
            agent_wrap: Vec::new(),
        }
    }

    fn start_agents(&mut self, nodes: &[&str]) {
        for n in nodes {
            self.start_agent(n);
        }
        for n in nodes {
            self.c.wait_state(n, "Ready", LONG);
        }
    }

    pub fn start_agent(&mut self, node: &str) {
        let state = self
            .states
            .entry(node.to_string())
            .or_insert_with(|| self.c.dir.path().join(format!("state-{node}")))
            .clone();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.c.dir.path().join(format!("agent-{node}.log")))
            .unwrap();
        // Through a shell that moves itself into the cgroups first, then becomes the agent.
        let cgroups: Vec<String> = self.agent_cgroups.iter().map(|c| path_str(c).to_string()).collect();
        let mut command = if self.own_hostnames {
            let mut c = Command::new("unshare");
            c.args(["--uts", "--", "sh", "-c", "hostname \"$HP_NODE\" || exit 96; for c in $HP_CGROUPS; do echo $$ > $c/cgroup.procs || exit 97; done; exec \"$@\"", "sh"]);
            c
        } else {
            let mut c = Command::new("sh");
            c.args([
                "-c",
                "for c in $HP_CGROUPS; do echo $$ > $c/cgroup.procs || exit 97; done; exec \"$@\"",
                "sh",
            ]);
            c
        };
        let child = command
            .env("HP_NODE", node)
            .args(&self.agent_wrap)
            .arg(bin("hyperplan-agent"))
            .env("HP_CGROUPS", cgroups.join(" "))
            .args(["run", "--planner", &self.c.addr, "--node", node, "--cert-dir"])
            .arg(self.c.certs())
            // Pinned (and so in cgroups where the machine has them), unless the test says.
            .args(if self.agent_args.iter().any(|a| a == "--pin") {
                &[][..]
            } else {
                &["--pin", "on"][..]
            })
            .arg("--state-dir")
            .arg(&state)
            .args(["--cgroup-name", &format!("{}-{node}", self.cgroup_name)])
            // No site configuration, unless the test gives one.
            .args(if self.agent_args.iter().any(|a| a == "--config") {
                &[][..]
            } else {
                &["--config", "/dev/null"][..]
            })
            // Tasks see the node's /tmp, where the tests' files are, unless the test says.
            .args(if self.agent_args.iter().any(|a| a == "--private-tmp") {
                &[][..]
            } else {
                &["--private-tmp", "off"][..]
            })
            .args(&self.agent_args)
            .stdout(Stdio::null())
            .stderr(log)
            .env("RUST_LOG", &self.agent_rust_log)
            .spawn()
            .unwrap();
        self.c.agents.push((node.to_string(), child));
    }

    pub fn agent_log(&self, node: &str) -> String {
        std::fs::read_to_string(self.c.dir.path().join(format!("agent-{node}.log"))).unwrap_or_default()
    }

    /// Writes a job file whose tasks run in the work directory.
    pub fn job(&self, name: &str, body: &str) -> PathBuf {
        let text = format!("name: {name}\n{}", body.replace("WORKDIR", path_str(self.work.path())));
        self.c.write(&format!("{name}.yaml"), &text)
    }

    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        self.c.cli(&self.user, args)
    }

    /// `submit --wait`: the CLI's exit code and its stderr.
    pub fn submit_wait(&self, file: &Path) -> (i32, String) {
        let out = self.cli(&["submit", "--wait", path_str(file)]);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn status(&self, job: &str) -> Value {
        let v = self.c.cli_json(&self.user, &["status", job]);
        v["jobs"][0].clone()
    }

    /// Waits until the job runs with all its tasks started.
    pub fn wait_running(&self, job: &str) -> Value {
        wait_for(LONG, &format!("{job} running, every task started"), || {
            let j = self.status(job);
            all_running(&j).then_some(j)
        })
    }

    pub fn wait_status(&self, job: &str, status: &str) -> Value {
        wait_for(LONG, &format!("{job} {status}"), || {
            let j = self.status(job);
            (j["status"] == status).then_some(j)
        })
    }

    pub fn output(&self, job: &str, task: &str) -> String {
        std::fs::read_to_string(self.work.path().join(format!("hyperplan-{job}-{task}.out"))).unwrap_or_default()
    }
}

impl Drop for Live {
    /// The agents, their tasks, then the cgroups the agents made (the cluster's own drop
    /// then finds nothing left to stop).
    fn drop(&mut self) {
        // A failed test says what the agents and shepherds said.
        if std::thread::panicking() {
            for node in self.states.keys() {
                eprintln!("--- agent {node} log:\n{}", self.agent_log(node));
            }
            for state in self.states.values() {
                for (_, dir) in hyperplan_agent::tasks::scan::list(state) {
                    let log = std::fs::read_to_string(dir.shepherd_log()).unwrap_or_default();
                    eprintln!("--- {}:\n{log}", dir.shepherd_log().display());
                }
            }
        }
        for (_, a) in &mut self.c.agents {
            let _ = a.kill();
            let _ = a.wait();
        }
        for state in self.states.values() {
            hyperplan_agent::tasks::stop::stop_all(state, Duration::from_secs(2));
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        for node in self.states.keys() {
            hyperplan_agent::tasks::cgroup::v1::remove_all(
                Path::new(hyperplan_agent::tasks::cgroup::CGROUP_ROOT),
                &own,
                &format!("{}-{node}", self.cgroup_name),
            );
        }
    }
}

pub fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}
