//! Builders for NVLink clusters: GB200 NVL72 compute trays (two Grace CPUs, four GPUs)
//! whose GPUs report their rack's cluster UUID and clique as NVML would, racks of 18
//! under InfiniBand leaves and spines given as static HyperNodes (what a fabric source
//! would make), so the `nvlink` source has something to discover.

use hyperplan_shared::gpufabric::{FabricHealth, FabricState, FabricStatus, GpuFabric};
use hyperplan_shared::topology::{NodeTopology, SharedTopology};
use hyperplan_shared::{HyperNodeSpec, Member, MemberType, Selector};

use super::{ClusterBuilder, MachineBuilder, node};
use crate::numa::node::hardware_resources;

/// Trays per NVL72 rack.
pub const TRAYS_PER_RACK: u32 = 18;

/// The clique Fabric Manager gives a rack it did not split (any non-zero value works).
pub const WHOLE_RACK_CLIQUE: u32 = 32766;

/// Rack `rack`'s cluster UUID: canonical, distinct per rack, distinct in its first 8 hex
/// digits (`nvl-6b8d0001` …).
pub fn rack_uuid(rack: u32) -> String {
    format!(
        "{:08x}-2f4a-4c9b-8e3d-{:012x}",
        0x6b8d_0000_u32.wrapping_add(rack),
        rack
    )
}

/// One GPU's fabric report: registration completed in `uuid`, partition `clique`.
pub fn gpu_in(uuid: &str, clique: u32, index: u32) -> GpuFabric {
    GpuFabric {
        pci_bus_id: format!("0000:{:02x}:00.0", index + 0x10),
        index: Some(index),
        cluster_uuid: uuid.to_string(),
        clique_id: clique,
        state: FabricState::Completed,
        status: FabricStatus::Success,
        health_mask: None,
        health: FabricHealth::default(),
    }
}

/// A GB200 compute tray: 2 × 72 Grace cores, 480 GiB per NUMA node, 4 GPUs, and the four
/// GPUs' fabric reports.
pub fn tray(fabric: Vec<GpuFabric>) -> NodeTopology {
    let mut t = MachineBuilder::new(2, 1, 72, 1)
        .memory_per_numa(480 << 30)
        .gpus_per_numa(2)
        .build();
    t.gpu_fabric = fabric;
    t
}

/// A tray of rack `uuid`, partition `clique`, all four GPUs healthy.
pub fn tray_in(uuid: &str, clique: u32) -> NodeTopology {
    tray((0..4).map(|i| gpu_in(uuid, clique, i)).collect())
}

impl ClusterBuilder {
    /// `racks` NVL72 racks of 18 trays (`r01t01` …), `racks_per_leaf` racks under each
    /// leaf (`leaf-1` …, tier 1 as a fabric source makes it) and `leaves_per_spine` leaves
    /// under each spine (`spine-1` …, tier 2); `leaves_per_spine` 0: no spines.
    pub fn nvl72(racks: u32, racks_per_leaf: u32, leaves_per_spine: u32) -> Self {
        let mut b = Self::default();
        let mut leaves: Vec<Vec<String>> = Vec::new();
        for r in 0..racks {
            let topo = SharedTopology::new(tray_in(&rack_uuid(r + 1), WHOLE_RACK_CLIQUE));
            let resources = hardware_resources(&topo.0);
            if r % racks_per_leaf.max(1) == 0 {
                leaves.push(Vec::new());
            }
            for t in 0..TRAYS_PER_RACK {
                let mut n = node(&format!("r{:02}t{:02}", r + 1, t + 1));
                n.resources = resources.clone();
                n.hardware = Some(topo.clone());
                if let Some(leaf) = leaves.last_mut() {
                    leaf.push(n.name.clone());
                }
                b.spec.nodes.push(n);
            }
        }
        let leaf_names: Vec<String> = (1..=leaves.len()).map(|i| format!("leaf-{i}")).collect();
        for (name, members) in leaf_names.iter().zip(&leaves) {
            b.spec
                .hyper_nodes
                .push(group(name, 1, "leaf", MemberType::Node, members));
        }
        if leaves_per_spine > 0 {
            for (k, chunk) in leaf_names.chunks(leaves_per_spine as usize).enumerate() {
                b.spec.hyper_nodes.push(group(
                    &format!("spine-{}", k + 1),
                    2,
                    "spine",
                    MemberType::HyperNode,
                    chunk,
                ));
            }
        }
        b
    }

    /// The node called `name` reports these GPUs' fabric instead (its hardware is copied).
    pub fn node_fabric(mut self, name: &str, fabric: Vec<GpuFabric>) -> Self {
        if let Some(n) = self.spec.nodes.iter_mut().find(|n| n.name == name) {
            let mut t = n
                .hardware
                .as_ref()
                .map(|h| (*h.0).clone())
                .unwrap_or_else(|| tray(Vec::new()));
            t.gpu_fabric = fabric;
            n.resources = hardware_resources(&t);
            n.hardware = Some(SharedTopology::new(t));
        }
        self
    }
}

fn group(name: &str, tier: u32, tier_name: &str, kind: MemberType, members: &[String]) -> HyperNodeSpec {
    HyperNodeSpec {
        name: name.to_string(),
        tier,
        tier_name: Some(tier_name.to_string()),
        members: members
            .iter()
            .map(|m| Member {
                kind,
                selector: Selector::Exact { name: m.clone() },
            })
            .collect(),
    }
}
