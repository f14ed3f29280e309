//! `hyperplan demo`: a whole hyperplan cluster on this machine, for a first look. It makes
//! a cluster CA in a temp dir, starts `hyperplan-planner` and N `hyperplan-agent run`
//! processes on 127.0.0.1 (each a different synthetic machine, labelled into a two-tier
//! fabric), waits until every node is Ready, shows the HyperNode tree and the nodes,
//! submits the example jobs, shows where they went, and stops everything.
//!
//! The steps run the real binaries (the daemons next to this one, and this CLI itself),
//! so what the demo prints is what an operator sees.
//!
//! # Nothing outlives the demo
//!
//! However the demo ends, it leaves no daemon running and no CA key on disk:
//!
//! - The temp dir is made under `$XDG_RUNTIME_DIR` when that is set (a per-user tmpfs,
//!   mode 0700, emptied at logout), else under the system temp dir.
//! - `ca.key` is deleted as soon as the planner, node and user certificates are issued:
//!   the demo never issues another one. The keys left (planner, nodes, user `demo`) are
//!   throwaway, trusted only by a CA whose key no longer exists.
//! - Every child (planner, agents, the CLI runs) is started with `PR_SET_PDEATHSIG`
//!   (SIGTERM): the kernel stops it when the demo dies, SIGKILL included.
//! - SIGINT, SIGTERM and SIGHUP are caught on a thread of their own, at any step: it stops
//!   the children (SIGTERM, up to 5 s, then SIGKILL), removes the temp dir and exits with
//!   128 + the signal number, naming the signal. `--keep-running` ends this way too.
//! - SIGKILL cannot be caught: a watcher (`sh`, reading a pipe only the demo holds) wakes
//!   at end of file when the demo dies however it dies, and removes the temp dir after the
//!   children have had a moment to exit. A clean stop kills the watcher first.
//!
//! A job file given with `--jobs` is read and parsed before anything starts; a file the
//! planner refuses fails the demo too. Either way the error is printed and the exit
//! status is nonzero.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hyperplan_net::certs::{UserRole, init_ca, issue_node, issue_user};

/// Start a planner and agents on 127.0.0.1, plan the example jobs, stop.
///
/// Needs `hyperplan-planner` and `hyperplan-agent` next to this binary (`cargo build
/// --workspace --bins`, or `make demo`). Everything lives in a temporary directory that
/// is removed at the end; nothing is written elsewhere and nothing needs root.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  hyperplan demo\n  hyperplan demo --agents 16 --jobs my-jobs.yaml\n  \
                        hyperplan demo --keep-running   # then, in another shell, the printed exports"
)]
pub struct Args {
    /// How many agents (nodes) to start; 4 per leaf switch, all under one spine.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    agents: u32,
    /// Job file to submit instead of the built-in examples.
    #[arg(long, value_name = "FILE")]
    jobs: Option<PathBuf>,
    /// Keep the cluster running after the jobs are placed, until Ctrl-C.
    #[arg(long)]
    keep_running: bool,
}

/// The machines the agents pretend to be (hwloc synthetic descriptions), in turn.
const MACHINES: &[(&str, &str)] = &[
    (
        "2 sockets x 8 cores x 2 threads",
        "pack:2 numa:1(memory=34359738368) core:8 pu:2",
    ),
    (
        "2 sockets x 2 NUMA x 4 cores x 2 threads",
        "pack:2 numa:2(memory=17179869184) core:4 pu:2",
    ),
    (
        "1 socket x 4 NUMA x 4 cores x 2 threads",
        "pack:1 numa:4(memory=17179869184) core:4 pu:2",
    ),
    ("4 sockets x 4 cores", "pack:4 numa:1(memory=17179869184) core:4 pu:1"),
];

const DEMO_JOBS: &str = "\
# The demo's jobs: a gang that must share a leaf switch with NUMA-pinned ranks, a job
# spread over the spine, a bag of small unpinned tasks, and one that can never fit.
# Each task says who and where it is: its rank, node, user, the CPUs the planner gave
# it and the CPUs the kernel lets it use (the demo's machines are synthetic, so the
# agents run tasks unpinned: on a real node the two are the same).
---
name: mpi-leaf
networkTopology: {mode: hard, highestTierAllowed: 1}
tasks:
  - name: rank
    replicas: 4
    topologyPolicy: single-numa-node
    resources: {cpu: 4, memory: 4Gi}
    command: [sh, -c, \"echo rank $RANK of $WORLD_SIZE on $HYPERPLAN_NODE as $(id -un): given CPUs $HYPERPLAN_CPUS, $(grep Cpus_allowed_list /proc/self/status | tr -d '\\t')\"]
---
name: train-spine
networkTopology: {mode: hard, highestTierAllowed: 2}
tasks:
  - name: worker
    replicas: 6
    topologyPolicy: best-effort
    resources: {cpu: 8, memory: 8Gi}
    command: [sh, -c, \"echo worker $RANK on $HYPERPLAN_NODE, master $MASTER_ADDR:$MASTER_PORT; sleep 1\"]
---
name: etl
tasks:
  - name: map
    replicas: 8
    resources: {cpu: 1500m, memory: 2Gi}
    command: [sh, -c, \"echo map $HYPERPLAN_RANK on $HYPERPLAN_NODE\"]
---
name: too-big
tasks:
  - name: t
    replicas: 1
    topologyPolicy: single-numa-node
    resources: {cpu: 64}
";

/// What must go when the demo ends: the daemons, the watcher and the temp dir. Shared
/// by the main thread (which starts the children) and the signal thread.
#[derive(Default)]
struct State {
    /// Planner last: agents are stopped before it.
    procs: Vec<(String, Child)>,
    /// Removes the temp dir if the demo dies without cleaning up (see the module doc).
    watcher: Option<Child>,
    dir: Option<tempfile::TempDir>,
}

impl State {
    /// Stops the children (SIGTERM, then SIGKILL after 5 s) and removes the temp dir.
    fn stop(&mut self) {
        if let Some(mut w) = self.watcher.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        // The agents' shepherds left the demo's session on purpose (they outlive agent
        // restarts): they are stopped here, by the pids they wrote, with their tasks.
        if let Some(dir) = &self.dir {
            stop_shepherds(&dir.path().join("agents"));
        }
        for (_, c) in self.procs.iter_mut() {
            signal(c.id(), libc::SIGTERM);
        }
        for (name, mut c) in self.procs.drain(..) {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match c.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                    _ => {
                        note(&format!("demo: {name} did not stop on SIGTERM; killing it"));
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                }
            }
        }
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_path_buf();
            if let Err(e) = dir.close() {
                note(&format!("demo: cannot remove {}: {e}", path.display()));
            }
        }
    }
}

/// The demo's [`State`]; stops everything when dropped (the normal end, or an error).
struct Session(Arc<Mutex<State>>);

impl Session {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.0)
    }

    /// Spawns `cmd` as a child that dies with the demo and is stopped at its end. The
    /// lock is held across the spawn, so a signal's cleanup sees every child.
    fn spawn(&self, name: String, mut cmd: Command) -> std::io::Result<()> {
        let mut state = self.lock();
        let child = die_with_parent(&mut cmd).spawn()?;
        state.procs.insert(0, (name, child));
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.lock().stop();
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; `pid` is a child
    // we have not reaped (it is still in `State::procs`), so it cannot name another process.
    #[allow(unsafe_code)]
    let _ = unsafe { libc::kill(pid, sig) };
}

/// Stops the tasks of every agent's state directory (`agents/NODE`), by the pids their
/// shepherds wrote (see `hyperplan_agent::tasks::stop`).
fn stop_shepherds(agents: &Path) {
    let Ok(nodes) = std::fs::read_dir(agents) else { return };
    for node in nodes.filter_map(|e| e.ok()) {
        hyperplan_agent::tasks::stop::stop_all(&node.path(), Duration::from_secs(3));
    }
}

/// Makes the child started by `cmd` receive SIGTERM when the demo dies, however it dies.
///
/// The kernel sends the signal when the *thread* that forked the child exits, not the
/// process: children must be spawned from the main thread (as `run` does; the process ends
/// when it does), never from a short-lived helper thread.
fn die_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // Before the fork: the child compares its parent against this afterwards.
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: prctl(2), getppid(2) and _exit(2) are plain system calls, and it
    // allocates nothing (last_os_error reads errno). If the demo died between the fork and
    // prctl, the death signal was never armed: the parent is no longer `parent`, and the
    // child leaves at once instead of running orphaned.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        })
    }
}

/// Catches SIGINT, SIGTERM and SIGHUP from now on; on one, stops everything in `state`,
/// says which signal it was and exits with 128 + its number.
fn catch_signals(state: Arc<Mutex<State>>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("starting the signal handler")?;
    // Registered here, before the demo starts anything: no signal finds the default action.
    let (mut int, mut term, mut hup) = {
        let _guard = rt.enter();
        (
            signal(SignalKind::interrupt()).context("catching SIGINT")?,
            signal(SignalKind::terminate()).context("catching SIGTERM")?,
            signal(SignalKind::hangup()).context("catching SIGHUP")?,
        )
    };
    std::thread::Builder::new()
        .name("demo-signals".into())
        .spawn(move || {
            let (name, number) = rt.block_on(async {
                tokio::select! {
                    _ = int.recv() => ("SIGINT", libc::SIGINT),
                    _ = term.recv() => ("SIGTERM", libc::SIGTERM),
                    _ = hup.recv() => ("SIGHUP", libc::SIGHUP),
                }
            });
            note(&format!(
                "\ndemo: {name} received: stopping the planner and agents, removing the temp dir"
            ));
            // Held until exit: the main thread starts nothing more.
            let mut state = lock(&state);
            state.stop();
            note(&format!("demo: stopped by {name}"));
            std::process::exit(128 + number);
        })
        .context("starting the signal handler")?;
    Ok(())
}

/// Starts the watcher that removes `dir` when the demo dies without cleaning up: `sh`
/// reads its stdin, a pipe whose only writer is the demo, until end of file.
fn start_watcher(dir: &Path) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .args(["-c", "read -r _; sleep 1; rm -rf -- \"$1\"", "hyperplan-demo-cleanup"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Out of the terminal's process group: a Ctrl-C is the demo's to handle.
        .process_group(0)
        .spawn()
}

/// Where the temp dir goes: `$XDG_RUNTIME_DIR` when it is an absolute directory.
fn temp_base() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(std::env::temp_dir)
}

fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found next to {}: build the daemons first (`cargo build --workspace --bins` or `make demo`)",
            name,
            exe.display()
        );
    }
    Ok(path)
}

/// A line on stderr from the clean-up path, which must go on when nobody reads it any
/// more (the terminal closed, the parent died: `eprintln!` would panic on the broken pipe
/// and leave the children running).
fn note(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn heading(text: &str) {
    println!("\n== {text}");
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let planner_bin = sibling("hyperplan-planner")?;
    let agent_bin = sibling("hyperplan-agent")?;
    let me = std::env::current_exe().context("locating this binary")?;
    // A job file that cannot be read or parsed fails here, before anything starts.
    if let Some(p) = &args.jobs {
        // Its errors name the file, line and column.
        let jobs = hyperplan_shared::load_job_file(p)?;
        if jobs.is_empty() {
            bail!("the job file {} holds no jobs", p.display());
        }
    }
    // From here on, the children and the temp dir are only reached through the session:
    // its drop (an error, the end) and the signal thread both stop everything.
    let session = Session(Arc::new(Mutex::new(State::default())));
    catch_signals(session.0.clone())?;
    let dir = {
        let base = temp_base();
        let dir = tempfile::Builder::new()
            .prefix("hyperplan-demo-")
            .tempdir_in(&base)
            .with_context(|| format!("making a temp dir in {}", base.display()))?;
        let path = dir.path().to_path_buf();
        let mut state = session.lock();
        state.dir = Some(dir);
        match start_watcher(&path) {
            Ok(w) => state.watcher = Some(w),
            Err(e) => eprintln!(
                "demo: cannot start the cleanup watcher (sh): {e}; a demo killed by SIGKILL leaves {}",
                path.display()
            ),
        }
        path
    };
    let certs = dir.join("certs");
    let nodes: Vec<String> = (1..=args.agents).map(|i| format!("node{i:02}")).collect();

    heading("certificates");
    init_ca(&certs, false)?;
    hyperplan_net::certs::issue_planner(&certs, &[])?;
    for n in &nodes {
        issue_node(&certs, n)?;
    }
    // Tasks run as the user whose certificate submitted them: you.
    let user = current_user()?;
    issue_user(&certs, &user, UserRole::Admin)?;
    // Nothing more to issue: the CA key goes now (see the module doc).
    let ca_key = certs.join("ca.key");
    std::fs::remove_file(&ca_key).with_context(|| format!("removing {}", ca_key.display()))?;
    println!(
        "cluster CA, planner, {} node and 1 user ({user}, admin) certificate in {}",
        nodes.len(),
        certs.display()
    );
    println!("(the CA key is already deleted: the demo issues nothing more)");

    let config = dir.join("planner.toml");
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\ntickInterval = 0.5\nheartbeatInterval = 0.5\nmissedHeartbeats = 3\n\n\
         [[discovery]]\nsource = \"label\"\ntypes = { fabric = [\"hyperplan.io/spine\", \"hyperplan.io/leaf\"] }\n",
    )?;
    heading("planner");
    let planner_log = std::fs::File::create(dir.join("planner.log"))?;
    let mut planner = Command::new(&planner_bin);
    planner
        .args(["--config"])
        .arg(&config)
        .args(["--cert-dir"])
        .arg(&certs)
        .arg("--store")
        .arg(dir.join("state.redb"))
        .stdout(Stdio::piped())
        .stderr(planner_log);
    session
        .spawn("hyperplan-planner".into(), planner)
        .with_context(|| format!("starting {}", planner_bin.display()))?;
    let planner_out = session.lock().procs.first_mut().and_then(|(_, c)| c.stdout.take());
    let mut line = String::new();
    if let Some(out) = planner_out {
        BufReader::new(out).read_line(&mut line)?;
    }
    let addr = line
        .trim()
        .strip_prefix("hyperplan-planner listening on ")
        .map(str::to_string)
        .with_context(|| format!("the planner did not start: {}", read_log(&dir.join("planner.log"))))?;
    println!("hyperplan-planner listening on {addr} (log: planner.log in the temp dir)");

    heading(&format!("{} agents", nodes.len()));
    for (i, n) in nodes.iter().enumerate() {
        let (what, synthetic) = MACHINES[i % MACHINES.len()];
        let leaf = format!("leaf-{}", i / 4 + 1);
        let log = std::fs::File::create(dir.join(format!("{n}.log")))?;
        let state_dir = dir.join("agents").join(n);
        let mut agent = Command::new(&agent_bin);
        agent
            .args([
                "run",
                "--config",
                "/dev/null",
                "--planner",
                &addr,
                "--node",
                n,
                "--synthetic",
                synthetic,
            ])
            .arg("--cert-dir")
            .arg(&certs)
            .arg("--state-dir")
            .arg(&state_dir)
            .args([
                "--label",
                &format!("hyperplan.io/leaf={leaf}"),
                "--label",
                "hyperplan.io/spine=spine-1",
            ])
            .stdout(Stdio::null())
            .stderr(log);
        if user == "root" {
            // You run the demo as root: its tasks run as you, which agents refuse by default.
            agent.arg("--allow-root");
        }
        session
            .spawn(format!("agent {n}"), agent)
            .with_context(|| format!("starting {}", agent_bin.display()))?;
        println!("{n}: {what}, under {leaf}");
    }
    let cli = |args: &[&str]| -> Command {
        let mut c = Command::new(&me);
        c.args(args)
            .env("HYPERPLAN_PLANNER", &addr)
            .env("HYPERPLAN_CERT_DIR", &certs)
            .env("HYPERPLAN_USER", &user)
            .env("XDG_CONFIG_HOME", &dir)
            // The jobs' outputs land in the submit directory: the temp dir.
            .current_dir(&dir);
        die_with_parent(&mut c);
        c
    };
    let started = Instant::now();
    loop {
        let out = cli(&["nodes", "--output", "json"]).output()?;
        let ready = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v["nodes"].as_array().cloned())
            .map_or(0, |a| a.iter().filter(|n| n["state"] == "Ready").count());
        if ready == nodes.len() {
            println!("all {ready} nodes Ready after {:.1} s", started.elapsed().as_secs_f64());
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "only {ready} of {} nodes Ready after 60 s; planner log:\n{}",
                nodes.len(),
                read_log(&dir.join("planner.log"))
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    heading("hyperplan hypernodes");
    show(cli(&["hypernodes"]))?;
    heading("hyperplan nodes");
    show(cli(&["nodes"]))?;

    let jobs = match &args.jobs {
        Some(p) => p.clone(),
        None => {
            let p = dir.join("demo-jobs.yaml");
            std::fs::write(&p, DEMO_JOBS)?;
            p
        }
    };
    heading(&format!(
        "hyperplan submit {}",
        jobs.file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    ));
    let mut submit = cli(&["submit"]);
    submit.arg(&jobs);
    let out = submit.output().context("running the hyperplan CLI")?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!(
            "submitting {} failed: {}",
            jobs.display(),
            err.trim().trim_start_matches("hyperplan: ")
        );
    }
    // The planner ticks as soon as the jobs arrive; give it a moment and show the result.
    std::thread::sleep(Duration::from_millis(1000));
    heading("hyperplan status (running)");
    show(cli(&["status"]))?;
    heading("hyperplan nodes (while the jobs run)");
    show(cli(&["nodes"]))?;
    wait_until_ended(&cli, Duration::from_secs(60))?;
    heading("hyperplan status (ended)");
    show(cli(&["status"]))?;
    // Ended jobs reach the accounting database (SQLite beside the state) within moments.
    wait_until_accounted(&cli, Duration::from_secs(15))?;
    heading("hyperplan history (the accounting database, like sacct)");
    show(cli(&["history"]))?;
    heading("hyperplan report usage --by user");
    show(cli(&["report", "usage", "--by", "user", "--since", "1h"]))?;
    let demo_jobs = args.jobs.is_none();
    if demo_jobs {
        heading("hyperplan status mpi-leaf");
        show(cli(&["status", "mpi-leaf"]))?;
        for rank in 0..4 {
            let task = format!("rank-{rank}");
            heading(&format!("hyperplan logs mpi-leaf --task {task}"));
            show(cli(&["logs", "mpi-leaf", "--task", &task]))?;
        }
    }

    if args.keep_running {
        println!(
            "\nThe cluster keeps running; in another shell:\n  export HYPERPLAN_PLANNER={addr} HYPERPLAN_CERT_DIR={} HYPERPLAN_USER={user}\n  hyperplan status\n  hyperplan history\nCtrl-C here stops it.",
            certs.display()
        );
        // The signal thread stops everything and exits; this (main) thread must live on
        // meanwhile: the children's death signal is tied to it.
        loop {
            std::thread::park();
        }
    }
    heading("stopping");
    session.lock().stop();
    println!("planner and agents stopped; temp dir removed");
    Ok(())
}

/// Waits until no job is pending, placed or running (the rejected one never will be).
fn wait_until_ended(cli: &dyn Fn(&[&str]) -> Command, limit: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let out = cli(&["status", "--output", "json"]).output()?;
        let busy = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v["jobs"].as_array().cloned())
            .map_or(usize::MAX, |jobs| {
                jobs.iter()
                    .filter(|j| matches!(j["status"].as_str(), Some("placed" | "running")))
                    .count()
            });
        if busy == 0 {
            return Ok(());
        }
        if started.elapsed() > limit {
            println!("({busy} job(s) still running after {} s)", limit.as_secs());
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Waits until the accounting database holds every job that ended (as `status` counts
/// them), or `limit` passed.
fn wait_until_accounted(cli: &dyn Fn(&[&str]) -> Command, limit: Duration) -> anyhow::Result<()> {
    let count = |args: &[&str], ended_only: bool| -> anyhow::Result<usize> {
        let out = cli(args).output()?;
        Ok(serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v["jobs"].as_array().cloned())
            .map_or(0, |jobs| {
                jobs.iter()
                    .filter(|j| {
                        !ended_only
                            || matches!(
                                j["status"].as_str(),
                                Some("completed" | "failed" | "cancelled" | "timeout" | "preempted")
                            )
                    })
                    .count()
            }))
    };
    let ended = count(&["status", "--all", "--output", "json"], true)?;
    let started = Instant::now();
    while count(&["history", "--output", "json"], false)? < ended {
        if started.elapsed() > limit {
            println!("(the accounting database does not have every ended job yet)");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    Ok(())
}

/// The user this process runs as (`id -un`): the demo's certificate names it, so the
/// tasks run as you.
fn current_user() -> anyhow::Result<String> {
    let out = Command::new("id").arg("-un").output().context("running `id -un`")?;
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || name.is_empty() {
        bail!("`id -un` did not name the current user");
    }
    Ok(name)
}

fn show(mut cmd: Command) -> anyhow::Result<()> {
    let out = cmd.output().context("running the hyperplan CLI")?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
