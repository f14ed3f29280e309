//! What an array of 10,000 elements costs (issue 39): its admission, and the ticks with
//! it waiting, against 10,000 single jobs of the same shape.
//!
//! Cluster: `fattree::generate` with 1,024 nodes, fanout 16,8 (64 leaves, 8 spines, one
//! `top`), every node `cpu=64`, each running one whole-node job (limits 1 h–48 h,
//! fixed-seed xorshift) placed at t=0, so the cluster is full. Then, at t=10, one of:
//!
//! - `singles`: 10,000 jobs of one `cpu=64` task (limit 1 h) in one submission;
//! - `array`: one job with `array: 1-10000` of the same task;
//! - `array%64`: the same with `%64`, so `jobs::gates` works the limit out every tick.
//!
//! Measured, each on a planner of its own (the daemon's path, `Planner::submit`):
//! `submit`: the core's part of the submission (ids, records, entities); its records go to
//! the store as one commit (`records` and `bytes`: what that commit writes). `first`:
//! the tick that looks at all of them first. `idle`: a tick with nothing new (median of
//! 20). `task end`: one running job ends and the tick places one waiting job (median of
//! 20; the cluster is refilled untimed after each).
//!
//! Run: `cargo bench --bench arrays --no-run`, then
//! `taskset -c 0 target/release/deps/arrays-* --bench`. `ARRAYS_CASES` picks cases
//! (comma-separated of `singles,array,array%64`), `ARRAYS_REPS` the repetitions (20).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hyperplan_core::caller::Caller;
use hyperplan_core::sim::{SIM_OWNER, planner_for};
use hyperplan_core::testing::JobBuilder;
use hyperplan_core::{Command, Event, Planner, PlannerConfig};
use hyperplan_shared::JobSpec;
use hyperplan_shared::array::ArraySpec;
use hyperplan_shared::fattree::{self, FatTreeParams};
use hyperplan_shared::quantity::parse_resource_list;

/// The daemon's allocator (`planner/src/main.rs`), so the figures are the daemon's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NODE: &str = "cpu=64";
const HOUR: u64 = 3_600;
const NODES: u32 = 1_024;
const ELEMENTS: u32 = 10_000;
const REPS: usize = 20;

/// One running whole-node task the bench may end.
struct Running {
    job: String,
    task: String,
    index: u32,
}

struct Bench {
    planner: Planner,
    now: u64,
    running: Vec<Running>,
    seq: u64,
}

impl Bench {
    fn tick(&mut self) -> (Duration, Vec<Command>) {
        self.now += 1;
        let t = Instant::now();
        let cmds = self.planner.tick(self.now);
        let took = t.elapsed();
        for c in &cmds {
            if let Command::Place(p) = c {
                self.running.push(Running {
                    job: p.job().to_string(),
                    task: p.task.to_string(),
                    index: p.index,
                });
            }
        }
        (took, cmds)
    }
}

/// A full cluster: every node runs one whole-node job.
fn full() -> Bench {
    let params = FatTreeParams {
        nodes: NODES,
        fanout: vec![16, 8],
        node_resources: parse_resource_list(NODE).expect("node resources"),
        busy: 0.0,
        seed: 20_261_205,
        prefix: "node".to_string(),
    };
    let spec = fattree::generate(&params).expect("fat tree");
    let mut b = Bench {
        planner: planner_for(&spec, PlannerConfig::default()),
        now: 0,
        running: Vec::new(),
        seq: 0,
    };
    let mut rng: u64 = 20_261_205;
    for i in 0..NODES {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let limit = HOUR + rng % (47 * HOUR);
        let job = JobBuilder::gang(&format!("run-{i:05}"), 1, NODE).limit(limit).build();
        hyperplan_core::sim::submit::submit(&mut b.planner, job, SIM_OWNER);
    }
    b.now = 0;
    let cmds = b.planner.tick(0);
    for c in &cmds {
        if let Command::Place(p) = c {
            b.running.push(Running {
                job: p.job().to_string(),
                task: p.task.to_string(),
                index: p.index,
            });
        }
    }
    assert_eq!(b.running.len(), NODES as usize, "every node runs a job");
    b.now = 10;
    b
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn case(name: &str, jobs: Vec<JobSpec>) {
    // `ARRAYS_CASES=array%64` runs only the cases named (comma-separated).
    if let Ok(only) = std::env::var("ARRAYS_CASES")
        && !only.split(',').any(|c| c == name)
    {
        return;
    }
    let mut b = full();
    let t = Instant::now();
    let admitted = b
        .planner
        .submit(jobs, Caller::user("alice"), b.now * 1000)
        .expect("submitted");
    let submit = t.elapsed();
    let records = admitted.len();
    let bytes: usize = admitted.iter().map(|a| a.record.bytes.len()).sum();
    let (first, cmds) = b.tick();
    assert!(
        !cmds.iter().any(|c| matches!(c, Command::Place(_))),
        "nothing starts on the full cluster"
    );
    let mut idle = Vec::with_capacity(REPS);
    let mut ended = Vec::with_capacity(REPS);
    let reps = std::env::var("ARRAYS_REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(REPS);
    for _ in 0..reps {
        idle.push(b.tick().0);
        // One running job ends: the tick places one waiting job on its node.
        let r = b.running.remove(0);
        b.planner.push(Event::TaskFinished {
            job: r.job,
            task: r.task,
            index: r.index,
        });
        let (took, cmds) = b.tick();
        let placed = cmds.iter().filter(|c| matches!(c, Command::Place(_))).count();
        assert_eq!(placed, 1, "{name}: one waiting job starts on the freed node");
        ended.push(took);
        b.seq += 1;
    }
    println!(
        "{name:>9}: submit {:>8.1?} ({records} records, {:.1} MiB in one commit), first tick {:>8.1?}, idle tick {:>8.1?}, task-end tick {:>8.1?}",
        submit,
        bytes as f64 / (1 << 20) as f64,
        first,
        median(idle),
        median(ended)
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test` runs benches as tests: nothing to check here
    }
    let one = |name: &str| JobBuilder::gang(name, 1, NODE).limit(HOUR).build();
    let singles: Vec<JobSpec> = (0..ELEMENTS).map(|i| one(&format!("single-{i:05}"))).collect();
    case("singles", singles);
    let mut array = one("sweep");
    array.array = Some(ArraySpec::parse("1-10000").expect("spec"));
    case("array", vec![array.clone()]);
    array.array = Some(ArraySpec::parse("1-10000%64").expect("spec"));
    case("array%64", vec![array]);
}
