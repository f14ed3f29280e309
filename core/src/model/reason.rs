//! [`Reason`]: why a job waits, was rejected or ended, as data. The systems that decide
//! set a variant with what they found (a code, a HyperNode, a limit, job ids); `status`
//! and `explain` show its [`Display`](std::fmt::Display), the very sentences users read
//! before it was a type; metrics label it by [`Reason::kind`]; scripts and tests match
//! [`Reason::code`] or the variant, never the English. The store keeps it (see
//! `model::record`): a reason an older build stored as a sentence loads as
//! [`Reason::Text`].

use std::fmt;

use hyperplan_shared::CPU;
use hyperplan_shared::quantity::format_quantity;
use serde::{Deserialize, Serialize};

use super::gate::Gate;
use super::held::Held;

/// Why a job has no room now, each with the code its reason starts with
/// (`SegmentNoFit: segment …`), stable for scripts to match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NoFit {
    /// The cluster has too little free room for the gang, in all.
    Resource,
    /// No HyperNode within the job's tier limit has room for the gang.
    Topo,
    /// Nodes with room refuse a task under its NUMA policy.
    Numa,
    /// A partition has no HyperNode within its limit with room.
    Partition,
    /// A segment has no HyperNode of its tier with room.
    Segment,
    /// Room enough everywhere it is looked for, but not for the whole gang at once.
    Gang,
}

impl NoFit {
    /// Every kind of no-fit.
    pub const ALL: [NoFit; 6] = [
        NoFit::Resource,
        NoFit::Topo,
        NoFit::Numa,
        NoFit::Partition,
        NoFit::Segment,
        NoFit::Gang,
    ];

    /// The code users see first in the reason (`TopoNoFit`).
    pub fn code(self) -> &'static str {
        match self {
            NoFit::Resource => "ResourceNoFit",
            NoFit::Topo => "TopoNoFit",
            NoFit::Numa => "NumaNoFit",
            NoFit::Partition => "PartitionNoFit",
            NoFit::Segment => "SegmentNoFit",
            NoFit::Gang => "GangNoFit",
        }
    }
}

/// Another job a reason names: by id (what decides), and by name (what people read).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRef {
    /// Its id (`JobId`).
    pub id: u64,
    /// Its name when the reason was made.
    pub name: String,
}

/// What a limit would come to with the job: in base units of `resource` (milli-CPUs,
/// bytes), shown the way quantities are written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverLimit {
    /// The resource (`cpu`, `memory`, `nvidia.com/gpu`).
    pub resource: String,
    /// In use with the job.
    pub would: u64,
    /// The limit.
    pub limit: u64,
    /// In use now.
    pub in_use: u64,
    /// What the job asks.
    pub asks: u64,
}

/// An account a quota belongs to: the job's own, or one above it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountRef {
    /// The account whose quota it is.
    pub name: String,
    /// The job's own account, when the quota is one of an account above it.
    pub above: Option<String>,
}

/// Why a job waits, was rejected, or ended. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    /// No room that fits now (`TopoNoFit: no HyperNode up to tier 1 has …`).
    NoFit {
        /// Which kind (its code).
        fit: NoFit,
        /// What came closest, in words.
        detail: String,
    },
    /// Rejected: no room even on the empty cluster (`GangNoFit: even on the empty
    /// cluster: …`).
    NoFitEver {
        /// Which kind (its code).
        fit: NoFit,
        /// What came closest, in words.
        detail: String,
    },
    /// Rejected: no node offers a resource a task asks for.
    NoSuchResource {
        /// The task (its name in the spec).
        task: String,
        /// The resource.
        resource: String,
    },
    /// Rejected: a task is bigger than every node.
    TooBig {
        /// The task (its name in the spec).
        task: String,
        /// What it asks, in words.
        asks: String,
    },
    /// Rejected: `highestTierAllowed` is below every tier.
    TierTooLow {
        /// The job's limit.
        tier: u32,
        /// The lowest tier.
        lowest: u32,
    },
    /// After a restart: agents the store names have not registered yet.
    AwaitingAgents(u32),
    /// After a restart: others may still register; `cannot` is why the nodes registered
    /// so far could never hold the job, if it is that.
    Rejoining {
        /// What would reject it on a whole cluster.
        cannot: Option<Box<Reason>>,
    },
    /// Held (`hyperplan hold`, `submit --hold`).
    Held(Held),
    /// Its begin time (Unix seconds) has not come.
    Begins(u64),
    /// A dependency, its array's limit, or `singleton`.
    Gate(Gate),
    /// Its dependency can never be met: cancelled (it did not ask
    /// `keepOnFailedDependency`). The conditions, in words.
    DependencyNeverMet(String),
    /// Its queue runs its `maxRunningJobs` already.
    QueueJobs {
        /// The queue.
        queue: String,
        /// Its `maxRunningJobs`.
        max: u32,
    },
    /// Its queue's limit on a resource.
    QueueLimit {
        /// The queue.
        queue: String,
        /// Where the job would take it.
        over: OverLimit,
    },
    /// Its user's `maxPerUser` in the queue.
    UserLimit {
        /// The user.
        user: String,
        /// The queue.
        queue: String,
        /// Where the job would take it.
        over: OverLimit,
    },
    /// An account's `maxRunningJobs`.
    AccountJobs {
        /// The account.
        account: AccountRef,
        /// Its `maxRunningJobs`.
        max: u32,
    },
    /// An account's `maxCpus` (the figures in milli-CPUs).
    AccountCpus {
        /// The account.
        account: AccountRef,
        /// Where the job would take it.
        over: OverLimit,
    },
    /// An account's `maxGpus` (the figures in GPUs).
    AccountGpus {
        /// The account.
        account: AccountRef,
        /// Where the job would take it.
        over: OverLimit,
    },
    /// It preempts these jobs, and starts when they have ended.
    Preempting {
        /// Where (`None`: the cluster).
        hyper_node: Option<String>,
        /// The victims, in their order.
        victims: Vec<JobRef>,
    },
    /// Preempted by a job, and why it could be.
    PreemptedBy {
        /// The job that preempted it.
        by: JobRef,
        /// Why it could be (its priority is below, …).
        why: String,
    },
    /// Back to pending (or going back, once its tasks ended) for this reason.
    Requeued(Box<Reason>),
    /// A task ended its job: failed, timed out, was lost.
    TaskEnded {
        /// The task (`worker-0`).
        task: String,
        /// How (`exited with code 3`).
        how: String,
    },
    /// A task was lost (the job asks `requeue`).
    TaskLost {
        /// The task (`worker-0`).
        task: String,
        /// Why (`its node was lost`).
        why: String,
    },
    /// No spare node to start lost tasks again (`onNodeLost: replace`).
    NoSpareNode {
        /// Where they were looked for (a HyperNode, or `the cluster`).
        within: String,
        /// The lost tasks.
        tasks: Vec<String>,
    },
    /// Refused when it came (its queue, its account, too many tasks, a task's NUMA
    /// policy): the check's words.
    Refused(String),
    /// A sentence, as an older build stored it, or said without a variant of its own.
    #[serde(untagged)]
    Text(String),
}

/// The kind of a reason, a metrics label with few values (`hyperplan_pending_jobs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReasonKind {
    /// A hold or a begin time.
    Held,
    /// A dependency, or `singleton`.
    Dependency,
    /// Its array's `%N` limit.
    ArrayLimit,
    /// A queue's, a user's or an account's limit.
    QueueLimit,
    /// Agents to register after a restart.
    AwaitingAgents,
    /// A preemption, made or suffered.
    Preemption,
    /// Requeued, for another reason than a preemption.
    Requeued,
    /// No room that fits: the common case, and everything else.
    Resources,
}

impl ReasonKind {
    /// The label's value (`queue_limit`).
    pub fn label(self) -> &'static str {
        match self {
            ReasonKind::Held => "held",
            ReasonKind::Dependency => "dependency",
            ReasonKind::ArrayLimit => "array_limit",
            ReasonKind::QueueLimit => "queue_limit",
            ReasonKind::AwaitingAgents => "awaiting_agents",
            ReasonKind::Preemption => "preemption",
            ReasonKind::Requeued => "requeued",
            ReasonKind::Resources => "resources",
        }
    }
}

impl Reason {
    /// The stable code of the reason, one word: the no-fit codes users see first in the
    /// reason (`TopoNoFit`), and one per other variant.
    pub fn code(&self) -> &'static str {
        match self {
            Reason::NoFit { fit, .. } | Reason::NoFitEver { fit, .. } => fit.code(),
            Reason::NoSuchResource { .. } => "NoSuchResource",
            Reason::TooBig { .. } => "TooBig",
            Reason::TierTooLow { .. } => "TierTooLow",
            Reason::AwaitingAgents(_) => "AwaitingAgents",
            Reason::Rejoining { .. } => "Rejoining",
            Reason::Held(_) => "Held",
            Reason::Begins(_) => "BeginTime",
            Reason::Gate(Gate::Dependency(_)) => "Dependency",
            Reason::Gate(Gate::NeverMet(_)) => "DependencyNeverMet",
            Reason::Gate(Gate::ArrayLimit { .. }) => "ArrayLimit",
            Reason::Gate(Gate::Singleton { .. }) => "Singleton",
            Reason::DependencyNeverMet(_) => "DependencyCancelled",
            Reason::QueueJobs { .. } => "QueueMaxRunningJobs",
            Reason::QueueLimit { .. } => "QueueLimit",
            Reason::UserLimit { .. } => "QueueMaxPerUser",
            Reason::AccountJobs { .. } => "AccountMaxRunningJobs",
            Reason::AccountCpus { .. } => "AccountMaxCpus",
            Reason::AccountGpus { .. } => "AccountMaxGpus",
            Reason::Preempting { .. } => "Preempting",
            Reason::PreemptedBy { .. } => "PreemptedBy",
            Reason::Requeued(_) => "Requeued",
            Reason::TaskEnded { .. } => "TaskEnded",
            Reason::TaskLost { .. } => "TaskLost",
            Reason::NoSpareNode { .. } => "NoSpareNode",
            Reason::Refused(_) => "Refused",
            Reason::Text(_) => "Text",
        }
    }

    /// Its metrics label (see [`ReasonKind`]); a requeue for a preemption is a
    /// preemption.
    pub fn kind(&self) -> ReasonKind {
        match self {
            Reason::Held(_) | Reason::Begins(_) => ReasonKind::Held,
            Reason::Gate(Gate::ArrayLimit { .. }) => ReasonKind::ArrayLimit,
            Reason::Gate(_) | Reason::DependencyNeverMet(_) => ReasonKind::Dependency,
            Reason::QueueJobs { .. }
            | Reason::QueueLimit { .. }
            | Reason::UserLimit { .. }
            | Reason::AccountJobs { .. }
            | Reason::AccountCpus { .. }
            | Reason::AccountGpus { .. } => ReasonKind::QueueLimit,
            Reason::AwaitingAgents(_) | Reason::Rejoining { .. } => ReasonKind::AwaitingAgents,
            Reason::Preempting { .. } | Reason::PreemptedBy { .. } => ReasonKind::Preemption,
            Reason::Requeued(why) if why.kind() == ReasonKind::Preemption => ReasonKind::Preemption,
            Reason::Requeued(_) => ReasonKind::Requeued,
            Reason::NoFit { .. }
            | Reason::NoFitEver { .. }
            | Reason::NoSuchResource { .. }
            | Reason::TooBig { .. }
            | Reason::TierTooLow { .. }
            | Reason::TaskEnded { .. }
            | Reason::TaskLost { .. }
            | Reason::NoSpareNode { .. }
            | Reason::Refused(_)
            | Reason::Text(_) => ReasonKind::Resources,
        }
    }

    /// Whether it is a hold's, a begin time's or a gate's (what `jobs::holds::not_yet`
    /// gives): a job that shows one and no longer waits was released, reached its begin
    /// time or passed its gate.
    pub fn is_wait(&self) -> bool {
        matches!(self, Reason::Held(_) | Reason::Begins(_) | Reason::Gate(_))
    }

    /// Whether it says what `other` says: the same reason, or one an older build
    /// stored as the same sentence (a rejection restored from its store is not announced
    /// again).
    pub fn says_same(&self, other: &Reason) -> bool {
        match (self, other) {
            (Reason::Text(_), _) | (_, Reason::Text(_)) => self.to_string() == other.to_string(),
            _ => self == other,
        }
    }

    /// The no-fit it is, waiting or rejected.
    pub fn no_fit(&self) -> Option<NoFit> {
        match self {
            Reason::NoFit { fit, .. } | Reason::NoFitEver { fit, .. } => Some(*fit),
            _ => None,
        }
    }
}

/// The start of [`Reason::Rejoining`]'s sentence.
const REJOINING: &str = "waiting for agents to register after the planner restarted";

/// A preempting job's sentence: how many victims, where, and who (by the names given:
/// `caller` gives other names under `privateData`).
pub fn preempting_text<S: AsRef<str>>(victims: &[S], hyper_node: Option<&str>) -> String {
    let names: Vec<&str> = victims.iter().map(AsRef::as_ref).collect();
    format!(
        "preempting {} job{} in {} ({}); it starts when they have ended",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        hyper_node.unwrap_or("the cluster"),
        names.join(", ")
    )
}

/// How a victim's sentence names the job that preempted it.
pub fn preempted_by_text(preemptor: &str) -> String {
    format!("preempted by job {preemptor}")
}

impl fmt::Display for OverLimit {
    /// `cpu 9 of its limit 8 (in use 5, the job asks 4)`: the queue's form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = |v| format_quantity(&self.resource, v);
        write!(
            f,
            "{} {} of its limit {} (in use {}, the job asks {})",
            self.resource,
            q(self.would),
            q(self.limit),
            q(self.in_use),
            q(self.asks)
        )
    }
}

impl fmt::Display for AccountRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.above {
            None => write!(f, "account {}", self.name),
            Some(own) => write!(f, "account {} (above {own})", self.name),
        }
    }
}

impl fmt::Display for Reason {
    /// What `status` and `explain` say.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoFit { fit, detail } => write!(f, "{}: {detail}", fit.code()),
            Reason::NoFitEver { fit, detail } => {
                write!(f, "{}: even on the empty cluster: {detail}", fit.code())
            }
            Reason::NoSuchResource { task, resource } => {
                write!(f, "task {task}: no node offers resource {resource}")
            }
            Reason::TooBig { task, asks } => write!(f, "task {task} ({asks}) is bigger than every node"),
            Reason::TierTooLow { tier, lowest } => write!(
                f,
                "highestTierAllowed {tier} is below every tier (the lowest is {lowest})"
            ),
            Reason::AwaitingAgents(n) => {
                write!(f, "waiting for {n} agent(s) known from the store to register")
            }
            Reason::Rejoining { cannot: None } => f.write_str(REJOINING),
            Reason::Rejoining { cannot: Some(why) } => {
                write!(f, "{REJOINING}: the nodes registered so far could not hold it ({why})")
            }
            Reason::Held(h) if h.admin => write!(f, "held by an admin ({})", h.by),
            Reason::Held(h) => write!(f, "held by {}", h.by),
            Reason::Begins(b) => write!(f, "begins {}", hyperplan_shared::begin::format_begin(*b)),
            Reason::Gate(Gate::Dependency(what)) => write!(f, "Dependency: {what}"),
            Reason::Gate(Gate::NeverMet(what)) => write!(
                f,
                "Dependency never met: {what}; kept waiting (keepOnFailedDependency): cancel it"
            ),
            Reason::Gate(Gate::ArrayLimit { array, limit }) => {
                write!(f, "array limit: {limit} elements of {array} run at once (%{limit})")
            }
            Reason::Gate(Gate::Singleton { other }) => {
                write!(f, "singleton: waits for {other} (same name and user) to end")
            }
            Reason::DependencyNeverMet(why) => write!(
                f,
                "Dependency never met: {why}; cancelled (keepOnFailedDependency: true keeps such a job waiting)"
            ),
            Reason::QueueJobs { queue, max } => {
                write!(f, "queue {queue} runs its maxRunningJobs ({max}) jobs already")
            }
            Reason::QueueLimit { queue, over } => write!(f, "queue {queue} would use {over}"),
            Reason::UserLimit { user, queue, over } => {
                let q = |v| format_quantity(&over.resource, v);
                write!(
                    f,
                    "user {user} would use {} {} in queue {queue}, above its maxPerUser {} (in use {}, the job asks {})",
                    over.resource,
                    q(over.would),
                    q(over.limit),
                    q(over.in_use),
                    q(over.asks)
                )
            }
            Reason::AccountJobs { account, max } => {
                write!(f, "{account} runs its maxRunningJobs ({max}) jobs already")
            }
            Reason::AccountCpus { account, over } => {
                let q = |v| format_quantity(CPU, v);
                write!(
                    f,
                    "{account} would use {} CPUs of its maxCpus {} (in use {}, the job asks {})",
                    q(over.would),
                    q(over.limit),
                    q(over.in_use),
                    q(over.asks)
                )
            }
            Reason::AccountGpus { account, over } => write!(
                f,
                "{account} would use {} GPUs of its maxGpus {} (in use {}, the job asks {})",
                over.would, over.limit, over.in_use, over.asks
            ),
            Reason::Preempting { hyper_node, victims } => {
                let names: Vec<&str> = victims.iter().map(|v| v.name.as_str()).collect();
                f.write_str(&preempting_text(&names, hyper_node.as_deref()))
            }
            Reason::PreemptedBy { by, why } => write!(f, "{}: {why}", preempted_by_text(&by.name)),
            Reason::Requeued(why) => write!(f, "requeued: {why}"),
            Reason::TaskEnded { task, how } => write!(f, "task {task} {how}"),
            Reason::TaskLost { task, why } => write!(f, "task {task} lost ({why})"),
            Reason::NoSpareNode { within, tasks } => write!(
                f,
                "no spare node in {within} to start its lost task{} {} again",
                if tasks.len() == 1 { "" } else { "s" },
                tasks.join(", ")
            ),
            Reason::Refused(why) => f.write_str(why),
            Reason::Text(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn codes_are_distinct_single_words_scripts_can_split_off() {
        let mut seen = std::collections::BTreeSet::new();
        for fit in NoFit::ALL {
            let c = fit.code();
            assert!(
                c.ends_with("NoFit") && c.chars().all(|ch| ch.is_ascii_alphanumeric()),
                "{c}"
            );
            assert!(seen.insert(c), "{c} twice");
            let waiting = Reason::NoFit {
                fit,
                detail: "x".into(),
            };
            assert_eq!(waiting.to_string(), format!("{c}: x"));
            assert_eq!(waiting.code(), c);
        }
    }

    /// The sentences are those `status` showed when they were built as strings.
    #[test]
    fn reasons_read_as_they_always_did() {
        let alice = Held {
            by: "alice".into(),
            admin: false,
        };
        let cases: Vec<(Reason, &str)> = vec![
            (Reason::Held(alice), "held by alice"),
            (
                Reason::Held(Held {
                    by: "root".into(),
                    admin: true,
                }),
                "held by an admin (root)",
            ),
            (Reason::Begins(1_798_099_200), "begins 2026-12-24T08:00Z"),
            (
                Reason::AwaitingAgents(2),
                "waiting for 2 agent(s) known from the store to register",
            ),
            (
                Reason::Rejoining {
                    cannot: Some(Box::new(Reason::TooBig {
                        task: "t".into(),
                        asks: "cpu=4".into(),
                    })),
                },
                "waiting for agents to register after the planner restarted: the nodes registered so far could not hold it (task t (cpu=4) is bigger than every node)",
            ),
            (
                Reason::QueueJobs {
                    queue: "gpu".into(),
                    max: 4,
                },
                "queue gpu runs its maxRunningJobs (4) jobs already",
            ),
            (
                Reason::QueueLimit {
                    queue: "gpu".into(),
                    over: OverLimit {
                        resource: "cpu".into(),
                        would: 9000,
                        limit: 8000,
                        in_use: 5000,
                        asks: 4000,
                    },
                },
                "queue gpu would use cpu 9 of its limit 8 (in use 5, the job asks 4)",
            ),
            (
                Reason::AccountJobs {
                    account: AccountRef {
                        name: "science".into(),
                        above: Some("physics".into()),
                    },
                    max: 1,
                },
                "account science (above physics) runs its maxRunningJobs (1) jobs already",
            ),
            (
                Reason::Requeued(Box::new(Reason::PreemptedBy {
                    by: JobRef {
                        id: 7,
                        name: "big".into(),
                    },
                    why: "its priority is below".into(),
                })),
                "requeued: preempted by job big: its priority is below",
            ),
            (
                Reason::Preempting {
                    hyper_node: Some("leaf-4".into()),
                    victims: vec![
                        JobRef {
                            id: 1,
                            name: "w1".into(),
                        },
                        JobRef {
                            id: 2,
                            name: "w2".into(),
                        },
                    ],
                },
                "preempting 2 jobs in leaf-4 (w1, w2); it starts when they have ended",
            ),
            (
                Reason::NoSpareNode {
                    within: "leaf-1".into(),
                    tasks: vec!["w-0".into()],
                },
                "no spare node in leaf-1 to start its lost task w-0 again",
            ),
        ];
        for (reason, text) in cases {
            assert_eq!(reason.to_string(), text, "{reason:?}");
        }
    }

    #[test]
    fn a_sentence_an_older_build_stored_says_the_same_as_its_reason() {
        let typed = Reason::NoFitEver {
            fit: NoFit::Topo,
            detail: "best is spine-1 with 4".into(),
        };
        let old = Reason::Text("TopoNoFit: even on the empty cluster: best is spine-1 with 4".into());
        assert!(old.says_same(&typed) && typed.says_same(&old) && typed.says_same(&typed));
        assert!(!Reason::Text("TopoNoFit".into()).says_same(&typed));
    }

    #[test]
    fn reasons_fall_into_a_few_kinds() {
        let by = JobRef {
            id: 3,
            name: "x".into(),
        };
        let preempted = Reason::PreemptedBy { by, why: "w".into() };
        assert_eq!(Reason::Requeued(Box::new(preempted)).kind(), ReasonKind::Preemption);
        let lost = Reason::TaskLost {
            task: "t".into(),
            why: "its node was lost".into(),
        };
        assert_eq!(Reason::Requeued(Box::new(lost)).kind().label(), "requeued");
        let array = Gate::ArrayLimit {
            array: "sweep".into(),
            limit: 3,
        };
        assert_eq!(Reason::Gate(array).kind().label(), "array_limit");
        assert_eq!(
            Reason::Gate(Gate::Singleton { other: "n".into() }).kind().label(),
            "dependency"
        );
        assert_eq!(Reason::AwaitingAgents(2).kind().label(), "awaiting_agents");
        assert_eq!(Reason::Begins(0).kind().label(), "held");
        assert_eq!(Reason::Text("anything".into()).kind().label(), "resources");
    }

    /// The store: a typed reason comes back as it went; a sentence an older build
    /// stored comes back as text that reads the same.
    #[test]
    fn stored_reasons_round_trip_and_old_sentences_load_as_text() {
        let typed = Reason::Requeued(Box::new(Reason::PreemptedBy {
            by: JobRef {
                id: 9,
                name: "big".into(),
            },
            why: "its priority is below".into(),
        }));
        let bytes = rmp_serde::to_vec_named(&typed).unwrap();
        assert_eq!(rmp_serde::from_slice::<Reason>(&bytes).unwrap(), typed);
        let json = serde_json::to_string(&typed).unwrap();
        assert_eq!(serde_json::from_str::<Reason>(&json).unwrap(), typed);
        let old = "task worker-0 exited with code 3";
        let bytes = rmp_serde::to_vec_named(old).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<Reason>(&bytes).unwrap(),
            Reason::Text(old.into())
        );
        // Text is stored as the bare sentence, as before.
        assert_eq!(rmp_serde::to_vec_named(&Reason::Text(old.into())).unwrap(), bytes);
        // A sentence that is a variant's name is still a sentence.
        let bytes = rmp_serde::to_vec_named("held").unwrap();
        assert_eq!(
            rmp_serde::from_slice::<Reason>(&bytes).unwrap(),
            Reason::Text("held".into())
        );
    }
}
