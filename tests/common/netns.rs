//! Nodes with a network of their own: each agent in its own network namespace, joined by
//! a veth pair to a bridge in this namespace (where the planner and the CLI run). Nodes
//! have their own addresses (`MASTER_ADDR` means something), and a test cuts one node
//! off, its veth taken off the bridge, without killing anything: its agent and tasks run
//! on, unheard, until the link is healed. Needs root and iproute2; [`Fabric::new`] says
//! why not otherwise, and the test skips, printing it.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A bridge, and per node a namespace with an address on it (see the module).
pub struct Fabric {
    /// The third octet of the subnet (`10.213.K.0/24`), unique among live fabrics here.
    k: u32,
    bridge: String,
    /// (node, namespace, host side of its veth, its address)
    nodes: Vec<(String, String, String, String)>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Fabric {
    /// A bridge at `10.213.K.1` and a namespace per node at `10.213.K.(11 + i)`, or why
    /// this machine cannot have them.
    pub fn new(nodes: &[&str]) -> Result<Fabric, String> {
        if !super::euid_is_root() {
            return Err("not root: network namespaces need CAP_NET_ADMIN".into());
        }
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // Free subnets: other tests' fabrics (this process or another) hold theirs.
        let mut last = String::new();
        for _ in 0..250 {
            let k = (std::process::id().wrapping_mul(7) + NEXT.fetch_add(1, Ordering::Relaxed)) % 250 + 1;
            let bridge = format!("hpbr{k}");
            if std::path::Path::new(&format!("/sys/class/net/{bridge}")).exists() {
                continue;
            }
            match ip(&["link", "add", &bridge, "type", "bridge"]) {
                Ok(()) => {}
                Err(e) if e.contains("File exists") => continue,
                Err(e) => return Err(format!("cannot make a bridge: {e}")),
            }
            let mut fabric = Fabric {
                k,
                bridge: bridge.clone(),
                nodes: Vec::new(),
            };
            match fabric.build(nodes) {
                Ok(()) => return Ok(fabric),
                Err(e) => last = e,
            }
            // Drop takes what was made.
        }
        Err(format!("cannot set up namespaces: {last}"))
    }

    fn build(&mut self, nodes: &[&str]) -> Result<(), String> {
        let k = self.k;
        ip(&["addr", "add", &format!("10.213.{k}.1/24"), "dev", &self.bridge])?;
        ip(&["link", "set", &self.bridge, "up"])?;
        for (i, node) in nodes.iter().enumerate() {
            let ns = format!("hp{k}-{node}");
            let veth = format!("hpv{k}x{i}");
            let addr = format!("10.213.{k}.{}", 11 + i);
            ip(&["netns", "add", &ns])?;
            self.nodes
                .push((node.to_string(), ns.clone(), veth.clone(), addr.clone()));
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &veth, "master", &self.bridge])?;
            ip(&["link", "set", &veth, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &ns, "route", "add", "default", "via", &format!("10.213.{k}.1")])?;
        }
        Ok(())
    }

    /// The planner's address on the bridge (listen on `ADDR:0`).
    pub fn planner_addr(&self) -> String {
        format!("10.213.{}.1", self.k)
    }

    /// A second address on the bridge for a second planner (`10.213.K.2`), added now.
    #[allow(dead_code)]
    pub fn second_planner_addr(&self) -> String {
        let addr = format!("10.213.{}.2", self.k);
        ip(&["addr", "add", &format!("{addr}/24"), "dev", &self.bridge]).unwrap();
        addr
    }

    /// What `node` sends to `addr` goes nowhere (a blackhole route in its namespace);
    /// everything else still flows.
    #[allow(dead_code)]
    pub fn blackhole(&self, node: &str, addr: &str) {
        ip(&[
            "-n",
            &self.node(node).1,
            "route",
            "add",
            "blackhole",
            &format!("{addr}/32"),
        ])
        .unwrap();
    }

    fn node(&self, node: &str) -> &(String, String, String, String) {
        self.nodes
            .iter()
            .find(|n| n.0 == node)
            .unwrap_or_else(|| panic!("no node {node} in the fabric"))
    }

    /// The namespace `node`'s agent runs in.
    pub fn ns(&self, node: &str) -> String {
        self.node(node).1.clone()
    }

    /// `node`'s address.
    pub fn address(&self, node: &str) -> String {
        self.node(node).3.clone()
    }

    /// Cuts `node` off: nothing it sends arrives, nothing reaches it; it runs on.
    pub fn cut(&self, node: &str) {
        ip(&["link", "set", &self.node(node).2, "nomaster"]).unwrap();
    }

    /// Joins `node` to the others again.
    pub fn heal(&self, node: &str) {
        ip(&["link", "set", &self.node(node).2, "master", &self.bridge]).unwrap();
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // A namespace's end of its veth goes with it, and the pair with that.
        for (_, ns, _, _) in &self.nodes {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
