//! The live figures in a heartbeat: 1-minute load and free bytes per NUMA node.
//!
//! An agent probing the machine it runs on reads them from procfs and sysfs at each
//! heartbeat. An agent describing another machine (hwloc XML, synthetic: tests, the
//! demo) has no live source; it reports that machine idle, every NUMA node's memory
//! free, so the planner sees a consistent node.

use std::path::PathBuf;

use hyperplan_shared::topology::NodeTopology;

use crate::probe::{self, ProbeOptions, Source, live};

#[derive(Clone, Debug)]
pub(super) enum Figures {
    /// Read `loadavg` under `proc` and `nodeN/meminfo` under `sys` each time.
    Machine { sys: PathBuf, proc: PathBuf },
    /// Idle, all memory free.
    Described,
}

impl Figures {
    pub(super) fn for_source(opts: &ProbeOptions) -> Self {
        match (&opts.source, &opts.sysfs_root, &opts.procfs_root) {
            (Source::Local, None, None) => Self::Machine {
                sys: "/sys".into(),
                proc: "/proc".into(),
            },
            (Source::Local, sysfs, procfs) => {
                let sys = sysfs.as_deref().map_or_else(|| "/sys".into(), probe::sysfs_dir_of);
                let proc = procfs.clone().or_else(|| {
                    let root = sysfs.as_ref()?;
                    Some(root.join("proc")).filter(|p| p.join("loadavg").is_file())
                });
                match proc {
                    Some(proc) => Self::Machine { sys, proc },
                    None => Self::Described,
                }
            }
            _ => Self::Described,
        }
    }

    /// Load and free memory per NUMA node now. A failed read falls back to the
    /// described figures for this beat (logged at debug: it repeats every beat).
    pub(super) fn now(&self, topology: &NodeTopology) -> (f64, Vec<(u32, u64)>) {
        if let Self::Machine { sys, proc } = self {
            let mut warnings = Vec::new();
            match live::live_figures(sys, proc, &mut warnings) {
                Ok(figures) => return (figures.load[0], figures.numa_free_memory.into_iter().collect()),
                Err(e) => tracing::debug!("live figures: {e}"),
            }
        }
        let free = topology
            .numa_nodes
            .iter()
            .map(|n| (n.os_index, n.local_memory))
            .collect();
        (0.0, free)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hyperplan_shared::topology::NumaNode;

    use super::*;

    #[test]
    fn described_machines_are_idle_with_all_memory_free() {
        let opts = ProbeOptions {
            source: Source::Synthetic("pack:1 numa:2 core:1 pu:1".into()),
            sysfs_root: None,
            procfs_root: None,
            labels: BTreeMap::new(),
            gpu_fabric: None,
        };
        let figures = Figures::for_source(&opts);
        assert!(matches!(figures, Figures::Described));
        let topology = NodeTopology {
            numa_nodes: vec![
                NumaNode {
                    os_index: 0,
                    local_memory: 10,
                    ..Default::default()
                },
                NumaNode {
                    os_index: 3,
                    local_memory: 20,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(figures.now(&topology), (0.0, vec![(0, 10), (3, 20)]));
    }

    #[test]
    fn this_machine_reads_procfs() {
        let figures = Figures::for_source(&ProbeOptions::local());
        assert!(matches!(figures, Figures::Machine { .. }));
        let (load, _) = figures.now(&NodeTopology::default());
        assert!(load.is_finite() && load >= 0.0);
    }
}
