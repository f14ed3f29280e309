//! A node whose agent cannot start tasks now (its shepherds' forks fail: out of processes
//! or memory) says so in each heartbeat until a start works again; meanwhile the node
//! carries [`Strained`] and offers nothing new (as a drained node), its running tasks
//! untouched. Without it the node read Ready, took jobs, and failed each of them.

use bevy_ecs::prelude::*;

/// On a node entity whose agent says it cannot start tasks now: why, in its words.
#[derive(Component, Clone, Debug, PartialEq, Eq)]
pub struct Strained(pub String);
