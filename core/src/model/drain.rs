//! What an admin said of nodes (`hyperplan nodes drain|resume|remove`): a drained node
//! takes no new task; its running ones finish, or with `--now` end as a lost node's do.
//! The drains are kept by node name ([`Drains`], the truth the store keeps as one
//! [`DrainsRecord`]) so that a drain outlives its node's agent and a restart; a node
//! present in the world also carries the [`Drained`] marker, which the resource cache
//! reads (a drained node offers nothing) and whose insert and removal the topology
//! invalidation hears.

use std::collections::{BTreeMap, BTreeSet};

use bevy_ecs::prelude::*;
use serde::{Deserialize, Serialize};

use super::record::{RecordError, decode_framed, encode_framed};

/// One node's drain: why, who said it and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drain {
    /// `--reason`, as given (`None`: none was).
    #[serde(default)]
    pub reason: Option<String>,
    /// The admin's certificate name.
    pub by: String,
    /// Since when (Unix seconds, the driver's clock).
    pub since: u64,
    /// Drained by a failed health check (`by` is then `health`): it returns by itself
    /// once every check passes (see `nodes::checks`). An admin's drain never is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_health: bool,
}

/// Every drained node, by name: present, away or not yet registered since a restart;
/// and the nodes removed since their agents last registered.
#[derive(Resource, Debug, Default, Clone, PartialEq, Eq)]
pub struct Drains {
    /// Drained nodes, by name.
    pub nodes: BTreeMap<String, Drain>,
    /// Removed nodes, by name: a HyperNode manifest that names one leaves it out rather
    /// than break (see `topology::index`). One goes from here when its agent registers.
    pub removed: BTreeSet<String>,
}

/// On a node entity that is drained: it offers nothing new (see `cache::refresh`).
#[derive(Component, Clone, Copy, Debug, Default)]
pub struct Drained;

/// Nodes whose [`Drained`] marker came or went since the resource cache last looked: it
/// closes or opens each in place (`cache::refresh`), with no rebuild of the topology
/// index, so a thousand nodes drained by health in one tick cost that tick little.
#[derive(Resource, Debug, Default)]
pub struct DrainChanges(pub Vec<Entity>);

/// Nodes the resource cache closed in place this tick, sorted. Closing takes room away,
/// so it is no news for a job that found none ([`CapacityEpoch`](super::tick::CapacityEpoch)
/// counts only room that may have grown); the walk works out its reservations again
/// only when one of them holds such a node.
#[derive(Resource, Debug, Default)]
pub struct Closed(pub Vec<crate::model::ids::NodeIdx>);

/// What the store keeps of the drains: one record, rewritten whole on every change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainsRecord {
    /// (node name, its drain), by name.
    pub nodes: Vec<(String, Drain)>,
    /// Removed nodes, by name.
    #[serde(default)]
    pub removed: Vec<String>,
}

impl DrainsRecord {
    /// The record of `drains`.
    pub fn of(drains: &Drains) -> Self {
        Self {
            nodes: drains.nodes.iter().map(|(n, d)| (n.clone(), d.clone())).collect(),
            removed: drains.removed.iter().cloned().collect(),
        }
    }

    /// The drains this record keeps.
    pub fn into_drains(self) -> Drains {
        Drains {
            nodes: self.nodes.into_iter().collect(),
            removed: self.removed.into_iter().collect(),
        }
    }

    /// Framed and checksummed, as job records are.
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        encode_framed(self)
    }

    /// The record of `drains`, encoded as [`Self::encode`] would, without copying them
    /// first: a storm of drains by health on a large cluster writes the whole record.
    pub fn encode_of(drains: &Drains) -> Result<Vec<u8>, RecordError> {
        /// [`DrainsRecord`]'s layout, borrowed.
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct View<'a> {
            nodes: Vec<(&'a str, &'a Drain)>,
            removed: Vec<&'a str>,
        }
        encode_framed(&View {
            nodes: drains.nodes.iter().map(|(n, d)| (n.as_str(), d)).collect(),
            removed: drains.removed.iter().map(String::as_str).collect(),
        })
    }

    /// Read back; a damaged record is an error.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        decode_framed(bytes)
    }
}

/// The limit on `--reason`, in bytes: it is shown in tables and kept in the store.
pub const MAX_REASON_BYTES: usize = 256;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_borrowed_encoding_is_the_records() {
        let mut drains = Drains::default();
        drains.removed.insert("n9".into());
        for (n, by_health) in [("n1", false), ("n2", true)] {
            drains.nodes.insert(
                n.into(),
                Drain {
                    reason: Some("fans".into()),
                    by: "root".into(),
                    since: 7,
                    by_health,
                },
            );
        }
        let bytes = DrainsRecord::encode_of(&drains).unwrap();
        assert_eq!(bytes, DrainsRecord::of(&drains).encode().unwrap());
        assert_eq!(DrainsRecord::decode(&bytes).unwrap(), DrainsRecord::of(&drains));
    }

    #[test]
    fn a_record_reads_back_and_a_damaged_one_is_refused() {
        let mut drains = Drains::default();
        drains.removed.insert("n9".into());
        drains.nodes.insert(
            "n1".into(),
            Drain {
                reason: Some("firmware".into()),
                by: "root".into(),
                since: 7,
                by_health: false,
            },
        );
        let bytes = DrainsRecord::of(&drains).encode().unwrap();
        assert_eq!(DrainsRecord::decode(&bytes).unwrap(), DrainsRecord::of(&drains));
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(DrainsRecord::decode(&bad).is_err());
    }
}
