//! End-to-end: planners that share their state in etcd. A real etcd (Debian's
//! `etcd-server`, TLS with client certificates) on 127.0.0.1, three `hyperplan-planner`
//! processes on it, agents and the CLI given all three addresses. The leader is killed
//! with SIGKILL while a client submits job after job: a standby leads, has every
//! acknowledged job, agents follow it, running tasks are not disturbed, and no task
//! starts twice. Skips, saying why, without etcd.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::etcd::Etcd;
use common::ha::{LONG, Planners, Roles};
use common::{alive, path_str, pids, wait_for};

type Ha = Planners<Etcd>;

/// Three planners on one etcd prefix, and an agent for each of `nodes`.
fn start(etcd: Etcd, nodes: &[&str]) -> Ha {
    let store = etcd.store_toml("/e2e/");
    let mut ha = Ha::start(etcd, &store, 3, 2, "", nodes);
    ha.start_agents();
    ha
}

/// `hyperplan planners --output json`: address → (role, epoch).
fn roles_of(ha: &Ha) -> Roles {
    ha.roles().unwrap_or_else(|e| panic!("planners: {e}"))
}

/// The index of the leader, once exactly one leads, and its epoch.
fn leader_of(ha: &Ha) -> (usize, u64) {
    wait_for(LONG, "one leader", || {
        let (i, epoch) = ha.leader_in(&roles_of(ha))?;
        Some((i, epoch.unwrap()))
    })
}

/// How many times each task started (`ran.log` has one line per start).
fn starts(ha: &Ha) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(ha.work.path().join("ran.log")).unwrap_or_default();
    let mut n = BTreeMap::new();
    for line in text.lines() {
        *n.entry(line.to_string()).or_insert(0) += 1;
    }
    n
}

/// Each start of a task appends `job/task` to ran.log; the long job's tasks then wait for
/// the file `go`.
const RAN: &str = "echo $HYPERPLAN_JOB/$HYPERPLAN_TASK >> ran.log";

#[test]
fn the_leader_killed_under_load_is_replaced_and_nothing_acknowledged_is_lost_or_run_twice() {
    // etcd as a site runs it: TLS only, client certificates required.
    let Some(etcd) = Etcd::start_tls() else { return };
    let mut ha = start(etcd, &["n1", "n2"]);
    let (first, epoch) = leader_of(&ha);
    let roles = roles_of(&ha);
    assert_eq!(roles.values().filter(|(r, _)| r == "standby").count(), 2, "{roles:?}");

    // A standby sends people to the leader: the CLI follows, and alone it says so.
    let standby = ha.addrs[(first + 1) % 3].clone();
    let out = Command::new(common::hyperplan_bin())
        .args(["status", "--planner", &standby])
        .env("HYPERPLAN_CERT_DIR", ha.c.certs())
        .env("HYPERPLAN_USER", &ha.user)
        .env("XDG_CONFIG_HOME", ha.c.dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || said.contains(&format!("the leader is {}", ha.addrs[first])),
        "{said}"
    );

    // One task on each node that runs through the failover.
    let long = ha.job("long", 2, 1, &format!("{RAN}; until [ -e go ]; do sleep 0.1; done"));
    assert!(ha.c.cli(&ha.user, &["submit", path_str(&long)]).status.success());
    let before = wait_for(LONG, "long running", || {
        let j = ha.jobs(&ha.user, &["long"]).remove(0);
        (j["status"] == "running" && pids(&j).len() == 2).then_some(j)
    });
    let before_pids = pids(&before);

    // A client submits job after job through the list, trying again while no one leads.
    let acked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let files: Vec<_> = (0..400).map(|i| ha.job(&format!("q{i:03}"), 1, 1, RAN)).collect();
    let client = {
        let (acked, stop) = (acked.clone(), stop.clone());
        let cli = ha.client();
        std::thread::spawn(move || {
            let mut tries = 0;
            for (i, f) in files.iter().enumerate() {
                loop {
                    if stop.load(Ordering::SeqCst) {
                        return tries;
                    }
                    tries += 1;
                    let out = cli.run(&["submit", path_str(f)]);
                    let err = String::from_utf8_lossy(&out.stderr);
                    if out.status.success() || err.contains("already") {
                        // "already exists": an earlier try was written before the crash.
                        acked.lock().unwrap().push(format!("q{i:03}"));
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            tries
        })
    };
    wait_for(LONG, "20 acknowledged submits", || {
        (acked.lock().unwrap().len() >= 20).then_some(())
    });
    ha.kill_planner(first);
    let killed_at = acked.lock().unwrap().len();
    wait_for(LONG, "20 more acknowledged submits after the kill", || {
        (acked.lock().unwrap().len() >= killed_at + 20).then_some(())
    });
    stop.store(true, Ordering::SeqCst);
    client.join().unwrap();
    let acked = acked.lock().unwrap().clone();

    // A standby leads, with a newer epoch; the killed one is unreachable.
    let (second, epoch2) = leader_of(&ha);
    assert_ne!(second, first);
    assert!(epoch2 > epoch, "epoch {epoch} → {epoch2}");
    let roles = roles_of(&ha);
    assert_eq!(roles[&ha.addrs[first]].0, "unreachable", "{roles:?}");
    assert_eq!(roles[&ha.addrs[first]].1, None);

    // Every acknowledged job is there, once.
    let all = ha.jobs(&ha.user, &["--all"]);
    let mut by_name: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for j in &all {
        by_name
            .entry(j["name"].as_str().unwrap().to_string())
            .or_default()
            .push(j["id"].as_u64().unwrap());
    }
    for name in &acked {
        assert_eq!(
            by_name.get(name).map(Vec::len),
            Some(1),
            "{name}: {:?}\n{}",
            by_name.get(name),
            ha.logs()
        );
    }

    // The long job's tasks were not disturbed: same pids, alive, adopted by the new leader.
    let after = wait_for(LONG, "long adopted", || {
        let j = ha.jobs(&ha.user, &["long"]).remove(0);
        (j["status"] == "running" && pids(&j) == before_pids).then_some(j)
    });
    assert!(before_pids.iter().all(|p| alive(*p)), "{after}");
    // The nodes follow the new leader.
    for n in ["n1", "n2"] {
        ha.c.wait_state(n, "Ready", LONG);
    }

    // Let everything finish; then each task started exactly once.
    std::fs::write(ha.work.path().join("go"), "").unwrap();
    wait_for(Duration::from_secs(120), "every job ended", || {
        ha.jobs(&ha.user, &["--all"])
            .iter()
            .all(|j| j["endTime"].as_u64().is_some() || j["status"] == "completed")
            .then_some(())
    });
    let starts = starts(&ha);
    for (task, n) in &starts {
        assert_eq!(*n, 1, "{task} started {n} times\n{}", ha.logs());
    }
    for name in &acked {
        assert_eq!(starts.get(&format!("{name}/t-0")), Some(&1), "{name} never ran");
    }
    assert_eq!(starts.get("long/t-0"), Some(&1));
    assert_eq!(starts.get("long/t-1"), Some(&1));

    // The killed planner comes back as a standby and the epoch stays.
    ha.start_planner(first);
    wait_for(LONG, "the old leader back as a standby", || {
        let roles = roles_of(&ha);
        (roles[&ha.addrs[first]].0 == "standby").then_some(())
    });
    assert_eq!(leader_of(&ha), (second, epoch2));
}
