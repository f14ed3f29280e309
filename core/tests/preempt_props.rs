//! Property test for preemption's victim choice (issue 25, `preempt::victims`): small
//! random fat trees filled with random low-priority running jobs in a preemptible queue,
//! then one higher-priority job that does not fit. What `Setting::find` chooses is
//! compared with brute force over every allowed HyperNode and every set of candidates,
//! asked with the same placement search (`Setting::fits`): it finds a preemption exactly
//! when one exists, its set fits, no victim in it is needless, and it has at most one
//! victim more than the fewest possible; the share of cases where it has the fewest is
//! counted over the run and must stay at or above 90 %. The seed is fixed unless
//! PROPTEST_CASES is set (a hunt, from a random seed); what a hunt finds is kept as a case
//! of its own (`two_leaves_of_*`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::Cell;

use hyperplan_core::names::JobNames;
use hyperplan_core::preempt::Setting;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_core::{Event, PlannerConfig};
use hyperplan_shared::report::JobStatus;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

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
"#;

/// Most running fillers (so candidates): the brute force tries every subset of them.
const MAX_CANDIDATES: usize = 10;

#[derive(Debug, Clone)]
struct Filler {
    tasks: u32,
    cpu: u32,
    hard: bool,
    /// In queue `safe` (not preemptible) rather than `lo`.
    safe: bool,
    /// Seconds the clock moves before it is submitted (its work lost differs).
    wait: u64,
}

#[derive(Debug, Clone)]
struct Case {
    per_leaf: u32,
    leaves: u32,
    fillers: Vec<Filler>,
    tasks: u32,
    cpu: u32,
    hard: bool,
}

fn filler() -> impl Strategy<Value = Filler> {
    (
        1u32..=3,
        prop_oneof![Just(2u32), Just(4), Just(8)],
        proptest::bool::weighted(0.4),
        proptest::bool::weighted(0.15),
        0u64..120,
    )
        .prop_map(|(tasks, cpu, hard, safe, wait)| Filler {
            tasks,
            cpu,
            hard,
            safe,
            wait,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (2u32..=4, 2u32..=3)
        .prop_flat_map(|(per_leaf, leaves)| {
            (
                Just(per_leaf),
                Just(leaves),
                proptest::collection::vec(filler(), 4..16),
                1u32..=per_leaf,
                prop_oneof![Just(4u32), Just(8)],
                any::<bool>(),
            )
        })
        .prop_map(|(per_leaf, leaves, fillers, tasks, cpu, hard)| Case {
            per_leaf,
            leaves,
            fillers,
            tasks,
            cpu,
            hard,
        })
}

/// The cluster filled and the preemptor submitted, looked at once (the planner itself does
/// not preempt: `enabled = false`).
fn build(c: &Case) -> Rig {
    let cluster = ClusterBuilder::fat_tree(&[c.per_leaf, c.leaves], 1)
        .node_resources("cpu=8")
        .build();
    let mut config = PlannerConfig::parse(CONFIG, "planner.toml").unwrap();
    config.preemption.enabled = false;
    let mut rig = Rig::new(config, cluster.nodes);
    rig.p.push(Event::StaticHyperNodes(cluster.hyper_nodes));
    rig.register_all();
    rig.tick();
    let mut running = 0;
    for (i, f) in c.fillers.iter().enumerate() {
        if running == MAX_CANDIDATES {
            break;
        }
        let name = format!("f{i:02}");
        let mut b =
            JobBuilder::gang(&name, f.tasks, &format!("cpu={}", f.cpu)).queue(if f.safe { "safe" } else { "lo" });
        if f.hard {
            b = b.hard(1);
        }
        rig.now += f.wait * 1_000;
        let id = rig.submit_as(b.build(), "alice");
        rig.step();
        if rig.job(&name).status == JobStatus::Placed {
            rig.start_all(&name, id);
            rig.step();
            running += 1;
        } else {
            rig.p.push(Event::Cancel {
                job: name,
                grace_secs: 0,
                by_admin: false,
            });
            rig.step();
        }
    }
    rig.now += 60_000;
    let mut big = JobBuilder::gang("big", c.tasks, &format!("cpu={}", c.cpu)).class("urgent");
    if c.hard {
        big = big.hard(1);
    }
    rig.submit_as(big.build(), "bob");
    rig.step();
    rig
}

/// The fewest victims for which the job fits in some allowed HyperNode, and the least work
/// lost among such sets; `None` when no set of candidates makes room anywhere.
fn brute_force(s: &Setting<'_>) -> Option<(usize, u64)> {
    let n = s.candidates().len();
    let hns = s.hyper_nodes();
    let mut masks: Vec<u32> = (0..1u32 << n).collect();
    masks.sort_by_key(|m| m.count_ones());
    let mut best: Option<(usize, u64)> = None;
    for m in masks {
        let k = m.count_ones() as usize;
        if best.is_some_and(|(b, _)| k > b) {
            break;
        }
        let set: Vec<usize> = (0..n).filter(|i| m & (1 << i) != 0).collect();
        if hns.iter().any(|&h| s.fits(h, &set)) {
            let work: u64 = set.iter().map(|&i| s.work(i)).sum();
            if best.is_none_or(|(_, w)| work < w) {
                best = Some((k, work));
            }
        }
    }
    best
}

/// What one case showed.
#[derive(Default)]
struct Tally {
    /// Cases where the preemptor waited and had candidates.
    looked: Cell<usize>,
    /// ...where some set made room.
    feasible: Cell<usize>,
    /// ...and `find` chose the fewest victims.
    fewest: Cell<usize>,
    /// ...and the least work lost among the fewest too. Not asserted: the greedy ranks a
    /// job by its share of the request before its work, so a bigger job can be chosen
    /// where a cheaper one alone would do as well (97 %: 15,275 of 15,722, below).
    least_work: Cell<usize>,
    /// ...where `find` had one victim more than brute force.
    one_more: Cell<usize>,
}

fn bump(c: &Cell<usize>) {
    c.set(c.get() + 1);
}

fn check(c: &Case, tally: &Tally) -> Result<(), TestCaseError> {
    let rig = build(c);
    if rig.job("big").status != JobStatus::Pending {
        return Ok(()); // it fit without preempting anyone
    }
    let world = rig.p.world_for_tests();
    let e = world.resource::<JobNames>().0["big"];
    let mut config = world.resource::<PlannerConfig>().clone();
    config.preemption.enabled = true;
    let Ok(s) = Setting::of(world, e, &config) else {
        return Ok(()); // no candidates (nothing running it may preempt)
    };
    let cands = s.candidates();
    prop_assert!(cands.len() <= MAX_CANDIDATES);
    bump(&tally.looked);
    let brute = brute_force(&s);
    let found = s.find();
    prop_assert_eq!(
        found.is_some(),
        brute.is_some(),
        "find: {:?}, brute force: {:?}",
        found.as_ref().map(|f| f.key),
        brute
    );
    let (Some(found), Some((min, min_work))) = (found, brute) else {
        return Ok(());
    };
    bump(&tally.feasible);
    let set: Vec<usize> = found
        .victims
        .iter()
        .map(|v| {
            cands
                .iter()
                .position(|(ce, _)| *ce == v.0)
                .expect("a victim is a candidate")
        })
        .collect();
    let names: Vec<&str> = found.victims.iter().map(|v| v.1.as_str()).collect();
    prop_assert_eq!(found.key.0, set.len());
    prop_assert_eq!(found.key.1, set.iter().map(|&i| s.work(i)).sum::<u64>());
    // (a) The chosen set makes room in the chosen HyperNode.
    prop_assert!(s.fits(found.hn, &set), "{names:?} does not make room in {:?}", found.hn);
    // (b) No needless victim: without any one of them it does not fit there.
    for (k, &v) in set.iter().enumerate() {
        let without: Vec<usize> = set.iter().copied().filter(|&x| x != v).collect();
        prop_assert!(
            !s.fits(found.hn, &without),
            "{} is needless in {names:?} ({:?})",
            names[k],
            found.hn
        );
    }
    // Brute force is the optimum: nothing that fits beats it.
    prop_assert!(
        (found.key.0, found.key.1) >= (min, min_work),
        "find {:?} beats brute force ({min}, {min_work})",
        found.key
    );
    // (c) At most one victim more than the fewest.
    prop_assert!(
        found.key.0 <= min + 1,
        "find chose {} victims {names:?}, brute force {min}",
        found.key.0
    );
    if found.key.0 == min {
        bump(&tally.fewest);
        if found.key.1 == min_work {
            bump(&tally.least_work);
        }
    } else {
        bump(&tally.one_more);
        // The greedy ranks jobs by what they free summed over the HyperNode, not per node;
        // the exact step after it (`victims::fewest`) finds the fewest unless its budget
        // runs out, which 10 candidates did not reach: not seen since (below).
        eprintln!(
            "one victim more: {c:?}\n  find {:?} in {:?}: {names:?}; brute force ({min}, {min_work})",
            found.key, found.hn
        );
    }
    Ok(())
}

/// A filler of `tasks` × `cpu` CPUs in queue `lo` (or `safe`), submitted at once.
fn f(tasks: u32, cpu: u32, safe: bool) -> Filler {
    Filler {
        tasks,
        cpu,
        hard: false,
        safe,
        wait: 0,
    }
}

/// Found by a random hunt (~46,000 cases): 6 victims where 4 do. The greedy chose 6 in
/// leaf 1; on the spine its first 6 (wide jobs first) made no room and it stopped there
/// (no fewer than leaf 1's), before the prune could drop any. Now 4 on the spine.
#[test]
fn two_leaves_of_4_a_whole_leaf_wanted() {
    let c = Case {
        per_leaf: 4,
        leaves: 2,
        fillers: vec![
            f(2, 4, false),
            f(1, 2, false),
            f(3, 2, false),
            f(3, 4, false),
            f(1, 2, false),
            f(2, 2, false),
            f(2, 4, false),
            f(2, 2, true),
            f(2, 2, false),
            f(1, 2, false),
        ],
        tasks: 4,
        cpu: 8,
        hard: false,
    };
    fewest(&c);
}

/// Found by the same hunt: 5 victims where 3 do (as above: 5 in leaf 1, the greedy on the
/// spine stopped at 5). Now 3 on the spine, emptying one node beside a free one.
#[test]
fn two_leaves_of_3_two_whole_nodes_wanted() {
    let c = Case {
        per_leaf: 3,
        leaves: 2,
        fillers: vec![
            f(1, 4, false),
            f(1, 2, false),
            f(2, 2, false),
            f(1, 2, false),
            f(3, 2, false),
            f(2, 4, true),
            f(1, 4, false),
            f(2, 2, true),
            f(1, 2, false),
        ],
        tasks: 2,
        cpu: 8,
        hard: false,
    };
    fewest(&c);
}

/// `c` passes every check, with a preemption of the fewest victims brute force finds.
fn fewest(c: &Case) {
    let tally = Tally::default();
    check(c, &tally).unwrap();
    assert_eq!((tally.feasible.get(), tally.fewest.get()), (1, 1), "{c:?}");
}

#[test]
fn victims_are_few_needed_and_make_room() {
    let tally = Tally::default();
    // By default 64 cases from a fixed seed, the same every run (CI must not pass or fail
    // by chance); with PROPTEST_CASES that many from a random seed (a hunt: what it finds
    // becomes a case of its own, like `two_leaves_of_4_a_whole_leaf_wanted`).
    let hunt: Option<u32> = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok());
    let mut runner = TestRunner::new(Config {
        cases: hunt.unwrap_or(64),
        failure_persistence: None,
        rng_seed: if hunt.is_some() {
            RngSeed::Random
        } else {
            RngSeed::Fixed(0x9e_e3_b7)
        },
        ..Config::default()
    });
    let cases = runner.config().cases;
    let result = runner.run(&case(), |c| check(&c, &tally));
    if let Err(e) = result {
        panic!("{e}");
    }
    let (looked, feasible, fewest) = (tally.looked.get(), tally.feasible.get(), tally.fewest.get());
    let ratio = fewest as f64 / feasible.max(1) as f64;
    println!(
        "preempt_props: {looked} cases with candidates, {feasible} with a preemption; fewest victims in \
         {fewest} ({:.1} %), least work among those too in {}, one victim more in {}",
        ratio * 100.0,
        tally.least_work.get(),
        tally.one_more.get()
    );
    assert!(
        feasible * 4 >= cases as usize,
        "too few cases with a preemption to judge ({feasible})"
    );
    // (d) The choice has the fewest victims in at least 90 % of cases. Observed, greedy +
    // prune alone: 2,172 of 2,174 (99.9 %) with PROPTEST_CASES=3000; with the exact step,
    // all 15,722 with a preemption in 44 runs of PROPTEST_CASES=500.
    assert!(ratio >= 0.9, "fewest victims in only {fewest} of {feasible} cases");
}
