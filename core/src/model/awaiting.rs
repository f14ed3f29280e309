//! Nodes known only from the store, whose agents have not registered since the planner
//! started: the restored tasks each holds ([`AwaitingAgent`]) and how many such nodes
//! there are ([`Awaiting`]). `restore` makes them; a node's registration (`restore`'s
//! adoption, once the node is no [`StandIn`]) or its loss (`lost`) ends the wait with
//! `give_up`. The agents of nodes the store does not name (idle when the planner
//! stopped) may still come for a while after a restart ([`Rejoining`]). Until both
//! waits are over the cluster is not whole ([`Incomplete`]): a job that does not fit
//! waits for the agents rather than be rejected as one that could never run.

use bevy_ecs::prelude::*;

use super::reason::Reason;
use super::record::AssignmentRecord;

/// On a node known only from the store: the restored tasks running on it, with the NUMA
/// assignment each held, to take again once its agent says what the node has.
#[derive(Component, Debug, Default)]
pub struct AwaitingAgent(pub Vec<(Entity, Option<AssignmentRecord>)>);

/// On a node the store named before its agent registered: what it has is not known
/// (its hardware is a stand-in). Taken off when the node's spec arrives (`ingest`); a
/// node [`AwaitingAgent`] without it is adopted (`restore::adopt`).
#[derive(Component, Debug, Default)]
pub struct StandIn;

/// How many nodes are [`AwaitingAgent`]: while any is, the cluster is not whole and no
/// job is rejected as one that could never run.
#[derive(Resource, Debug, Default)]
pub struct Awaiting(pub u32);

/// The node no longer awaits its agent (it registered, or was declared lost): what it
/// held for its restored tasks.
pub(crate) fn give_up(world: &mut World, node: Entity) -> Option<AwaitingAgent> {
    let waiting = world.entity_mut(node).take::<AwaitingAgent>()?;
    if let Some(mut a) = world.get_resource_mut::<Awaiting>() {
        a.0 = a.0.saturating_sub(1);
    }
    Some(waiting)
}

/// After a restart on a store the planner had written: until when (the driver's clock,
/// ms) agents of nodes the store does not name may still register. That is
/// `nodeLostAfter` after the start, the time a silent agent known from the store gets
/// before its node is lost; the store keeps no list of idle nodes to wait for instead.
#[derive(Resource, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rejoining {
    /// Unix milliseconds.
    pub until_ms: u64,
}

/// What the cluster may still lack after a restart; see the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incomplete {
    /// Agents known from the store (nodes of restored running tasks) have not
    /// registered: this many.
    Known(u32),
    /// Every agent the store names is back; others may register until
    /// [`Rejoining::until_ms`].
    Rejoining,
}

impl Incomplete {
    /// What the cluster lacks at `now_ms`; `None` once it is whole.
    pub fn at(awaiting: Option<&Awaiting>, rejoining: Option<&Rejoining>, now_ms: u64) -> Option<Self> {
        match (awaiting.map_or(0, |a| a.0), rejoining) {
            (0, Some(r)) if now_ms < r.until_ms => Some(Self::Rejoining),
            (0, _) => None,
            (n, _) => Some(Self::Known(n)),
        }
    }

    /// A waiting job's reason. `cannot`: why the nodes registered so far could never
    /// hold it (what would reject it on a whole cluster), if that is known.
    pub fn reason(self, cannot: Option<Reason>) -> Reason {
        match self {
            Self::Known(n) => Reason::AwaitingAgents(n),
            Self::Rejoining => Reason::Rejoining {
                cannot: cannot.map(Box::new),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_is_whole_once_known_agents_are_back_and_the_others_had_their_time() {
        let (two, none) = (Awaiting(2), Awaiting(0));
        let window = Rejoining { until_ms: 10_000 };
        assert_eq!(
            Incomplete::at(Some(&two), Some(&window), 20_000),
            Some(Incomplete::Known(2))
        );
        assert_eq!(
            Incomplete::at(Some(&none), Some(&window), 9_999),
            Some(Incomplete::Rejoining)
        );
        assert_eq!(Incomplete::at(Some(&none), Some(&window), 10_000), None);
        assert_eq!(Incomplete::at(None, None, 0), None, "a planner that never restarted");
        let cannot = Reason::TooBig {
            task: "t".into(),
            asks: "cpu=4".into(),
        };
        assert_eq!(Incomplete::Known(2).reason(None), Reason::AwaitingAgents(2));
        assert_eq!(
            Incomplete::Rejoining.reason(Some(cannot.clone())),
            Reason::Rejoining {
                cannot: Some(Box::new(cannot))
            }
        );
    }
}
