//! [`Gate`]: what keeps a pending job from being tried besides a hold or a begin time:
//! its dependency, its array's `%N` limit, or `singleton`. Worked out each tick by
//! `jobs::gates` from the jobs it waits for (so never stored: a restart works it out
//! again from the same specs and states).

/// A dependency once decided, for good.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Settled {
    /// Met: the job may start (and stays free of it after a requeue).
    Met,
    /// It can never be met (the job was cancelled, or kept waiting on request): why.
    Never(String),
}

/// Why a pending job is not tried now (its reason, `Reason::Gate`, is stored with an
/// ended job's).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Gate {
    /// Its dependency is not met: the conditions left, with their targets' states
    /// (`afterok:prep (running)`).
    Dependency(String),
    /// Its dependency can never be met, and it asked `keepOnFailedDependency`.
    NeverMet(String),
    /// `limit` elements of its array already run (`%N`).
    ArrayLimit {
        /// The array's name.
        array: String,
        /// `%N`.
        limit: u32,
    },
    /// Another job of its name and user has not ended (`singleton`).
    Singleton {
        /// That job.
        other: String,
    },
}

/// Jobs a gate let go that the walk would not look at by itself (one rejected for its
/// hard topology that turned soft): the walk takes them in at its next run.
#[derive(bevy_ecs::prelude::Resource, Debug, Default)]
pub struct Revisit(pub Vec<bevy_ecs::prelude::Entity>);
