//! The ports of the `MASTER_PORT` range bound on a node, as its agent last said: a job's
//! `MASTER_PORT` is chosen among the others on rank 0's node when it is placed (see
//! `dispatch`), so a port another job or another user bound first is not handed out.

use bevy_ecs::prelude::*;

/// On a node entity: the ports of the range bound there, sorted (see
/// [`hyperplan_shared::taskenv::choose_master_port`]).
#[derive(Component, Clone, Debug, Default, PartialEq, Eq)]
pub struct PortsInUse(pub Vec<u16>);
