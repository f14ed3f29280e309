//! Leaf-minimal span (ours, beyond Volcano and Slurm; `[scoring] span = "minimal"`): for
//! a (sub-)job and a candidate HyperNode, the fewest leaves its pending tasks fit in,
//! which leaves, and in which order the tasks fill them.
//!
//! Volcano takes the best bin-pack HyperNode of the lowest feasible tier and then spreads
//! the tasks by LCA score over its leaves in name order, so a fragmented spine gives a
//! 32-node job eight leaves where two free leaves under another spine would do. Here the
//! candidates of a tier are ordered by [`SpanKey`]: leaves spanned, then HyperNodes
//! spanned at each tier between, then slack (free room left in the leaves used), and the
//! caller breaks further ties by bin-pack score and name.
//!
//! A "leaf" is a node group's HyperNode of the lowest tier ([`Group::leaf`]). A node in
//! none (attached directly to a spine, Volcano's "nodes outside tier-1 HyperNodes", or in
//! no HyperNode) shares no leaf switch with any other node, so it is a unit of its own.
//! Room is counted in tasks of the job's shapes from the live per-HyperNode counts, so
//! planning a candidate costs its leaves and such nodes, not all its nodes.
//!
//! [`Group::leaf`]: crate::topology::Group::leaf

use crate::cache::capacity::{Capacity, Shape};
use crate::model::ids::{HnIdx, NodeIdx};
use crate::topology::TopologyIndex;

/// Where tasks may go as one block: a leaf HyperNode, or a node without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Unit {
    Leaf(HnIdx),
    Node(NodeIdx),
}

/// Where the tasks of a planned HyperNode look for nodes, in the order to look: a node
/// group of it (by its position in `hns[h].groups`), the nodes of that group the slot
/// holds, and the fill rank of its unit (`u32::MAX`: not planned, used only when the plan
/// falls short). Slots partition the HyperNode's nodes.
#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub gi: usize,
    /// `None`: every node of the group. A group without a leaf has one slot per planned
    /// node, so that those fill in plan order, and one for the rest.
    pub nodes: Option<Vec<NodeIdx>>,
    pub rank: u32,
}

impl Slot {
    /// One slot per group of `h`, none planned.
    pub(super) fn unplanned(index: &TopologyIndex, h: HnIdx) -> Vec<Slot> {
        (0..index.hns[h.ix()].groups.len())
            .map(|gi| Slot {
                gi,
                nodes: None,
                rank: u32::MAX,
            })
            .collect()
    }
}

/// How good a candidate HyperNode is: smaller is better, compared field by field.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SpanKey {
    /// Tasks that do not fit in the candidate at all (0 whenever it can hold them all).
    pub short: u64,
    /// Leaves (units) the tasks span.
    pub leaves: u32,
    /// Distinct HyperNodes spanned per tier between the candidate and the leaves, the
    /// tier just below the candidate first.
    pub inner: Vec<u32>,
    /// Room left in the units used, in tasks: the tightest fit has the least.
    pub slack: u64,
}

/// The units chosen under one candidate, in fill order (most room first), and its key.
#[derive(Clone, Debug, Default)]
pub(super) struct SpanPlan {
    pub units: Vec<Unit>,
    pub key: SpanKey,
}

impl SpanPlan {
    /// The slots of `h` (see [`Slot`]): planned units first, in fill order, then the
    /// rest in group order.
    pub(super) fn slots(&self, index: &TopologyIndex, h: HnIdx) -> Vec<Slot> {
        let mut by_unit: Vec<(Unit, u32)> = self.units.iter().enumerate().map(|(r, u)| (*u, r as u32)).collect();
        by_unit.sort_unstable();
        let rank = |unit: Unit| {
            by_unit
                .binary_search_by(|(u, _)| u.cmp(&unit))
                .map_or(u32::MAX, |i| by_unit[i].1)
        };
        let mut slots = Vec::with_capacity(index.hns[h.ix()].groups.len());
        for (gi, &g) in index.hns[h.ix()].groups.iter().enumerate() {
            let group = &index.groups[g.ix()];
            if let Some(l) = group.leaf {
                slots.push(Slot {
                    gi,
                    nodes: None,
                    rank: rank(Unit::Leaf(l)),
                });
                continue;
            }
            let planned: Vec<(NodeIdx, u32)> = group
                .nodes
                .iter()
                .map(|&n| (n, rank(Unit::Node(n))))
                .filter(|(_, r)| *r != u32::MAX)
                .collect();
            if planned.is_empty() {
                slots.push(Slot {
                    gi,
                    nodes: None,
                    rank: u32::MAX,
                });
                continue;
            }
            let rest: Vec<NodeIdx> = group
                .nodes
                .iter()
                .copied()
                // Both in node order.
                .filter(|n| planned.binary_search_by_key(n, |(p, _)| *p).is_err())
                .collect();
            slots.extend(planned.into_iter().map(|(n, rank)| Slot {
                gi,
                nodes: Some(vec![n]),
                rank,
            }));
            if !rest.is_empty() {
                slots.push(Slot {
                    gi,
                    nodes: Some(rest),
                    rank: u32::MAX,
                });
            }
        }
        // Stable: the groups of one leaf, and the unplanned slots, keep group order.
        slots.sort_by_key(|s| s.rank);
        slots
    }
}

/// Plans the pending tasks (`pending[role]` of each role, shapes in `shapes`) under `h`.
/// `rooms[role]`, when given, is the per-HyperNode count of tasks of that role's shape
/// that fit now (`Capacity::room_per_hn`); roles without one have nothing pending.
pub(super) fn plan(
    index: &TopologyIndex,
    cap: &Capacity,
    h: HnIdx,
    shapes: &[std::sync::Arc<Shape>],
    rooms: &[Option<Vec<u64>>],
    pending: &[u64],
) -> SpanPlan {
    let want: u64 = pending.iter().sum();
    // A leaf is its own only unit: no lists to build (small jobs plan every leaf).
    let info = &index.hns[h.ix()];
    if info.tier == index.min_tier() && info.groups.iter().all(|&g| index.groups[g.ix()].leaf == Some(h)) {
        let room: u64 = pending
            .iter()
            .enumerate()
            .filter(|(_, p)| **p > 0)
            .map(|(r, &p)| rooms[r].as_ref().map_or(0, |c| c[h.ix()]).min(p))
            .sum();
        let target = want.min(room);
        let used = target > 0;
        return SpanPlan {
            units: if used { vec![Unit::Leaf(h)] } else { Vec::new() },
            key: SpanKey {
                short: want - target,
                leaves: u32::from(used),
                inner: Vec::new(),
                slack: if used { room - target } else { 0 },
            },
        };
    }
    // Room per unit in tasks: Σ over roles of min(fit, pending) (optimistic for a mix of
    // roles that compete for one resource; the placement falls back when it is).
    let mut distinct: Vec<Unit> = Vec::new();
    for &g in &index.hns[h.ix()].groups {
        match index.groups[g.ix()].leaf {
            Some(l) => distinct.push(Unit::Leaf(l)),
            None => distinct.extend(index.groups[g.ix()].nodes.iter().map(|&n| Unit::Node(n))),
        }
    }
    distinct.sort_unstable();
    distinct.dedup();
    let mut units: Vec<(Unit, u64)> = Vec::with_capacity(distinct.len());
    for unit in distinct {
        let room: u64 = pending
            .iter()
            .enumerate()
            .filter(|(_, p)| **p > 0)
            .map(|(r, &p)| {
                let fit = match unit {
                    Unit::Leaf(l) => rooms[r].as_ref().map_or(0, |c| c[l.ix()]),
                    Unit::Node(n) => cap.fit_count(n, &shapes[r]),
                };
                fit.min(p)
            })
            .sum();
        if room > 0 {
            units.push((unit, room));
        }
    }
    let total: u64 = units.iter().map(|u| u.1).fold(0, u64::saturating_add);
    let target = want.min(total);
    // Most room first; equal room by unit order (leaves by name, then nodes by name).
    units.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut count = 0;
    let mut sum = 0u64;
    while sum < target {
        sum += units[count].1;
        count += 1;
    }
    // The fewest units is `count`; take the largest `count − 1` and, as the last one, the
    // smallest unit that still completes the target: same span, least room left over.
    let mut chosen: Vec<(Unit, u64)> = units[..count.saturating_sub(1)].to_vec();
    if count > 0 {
        let before: u64 = chosen.iter().map(|u| u.1).sum();
        let rest = target - before;
        let last = units[count - 1..]
            .iter()
            .filter(|u| u.1 >= rest)
            .min_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
            .copied()
            .unwrap_or(units[count - 1]);
        chosen.push(last);
    }
    let slack = chosen.iter().map(|u| u.1).sum::<u64>() - target;
    let inner = inner_spans(index, h, &chosen);
    SpanPlan {
        key: SpanKey {
            short: want - target,
            leaves: chosen.len() as u32,
            inner,
            slack,
        },
        units: chosen.into_iter().map(|u| u.0).collect(),
    }
}

/// Distinct HyperNodes strictly between `h` and the chosen units, per tier, top first.
fn inner_spans(index: &TopologyIndex, h: HnIdx, chosen: &[(Unit, u64)]) -> Vec<u32> {
    let mut seen: Vec<(u32, HnIdx)> = Vec::new();
    for (unit, _) in chosen {
        let start = match *unit {
            Unit::Leaf(l) => index.hns[l.ix()].parent,
            // A node without a leaf: its lowest HyperNode below `h`, if any.
            Unit::Node(n) => index.groups[index.node_group[n.ix()].ix()]
                .hyper_nodes
                .iter()
                .copied()
                .filter(|&x| x != h && index.hns[x.ix()].tier < index.hns[h.ix()].tier)
                .min_by_key(|&x| index.hns[x.ix()].tier),
        };
        let mut cur = start;
        while let Some(x) = cur {
            if x == h || index.hns[x.ix()].tier >= index.hns[h.ix()].tier {
                break;
            }
            seen.push((index.hns[x.ix()].tier, x));
            cur = index.hns[x.ix()].parent;
        }
    }
    seen.sort();
    seen.dedup();
    let mut per_tier: Vec<(u32, u32)> = Vec::new();
    for (t, _) in seen {
        match per_tier.last_mut() {
            Some((lt, c)) if *lt == t => *c += 1,
            _ => per_tier.push((t, 1)),
        }
    }
    per_tier.iter().rev().map(|(_, c)| *c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ClusterBuilder;

    fn leaf_names(index: &TopologyIndex, p: &SpanPlan) -> Vec<String> {
        p.units
            .iter()
            .map(|u| match u {
                Unit::Leaf(l) => index.hns[l.ix()].name.clone(),
                Unit::Node(n) => index.node_names[n.ix()].clone(),
            })
            .collect()
    }

    /// Two spines of two 4-node leaves; spine-1 fragmented (3 + 3 free), spine-2 with one
    /// whole leaf free: 4 whole-node tasks want one leaf under spine-2; 6 want spine-1's
    /// two leaves, 3 + 3 with no room left.
    #[test]
    fn fewest_leaves_then_tightest() {
        let (index, mut cap) = ClusterBuilder::fat_tree(&[4, 2, 2], 1)
            .node_resources("cpu=8")
            .busy(0)
            .busy(4)
            .busy(12)
            .busy(13)
            .busy(14)
            .build_index();
        let shape = std::sync::Arc::new(cap.shape(&crate::testing::res("cpu=8")));
        let rooms = vec![Some(cap.room_per_hn(&index, &shape))];
        let spine = |n: &str| index.hn(n).map_or(index.root, |h| h.0);
        let four = plan(
            &index,
            &cap,
            spine("spine-2"),
            std::slice::from_ref(&shape),
            &rooms,
            &[4],
        );
        assert_eq!(leaf_names(&index, &four), ["leaf-3"]);
        assert_eq!((four.key.leaves, four.key.slack), (1, 0));
        let frag = plan(
            &index,
            &cap,
            spine("spine-1"),
            std::slice::from_ref(&shape),
            &rooms,
            &[4],
        );
        assert_eq!((frag.key.leaves, frag.key.slack), (2, 2));
        assert!(four.key < frag.key);
        let six = plan(
            &index,
            &cap,
            spine("spine-1"),
            std::slice::from_ref(&shape),
            &rooms,
            &[6],
        );
        assert_eq!(leaf_names(&index, &six), ["leaf-1", "leaf-2"]);
        assert_eq!((six.key.short, six.key.slack), (0, 0));
        let top = plan(&index, &cap, index.root, &[shape], &rooms, &[9]);
        assert_eq!(top.key.leaves, 3);
        assert_eq!(top.key.inner, [1, 2], "one pod, two spines below the top");
    }

    /// A spine holding leaf-1 (n03..n05) and, directly, n01 and n02: each direct node is
    /// a unit of its own, so 4 whole-node tasks take the leaf, then one direct node.
    #[test]
    fn nodes_attached_to_a_spine_are_units_of_one() {
        use crate::testing::hn;
        use hyperplan_shared::MemberType;
        let mut spine = hn("spine-1", 2, MemberType::HyperNode, &["leaf-1"]);
        spine
            .members
            .extend(hn("direct", 2, MemberType::Node, &["n01", "n02"]).members);
        let (index, mut cap) = ClusterBuilder::flat(5)
            .node_resources("cpu=8")
            .hyper_node(hn("leaf-1", 1, MemberType::Node, &["n03", "n04", "n05"]))
            .hyper_node(spine)
            .build_index();
        assert_eq!(index.leaf_of(crate::model::ids::NodeIdx(0)), None);
        let shape = std::sync::Arc::new(cap.shape(&crate::testing::res("cpu=8")));
        let rooms = vec![Some(cap.room_per_hn(&index, &shape))];
        let h = index.hn("spine-1").map_or(index.root, |h| h.0);
        let p = plan(&index, &cap, h, &[shape], &rooms, &[4]);
        assert_eq!(leaf_names(&index, &p), ["leaf-1", "n01"]);
        assert_eq!((p.key.leaves, p.key.slack), (2, 0));
        let ranks: Vec<(Option<Vec<u32>>, u32)> = p
            .slots(&index, h)
            .into_iter()
            .map(|s| (s.nodes.map(|ns| ns.iter().map(|n| n.0).collect()), s.rank))
            .collect();
        assert_eq!(ranks, [(None, 0), (Some(vec![0]), 1), (Some(vec![1]), u32::MAX)]);
    }
}
