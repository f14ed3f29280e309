//! Job arrays as the core keeps them ([`Arrays`]): each element is a job of its own
//! (named `NAME[INDEX]`, see `hyperplan_shared::array::ArrayElement`); this index finds
//! an array's elements by its id or name without a scan, for the `%N` limit, for
//! `cancel NAME[3-5]` and for dependencies on a whole array. It is made from the
//! elements' specs at admission, so it comes back with them after a restart.

use std::collections::{BTreeMap, HashMap};

use bevy_ecs::prelude::{Entity, Resource};

/// One array: its elements by index.
#[derive(Debug, Clone)]
pub struct ArrayEntry {
    /// The array's name (`NAME` of `NAME[7]`).
    pub name: String,
    /// `%N`: how many of its elements may run at once.
    pub limit: Option<u32>,
    /// (index, element), sorted by index.
    pub elements: Vec<(u32, Entity)>,
}

/// Every array the world holds an element of, by id; and the newest array of each name.
#[derive(Resource, Debug, Default)]
pub struct Arrays {
    /// Arrays by id (the first element's).
    pub by_id: BTreeMap<u64, ArrayEntry>,
    /// The newest array of each name.
    pub by_name: HashMap<String, u64>,
}

impl Arrays {
    /// Adds element `e` (index `index`) of array `id`.
    pub fn add(&mut self, id: u64, name: &str, limit: Option<u32>, index: u32, e: Entity) {
        let entry = self.by_id.entry(id).or_insert_with(|| ArrayEntry {
            name: name.to_string(),
            limit,
            elements: Vec::new(),
        });
        match entry.elements.binary_search_by_key(&index, |&(i, _)| i) {
            Ok(at) => entry.elements[at].1 = e,
            Err(at) => entry.elements.insert(at, (index, e)),
        }
        let newest = self.by_name.entry(name.to_string()).or_insert(id);
        *newest = (*newest).max(id);
    }

    /// Drops element `e` of array `id` (forgotten); the array goes with its last one.
    pub fn remove(&mut self, id: u64, e: Entity) {
        let Some(entry) = self.by_id.get_mut(&id) else {
            return;
        };
        entry.elements.retain(|&(_, x)| x != e);
        if entry.elements.is_empty() {
            let name = entry.name.clone();
            self.by_id.remove(&id);
            if self.by_name.get(&name) == Some(&id) {
                // An older array of the name, if one is kept, is the name's again.
                match self.by_id.iter().rev().find(|(_, a)| a.name == name) {
                    Some((&older, _)) => {
                        self.by_name.insert(name, older);
                    }
                    None => {
                        self.by_name.remove(&name);
                    }
                }
            }
        }
    }

    /// The array called `name` (the newest of that name).
    pub fn named(&self, name: &str) -> Option<(u64, &ArrayEntry)> {
        let id = *self.by_name.get(name)?;
        Some((id, self.by_id.get(&id)?))
    }
}
