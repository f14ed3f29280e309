//! Name lookups for events that name a job or a node: a scan per event would make
//! loading a large cluster or a burst of submissions quadratic.

use std::collections::HashMap;

use bevy_ecs::prelude::{Entity, Resource};

/// Jobs by name, for events that name a job.
#[derive(Debug, Default, Resource)]
pub struct JobNames(pub HashMap<String, Entity>);

/// Nodes by name, for events that name a node.
#[derive(Debug, Default, Resource)]
pub struct NodeNames(pub HashMap<String, Entity>);

/// Jobs by id, for dependencies that name a job by its number.
#[derive(Debug, Default, Resource)]
pub struct JobIds(pub HashMap<u64, Entity>);
