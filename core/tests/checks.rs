//! Node health checks (issue 43): a failed check drains its node "by health" with the
//! check's reason, its running tasks run on and new work goes elsewhere; once every check
//! passes for `[health] returnAfter` the node returns by itself; an admin's drain is never
//! undone by health; degraded checks are shown but drain nothing; the drain survives a
//! restart; a flood of results is bounded. Agents' nodes, the invariants checked after
//! every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::caller::Caller;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Command, Event, PlannerConfig};
use hyperplan_shared::health::{CheckResult, CheckState, MAX_CHECKS, MAX_TEXT};
use hyperplan_shared::report::JobStatus;
use hyperplan_shared::status::{DrainState, NodeStatus};

const ROOT: Caller<'static> = Caller {
    user: "root",
    admin: true,
    private_data: false,
    groups: &[],
};

/// Seconds every check must pass before a node drained by health returns.
const RETURN_AFTER: u64 = 30;

fn config() -> PlannerConfig {
    PlannerConfig::parse(&format!("[health]\nreturnAfter = {RETURN_AFTER}\n"), "planner.toml").unwrap()
}

/// Two nodes (cpu=8), agents registered, the store kept.
fn rig() -> Rig {
    let cluster = ClusterBuilder::flat(2).node_resources("cpu=8").build();
    let mut rig = Rig::new(config(), cluster.nodes).persisting();
    rig.register_all();
    rig.tick();
    rig
}

fn node(rig: &Rig, name: &str) -> NodeStatus {
    rig.p.nodes().into_iter().find(|n| n.name == name).expect("node listed")
}

fn narrow_port() -> CheckResult {
    CheckResult::bad("ib:mlx5_0/1", CheckState::Failed, "ib-width", "width 1x (expected 4x)")
}

fn report(rig: &mut Rig, node: &str, checks: Vec<CheckResult>) -> Vec<Command> {
    rig.p.push(Event::NodeChecks {
        node: node.into(),
        checks,
    });
    rig.step()
}

fn all_ok() -> Vec<CheckResult> {
    vec![
        CheckResult::ok("ib:mlx5_0/1"),
        CheckResult::ok("disk:/var/lib/hyperplan-agent"),
    ]
}

fn said(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Warn(l) | Command::Info(l) if l.starts_with("node ") => Some(l.clone()),
            _ => None,
        })
        .collect()
}

fn drain_of(rig: &Rig, name: &str) -> Option<(DrainState, String, String)> {
    node(rig, name)
        .drain
        .map(|d| (d.state, d.by, d.reason.unwrap_or_default()))
}

#[test]
fn a_failed_check_drains_the_node_and_it_returns_once_every_check_has_passed_long_enough() {
    let mut rig = rig();
    let _ = rig.run(JobBuilder::gang("old", 1, "cpu=4").build());
    let sick = rig.node_of("old", "worker-0");
    let other = if sick == "n01" { "n02" } else { "n01" };

    let cmds = report(&mut rig, &sick, vec![narrow_port(), CheckResult::ok("memory")]);
    assert_eq!(
        said(&cmds),
        [format!(
            "node {sick} drained by health: ib:mlx5_0/1: width 1x (expected 4x); it takes no new task, its running tasks run on"
        )]
    );
    assert!(
        cmds.iter().any(|c| matches!(c, Command::PersistDrains(_))),
        "written: {cmds:?}"
    );
    assert_eq!(
        drain_of(&rig, &sick),
        Some((
            DrainState::Draining,
            "health".into(),
            "ib:mlx5_0/1: width 1x (expected 4x)".into()
        ))
    );
    let n = node(&rig, &sick);
    assert_eq!(n.health, [narrow_port()], "only what is not ok is shown");
    // The same report again says nothing; what runs there goes on.
    assert!(said(&report(&mut rig, &sick, vec![narrow_port(), CheckResult::ok("memory")])).is_empty());
    assert_eq!(rig.job("old").status, JobStatus::Running);
    // New work goes to the other node.
    rig.submit_as(JobBuilder::gang("next", 1, "cpu=2").build(), "alice");
    rig.step();
    assert_eq!(rig.node_of("next", "worker-0"), other);

    // Healthy again: it waits returnAfter; a failure meanwhile starts the wait again.
    let cmds = report(&mut rig, &sick, all_ok());
    assert_eq!(
        said(&cmds),
        [format!(
            "node {sick}: every health check passes; it takes work again in {RETURN_AFTER} s unless one fails"
        )]
    );
    for _ in 0..RETURN_AFTER / 2 {
        rig.step();
    }
    report(&mut rig, &sick, vec![narrow_port()]);
    report(&mut rig, &sick, all_ok());
    for _ in 0..RETURN_AFTER - 3 {
        assert!(drain_of(&rig, &sick).is_some(), "still drained");
        rig.step();
    }
    let cmds = rig.drive_until(5, |r| drain_of(r, &sick).is_none());
    assert!(
        said(&cmds).contains(&format!(
            "node {sick} returns: every health check has passed for {RETURN_AFTER} s"
        )),
        "{:?}",
        said(&cmds)
    );
    assert!(node(&rig, &sick).health.is_empty());
    // It takes work again: 4 CPUs free there beside the old job, 6 on the other node.
    rig.submit_as(JobBuilder::gang("after", 1, "cpu=4").build(), "alice");
    rig.step();
    assert_eq!(rig.node_of("after", "worker-0"), sick);
}

#[test]
fn an_admins_drain_is_never_undone_by_health() {
    let mut rig = rig();
    // Drained by an admin first: a failure and a recovery leave the drain as it was.
    rig.p
        .drain_nodes(&["n01".to_string()], Some("firmware".into()), false, ROOT, 9)
        .unwrap();
    rig.step();
    report(&mut rig, "n01", vec![narrow_port()]);
    report(&mut rig, "n01", all_ok());
    for _ in 0..RETURN_AFTER + 5 {
        rig.step();
    }
    assert_eq!(
        drain_of(&rig, "n01"),
        Some((DrainState::Drained, "root".into(), "firmware".into()))
    );

    // Drained by health, then by an admin: the drain is the admin's from then on.
    report(&mut rig, "n02", vec![narrow_port()]);
    assert_eq!(drain_of(&rig, "n02").map(|d| d.1), Some("health".into()));
    rig.p
        .drain_nodes(&["n02".to_string()], Some("cable swap".into()), false, ROOT, 10)
        .unwrap();
    rig.step();
    report(&mut rig, "n02", all_ok());
    for _ in 0..RETURN_AFTER + 5 {
        rig.step();
    }
    assert_eq!(
        drain_of(&rig, "n02"),
        Some((DrainState::Drained, "root".into(), "cable swap".into()))
    );
}

#[test]
fn an_admin_who_resumes_a_failing_node_has_the_last_word_until_a_check_fails_anew() {
    let mut rig = rig();
    report(&mut rig, "n01", vec![narrow_port()]);
    assert!(drain_of(&rig, "n01").is_some());
    rig.p.resume_nodes(&["n01".to_string()], ROOT).unwrap();
    rig.step();
    // The same failure, sent again (a new link sends every result): it stays resumed.
    report(&mut rig, "n01", vec![narrow_port()]);
    assert_eq!(drain_of(&rig, "n01"), None);
    // A new failure drains it again, with both reasons.
    let full = CheckResult::bad(
        "disk:/var/lib/hyperplan-agent",
        CheckState::Failed,
        "disk-space",
        "1.2% free (at least 5% wanted)",
    );
    report(&mut rig, "n01", vec![full, narrow_port()]);
    assert_eq!(
        drain_of(&rig, "n01").map(|d| d.2),
        Some(
            "disk:/var/lib/hyperplan-agent: 1.2% free (at least 5% wanted); ib:mlx5_0/1: width 1x (expected 4x)".into()
        )
    );
}

#[test]
fn a_degraded_check_is_shown_and_drains_nothing() {
    let mut rig = rig();
    let errors = CheckResult::bad(
        "ib:mlx5_0/1",
        CheckState::Degraded,
        "ib-errors",
        "symbol errors +12 since the last check",
    );
    let before = rig.p.index().generation;
    let cmds = report(&mut rig, "n01", vec![errors.clone()]);
    assert_eq!(
        said(&cmds),
        ["node n01: ib:mlx5_0/1: symbol errors +12 since the last check degraded"]
    );
    // Marked in place: the topology index and the caches on it are not rebuilt.
    assert_eq!(rig.p.index().generation, before);
    assert_eq!(drain_of(&rig, "n01"), None);
    assert_eq!(node(&rig, "n01").health, [errors]);
    // It scores lower: a one-node job goes to the healthy node (n01 first by name else).
    rig.submit_as(JobBuilder::gang("one", 1, "cpu=8").build(), "alice");
    rig.step();
    assert_eq!(rig.node_of("one", "worker-0"), "n02");
    // It still takes work when nothing better is free.
    rig.submit_as(JobBuilder::gang("two", 1, "cpu=8").build(), "alice");
    rig.step();
    assert_eq!(rig.node_of("two", "worker-0"), "n01");
    // Healthy again: ties go by name again.
    report(&mut rig, "n01", all_ok());
    assert!(node(&rig, "n01").health.is_empty());
}

#[test]
fn a_drain_by_health_survives_a_restart_and_returns_after_the_agent_reports_healthy() {
    let mut rig = rig();
    report(&mut rig, "n01", vec![narrow_port()]);
    let (mut after, warnings) = rig.restarted(config(), 5_000);
    assert!(warnings.is_empty(), "{warnings:?}");
    after.register_all();
    after.step();
    assert_eq!(drain_of(&after, "n01").map(|d| d.1), Some("health".into()));
    // The agent's first heartbeat on its new link carries every result.
    report(&mut after, "n01", all_ok());
    after.drive_until(RETURN_AFTER as u32 + 5, |r| drain_of(r, "n01").is_none());
}

#[test]
fn a_flood_of_results_is_bounded() {
    let mut rig = rig();
    let huge = "x".repeat(1 << 20);
    let flood: Vec<CheckResult> = (0..10_000)
        .map(|i| CheckResult::bad(format!("script-{i:05}"), CheckState::Failed, "script", huge.clone()))
        .collect();
    report(&mut rig, "n02", flood);
    let n = node(&rig, "n02");
    assert_eq!(n.health.len(), MAX_CHECKS);
    assert!(n.health.iter().all(|c| c.text.len() <= MAX_TEXT));
    let reason = n.drain.unwrap().reason.unwrap();
    assert!(reason.len() <= 256 && reason.ends_with('…'), "{}", reason.len());
    // An unknown node's report changes nothing.
    report(&mut rig, "nobody", vec![narrow_port()]);
    assert!(rig.p.nodes().iter().all(|n| n.name != "nobody"));
}

/// Two leaves of four nodes (cpu=8), agents registered.
fn two_leaves() -> Rig {
    let cluster = ClusterBuilder::fat_tree(&[4, 2], 1).node_resources("cpu=8").build();
    let mut rig = Rig::new(config(), cluster.nodes);
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    rig
}

/// The nodes of a job of four tasks, sorted.
fn nodes_of(rig: &Rig, job: &str) -> Vec<String> {
    let mut on: Vec<String> = (0..4).map(|i| rig.node_of(job, &format!("worker-{i}"))).collect();
    on.sort();
    on
}

#[test]
fn a_hard_topology_job_takes_a_leaf_whose_fabric_is_healthy_first() {
    // Healthy: a job of four one-node tasks in one leaf goes to the first leaf by name.
    let mut rig = two_leaves();
    rig.submit_as(JobBuilder::gang("first", 4, "cpu=8").hard(1).build(), "alice");
    rig.step();
    let first = nodes_of(&rig, "first");

    // One node of that leaf counts symbol errors: the job goes to the other leaf.
    let mut rig = two_leaves();
    let errors = CheckResult::bad(
        "ib:mlx5_0/1",
        CheckState::Degraded,
        "ib-errors",
        "symbol errors +40 since the last check",
    );
    report(&mut rig, &first[0], vec![errors]);
    let tree = rig.p.hyper_nodes();
    let sick: Vec<(&str, u32)> = tree
        .hyper_nodes
        .iter()
        .filter(|h| h.fabric_degraded > 0)
        .map(|h| (h.name.as_str(), h.fabric_degraded))
        .collect();
    assert_eq!(sick.len(), 2, "the leaf and the spine above it: {sick:?}");
    rig.submit_as(JobBuilder::gang("second", 4, "cpu=8").hard(1).build(), "alice");
    rig.step();
    let second = nodes_of(&rig, "second");
    assert!(second.iter().all(|n| !first.contains(n)), "{first:?} {second:?}");
    // With the healthy leaf full, the degraded one still takes work.
    rig.submit_as(JobBuilder::gang("third", 4, "cpu=8").hard(1).build(), "alice");
    rig.step();
    assert_eq!(nodes_of(&rig, "third"), first);
}

#[test]
fn a_gpu_gone_from_the_bus_ends_the_nodes_tasks_as_a_lost_nodes() {
    let mut rig = rig();
    let mut spec = JobBuilder::gang("train", 1, "cpu=4").build();
    spec.run.requeue = true;
    rig.run(spec);
    let on = rig.node_of("train", "worker-0");
    let lost = CheckResult::bad("gpu:3", CheckState::Failed, "gpu-lost", "GPU 3 has fallen off the bus");
    let cmds = report(&mut rig, &on, vec![lost.clone()]);
    let killed: Vec<String> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Kill { job, node, .. } => Some(format!("{job}@{node}")),
            _ => None,
        })
        .collect();
    assert_eq!(killed, [format!("train@{on}")], "{cmds:?}");
    assert!(
        said(&cmds).contains(&format!(
            "node {on}: gpu:3: GPU 3 has fallen off the bus: its running tasks end now, as a lost node's"
        )),
        "{:?}",
        said(&cmds)
    );
    // `requeue: true`: it waits to run again, on the other node.
    rig.step();
    let other = if on == "n01" { "n02" } else { "n01" };
    rig.drive_until(5, |r| r.job("train").status == JobStatus::Placed);
    assert_eq!(rig.node_of("train", "worker-0"), other);
    assert_eq!(drain_of(&rig, &on).map(|d| d.1), Some("health".into()));
    // The same report again ends nothing more.
    let cmds = report(&mut rig, &on, vec![lost]);
    assert!(!cmds.iter().any(|c| matches!(c, Command::Kill { .. })), "{cmds:?}");
}
