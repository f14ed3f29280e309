//! Synthetic `ibnetdiscover` dumps of three-level fat trees, for benchmarks and tests:
//! the same text format as a real dump (switch blocks, then CA blocks, every cable listed
//! from both ends, a SHARP CA on every switch when asked).
//!
//! Layout: `pods` pods of `leaves_per_pod` leaves and `spines_per_pod` spines (every leaf
//! cabled to every spine of its pod); spine `i` of every pod is cabled to the cores of core
//! group `i` (`cores_per_group` cores each). Hosts have `rails` HCAs; host `k` of a pod puts
//! rail `r` on leaf `(k * rails + r) % leaves_per_pod`, so multi-rail hosts join a pod's
//! leaves into one tier-1 group, as in a SuperPOD scalable unit.

use std::fmt::Write as _;

#[derive(Clone, Copy, Debug)]
pub struct FatTreeDump {
    pub pods: usize,
    pub leaves_per_pod: usize,
    pub spines_per_pod: usize,
    pub cores_per_group: usize,
    pub hosts_per_pod: usize,
    pub rails: usize,
    pub sharp: bool,
}

impl FatTreeDump {
    /// 4,000 host CAs (1,000 hosts × 4 rails) and 700 switches: 250 leaves, 250 spines
    /// (25 pods) and 200 cores — the size issue 6 sets the ≤ 1 s target for.
    pub const ISSUE_6: FatTreeDump = FatTreeDump {
        pods: 25,
        leaves_per_pod: 10,
        spines_per_pod: 10,
        cores_per_group: 20,
        hosts_per_pod: 40,
        rails: 4,
        sharp: false,
    };

    pub fn switch_count(&self) -> usize {
        self.pods * (self.leaves_per_pod + self.spines_per_pod) + self.spines_per_pod * self.cores_per_group
    }

    pub fn host_ca_count(&self) -> usize {
        self.pods * self.hosts_per_pod * self.rails
    }

    fn leaf(&self, pod: usize, l: usize) -> u64 {
        0x1000_0000 + (pod * self.leaves_per_pod + l) as u64
    }

    fn spine(&self, pod: usize, s: usize) -> u64 {
        0x2000_0000 + (pod * self.spines_per_pod + s) as u64
    }

    fn core(&self, group: usize, c: usize) -> u64 {
        0x3000_0000 + (group * self.cores_per_group + c) as u64
    }

    fn ca(&self, pod: usize, host: usize, rail: usize) -> u64 {
        0x4000_0000 + ((pod * self.hosts_per_pod + host) * self.rails + rail) as u64
    }

    fn host_name(&self, pod: usize, host: usize) -> String {
        format!("gpu{:05}", pod * self.hosts_per_pod + host + 1)
    }

    /// The dump text.
    pub fn generate(&self) -> String {
        let mut out = String::from(
            "#\n# Topology file: synthetic fat tree\n#\n# Initiated from node 0000000040000000 port 0000000040000000\n",
        );
        let sw = |out: &mut String, guid: u64, desc: &str, ports: &[(u64, usize, bool, String)]| {
            let _ = write!(
                out,
                "\nvendid=0x2c9\ndevid=0xd2f0\nsysimgguid={guid:#x}\nswitchguid={guid:#x}({guid:x})\nSwitch\t65 \"S-{guid:016x}\"\t\t# \"MF0;{desc}:MQM8700/U1\" enhanced port 0 lid 1 lmc 0\n"
            );
            for (p, (peer, peer_port, is_ca, peer_desc)) in ports.iter().enumerate() {
                if *is_ca {
                    let _ = writeln!(
                        out,
                        "[{}]\t\"H-{peer:016x}\"[{peer_port}]({peer:x}) \t\t# \"{peer_desc}\" lid 2 4xHDR",
                        p + 1
                    );
                } else {
                    let _ = writeln!(
                        out,
                        "[{}]\t\"S-{peer:016x}\"[{peer_port}]\t\t# \"MF0;{peer_desc}:MQM8700/U1\" lid 1 4xHDR",
                        p + 1
                    );
                }
            }
        };
        let leaf_name = |pod: usize, l: usize| format!("pod{pod:02}-leaf{l:02}");
        let spine_name = |pod: usize, s: usize| format!("pod{pod:02}-spine{s:02}");
        let core_name = |g: usize, c: usize| format!("core{g:02}-{c:02}");
        let hosts_on_leaf = |l: usize| -> Vec<(usize, usize)> {
            (0..self.hosts_per_pod)
                .flat_map(|k| (0..self.rails).map(move |r| (k, r)))
                .filter(|(k, r)| (k * self.rails + r) % self.leaves_per_pod == l)
                .collect()
        };
        let mut sharp: Vec<(u64, u64, usize, String)> = Vec::new();
        for pod in 0..self.pods {
            for l in 0..self.leaves_per_pod {
                let mut ports = Vec::new();
                for (k, r) in hosts_on_leaf(l) {
                    ports.push((
                        self.ca(pod, k, r),
                        1,
                        true,
                        format!("{} mlx5_{r}", self.host_name(pod, k)),
                    ));
                }
                for s in 0..self.spines_per_pod {
                    ports.push((self.spine(pod, s), l + 1, false, spine_name(pod, s)));
                }
                self.add_sharp(&mut ports, &mut sharp, self.leaf(pod, l), leaf_name(pod, l));
                sw(&mut out, self.leaf(pod, l), &leaf_name(pod, l), &ports);
            }
            for s in 0..self.spines_per_pod {
                let mut ports = Vec::new();
                for l in 0..self.leaves_per_pod {
                    ports.push((
                        self.leaf(pod, l),
                        self.hosts_on_leaf_count(l) + s + 1,
                        false,
                        leaf_name(pod, l),
                    ));
                }
                for c in 0..self.cores_per_group {
                    ports.push((self.core(s, c), pod + 1, false, core_name(s, c)));
                }
                self.add_sharp(&mut ports, &mut sharp, self.spine(pod, s), spine_name(pod, s));
                sw(&mut out, self.spine(pod, s), &spine_name(pod, s), &ports);
            }
        }
        for g in 0..self.spines_per_pod {
            for c in 0..self.cores_per_group {
                let mut ports = Vec::new();
                for pod in 0..self.pods {
                    ports.push((
                        self.spine(pod, g),
                        self.leaves_per_pod + c + 1,
                        false,
                        spine_name(pod, g),
                    ));
                }
                self.add_sharp(&mut ports, &mut sharp, self.core(g, c), core_name(g, c));
                sw(&mut out, self.core(g, c), &core_name(g, c), &ports);
            }
        }
        for pod in 0..self.pods {
            for l in 0..self.leaves_per_pod {
                for (port, (k, r)) in hosts_on_leaf(l).into_iter().enumerate() {
                    let guid = self.ca(pod, k, r);
                    let desc = format!("{} mlx5_{r}", self.host_name(pod, k));
                    let leaf = self.leaf(pod, l);
                    let _ = write!(
                        out,
                        "\nvendid=0x2c9\ndevid=0x101b\nsysimgguid={guid:#x}\ncaguid={guid:#x}\nCa\t1 \"H-{guid:016x}\"\t\t# \"{desc}\"\n[1]({guid:x}) \t\"S-{leaf:016x}\"[{}]\t\t# lid 2 lmc 0 \"MF0;{}:MQM8700/U1\" lid 1 4xHDR\n",
                        port + 1,
                        leaf_name(pod, l)
                    );
                }
            }
        }
        for (guid, switch, port, name) in sharp {
            let _ = write!(
                out,
                "\nvendid=0x2c9\ndevid=0xcf09\nsysimgguid={switch:#x}\ncaguid={guid:#x}\nCa\t1 \"H-{guid:016x}\"\t\t# \"Mellanox Technologies Aggregation Node\"\n[1]({guid:x}) \t\"S-{switch:016x}\"[{port}]\t\t# lid 3 lmc 0 \"MF0;{name}:MQM8700/U1\" lid 1 4xHDR\n"
            );
        }
        out
    }

    fn hosts_on_leaf_count(&self, l: usize) -> usize {
        (0..self.hosts_per_pod * self.rails)
            .filter(|i| i % self.leaves_per_pod == l)
            .count()
    }

    /// Puts a SHARP CA on the switch's next port when asked.
    fn add_sharp(
        &self,
        ports: &mut Vec<(u64, usize, bool, String)>,
        sharp: &mut Vec<(u64, u64, usize, String)>,
        switch: u64,
        name: String,
    ) {
        if self.sharp {
            let guid = 0x5000_0000 + switch;
            ports.push((guid, 1, true, "Mellanox Technologies Aggregation Node".to_string()));
            sharp.push((guid, switch, ports.len(), name));
        }
    }
}
