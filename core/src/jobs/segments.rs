//! A job's `segments` as sub-jobs: every layer's segments over the job's ranks (all tasks
//! in task order), each held hard to its layer's tier, nested in the segment of the layer
//! outside it. The innermost segments own the tasks; an outer segment holds its inner
//! ones' tasks too, so the allocator places it as a whole, inner segments inside the
//! HyperNode it picked. Ranks follow the innermost segments in order, so each segment is
//! consecutive ranks.

use hyperplan_shared::job::Segment;

/// One segment: where it sits and which ranks it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSpan {
    /// Its layer, 0 the outermost.
    pub layer: usize,
    /// Index into the plan of the segment outside it; `None` in the outermost layer.
    pub parent: Option<usize>,
    /// Its first rank and one past its last (task indices, in the job's task order).
    pub ranks: std::ops::Range<u32>,
    /// `<job>/segment-2`, `<job>/segment-2.1` (numbered from 0 within the one outside).
    pub id: String,
    /// Its number within its layer, across the job: orders sub-jobs.
    pub index: u32,
}

/// Every segment of every layer, parents before children, each layer's segments in rank
/// order. `ranks`: the job's task count. Layers the loader checked; a spec that still
/// gives an empty layer list makes none.
pub fn plan(job: &str, segments: &[Segment], ranks: u32) -> Vec<SegmentSpan> {
    let mut out: Vec<SegmentSpan> = Vec::new();
    // The segments of the layer above (indices into `out`); the whole job above layer 0.
    let mut above: Vec<Option<usize>> = vec![None];
    for (layer, seg) in segments.iter().enumerate() {
        let size = seg.size.max(1);
        let mut next = Vec::new();
        let mut index = 0u32;
        for parent in above {
            let (range, stem) = match parent {
                None => (0..ranks, format!("{job}/segment-")),
                Some(p) => (out[p].ranks.clone(), format!("{}.", out[p].id)),
            };
            let mut start = range.start;
            let mut k = 0u32;
            while start < range.end {
                let end = start.saturating_add(size).min(range.end);
                out.push(SegmentSpan {
                    layer,
                    parent,
                    ranks: start..end,
                    id: format!("{stem}{k}"),
                    index,
                });
                next.push(Some(out.len() - 1));
                start = end;
                k += 1;
                index += 1;
            }
        }
        above = next;
    }
    out
}

/// Per rank, the index into `plan` of its innermost segment (`None` without segments).
pub fn innermost(plan: &[SegmentSpan], ranks: u32) -> Vec<Option<usize>> {
    let mut of = vec![None; ranks as usize];
    let deepest = plan.iter().map(|s| s.layer).max();
    for (i, s) in plan.iter().enumerate().filter(|(_, s)| Some(s.layer) == deepest) {
        for r in s.ranks.clone() {
            if let Some(slot) = of.get_mut(r as usize) {
                *slot = Some(i);
            }
        }
    }
    of
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(size: u32, tier: &str) -> Segment {
        Segment {
            size,
            tier_name: Some(tier.into()),
            tier: None,
            allow_partial: true,
        }
    }

    #[test]
    fn two_layers_nest_and_a_partial_tail_is_last() {
        let p = plan("j", &[layer(8, "nvlink"), layer(4, "tray")], 18);
        let show: Vec<String> = p
            .iter()
            .map(|s| format!("{} {}..{} {:?}", s.id, s.ranks.start, s.ranks.end, s.parent))
            .collect();
        assert_eq!(
            show,
            [
                "j/segment-0 0..8 None",
                "j/segment-1 8..16 None",
                "j/segment-2 16..18 None",
                "j/segment-0.0 0..4 Some(0)",
                "j/segment-0.1 4..8 Some(0)",
                "j/segment-1.0 8..12 Some(1)",
                "j/segment-1.1 12..16 Some(1)",
                "j/segment-2.0 16..18 Some(2)",
            ]
        );
        let of = innermost(&p, 18);
        assert_eq!(of[0], Some(3));
        assert_eq!(of[13], Some(6));
        assert_eq!(of[17], Some(7));
        assert_eq!(p[7].index, 4);
    }
}
