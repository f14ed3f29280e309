//! NUMA nodes as sysfs lists them (`devices/system/node/node*`) and the live figures a
//! heartbeat carries: load averages and uptime from procfs, free memory per NUMA node.
//!
//! Both roots are parameters so a saved tree (a test fixture, an `hwloc-gather-topology`
//! dump) reads the same as the live `/sys` and `/proc`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use hyperplan_shared::topology::LiveFigures;
use procfs::{FromRead, LoadAverage, Uptime};

use super::ProbeError;
use super::sysfs::{check_root, follow, list_dir, parse_decimal, parse_decimal_u64, read_attr_raw};

/// One NUMA node as `<sysfs_root>/devices/system/node/nodeN` describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SysfsNuma {
    /// `N` of `nodeN`; sparse ids stay sparse.
    pub os_index: u32,
    /// PU OS indexes, sorted; empty for a CPU-less (memory-only) node.
    pub cpus: Vec<u32>,
    /// Bytes (`MemTotal` of `nodeN/meminfo`), when the file is there and parses.
    pub mem_total: Option<u64>,
    /// Bytes (`MemFree` of `nodeN/meminfo`).
    pub mem_free: Option<u64>,
}

/// NUMA nodes from `<sysfs_root>/devices/system/node/node*`, sorted by OS index: cpulist
/// (parsed list form "0-3,8-11", empty allowed for CPU-less nodes), MemTotal and MemFree
/// from `nodeN/meminfo` (lines like `Node 0 MemTotal:  12345 kB`), in bytes.
///
/// A missing `devices/system/node` is a machine (or a saved tree) without NUMA info:
/// `Ok(empty)`. One bad file is a warning and an empty field; a directory that cannot be
/// listed is an error.
pub fn read_numa(sysfs_root: &Path, warnings: &mut Vec<String>) -> Result<Vec<SysfsNuma>, ProbeError> {
    check_root(sysfs_root)?;
    let dir = sysfs_root.join("devices/system/node");
    let Some(entries) = list_dir(&dir)? else {
        return Ok(Vec::new());
    };
    let mut nodes = Vec::new();
    for name in entries {
        let Some(os_index) = name.strip_prefix("node").and_then(parse_decimal) else {
            continue; // has_cpu, online, possible, power, …
        };
        let node_dir = follow(&dir.join(&name));
        let cpus = read_node_cpus(&node_dir, warnings)?;
        let (mem_total, mem_free) = read_node_meminfo(&node_dir.join("meminfo"), os_index, warnings);
        nodes.push(SysfsNuma {
            os_index,
            cpus,
            mem_total,
            mem_free,
        });
    }
    nodes.sort_by_key(|n| n.os_index);
    Ok(nodes)
}

/// Load averages and uptime from `<procfs_root>/loadavg` and `/uptime` (procfs crate),
/// free memory per NUMA node from sysfs. Load and uptime are what a heartbeat is for, so
/// either failing is an error; a node without a readable `MemFree` is left out (with the
/// warning [`read_numa`] gives).
pub fn live_figures(
    sysfs_root: &Path,
    procfs_root: &Path,
    warnings: &mut Vec<String>,
) -> Result<LiveFigures, ProbeError> {
    let load_path = procfs_root.join("loadavg");
    let load: LoadAverage = parse_proc_file(&load_path)?;
    let uptime_path = procfs_root.join("uptime");
    let uptime: Uptime = parse_proc_file(&uptime_path)?;
    if !uptime.uptime.is_finite() || uptime.uptime < 0.0 {
        return Err(ProbeError::Parse {
            path: uptime_path,
            message: format!("uptime {} is not a number of seconds", uptime.uptime),
        });
    }
    let numa_free_memory: BTreeMap<u32, u64> = read_numa(sysfs_root, warnings)?
        .into_iter()
        .filter_map(|n| n.mem_free.map(|free| (n.os_index, free)))
        .collect();
    Ok(LiveFigures {
        load: [f64::from(load.one), f64::from(load.five), f64::from(load.fifteen)],
        numa_free_memory,
        // Whole seconds are all a heartbeat needs; the check above keeps the cast in range.
        uptime_seconds: uptime.uptime as u64,
    })
}

/// Kernel CPU lists ("0-3,8-11"): one reader and one printer for the probe, the planner's
/// pinning and the shepherd.
pub use hyperplan_shared::cpulist::{CpuListError, format_cpu_list, parse_cpu_list};

/// CPUs of one node: `cpulist`, or where a saved tree lacks it, the node's `cpuN` entries.
fn read_node_cpus(node_dir: &Path, warnings: &mut Vec<String>) -> Result<Vec<u32>, ProbeError> {
    let cpulist = node_dir.join("cpulist");
    match read_attr_raw(&cpulist) {
        Ok(Some(text)) => {
            return Ok(parse_cpu_list(&text).unwrap_or_else(|e| {
                warnings.push(format!("{}: {e}; CPUs of this NUMA node unknown", cpulist.display()));
                Vec::new()
            }));
        }
        Ok(None) => {}
        Err(e) => {
            warnings.push(format!("{}: {e}; CPUs of this NUMA node unknown", cpulist.display()));
            return Ok(Vec::new());
        }
    }
    let mut cpus: Vec<u32> = list_dir(node_dir)?
        .unwrap_or_default()
        .iter()
        .filter_map(|name| name.strip_prefix("cpu").and_then(parse_decimal))
        .collect();
    if cpus.is_empty() {
        warnings.push(format!(
            "{}: no cpulist and no cpuN entries; CPUs of this NUMA node unknown",
            node_dir.display()
        ));
    }
    cpus.sort_unstable();
    Ok(cpus)
}

/// `MemTotal` and `MemFree` of `nodeN/meminfo`, in bytes.
fn read_node_meminfo(path: &Path, os_index: u32, warnings: &mut Vec<String>) -> (Option<u64>, Option<u64>) {
    let text = match read_attr_raw(path) {
        Ok(Some(text)) => text,
        Ok(None) => return (None, None), // saved trees without meminfo: nothing to say
        Err(e) => {
            warnings.push(format!("{}: {e}", path.display()));
            return (None, None);
        }
    };
    let mut total = None;
    let mut free = None;
    for line in text.lines() {
        let mut words = line.split_whitespace().peekable();
        // `Node 0 MemTotal: …`; tolerate the prefix missing, as in /proc/meminfo.
        if words.peek() == Some(&"Node") {
            words.next();
            words.next();
        }
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        let slot = match key {
            "MemTotal:" => &mut total,
            "MemFree:" => &mut free,
            _ => continue,
        };
        let unit = words.next();
        let bytes = parse_decimal_u64(value).and_then(|v| match unit {
            Some("kB") => v.checked_mul(1024),
            None => Some(v),
            Some(_) => None,
        });
        match bytes {
            Some(b) => *slot = Some(b),
            None => warnings.push(format!(
                "{}: {:?} is not a memory size (expected e.g. \"Node {os_index} {key} 12345 kB\")",
                path.display(),
                line.trim()
            )),
        }
    }
    (total, free)
}

fn parse_proc_file<T: FromRead>(path: &Path) -> Result<T, ProbeError> {
    let bytes = fs::read(path).map_err(|source| ProbeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    T::from_read(bytes.as_slice()).map_err(|e| ProbeError::Parse {
        path: path.to_path_buf(),
        message: format!("{e} (contents {:?})", String::from_utf8_lossy(&bytes).trim()),
    })
}
