//! [`Planners`]: several `hyperplan-planner` processes that share their state in one etcd
//! (the HA tests), each on a port chosen before any starts (the list agents and the CLI
//! get), with its own `planner-{i}.toml` and `planner-{i}.log` in the cluster's
//! directory. The etcd is the test's to start; the harness keeps it, so that on drop the
//! planners are killed first, then the agents (with `c`), then etcd.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::etcd::free_udp_port;
use super::{Cluster, bin, hyperplan_bin, task_user, wait_for};

/// The synthetic machine each agent has.
pub const MACHINE: &str = "pack:1 numa:1(memory=17179869184) core:4 pu:1";
pub const LONG: Duration = Duration::from_secs(60);

/// `hyperplan planners --output json`: address → (role, epoch).
pub type Roles = BTreeMap<String, (String, Option<u64>)>;

/// Planners on one etcd prefix, and the etcd (`store`, whatever the test started).
pub struct Planners<S> {
    /// Certificates, the agents and the CLI (`c.addr` is the whole list).
    pub c: Cluster,
    pub store: S,
    pub addrs: Vec<String>,
    planners: Vec<Option<Child>>,
    nodes: Vec<String>,
    /// Has a user certificate; the tasks run as this user.
    pub user: String,
    /// A directory anyone may write in, for the tasks to work in.
    pub work: tempfile::TempDir,
}

impl<S> Drop for Planners<S> {
    fn drop(&mut self) {
        for p in self.planners.iter_mut().flatten() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

impl<S> Planners<S> {
    /// `n` planners, started at once, each with `store_toml` (the `[store]` section for
    /// `store`), `[ha] leaseTtl = ttl` and `more` config; certificates for `nodes`,
    /// whose agents [`Planners::start_agents`] starts.
    pub fn start(store: S, store_toml: &str, n: usize, ttl: u32, more: &str, nodes: &[&str]) -> Self {
        let tomls = vec![store_toml.to_string(); n];
        Self::start_each(store, &tomls, ttl, more, nodes)
    }

    /// As [`Planners::start`], planner `i` with `store_tomls[i]` (each through its own
    /// path to etcd, say).
    pub fn start_each(store: S, store_tomls: &[String], ttl: u32, more: &str, nodes: &[&str]) -> Self {
        Self::start_on("127.0.0.1", store, store_tomls, ttl, more, nodes, &[], &[])
    }

    /// As [`Planners::start_each`], the planners on `host` (a bridge's address, or one
    /// per planner separated by commas, for
    /// agents in network namespaces: `namespaces` is (node, namespace)), each also given
    /// `args` (`--node-lost-after 5`, …).
    #[allow(clippy::too_many_arguments)]
    pub fn start_on(
        host: &str,
        store: S,
        store_tomls: &[String],
        ttl: u32,
        more: &str,
        nodes: &[&str],
        namespaces: &[(String, String)],
        args: &[&str],
    ) -> Self {
        let n = store_tomls.len();
        let mut c = Cluster::prepare(nodes, None);
        c.namespaces = namespaces.to_vec();
        c.planner_args = args.iter().map(|a| a.to_string()).collect();
        let user = task_user();
        c.issue_user(&user);
        // `host` may list one per planner (`a,b`), taken in turn.
        let hosts: Vec<&str> = host.split(',').collect();
        let addrs: Vec<String> = (0..n)
            .map(|i| format!("{}:{}", hosts[i % hosts.len()], free_udp_port()))
            .collect();
        for (i, a) in addrs.iter().enumerate() {
            // Each planner's accounting file in the test's directory, not the default
            // beside /var/lib/hyperplan/state.redb (etcd planners keep no state file).
            let accounting = if more.contains("[accounting]") {
                String::new()
            } else {
                format!("\n[accounting]\npath = \"accounting-{i}.db\"\n")
            };
            c.write(
                &format!("planner-{i}.toml"),
                &format!(
                    "[server]\nlisten = \"{a}\"\n{}[ha]\nleaseTtl = {ttl}\n{more}{accounting}",
                    store_tomls[i]
                ),
            );
        }
        let mut ha = Planners {
            c,
            store,
            addrs: addrs.clone(),
            planners: (0..n).map(|_| None).collect(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            user,
            work: tempfile::tempdir().unwrap(),
        };
        for i in 0..n {
            ha.start_planner(i);
        }
        // Agents and the CLI get the whole list.
        ha.c.addr = addrs.join(",");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(ha.work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        ha
    }

    /// An agent for each node (a [`MACHINE`]), and waits until every one is Ready.
    pub fn start_agents(&mut self) {
        for node in &self.nodes {
            self.c.start_agent(node, MACHINE, &[]);
        }
        for node in &self.nodes {
            self.c.wait_state(node, "Ready", LONG);
        }
    }

    pub fn log_path(&self, i: usize) -> PathBuf {
        self.c.dir.path().join(format!("planner-{i}.log"))
    }

    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_path(i)).unwrap_or_default()
    }

    /// Every planner's log, each under a `--- planner i:` line.
    pub fn logs(&self) -> String {
        (0..self.addrs.len())
            .map(|i| format!("--- planner {i}:\n{}", self.log(i)))
            .collect()
    }

    /// Starts planner `i` (again), its log appended to.
    pub fn start_planner(&mut self, i: usize) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .unwrap();
        let child = Command::new(bin("hyperplan-planner"))
            .arg("--config")
            .arg(self.c.dir.path().join(format!("planner-{i}.toml")))
            .arg("--cert-dir")
            .arg(self.c.certs())
            .args(["--heartbeat-interval", "0.3", "--tick-interval", "0.2"])
            .args(&self.c.planner_args)
            .stdout(Stdio::null())
            .stderr(log)
            .env("RUST_LOG", "info")
            .spawn()
            .unwrap();
        self.planners[i] = Some(child);
    }

    /// How planner `i` exited, once it has (reaped then); `None` while it runs.
    pub fn exited(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        let status = self.planners[i].as_mut()?.try_wait().unwrap()?;
        self.planners[i] = None;
        Some(status)
    }

    /// SIGKILL, and reaps it.
    pub fn kill_planner(&mut self, i: usize) {
        let mut p = self.planners[i].take().unwrap();
        p.kill().unwrap();
        p.wait().unwrap();
    }

    /// Panics, with every planner's log, where a planner this test started has exited.
    pub fn assert_planners_alive(&mut self, when: &str) {
        let exited: Vec<String> = self
            .planners
            .iter_mut()
            .enumerate()
            .filter_map(|(i, p)| {
                let status = p.as_mut()?.try_wait().unwrap()?;
                Some(format!("planner {i} exited ({status})"))
            })
            .collect();
        assert!(exited.is_empty(), "{when}: {exited:?}\n{}", self.logs());
    }

    /// `hyperplan planners --output json` as the user; `Err` (why, and what the CLI said
    /// on stderr) where its answer is not a list of planners.
    pub fn roles(&self) -> Result<Roles, String> {
        let out = self.c.cli(&self.user, &["planners", "--output", "json"]);
        let why = |e: &dyn std::fmt::Display| format!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| why(&e))?;
        let mut roles = Roles::new();
        for p in v["planners"].as_array().ok_or_else(|| why(&"no planners"))? {
            let (Some(address), Some(role)) = (p["address"].as_str(), p["role"].as_str()) else {
                return Err(why(&format!("a planner without address or role: {p}")));
            };
            roles.insert(address.to_string(), (role.to_string(), p["epoch"].as_u64()));
        }
        Ok(roles)
    }

    /// The index and epoch of the leader in `roles`, where exactly one leads.
    pub fn leader_in(&self, roles: &Roles) -> Option<(usize, Option<u64>)> {
        let leaders: Vec<_> = roles.iter().filter(|(_, (r, _))| r == "leader").collect();
        match leaders[..] {
            [(addr, (_, epoch))] => Some((self.addrs.iter().position(|a| a == addr)?, *epoch)),
            _ => None,
        }
    }

    /// The index of the leader where exactly one leads now (`None` also where `planners`
    /// fails).
    pub fn leading(&self) -> Option<usize> {
        self.leader_in(&self.roles().ok()?).map(|(i, _)| i)
    }

    /// The index of the leader, once exactly one leads.
    pub fn leader(&self) -> usize {
        wait_for(LONG, "one leader", || self.leading())
    }

    /// A job file: `replicas` tasks of `cpu` each running `sh -c script` in `work`.
    pub fn job(&self, name: &str, replicas: u32, cpu: u32, script: &str) -> PathBuf {
        self.c.job_file(name, replicas, cpu, self.work.path(), script)
    }

    /// `hyperplan ARGS --output json` as `user` (through the whole list): its answer;
    /// panics, with every planner's log, where the CLI fails.
    pub fn json(&self, user: &str, args: &[&str]) -> Value {
        let out = self.c.cli(user, &[args, &["--output", "json"]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}\n{}", self.logs());
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `hyperplan status ARGS --output json` as `user`: its jobs.
    pub fn jobs(&self, user: &str, args: &[&str]) -> Vec<Value> {
        let v = self.json(user, &[&["status"], args].concat());
        v["jobs"].as_array().unwrap().clone()
    }

    /// What a thread needs to run the CLI as the user through the whole list.
    pub fn client(&self) -> Client {
        Client {
            addr: self.c.addr.clone(),
            certs: self.c.certs(),
            dir: self.c.dir.path().to_path_buf(),
            user: self.user.clone(),
        }
    }
}

/// The CLI as a [`Planners`]' user, owned (for a thread that submits while the test
/// kills things).
#[derive(Clone)]
pub struct Client {
    pub addr: String,
    pub certs: PathBuf,
    /// The cluster's directory: the CLI runs in it.
    pub dir: PathBuf,
    pub user: String,
}

impl Client {
    /// `hyperplan ARGS` in the cluster's directory, to run.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(hyperplan_bin());
        command
            .args(args)
            .current_dir(&self.dir)
            .env("HYPERPLAN_PLANNER", &self.addr)
            .env("HYPERPLAN_CERT_DIR", &self.certs)
            .env("HYPERPLAN_USER", &self.user)
            .env("XDG_CONFIG_HOME", &self.dir);
        command
    }

    /// [`Client::command`] run to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
}
