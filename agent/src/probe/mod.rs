//! The probe: hwloc for the CPU tree and PCI I/O, sysfs for InfiniBand ports and NUMA
//! free memory, procfs for live figures — merged into one
//! [`NodeTopology`](hyperplan_shared::topology::NodeTopology).
//!
//! Sources: the machine it runs on, an `lstopo` XML export, an hwloc synthetic
//! description, or a saved sysfs tree (`--sysfs-root`). A saved `probe --format json`
//! is read back with [`load_probe_json`].

mod error;
pub mod hwloc;
pub mod infiniband;
pub mod isolate;
pub mod live;
pub mod nvlink;
mod size;
pub(crate) mod sysfs;
mod text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hyperplan_shared::topology::{Nic, NicKind, NodeTopology};

pub use error::ProbeError;
pub use size::MAX_PUS;
pub use text::render_text;

/// NVIDIA's PCI vendor id: GPUs that may have NVLink fabric information.
const NVIDIA_VENDOR_ID: u16 = 0x10de;

/// Where the hardware description comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The machine the probe runs on (or the tree `HWLOC_FSROOT` points at).
    Local,
    HwlocXml(PathBuf),
    Synthetic(String),
}

#[derive(Clone, Debug)]
pub struct ProbeOptions {
    pub source: Source,
    /// Root of the sysfs tree for InfiniBand and NUMA reads (`/sys` on a live machine).
    /// `None`: `/sys` for a local probe, nothing for XML and synthetic sources (they
    /// describe another machine).
    pub sysfs_root: Option<PathBuf>,
    /// Root of procfs for live figures (`/proc`).
    pub procfs_root: Option<PathBuf>,
    pub labels: BTreeMap<String, String>,
    /// A saved `nvidia-smi` fabric report (`--query-gpu` CSV or `-q`) to use instead of
    /// asking the GPUs: the NVLink fabric of the machine an XML export describes.
    pub gpu_fabric: Option<PathBuf>,
}

impl ProbeOptions {
    pub fn local() -> Self {
        Self {
            source: Source::Local,
            sysfs_root: None,
            procfs_root: None,
            labels: BTreeMap::new(),
            gpu_fabric: None,
        }
    }
}

/// A saved `hwloc-gather-topology` dump has `sys/` and `proc/` under one root; a plain
/// sysfs tree has `class/` or `devices/` at its top. Returns the sysfs directory.
pub fn sysfs_dir_of(root: &Path) -> PathBuf {
    if root.join("sys").is_dir() {
        root.join("sys")
    } else {
        root.to_path_buf()
    }
}

/// Probes as `opts` says. An XML export is loaded in a child process where the binary
/// serves one ([`isolate`]): libhwloc crashes on some malformed files.
pub fn probe(opts: &ProbeOptions) -> Result<NodeTopology, ProbeError> {
    let _span = tracing::info_span!("probe").entered();
    let mut topo = match &opts.source {
        Source::Local => hwloc::probe_hwloc(hwloc::HwlocSource::Local)?,
        Source::HwlocXml(p) => isolate::load_xml(p)?,
        Source::Synthetic(s) => hwloc::probe_hwloc(hwloc::HwlocSource::Synthetic(s))?,
    };
    // NVLink fabric: a saved report when given; else this machine's GPUs only (a
    // description has none), and only when hwloc saw an NVIDIA GPU, so a CPU node never
    // runs nvidia-smi.
    if let Some(file) = &opts.gpu_fabric {
        topo.gpu_fabric = nvlink::read_file(file)?;
    } else if opts.source == Source::Local
        && opts.sysfs_root.is_none()
        && !hwloc::fsroot_tree()
        && topo.gpus.iter().any(|g| g.vendor_id == NVIDIA_VENDOR_ID)
    {
        let (gpus, warnings) = nvlink::read_local();
        nvlink::log_change(&gpus, &warnings);
        topo.gpu_fabric = gpus;
        topo.warnings.extend(warnings);
    }
    let sysfs = match (&opts.sysfs_root, &opts.source) {
        (Some(root), _) => Some(sysfs_dir_of(root)),
        (None, Source::Local) => Some(PathBuf::from("/sys")),
        (None, _) => None,
    };
    if let Some(sys) = &sysfs {
        let mut warnings = Vec::new();
        let devices = infiniband::read_infiniband(sys, &mut warnings)?;
        merge_rdma(&mut topo, devices);
        // Live figures only describe a running machine: this one, or an explicit procfs.
        let procfs = match (&opts.procfs_root, &opts.sysfs_root, &opts.source) {
            (Some(p), _, _) => Some(p.clone()),
            (None, None, Source::Local) => Some(PathBuf::from("/proc")),
            _ => None,
        };
        if let Some(proc_root) = procfs {
            match live::live_figures(sys, &proc_root, &mut warnings) {
                Ok(l) => topo.live = Some(l),
                Err(e) => warnings.push(format!("live figures: {e}")),
            }
        }
        topo.warnings.extend(warnings);
    }
    topo.labels.extend(opts.labels.clone());
    Ok(topo)
}

/// Merges the sysfs view of RDMA devices into the hwloc one: InfiniBand HCAs keep (or
/// gain) their port details, with NUMA locality and PCI class from hwloc; RoCE, usNIC
/// and Omni-Path devices are not InfiniBand and are listed as NICs of that kind.
fn merge_rdma(topo: &mut NodeTopology, devices: Vec<hyperplan_shared::topology::InfinibandHca>) {
    for mut dev in devices {
        let hw = topo
            .hcas
            .iter()
            .position(|h| h.name == dev.name || (h.pci_bus_id.is_some() && h.pci_bus_id == dev.pci_bus_id));
        if infiniband::is_infiniband(&dev) {
            match hw {
                Some(i) => {
                    let h = &mut topo.hcas[i];
                    if dev.numa.is_empty() {
                        dev.numa = h.numa.clone();
                    }
                    dev.pci_class = dev.pci_class.or_else(|| h.pci_class.clone());
                    dev.pci_bus_id = dev.pci_bus_id.or_else(|| h.pci_bus_id.clone());
                    *h = dev;
                }
                None => topo.hcas.push(dev),
            }
        } else {
            let kind = rdma_kind(&dev);
            let numa = hw.map(|i| topo.hcas.remove(i).numa).unwrap_or(dev.numa);
            if !topo.nics.iter().any(|n| n.name == dev.name) {
                topo.nics.push(Nic {
                    name: dev.name,
                    kind,
                    pci_bus_id: dev.pci_bus_id,
                    address: None,
                    numa,
                });
            }
        }
    }
    topo.hcas.sort_by(|a, b| a.name.cmp(&b.name));
    topo.nics.sort_by(|a, b| a.name.cmp(&b.name));
}

fn rdma_kind(dev: &hyperplan_shared::topology::InfinibandHca) -> NicKind {
    match infiniband::classify(dev) {
        infiniband::RdmaKind::Usnic => NicKind::Usnic,
        infiniband::RdmaKind::OmniPath => NicKind::OmniPath,
        infiniband::RdmaKind::Roce => NicKind::Roce,
        infiniband::RdmaKind::Infiniband => NicKind::Infiniband,
        infiniband::RdmaKind::Iwarp | infiniband::RdmaKind::Other => NicKind::Other,
    }
}

/// Reads a saved `hyperplan-agent probe --format json`.
pub fn load_probe_json(path: &Path) -> Result<NodeTopology, ProbeError> {
    let text = std::fs::read_to_string(path).map_err(|source| ProbeError::Read {
        path: path.into(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| ProbeError::Parse {
        path: path.into(),
        message: format!("line {} column {}: {e}", e.line(), e.column()),
    })
}
