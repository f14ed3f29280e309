//! Builders for scenario tests and benches: `ClusterBuilder::fat_tree(..)`,
//! `JobBuilder::gang(..)`, `MachineBuilder` (a node's NUMA hardware without hwloc), and a
//! simulation runner that checks the invariants after every tick.

use std::collections::BTreeMap;

use hyperplan_shared::quantity::parse_quantity;
use hyperplan_shared::report::Report;
use hyperplan_shared::{
    ClusterSpec, HyperNodeSpec, JobSpec, Member, MemberType, NetworkTopology, NodeSpec, PartitionPolicy, Resources,
    Selector, TaskSpec, TopologyMode,
};

use hyperplan_shared::topology::{Core, Gpu, InfinibandHca, NodeTopology, NumaNode, Package, SharedTopology};

use crate::cache::capacity::Capacity;
use crate::config::PlannerConfig;
use crate::invariants;
use crate::model::reason::Reason;
use crate::topology::TopologyIndex;

/// `cpu=8,memory=32Gi,nvidia.com/gpu=8` → resources. Test input: panics on bad text.
pub fn res(s: &str) -> Resources {
    let mut r = Resources::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, "0"));
        match parse_quantity(k, v) {
            Ok(q) => {
                r.0.insert(k.to_string(), q);
            }
            Err(e) => panic!("bad test resource {part:?}: {e}"),
        }
    }
    r
}

/// A cluster file's content for tests: nodes (flat or a fat tree), labels, hardware,
/// static HyperNodes and label discovery.
#[derive(Clone, Debug, Default)]
pub struct ClusterBuilder {
    spec: ClusterSpec,
    node_resources: Option<Resources>,
}

const TIER_NAMES: &[&str] = &["leaf", "spine", "pod", "top"];

impl ClusterBuilder {
    /// `n` nodes `n01..`, no HyperNodes.
    pub fn flat(n: u32) -> Self {
        let mut b = Self::default();
        for i in 1..=n {
            b.spec.nodes.push(node(&format!("n{i:02}")));
        }
        b
    }

    /// A fat tree: `fanout[0]` nodes per leaf (tier 1), `fanout[i]` children per
    /// HyperNode of tier i+1, and `top` HyperNodes of the highest tier (no single top
    /// above them). Names: nodes `n01..`, HyperNodes `leaf-1..`, `spine-1..`, `pod-1..`.
    pub fn fat_tree(fanout: &[u32], top: u32) -> Self {
        let mut b = Self::default();
        let total: u32 = fanout.iter().product::<u32>() * top;
        let width = total.to_string().len().max(2);
        for i in 1..=total {
            b.spec.nodes.push(node(&format!("n{i:0width$}")));
        }
        // Level 0: node names; each level groups the previous one.
        let mut below: Vec<String> = b.spec.nodes.iter().map(|n| n.name.clone()).collect();
        for (tier, &f) in fanout.iter().enumerate() {
            let kind = if tier == 0 {
                MemberType::Node
            } else {
                MemberType::HyperNode
            };
            let tier_name = TIER_NAMES.get(tier).copied().unwrap_or("tier");
            let mut above = Vec::new();
            for (k, chunk) in below.chunks(f.max(1) as usize).enumerate() {
                let name = format!("{tier_name}-{}", k + 1);
                b.spec.hyper_nodes.push(HyperNodeSpec {
                    name: name.clone(),
                    tier: tier as u32 + 1,
                    tier_name: Some(tier_name.to_string()),
                    members: chunk
                        .iter()
                        .map(|c| Member {
                            kind,
                            selector: Selector::Exact { name: c.clone() },
                        })
                        .collect(),
                });
                above.push(name);
            }
            below = above;
        }
        b
    }

    /// Every node gets these resources (default `cpu=8,memory=32Gi,nvidia.com/gpu=8`).
    pub fn node_resources(mut self, r: &str) -> Self {
        let r = res(r);
        for n in &mut self.spec.nodes {
            n.resources = r.clone();
        }
        self.node_resources = Some(r);
        self
    }

    /// Marks resources of node `i` (0-based) as used by outside work.
    pub fn used(mut self, i: usize, r: &str) -> Self {
        if let Some(n) = self.spec.nodes.get_mut(i) {
            n.used = res(r);
        }
        self
    }

    /// Marks node `i` (0-based) as fully used.
    pub fn busy(mut self, i: usize) -> Self {
        if let Some(n) = self.spec.nodes.get_mut(i) {
            n.used = n.resources.clone();
        }
        self
    }

    /// Label `k=v` on node `i`.
    pub fn label(mut self, i: usize, k: &str, v: &str) -> Self {
        if let Some(n) = self.spec.nodes.get_mut(i) {
            n.labels.insert(k.into(), v.into());
        }
        self
    }

    /// One more node called `name` with resources `r` (`cpu=8,memory=16Gi`).
    pub fn add_node(mut self, name: &str, r: &str) -> Self {
        let mut n = node(name);
        n.resources = res(r);
        self.spec.nodes.push(n);
        self
    }

    /// Every node gets this hardware; resources follow from it (cpu = PUs, memory, GPUs).
    pub fn hardware(mut self, t: NodeTopology) -> Self {
        let r = hardware_resources(&t);
        let shared = SharedTopology::new(t);
        for n in &mut self.spec.nodes {
            n.hardware = Some(shared.clone());
            n.resources = r.clone();
        }
        self
    }

    /// Node `i` (0-based) gets this hardware and the resources that follow from it.
    pub fn node_hardware(mut self, i: usize, t: NodeTopology) -> Self {
        if let Some(n) = self.spec.nodes.get_mut(i) {
            n.resources = hardware_resources(&t);
            n.hardware = Some(SharedTopology::new(t));
        }
        self
    }

    /// A static HyperNode.
    pub fn hyper_node(mut self, spec: HyperNodeSpec) -> Self {
        self.spec.hyper_nodes.push(spec);
        self
    }

    /// Label discovery: type `type_name` from the label keys `labels`, top tier first.
    pub fn label_discovery(mut self, type_name: &str, labels: &[&str]) -> Self {
        self.spec
            .label_discovery
            .insert(type_name.into(), labels.iter().map(|s| s.to_string()).collect());
        self
    }

    /// The cluster.
    pub fn build(self) -> ClusterSpec {
        self.spec
    }

    /// The topology index and resource cache the planner would build for this cluster.
    pub fn build_index(self) -> (TopologyIndex, Capacity) {
        let mut planner = crate::sim::planner_for(&self.spec, PlannerConfig::default());
        planner.tick(0);
        let world = planner.world();
        (
            world.resource::<TopologyIndex>().clone(),
            world.resource::<Capacity>().clone(),
        )
    }
}

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        labels: BTreeMap::new(),
        resources: res("cpu=8,memory=32Gi,nvidia.com/gpu=8"),
        used: Resources::new(),
        topology: None,
        hardware: None,
    }
}

/// A HyperNode of `tier` over exact members.
pub fn hn(name: &str, tier: u32, kind: MemberType, members: &[&str]) -> HyperNodeSpec {
    HyperNodeSpec {
        name: name.into(),
        tier,
        tier_name: None,
        members: members
            .iter()
            .map(|m| Member {
                kind,
                selector: Selector::Exact { name: m.to_string() },
            })
            .collect(),
    }
}

/// A job spec for tests: one gang role by default, with topology, priority and NUMA
/// settings as a test needs.
#[derive(Clone, Debug)]
pub struct JobBuilder {
    spec: JobSpec,
}

impl JobBuilder {
    /// A job with one task `worker` of `replicas` × `resources`, gang = all replicas.
    pub fn gang(name: &str, replicas: u32, resources: &str) -> Self {
        Self {
            spec: JobSpec {
                name: name.into(),
                priority: 0,
                min_available: None,
                submit_time: 0,
                network_topology: None,
                tasks: vec![task_spec("worker", replicas, resources)],
                run: Default::default(),
                submit_dir: None,
                queue: None,
                account: None,
                user: None,
                credential: None,
                priority_class: None,
                segments: Vec::new(),
                hold: false,
                begin: None,
                array: None,
                element: None,
                depends_on: None,
                keep_on_failed_dependency: false,
                topology_soft_after: None,
            },
        }
    }

    /// Its priority class (`priorityClassName`).
    pub fn class(mut self, name: &str) -> Self {
        self.spec.priority_class = Some(name.into());
        self
    }

    /// Back to pending when preempted or a node with its tasks is lost (`requeue`).
    pub fn requeue(mut self) -> Self {
        self.spec.run.requeue = true;
        self
    }

    /// `preemptGrace` (seconds).
    pub fn preempt_grace(mut self, secs: u64) -> Self {
        self.spec.run.preempt_grace = Some(secs);
        self
    }

    /// Hard mode: every gang inside one HyperNode of tier `tier` at most.
    pub fn hard(mut self, tier: u32) -> Self {
        self.spec.network_topology = Some(NetworkTopology {
            mode: TopologyMode::Hard,
            highest_tier_allowed: Some(tier),
            highest_tier_name: None,
        });
        self
    }

    /// Hard mode by tier name (`highestTierName`).
    pub fn hard_name(mut self, tier_name: &str) -> Self {
        self.spec.network_topology = Some(NetworkTopology {
            mode: TopologyMode::Hard,
            highest_tier_allowed: None,
            highest_tier_name: Some(tier_name.into()),
        });
        self
    }

    /// Soft mode: as few HyperNodes as the search finds.
    pub fn soft(mut self) -> Self {
        self.spec.network_topology = Some(NetworkTopology {
            mode: TopologyMode::Soft,
            highest_tier_allowed: None,
            highest_tier_name: None,
        });
        self
    }

    /// `minAvailable`: the gang minimum.
    pub fn min_available(mut self, n: u32) -> Self {
        self.spec.min_available = Some(n);
        self
    }

    /// The job's priority.
    pub fn priority(mut self, p: i32) -> Self {
        self.spec.priority = p;
        self
    }

    /// Submitted at `t` (seconds; the simulator's virtual time).
    pub fn submit(mut self, t: u64) -> Self {
        self.spec.submit_time = t;
        self
    }

    /// Runtime of every task (seconds).
    pub fn runtime(mut self, r: u64) -> Self {
        for t in &mut self.spec.tasks {
            t.runtime = Some(r);
        }
        self
    }

    /// Goes to queue `q`.
    pub fn queue(mut self, q: &str) -> Self {
        self.spec.queue = Some(q.into());
        self
    }

    /// Submitted by `u` (the simulator's owner).
    pub fn user(mut self, u: &str) -> Self {
        self.spec.user = Some(u.into());
        self
    }

    /// Time limit (seconds): the runtime estimate reservations count on.
    pub fn limit(mut self, secs: u64) -> Self {
        self.spec.run.time_limit = Some(secs);
        self
    }

    /// Splits the first task into `total` partitions of `size` (replicas set to match);
    /// `tier` is the partitions' hard limit.
    pub fn partitions(mut self, total: u32, size: u32, min: u32, tier: Option<u32>) -> Self {
        if let Some(t) = self.spec.tasks.first_mut() {
            t.replicas = total * size;
            t.partition_policy = Some(PartitionPolicy {
                total_partitions: total,
                partition_size: size,
                min_partitions: min,
                network_topology: tier.map(|t| NetworkTopology {
                    mode: TopologyMode::Hard,
                    highest_tier_allowed: Some(t),
                    highest_tier_name: None,
                }),
            });
        }
        self
    }

    /// One more `segments` layer (inside those given before): `size` consecutive ranks
    /// inside one HyperNode of tier `tier_name`.
    pub fn segment(mut self, size: u32, tier_name: &str) -> Self {
        self.spec.segments.push(hyperplan_shared::job::Segment {
            size,
            tier_name: Some(tier_name.into()),
            tier: None,
            allow_partial: false,
        });
        self
    }

    /// The last `segments` layer's tail segment may be smaller (`allowPartial`).
    pub fn allow_partial(mut self) -> Self {
        if let Some(s) = self.spec.segments.last_mut() {
            s.allow_partial = true;
        }
        self
    }

    /// NUMA topology policy of every task (`none`, `best-effort`, `restricted`,
    /// `single-numa-node`).
    pub fn numa(mut self, policy: &str) -> Self {
        for t in &mut self.spec.tasks {
            t.topology_policy = Some(policy.into());
        }
        self
    }

    /// `packed` or `spread`, every task.
    pub fn cpu_placement(mut self, p: &str) -> Self {
        for t in &mut self.spec.tasks {
            t.cpu_placement = Some(p.into());
        }
        self
    }

    /// Whole cores only, every task.
    pub fn full_cores(mut self) -> Self {
        for t in &mut self.spec.tasks {
            t.full_cores = true;
        }
        self
    }

    /// Submitted held (`hold: true`).
    pub fn hold(mut self) -> Self {
        self.spec.hold = true;
        self
    }

    /// Its begin time (`begin`), Unix seconds.
    pub fn begin(mut self, secs: u64) -> Self {
        self.spec.begin = Some(secs);
        self
    }

    /// An array (`array: "1-20%3"`); the test fails on a bad spec.
    pub fn array(mut self, spec: &str) -> Self {
        self.spec.array =
            Some(hyperplan_shared::array::ArraySpec::parse(spec).unwrap_or_else(|e| panic!("array {spec}: {e}")));
        self
    }

    /// Its dependency (`dependsOn`); the test fails on a bad expression.
    pub fn depends(mut self, expr: &str) -> Self {
        self.spec.depends_on = Some(
            hyperplan_shared::dependency::Dependency::parse(expr).unwrap_or_else(|e| panic!("dependency {expr}: {e}")),
        );
        self
    }

    /// `networkTopology.softAfter`: its hard topology turns soft after `secs` of waiting.
    pub fn soft_after(mut self, secs: u64) -> Self {
        self.spec.topology_soft_after = Some(secs);
        self
    }

    /// `keepOnFailedDependency: true`.
    pub fn keep_on_failed_dependency(mut self) -> Self {
        self.spec.keep_on_failed_dependency = true;
        self
    }

    /// Adds another task (role).
    pub fn task(mut self, name: &str, replicas: u32, resources: &str) -> Self {
        self.spec.tasks.push(task_spec(name, replicas, resources));
        self
    }

    /// The job spec.
    pub fn build(self) -> JobSpec {
        self.spec
    }
}

/// Simulates and panics if any invariant breaks after any tick.
/// A task of `replicas` × `resources` with every other field at its default.
fn task_spec(name: &str, replicas: u32, resources: &str) -> TaskSpec {
    TaskSpec {
        name: name.into(),
        replicas,
        runtime: None,
        resources: res(resources),
        partition_policy: None,
        topology_policy: None,
        cpu_placement: None,
        full_cores: false,
        command: Vec::new(),
        exec: Default::default(),
    }
}

/// Simulates `jobs` on `cluster`, failing the test when an invariant breaks after any tick.
pub fn run(cluster: &ClusterSpec, jobs: &[JobSpec], config: PlannerConfig) -> Report {
    crate::sim::simulate_with(cluster, jobs, config, |planner| {
        let bad = invariants::check(planner.world_mut());
        assert!(bad.is_empty(), "invariants broken: {bad:#?}");
    })
}

/// When job `name` of report `r` started; fails the test, with its reason, when it never
/// did.
pub fn start_of(r: &Report, name: &str) -> u64 {
    let Some(j) = r.jobs.iter().find(|j| j.name == name) else {
        panic!("no job {name} in the report");
    };
    j.start_time
        .unwrap_or_else(|| panic!("{name} never started: {:?}", j.reason))
}

/// As [`run`], with each job's reason as the core held it when last seen (a job that
/// ended and was retired keeps its last): the [`Reason`]s to match where the report
/// has their sentences.
pub fn run_with_reasons(
    cluster: &ClusterSpec,
    jobs: &[JobSpec],
    config: PlannerConfig,
) -> (Report, BTreeMap<String, Option<Reason>>) {
    use crate::model::components::{Job, JobState};
    let mut reasons = BTreeMap::new();
    let report = crate::sim::simulate_with(cluster, jobs, config, |planner| {
        let bad = invariants::check(planner.world_mut());
        assert!(bad.is_empty(), "invariants broken: {bad:#?}");
        let world = planner.world_mut();
        let mut q = world.query::<(&Job, &JobState)>();
        for (job, st) in q.iter(world) {
            reasons.insert(job.spec.name.clone(), st.reason.clone());
        }
    });
    (report, reasons)
}

pub use crate::numa::node::hardware_resources;

/// A node's hardware as the agent would report it, numbered like hwloc's synthetic
/// topologies: PUs in order, core by core, NUMA node by NUMA node. GPUs and HCAs are
/// spread evenly over the NUMA nodes (bus ids `0000:NN:00.0`, HCAs `mlx5_N`).
#[derive(Clone, Debug)]
pub struct MachineBuilder {
    packages: u32,
    numa_per_package: u32,
    cores_per_numa: u32,
    threads: u32,
    memory_per_numa: u64,
    gpus_per_numa: u32,
    hcas_per_numa: u32,
}

impl MachineBuilder {
    /// `packages` × `numa_per_package` NUMA nodes of `cores_per_numa` cores with
    /// `threads` PUs each, 64 GiB per NUMA node, no devices.
    pub fn new(packages: u32, numa_per_package: u32, cores_per_numa: u32, threads: u32) -> Self {
        Self {
            packages,
            numa_per_package,
            cores_per_numa,
            threads,
            memory_per_numa: 64 << 30,
            gpus_per_numa: 0,
            hcas_per_numa: 0,
        }
    }

    /// Memory per NUMA node, bytes.
    pub fn memory_per_numa(mut self, bytes: u64) -> Self {
        self.memory_per_numa = bytes;
        self
    }

    /// GPUs per NUMA node.
    pub fn gpus_per_numa(mut self, n: u32) -> Self {
        self.gpus_per_numa = n;
        self
    }

    /// InfiniBand HCAs per NUMA node.
    pub fn hcas_per_numa(mut self, n: u32) -> Self {
        self.hcas_per_numa = n;
        self
    }

    /// The machine, as the agent's probe would report it.
    pub fn build(&self) -> NodeTopology {
        let mut t = NodeTopology {
            hostname: "machine".into(),
            architecture: "x86_64".into(),
            ..NodeTopology::default()
        };
        let (mut pu, mut core, mut numa) = (0u32, 0u32, 0u32);
        for p in 0..self.packages {
            let mut package_cpus = Vec::new();
            for _ in 0..self.numa_per_package {
                let mut numa_cpus = Vec::new();
                for _ in 0..self.cores_per_numa {
                    let pus: Vec<u32> = (pu..pu + self.threads).collect();
                    pu += self.threads;
                    numa_cpus.extend(&pus);
                    t.cores.push(Core {
                        index: core,
                        package: Some(p),
                        numa: Some(numa),
                        pus,
                    });
                    core += 1;
                }
                package_cpus.extend(&numa_cpus);
                t.numa_nodes.push(NumaNode {
                    os_index: numa,
                    local_memory: self.memory_per_numa,
                    cpus: numa_cpus,
                    distances: Vec::new(),
                });
                for g in 0..self.gpus_per_numa {
                    let bus = numa * self.gpus_per_numa + g;
                    t.gpus.push(Gpu {
                        pci_bus_id: format!("0000:{:02x}:00.0", bus + 0x10),
                        vendor_id: 0x10de,
                        device_id: 0x2330,
                        vendor: Some("NVIDIA Corporation".into()),
                        model: Some("H100".into()),
                        os_devices: vec![format!("cuda{bus}")],
                        numa: vec![numa],
                    });
                }
                for h in 0..self.hcas_per_numa {
                    let i = numa * self.hcas_per_numa + h;
                    t.hcas.push(InfinibandHca {
                        name: format!("mlx5_{i}"),
                        pci_bus_id: Some(format!("0000:{:02x}:00.0", i + 0x80)),
                        numa: vec![numa],
                        ..InfinibandHca::default()
                    });
                }
                numa += 1;
            }
            t.packages.push(Package {
                os_index: Some(p),
                cpus: package_cpus,
            });
        }
        t.total_memory = self.memory_per_numa * u64::from(numa);
        t
    }
}

pub mod nvl;
mod rig;
mod span;

pub use rig::Rig;
pub use span::{FatTreeView, leaves_spanned};
