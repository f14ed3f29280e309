//! What the planner core reads from `planner.toml`: `[scoring]` ([`scoring`]), `[numa]`
//! ([`numa`]), `[limits]` ([`limits`]), `[scheduler]` ([`scheduler`]), `[[queue]]`
//! ([`queues`]), `[[account]]` ([`accounts`]) and node health (the heartbeat keys of `[server]`). The daemon parses
//! the whole file and hands these sections here; nothing in this module reads a file.

pub mod accounts;
pub mod checks;
mod error;
pub mod fairshare;
pub mod limits;
pub mod maintenance;
pub mod numa;
pub mod preemption;
pub mod queues;
pub mod scheduler;
pub mod scoring;

use std::time::Duration;

use bevy_ecs::prelude::Resource;

pub use accounts::{AccountConfig, AccountSection, Accounts, accounts_from_sections};
pub use checks::{ChecksConfig, ChecksSection};
pub use error::{ConfigError, parse_error};
pub use fairshare::{FairshareConfig, FairshareSection, FairshareTree, PriorityConfig, PrioritySection};
pub use limits::{LimitsConfig, LimitsSection};
pub use maintenance::{MaintenanceSection, MaintenanceWindow, windows_from_sections};
pub use numa::{NumaConfig, NumaSection};
pub use preemption::{PreemptionConfig, PreemptionSection, PriorityClass, PriorityClassSection};
pub use queues::{DEFAULT_QUEUE, QueueConfig, QueueSection, queues_from_sections};
pub use scheduler::{SchedulerConfig, SchedulerSection};
pub use scoring::{ScoringConfig, ScoringSection, SpanMode};

/// Everything the planner core reads from its configuration.
#[derive(Clone, Debug, PartialEq, Resource)]
pub struct PlannerConfig {
    /// `[scoring]`: how placements are scored.
    pub scoring: ScoringConfig,
    /// `[numa]`: the numa-aware plugin's default policy and score weight.
    pub numa: NumaConfig,
    /// When the core turns a silent node NotReady: `[server]`'s heartbeat keys
    /// (the daemon's `ServerConfig::health`), derived again by the daemon when it starts so its
    /// flags count. The simulator's nodes have no heartbeats.
    pub health: HealthConfig,
    /// `[limits]`: tasks per job, live jobs per user (checked at submit).
    pub limits: LimitsConfig,
    /// `[scheduler]`: reservations and backfill.
    pub scheduler: SchedulerConfig,
    /// `[[queue]]`: `default` first, then the others by name.
    pub queues: Vec<QueueConfig>,
    /// `[[account]]`: the accounts jobs are charged to (none: accounts are free text).
    pub accounts: Accounts,
    /// `[fairshare]`: usage weights and decay.
    pub fairshare: FairshareConfig,
    /// `[priority]`: the multifactor weights.
    pub priority: PriorityConfig,
    /// `[[reservation]]`: planned maintenance windows.
    pub maintenance: Vec<MaintenanceWindow>,
    /// `[preemption]` and `[[priorityClass]]`.
    pub preemption: PreemptionConfig,
    /// `[health]`: what failed health checks do to their node.
    pub checks: ChecksConfig,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            scoring: ScoringConfig::default(),
            numa: NumaConfig::default(),
            health: HealthConfig::default(),
            limits: LimitsConfig::default(),
            scheduler: SchedulerConfig::default(),
            queues: vec![QueueConfig::default_queue()],
            accounts: Accounts::default(),
            fairshare: FairshareConfig::default(),
            priority: PriorityConfig::default(),
            maintenance: Vec::new(),
            preemption: PreemptionConfig::default(),
            checks: ChecksConfig::default(),
        }
    }
}

/// The core's sections of planner.toml as written; the daemon's are checked by the daemon.
#[derive(serde::Deserialize)]
struct CoreSections {
    #[serde(default)]
    scoring: ScoringSection,
    numa: Option<NumaSection>,
    limits: Option<LimitsSection>,
    scheduler: Option<SchedulerSection>,
    #[serde(default)]
    queue: Vec<QueueSection>,
    #[serde(default)]
    account: Vec<AccountSection>,
    fairshare: Option<FairshareSection>,
    priority: Option<PrioritySection>,
    #[serde(default)]
    reservation: Vec<MaintenanceSection>,
    preemption: Option<PreemptionSection>,
    #[serde(default, rename = "priorityClass")]
    priority_class: Vec<PriorityClassSection>,
    health: Option<ChecksSection>,
}

impl PlannerConfig {
    /// From the `[scoring]` and `[numa]` sections; `at` turns a byte offset and a message
    /// into an error naming the file, line and column.
    pub fn from_sections(
        scoring: &ScoringSection,
        numa: Option<&NumaSection>,
        at: &dyn Fn(usize, String) -> ConfigError,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            scoring: ScoringConfig::from_section(scoring, at)?,
            numa: NumaConfig::from_section(numa, at)?,
            ..Self::default()
        })
    }

    /// The core's sections of planner.toml text (other sections are left to the daemon);
    /// `origin` names the file in errors. For tests and tools that plan without a daemon.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let at = |offset: usize, message: String| parse_error(text, origin, offset, message);
        let raw: CoreSections =
            toml::from_str(text).map_err(|e| at(e.span().map_or(usize::MAX, |s| s.start), e.message().to_string()))?;
        let accounts = accounts_from_sections(&raw.account, &at)?;
        Ok(Self {
            limits: LimitsConfig::from_section(raw.limits.as_ref(), &at)?,
            scheduler: SchedulerConfig::from_section(raw.scheduler.as_ref(), &at)?,
            queues: queues_from_sections(&raw.queue, &accounts, &at)?,
            fairshare: FairshareConfig::from_section(raw.fairshare.as_ref(), &accounts, &at)?,
            accounts,
            priority: PriorityConfig::from_section(raw.priority.as_ref(), &at)?,
            maintenance: windows_from_sections(&raw.reservation, &at)?,
            preemption: PreemptionConfig::from_sections(raw.preemption.as_ref(), &raw.priority_class, &at)?,
            checks: ChecksConfig::from_section(raw.health.as_ref(), &at)?,
            ..Self::from_sections(&raw.scoring, raw.numa.as_ref(), &at)?
        })
    }
}

/// Node health as the core decides it (`core::health`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// How often agents heartbeat.
    pub heartbeat_interval: Duration,
    /// Silent intervals after which a node is NotReady.
    pub missed_heartbeats: u32,
    /// NotReady for longer than this, a node's running tasks are lost (`[server]
    /// nodeLostAfter`): their resources are free and their jobs fail or are requeued.
    pub node_lost_after: Duration,
}

/// How much longer the planner waits than its node does before it starts a lost node's
/// fenced tasks (those of jobs it restarts: `onNodeLost: replace` or `requeue`)
/// elsewhere: the node stops them once the planner has not acknowledged a heartbeat for
/// [`HealthConfig::fence_after`] (counted from the heartbeat's sending, so from no later
/// than the planner last heard it); the margin covers the shepherd's check (every half
/// second), the second between SIGTERM and SIGKILL, and the kernel's reaping.
pub const FENCE_MARGIN: Duration = Duration::from_secs(5);

impl HealthConfig {
    /// How long a node may be silent and stay Ready.
    pub fn silent_after(&self) -> Duration {
        self.heartbeat_interval * self.missed_heartbeats
    }

    /// How long after the planner last heard it a node stops its fenced tasks: the
    /// silence that makes it NotReady, then `nodeLostAfter` (what agents are told).
    pub fn fence_after(&self) -> Duration {
        self.silent_after().saturating_add(self.node_lost_after)
    }

    /// When (ms) a node NotReady since `since` and last heard at `heard` (its
    /// registration or last heartbeat; the start for a node known from the store;
    /// `None`: not known) loses its fenced tasks: its other
    /// tasks' time (`since` + `nodeLostAfter`), but never before its node has stopped
    /// them ([`HealthConfig::fence_after`] past `heard`, or past `since` for a node
    /// never heard), and then [`FENCE_MARGIN`] later.
    pub fn fenced_lost_at(&self, since: u64, heard: Option<u64>) -> u64 {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let fenced = heard.unwrap_or(since).saturating_add(ms(self.fence_after()));
        since
            .saturating_add(ms(self.node_lost_after))
            .max(fenced)
            .saturating_add(ms(FENCE_MARGIN))
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(1),
            missed_heartbeats: 3,
            node_lost_after: Duration::from_secs(300),
        }
    }
}
