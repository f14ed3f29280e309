//! `NodeTopology`: what an agent's probe reports about its machine — CPU tree, NUMA
//! nodes, GPUs, NICs, InfiniBand HCAs and their NUMA locality — and the live figures
//! heartbeats carry. Field names (camelCase in JSON/YAML) are an interface.
//!
//! CPU sets are lists of PU (hardware thread) OS indexes, sorted; NUMA nodes are named
//! by their OS index, as the kernel numbers them (sparse ids stay sparse).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// NUMA nodes per machine the planner places on: its NUMA sets are 64-bit masks, as
/// kubelet's are, and no machine we know of has more (a 16-socket system with SNC4 has 64).
pub const MAX_NUMA_NODES: usize = 64;

/// PUs (hardware threads) per machine: the agent refuses to build a larger synthetic or
/// XML topology (hwloc takes minutes and gigabytes past it), and the planner refuses an
/// agent that reports more.
pub const MAX_PUS: usize = 16_384;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTopology {
    pub hostname: String,
    /// `x86_64`, `aarch64`, …
    pub architecture: String,
    pub cpu_model: Option<String>,
    /// Bytes, summed over NUMA nodes (or the machine's total when there is no NUMA info).
    pub total_memory: u64,
    /// Kernel release (`uname -r`), when known.
    pub kernel: Option<String>,
    pub packages: Vec<Package>,
    pub numa_nodes: Vec<NumaNode>,
    pub cores: Vec<Core>,
    /// L3 cache groups (PUs sharing one L3).
    pub l3_groups: Vec<CacheGroup>,
    pub gpus: Vec<Gpu>,
    /// Network interfaces (Ethernet, IPoIB, usNIC, …) from the PCI tree.
    pub nics: Vec<Nic>,
    /// InfiniBand HCAs: PCI tree + `/sys/class/infiniband`.
    pub hcas: Vec<InfinibandHca>,
    pub labels: BTreeMap<String, String>,
    /// NVLink fabric information, one entry per GPU (NVML or `nvidia-smi`); empty where the
    /// node has no NVLink fabric information (no NVIDIA GPU, no driver, a description).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_fabric: Vec<crate::gpufabric::GpuFabric>,
    /// Load, free memory per NUMA node, up time: for probes of a live machine only (not
    /// part of the topology proper; heartbeats carry them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveFigures>,
    /// Problems that left a field empty (one bad sysfs value), for the operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl NodeTopology {
    /// Why the planner cannot place on this machine, or `None`: said once, plainly,
    /// instead of quietly cutting what does not fit.
    pub fn unsupported(&self) -> Option<String> {
        let pus: usize = self.cores.iter().map(|c| c.pus.len()).sum();
        if self.numa_nodes.len() > MAX_NUMA_NODES {
            Some(format!(
                "{} NUMA nodes; hyperplan places on machines of at most {MAX_NUMA_NODES}",
                self.numa_nodes.len()
            ))
        } else if pus > MAX_PUS {
            Some(format!("{pus} PUs; hyperplan places on machines of at most {MAX_PUS}"))
        } else {
            None
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    pub os_index: Option<u32>,
    pub cpus: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NumaNode {
    pub os_index: u32,
    /// Bytes of memory local to this node.
    pub local_memory: u64,
    /// PU OS indexes; empty for a CPU-less (memory-only, e.g. GPU memory) node.
    pub cpus: Vec<u32>,
    /// Distance to every NUMA node, in `numa_nodes` order, where hwloc has a matrix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub distances: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Core {
    /// hwloc's logical index (OS core ids repeat across packages).
    pub index: u32,
    pub package: Option<u32>,
    /// OS index of the NUMA node holding this core, if any.
    pub numa: Option<u32>,
    /// The hardware threads (PU OS indexes).
    pub pus: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheGroup {
    pub index: u32,
    /// Bytes.
    pub size: Option<u64>,
    pub cpus: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    /// `0000:3b:00.0`.
    pub pci_bus_id: String,
    pub vendor_id: u16,
    pub device_id: u16,
    pub vendor: Option<String>,
    pub model: Option<String>,
    /// OS devices hwloc names under it: `cuda0`, `nvml0`, `card0`, `renderD128`, …
    pub os_devices: Vec<String>,
    /// OS indexes of the nearest NUMA node(s).
    pub numa: Vec<u32>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NicKind {
    #[default]
    Ethernet,
    /// IP over InfiniBand (`ib0`).
    Infiniband,
    /// Cisco usNIC (an `OpenFabrics` osdev that is not InfiniBand).
    Usnic,
    /// RDMA over Converged Ethernet.
    Roce,
    /// Intel Omni-Path.
    OmniPath,
    Other,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    /// Interface name: `eth0`, `ib0`, …
    pub name: String,
    pub kind: NicKind,
    pub pci_bus_id: Option<String>,
    pub address: Option<String>,
    pub numa: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InfinibandHca {
    /// `mlx5_0`, `mlx4_0`, `qib0`.
    pub name: String,
    pub node_guid: Option<String>,
    pub node_description: Option<String>,
    pub pci_bus_id: Option<String>,
    /// PCI class as hwloc saw it (`0207`, `0c06`, `0280`), when from the PCI tree.
    pub pci_class: Option<String>,
    pub numa: Vec<u32>,
    pub ports: Vec<IbPort>,
}

impl InfinibandHca {
    /// The HCA's node GUID and its ports' GUIDs as numbers (sysfs writes them
    /// `0011:7500:0077:cfc8`); fabric discovery maps a dump's CAs to hosts by them.
    /// Values that do not read as a GUID are left out.
    pub fn guids(&self) -> Vec<u64> {
        let mut out: Vec<u64> = std::iter::once(&self.node_guid)
            .chain(self.ports.iter().map(|p| &p.port_guid))
            .filter_map(|g| g.as_deref().and_then(parse_sysfs_guid))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// A GUID as sysfs writes it (`0011:7500:0077:cfc8`), or as 16 hex digits with or
/// without `0x`. Zero is no GUID (an unset port).
pub fn parse_sysfs_guid(text: &str) -> Option<u64> {
    let t = text.trim();
    let t = t.strip_prefix("0x").unwrap_or(t);
    let hex: String = t.chars().filter(|c| *c != ':').collect();
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(&hex, 16).ok().filter(|g| *g != 0)
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IbPort {
    pub number: u32,
    /// `ACTIVE`, `DOWN`, `INIT`, … (the text after `4: `).
    pub state: Option<String>,
    /// `LinkUp`, `Polling`, `Disabled`, …
    pub physical_state: Option<String>,
    /// Gb/s, e.g. 40 for `40 Gb/sec (4X QDR)`.
    pub rate_gbps: Option<f64>,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: Option<String>,
    pub lid: Option<u32>,
    pub sm_lid: Option<u32>,
    /// From `gids/0` where the file exists.
    pub port_guid: Option<String>,
    /// The netdev on this port (`ib0`).
    pub netdev: Option<String>,
}

/// Live figures for heartbeats.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveFigures {
    /// 1, 5 and 15 minute load averages.
    pub load: [f64; 3],
    /// Free bytes per NUMA node OS index.
    pub numa_free_memory: BTreeMap<u32, u64>,
    pub uptime_seconds: u64,
}

/// A loaded topology, shared by every node built from the same source (one load, one
/// allocation for ten thousand identical nodes).
#[derive(Clone, Debug)]
pub struct SharedTopology(pub Arc<NodeTopology>);

impl SharedTopology {
    pub fn new(t: NodeTopology) -> Self {
        Self(Arc::new(t))
    }
}

impl PartialEq for SharedTopology {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

/// Topologies hold load figures (f64) but never NaN: equality is reflexive.
impl Eq for SharedTopology {}

impl std::ops::Deref for SharedTopology {
    type Target = NodeTopology;
    fn deref(&self) -> &NodeTopology {
        &self.0
    }
}
