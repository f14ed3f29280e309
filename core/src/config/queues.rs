//! `[[queue]]`: where jobs wait, what each queue is guaranteed and may use, who may submit
//! to it, and its time limits. A `default` queue always exists (written out or not); a job
//! that names no queue goes there.
//!
//! ```toml
//! [[queue]]
//! name = "gpu"
//! priority = 10                                  # queues of higher priority go first
//! weight = 2                                     # fair-share weight among queues
//! quota = { "nvidia.com/gpu" = 512, cpu = 4096 } # guaranteed
//! limit = { "nvidia.com/gpu" = 768 }             # the most it may use, borrowing idle quota
//! maxPerUser = { "nvidia.com/gpu" = 64 }         # the most one user may use in it
//! maxRunningJobs = 100
//! users = ["alice", "bob"]                       # who may submit (with groups; none: everyone)
//! groups = ["ml"]
//! preemptible = false
//! defaultTimeLimit = "1h"                        # for jobs that give none
//! maxTimeLimit = "2d"                            # longer is refused at submit
//! accounts = ["physics"]                         # only jobs charged to these (or below them)
//! ```
//!
//! Amounts are written as in job files (`cpu = 4096` cores, `memory = "512Gi"`).

use std::collections::BTreeMap;

use hyperplan_shared::Resources;
use hyperplan_shared::names::{NameKind, check_name};
use hyperplan_shared::quantity::parse_quantity;
use serde::Deserialize;
use toml::Spanned;

use super::ConfigError;

/// The queue every planner has, and jobs that name none go to.
pub const DEFAULT_QUEUE: &str = "default";

/// One queue, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueConfig {
    /// Its name.
    pub name: String,
    /// Higher goes first, before any other factor.
    pub priority: i32,
    /// Its share among queues for fair share (above 0).
    pub weight: f64,
    /// Guaranteed resources.
    pub quota: Resources,
    /// The most it may use, per resource named (others: no limit).
    pub limit: Resources,
    /// The most one user may use in it, per resource named.
    pub max_per_user: Resources,
    /// The most jobs running at once; `None`: no limit.
    pub max_running_jobs: Option<u32>,
    /// Users allowed (with `groups`); both empty: everyone.
    pub users: Vec<String>,
    /// Unix groups allowed.
    pub groups: Vec<String>,
    /// Its jobs may be preempted (issue 25 acts on it).
    pub preemptible: bool,
    /// Seconds, for a job that gives no `timeLimit`.
    pub default_time_limit: Option<u64>,
    /// Seconds; a job asking for more is refused.
    pub max_time_limit: Option<u64>,
    /// `trees`: the topology trees (top-level HyperNodes, by name) its jobs are placed in,
    /// each job inside one of them; empty: anywhere.
    pub trees: Vec<String>,
    /// `accounts`: the `[[account]]`s (and the accounts below them) whose jobs it takes,
    /// sorted; empty: any.
    pub accounts: Vec<String>,
}

impl QueueConfig {
    /// The `default` queue when planner.toml does not describe it: no limits, everyone.
    pub fn default_queue() -> Self {
        Self {
            name: DEFAULT_QUEUE.into(),
            priority: 0,
            weight: 1.0,
            quota: Resources::default(),
            limit: Resources::default(),
            max_per_user: Resources::default(),
            max_running_jobs: None,
            users: Vec::new(),
            groups: Vec::new(),
            preemptible: false,
            default_time_limit: None,
            max_time_limit: None,
            trees: Vec::new(),
            accounts: Vec::new(),
        }
    }

    /// Whether anyone may submit to it.
    pub fn is_open(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty()
    }
}

/// `[[queue]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QueueSection {
    name: Spanned<String>,
    priority: Option<Spanned<i64>>,
    weight: Option<Spanned<f64>>,
    quota: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
    limit: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
    max_per_user: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
    max_running_jobs: Option<Spanned<i64>>,
    #[serde(default)]
    users: Vec<Spanned<String>>,
    #[serde(default)]
    groups: Vec<Spanned<String>>,
    #[serde(default)]
    preemptible: bool,
    default_time_limit: Option<Spanned<toml::Value>>,
    max_time_limit: Option<Spanned<toml::Value>>,
    #[serde(default)]
    trees: Vec<Spanned<String>>,
    #[serde(default)]
    accounts: Vec<Spanned<String>>,
}

/// Most queues a planner keeps (each is a row in every `hyperplan queues`).
pub const MAX_QUEUES: usize = 1024;

/// Checks the `[[queue]]` sections (a queue's `accounts` against `accounts`); the result
/// always holds `default`, first, then the others in name order.
pub fn queues_from_sections(
    sections: &[QueueSection],
    accounts: &super::Accounts,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<Vec<QueueConfig>, ConfigError> {
    if sections.len() > MAX_QUEUES {
        return Err(at(
            sections[MAX_QUEUES].name.span().start,
            format!(
                "queue: expected at most {MAX_QUEUES} [[queue]] sections, got {}",
                sections.len()
            ),
        ));
    }
    let mut queues: BTreeMap<String, QueueConfig> = BTreeMap::new();
    for s in sections {
        let name = s.name.get_ref();
        check_name(NameKind::Queue, name).map_err(|e| at(s.name.span().start, format!("queue.name: {e}")))?;
        if queues.contains_key(name) {
            return Err(at(
                s.name.span().start,
                format!("queue.name: {name:?} is defined twice; queue names must be unique"),
            ));
        }
        let key = |k: &str| format!("queue {name:?}: {k}");
        let priority = match &s.priority {
            None => 0,
            Some(p) => i32::try_from(*p.get_ref()).map_err(|_| {
                at(
                    p.span().start,
                    format!(
                        "{}: expected a whole number from {} to {}, got {}",
                        key("priority"),
                        i32::MIN,
                        i32::MAX,
                        p.get_ref()
                    ),
                )
            })?,
        };
        let weight = match &s.weight {
            None => 1.0,
            Some(w) if w.get_ref().is_finite() && *w.get_ref() > 0.0 && *w.get_ref() <= 1e6 => *w.get_ref(),
            Some(w) => {
                return Err(at(
                    w.span().start,
                    format!(
                        "{}: expected a number above 0 and at most 1000000, got {}",
                        key("weight"),
                        w.get_ref()
                    ),
                ));
            }
        };
        let amounts =
            |m: &Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>, k: &str| amounts(m.as_ref(), &key(k), at);
        let max_running_jobs = match &s.max_running_jobs {
            None => None,
            Some(v) => Some(u32::try_from(*v.get_ref()).ok().filter(|&n| n > 0).ok_or_else(|| {
                at(
                    v.span().start,
                    format!(
                        "{}: expected a whole number ≥ 1, got {}",
                        key("maxRunningJobs"),
                        v.get_ref()
                    ),
                )
            })?),
        };
        let names = |list: &[Spanned<String>], k: &str| -> Result<Vec<String>, ConfigError> {
            let mut out: Vec<String> = Vec::new();
            for u in list {
                check_name(NameKind::User, u.get_ref()).map_err(|e| at(u.span().start, format!("{}: {e}", key(k))))?;
                out.push(u.get_ref().clone());
            }
            out.sort();
            out.dedup();
            Ok(out)
        };
        let limit_of = |v: &Option<Spanned<toml::Value>>, k: &str| -> Result<Option<u64>, ConfigError> {
            v.as_ref()
                .map(|v| super::fairshare::duration(v, &key(k), at))
                .transpose()
        };
        let queue = QueueConfig {
            name: name.clone(),
            priority,
            weight,
            quota: amounts(&s.quota, "quota")?,
            limit: amounts(&s.limit, "limit")?,
            max_per_user: amounts(&s.max_per_user, "maxPerUser")?,
            max_running_jobs,
            users: names(&s.users, "users")?,
            groups: names(&s.groups, "groups")?,
            preemptible: s.preemptible,
            default_time_limit: limit_of(&s.default_time_limit, "defaultTimeLimit")?,
            max_time_limit: limit_of(&s.max_time_limit, "maxTimeLimit")?,
            trees: {
                let mut out = Vec::new();
                for t in &s.trees {
                    check_name(NameKind::HyperNode, t.get_ref())
                        .map_err(|e| at(t.span().start, format!("{}: {e}", key("trees"))))?;
                    out.push(t.get_ref().clone());
                }
                out.sort();
                out.dedup();
                out
            },
            accounts: {
                let mut out = Vec::new();
                for a in &s.accounts {
                    check_name(NameKind::Account, a.get_ref())
                        .map_err(|e| at(a.span().start, format!("{}: {e}", key("accounts"))))?;
                    if accounts.find(a.get_ref()).is_none() {
                        return Err(at(
                            a.span().start,
                            format!(
                                "{}: no [[account]] {:?} (accounts: {})",
                                key("accounts"),
                                a.get_ref(),
                                if accounts.is_empty() {
                                    "none are defined".to_string()
                                } else {
                                    accounts.names()
                                }
                            ),
                        ));
                    }
                    out.push(a.get_ref().clone());
                }
                out.sort();
                out.dedup();
                out
            },
        };
        if let (Some(d), Some(m)) = (queue.default_time_limit, queue.max_time_limit)
            && d > m
            && let Some(v) = &s.default_time_limit
        {
            return Err(at(
                v.span().start,
                format!("{}: {d} s is above maxTimeLimit ({m} s)", key("defaultTimeLimit")),
            ));
        }
        for (r, l) in queue.limit.iter() {
            let q = queue.quota.get(r);
            if l < q
                && let Some(v) = &s.limit
            {
                return Err(at(
                    v.span().start,
                    format!(
                        "{}: {r} {l} is below its quota ({q}); a queue may always use its quota",
                        key("limit")
                    ),
                ));
            }
        }
        queues.insert(name.clone(), queue);
    }
    let default = queues.remove(DEFAULT_QUEUE).unwrap_or_else(QueueConfig::default_queue);
    Ok(std::iter::once(default).chain(queues.into_values()).collect())
}

/// A table of amounts (`{ cpu = 4096, memory = "512Gi" }`) as resources in base units.
fn amounts(
    m: Option<&Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
    key: &str,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<Resources, ConfigError> {
    let mut out = Resources::default();
    let Some(m) = m else { return Ok(out) };
    for (name, v) in m.get_ref() {
        let text = match v.get_ref() {
            toml::Value::Integer(i) if *i >= 0 => i.to_string(),
            toml::Value::Float(f) if *f >= 0.0 && f.is_finite() => f.to_string(),
            toml::Value::String(s) => s.clone(),
            other => {
                return Err(at(
                    v.span().start,
                    format!(
                        "{key}.{name}: expected an amount (e.g. 4096 or \"512Gi\"), got {}",
                        describe(other)
                    ),
                ));
            }
        };
        let base = parse_quantity(name, &text).map_err(|e| at(v.span().start, format!("{key}.{name}: {e}")))?;
        out.0.insert(name.clone(), base);
    }
    Ok(out)
}

/// A value as an error shows it: a negative number as written, anything else by type.
fn describe(v: &toml::Value) -> String {
    match v {
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        other => other.type_str().to_string(),
    }
}
