//! `hyperplan demo`: a whole hyperplan cluster on this machine, for a first look. It makes
//! a cluster CA in a temp dir, starts `hyperplan-planner` and N `hyperplan-agent run`
//! processes on 127.0.0.1 (each a different synthetic machine, labelled into a two-tier
//! fabric), waits until every node is Ready, shows the HyperNode tree and the nodes,
//! submits the example jobs, shows where they went, and stops everything.
//!
//! The steps run the real binaries (the daemons next to this one, and this CLI itself),
//! so what the demo prints is what an operator sees.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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
---
name: mpi-leaf
networkTopology: {mode: hard, highestTierAllowed: 1}
tasks:
  - name: rank
    replicas: 4
    topologyPolicy: single-numa-node
    resources: {cpu: 4, memory: 4Gi}
    command: [\"mpirun\", \"./solver\"]
---
name: train-spine
networkTopology: {mode: hard, highestTierAllowed: 2}
tasks:
  - name: worker
    replicas: 6
    topologyPolicy: best-effort
    resources: {cpu: 8, memory: 8Gi}
---
name: etl
tasks:
  - name: map
    replicas: 8
    resources: {cpu: 1500m, memory: 2Gi}
---
name: too-big
tasks:
  - name: t
    replicas: 1
    topologyPolicy: single-numa-node
    resources: {cpu: 64}
";

struct Procs(Vec<(String, Child)>);

impl Drop for Procs {
    fn drop(&mut self) {
        // Agents first, then the planner (the last one): SIGTERM, then wait.
        for (_, c) in self.0.iter_mut() {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        }
        for (name, c) in self.0.iter_mut() {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match c.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                    _ => {
                        eprintln!("demo: {name} did not stop on SIGTERM; killing it");
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                }
            }
        }
    }
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

fn heading(text: &str) {
    println!("\n== {text}");
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let planner_bin = sibling("hyperplan-planner")?;
    let agent_bin = sibling("hyperplan-agent")?;
    let me = std::env::current_exe().context("locating this binary")?;
    let dir = tempfile::Builder::new()
        .prefix("hyperplan-demo-")
        .tempdir()
        .context("making a temp dir")?;
    let certs = dir.path().join("certs");
    let nodes: Vec<String> = (1..=args.agents).map(|i| format!("node{i:02}")).collect();

    heading("certificates");
    init_ca(&certs, false)?;
    hyperplan_net::certs::issue_planner(&certs, &[])?;
    for n in &nodes {
        issue_node(&certs, n)?;
    }
    issue_user(&certs, "demo", UserRole::Admin)?;
    println!(
        "cluster CA, planner, {} node and 1 user certificate in {}",
        nodes.len(),
        certs.display()
    );

    let config = dir.path().join("planner.toml");
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\ntickInterval = 0.5\nheartbeatInterval = 0.5\nmissedHeartbeats = 3\n\n\
         [[discovery]]\nsource = \"label\"\ntypes = { fabric = [\"hyperplan.io/spine\", \"hyperplan.io/leaf\"] }\n",
    )?;
    let mut procs = Procs(Vec::new());
    heading("planner");
    let planner_log = std::fs::File::create(dir.path().join("planner.log"))?;
    let mut planner = Command::new(&planner_bin)
        .args(["--config"])
        .arg(&config)
        .args(["--cert-dir"])
        .arg(&certs)
        .stdout(Stdio::piped())
        .stderr(planner_log)
        .spawn()
        .with_context(|| format!("starting {}", planner_bin.display()))?;
    let mut line = String::new();
    if let Some(out) = planner.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    procs.0.push(("hyperplan-planner".into(), planner));
    let addr = line
        .trim()
        .strip_prefix("hyperplan-planner listening on ")
        .map(str::to_string)
        .with_context(|| {
            format!(
                "the planner did not start: {}",
                read_log(&dir.path().join("planner.log"))
            )
        })?;
    println!("hyperplan-planner listening on {addr} (log: planner.log in the temp dir)");

    heading(&format!("{} agents", nodes.len()));
    for (i, n) in nodes.iter().enumerate() {
        let (what, synthetic) = MACHINES[i % MACHINES.len()];
        let leaf = format!("leaf-{}", i / 4 + 1);
        let log = std::fs::File::create(dir.path().join(format!("{n}.log")))?;
        let child = Command::new(&agent_bin)
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
            .args([
                "--label",
                &format!("hyperplan.io/leaf={leaf}"),
                "--label",
                "hyperplan.io/spine=spine-1",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", agent_bin.display()))?;
        procs.0.insert(0, (format!("agent {n}"), child));
        println!("{n}: {what}, under {leaf}");
    }
    let cli = |args: &[&str]| -> Command {
        let mut c = Command::new(&me);
        c.args(args)
            .env("HYPERPLAN_PLANNER", &addr)
            .env("HYPERPLAN_CERT_DIR", &certs)
            .env("HYPERPLAN_USER", "demo")
            .env("XDG_CONFIG_HOME", dir.path());
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
                read_log(&dir.path().join("planner.log"))
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
            let p = dir.path().join("demo-jobs.yaml");
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
    show(submit)?;
    // The planner ticks as soon as the jobs arrive; give it a moment and show the result.
    std::thread::sleep(Duration::from_millis(1500));
    heading("hyperplan status");
    show(cli(&["status"]))?;
    heading("hyperplan nodes (after placement)");
    show(cli(&["nodes"]))?;

    if args.keep_running {
        println!(
            "\nThe cluster keeps running; in another shell:\n  export HYPERPLAN_PLANNER={addr} HYPERPLAN_CERT_DIR={} HYPERPLAN_USER=demo\n  hyperplan status\nCtrl-C here stops it.",
            certs.display()
        );
        wait_for_ctrl_c();
    }
    heading("stopping");
    drop(procs);
    println!("planner and agents stopped; temp dir removed");
    Ok(())
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

/// Blocks until SIGINT or SIGTERM.
fn wait_for_ctrl_c() {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return;
    };
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut i), Ok(mut t)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            tokio::select! {
                _ = i.recv() => {}
                _ = t.recv() => {}
            }
        }
    });
}
