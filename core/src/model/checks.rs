//! What a node's health checks last said ([`NodeChecks`], from its agent's heartbeats),
//! and whether a node drained by health is on its way back ([`Returning`]). The
//! `nodes::checks` handler writes them; the drain itself is an ordinary
//! [`Drain`](super::drain::Drain) marked `by_health`, so it outlives a restart as an
//! admin's does, and an admin's drain is never taken for one.

use bevy_ecs::prelude::*;
use hyperplan_shared::health::CheckResult;

/// On a node whose agent reported its checks: every result, sorted by check name.
#[derive(Component, Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeChecks(pub Vec<CheckResult>);

/// On a node whose checks say degraded: it scores lower, and with `fabric` (one of its
/// InfiniBand ports) its HyperNodes count it. The topology index takes these in place
/// (`topology::marks`), through [`MarkChanges`].
#[derive(Component, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthMarks {
    /// A check says degraded.
    pub degraded: bool,
    /// A degraded check is one of its InfiniBand ports (`ib:`).
    pub fabric: bool,
}

/// Nodes whose [`HealthMarks`] were inserted or removed since the topology index last
/// took them (its component hooks push here; `topology::reindex` empties it).
#[derive(Resource, Debug, Default)]
pub struct MarkChanges(pub Vec<Entity>);

/// The drains changed by health checks in this tick: written to the store once, at the
/// tick's `return_healthy`, not once per node (a storm of a thousand results would write
/// the whole record a thousand times).
#[derive(Resource, Clone, Copy, Debug, Default)]
pub struct DrainsTouched(pub bool);

/// On a node drained by health whose checks all pass: since when (seconds, the tick's
/// clock). It returns `[health] returnAfter` later unless a check fails again.
#[derive(Component, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Returning {
    /// When every check passed again.
    pub since: u64,
}
