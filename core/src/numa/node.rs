//! A node's hardware as the allocator sees it: the [`NumaMachine`] (PUs, memory and GPUs
//! per NUMA node), what "all free" looks like, and the RDMA rails (HCAs, fast NICs) local
//! to each NUMA node, attached to the tasks whose GPUs or CPUs sit there.
//!
//! A node with only `resources` (no probed topology) is one NUMA node: `cpu` whole PUs,
//! each its own core, all memory, and its GPUs.

use std::collections::HashMap;
use std::sync::Arc;

use bevy_ecs::prelude::*;
use hyperplan_shared::Resources;
use hyperplan_shared::topology::{NicKind, NodeTopology, SharedTopology};

use super::assign::Assignment;
use super::{GpuInfo, NumaFree, NumaMachine, NumaMask, PuInfo};

/// The node's hardware, shared by every node built from the same topology.
#[derive(Component, Clone, Debug)]
pub struct NodeHardware(pub Arc<NodeNuma>);

/// One node's hardware for placement: the machine, its all-free state, rails and GPU ids.
#[derive(Debug)]
pub struct NodeNuma {
    /// PUs, memory and GPUs with dense indices.
    pub machine: NumaMachine,
    /// The free state of the idle node, what a node's free state starts from.
    pub all_free: NumaFree,
    /// Per dense NUMA node: the RDMA devices and fast NICs local to it, by name. Shared
    /// strings: every placement names them, and a clone is a count, not an allocation.
    pub rails: Vec<Vec<Arc<str>>>,
    /// Per GPU: its PCI bus id, or its index when the node was not probed.
    pub gpu_ids: Vec<Arc<str>>,
}

/// Resource names that stand for the node's GPUs: `nvidia.com/gpu`, `amd.com/gpu`, ….
pub fn is_gpu_resource(name: &str) -> bool {
    name.rsplit('/').next() == Some("gpu") && name.contains('/')
}

/// What a node offers, from its hardware: `cpu` = PUs, `memory` = total memory,
/// `nvidia.com/gpu` = GPUs. The one derivation: the daemon calls it for its agents'
/// probes and the simulator for cluster-file nodes with a `topology:`, so both plan
/// with the same numbers.
pub fn hardware_resources(t: &NodeTopology) -> Resources {
    let pus: u64 = t.cores.iter().map(|c| c.pus.len() as u64).sum();
    let mut r = Resources::new()
        .with(hyperplan_shared::CPU, pus * 1000)
        .with(hyperplan_shared::MEMORY, t.total_memory);
    if !t.gpus.is_empty() {
        r = r.with("nvidia.com/gpu", t.gpus.len() as u64);
    }
    r
}

/// GPUs a request asks for (all GPU resources summed).
pub fn gpus_requested(r: &Resources) -> usize {
    r.iter()
        .filter(|(k, _)| is_gpu_resource(k))
        .map(|(_, v)| v as usize)
        .sum()
}

impl NodeNuma {
    /// From a probed topology, with rails from its HCAs and non-Ethernet NICs.
    pub fn from_topology(t: &NodeTopology) -> Self {
        let machine = NumaMachine::from_topology(t);
        let n = machine.numa_count().max(1);
        let dense = |os: &u32| machine.numa_os.iter().position(|x| x == os);
        let mut rails: Vec<Vec<Arc<str>>> = vec![Vec::new(); n];
        let mut netdevs_of_hcas: Vec<&str> = Vec::new();
        let mut hca_functions: Vec<&str> = Vec::new();
        for hca in &t.hcas {
            for i in hca.numa.iter().filter_map(dense) {
                rails[i].push(Arc::from(hca.name.as_str()));
            }
            netdevs_of_hcas.extend(hca.ports.iter().filter_map(|p| p.netdev.as_deref()));
            hca_functions.extend(hca.pci_bus_id.as_deref());
        }
        // Fast NICs that are not an HCA's own netdev (same name, or the same PCI function
        // when sysfs did not say): Omni-Path, usNIC, RoCE without an HCA entry. Management
        // Ethernet is left out.
        for nic in &t.nics {
            let of_hca = netdevs_of_hcas.contains(&nic.name.as_str())
                || nic.pci_bus_id.as_deref().is_some_and(|b| hca_functions.contains(&b));
            if nic.kind == NicKind::Ethernet || of_hca {
                continue;
            }
            for i in nic.numa.iter().filter_map(dense) {
                rails[i].push(Arc::from(nic.name.as_str()));
            }
        }
        for r in &mut rails {
            r.sort();
            r.dedup();
        }
        let gpu_ids = machine.gpus.iter().map(|g| Arc::from(g.pci_bus_id.as_str())).collect();
        Self::finish(machine, rails, gpu_ids)
    }

    /// One NUMA node with `cpu` (whole) PUs, the node's memory and GPUs.
    pub fn uniform(resources: &Resources) -> Self {
        let pus = (resources.get(hyperplan_shared::CPU) / 1000) as u32;
        let gpus = gpus_requested(resources);
        let machine = NumaMachine {
            numa_os: vec![0],
            numa_memory: vec![resources.get(hyperplan_shared::MEMORY)],
            pus: (0..pus)
                .map(|os| PuInfo {
                    os,
                    core: os,
                    socket: 0,
                    numa: 0,
                })
                .collect(),
            sockets: 1,
            gpus: (0..gpus)
                .map(|i| GpuInfo {
                    pci_bus_id: i.to_string(),
                    numa: NumaMask::single(0),
                })
                .collect(),
        };
        let gpu_ids = (0..gpus).map(|i| Arc::from(i.to_string())).collect();
        Self::finish(machine, vec![Vec::new()], gpu_ids)
    }

    fn finish(machine: NumaMachine, rails: Vec<Vec<Arc<str>>>, gpu_ids: Vec<Arc<str>>) -> Self {
        let all_free = machine.all_free();
        Self {
            machine,
            all_free,
            rails,
            gpu_ids,
        }
    }

    /// PU OS indexes of an assignment in list form (`0-3,8-11`), what `taskset -c` takes.
    pub fn cpu_list(&self, a: &Assignment) -> String {
        let os: Vec<u32> = a
            .pus
            .iter()
            .filter_map(|p| self.machine.pus.get(p))
            .map(|p| p.os)
            .collect();
        hyperplan_shared::cpulist::format_cpu_list(&os)
    }

    /// OS indexes of the NUMA nodes an assignment uses.
    pub fn numa_nodes(&self, a: &Assignment) -> Vec<u32> {
        a.numa
            .iter()
            .filter_map(|i| self.machine.numa_os.get(i).copied())
            .collect()
    }

    /// (NUMA OS index, bytes), ascending by NUMA node.
    pub fn memory(&self, a: &Assignment) -> Vec<(u32, u64)> {
        let mut m: Vec<(u32, u64)> = a
            .memory
            .iter()
            .filter_map(|&(i, b)| self.machine.numa_os.get(i).map(|os| (*os, b)))
            .collect();
        m.sort_unstable();
        m
    }

    /// The ids of an assignment's GPUs (PCI bus ids, or indices when not probed).
    pub fn gpus(&self, a: &Assignment) -> Vec<Arc<str>> {
        a.gpus.iter().filter_map(|&g| self.gpu_ids.get(g).cloned()).collect()
    }

    /// The rails to attach: those local to the task's GPUs, or — for a task without GPUs —
    /// to the NUMA nodes of its CPUs. Shared, never exclusive.
    pub fn nics(&self, a: &Assignment) -> Vec<Arc<str>> {
        let mask = if a.gpus.is_empty() {
            a.pus
                .iter()
                .filter_map(|p| self.machine.pus.get(p))
                .fold(NumaMask::default(), |m, p| m.or(NumaMask::single(p.numa as usize)))
        } else {
            a.gpus
                .iter()
                .filter_map(|&g| self.machine.gpus.get(g))
                .fold(NumaMask::default(), |m, g| m.or(g.numa))
        };
        let mut out: Vec<Arc<str>> = mask
            .iter()
            .filter_map(|i| self.rails.get(i))
            .flatten()
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// One `NodeNuma` per distinct hardware, so ten thousand identical nodes share one: the
/// allocator caches per hardware (a task's ideal span, a group's machine kinds), and the
/// daemon's agents each send their own copy of the same probe.
#[derive(Debug, Default, Resource)]
pub struct HardwareCache {
    /// Fast path by the topology's address (the simulator's nodes share one); the
    /// `SharedTopology` kept alongside keeps the address from being reused. Entries only
    /// this cache holds are dropped as it grows, so agents re-registering cannot grow it.
    by_topology: HashMap<usize, (SharedTopology, Arc<NodeNuma>)>,
    /// By content: hash → the distinct `NodeNuma`s with that hash.
    by_content: HashMap<u64, Vec<Arc<NodeNuma>>>,
    by_resources: HashMap<(u64, u64, usize), Arc<NodeNuma>>,
    prune_at: usize,
}

impl NodeNuma {
    /// The same hardware as far as placement can tell (what `HardwareCache` shares).
    fn same(&self, other: &NodeNuma) -> bool {
        self.machine == other.machine && self.rails == other.rails && self.gpu_ids == other.gpu_ids
    }

    fn content_hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        // Fixed keys: the same hardware hashes alike in every run.
        let mut h = std::hash::DefaultHasher::new();
        self.machine.hash(&mut h);
        self.rails.hash(&mut h);
        self.gpu_ids.hash(&mut h);
        h.finish()
    }
}

impl HardwareCache {
    /// The shared description of a node's hardware; with no topology (`None`), the uniform
    /// one-NUMA-node machine built from `resources`.
    pub fn get(&mut self, hardware: Option<&SharedTopology>, resources: &Resources) -> Arc<NodeNuma> {
        match hardware {
            Some(t) => {
                let key = Arc::as_ptr(&t.0) as usize;
                if let Some((_, n)) = self.by_topology.get(&key) {
                    return n.clone();
                }
                let n = self.intern(NodeNuma::from_topology(t));
                self.by_topology.insert(key, (t.clone(), n.clone()));
                if self.by_topology.len() > self.prune_at {
                    self.prune();
                }
                n
            }
            None => {
                let key = (
                    resources.get(hyperplan_shared::CPU) / 1000,
                    resources.get(hyperplan_shared::MEMORY),
                    gpus_requested(resources),
                );
                self.by_resources
                    .entry(key)
                    .or_insert_with(|| Arc::new(NodeNuma::uniform(resources)))
                    .clone()
            }
        }
    }

    fn intern(&mut self, n: NodeNuma) -> Arc<NodeNuma> {
        let bucket = self.by_content.entry(n.content_hash()).or_default();
        if let Some(same) = bucket.iter().find(|b| b.same(&n)) {
            return same.clone();
        }
        let n = Arc::new(n);
        bucket.push(n.clone());
        n
    }

    /// Drops topologies and hardware nothing else holds any more.
    fn prune(&mut self) {
        self.by_topology.retain(|_, (t, _)| Arc::strong_count(&t.0) > 1);
        self.by_content.retain(|_, bucket| {
            // Held by a node, or by a topology entry kept above.
            bucket.retain(|n| Arc::strong_count(n) > 1);
            !bucket.is_empty()
        });
        self.prune_at = (2 * self.by_topology.len()).max(64);
    }

    /// Distinct hardware descriptions held (for tests).
    pub fn distinct(&self) -> usize {
        self.by_content.values().map(Vec::len).sum::<usize>() + self.by_resources.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_resources() {
        assert!(is_gpu_resource("nvidia.com/gpu"));
        assert!(is_gpu_resource("amd.com/gpu"));
        assert!(!is_gpu_resource("gpu"));
        assert!(!is_gpu_resource("nvidia.com/gpu-memory"));
        let r = Resources::new().with("nvidia.com/gpu", 2).with("cpu", 4000);
        assert_eq!(gpus_requested(&r), 2);
    }

    #[test]
    fn uniform_node_is_one_numa_node() {
        let r = Resources::new()
            .with("cpu", 8500)
            .with("memory", 1 << 30)
            .with("nvidia.com/gpu", 2);
        let n = NodeNuma::uniform(&r);
        assert_eq!(n.machine.pus.len(), 8);
        assert_eq!(n.machine.numa_count(), 1);
        assert_eq!(n.gpu_ids, vec![Arc::from("0"), Arc::from("1")]);
        assert_eq!(n.all_free.memory, vec![1 << 30]);
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;
    use crate::testing::MachineBuilder;

    /// Every agent sends its own copy of the same probe: the planner keeps one
    /// description, and re-registering agents do not grow the cache.
    #[test]
    fn identical_probes_share_one_description_and_the_cache_stays_bounded() {
        let mut cache = HardwareCache::default();
        let r = Resources::new();
        let probe = MachineBuilder::new(2, 1, 8, 2).build();
        let other = MachineBuilder::new(1, 1, 16, 1).build();
        let first = cache.get(Some(&SharedTopology::new(probe.clone())), &r);
        let mut held = Vec::new();
        for i in 0..10_000 {
            let t = if i % 2 == 0 { probe.clone() } else { other.clone() };
            held.push(cache.get(Some(&SharedTopology::new(t)), &r));
        }
        assert!(Arc::ptr_eq(&first, &held[0]));
        assert!(Arc::ptr_eq(&held[1], &held[3]));
        assert_eq!(cache.distinct(), 2);
        assert!(cache.by_topology.len() <= 64, "{}", cache.by_topology.len());
    }
}
