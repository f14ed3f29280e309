//! The hwloc half of the node probe: builds an hwloc topology (this machine, an XML export
//! or a synthetic description) and turns it into the hwloc-derived fields of a
//! [`NodeTopology`]: host facts, packages, NUMA nodes (with their latency matrix), cores,
//! L3 groups, GPUs, NICs and the PCI side of InfiniBand HCAs.
//!
//! I/O objects (PCI devices, OS devices) are always kept. The NUMA locality of an I/O
//! object is the nodeset of its first non-I/O ancestor, as `hwloc-calc os=NAME
//! --intersect numa` reports it. Everything is sorted: packages and NUMA nodes by OS
//! index, cores and L3 caches by hwloc logical index, GPUs by PCI bus id, NICs and HCAs
//! by name.
//!
//! For [`HwlocSource::Local`], hwloc itself reads the tree `HWLOC_FSROOT` points at (a
//! `hwloc-gather-topology` tree). It still takes that tree for this system, though, so
//! when the variable names a tree (not `/`) the probe does what `lstopo --input DIR`
//! does: it keeps hwloc's x86 CPUID backend out (else this host's CPU model lands on the
//! tree's first package) and drops the host's uname facts (hostname, kernel,
//! architecture) that hwloc stamps on the root.
//!
//! Not InfiniBand: usNIC (`usnic_*`), Omni-Path (`hfi1_*`, reported as
//! [`NicKind::OmniPath`] on its netdevs, never as an HCA) and RoCE/iWARP (Ethernet-class
//! PCI function, MAC-addressed netdevs only, or an Ethernet-only RDMA driver name).
//! BMC console VGAs (ASPEED, Matrox) are not GPUs.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use hwlocality::Topology;
use hwlocality::bitmap::Bitmap;
use hwlocality::errors::RawHwlocError;
use hwlocality::object::TopologyObject;
use hwlocality::object::attributes::{ObjectAttributes, PCIDeviceAttributes};
use hwlocality::object::distance::DistancesKind;
use hwlocality::object::types::{OSDeviceType, ObjectType};
use hwlocality::topology::builder::{TopologyBuilder, TypeFilter};
use hyperplan_shared::topology::{CacheGroup, Core, Gpu, InfinibandHca, Nic, NicKind, NodeTopology, NumaNode, Package};

use super::ProbeError;
use super::size::{MAX_PUS, check_synthetic};

/// Where hwloc takes the topology from.
#[derive(Clone, Copy, Debug)]
pub enum HwlocSource<'a> {
    /// This machine (or the tree `HWLOC_FSROOT` points at, if set).
    Local,
    /// An XML export (`lstopo file.xml`, format v2.x).
    XmlFile(&'a Path),
    /// An hwloc synthetic description, e.g. `"pack:2 numa:2 core:8 pu:2"`.
    Synthetic(&'a str),
}

/// Builds the topology from `source` and fills the hwloc-derived fields of a
/// [`NodeTopology`] (labels, live figures and HCA ports are left empty).
///
/// # Errors
///
/// [`ProbeError::Xml`] when the XML file is missing, unreadable or rejected by hwloc,
/// [`ProbeError::Synthetic`] when the description does not parse, [`ProbeError::Hwloc`]
/// when hwloc cannot build the topology of this machine.
///
/// In this process: libhwloc crashes on some malformed XML, so an untrusted file goes
/// through [`super::probe`], which loads it in a child process ([`super::isolate`]).
pub fn probe_hwloc(source: HwlocSource<'_>) -> Result<NodeTopology, ProbeError> {
    let topology = build(source)?;
    if let HwlocSource::XmlFile(path) = source {
        // An export is as big as its file; still, a machine is a machine.
        let pus = topology.objects_with_type(ObjectType::PU).count();
        if pus > MAX_PUS {
            return Err(ProbeError::TooLarge {
                origin: path.display().to_string(),
                message: format!("{pus} PUs; a machine may have at most {MAX_PUS}"),
            });
        }
    }
    let mut node = extract(&topology);
    if matches!(source, HwlocSource::Local) {
        if fsroot_tree() {
            // hwloc takes a gathered tree for this system and stamps the host's uname
            // (HostName, OSRelease, Architecture) on it; the tree itself has none.
            node.hostname.clear();
            node.architecture.clear();
            node.kernel = None;
        } else {
            fill_local_fallbacks(&mut node);
        }
    }
    Ok(node)
}

// ---------------------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------------------

/// Why an hwlocality call gave nothing back. Both carry hwloc's (or hwlocality's) own
/// words, which the [`ProbeError`] built from them shows after the source it names.
#[derive(Debug, thiserror::Error)]
enum HwlocCallError {
    /// hwlocality hit an `unreachable!()` or the like; the panic message.
    #[error("{0}")]
    Panicked(String),
    /// The call returned an error.
    #[error("{0}")]
    Failed(String),
}

/// Runs hwlocality calls that may `unreachable!()` on an errno they did not expect
/// (e.g. `from_xml` on ENOMEM), so that bad input never becomes a panic of ours.
fn guarded<T>(call: impl FnOnce() -> T) -> Result<T, HwlocCallError> {
    catch_unwind(AssertUnwindSafe(call)).map_err(|panic| {
        HwlocCallError::Panicked(
            panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "hwlocality panicked".to_owned()),
        )
    })
}

/// A builder that keeps every PCI device, bridge and OS device.
fn io_builder() -> Result<TopologyBuilder, HwlocCallError> {
    guarded(|| Topology::builder().with_io_type_filter(TypeFilter::KeepAll))
        .and_then(|result| result.map_err(|e| HwlocCallError::Failed(e.to_string())))
}

fn build(source: HwlocSource<'_>) -> Result<Topology, ProbeError> {
    match source {
        HwlocSource::Local => {
            let origin = match std::env::var_os("HWLOC_FSROOT") {
                Some(root) => format!("HWLOC_FSROOT={}", root.to_string_lossy()),
                None => "this machine".to_owned(),
            };
            let err = |message: String| ProbeError::Hwloc {
                origin: origin.clone(),
                message,
            };
            let mut builder = io_builder().map_err(|e| err(e.to_string()))?;
            if fsroot_tree() {
                // hwloc 2.9 still runs its x86 backend on a foreign sysfs tree and stamps
                // this host's CPUID (CPUModel, CPUVendor) onto the tree's first package;
                // lstopo avoids it with HWLOC_COMPONENTS=linux,pci,stop. Blacklist x86.
                builder = match guarded(|| builder.without_component("x86")) {
                    Ok(Ok(builder)) => builder,
                    // No x86 component in this hwloc build: nothing to exclude.
                    _ => io_builder().map_err(|e| err(e.to_string()))?,
                };
            }
            guarded(|| builder.build())
                .map_err(|e| err(e.to_string()))?
                .map_err(|e| err(raw_error(&e)))
        }
        HwlocSource::XmlFile(path) => {
            let err = |message: String| ProbeError::Xml {
                path: path.to_path_buf(),
                message,
            };
            // Read it ourselves: hwloc's own file errors (ENOENT, EACCES) are not all
            // mapped by hwlocality, and a NUL byte would not reach hwloc anyway.
            let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read: {e}")))?;
            if bytes.is_empty() {
                return Err(err("empty file".to_owned()));
            }
            if bytes.contains(&0) {
                return Err(err("not XML text (contains NUL bytes)".to_owned()));
            }
            let text = String::from_utf8_lossy(&bytes);
            // Said by us, before hwloc parses: its two XML backends (its own, and libxml2's
            // from libhwloc-plugins, which Open MPI's packages pull in) fail differently.
            if let Some(why) = precheck_xml(&text) {
                return Err(err(why));
            }
            let builder = io_builder().map_err(|e| err(e.to_string()))?;
            let builder = guarded(|| builder.from_xml(&text))
                .map_err(|e| err(e.to_string()))?
                .map_err(|e| err(format!("malformed hwloc XML ({e})")))?;
            guarded(|| builder.build())
                .map_err(|e| err(e.to_string()))?
                .map_err(|e| err(format!("malformed hwloc XML ({})", raw_error(&e))))
        }
        HwlocSource::Synthetic(description) => {
            let err = |message: String| ProbeError::Synthetic {
                description: description.to_owned(),
                message,
            };
            // Counted first: hwloc would build any size, for minutes and gigabytes.
            check_synthetic(description).map_err(|e| {
                if e.is_too_large() {
                    ProbeError::TooLarge {
                        origin: format!("synthetic topology {description:?}"),
                        message: e.to_string(),
                    }
                } else {
                    err(e.to_string())
                }
            })?;
            let builder = io_builder().map_err(|e| err(e.to_string()))?;
            let builder = guarded(|| builder.from_synthetic(description))
                .map_err(|e| err(e.to_string()))?
                .map_err(|e| err(e.to_string()))?;
            guarded(|| builder.build())
                .map_err(|e| err(e.to_string()))?
                .map_err(|e| err(raw_error(&e)))
        }
    }
}

/// `hwloc_topology_load: Invalid argument`.
fn raw_error(e: &RawHwlocError) -> String {
    match e.errno {
        Some(errno) => format!("{}: {errno}", e.api),
        None => format!("{} failed", e.api),
    }
}

/// What is wrong with an XML text that hwloc would refuse, found without parsing it:
/// not a topology, a format version this hwloc cannot import, or cut short. None: hwloc
/// may parse it.
fn precheck_xml(text: &str) -> Option<String> {
    let Some(start) = text.find("<topology") else {
        return Some("not an hwloc XML topology (no <topology> element)".to_string());
    };
    let tag = text[start..].split('>').next().unwrap_or_default();
    let version = tag
        .split_once("version=")
        .and_then(|(_, rest)| rest.trim_start_matches(['"', '\'']).split(['"', '\'']).next());
    if let Some(version) = version {
        let major = version.split('.').next().and_then(|m| m.parse::<u32>().ok());
        if major.is_none_or(|m| m >= 3) {
            return Some(format!(
                "XML format version {version} is not supported: this hwloc imports versions 1.x and 2.x"
            ));
        }
    }
    if !text.trim_end().ends_with("</topology>") {
        return Some("truncated or malformed: no closing </topology>".to_string());
    }
    None
}

// ---------------------------------------------------------------------------------------
// Extraction
// ---------------------------------------------------------------------------------------

/// hwloc's view of a topology, as the shared `NodeTopology` value.
fn extract(topology: &Topology) -> NodeTopology {
    let mut warnings = Vec::new();
    let root = topology.root_object();
    let packages = packages(topology);
    let numa_nodes = numa_nodes(topology, &mut warnings);
    let cores = cores(topology, &numa_nodes);
    let io = IoView::new(topology);
    NodeTopology {
        hostname: info(root, "HostName").unwrap_or_default(),
        architecture: info(root, "Architecture").unwrap_or_default(),
        cpu_model: cpu_model(topology),
        total_memory: root.total_memory(),
        kernel: info(root, "OSRelease"),
        packages,
        numa_nodes,
        cores,
        l3_groups: l3_groups(topology),
        gpus: io.gpus(),
        nics: io.nics(),
        hcas: io.hcas(),
        warnings,
        ..NodeTopology::default()
    }
}

/// `HWLOC_FSROOT` names a gathered tree, not this machine's `/`.
pub(crate) fn fsroot_tree() -> bool {
    std::env::var_os("HWLOC_FSROOT").is_some_and(|root| !root.is_empty() && root != "/")
}

/// For a live probe of this machine, hostname and architecture may come from the
/// machine when hwloc did not say.
fn fill_local_fallbacks(node: &mut NodeTopology) {
    if node.hostname.is_empty() {
        node.hostname = ["/proc/sys/kernel/hostname", "/etc/hostname"]
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .map(|s| s.trim().to_owned())
            .find(|s| !s.is_empty())
            .unwrap_or_default();
    }
    if node.architecture.is_empty() {
        std::env::consts::ARCH.clone_into(&mut node.architecture);
    }
}

/// A textual info of an object, trimmed; `None` when absent or blank.
fn info(obj: &TopologyObject, key: &str) -> Option<String> {
    obj.info(key)
        .map(cstr)
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn cstr(s: &CStr) -> String {
    s.to_string_lossy().into_owned()
}

/// Set indexes of a finite bitmap, as u32 (an infinite one yields nothing).
fn indexes(bitmap: &Bitmap) -> Vec<u32> {
    if bitmap.weight().is_none() {
        return Vec::new();
    }
    bitmap
        .iter_set()
        .filter_map(|i| u32::try_from(usize::from(i)).ok())
        .collect()
}

/// PU OS indexes of an object's cpuset.
fn cpus(obj: &TopologyObject) -> Vec<u32> {
    obj.cpuset().map(|set| indexes((*set).borrow())).unwrap_or_default()
}

fn os_index(obj: &TopologyObject) -> Option<u32> {
    obj.os_index().and_then(|i| u32::try_from(i).ok())
}

fn logical_index(obj: &TopologyObject) -> u32 {
    u32::try_from(obj.logical_index()).unwrap_or(u32::MAX)
}

fn cpu_model(topology: &Topology) -> Option<String> {
    topology
        .objects_with_type(ObjectType::Package)
        .find_map(|p| info(p, "CPUModel"))
        .or_else(|| info(topology.root_object(), "CPUModel"))
}

fn packages(topology: &Topology) -> Vec<Package> {
    let mut packages: Vec<(u32, Package)> = topology
        .objects_with_type(ObjectType::Package)
        .map(|p| {
            (
                logical_index(p),
                Package {
                    os_index: os_index(p),
                    cpus: cpus(p),
                },
            )
        })
        .collect();
    packages.sort_by_key(|(logical, p)| (p.os_index.is_none(), p.os_index, *logical));
    packages.into_iter().map(|(_, p)| p).collect()
}

fn numa_nodes(topology: &Topology, warnings: &mut Vec<String>) -> Vec<NumaNode> {
    let mut nodes: Vec<NumaNode> = topology
        .objects_with_type(ObjectType::NUMANode)
        .map(|n| {
            let local_memory = match n.attributes() {
                Some(ObjectAttributes::NUMANode(attr)) => attr.local_memory().map_or(0, |m| m.get()),
                _ => 0,
            };
            let os_index = os_index(n).unwrap_or_else(|| {
                warnings.push(format!(
                    "NUMA node L#{} has no OS index; using its logical index",
                    n.logical_index()
                ));
                logical_index(n)
            });
            NumaNode {
                os_index,
                local_memory,
                cpus: cpus(n),
                distances: Vec::new(),
            }
        })
        .collect();
    nodes.sort_by_key(|n| n.os_index);
    fill_distances(topology, &mut nodes, warnings);
    nodes
}

/// Rows of hwloc's NUMA latency matrix (`NUMALatency`, or else any latency matrix
/// between all NUMA nodes), in `nodes` order.
fn fill_distances(topology: &Topology, nodes: &mut [NumaNode], warnings: &mut Vec<String>) {
    let Ok(matrices) = topology.distances_with_type(Some(DistancesKind::MEANS_LATENCY), ObjectType::NUMANode) else {
        return;
    };
    let covers_all = |m: &hwlocality::object::distance::Distances<'_>| m.num_objects() == nodes.len();
    let is_named =
        |m: &hwlocality::object::distance::Distances<'_>| m.name().is_some_and(|n| n.to_bytes() == b"NUMALatency");
    let Some(matrix) = matrices
        .iter()
        .find(|m| is_named(m) && covers_all(m))
        .or_else(|| matrices.iter().find(|m| covers_all(m)))
    else {
        return;
    };
    // Matrix position of every node, by OS index.
    let positions: BTreeMap<u32, usize> = matrix
        .objects()
        .enumerate()
        .filter_map(|(pos, obj)| Some((obj.and_then(os_index)?, pos)))
        .collect();
    let n = matrix.num_objects();
    let values = matrix.distances();
    let mut rows = Vec::with_capacity(nodes.len());
    for from in nodes.iter() {
        let mut row = Vec::with_capacity(nodes.len());
        for to in nodes.iter() {
            let value = positions
                .get(&from.os_index)
                .zip(positions.get(&to.os_index))
                .and_then(|(&i, &j)| values.get(i * n + j))
                .and_then(|&v| u32::try_from(v).ok());
            match value {
                Some(v) => row.push(v),
                None => {
                    warnings.push(format!(
                        "NUMA latency matrix has no usable value from node {} to node {}; distances left empty",
                        from.os_index, to.os_index
                    ));
                    return;
                }
            }
        }
        rows.push(row);
    }
    for (node, row) in nodes.iter_mut().zip(rows) {
        node.distances = row;
    }
}

fn cores(topology: &Topology, numa_nodes: &[NumaNode]) -> Vec<Core> {
    let mut cores: Vec<Core> = topology
        .objects_with_type(ObjectType::Core)
        .map(|c| {
            let pus = cpus(c);
            Core {
                index: logical_index(c),
                package: c.first_ancestor_with_type(ObjectType::Package).and_then(os_index),
                numa: numa_of_cpus(&pus, numa_nodes),
                pus,
            }
        })
        .collect();
    cores.sort_by_key(|c| c.index);
    cores
}

/// The NUMA node whose cpuset contains all of `pus`: the most local one (smallest
/// cpuset), then the lowest OS index (DRAM before HBM/NVDIMM nodes sharing the cpuset).
fn numa_of_cpus(pus: &[u32], numa_nodes: &[NumaNode]) -> Option<u32> {
    if pus.is_empty() {
        return None;
    }
    numa_nodes
        .iter()
        .filter(|n| pus.iter().all(|pu| n.cpus.binary_search(pu).is_ok()))
        .min_by_key(|n| (n.cpus.len(), n.os_index))
        .map(|n| n.os_index)
}

fn l3_groups(topology: &Topology) -> Vec<CacheGroup> {
    let mut groups: Vec<CacheGroup> = topology
        .objects_with_type(ObjectType::L3Cache)
        .map(|c| CacheGroup {
            index: logical_index(c),
            size: match c.attributes() {
                Some(ObjectAttributes::Cache(attr)) => attr.size().map(|s| s.get()),
                _ => None,
            },
            cpus: cpus(c),
        })
        .collect();
    groups.sort_by_key(|g| g.index);
    groups
}

// ---------------------------------------------------------------------------------------
// I/O: GPUs, NICs, HCAs
// ---------------------------------------------------------------------------------------

/// PCI class of a display controller (base class 0x03: VGA, XGA, 3D, other).
const CLASS_DISPLAY: u16 = 0x03;
/// PCI class "other bridge", which NVSwitches report: never a GPU.
const CLASS_OTHER_BRIDGE: u16 = 0x0680;
/// PCI class "Ethernet controller": an RDMA device on it is RoCE/iWARP/usNIC, not IB.
const CLASS_ETHERNET: u16 = 0x0200;
/// Vendors of the BMC / on-board management VGA (ASPEED, Matrox): a display adapter
/// for the console, never a schedulable GPU.
const BMC_VGA_VENDORS: [u16; 2] = [0x1a03, 0x102b];
/// OS device names that make their PCI device a GPU, whatever its class.
const GPU_OSDEV_PREFIXES: [&str; 7] = ["cuda", "nvml", "opencl", "rsmi", "card", "renderD", "ze"];
/// OpenFabrics devices of Ethernet-only RDMA drivers (RoCE, iWARP, soft RDMA, EFA).
const ETHERNET_RDMA_PREFIXES: [&str; 14] = [
    "rxe",
    "siw",
    "i40iw",
    "irdma",
    "bnxt_re",
    "qedr",
    "cxgb",
    "iwp",
    "ocrdma",
    "hns",
    "erdma",
    "efa",
    "mana",
    "vmw_pvrdma",
];

/// What an `OpenFabrics` OS device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fabric {
    Infiniband,
    /// Cisco usNIC (`usnic_*`).
    Usnic,
    /// Intel Omni-Path (`hfi1_*`): verbs-capable, but not InfiniBand.
    OmniPath,
    /// RoCE / iWARP: RDMA over an Ethernet port.
    EthernetRdma,
}

/// An OS device with what we need of it.
struct OsDev<'t> {
    obj: &'t TopologyObject,
    name: String,
    ty: Option<OSDeviceType>,
    /// Index into `IoView::pci` of its PCI parent.
    pci: Option<usize>,
}

/// A PCI device with what we need of it.
struct PciDev<'t> {
    obj: &'t TopologyObject,
    attrs: PCIDeviceAttributes,
    bus_id: String,
    /// Indexes into `IoView::osdevs`, by name.
    osdevs: Vec<usize>,
}

/// PCI devices and OS devices of a topology, cross-referenced.
struct IoView<'t> {
    pci: Vec<PciDev<'t>>,
    osdevs: Vec<OsDev<'t>>,
}

impl<'t> IoView<'t> {
    fn new(topology: &'t Topology) -> Self {
        let mut pci: Vec<PciDev<'t>> = topology
            .pci_devices()
            .filter_map(|obj| match obj.attributes() {
                Some(ObjectAttributes::PCIDevice(attrs)) => Some(PciDev {
                    obj,
                    attrs: *attrs,
                    bus_id: bus_id(attrs),
                    osdevs: Vec::new(),
                }),
                _ => None,
            })
            .collect();
        pci.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
        let mut osdevs: Vec<OsDev<'t>> = topology
            .os_devices()
            .map(|obj| {
                let ty = match obj.attributes() {
                    Some(ObjectAttributes::OSDevice(attrs)) => Some(attrs.device_type()),
                    _ => None,
                };
                let parent = obj.parent();
                let pci = parent.and_then(|parent| pci.iter().position(|p| std::ptr::eq(p.obj, parent)));
                OsDev {
                    obj,
                    name: obj.name().map(cstr).unwrap_or_default(),
                    ty,
                    pci,
                }
            })
            .collect();
        osdevs.sort_by(|a, b| a.name.cmp(&b.name));
        for (i, dev) in osdevs.iter().enumerate() {
            if let Some(p) = dev.pci {
                pci[p].osdevs.push(i);
            }
        }
        Self { pci, osdevs }
    }

    fn osdevs_of(&self, pci: &PciDev<'_>) -> impl Iterator<Item = &OsDev<'t>> {
        pci.osdevs.iter().filter_map(|&i| self.osdevs.get(i))
    }

    fn gpus(&self) -> Vec<Gpu> {
        self.pci
            .iter()
            .filter(|p| self.is_gpu(p))
            .map(|p| {
                let gpu_osdevs: Vec<&OsDev<'_>> = self.osdevs_of(p).filter(|d| is_gpu_osdev(d)).collect();
                Gpu {
                    pci_bus_id: p.bus_id.clone(),
                    vendor_id: p.attrs.vendor_id(),
                    device_id: p.attrs.device_id(),
                    vendor: info(p.obj, "PCIVendor")
                        .or_else(|| gpu_osdevs.iter().find_map(|d| info(d.obj, "GPUVendor"))),
                    model: gpu_osdevs
                        .iter()
                        .find_map(|d| info(d.obj, "GPUModel"))
                        .or_else(|| info(p.obj, "PCIDevice")),
                    os_devices: self.osdevs_of(p).map(|d| d.name.clone()).collect(),
                    numa: io_numa(p.obj),
                }
            })
            .collect()
    }

    /// Display/3D class or a GPU/co-processor OS device; not an NVSwitch, not the BMC VGA.
    fn is_gpu(&self, p: &PciDev<'_>) -> bool {
        let class = p.attrs.class_id();
        if class == CLASS_OTHER_BRIDGE {
            return false;
        }
        let has_gpu_osdev = self.osdevs_of(p).any(is_gpu_osdev);
        let display = class >> 8 == CLASS_DISPLAY;
        let bmc_vga = BMC_VGA_VENDORS.contains(&p.attrs.vendor_id())
            && !self.osdevs_of(p).any(|d| d.ty == Some(OSDeviceType::CoProcessor));
        (display || has_gpu_osdev) && !bmc_vga
    }

    fn fabrics_on(&self, pci: Option<usize>) -> Vec<Fabric> {
        pci.and_then(|i| self.pci.get(i))
            .map(|p| {
                self.osdevs_of(p)
                    .filter(|d| d.ty == Some(OSDeviceType::OpenFabrics))
                    .map(|d| self.fabric(d))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn nics(&self) -> Vec<Nic> {
        self.osdevs
            .iter()
            .filter(|d| d.ty == Some(OSDeviceType::Network))
            .map(|d| {
                let address = info(d.obj, "Address");
                let fabrics = self.fabrics_on(d.pci);
                Nic {
                    name: d.name.clone(),
                    kind: nic_kind(&d.name, address.as_deref(), &fabrics),
                    pci_bus_id: d.pci.and_then(|i| self.pci.get(i)).map(|p| p.bus_id.clone()),
                    address,
                    numa: io_numa(d.obj),
                }
            })
            .collect()
    }

    fn hcas(&self) -> Vec<InfinibandHca> {
        self.osdevs
            .iter()
            .filter(|d| d.ty == Some(OSDeviceType::OpenFabrics) && self.fabric(d) == Fabric::Infiniband)
            .map(|d| {
                let pci = d.pci.and_then(|i| self.pci.get(i));
                InfinibandHca {
                    name: d.name.clone(),
                    node_guid: info(d.obj, "NodeGUID"),
                    node_description: None,
                    pci_bus_id: pci.map(|p| p.bus_id.clone()),
                    pci_class: pci.map(|p| format!("{:04x}", p.attrs.class_id())),
                    numa: io_numa(d.obj),
                    ports: Vec::new(),
                }
            })
            .collect()
    }

    /// Classifies an `OpenFabrics` OS device: "has OpenFabrics" is not "has InfiniBand".
    fn fabric(&self, dev: &OsDev<'_>) -> Fabric {
        let name = dev.name.as_str();
        if name.starts_with("usnic") {
            return Fabric::Usnic;
        }
        // Omni-Path is verbs-capable but not InfiniBand; the planner must not mix it in.
        if name.starts_with("hfi1") || name.starts_with("opa") {
            return Fabric::OmniPath;
        }
        if ETHERNET_RDMA_PREFIXES.iter().any(|p| name.starts_with(p)) {
            return Fabric::EthernetRdma;
        }
        // hwloc does not export the link layer today; honour it if a future one does.
        let ethernet_link = dev.obj.infos().iter().any(|i| {
            i.name().to_bytes().ends_with(b"LinkLayer") && i.value().to_bytes().eq_ignore_ascii_case(b"Ethernet")
        });
        if ethernet_link {
            return Fabric::EthernetRdma;
        }
        let Some(pci) = dev.pci.and_then(|i| self.pci.get(i)) else {
            return Fabric::Infiniband;
        };
        let class = pci.attrs.class_id();
        if class == CLASS_ETHERNET {
            return Fabric::EthernetRdma;
        }
        // A VPI card in Ethernet mode keeps its class: only MAC-addressed netdevs beside it.
        let addresses: Vec<Option<String>> = self
            .osdevs_of(pci)
            .filter(|d| d.ty == Some(OSDeviceType::Network))
            .map(|d| info(d.obj, "Address"))
            .collect();
        let has_ipoib = addresses.iter().flatten().any(|a| is_ipoib_address(a));
        let has_mac = addresses.iter().flatten().any(|a| is_mac_address(a));
        if has_mac && !has_ipoib {
            return Fabric::EthernetRdma;
        }
        // IB HCAs show up as 0207, 0c06 (QLogic) or 0280 (ConnectX-3 VPI); another class
        // with no Ethernet evidence is still taken for IB.
        Fabric::Infiniband
    }
}

fn is_gpu_osdev(dev: &OsDev<'_>) -> bool {
    matches!(dev.ty, Some(OSDeviceType::GPU | OSDeviceType::CoProcessor))
        || GPU_OSDEV_PREFIXES.iter().any(|p| dev.name.starts_with(p))
}

/// The kind of a network interface, from its name, hardware address and the
/// `OpenFabrics` devices on the same PCI function.
fn nic_kind(name: &str, address: Option<&str>, fabrics: &[Fabric]) -> NicKind {
    let has = |f: Fabric| fabrics.contains(&f);
    let ipoib = name.starts_with("ib") || address.is_some_and(is_ipoib_address);
    if has(Fabric::OmniPath) {
        // IPoIB over Omni-Path is still Omni-Path.
        return NicKind::OmniPath;
    }
    if ipoib {
        return NicKind::Infiniband;
    }
    if has(Fabric::Usnic) {
        return NicKind::Usnic;
    }
    if has(Fabric::Infiniband) {
        // The Ethernet port of a VPI card is RDMA over Ethernet; else trust the HCA.
        return if address.is_some_and(is_mac_address) {
            NicKind::Roce
        } else {
            NicKind::Infiniband
        };
    }
    if has(Fabric::EthernetRdma) {
        return NicKind::Roce;
    }
    NicKind::Ethernet
}

/// `xx:xx:…` with `n` bytes.
fn is_hex_bytes(address: &str, n: usize) -> bool {
    let parts: Vec<&str> = address.split(':').collect();
    parts.len() == n
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// A 20-byte IPoIB hardware address.
fn is_ipoib_address(address: &str) -> bool {
    is_hex_bytes(address, 20)
}

/// A 6-byte Ethernet MAC address.
fn is_mac_address(address: &str) -> bool {
    is_hex_bytes(address, 6)
}

/// `dddd:bb:dd.f`, as hwloc and sysfs write it.
fn bus_id(attrs: &PCIDeviceAttributes) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        attrs.domain(),
        attrs.bus_id(),
        attrs.bus_device(),
        attrs.function()
    )
}

/// NUMA locality of an I/O object: the NUMA nodes of its first non-I/O ancestor
/// (its nodeset, or else the NUMA nodes whose cpuset lies in its cpuset), sorted.
fn io_numa(obj: &TopologyObject) -> Vec<u32> {
    let Some(ancestor) = obj.first_non_io_ancestor() else {
        return Vec::new();
    };
    let mut nodes = ancestor
        .nodeset()
        .map(|set| indexes((*set).borrow()))
        .unwrap_or_default();
    if nodes.is_empty() {
        // Walk the ancestor's memory children and those of its normal descendants.
        let mut stack = vec![ancestor];
        while let Some(o) = stack.pop() {
            for m in o.memory_children() {
                if m.object_type() == ObjectType::NUMANode {
                    nodes.extend(os_index(m));
                }
                stack.push(m);
            }
            stack.extend(o.normal_children());
        }
    }
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}
