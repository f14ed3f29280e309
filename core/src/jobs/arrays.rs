//! Job arrays (Slurm's `--array`): an array is split at submit into its elements, each a
//! job of its own named `NAME[INDEX]` with the next id (the first element's id is the
//! array's), so each is placed, limited, preempted and accounted one by one. The
//! elements' specs carry what they need ([`ArrayElement`]); [`Arrays`] finds them by
//! array, and [`select`] reads the ways people name them (`NAME`, `NAME[3-5]`, `17`,
//! `17_3`) for `cancel`, `hold`, `release` and `status`.

use bevy_ecs::prelude::*;
use hyperplan_shared::JobSpec;
use hyperplan_shared::array::{ArrayElement, ArraySpec, split_element_name};

use crate::model::arrays::Arrays;
use crate::model::components::{Job, JobId};
use crate::names::{JobIds, JobNames};

/// Marks a job [`jobs::gates`](super::gates) looks at each time something changed: one
/// with a dependency, or one whose hard topology turns soft after a while (`softAfter`).
#[derive(Component, Debug, Clone, Copy, Default)]
pub struct Gated;

/// `jobs`, each array split into its elements (in index order), the others as they are;
/// `first_id` is the id the first job of the list will get (ids follow the list).
pub fn expand(jobs: Vec<JobSpec>, first_id: u64) -> Vec<JobSpec> {
    let mut out = Vec::with_capacity(jobs.len());
    for spec in jobs {
        let id = first_id.saturating_add(out.len() as u64);
        out.extend(expand_one(spec, id));
    }
    out
}

/// One job, split into its elements when it is an array whose first element gets `id`.
pub fn expand_one(mut spec: JobSpec, id: u64) -> Vec<JobSpec> {
    let Some(array) = spec.array.take() else {
        return vec![spec];
    };
    let indices = array.indices();
    let (Some(&min), Some(&max)) = (indices.first(), indices.last()) else {
        return vec![spec];
    };
    let template = ArrayElement {
        array_id: id,
        array_name: spec.name.clone(),
        index: min,
        count: indices.len() as u32,
        min,
        max,
        spec: array,
    };
    indices
        .into_iter()
        .map(|index| {
            let mut e = spec.clone();
            e.name = ArrayElement::element_name(&template.array_name, index);
            e.element = Some(ArrayElement {
                index,
                ..template.clone()
            });
            e
        })
        .collect()
}

/// Files a job just admitted under its id, and an element under its array; marks it
/// [`Gated`] when something may keep it waiting.
pub(crate) fn register(world: &mut World, e: Entity, spec: &JobSpec, id: JobId) {
    world.resource_mut::<JobIds>().0.insert(id.0, e);
    if let Some(el) = &spec.element {
        world
            .resource_mut::<Arrays>()
            .add(el.array_id, &el.array_name, el.limit(), el.index, e);
    }
    // An element of an array with `%N` is found through its array (see `jobs::gates`).
    if spec.depends_on.is_some() || spec.topology_soft_after.is_some() {
        world.entity_mut(e).insert(Gated);
    }
}

/// Lets go of a job being forgotten: its id, and its place in its array.
pub(crate) fn unregister(ids: &mut JobIds, arrays: &mut Arrays, e: Entity, job: &Job, id: JobId) {
    if ids.0.get(&id.0) == Some(&e) {
        ids.0.remove(&id.0);
    }
    if let Some(el) = &job.spec.element {
        arrays.remove(el.array_id, e);
    }
}

/// A selector that names no job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// Nothing of that name, id or array (or none of the elements asked for).
    #[error("no job {0}")]
    NoSuchJob(String),
    /// `NAME[...]` whose indices do not read.
    #[error("{text}: {error}")]
    BadIndices {
        /// The selector as given.
        text: String,
        /// What is wrong with its indices.
        error: hyperplan_shared::array::ArrayError,
    },
}

/// The names of the jobs `text` names: a job's name; an array's name (every element);
/// `NAME[3-5]` or `NAME[1,7]` (those elements); a job's id; an array's id (every
/// element); `ID_7` or `ID_[3-5]`. Elements that are not there are left out; none at all
/// is [`SelectError::NoSuchJob`].
pub fn select(world: &World, text: &str) -> Result<Vec<String>, SelectError> {
    let names = world.resource::<JobNames>();
    let arrays = world.resource::<Arrays>();
    let ids = world.resource::<JobIds>();
    let none = || SelectError::NoSuchJob(text.to_string());
    if names.0.contains_key(text) {
        // A plain job, or one element by its own name.
        return Ok(vec![text.to_string()]);
    }
    let name_of = |e: Entity| world.get::<Job>(e).map(|j| j.spec.name.clone());
    // The array and the indices asked for (`None`: all of them).
    let (array, indices): (Option<u64>, Option<&str>) = match split_selector(text) {
        (base, rest) if base.bytes().all(|b| b.is_ascii_digit()) && !base.is_empty() => {
            let Ok(id) = base.parse::<u64>() else {
                return Err(none());
            };
            match (arrays.by_id.contains_key(&id), rest) {
                (true, rest) => (Some(id), rest),
                (false, None) => {
                    return ids
                        .0
                        .get(&id)
                        .and_then(|&e| name_of(e))
                        .map(|n| vec![n])
                        .ok_or_else(none);
                }
                (false, Some(_)) => return Err(none()),
            }
        }
        (base, rest) => (arrays.named(base).map(|(id, _)| id), rest),
    };
    let entry = array.and_then(|id| arrays.by_id.get(&id)).ok_or_else(none)?;
    let wanted = match indices {
        None => None,
        Some(spec) => Some(ArraySpec::parse(spec).map_err(|error| SelectError::BadIndices {
            text: text.to_string(),
            error,
        })?),
    };
    let keep = |i: u32| {
        wanted.as_ref().is_none_or(|w| {
            w.ranges
                .iter()
                .any(|r| i >= r.start && i <= r.end && (i - r.start).is_multiple_of(r.step))
        })
    };
    let out: Vec<String> = entry
        .elements
        .iter()
        .filter(|&&(i, _)| keep(i))
        .filter_map(|&(_, e)| name_of(e))
        .collect();
    if out.is_empty() {
        return Err(none());
    }
    Ok(out)
}

impl crate::Planner {
    /// The job `explain TEXT` is about: a job's name as it is; for an array (`sweep`,
    /// `sweep[3-5]`, its id) its first element that waits, else its first one.
    pub fn explained_job(&self, text: &str) -> String {
        let world = self.world();
        let Ok(names) = select(world, text) else {
            return text.to_string();
        };
        let waiting = names.iter().find(|n| {
            let e = world.resource::<JobNames>().0.get(n.as_str()).copied();
            e.and_then(|e| world.get::<crate::model::components::JobState>(e))
                .is_some_and(|st| st.phase == crate::model::components::JobPhase::Pending)
        });
        waiting.or(names.first()).cloned().unwrap_or_else(|| text.to_string())
    }
}

/// `NAME[SPEC]` → (`NAME`, `SPEC`); `17_3` or `17_[3-5]` → (`17`, `3` or `3-5`); else
/// the text alone.
fn split_selector(text: &str) -> (&str, Option<&str>) {
    if let Some((id, index)) = text.split_once('_')
        && !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_digit())
    {
        let index = index
            .strip_prefix('[')
            .and_then(|i| i.strip_suffix(']'))
            .unwrap_or(index);
        return (id, Some(index));
    }
    if let Some((base, rest)) = text.split_once('[')
        && let Some(spec) = rest.strip_suffix(']')
    {
        return (base, Some(spec));
    }
    (text, None)
}

/// The name `singleton` counts jobs by: an element's array's name; a job renamed
/// `NAME.ID` at submit (a singleton whose name its owner's live job had) by `NAME`.
pub fn singleton_key(spec: &JobSpec, id: JobId) -> &str {
    if let Some(el) = &spec.element {
        return &el.array_name;
    }
    let suffix = format!(".{}", id.0);
    spec.name.strip_suffix(suffix.as_str()).unwrap_or(&spec.name)
}

/// Whether `name` is an element's (`NAME[INDEX]`).
pub fn is_element_name(name: &str) -> bool {
    split_element_name(name).is_some()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::testing::JobBuilder;

    #[test]
    fn an_array_splits_into_named_elements_that_know_their_array() {
        let mut a = JobBuilder::gang("sweep", 1, "cpu=1").build();
        a.array = Some(ArraySpec::parse("1-5:2,9%2").unwrap());
        let b = JobBuilder::gang("after", 1, "cpu=1").build();
        let out = expand(vec![b, a], 10);
        let names: Vec<&str> = out.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["after", "sweep[1]", "sweep[3]", "sweep[5]", "sweep[9]"]);
        let el = out[2].element.as_ref().unwrap();
        assert_eq!((el.array_id, el.index, el.count, el.min, el.max), (11, 3, 4, 1, 9));
        assert_eq!(el.limit(), Some(2));
        assert_eq!(el.spec.to_string(), "1-5:2,9%2");
        assert!(out.iter().all(|j| j.array.is_none()));
        assert!(is_element_name("sweep[3]") && !is_element_name("sweep"));
    }

    #[test]
    fn selectors_split() {
        assert_eq!(split_selector("sweep[3-5]"), ("sweep", Some("3-5")));
        assert_eq!(split_selector("17_3"), ("17", Some("3")));
        assert_eq!(split_selector("17_[3-5]"), ("17", Some("3-5")));
        assert_eq!(split_selector("my_job"), ("my_job", None));
        assert_eq!(split_selector("17"), ("17", None));
    }
}
