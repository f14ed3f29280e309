//! Failover time with etcd (issue 14): three release planners on one etcd prefix; the
//! leader gets jobs, is killed with SIGKILL, and the time is taken until a standby
//! answers `status --all` with every job acknowledged before the kill. The killed planner
//! is started again (it stands by) before the next round.
//!
//! `cargo bench --bench failover` (`KILLS=10 LEASE_TTL=10 JOBS=50`). Needs `etcd`
//! (Debian's etcd-server); without it the bench says so and stops. Not a criterion
//! bench: it measures processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../tests/common/etcd.rs"]
mod etcd;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{bench_dir, daemon, env_or};
use serde_json::Value;

struct Planners {
    bin: PathBuf,
    dir: PathBuf,
    certs: PathBuf,
    addrs: Vec<String>,
    children: Vec<Option<Child>>,
}

impl Drop for Planners {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Planners {
    fn start(&mut self, i: usize) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("planner-{i}.log")))
            .unwrap();
        let child = Command::new(&self.bin)
            .arg("--config")
            .arg(self.dir.join(format!("planner-{i}.toml")))
            .arg("--cert-dir")
            .arg(&self.certs)
            .stdout(Stdio::null())
            .stderr(log)
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap();
        self.children[i] = Some(child);
    }

    fn kill(&mut self, i: usize) {
        let mut c = self.children[i].take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

fn cli(cli: &Path, certs: &Path, planner: &str, args: &[&str]) -> Option<Value> {
    let out = Command::new(cli)
        .args(args)
        .args(["--output", "json"])
        .env("HYPERPLAN_PLANNER", planner)
        .env("HYPERPLAN_CERT_DIR", certs)
        .env("HYPERPLAN_USER", "bench")
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn main() {
    let Some(etcd) = etcd::Etcd::start() else { return };
    let kills: usize = env_or("KILLS", 10);
    let ttl: u64 = env_or("LEASE_TTL", 10);
    let jobs: usize = env_or("JOBS", 50);
    let (dir, certs, cli_bin) = bench_dir();
    let addrs: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", etcd::free_udp_port())).collect();
    for (i, a) in addrs.iter().enumerate() {
        std::fs::write(
            dir.path().join(format!("planner-{i}.toml")),
            format!(
                "[server]\nlisten = \"{a}\"\n{}[ha]\nleaseTtl = {ttl}\n",
                etcd.store_toml("/hyperplan/")
            ),
        )
        .unwrap();
    }
    let mut p = Planners {
        bin: daemon("hyperplan-planner", "hyperplan-planner"),
        dir: dir.path().to_path_buf(),
        certs: certs.clone(),
        addrs: addrs.clone(),
        children: vec![None, None, None],
    };
    for i in 0..3 {
        p.start(i);
    }
    let job = dir.path().join("job.yaml");
    let list = addrs.join(",");
    let leader = |p: &Planners| -> usize {
        let start = Instant::now();
        loop {
            if let Some(v) = cli(&cli_bin, &certs, &list, &["planners"]) {
                let leaders: Vec<usize> = v["planners"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["role"] == "leader")
                    .map(|r| {
                        p.addrs
                            .iter()
                            .position(|a| a == r["address"].as_str().unwrap())
                            .unwrap()
                    })
                    .collect();
                if let [one] = leaders[..] {
                    return one;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(120), "no leader within 120 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let mut times = Vec::new();
    let mut submitted = 0usize;
    for round in 0..kills {
        let l = leader(&p);
        for _ in 0..jobs {
            submitted += 1;
            std::fs::write(
                &job,
                format!(
                    "name: j{submitted}\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 1}}\n    command: [\"true\"]\n"
                ),
            )
            .unwrap();
            let ok = cli(&cli_bin, &certs, &p.addrs[l], &["submit", job.to_str().unwrap()]);
            assert!(ok.is_some(), "submit j{submitted} to the leader failed");
        }
        let killed = Instant::now();
        p.kill(l);
        let survivors: Vec<String> = (0..3).filter(|i| *i != l).map(|i| p.addrs[i].clone()).collect();
        // Asked as `hyperplan planners` does (every survivor, at once), then the one that
        // leads: the time is the failover's, not a client's timeout on the dead address.
        let survivors = survivors.join(",");
        let took = loop {
            let leading = cli(&cli_bin, &certs, &survivors, &["planners"]).and_then(|v| {
                v["planners"]
                    .as_array()?
                    .iter()
                    .find(|r| r["role"] == "leader")
                    .and_then(|r| r["address"].as_str().map(String::from))
            });
            if let Some(a) = leading
                && let Some(v) = cli(&cli_bin, &certs, &a, &["status", "--all"])
                && v["jobs"].as_array().is_some_and(|j| j.len() >= submitted)
            {
                break killed.elapsed();
            }
            assert!(killed.elapsed() < Duration::from_secs(120), "no failover within 120 s");
            std::thread::sleep(Duration::from_millis(20));
        };
        println!(
            "round {round}: killed {}, served again by a standby in {:.0} ms",
            p.addrs[l],
            took.as_secs_f64() * 1e3
        );
        times.push(took);
        p.start(l);
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let q = |f: f64| times[((times.len() - 1) as f64 * f).round() as usize];
    println!(
        "failover over {} kills (leaseTtl {ttl} s, {jobs} jobs per round): min {:.0} ms, median {:.0} ms, p90 {:.0} ms, max {:.0} ms",
        times.len(),
        ms(times[0]),
        ms(q(0.5)),
        ms(q(0.9)),
        ms(times[times.len() - 1])
    );
}
