//! The short, lstopo-like summary a person reads at a glance: per NUMA node its CPUs,
//! memory, GPUs, NICs and HCAs (with port state and rate).

use std::fmt::Write;

use hyperplan_shared::topology::NodeTopology;

use super::live::format_cpu_list;

const GIB: f64 = (1u64 << 30) as f64;

pub fn render_text(t: &NodeTopology) -> String {
    let mut o = String::new();
    let pus: usize = t.cores.iter().map(|c| c.pus.len()).sum();
    let _ = writeln!(
        o,
        "{} ({}{}{}): {} packages, {} NUMA nodes, {} cores, {} PUs, {:.1} GiB",
        if t.hostname.is_empty() { "?" } else { &t.hostname },
        if t.architecture.is_empty() {
            "?"
        } else {
            &t.architecture
        },
        t.cpu_model.as_deref().map(|m| format!(", {m}")).unwrap_or_default(),
        t.kernel.as_deref().map(|k| format!(", kernel {k}")).unwrap_or_default(),
        t.packages.len(),
        t.numa_nodes.len(),
        t.cores.len(),
        pus,
        t.total_memory as f64 / GIB,
    );
    let free = t.live.as_ref().map(|l| &l.numa_free_memory);
    let mut numa_ids: Vec<Option<u32>> = t.numa_nodes.iter().map(|n| Some(n.os_index)).collect();
    numa_ids.push(None); // devices with no NUMA locality
    for id in numa_ids {
        let mut lines = Vec::new();
        let local = |numa: &[u32]| match id {
            Some(i) => numa.first() == Some(&i),
            None => numa.is_empty(),
        };
        for g in t.gpus.iter().filter(|g| local(&g.numa)) {
            lines.push(format!(
                "  GPU {} {}{}",
                g.pci_bus_id,
                g.model
                    .clone()
                    .or_else(|| g.vendor.clone())
                    .unwrap_or_else(|| format!("{:04x}:{:04x}", g.vendor_id, g.device_id)),
                if g.os_devices.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", g.os_devices.join(", "))
                }
            ));
        }
        for n in t.nics.iter().filter(|n| local(&n.numa)) {
            lines.push(format!(
                "  NIC {} ({}){}",
                n.name,
                serde_json::to_value(n.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                n.pci_bus_id.as_deref().map(|p| format!(" {p}")).unwrap_or_default()
            ));
        }
        for h in t.hcas.iter().filter(|h| local(&h.numa)) {
            let ports: Vec<String> = h
                .ports
                .iter()
                .map(|p| {
                    format!(
                        "port {} {}{}{}{}",
                        p.number,
                        p.state.as_deref().unwrap_or("?"),
                        p.rate_gbps.map(|r| format!(" {r} Gb/s")).unwrap_or_default(),
                        p.link_layer.as_deref().map(|l| format!(" {l}")).unwrap_or_default(),
                        p.netdev.as_deref().map(|n| format!(" ({n})")).unwrap_or_default(),
                    )
                })
                .collect();
            lines.push(format!(
                "  HCA {}{}{}",
                h.name,
                h.pci_bus_id.as_deref().map(|p| format!(" {p}")).unwrap_or_default(),
                if ports.is_empty() {
                    String::new()
                } else {
                    format!(": {}", ports.join("; "))
                }
            ));
        }
        match id {
            Some(i) => {
                let Some(n) = t.numa_nodes.iter().find(|n| n.os_index == i) else {
                    continue;
                };
                let cores = t.cores.iter().filter(|c| c.numa == Some(i)).count();
                let cpus = if n.cpus.is_empty() {
                    "no CPUs".to_string()
                } else {
                    format!("PUs {} ({cores} cores)", format_cpu_list(&n.cpus))
                };
                let free = free
                    .and_then(|f| f.get(&i))
                    .map(|b| format!(", {:.1} GiB free", *b as f64 / GIB));
                let _ = writeln!(
                    o,
                    "NUMA {i}: {cpus}, {:.1} GiB{}",
                    n.local_memory as f64 / GIB,
                    free.unwrap_or_default()
                );
            }
            None if lines.is_empty() => continue,
            None => {
                let _ = writeln!(o, "no NUMA locality:");
            }
        }
        for l in lines {
            let _ = writeln!(o, "{l}");
        }
    }
    if let Some(l) = &t.live {
        let _ = writeln!(
            o,
            "load {:.2} {:.2} {:.2}, up {} s",
            l.load[0], l.load[1], l.load[2], l.uptime_seconds
        );
    }
    if !t.gpu_fabric.is_empty() {
        let _ = writeln!(o, "{}", super::nvlink::verdict(&t.gpu_fabric));
    }
    if !t.labels.is_empty() {
        let labels: Vec<String> = t.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(o, "labels: {}", labels.join(", "));
    }
    for w in &t.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hyperplan_shared::gpufabric::parse_smi_csv;

    use super::*;

    #[test]
    fn nvlink_verdict_line_is_rendered() {
        let csv = include_str!("../../../testdata/nvidia/gb200-nvl72-tray.csv");
        let mut t = NodeTopology {
            hostname: "tray01".into(),
            ..Default::default()
        };
        assert!(!render_text(&t).contains("NVLink"));
        t.gpu_fabric = parse_smi_csv(csv).unwrap();
        let text = render_text(&t);
        assert!(
            text.lines()
                .any(|l| l == "NVLink domain nvl-6b8d7c1e, partition c32766"),
            "{text}"
        );
    }
}
