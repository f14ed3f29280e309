//! In which order the jobs after the reservations are tried (`[scheduler]
//! backfillOrder`). The reservations go to the first blocked jobs in the walk's order
//! (queue priority, fair share, age), and only there does that order protect anyone: a
//! job tried after them starts only where it delays none of them. Among those, which
//! goes first decides who takes a hole two could use:
//!
//! - `priority`: the walk's order, as Slurm's backfill does.
//! - `shortest`: shortest expected run first (SJBF; Tsafrir, Etsion and Feitelson,
//!   IEEE TPDS 2007, with runtime estimates). The mean wait falls most; a long job may
//!   be passed over again and again.
//! - `xfactor` (the default): largest expansion factor first, (wait + expected run) ÷ expected run
//!   (Chiang, Arpaci-Dusseau and Vernon, JSSPP 2002): a short job that waited a little
//!   goes before a long one that waited as long, and a long one catches up as it waits.
//!
//! Jobs waiting past `starvation` stay first, oldest first, whatever the order.

use bevy_ecs::entity::Entity;

use crate::config::scheduler::BackfillOrder;
use crate::order::OrderKey;

/// What the order needs of one job: whether it starves, how long it has waited
/// (seconds since it became eligible) and how long backfill expects it to run (`None`:
/// no time limit).
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    /// Waiting past `[scheduler] starvation`.
    pub starving: bool,
    /// Seconds since it became eligible.
    pub waited: u64,
    /// Its expected run (seconds); `None` without a time limit.
    pub run: Option<u64>,
}

/// Expansion factors are compared in millionths (exact, the same on every machine).
const SCALE: u128 = 1_000_000;

impl Candidate {
    /// Its place in `mode`'s order: lower goes first. Ties go by the walk's key.
    fn rank(&self, mode: BackfillOrder) -> u128 {
        let run = self.run.map(|r| u128::from(r.max(1)));
        match (mode, run) {
            (BackfillOrder::Priority, _) => 0,
            // Without a limit: after every job with one.
            (_, None) => u128::MAX,
            (BackfillOrder::Shortest, Some(r)) => r,
            (BackfillOrder::Xfactor, Some(r)) => {
                let x = (u128::from(self.waited) + r) * SCALE / r;
                u128::MAX - 1 - x
            }
        }
    }
}

/// Puts `rest` (the jobs not yet tried, in the walk's order) in `mode`'s order, ties in
/// the walk's; `of` tells what each is (`None`: a job gone from the world, tried last).
/// The walk's order stands as it is under `priority`, without a look at any job.
pub fn reorder(rest: &mut [(OrderKey, Entity)], mode: BackfillOrder, of: impl Fn(Entity) -> Option<Candidate>) {
    if mode == BackfillOrder::Priority || rest.len() < 2 {
        return;
    }
    // `rest` is in the walk's order already, and this sort is stable: ties keep it
    // without comparing the walk's keys again.
    rest.sort_by_cached_key(|&(_, e)| {
        of(e).map_or(
            (2u8, u128::MAX),
            |c| {
                if c.starving { (0, 0) } else { (1, c.rank(mode)) }
            },
        )
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::cmp::Reverse;

    use super::*;

    fn key(submit: u64) -> OrderKey {
        (Reverse(0), Reverse(0), Reverse(0), submit, submit)
    }

    /// Four jobs, in the walk's order: a long one that waited 9,000 s, a short one that
    /// waited 100 s, a starving one and one without a limit.
    fn jobs() -> (Vec<(OrderKey, Entity)>, impl Fn(Entity) -> Option<Candidate>) {
        let e: Vec<Entity> = (1..=4).map(|i| Entity::from_raw_u32(i).unwrap()).collect();
        let list = vec![(key(1), e[0]), (key(2), e[1]), (key(3), e[2]), (key(4), e[3])];
        let of = move |x: Entity| {
            let c = |starving, waited, run| Some(Candidate { starving, waited, run });
            match x.index_u32() {
                1 => c(false, 9_000, Some(10_000)),
                2 => c(false, 100, Some(100)),
                3 => c(true, 30_000, Some(50_000)),
                _ => c(false, 50_000, None),
            }
        };
        (list, of)
    }

    fn names(list: &[(OrderKey, Entity)]) -> Vec<u32> {
        list.iter().map(|(_, e)| e.index_u32()).collect()
    }

    #[test]
    fn priority_keeps_the_walks_order() {
        let (mut list, of) = jobs();
        reorder(&mut list, BackfillOrder::Priority, of);
        assert_eq!(names(&list), [1, 2, 3, 4]);
    }

    #[test]
    fn shortest_first_after_the_starving_and_no_limit_last() {
        let (mut list, of) = jobs();
        reorder(&mut list, BackfillOrder::Shortest, of);
        assert_eq!(names(&list), [3, 2, 1, 4]);
    }

    #[test]
    fn xfactor_puts_the_short_job_that_waited_first_then_catches_the_long_one_up() {
        let (mut list, of) = jobs();
        // Short: (100 + 100) / 100 = 2; long: (9,000 + 10,000) / 10,000 = 1.9.
        reorder(&mut list, BackfillOrder::Xfactor, &of);
        assert_eq!(names(&list), [3, 2, 1, 4]);
        // The long one waited 11,000 s: 2.1 against 2, it goes first.
        let later = |x: Entity| {
            of(x).map(|mut c| {
                if x.index_u32() == 1 {
                    c.waited = 11_000;
                }
                c
            })
        };
        let (mut list, _) = jobs();
        reorder(&mut list, BackfillOrder::Xfactor, later);
        assert_eq!(names(&list), [3, 1, 2, 4]);
    }
}
