//! The exec socket's connections counted per local user (the kernel says whose a
//! connection is: `SO_PEERCRED` at accept), so that one user cannot take the relays
//! every job's `hyperplan exec` (mpirun's remote shell) needs. A connection counts from
//! its accept to its close: first as *waiting* (its request being read, its caller
//! checked: what a user with no job here can hold, and only for the request's time
//! limit), then as *relaying* once its caller is admitted as a process of a job here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many connections the socket serves at once, and how many of them one user may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// All users together (each is a file descriptor and a task of the agent's).
    pub total: usize,
    /// One user, waiting and relaying together.
    pub per_user: usize,
    /// One user's connections not yet relayed.
    pub waiting_per_user: usize,
}

/// The socket's limits: 1,024 at once; a user at most half of them (a job's mpirun over
/// 512 nodes from one node, while another user's job still gets the other half); of
/// them at most 128 not yet relayed. A process of a job sends its request as it
/// connects and is checked in about a millisecond, so 128 at once is a burst no
/// launcher makes, while a user with no job here can hold no more than that, each for
/// the request's time limit.
pub const LIMITS: Limits = Limits {
    total: 1024,
    per_user: 512,
    waiting_per_user: 128,
};

/// Why a connection was closed at once.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    #[error("the exec socket serves {max} connections at once, all in use")]
    Node { max: usize },
    #[error("uid {uid} holds {max} connections to the exec socket already (at most {max} a user)")]
    User { uid: u32, max: usize },
    #[error("uid {uid} holds {max} connections to the exec socket that sent no request yet (at most {max} a user)")]
    Waiting { uid: u32, max: usize },
}

/// One user's connections now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Held {
    waiting: usize,
    relaying: usize,
}

/// The counts (users with no connection are forgotten: as many entries as connections
/// at most).
pub struct Gate {
    limits: Limits,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    total: usize,
    users: HashMap<u32, Held>,
}

impl Gate {
    pub fn new(limits: Limits) -> Arc<Gate> {
        Arc::new(Gate {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new connection of `uid`, waiting; refused when it would pass a limit.
    pub fn enter(self: &Arc<Self>, uid: u32) -> Result<Ticket, Full> {
        let mut s = self.state();
        let l = self.limits;
        if s.total >= l.total {
            return Err(Full::Node { max: l.total });
        }
        let held = s.users.get(&uid).copied().unwrap_or_default();
        if held.waiting + held.relaying >= l.per_user {
            return Err(Full::User { uid, max: l.per_user });
        }
        if held.waiting >= l.waiting_per_user {
            return Err(Full::Waiting {
                uid,
                max: l.waiting_per_user,
            });
        }
        s.total += 1;
        s.users.entry(uid).or_default().waiting += 1;
        Ok(Ticket {
            gate: self.clone(),
            uid,
            relaying: false,
        })
    }
}

/// A connection counted; uncounted when dropped.
pub struct Ticket {
    gate: Arc<Gate>,
    uid: u32,
    relaying: bool,
}

impl Ticket {
    /// Its caller was admitted: it no longer counts as waiting.
    pub fn relaying(&mut self) {
        if self.relaying {
            return;
        }
        self.relaying = true;
        let mut s = self.gate.state();
        if let Some(held) = s.users.get_mut(&self.uid) {
            held.waiting = held.waiting.saturating_sub(1);
            held.relaying += 1;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.gate.state();
        s.total = s.total.saturating_sub(1);
        if let Some(held) = s.users.get_mut(&self.uid) {
            if self.relaying {
                held.relaying = held.relaying.saturating_sub(1);
            } else {
                held.waiting = held.waiting.saturating_sub(1);
            }
            if *held == Held::default() {
                s.users.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const SMALL: Limits = Limits {
        total: 10,
        per_user: 6,
        waiting_per_user: 3,
    };

    #[test]
    fn one_user_cannot_take_the_others_connections() {
        let gate = Gate::new(SMALL);
        // A user with no job: three waiting, the fourth refused; another user still gets in.
        let intruder: Vec<Ticket> = (0..3).map(|_| gate.enter(1001).unwrap()).collect();
        assert_eq!(gate.enter(1001).err(), Some(Full::Waiting { uid: 1001, max: 3 }));
        let mut job = gate.enter(1000).unwrap();
        job.relaying();
        // Once the intruder's go, so does its count.
        drop(intruder);
        assert!(!gate.state().users.contains_key(&1001));
        // Relayed ones do not count as waiting, but count against the user's share.
        let mut more = Vec::new();
        for _ in 0..5 {
            let mut t = gate.enter(1000).unwrap();
            t.relaying();
            more.push(t);
        }
        assert_eq!(gate.enter(1000).err(), Some(Full::User { uid: 1000, max: 6 }));
        // The node's total: 6 held; 4 more of others, then none.
        let others: Vec<Ticket> = (0..4).map(|u| gate.enter(2000 + u).unwrap()).collect();
        assert_eq!(gate.enter(3000).err(), Some(Full::Node { max: 10 }));
        drop((job, more, others));
        let s = gate.state();
        assert_eq!((s.total, s.users.len()), (0, 0));
    }
}
