//! Which reservations hold their resources in the live caches right now. While a job is
//! tried, every reservation whose window overlaps the job's (now until now + its time
//! limit) is taken from the capacity and NUMA caches, so the search simply cannot use
//! reserved room the job would still hold when the reservation begins; reservations that
//! begin after the job must have ended leave their room usable. The walk moves the set
//! from job to job and gives everything back at its end.

use crate::cache::scratch::Scratch;
use crate::model::ids::NodeIdx;

use super::Reservation;

/// Per reservation (by position in the list): whether its resources are taken now.
#[derive(Clone, Debug, Default)]
pub struct ActiveSet {
    taken: Vec<bool>,
}

/// The window of time a job would occupy: from `from` for `limit` seconds, as backfill
/// expects it to run (`None`: for ever), and at most `bound` (its time limit).
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Its start (Unix seconds).
    pub from: u64,
    /// Its expected length (a runtime estimate, or its time limit); `None` = without end.
    pub limit: Option<u64>,
    /// Its longest length: its time limit, what [`Reservation::strict`] ones are judged by.
    pub bound: Option<u64>,
}

impl Window {
    /// A window whose expected and longest lengths are both `limit`.
    pub fn of(from: u64, limit: Option<u64>) -> Self {
        Self {
            from,
            limit,
            bound: limit,
        }
    }

    /// Whether reservation `r` overlaps the window: it begins before the window ends and
    /// ends after the window begins (the longest window for a strict one).
    pub fn overlaps(&self, r: &Reservation) -> bool {
        let length = if r.strict { self.bound } else { self.limit };
        let begins_before_end = length.is_none_or(|l| r.start < self.from.saturating_add(l));
        let ends_after_start = r.end.is_none_or(|e| self.from < e);
        begins_before_end && ends_after_start
    }
}

impl ActiveSet {
    /// Takes every reservation of `list` that overlaps `window` and gives back every other
    /// one; the nodes of those given back go into `freed` (their room grew).
    pub fn set(
        &mut self,
        list: &[Reservation],
        window: Window,
        s: &mut Scratch<'_>,
        mut freed: Option<&mut Vec<NodeIdx>>,
    ) {
        self.taken.resize(list.len(), false);
        for (r, taken) in list.iter().zip(self.taken.iter_mut()) {
            let want = window.overlaps(r);
            if want == *taken {
                continue;
            }
            *taken = want;
            for h in &r.held {
                if want {
                    s.take_held(h);
                } else {
                    s.give_held(h);
                    if let Some(f) = freed.as_deref_mut() {
                        f.push(h.node);
                    }
                }
            }
        }
    }

    /// Gives back everything taken: the caches hold only what runs.
    pub fn clear(&mut self, list: &[Reservation], s: &mut Scratch<'_>) {
        for (r, taken) in list.iter().zip(self.taken.iter_mut()) {
            if std::mem::take(taken) {
                for h in &r.held {
                    s.give_held(h);
                }
            }
        }
    }

    /// Whether reservation `i` is taken now.
    pub fn is_taken(&self, i: usize) -> bool {
        self.taken.get(i).copied().unwrap_or(false)
    }
}
