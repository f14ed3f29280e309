//! Slurm's Fair Tree as an option (`[fairshare] tree = "accounts"`): a waiting job's
//! fair-share factor comes from its (account, user) association's rank in a depth-first
//! walk of the `[[account]]` tree, siblings by level fair share (shares over usage). A
//! heavy user lowers their own account, not the users of a sibling account; shares
//! weigh; nested accounts count their children; ties go by name; with the option off
//! the order is today's; association usage survives a restart. Invariants are checked
//! after every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::fairshare::Usage;
use hyperplan_core::fairshare::tree::FairTree;
use hyperplan_core::queues::{QueueTable, Users};
use hyperplan_core::sim::planner_for;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_shared::JobSpec;
use hyperplan_shared::report::JobStatus;

/// Usage is worked out again every second: every step recalculates the order.
const FAST: &str = "[priority]\nrecalcInterval = \"1s\"\n";

fn config(text: &str) -> PlannerConfig {
    PlannerConfig::parse(&format!("{text}\n{FAST}"), "planner.toml").unwrap_or_else(|e| panic!("{e}"))
}

/// `nodes` registered nodes of 8 CPUs, planning with `config` + [`FAST`]. Every running
/// job below takes a whole node, so they all start at once whatever their order.
fn rig(text: &str, nodes: u32) -> Rig {
    let mut rig = Rig::new(
        config(text),
        ClusterBuilder::flat(nodes).node_resources("cpu=8").build().nodes,
    )
    .persisting();
    rig.register_all();
    rig.tick();
    rig
}

fn job(name: &str, cpus: u32, account: &str) -> JobSpec {
    let mut j = JobBuilder::gang(name, 1, &format!("cpu={cpus}")).build();
    j.account = Some(account.to_string());
    j
}

/// Submits `jobs` (name, user, account) of 8 CPUs in that order, places and starts them
/// all, then steps `secs` seconds: each has used 8 CPUs × seconds.
fn run_for(rig: &mut Rig, jobs: &[(&str, &str, &str)], secs: u32) {
    let ids: Vec<(u64, &str)> = jobs
        .iter()
        .map(|(name, user, account)| (rig.submit_as(job(name, 8, account), user), *name))
        .collect();
    rig.step();
    for (id, name) in ids {
        let j = rig.job(name);
        assert_eq!(j.status, JobStatus::Placed, "{name}: {:?}", j.reason);
        rig.start_all(name, id);
    }
    for _ in 0..secs {
        rig.step();
    }
}

/// Submits one waiting job of one CPU per (user, account) (the cluster is full), steps,
/// and answers the jobs' names by rank among waiting jobs, with their fair-share factor.
fn waiting(rig: &mut Rig, who: &[(&str, &str)]) -> Vec<(String, f64)> {
    for (user, account) in who {
        rig.submit_as(job(&format!("{user}-next"), 1, account), user);
    }
    rig.step();
    let mut out: Vec<(u32, String, f64)> = who
        .iter()
        .map(|(user, _)| {
            let name = format!("{user}-next");
            let j = rig.job(&name);
            assert_eq!(j.status, JobStatus::Pending, "{name} waits: the cluster is full");
            let p = j.priority.unwrap_or_else(|| panic!("{name} has no priority"));
            (p.rank, name, p.fairshare)
        })
        .collect();
    out.sort_by_key(|(rank, _, _)| *rank);
    out.into_iter().map(|(_, n, f)| (n, f)).collect()
}

fn names(order: &[(String, f64)]) -> Vec<&str> {
    order.iter().map(|(n, _)| n.as_str()).collect()
}

const TWO_SIBLINGS: &str = r#"
[fairshare]
tree = "accounts"

[[account]]
name = "a"
users = ["alice", "amy"]

[[account]]
name = "b"
users = ["bob", "bea"]
"#;

#[test]
fn a_heavy_user_lowers_their_own_account_not_the_users_of_a_sibling() {
    let mut rig = rig(TWO_SIBLINGS, 4);
    // alice holds two nodes, amy and bob one each: the cluster is full.
    run_for(
        &mut rig,
        &[
            ("alice-1", "alice", "a"),
            ("alice-2", "alice", "a"),
            ("amy-1", "amy", "a"),
            ("bob-1", "bob", "b"),
        ],
        10,
    );
    let order = waiting(&mut rig, &[("alice", "a"), ("amy", "a"), ("bob", "b"), ("bea", "b")]);
    // a (24 CPUs) is heavier than b (8): b's users first — bea (nothing used), then bob,
    // who used as much as amy — then a's, the light amy before the heavy alice.
    assert_eq!(names(&order), ["bea-next", "bob-next", "amy-next", "alice-next"]);
    // The one queue has used all there was (its factor 2^-1) times 4/4, 3/4, 2/4, 1/4.
    let factors: Vec<f64> = order.iter().map(|(_, f)| *f).collect();
    assert_eq!(factors, [0.5, 0.375, 0.25, 0.125]);
    let tree = rig.p.world_for_tests().resource::<FairTree>();
    assert_eq!(tree.factors.len(), 4);
    // Worked out once per recalculation or change, not once per job: five more jobs of
    // known associations in one step (itself a recalculation) cost at most one ranking.
    let before = tree.recomputes;
    for i in 0..5 {
        rig.submit_as(job(&format!("more-{i}"), 1, "a"), "amy");
    }
    rig.step();
    let tree = rig.p.world_for_tests().resource::<FairTree>();
    assert!(tree.recomputes <= before + 1, "{} after {before}", tree.recomputes);
}

#[test]
fn an_account_with_three_shares_to_one_goes_first_for_the_same_usage() {
    let accounts = |zeta_shares: u32| {
        format!(
            "[fairshare]\ntree = \"accounts\"\n[[account]]\nname = \"alpha\"\nusers = [\"ann\"]\n[[account]]\nname = \"zeta\"\nusers = [\"zed\"]\nshares = {zeta_shares}\n"
        )
    };
    let jobs = [("ann-1", "ann", "alpha"), ("zed-1", "zed", "zeta")];
    let mut rig3 = rig(&accounts(3), 2);
    run_for(&mut rig3, &jobs, 5);
    let order = waiting(&mut rig3, &[("ann", "alpha"), ("zed", "zeta")]);
    assert_eq!(names(&order), ["zed-next", "ann-next"]);
    // With equal shares the same usage ties, and the name decides.
    let mut rig1 = rig(&accounts(1), 2);
    run_for(&mut rig1, &jobs, 5);
    let order = waiting(&mut rig1, &[("ann", "alpha"), ("zed", "zeta")]);
    assert_eq!(names(&order), ["ann-next", "zed-next"]);
}

#[test]
fn a_nested_account_counts_what_its_children_used() {
    let mut rig = rig(
        r#"
[fairshare]
tree = "accounts"

[[account]]
name = "science"
users = ["carol"]

[[account]]
name = "physics"
parent = "science"
users = ["alice"]

[[account]]
name = "chem"
parent = "science"
users = ["bob"]

[[account]]
name = "eng"
users = ["dan"]
"#,
        5,
    );
    run_for(
        &mut rig,
        &[
            ("alice-1", "alice", "physics"),
            ("alice-2", "alice", "physics"),
            ("bob-1", "bob", "chem"),
            ("dan-1", "dan", "eng"),
            ("dan-2", "dan", "eng"),
        ],
        10,
    );
    let order = waiting(
        &mut rig,
        &[
            ("alice", "physics"),
            ("bob", "chem"),
            ("carol", "science"),
            ("dan", "eng"),
        ],
    );
    // science (24 CPUs below it) is heavier than eng (16): dan goes first although bob
    // used less, and carol (nothing used, charging science itself) after him; within
    // science chem (8) before physics (16).
    assert_eq!(names(&order), ["dan-next", "carol-next", "bob-next", "alice-next"]);
}

const TIES: &str = r#"
[fairshare]
tree = "accounts"

[[account]]
name = "b-team"
users = ["bo", "al"]

[[account]]
name = "a-team"
users = ["zed"]
"#;

#[test]
fn ties_go_by_name_the_same_way_every_time() {
    let once = || {
        let mut rig = rig(TIES, 4);
        run_for(
            &mut rig,
            &[
                ("bo-1", "bo", "b-team"),
                ("al-1", "al", "b-team"),
                ("zed-1", "zed", "a-team"),
                ("zed-2", "zed", "a-team"),
            ],
            5,
        );
        // Submitted in the reverse of the order they come out in.
        waiting(&mut rig, &[("bo", "b-team"), ("al", "b-team"), ("zed", "a-team")])
    };
    let first = once();
    // Both teams used 16 CPUs: a-team first by name; within b-team al and bo tie: al first.
    assert_eq!(names(&first), ["zed-next", "al-next", "bo-next"]);
    assert_eq!(first, once());
}

/// The queues suite's `status_shows_the_factors_and_the_rank`: alice used the node for
/// 600 s, bob nothing; (bob's rank, fair share), (alice's rank, fair share). Reservations
/// are not kept and nothing starves, so the rank is fair share's (kept, alice's reserved
/// job is first; by the starvation factor, alice's 100 s job starves at 200).
fn status_scenario(text: &str) -> ((u32, f64), (u32, f64)) {
    let cluster = ClusterBuilder::flat(1).node_resources("cpu=8").build();
    let text = format!("[scheduler]\nkeepReservations = false\nstarvationFactor = 0\n{text}");
    let config = PlannerConfig::parse(&text, "planner.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut planner = planner_for(&cluster, config);
    for j in [
        JobBuilder::gang("alice-long", 1, "cpu=8")
            .user("alice")
            .runtime(1000)
            .limit(1000)
            .build(),
        JobBuilder::gang("alice-next", 1, "cpu=8")
            .user("alice")
            .runtime(100)
            .limit(100)
            .build(),
        JobBuilder::gang("bob-first", 1, "cpu=8")
            .user("bob")
            .runtime(100)
            .limit(100)
            .build(),
    ] {
        let owner = j.user.clone().unwrap_or_default();
        hyperplan_core::sim::submit::submit(&mut planner, j, &owner);
    }
    planner.tick(0);
    planner.tick(600);
    let of = |name: &str| {
        let p = planner
            .job(name)
            .and_then(|j| j.priority)
            .unwrap_or_else(|| panic!("{name}'s priority"));
        (p.rank, p.fairshare)
    };
    (of("bob-first"), of("alice-next"))
}

#[test]
fn with_the_option_off_the_order_is_todays() {
    let today = status_scenario("");
    assert_eq!(today, ((1, 0.5), (2, 0.125)));
    assert_eq!(status_scenario("[fairshare]\ntree = \"queues\"\n"), today);
    // Accounts configured do not change it while the tree is the queues'.
    let accounts = "[[account]]\nname = \"a\"\nusers = [\"alice\", \"bob\"]\ndefaultFor = [\"alice\", \"bob\"]\n";
    assert_eq!(status_scenario(accounts), today);
    assert_eq!(
        status_scenario(&format!("{accounts}[fairshare]\ntree = \"queues\"\n")),
        today
    );
}

#[test]
fn association_usage_survives_a_restart() {
    let text = "[fairshare]\ntree = \"accounts\"\n[[account]]\nname = \"a\"\nusers = [\"alice\"]\n[[account]]\nname = \"b\"\nusers = [\"bob\"]\n";
    let mut rig = rig(text, 2);
    run_for(&mut rig, &[("alice-1", "alice", "a"), ("bob-1", "bob", "b")], 1);
    rig.exit_all("bob-1", 0);
    for _ in 0..10 {
        rig.step();
    }
    rig.exit_all("alice-1", 0);
    let stored = rig.usage_written(3);
    let record = hyperplan_core::model::usage::UsageRecord::decode(&stored).unwrap();
    let mut rows: Vec<(&str, &str)> = record
        .associations
        .iter()
        .map(|r| (r.account.as_str(), r.user.as_str()))
        .collect();
    rows.sort_unstable();
    assert_eq!(rows, [("a", "alice"), ("b", "bob")]);
    let usage_of = |rig: &Rig, account: &str, user: &str| {
        let w = rig.p.world_for_tests();
        let a = w.resource::<QueueTable>().accounts.find(account).unwrap();
        let u = w.resource::<Users>().find(user).unwrap();
        w.resource::<Usage>().associations.get(&(a, u)).map_or(0.0, |x| x.usage)
    };
    let before = (usage_of(&rig, "a", "alice"), usage_of(&rig, "b", "bob"));
    assert!(before.0 > 2.0 * before.1 && before.1 > 0.0, "{before:?}");
    // The order of bob and alice after a restart, usage restored or not.
    let after = |restore: bool| {
        let (mut next, warnings) = rig.restarted(config(text), 1_000);
        assert!(warnings.is_empty(), "{warnings:?}");
        if restore {
            next.p.restore_usage(&stored).unwrap();
        }
        next.register_all();
        next.tick();
        if restore {
            let now = (usage_of(&next, "a", "alice"), usage_of(&next, "b", "bob"));
            // Decayed by a second or two of a week's half-life: all but the same.
            assert!((now.0 - before.0).abs() < 1e-3 * before.0, "{now:?} {before:?}");
            assert!((now.1 - before.1).abs() < 1e-3 * before.1, "{now:?} {before:?}");
        }
        // A full cluster again, as much for each since, then one waiting job each.
        run_for(&mut next, &[("fill-1", "alice", "a"), ("fill-2", "bob", "b")], 0);
        waiting(&mut next, &[("alice", "a"), ("bob", "b")])
    };
    // Restored: alice used more than twice what bob did, bob first.
    assert_eq!(names(&after(true)), ["bob-next", "alice-next"]);
    // Not restored, both used as much since: the name decides.
    assert_eq!(names(&after(false)), ["alice-next", "bob-next"]);
}
