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

/// Why a pending job is not tried now.
#[derive(Clone, Debug, PartialEq, Eq)]
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

impl Gate {
    /// What `status` and `explain` say of it.
    pub fn reason(&self) -> String {
        match self {
            Gate::Dependency(what) => format!("{DEPENDENCY}{what}"),
            Gate::NeverMet(what) => {
                format!("{NEVER_MET}{what}; kept waiting (keepOnFailedDependency): cancel it")
            }
            Gate::ArrayLimit { array, limit } => {
                format!("{ARRAY_LIMIT}{limit} elements of {array} run at once (%{limit})")
            }
            Gate::Singleton { other } => {
                format!("{SINGLETON}waits for {other} (same name and user) to end")
            }
        }
    }
}

const DEPENDENCY: &str = "Dependency: ";
const NEVER_MET: &str = "Dependency never met: ";
const ARRAY_LIMIT: &str = "array limit: ";
const SINGLETON: &str = "singleton: ";

/// Whether `reason` is one [`Gate::reason`] gave.
pub fn is_gate_reason(reason: &str) -> bool {
    [DEPENDENCY, NEVER_MET, ARRAY_LIMIT, SINGLETON]
        .iter()
        .any(|p| reason.starts_with(p))
}

/// Jobs a gate let go that the walk would not look at by itself (one rejected for its
/// hard topology that turned soft): the walk takes them in at its next run.
#[derive(bevy_ecs::prelude::Resource, Debug, Default)]
pub struct Revisit(pub Vec<bevy_ecs::prelude::Entity>);
