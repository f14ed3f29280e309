//! End-to-end (issue 37): the planner leader cut off from its agents but not from etcd.
//! Two `hyperplan-planner` processes share one etcd (Debian's `etcd-server`); the agents
//! run in network namespaces (`tests/common/netns.rs`) and reach both planners, each at
//! an address of its own on the bridge. Each agent namespace then routes the leader's
//! address into a black hole, so
//! the leader keeps its lease but hears no agent, while the standby hears them all
//! (they come to it and are sent back with `NotLeader`). The leader hands the lead over
//! (it resigns its lease and stops, saying why), the standby leads, and every node is
//! Ready again under it, its running task adopted with the same pid. Root, iproute2 and
//! etcd: without them it skips, saying why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::etcd::Etcd;
use common::ha::{LONG, Planners};
use common::netns::Fabric;
use common::{all_running, path_str, pids, wait_for};

const NODES: [&str; 2] = ["n1", "n2"];

#[test]
fn a_leader_no_agent_reaches_hands_the_lead_to_the_standby_they_reach() {
    let fabric = match Fabric::new(&NODES) {
        Ok(f) => f,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let Some(etcd) = Etcd::start() else { return };
    let toml = etcd.store_toml("/isolated/");
    let namespaces: Vec<(String, String)> = NODES.iter().map(|n| (n.to_string(), fabric.ns(n))).collect();
    let hosts = format!("{},{}", fabric.planner_addr(), fabric.second_planner_addr());
    let mut ha = Planners::start_on(
        &hosts,
        etcd,
        &[toml.clone(), toml],
        5,
        "",
        &NODES,
        &namespaces,
        &["--node-lost-after", "120"],
    );
    ha.start_agents();
    let (l, epoch) = wait_for(LONG, "one leader", || {
        let (i, e) = ha.leader_in(&ha.roles().ok()?)?;
        Some((i, e?))
    });
    let s = 1 - l;
    let user = ha.user.clone();
    let job = ha.job("run", 2, 4, "sleep 600");
    let out = ha.c.cli(&user, &["submit", path_str(&job)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = wait_for(LONG, "run running", || {
        ha.jobs(&user, &["run"]).first().filter(|j| all_running(j)).cloned()
    });

    // The agents can no longer reach the leader; etcd and the CLI still can.
    let leader_ip = ha.addrs[l].rsplit_once(':').unwrap().0.to_string();
    for node in NODES {
        fabric.blackhole(node, &leader_ip);
    }
    let status = wait_for(LONG, "the leader no agent reaches hands the lead over", || ha.exited(l));
    assert!(!status.success(), "{status:?}");
    let old_log = ha.log(l);
    assert!(old_log.contains("handing the lead over"), "{old_log}");
    assert!(old_log.contains(&format!("standby {} hears", ha.addrs[s])), "{old_log}");
    let (now, epoch2) = wait_for(LONG, "the standby leads", || {
        let (i, e) = ha.leader_in(&ha.roles().ok()?)?;
        Some((i, e?))
    });
    assert_eq!(now, s);
    assert!(epoch2 > epoch, "epoch {epoch} then {epoch2}");
    for node in NODES {
        ha.c.wait_state(node, "Ready", LONG);
    }
    // The job ran on through it: the same tasks, the same pids.
    let after = wait_for(LONG, "run running under the new leader", || {
        ha.jobs(&user, &["run"]).first().filter(|j| all_running(j)).cloned()
    });
    assert_eq!(pids(&after), pids(&before), "{after}");
    let out = ha.c.cli(&user, &["cancel", "run"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
