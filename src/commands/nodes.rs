//! `hyperplan nodes`: the planner's nodes, like `sinfo`: state, free and total CPUs,
//! GPUs and memory, NUMA nodes, InfiniBand ports up, how tasks are confined, labels;
//! and an admin's `nodes drain|resume|remove`, like `scontrol update state=drain`.

use hyperplan_net::messages::{NodeAction, RequestCommand};
use hyperplan_shared::MEMORY;
use hyperplan_shared::quantity::format_quantity;
use hyperplan_shared::status::{NodeList, NodeState, NodeStatus, NodesChanged, NvlinkState, NvlinkStatus};

use super::columns::{columns, ratio};
use super::{Clock, Output, long_help, run_request};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan nodes
  hyperplan nodes --output json | jq '.nodes[] | select(.state == \"NotReady\") | .name'
  hyperplan nodes --planner head01:7400 --user alice
  hyperplan nodes drain gpu-b01 gpu-b02 --reason 'firmware update, ticket 4411'
  hyperplan nodes drain gpu-b03 --now --reason 'ECC errors'
  hyperplan nodes resume gpu-b01 gpu-b02
  hyperplan nodes remove gpu-b03";

/// Show the nodes the planner knows; drain, resume or remove them (admins).
///
/// Without a subcommand: one row per node, sorted by name: NAME, STATE (Ready: registered
/// and heartbeating; NotReady: missed heartbeats or disconnected, left out of placement;
/// `drained`/`draining` after it when an admin drained it: draining while its tasks still
/// run, drained once it is idle), CPUS, GPUS and MEMORY as free/total, NUMA nodes, IB ports
/// up/total, CONFINE (how its agent confines tasks: cgroup, each task in its own cgroup v2
/// with its CPUs, NUMA nodes and memory limit; affinity, pinned to its CPUs and NUMA
/// memory; none, not pinned; `-`: no agent connected, or one that does not say),
/// NVLINK where some node reports NVLink fabric information (the NVLink domain's
/// HyperNode holding the node, `(degraded)` when a GPU reports fabric trouble and the
/// node is placed on last; `none`: NVLink inside the machine only; `registering`,
/// `failed`, `disagree`: in no domain), and LABELS (k=v,...). Below the table, who
/// drained each drained node, when and why; why each NotReady node that will not come
/// back by itself is so (its agent was refused: it has obeyed a newer planner than this
/// one); and what each NVLink problem is. With `--output json`:
/// `{"nodes": [{"name", "state", "labels", "cpus": {"free", "total"}, ..., "drain":
/// {"state", "reason", "by", "since"}}]}`.
///
/// `drain`, `resume` and `remove` need an admin's certificate; the change is stored
/// before the planner answers, so it outlasts a restart or a failover.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES), args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Take nodes out of service: no new task starts on them.
    ///
    /// Their running tasks finish as they would (the node shows `draining`, then
    /// `drained` once idle: safe to reboot). With `--now` the tasks are killed (SIGTERM,
    /// SIGKILL 10 s later) and their jobs go on as if the node were lost: by their
    /// `onNodeLost` (`replace`: the lost ranks start again on a spare node of the same
    /// HyperNode; `requeue`: the job waits to run again; `fail`). Draining a drained node
    /// again replaces its reason.
    Drain {
        /// The nodes, by name.
        #[arg(required = true, value_name = "NODE")]
        nodes: Vec<String>,
        /// Why, for `hyperplan nodes` (at most 256 bytes).
        #[arg(long)]
        reason: Option<String>,
        /// End their running tasks now, as a lost node's.
        #[arg(long)]
        now: bool,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Put drained nodes back in service.
    Resume {
        /// The nodes, by name.
        #[arg(required = true, value_name = "NODE")]
        nodes: Vec<String>,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Forget nodes for good: drained and idle ones, or ones whose agent is gone.
    ///
    /// The node leaves the planner, and its HyperNodes with it. Stop its agent first:
    /// an agent that registers again under that name joins anew, as a new node.
    Remove {
        /// The nodes, by name.
        #[arg(required = true, value_name = "NODE")]
        nodes: Vec<String>,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (action, nodes, output, client) = match args.action {
        None => {
            let clock = Clock::local();
            let table = |l: &NodeList| render(l, &clock);
            return run_request(&args.client, RequestCommand::Nodes, args.output, "node list", table);
        }
        Some(Action::Drain {
            nodes,
            reason,
            now,
            output,
            client,
        }) => (NodeAction::Drain { reason, now }, nodes, output, client),
        Some(Action::Resume { nodes, output, client }) => (NodeAction::Resume, nodes, output, client),
        Some(Action::Remove { nodes, output, client }) => (NodeAction::Remove, nodes, output, client),
    };
    run_request(
        &client,
        RequestCommand::NodeAdmin { action, nodes },
        output,
        "node change",
        render_changed,
    )
}

/// One line per node: what was done.
pub fn render_changed(c: &NodesChanged) -> String {
    c.nodes.iter().map(|n| format!("{}: {}\n", n.name, n.note)).collect()
}

/// The node table, then a count line.
pub fn render(list: &NodeList, clock: &Clock) -> String {
    if list.nodes.is_empty() {
        return "no nodes: no agent has registered with the planner yet\n".into();
    }
    let mut nodes: Vec<&NodeStatus> = list.nodes.iter().collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    // NVLINK only where some node reports NVLink fabric information.
    let with_nvlink = nodes.iter().any(|n| n.nvlink.is_some());
    let mut rows: Vec<[String; 10]> = vec![[
        "NAME".into(),
        "STATE".into(),
        "CPUS".into(),
        "GPUS".into(),
        "MEMORY".into(),
        "NUMA".into(),
        "IB".into(),
        "CONFINE".into(),
        "NVLINK".into(),
        "LABELS".into(),
    ]];
    for n in &nodes {
        let labels: Vec<String> = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        rows.push([
            n.name.clone(),
            match &n.drain {
                Some(d) if n.state == NodeState::Ready => d.state.as_str().into(),
                Some(d) => format!("{}+{}", state(n.state), d.state.as_str()),
                None => state(n.state).into(),
            },
            ratio(n.cpus.free, n.cpus.total),
            ratio(n.gpus.free, n.gpus.total),
            ratio(memory(n.memory.free), memory(n.memory.total)),
            n.numa_nodes.to_string(),
            ratio(n.ib_ports.free, n.ib_ports.total),
            n.confinement.clone().unwrap_or_else(|| "-".into()),
            n.nvlink.as_ref().map_or_else(|| "-".into(), nvlink_cell),
            if labels.is_empty() {
                "-".into()
            } else {
                labels.join(",")
            },
        ]);
    }
    let ready = nodes.iter().filter(|n| n.state == NodeState::Ready).count();
    let drained = nodes.iter().filter(|n| n.drain.is_some()).count();
    let mut out = if with_nvlink {
        columns(&rows)
    } else {
        let without: Vec<[String; 9]> = rows
            .into_iter()
            .map(|r| {
                let [a, b, c, d, e, f, g, h, _, j] = r;
                [a, b, c, d, e, f, g, h, j]
            })
            .collect();
        columns(&without)
    };
    // What keeps a node out of its NVLink domain, or makes it placed on last.
    let nvlink: Vec<String> = nodes
        .iter()
        .filter_map(|n| {
            let v = n
                .nvlink
                .as_ref()
                .filter(|v| !matches!(v.state, NvlinkState::Ok | NvlinkState::None))?;
            Some(format!(
                "  {}: {}: {}\n",
                n.name,
                v.state.as_str(),
                v.detail.as_deref().unwrap_or("-")
            ))
        })
        .collect();
    let drains: Vec<String> = nodes
        .iter()
        .filter_map(|n| {
            let d = n.drain.as_ref()?;
            let since = format!("{} ({})", clock.local_time(d.since), clock.relative(d.since));
            Some(match &d.reason {
                Some(r) => format!("  {}: {} by {} since {since}: {r}\n", n.name, d.state.as_str(), d.by),
                None => format!("  {}: {} by {} since {since}\n", n.name, d.state.as_str(), d.by),
            })
        })
        .collect();
    let why: Vec<String> = nodes
        .iter()
        .filter_map(|n| Some(format!("  {}: {}\n", n.name, n.reason.as_deref()?)))
        .collect();
    out.push_str(&format!(
        "\n{} nodes: {ready} ready, {} not ready{}\n",
        nodes.len(),
        nodes.len() - ready,
        if drained > 0 {
            format!(", {drained} drained")
        } else {
            String::new()
        }
    ));
    if !drains.is_empty() {
        out.push_str("\ndrained:\n");
        out.push_str(&drains.concat());
    }
    if !why.is_empty() {
        out.push_str("\nwhy not ready:\n");
        out.push_str(&why.concat());
    }
    if !nvlink.is_empty() {
        out.push_str("\nnvlink:\n");
        out.push_str(&nvlink.concat());
    }
    // Health checks that are not ok: failed ones drain their node, degraded ones make it
    // placed on last.
    let health: Vec<String> = nodes
        .iter()
        .flat_map(|n| {
            n.health.iter().map(move |c| {
                let code = if c.code.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", c.code)
                };
                format!("  {}: {} {}{code}: {}\n", n.name, c.check, c.state.as_str(), c.text)
            })
        })
        .collect();
    if !health.is_empty() {
        out.push_str("\nhealth:\n");
        out.push_str(&health.concat());
    }
    out
}

/// The NVLINK cell: the NVLink HyperNode holding the node (`nvl-6b8d7c1e`, with
/// `(degraded)` when a GPU reports fabric trouble), else its state (`none`: NVLink
/// inside the machine only; `registering`, `failed`, `disagree`).
fn nvlink_cell(v: &NvlinkStatus) -> String {
    match (v.state, &v.hyper_node) {
        (NvlinkState::Ok, Some(h)) => h.clone(),
        (NvlinkState::Degraded, Some(h)) => format!("{h}(degraded)"),
        (state, _) => state.as_str().into(),
    }
}

fn state(state: NodeState) -> &'static str {
    match state {
        NodeState::Ready => "Ready",
        NodeState::NotReady => "NotReady",
    }
}

/// Bytes for people: exact binary units where they divide evenly (`512Gi`), else one
/// decimal in the largest unit that fits (`499.5Gi`), since free memory rarely divides.
pub fn memory(bytes: u64) -> String {
    let exact = format_quantity(MEMORY, bytes);
    if bytes < 1024 || !exact.chars().all(|c| c.is_ascii_digit()) {
        return exact;
    }
    let (unit, suffix) = [(6u32, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")]
        .into_iter()
        .map(|(k, s)| (1u64 << (10 * k), s))
        .find(|(unit, _)| bytes >= *unit)
        .unwrap_or((1, ""));
    // Display only: f64's 53 bits are plenty for one decimal.
    #[allow(clippy::cast_precision_loss)]
    let value = bytes as f64 / unit as f64;
    format!("{value:.1}{suffix}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;

    use hyperplan_shared::health::{CheckResult, CheckState};
    use hyperplan_shared::status::{DrainState, FreeTotal};

    use super::*;

    const GI: u64 = 1 << 30;

    fn ft(free: u64, total: u64) -> FreeTotal {
        FreeTotal { free, total }
    }

    fn node(name: &str, state: NodeState, labels: &[(&str, &str)]) -> NodeStatus {
        NodeStatus {
            name: name.into(),
            state,
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            cpus: ft(64, 128),
            gpus: ft(8, 8),
            memory: ft(512 * GI, 1024 * GI),
            numa_nodes: 2,
            ib_ports: ft(4, 4),
            last_heartbeat_secs: Some(1),
            running_tasks: 0,
            confinement: Some("cgroup".into()),
            reason: None,
            drain: None,
            nvlink: None,
            health: Vec::new(),
        }
    }

    #[test]
    fn table() {
        let mut gpu_busy = node("gpu-b02", NodeState::Ready, &[("rack", "r2"), ("gpu", "h100")]);
        gpu_busy.gpus = ft(0, 8);
        gpu_busy.cpus = ft(0, 128);
        gpu_busy.memory = ft(123_456_789_012, 1024 * GI);
        gpu_busy.running_tasks = 8;
        let mut down = node("gpu-b10", NodeState::NotReady, &[("rack", "r2")]);
        down.ib_ports = ft(2, 4);
        down.last_heartbeat_secs = Some(93);
        down.confinement = None;
        let mut refused = node("gpu-b11", NodeState::NotReady, &[]);
        refused.reason = Some("refused: its agent has obeyed planner epoch 7; this planner is at epoch 3".into());
        let mut cpu = node("cpu-a01", NodeState::Ready, &[]);
        cpu.gpus = ft(0, 0);
        cpu.numa_nodes = 8;
        cpu.ib_ports = ft(1, 1);
        cpu.confinement = Some("affinity".into());
        let drain = |state, reason: Option<&str>| {
            Some(hyperplan_shared::status::DrainStatus {
                state,
                reason: reason.map(Into::into),
                by: "root".into(),
                since: 1_795_737_600,
            })
        };
        let mut draining = node("gpu-b03", NodeState::Ready, &[]);
        draining.running_tasks = 2;
        draining.drain = drain(DrainState::Draining, Some("firmware update, ticket 4411"));
        let mut drained_away = node("gpu-b04", NodeState::NotReady, &[]);
        drained_away.drain = drain(DrainState::Drained, None);
        let mut sick = node("gpu-b05", NodeState::Ready, &[]);
        sick.drain = drain(DrainState::Drained, Some("ib:mlx5_0/1: width 1x (expected 4x)"));
        if let Some(d) = sick.drain.as_mut() {
            d.by = "health".into();
        }
        sick.health = vec![
            CheckResult::bad("ib:mlx5_0/1", CheckState::Failed, "ib-width", "width 1x (expected 4x)"),
            CheckResult::bad(
                "ib:mlx5_1/1",
                CheckState::Degraded,
                "ib-errors",
                "symbol errors +12 since the last check",
            ),
        ];
        let list = NodeList {
            nodes: vec![
                refused,
                down,
                gpu_busy,
                cpu,
                node("gpu-b01", NodeState::Ready, &[("rack", "r2")]),
                draining,
                drained_away,
                sick,
            ],
        };
        let clock = Clock {
            now: 1_795_737_600 + 3_600,
            utc_offset: |_| 0,
        };
        insta::assert_snapshot!(render(&list, &clock));
    }

    #[test]
    fn nvlink_column_and_problems() {
        let status = |state, hn: Option<&str>, detail: Option<&str>| {
            Some(NvlinkStatus {
                state,
                hyper_node: hn.map(Into::into),
                detail: detail.map(Into::into),
            })
        };
        let mut ok = node("r01t01", NodeState::Ready, &[]);
        ok.nvlink = status(NvlinkState::Ok, Some("nvl-6b8d0001"), None);
        let mut degraded = node("r01t02", NodeState::Ready, &[]);
        degraded.nvlink = status(
            NvlinkState::Degraded,
            Some("nvl-6b8d0001"),
            Some("GPU 0: bandwidth degraded"),
        );
        let mut registering = node("r01t03", NodeState::Ready, &[]);
        registering.nvlink = status(
            NvlinkState::Registering,
            None,
            Some("GPU 2 (0008:01:00.0): fabric registration In Progress"),
        );
        let mut h100 = node("h100-01", NodeState::Ready, &[]);
        h100.nvlink = status(NvlinkState::None, None, Some("NVLink inside this machine only"));
        let cpu = node("cpu-01", NodeState::Ready, &[]);
        let list = NodeList {
            nodes: vec![ok, degraded, registering, h100, cpu],
        };
        let clock = Clock {
            now: 1_795_737_600,
            utc_offset: |_| 0,
        };
        insta::assert_snapshot!(render(&list, &clock));
    }

    #[test]
    fn empty() {
        insta::assert_snapshot!(render(&NodeList::default(), &Clock::local()), @"no nodes: no agent has registered with the planner yet");
    }

    #[test]
    fn memory_units() {
        assert_eq!(memory(0), "0");
        assert_eq!(memory(512), "512");
        assert_eq!(memory(1536), "1.5Ki");
        assert_eq!(memory(512 * GI), "512Gi");
        assert_eq!(memory(GI + GI / 2), "1536Mi");
        assert_eq!(memory(123_456_789_012), "115.0Gi");
        assert_eq!(memory(u64::MAX), "16.0Ei");
    }

    #[test]
    fn json_shape_is_the_issue_s() {
        let list = NodeList {
            nodes: vec![node("n1", NodeState::Ready, &[("rack", "r1")])],
        };
        let v = serde_json::to_value(&list).unwrap();
        assert_eq!(v["nodes"][0]["state"], "Ready");
        assert_eq!(v["nodes"][0]["confinement"], "cgroup");
        assert_eq!(
            v["nodes"][0]["labels"],
            serde_json::json!(BTreeMap::from([("rack", "r1")]))
        );
    }
}
