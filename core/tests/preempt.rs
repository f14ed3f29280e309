//! Scenario tests for preemption and reclaim (issue 25): who may preempt whom, ONE
//! HyperNode with the fewest victims (then the least work lost), the freed nodes held for
//! the preemptor until it starts, requeue or `preempted`, and what `status` and `explain`
//! say. Agents' nodes (tasks hold until their ends are reported), the invariants checked
//! after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::model::kill::KillReason;
use hyperplan_core::model::reason::Reason;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Command, Event, PlannerConfig};
use hyperplan_shared::report::JobStatus;
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};

const CONFIG: &str = r#"
[[queue]]
name = "lo"
preemptible = true
[[queue]]
name = "safe"
[[priorityClass]]
name = "urgent"
value = 100
preemptible = false
[[priorityClass]]
name = "low"
value = -10
"#;

/// 4 leaves of 4 nodes (cpu=8), leaf-1 … leaf-4 under spine-1, all agents registered.
fn rig() -> Rig {
    let cluster = ClusterBuilder::fat_tree(&[4, 4], 1).node_resources("cpu=8").build();
    let config = PlannerConfig::parse(CONFIG, "planner.toml").unwrap();
    let mut rig = Rig::new(config, cluster.nodes);
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    rig
}

/// Submits and starts a job; its id.
fn run(rig: &mut Rig, spec: hyperplan_shared::JobSpec) -> u64 {
    let name = spec.name.clone();
    let id = rig.submit_as(spec, "alice");
    rig.step();
    assert_eq!(
        rig.job(&name).status,
        JobStatus::Placed,
        "{name}: {:?}",
        rig.job(&name).reason
    );
    rig.start_all(&name, id);
    rig.step();
    id
}

/// (victim, by) of every `Preempted`, and the kills with their reason and grace.
fn preempted(cmds: &[Command]) -> Vec<(String, String)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Preempted { victim, by, .. } => Some((victim.clone(), by.clone())),
            _ => None,
        })
        .collect()
}

fn killed(cmds: &[Command]) -> Vec<(String, KillReason, u64)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Kill {
                job, why, grace_secs, ..
            } => Some((job.to_string(), *why, *grace_secs)),
            _ => None,
        })
        .collect()
}

fn ended_by_signal(rig: &mut Rig, job: &str, id: u64) {
    let tasks: Vec<String> = rig.job(job).tasks.iter().map(|t| t.name.clone()).collect();
    for t in tasks {
        rig.ended(
            job,
            id,
            &t,
            TaskEnd {
                outcome: TaskOutcome::Signaled,
                signal: Some(15),
                ..TaskEnd::default()
            },
        );
    }
}

fn nodes_of(rig: &Rig, job: &str) -> Vec<String> {
    let mut v: Vec<String> = rig.job(job).tasks.iter().filter_map(|t| t.node.clone()).collect();
    v.sort();
    v.dedup();
    v
}

/// The cluster full of one-node low jobs `f1..f16` (in node order, leaf by leaf).
fn fill(rig: &mut Rig, requeue: bool) -> Vec<u64> {
    (1..=16)
        .map(|i| {
            let mut j = JobBuilder::gang(&format!("f{i:02}"), 1, "cpu=8").queue("lo");
            if requeue {
                j = j.requeue();
            }
            run(rig, j.build())
        })
        .collect()
}

#[test]
fn a_leaf_sized_job_frees_one_leaf_with_the_fewest_victims() {
    let mut rig = rig();
    // leaf-1..3 hold four one-node jobs each; leaf-4 holds two two-node jobs.
    let mut ids = Vec::new();
    for i in 1..=12 {
        ids.push(run(
            &mut rig,
            JobBuilder::gang(&format!("f{i:02}"), 1, "cpu=8").queue("lo").build(),
        ));
    }
    for name in ["w1", "w2"] {
        ids.push(run(
            &mut rig,
            JobBuilder::gang(name, 2, "cpu=8").queue("lo").hard(1).build(),
        ));
    }
    assert_eq!(nodes_of(&rig, "w1"), ["n13", "n14"]);
    let big = JobBuilder::gang("big", 4, "cpu=8").hard(1).class("urgent").build();
    let big_id = rig.submit_as(big, "bob");
    let cmds = rig.step();
    // Two victims (leaf-4) rather than four anywhere else.
    assert_eq!(
        preempted(&cmds),
        [
            ("w1".to_string(), "big".to_string()),
            ("w2".to_string(), "big".to_string())
        ]
    );
    let kills = killed(&cmds);
    assert_eq!(kills.len(), 4);
    assert!(
        kills
            .iter()
            .all(|(_, why, grace)| *why == KillReason::Preempted && *grace == 30)
    );
    let big = rig.job("big");
    assert_eq!(big.status, JobStatus::Pending);
    let nom = big.preempting.clone().unwrap();
    assert_eq!(nom.hyper_node.as_deref(), Some("leaf-4"));
    assert_eq!(nom.nodes, ["n13", "n14", "n15", "n16"]);
    assert_eq!(nom.victims, ["w1", "w2"]);
    // The victims by id (and name, for the sentence).
    let Some(Reason::Preempting { hyper_node, victims }) = rig.reason("big") else {
        panic!("{:?}", big.reason)
    };
    assert_eq!(hyper_node.as_deref(), Some("leaf-4"));
    let victims: Vec<(u64, &str)> = victims.iter().map(|v| (v.id, v.name.as_str())).collect();
    assert_eq!(victims, [(ids[12], "w1"), (ids[13], "w2")]);
    assert_eq!(
        big.reason.as_deref(),
        Some("preempting 2 jobs in leaf-4 (w1, w2); it starts when they have ended")
    );
    let w1 = rig.job("w1");
    assert_eq!(w1.status, JobStatus::Preempted);
    assert_eq!(w1.preempted_by.as_deref(), Some("big"));
    assert!(
        matches!(
            rig.reason("w1"),
            Some(Reason::PreemptedBy { by, why }) if by.id == big_id && why.starts_with("its priority")
        ),
        "{:?}",
        w1.reason
    );
    // Nothing more is preempted while the victims end.
    for _ in 0..3 {
        assert!(preempted(&rig.step()).is_empty());
    }
    // The victims end (SIGTERM): big starts at the next tick, in leaf-4.
    ended_by_signal(&mut rig, "w1", ids[12]);
    ended_by_signal(&mut rig, "w2", ids[13]);
    rig.step();
    let big = rig.job("big");
    assert_eq!(big.status, JobStatus::Placed, "{:?}", big.reason);
    assert_eq!(nodes_of(&rig, "big"), ["n13", "n14", "n15", "n16"]);
    assert!(big.preempting.is_none());
    assert_eq!(rig.job("w1").status, JobStatus::Preempted);
}

#[test]
fn ties_go_to_the_least_work_lost_and_victims_requeue_keeping_their_age() {
    let mut rig = rig();
    let mut ids = fill(&mut rig, true);
    // leaf-3's jobs started last: the least work lost. Make them so: end and rerun them.
    for i in 9..=12 {
        let name = format!("f{i:02}");
        let tasks: Vec<String> = rig.job(&name).tasks.iter().map(|t| t.name.clone()).collect();
        let _ = tasks;
        rig.p.push(Event::Cancel {
            job: name.clone(),
            grace_secs: 0,
            by_admin: false,
        });
        rig.step();
        ended_by_signal(&mut rig, &name, ids[i - 1]);
        rig.step();
    }
    for _ in 0..30 {
        rig.step();
    }
    for i in 9..=12 {
        ids[i - 1] = run(
            &mut rig,
            JobBuilder::gang(&format!("g{i:02}"), 1, "cpu=8")
                .queue("lo")
                .requeue()
                .build(),
        );
    }
    assert_eq!(nodes_of(&rig, "g09"), ["n09"]);
    let submitted = rig.job("g09").submit_time;
    rig.submit_as(
        JobBuilder::gang("big", 4, "cpu=8").hard(1).class("urgent").build(),
        "bob",
    );
    let cmds = rig.step();
    let victims: Vec<String> = preempted(&cmds).into_iter().map(|(v, _)| v).collect();
    assert_eq!(victims, ["g09", "g10", "g11", "g12"]);
    // Requeued: pending again once ended, who preempted it kept, its submit time too.
    for i in 9..=12 {
        ended_by_signal(&mut rig, &format!("g{i:02}"), ids[i - 1]);
    }
    rig.step();
    let g = rig.job("g09");
    assert_eq!(g.status, JobStatus::Pending);
    assert_eq!(g.preempted_by.as_deref(), Some("big"));
    assert_eq!(g.submit_time, submitted);
    assert_eq!(nodes_of(&rig, "big"), ["n09", "n10", "n11", "n12"]);
    // The requeued jobs do not preempt each other's peers: same standing.
    for _ in 0..3 {
        assert!(preempted(&rig.step()).is_empty());
    }
}

#[test]
fn never_equal_or_higher_priority_nor_a_protected_queue_or_class() {
    let mut rig = rig();
    for i in 1..=8 {
        run(
            &mut rig,
            JobBuilder::gang(&format!("s{i}"), 1, "cpu=8").queue("safe").build(),
        );
    }
    for i in 1..=4 {
        run(
            &mut rig,
            JobBuilder::gang(&format!("u{i}"), 1, "cpu=8")
                .queue("lo")
                .class("urgent")
                .build(),
        );
    }
    for i in 1..=4 {
        run(
            &mut rig,
            JobBuilder::gang(&format!("l{i}"), 1, "cpu=8").queue("lo").build(),
        );
    }
    // Same queue and class as l1..l4: may not preempt them.
    rig.submit_as(JobBuilder::gang("peer", 1, "cpu=8").queue("lo").build(), "bob");
    // Above l1..l4, but it needs a fifth node, and every other holds a job it may not
    // touch.
    rig.submit_as(
        JobBuilder::gang("wide", 5, "cpu=8").hard(2).class("urgent").build(),
        "bob",
    );
    for _ in 0..3 {
        assert!(preempted(&rig.step()).is_empty());
    }
    assert_eq!(rig.job("peer").status, JobStatus::Pending);
    let why = rig.p.explain("wide").unwrap();
    let p = why.preemption.unwrap();
    assert!(p.contains("would not make room"), "{p}");
    // A class of its own lifts it above l1..l4: it preempts exactly one of them, the one
    // that started last (the least work lost).
    rig.submit_as(
        JobBuilder::gang("one", 1, "cpu=8").queue("lo").class("urgent").build(),
        "bob",
    );
    let cmds = rig.step();
    assert_eq!(preempted(&cmds), [("l4".to_string(), "one".to_string())]);
}

#[test]
fn the_freed_nodes_wait_for_their_job_and_a_cancel_gives_them_back() {
    let mut rig = rig();
    let ids = fill(&mut rig, false);
    rig.submit_as(
        JobBuilder::gang("big", 2, "cpu=8").hard(1).class("urgent").build(),
        "bob",
    );
    let cmds = rig.step();
    // The two that started last: the least work lost.
    let victims: Vec<String> = preempted(&cmds).into_iter().map(|(v, _)| v).collect();
    assert_eq!(victims, ["f15", "f16"]);
    // One victim ends; a small job of the same standing as big arrives: the freed node
    // stays big's.
    ended_by_signal(&mut rig, "f15", ids[14]);
    rig.step();
    rig.submit_as(JobBuilder::gang("small", 1, "cpu=8").class("urgent").build(), "carol");
    rig.step();
    assert_eq!(rig.job("small").status, JobStatus::Pending);
    assert!(nodes_of(&rig, "small").is_empty());
    // big is cancelled: its hold goes, and small takes the free node.
    rig.p.push(Event::Cancel {
        job: "big".into(),
        grace_secs: 0,
        by_admin: false,
    });
    let cmds = rig.step();
    assert!(preempted(&cmds).is_empty(), "small fits now: no preemption");
    assert_eq!(rig.job("small").status, JobStatus::Placed);
    assert_eq!(nodes_of(&rig, "small"), ["n15"]);
}

#[test]
fn explain_says_who_would_be_preempted_before_it_happens() {
    let cluster = ClusterBuilder::fat_tree(&[4, 4], 1).node_resources("cpu=8").build();
    let mut config = PlannerConfig::parse(CONFIG, "planner.toml").unwrap();
    config.preemption.enabled = false;
    let mut rig = Rig::new(config, cluster.nodes);
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    fill(&mut rig, false);
    rig.submit_as(
        JobBuilder::gang("big", 4, "cpu=8").hard(1).class("urgent").build(),
        "bob",
    );
    rig.step();
    let why = rig.p.explain("big").unwrap();
    let p = why.preemption.unwrap();
    assert!(p.starts_with("preemption is off"), "{p}");
    assert!(p.contains("it would preempt 4 jobs in leaf-4"), "{p}");
    assert!(p.contains("f16 (its priority (queue lo (priority 0), no class (0)) is below that of the job (queue default (priority 0), class urgent (100)))"), "{p}");
    // Preview (as a site that turns it on would see it).
    let world = rig.p.world_for_tests();
    let names = world.resource::<hyperplan_core::names::JobNames>();
    let e = names.0["big"];
    let mut config = world.resource::<PlannerConfig>().clone();
    config.preemption.enabled = true;
    let found = hyperplan_core::preempt::plan_with(world, e, &config).unwrap();
    let names: Vec<&str> = found.victims.iter().map(|v| v.1.as_str()).collect();
    assert_eq!(names, ["f13", "f14", "f15", "f16"]);
}

#[test]
fn the_hold_survives_a_restart_of_the_planner() {
    let cluster = ClusterBuilder::fat_tree(&[4, 4], 1).node_resources("cpu=8").build();
    let config = PlannerConfig::parse(CONFIG, "planner.toml").unwrap();
    let mut rig = Rig::new(config.clone(), cluster.nodes.clone()).persisting();
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes.clone()));
    rig.register_all();
    rig.tick();
    let ids = fill(&mut rig, false);
    rig.submit_as(
        JobBuilder::gang("big", 2, "cpu=8").hard(1).class("urgent").build(),
        "bob",
    );
    let cmds = rig.step();
    assert_eq!(preempted(&cmds).len(), 2);
    ended_by_signal(&mut rig, "f15", ids[14]);
    rig.step();

    let (mut rig, warnings) = rig.restarted(config, 2_000);
    assert!(warnings.is_empty(), "{warnings:?}");
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.step();
    let big = rig.job("big");
    assert_eq!(big.status, JobStatus::Pending);
    assert_eq!(big.preempting.unwrap().nodes, ["n15", "n16"]);
    assert_eq!(rig.job("f16").status, JobStatus::Preempted);
    // The node f15 freed is still big's.
    rig.submit_as(JobBuilder::gang("small", 1, "cpu=8").class("urgent").build(), "carol");
    rig.step();
    rig.step();
    assert_eq!(rig.job("small").status, JobStatus::Pending);
    // f16 ends: big starts where it was held for.
    ended_by_signal(&mut rig, "f16", ids[15]);
    rig.step();
    assert_eq!(nodes_of(&rig, "big"), ["n15", "n16"]);
}

#[test]
fn simulate_counts_preemptions_and_the_work_they_lose() {
    let cluster = ClusterBuilder::fat_tree(&[4, 2], 1).node_resources("cpu=8").build();
    let config = PlannerConfig::parse(CONFIG, "planner.toml").unwrap();
    let mut jobs: Vec<_> = (0..8)
        .map(|i| {
            JobBuilder::gang(&format!("lo{i}"), 1, "cpu=8")
                .queue("lo")
                .requeue()
                .runtime(1000)
                .submit(0)
                .build()
        })
        .collect();
    jobs.push(
        JobBuilder::gang("big", 4, "cpu=8")
            .hard(1)
            .class("urgent")
            .runtime(100)
            .submit(500)
            .build(),
    );
    let report = hyperplan_core::sim::simulate(&cluster, &jobs, config);
    assert_eq!(report.summary.preemptions, 4, "{:?}", report.summary);
    // Four jobs of 8 CPUs, 500 s each.
    assert_eq!(report.summary.lost_cpu_seconds, 4 * 500 * 8);
    let big = report.jobs.iter().find(|j| j.name == "big").unwrap();
    assert_eq!(big.start_time, Some(500));
    // The victims ran again after big and finished.
    assert_eq!(report.summary.pending, 0, "{:?}", report.summary);
    // Equal victims everywhere: the lowest tier, then the name (leaf-1: lo0..lo3). They
    // start again once big is done, at 600 s, and run their whole 1000 s.
    let lo = report.jobs.iter().find(|j| j.name == "lo0").unwrap();
    assert_eq!(lo.preempted_by.as_deref(), Some("big"), "{lo:?}");
    assert_eq!((lo.start_time, lo.end_time), (Some(600), Some(1600)), "{lo:?}");
    let untouched = report.jobs.iter().find(|j| j.name == "lo7").unwrap();
    assert_eq!(untouched.preempted_by, None);
}

/// A cluster full of low-priority jobs over many leaves; a leaf-sized urgent job arrives.
/// Its victims all sit in one leaf, are the fewest possible (brute force over each leaf's
/// jobs), and it starts at the tick after its victims end at their grace.
#[test]
fn under_load_the_victims_sit_in_one_leaf_are_the_fewest_and_the_job_starts_after_the_grace() {
    let cluster = ClusterBuilder::fat_tree(&[8, 8], 1).node_resources("cpu=8").build();
    let mut config = PlannerConfig::parse(CONFIG, "planner.toml").unwrap();
    config.preemption.grace = 20;
    let mut rig = Rig::new(config.clone(), cluster.nodes);
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    // Leaf k holds jobs of sizes that make it fragmented differently: leaf 1 four jobs
    // of two nodes, leaf 2 eight of one, leaf 3 one of four and four of one, …
    let patterns: [&[u32]; 8] = [
        &[2, 2, 2, 2],
        &[1, 1, 1, 1, 1, 1, 1, 1],
        &[4, 1, 1, 1, 1],
        &[3, 3, 1, 1],
        &[2, 1, 2, 1, 2],
        &[1, 3, 1, 3],
        &[4, 4],
        &[2, 2, 1, 1, 1, 1],
    ];
    let mut ids = std::collections::BTreeMap::new();
    for (leaf, sizes) in patterns.iter().enumerate() {
        for (k, &n) in sizes.iter().enumerate() {
            let name = format!("l{}-{k}", leaf + 1);
            let spec = JobBuilder::gang(&name, n, "cpu=8").queue("lo").hard(1).build();
            ids.insert(name.clone(), run(&mut rig, spec));
        }
    }
    // Every node busy.
    let id = rig.submit_as(
        JobBuilder::gang("urgent", 8, "cpu=8").hard(1).class("urgent").build(),
        "bob",
    );
    let _ = id;
    let cmds = rig.step();
    let victims: Vec<String> = preempted(&cmds).into_iter().map(|(v, _)| v).collect();
    // The fewest: a leaf of two jobs (leaf 7: two of four nodes).
    assert_eq!(victims, ["l7-0", "l7-1"], "{cmds:?}");
    let leaves: std::collections::BTreeSet<String> = victims
        .iter()
        .flat_map(|v| {
            rig.job(v)
                .tasks
                .iter()
                .map(|t| t.hyper_nodes[0].clone())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(leaves.len(), 1, "{leaves:?}");
    let grace: Vec<u64> = killed(&cmds).into_iter().map(|(_, _, g)| g).collect();
    assert!(grace.iter().all(|&g| g == 20), "{grace:?}");
    // The victims take their whole grace: the job waits, nothing else is preempted.
    for _ in 0..19 {
        assert!(preempted(&rig.step()).is_empty());
        assert_eq!(rig.job("urgent").status, JobStatus::Pending);
    }
    for v in &victims {
        ended_by_signal(&mut rig, v, ids[v]);
    }
    rig.step();
    let urgent = rig.job("urgent");
    assert_eq!(urgent.status, JobStatus::Placed, "{:?}", urgent.reason);
    assert_eq!(urgent.allocated_hyper_node.as_deref(), Some("leaf-7"));
}

/// Reclaim: a queue under its quota takes back what a queue without one borrowed, though
/// its priority is lower, by the same rule (one leaf, fewest victims).
#[test]
fn a_queue_under_its_quota_reclaims_what_another_borrowed() {
    let cluster = ClusterBuilder::fat_tree(&[4, 4], 1).node_resources("cpu=8").build();
    let text = format!("{CONFIG}[[queue]]\nname = \"owner\"\npriority = -1\nquota = {{ cpu = 32 }}\n");
    let config = PlannerConfig::parse(&text, "planner.toml").unwrap();
    let mut rig = Rig::new(config, cluster.nodes);
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    fill(&mut rig, true);
    // Within its quota (32 of 32 CPUs): it reclaims a leaf.
    rig.submit_as(
        JobBuilder::gang("mine", 4, "cpu=8").hard(1).queue("owner").build(),
        "bob",
    );
    let cmds = rig.step();
    let victims: Vec<String> = preempted(&cmds).into_iter().map(|(v, _)| v).collect();
    assert_eq!(victims, ["f13", "f14", "f15", "f16"]);
    let why = rig.reason("f13");
    assert!(
        matches!(&why, Some(Reason::Requeued(w)) if matches!(&**w, Reason::PreemptedBy { by, why } if by.name == "mine" && why.starts_with("queue owner reclaims its quota from queue lo"))),
        "{why:?}"
    );
    // Beyond its quota it may not: a second such job preempts nothing.
    rig.submit_as(
        JobBuilder::gang("more", 8, "cpu=8").hard(2).queue("owner").build(),
        "bob",
    );
    for _ in 0..3 {
        assert!(preempted(&rig.step()).is_empty());
    }
}

/// Issue 38: under `[server] privateData` a preemption names no other user's job to a
/// plain user — not the preemptor to its victim's owner (its reason, `preemptedBy`), not
/// the victims to the preemptor's owner (its reason, `preempting`, `explain`) — while an
/// admin reads every name; `queues` shows a plain user their own share only.
#[test]
fn under_private_data_a_preemption_names_no_other_users_job() {
    use hyperplan_core::caller::Caller;
    use hyperplan_core::requests::status::StatusQuery;

    let mut rig = rig();
    for i in 1..=12 {
        run(
            &mut rig,
            JobBuilder::gang(&format!("f{i:02}"), 1, "cpu=8").queue("lo").build(),
        );
    }
    // leaf-4: alice's w1 (it asks requeue), bob's own w2.
    run(
        &mut rig,
        JobBuilder::gang("w1", 2, "cpu=8").queue("lo").hard(1).requeue().build(),
    );
    let w2 = rig.submit_as(JobBuilder::gang("w2", 2, "cpu=8").queue("lo").hard(1).build(), "bob");
    rig.step();
    rig.start_all("w2", w2);
    rig.step();
    rig.submit_as(
        JobBuilder::gang("big", 4, "cpu=8").hard(1).class("urgent").build(),
        "bob",
    );
    rig.step();

    let alice = Caller::user("alice").private(true);
    let bob = Caller::user("bob").private(true);
    let root = Caller::admin("root").private(true);
    let status = |rig: &Rig, job: &str, caller: Caller<'_>| {
        let query = StatusQuery {
            job: Some(job.to_string()),
            ..StatusQuery::default()
        };
        let none = |_| Ok::<_, std::io::Error>(Vec::new());
        rig.p.status(query, caller, rig.now, none).unwrap().jobs.remove(0)
    };

    // bob's preemptor: his own victim by name, alice's not.
    let big = status(&rig, "big", bob);
    insta::assert_snapshot!(big.reason.unwrap(), @"preempting 2 jobs in leaf-4 (another user's job, w2); it starts when they have ended");
    assert_eq!(big.preempting.unwrap().victims, ["another user's job", "w2"]);
    let explained = rig.p.explain_for("big", bob).unwrap();
    insta::assert_snapshot!(explained.preemption.unwrap(), @"under way: preempting another user's job, w2 in leaf-4; nodes n13,n14,n15,n16 held for it until they have ended");
    assert!(!explained.job.reason.unwrap().contains("w1"));
    // The admin reads every name.
    let big = status(&rig, "big", root);
    assert!(big.reason.unwrap().contains("(w1, w2)"));
    assert!(
        rig.p
            .explain_for("big", root)
            .unwrap()
            .preemption
            .unwrap()
            .contains("w1, w2")
    );

    // alice's victim: preempted by another user's job; bob's own victim by his job.
    let w1 = status(&rig, "w1", alice);
    insta::assert_snapshot!(w1.reason.clone().unwrap(), @"requeued: preempted by another user's job: its priority (queue lo (priority 0), no class (0)) is below that of the job (queue default (priority 0), class urgent (100))");
    assert_eq!(w1.preempted_by.as_deref(), Some("another user's job"));
    assert!(
        !rig.p
            .explain_for("w1", alice)
            .unwrap()
            .job
            .reason
            .unwrap()
            .contains("big")
    );
    let w2 = status(&rig, "w2", bob);
    assert_eq!(w2.preempted_by.as_deref(), Some("big"));
    assert!(w2.reason.unwrap().starts_with("preempted by job big: "));
    let w1 = status(&rig, "w1", root);
    assert_eq!(w1.preempted_by.as_deref(), Some("big"));
    assert!(w1.reason.unwrap().starts_with("requeued: preempted by job big: "));
    // Without privateData everyone reads every name, as before.
    let w1 = status(&rig, "w1", Caller::user("bob"));
    assert_eq!(w1.preempted_by.as_deref(), Some("big"));

    // queues: alice's own share only; the admin's every user's; the totals for both.
    let users = |caller: Caller<'_>| -> Vec<String> {
        let q = rig.p.queues_for(caller);
        let lo = q.queues.iter().find(|q| q.name == "lo").unwrap();
        lo.users.iter().map(|u| u.user.clone()).collect()
    };
    assert_eq!(users(alice), ["alice"]);
    let mut all = users(root);
    all.sort();
    assert_eq!(all, ["alice", "bob"]);
    let (mine, whole) = (rig.p.queues_for(alice), rig.p.queues_for(root));
    assert_eq!(mine.queues[1].running_jobs, whole.queues[1].running_jobs);
    assert_eq!(mine.queues[1].used, whole.queues[1].used);
}
