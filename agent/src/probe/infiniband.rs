//! RDMA devices from `<sysfs_root>/class/infiniband`: GUIDs, PCI address, NUMA node, and
//! per port state, rate, link layer, LIDs, port GUID and the netdev on it.
//!
//! hwloc sees HCAs on the PCI tree but not their ports; this fills that in. Everything in
//! `class/infiniband` is an RDMA device, not necessarily InfiniBand: [`classify`] tells
//! InfiniBand from RoCE, Omni-Path, usNIC and iWARP so the caller can list each as it is.
//!
//! Reads are lenient per value (one bad file is a warning and a `None`) and per device (a
//! device that cannot be read is a warning naming its path, and the others are still
//! reported): a half-read HCA is still useful to a planner, and one odd entry (a
//! coprocessor's SCIF verbs device, a hot-unplugged HCA) must not hide the rest. Only a
//! `class/infiniband` that exists but cannot be listed is an error.

use std::fs;
use std::path::{Path, PathBuf};

use hyperplan_shared::topology::{IbPort, InfinibandHca};

use super::ProbeError;
use super::sysfs::{check_root, follow, link_target, list_dir, parse_decimal, read_attr_raw, read_parsed};

/// What kind of RDMA device a `class/infiniband` entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaKind {
    Infiniband,
    /// RDMA over Converged Ethernet: a port with link layer `Ethernet`.
    Roce,
    /// Intel Omni-Path (`hfi1_*`): reports link layer `InfiniBand` but is another fabric.
    OmniPath,
    /// Cisco usNIC (`usnic_*`).
    Usnic,
    /// iWARP (`iw*`, `i40iw*`, `cxgb*`, `siw*`): RDMA over TCP.
    Iwarp,
    /// Anything else (EFA, unknown link layer, …).
    Other,
}

/// Driver name prefixes of real InfiniBand HCAs, for ports that do not say their link
/// layer (old kernels, trimmed saved trees).
pub(crate) const IB_PREFIXES: &[&str] = &["mlx4_", "mlx5_", "mthca", "qib", "ipath", "ehca", "ib_"];

/// Reads `<sysfs_root>/class/infiniband/*` (sysfs_root is normally `/sys`), devices sorted
/// by name, ports by number.
///
/// A missing `class/infiniband` directory = no RDMA devices = `Ok(empty)`. One bad value:
/// a warning pushed to `warnings` (naming the file and the value) and that field `None`.
/// A device that cannot be read (dangling entry, unlistable directory): a warning naming
/// the path, and the device is left out. A root or `class/infiniband` that cannot be
/// read is [`ProbeError::Read`] naming it.
pub fn read_infiniband(sysfs_root: &Path, warnings: &mut Vec<String>) -> Result<Vec<InfinibandHca>, ProbeError> {
    check_root(sysfs_root)?;
    let class = sysfs_root.join("class/infiniband");
    let Some(names) = list_dir(&class)? else {
        return Ok(Vec::new());
    };
    let mut hcas = Vec::with_capacity(names.len());
    for name in names {
        match read_device(sysfs_root, &class, name, warnings) {
            Ok(hca) => hcas.push(hca),
            Err(e) => warnings.push(format!("{e}; this RDMA device is left out")),
        }
    }
    Ok(hcas)
}

/// What kind of device this is, from its driver name and port link layers.
pub fn classify(hca: &InfinibandHca) -> RdmaKind {
    let name = hca.name.as_str();
    // Names first: Omni-Path and iWARP devices report link layer InfiniBand.
    if name.starts_with("hfi1") {
        return RdmaKind::OmniPath;
    }
    if name.starts_with("usnic") {
        return RdmaKind::Usnic;
    }
    if ["iw", "i40iw", "cxgb", "siw"].iter().any(|p| name.starts_with(p)) {
        return RdmaKind::Iwarp;
    }
    let layer = |l: &str| {
        hca.ports
            .iter()
            .any(|p| p.link_layer.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(l)))
    };
    if layer("InfiniBand") {
        RdmaKind::Infiniband
    } else if layer("Ethernet") {
        RdmaKind::Roce
    } else if hca.ports.iter().all(|p| p.link_layer.is_none()) && IB_PREFIXES.iter().any(|p| name.starts_with(p)) {
        RdmaKind::Infiniband
    } else {
        RdmaKind::Other
    }
}

/// True for an InfiniBand HCA: a port with link layer InfiniBand, or an IB driver name
/// (mlx, qib, mthca, …) with no link layer known; false for RoCE, usNIC, Omni-Path and
/// iWARP devices, which `class/infiniband` lists too. [`classify`] says which.
pub fn is_infiniband(hca: &InfinibandHca) -> bool {
    classify(hca) == RdmaKind::Infiniband
}

fn read_device(
    sysfs_root: &Path,
    class: &Path,
    name: String,
    warnings: &mut Vec<String>,
) -> Result<InfinibandHca, ProbeError> {
    let entry = class.join(&name);
    let dir = follow(&entry);
    // Listing proves the device is there; a dangling link must not pass as a bare device.
    if list_dir(&dir)?.is_none() {
        return Err(ProbeError::Read {
            path: entry,
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("points at {}, which is missing", dir.display()),
            ),
        });
    }
    let parent = parent_device(&dir, warnings);
    let pci_bus_id = pci_address(&dir, parent.as_deref(), warnings);
    let numa = parent
        .as_deref()
        .and_then(|parent| {
            read_parsed(
                &parent.join("numa_node"),
                "a NUMA node (integer, -1 for none)",
                warnings,
                |s| s.parse::<i64>().ok().filter(|n| *n >= -1),
            )
        })
        .and_then(|n| u32::try_from(n).ok())
        .into_iter()
        .collect();
    let node_guid = read_parsed(
        &dir.join("node_guid"),
        "a GUID (like 0011:7500:0077:cfc8)",
        warnings,
        |s| is_guid(s).then(|| s.to_ascii_lowercase()),
    );
    let node_description = match read_attr_raw(&dir.join("node_desc")) {
        Ok(text) => text.filter(|t| !t.is_empty()),
        Err(e) => {
            warnings.push(format!("{}: {e}", dir.join("node_desc").display()));
            None
        }
    };

    let mut ports = Vec::new();
    let ports_dir = dir.join("ports");
    match list_dir(&ports_dir)? {
        Some(entries) => {
            for entry in entries {
                match parse_decimal(&entry) {
                    Some(number) => ports.push(read_port(&ports_dir.join(&entry), number, warnings)),
                    None => warnings.push(format!("{}: not a port number", ports_dir.join(&entry).display())),
                }
            }
        }
        None => warnings.push(format!("{}: missing; {name} has no ports listed", ports_dir.display())),
    }
    ports.sort_by_key(|p| p.number);
    assign_netdevs(
        sysfs_root,
        &dir,
        parent.as_deref(),
        pci_bus_id.as_deref(),
        &mut ports,
        warnings,
    )?;

    Ok(InfinibandHca {
        name,
        node_guid,
        node_description,
        pci_bus_id,
        pci_class: None,
        numa,
        ports,
    })
}

/// The directory the device's `device` link stands for (its PCI function), or `None`
/// when there is none (a virtual device) or it points at nothing — the latter with a
/// warning naming the link, as a SCIF verbs device or a half-unplugged HCA has.
fn parent_device(dir: &Path, warnings: &mut Vec<String>) -> Option<PathBuf> {
    let link = dir.join("device");
    if fs::symlink_metadata(&link).is_err() {
        return None;
    }
    let parent = follow(&link);
    if parent.is_dir() {
        return Some(parent);
    }
    warnings.push(format!(
        "{}: points at {}, which is missing or not a directory: no NUMA node or netdev from it",
        link.display(),
        parent.display()
    ));
    None
}

fn read_port(dir: &Path, number: u32, warnings: &mut Vec<String>) -> IbPort {
    let state = read_parsed(
        &dir.join("state"),
        "a port state (like \"4: ACTIVE\")",
        warnings,
        numbered_text,
    );
    let physical_state = read_parsed(
        &dir.join("phys_state"),
        "a physical state (like \"5: LinkUp\")",
        warnings,
        numbered_text,
    );
    let rate_gbps = read_parsed(
        &dir.join("rate"),
        "a rate (like \"40 Gb/sec (4X QDR)\")",
        warnings,
        parse_rate,
    );
    let link_layer = read_parsed(
        &dir.join("link_layer"),
        "a link layer (InfiniBand, Ethernet)",
        warnings,
        |s| s.chars().all(|c| c.is_ascii_alphanumeric()).then(|| s.to_owned()),
    );
    let lid = read_parsed(&dir.join("lid"), "a LID (hex like 0x12a)", warnings, parse_hex);
    let sm_lid = read_parsed(&dir.join("sm_lid"), "an SM LID (hex like 0x1)", warnings, parse_hex);
    let port_guid = read_parsed(
        &dir.join("gids/0"),
        "a GID (like fe80:0000:0000:0000:0011:7500:0077:cfc8)",
        warnings,
        guid_of_gid,
    )
    .flatten();
    IbPort {
        number,
        state,
        physical_state,
        rate_gbps,
        link_layer,
        lid,
        sm_lid,
        port_guid,
        netdev: None,
    }
}

/// `4: ACTIVE` → `ACTIVE` (the kernel writes `"%d: %s"`).
pub(crate) fn numbered_text(s: &str) -> Option<String> {
    let (number, text) = s.split_once(':')?;
    let text = text.trim();
    (parse_decimal(number.trim()).is_some() && !text.is_empty()).then(|| text.to_owned())
}

/// `40 Gb/sec (4X QDR)` → 40, `2.5 Gb/sec (1X SDR)` → 2.5.
pub(crate) fn parse_rate(s: &str) -> Option<f64> {
    let mut words = s.split_whitespace();
    let number = words.next()?;
    if words.next()? != "Gb/sec" {
        return None;
    }
    // f64::from_str takes "inf" and "NaN" too; a rate is digits and at most one point.
    if !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    number.parse::<f64>().ok().filter(|r| r.is_finite())
}

/// `0x12a` → 298.
fn parse_hex(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// Four groups of four hex digits: `0011:7500:0077:cfc8`.
fn is_guid(s: &str) -> bool {
    hex_groups(s).is_some_and(|g| g.len() == 4)
}

fn hex_groups(s: &str) -> Option<Vec<&str>> {
    let groups: Vec<&str> = s.split(':').collect();
    groups
        .iter()
        .all(|g| g.len() == 4 && g.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(groups)
}

/// The port GUID is the low 64 bits of GID 0: `fe80:…:0011:7500:0077:cfc8` →
/// `0011:7500:0077:cfc8`. `Some(None)`: a well-formed but unset (all-zero) GID.
fn guid_of_gid(s: &str) -> Option<Option<String>> {
    let groups = hex_groups(s).filter(|g| g.len() == 8)?;
    let guid = groups[4..].join(":").to_ascii_lowercase();
    Some((guid != "0000:0000:0000:0000").then_some(guid))
}

/// `0000:05:00.0`-like: domain, bus, device.function, all hex.
fn is_pci_address(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    let [domain, bus, devfn] = parts.as_slice() else {
        return false;
    };
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    [*domain, *bus, dev, func]
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The PCI address of a device directory: the last component of its `device` link, or
/// where `device` is a plain directory (trimmed fixtures), `device/uevent` PCI_SLOT_NAME.
fn pci_address(dir: &Path, parent: Option<&Path>, warnings: &mut Vec<String>) -> Option<String> {
    if let Some(target) = link_target(&dir.join("device")) {
        let last = target.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        // A virtual parent (soft RoCE, a netdev) is not an error, just not PCI.
        return is_pci_address(last).then(|| last.to_ascii_lowercase());
    }
    let uevent = parent?.join("uevent");
    match read_attr_raw(&uevent) {
        Ok(Some(text)) => {
            let slot = text.lines().find_map(|l| l.strip_prefix("PCI_SLOT_NAME="))?.trim();
            if is_pci_address(slot) {
                Some(slot.to_ascii_lowercase())
            } else {
                warnings.push(format!(
                    "{}: PCI_SLOT_NAME {slot:?} is not a PCI address",
                    uevent.display()
                ));
                None
            }
        }
        Ok(None) => None,
        Err(e) => {
            warnings.push(format!("{}: {e}", uevent.display()));
            None
        }
    }
}

/// A network interface of the same device, with the port it says it sits on (0-based).
struct Netdev {
    name: String,
    port_index: Option<u32>,
}

/// Puts the netdev of each port on it: `ports/N/gid_attrs/ndevs/0` where the kernel has
/// it (RoCE), else interfaces under `device/net/` or in `class/net` whose `device` is the
/// same PCI function, matched by `dev_port`/`dev_id` (port N ↔ N-1). A device with one
/// port takes an interface that does not say its port.
fn assign_netdevs(
    sysfs_root: &Path,
    dir: &Path,
    parent: Option<&Path>,
    pci: Option<&str>,
    ports: &mut [IbPort],
    warnings: &mut Vec<String>,
) -> Result<(), ProbeError> {
    let mut candidates: Vec<Netdev> = Vec::new();
    let mut add = |name: String, if_dir: &Path, warnings: &mut Vec<String>| {
        if !candidates.iter().any(|c| c.name == name) {
            let port_index = netdev_port_index(if_dir, warnings);
            candidates.push(Netdev { name, port_index });
        }
    };
    if let Some(net_dir) = parent.map(|p| p.join("net")) {
        for name in list_dir(&net_dir)?.unwrap_or_default() {
            let if_dir = follow(&net_dir.join(&name));
            add(name, &if_dir, warnings);
        }
    }
    if let Some(pci) = pci {
        let class_net = sysfs_root.join("class/net");
        // class/net is context, not the device: unreadable means fewer candidates.
        for name in list_dir(&class_net).ok().flatten().unwrap_or_default() {
            let if_dir = follow(&class_net.join(&name));
            let same = link_target(&if_dir.join("device")).is_some_and(|t| {
                t.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.eq_ignore_ascii_case(pci))
            });
            if same {
                add(name, &if_dir, warnings);
            }
        }
    }
    // IPoIB children (ib0.8001) share the parent's port: the shortest name is the parent.
    candidates.sort_by(|a, b| (a.name.len(), &a.name).cmp(&(b.name.len(), &b.name)));

    let single_port = ports.len() == 1;
    for port in ports.iter_mut() {
        let ndev = dir.join(format!("ports/{}/gid_attrs/ndevs/0", port.number));
        // Reading it fails (EINVAL) on InfiniBand ports: expected, no warning.
        if let Ok(Some(name)) = read_attr_raw(&ndev)
            && !name.is_empty()
        {
            port.netdev = Some(name);
            continue;
        }
        let index = port.number.checked_sub(1);
        port.netdev = candidates
            .iter()
            .find(|c| c.port_index.is_some() && c.port_index == index)
            .or_else(|| candidates.iter().find(|c| single_port && c.port_index.is_none()))
            .map(|c| c.name.clone());
    }
    Ok(())
}

/// 0-based port of an interface: `dev_port` (decimal, newer kernels), else `dev_id` (hex,
/// older IPoIB); the non-zero one wins, as older kernels left `dev_port` at 0.
fn netdev_port_index(if_dir: &Path, warnings: &mut Vec<String>) -> Option<u32> {
    let dev_port = read_parsed(
        &if_dir.join("dev_port"),
        "a port index (decimal)",
        warnings,
        parse_decimal,
    );
    let dev_id = read_parsed(
        &if_dir.join("dev_id"),
        "a device id (hex like 0x0)",
        warnings,
        parse_hex,
    );
    match (dev_port, dev_id) {
        (Some(p), _) if p > 0 => Some(p),
        (_, Some(i)) if i > 0 => Some(i),
        (p, i) => p.or(i),
    }
}
