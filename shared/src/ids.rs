//! Typed ids: one macro for every number that names something, so a job's id is never
//! taken for a task's index or a node's. On the wire and in stored records each is its
//! plain integer (serde transparent), so typing them changed no byte anyone reads.

/// Declares a typed id: a newtype over an integer that orders, hashes, prints and
/// (de)serialises as the integer. `dense` ids index arrays too (`ix()`).
///
/// ```
/// hyperplan_shared::typed_id!(
///     /// A widget's number.
///     WidgetId(u64)
/// );
/// assert_eq!(WidgetId(7).to_string(), "7");
/// ```
#[macro_export]
macro_rules! typed_id {
    ($(#[$m:meta])* $name:ident($int:ty)) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $int);

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(&self.0, f)
            }
        }

        impl ::std::convert::From<$int> for $name {
            fn from(v: $int) -> Self {
                Self(v)
            }
        }
    };
    (dense $(#[$m:meta])* $name:ident($int:ty)) => {
        $crate::typed_id!($(#[$m])* $name($int));

        impl $name {
            /// As a `usize`, to index the dense arrays.
            pub fn ix(self) -> usize {
                self.0 as usize
            }
        }
    };
}

typed_id!(
    /// A job's number, given at submit: 1, 2, 3, … in the order submissions are admitted.
    #[cfg_attr(feature = "ecs", derive(bevy_ecs::component::Component))]
    JobId(u64)
);

/// A task: its job and its place in the job (spec order, then replica). Printed as
/// `JOB.INDEX`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct TaskId {
    /// Its job.
    pub job: JobId,
    /// Its place in the job.
    pub index: u32,
}

impl TaskId {
    /// Task `index` of job `job`.
    pub fn new(job: impl Into<JobId>, index: u32) -> Self {
        Self { job: job.into(), index }
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.job, self.index)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_their_integers_on_the_wire() {
        assert_eq!(serde_json::to_string(&JobId(42)).unwrap(), "42");
        let back: JobId = serde_json::from_str("42").unwrap();
        assert_eq!(back, JobId(42));
        assert_eq!(TaskId::new(3u64, 2).to_string(), "3.2");
        assert!(
            TaskId::new(3u64, 9) < TaskId::new(4u64, 0),
            "tasks order by job, then index"
        );
    }
}
