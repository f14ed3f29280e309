//! `hyperplan queues`: every queue of the planner (`[[queue]]` in planner.toml), like
//! Slurm's `sshare` and `sprio` summaries: what each queue is guaranteed and may use, what
//! it uses and borrows, its jobs and fair share, then its busiest users.

use std::collections::BTreeMap;

use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::quantity::format_quantity;
use hyperplan_shared::status::{QueueStatus, QueuesReport};
use hyperplan_shared::timelimit::format_time_limit;

use super::columns::columns;
use super::{Output, long_help, run_request};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan queues
  hyperplan queues --output json | jq '.queues[] | {name, pendingJobs, fairshare}'
  hyperplan queues --output json | jq '.queues[] | select(.borrowed != {}) | .name'";

/// Show the queues: quota, use, borrowing, limits, jobs and fair share.
///
/// Queues are configured as `[[queue]]` sections of the planner's planner.toml (name,
/// priority, weight, quota, limit, maxPerUser, maxRunningJobs, users, groups,
/// defaultTimeLimit, maxTimeLimit); a `default` queue always exists, and a job that names
/// no `queue` goes there. Any user may list them.
///
/// One row per queue, `default` first: NAME; PRIO, its priority (the jobs of a queue of
/// higher priority are considered before any other's, whatever their score); WEIGHT, its
/// share in fair share among queues; QUOTA, what it is guaranteed (`-`: nothing); USED,
/// what its running tasks hold; BORROWED, what it uses beyond its quota: room that was
/// idle when its jobs started (other queues' unused quota, or room no queue is guaranteed),
/// which its running jobs keep until they end; LIMIT, the most it may use, quota and
/// borrowing together (`-`: no limit beyond the cluster);
/// RUNNING and PENDING jobs; FAIRSHARE, its fair-share factor from 0 (it used far more than
/// its weight's share lately) to 1 (it used nothing). Amounts are per resource, `cpu` in
/// cores (`500m` for millicores), `memory` as `64Gi`, others as counts.
///
/// Under the table, per queue, what bounds its users and jobs (maxPerUser, maxRunningJobs,
/// time limits, who may submit), then its busiest users (at most 5): USAGE, their decayed
/// use (resource-seconds weighted by `[fairshare] weights`, halving every `halfLife`),
/// FAIRSHARE, the factor a job of theirs in that queue gets now, and USED, what they hold.
/// `hyperplan status JOB` shows a waiting job's rank and each factor of its priority.
///
/// With `--output json`: `{"queues": [{"name", "priority", "weight", "quota", "limit",
/// "maxPerUser", "maxRunningJobs", "used", "borrowed", "runningJobs", "pendingJobs",
/// "fairshare", "usage", "users": [{"user", "usage", "fairshare", "used"}],
/// "defaultTimeLimit", "maxTimeLimit", "allowedUsers", "allowedGroups"}]}`, amounts in base
/// units (cpu in millicores, memory in bytes) and times in seconds.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    run_request(&args.client, RequestCommand::Queues, args.output, "queue list", render)
}

/// The queue table, each queue's bounds, then the busiest users of each queue.
pub fn render(report: &QueuesReport) -> String {
    if report.queues.is_empty() {
        return "no queues\n".into();
    }
    let mut rows: Vec<[String; 10]> = vec![[
        "NAME".into(),
        "PRIO".into(),
        "WEIGHT".into(),
        "QUOTA".into(),
        "USED".into(),
        "BORROWED".into(),
        "LIMIT".into(),
        "RUNNING".into(),
        "PENDING".into(),
        "FAIRSHARE".into(),
    ]];
    for q in &report.queues {
        rows.push([
            q.name.clone(),
            q.priority.to_string(),
            number(q.weight),
            amounts(&q.quota),
            held(&q.used),
            held(&q.borrowed),
            amounts(&q.limit),
            q.running_jobs.to_string(),
            q.pending_jobs.to_string(),
            format!("{:.2}", q.fairshare),
        ]);
    }
    let mut out = columns(&rows);
    let bounds: Vec<String> = report.queues.iter().filter_map(bounds).collect();
    if !bounds.is_empty() {
        out.push('\n');
        for b in bounds {
            out.push_str(&b);
            out.push('\n');
        }
    }
    let mut users: Vec<[String; 5]> = vec![[
        "QUEUE".into(),
        "USER".into(),
        "USAGE".into(),
        "FAIRSHARE".into(),
        "USED".into(),
    ]];
    for q in &report.queues {
        for u in &q.users {
            users.push([
                q.name.clone(),
                u.user.clone(),
                usage(u.usage),
                format!("{:.2}", u.fairshare),
                held(&u.used),
            ]);
        }
    }
    out.push('\n');
    if users.len() > 1 {
        out.push_str(&columns(&users));
    } else {
        out.push_str("no user has used a queue yet\n");
    }
    out
}

/// `name: maxPerUser cpu=64; maxRunningJobs 100; …` for a queue that bounds more than
/// its total; `None` for one that does not.
fn bounds(q: &QueueStatus) -> Option<String> {
    let mut parts = Vec::new();
    if !q.max_per_user.is_empty() {
        parts.push(format!("maxPerUser {}", amounts(&q.max_per_user)));
    }
    if let Some(n) = q.max_running_jobs {
        parts.push(format!("maxRunningJobs {n}"));
    }
    match (q.default_time_limit, q.max_time_limit) {
        (None, None) => {}
        (d, m) => {
            let limit = |v: Option<u64>| v.map_or_else(|| "none".to_string(), format_time_limit);
            parts.push(format!("time limit default {}, max {}", limit(d), limit(m)));
        }
    }
    if !q.allowed_users.is_empty() || !q.allowed_groups.is_empty() {
        let mut who = Vec::new();
        if !q.allowed_users.is_empty() {
            who.push(format!("users {}", q.allowed_users.join(",")));
        }
        if !q.allowed_groups.is_empty() {
            who.push(format!("groups {}", q.allowed_groups.join(",")));
        }
        parts.push(format!("only {}", who.join(" and ")));
    }
    if q.preemptible {
        parts.push("preemptible".into());
    }
    (!parts.is_empty()).then(|| format!("{}: {}", q.name, parts.join("; ")))
}

/// `cpu=96,memory=512Gi,nvidia.com/gpu=8`, `-` for none.
fn amounts(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(r, v)| format!("{r}={}", format_quantity(r, *v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// What is held or borrowed: as [`amounts`], leaving out what is 0 (`-` when nothing is).
fn held(m: &BTreeMap<String, u64>) -> String {
    amounts(
        &m.iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
    )
}

/// A weight: `1`, `2.5`.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// Decayed usage (weighted resource-seconds): `812`, `12.3k`, `4.5M`.
fn usage(v: f64) -> String {
    for (size, suffix) in [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if v >= size {
            return format!("{:.1}{suffix}", v / size);
        }
    }
    format!("{v:.0}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hyperplan_shared::status::UserShare;

    use super::*;

    const GI: u64 = 1 << 30;

    fn map(entries: &[(&str, u64)]) -> BTreeMap<String, u64> {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn report() -> QueuesReport {
        QueuesReport {
            queues: vec![
                QueueStatus {
                    name: "default".into(),
                    priority: 0,
                    weight: 1.0,
                    used: map(&[("cpu", 96_000), ("nvidia.com/gpu", 0)]),
                    running_jobs: 3,
                    pending_jobs: 12,
                    fairshare: 0.4137,
                    usage: 1.25e6,
                    users: vec![
                        UserShare {
                            user: "carol".into(),
                            usage: 9.1e5,
                            fairshare: 0.31,
                            used: map(&[("cpu", 64_000)]),
                        },
                        UserShare {
                            user: "dave".into(),
                            usage: 812.4,
                            fairshare: 0.99,
                            used: map(&[("cpu", 0)]),
                        },
                    ],
                    ..QueueStatus::default()
                },
                QueueStatus {
                    name: "gpu".into(),
                    priority: 10,
                    weight: 2.5,
                    quota: map(&[("cpu", 4_096_000), ("nvidia.com/gpu", 512)]),
                    limit: map(&[("nvidia.com/gpu", 768)]),
                    max_per_user: map(&[("nvidia.com/gpu", 64)]),
                    max_running_jobs: Some(100),
                    used: map(&[("cpu", 1_500), ("memory", 512 * GI), ("nvidia.com/gpu", 600)]),
                    borrowed: map(&[("nvidia.com/gpu", 88)]),
                    running_jobs: 41,
                    pending_jobs: 7,
                    fairshare: 0.73,
                    usage: 3.2e9,
                    users: vec![UserShare {
                        user: "alice".into(),
                        usage: 2.9e9,
                        fairshare: 0.12,
                        used: map(&[("nvidia.com/gpu", 64)]),
                    }],
                    default_time_limit: Some(3600),
                    max_time_limit: Some(2 * 86_400),
                    allowed_users: vec!["alice".into(), "bob".into()],
                    allowed_groups: vec!["ml".into()],
                    ..QueueStatus::default()
                },
                QueueStatus {
                    name: "scavenger".into(),
                    priority: -5,
                    weight: 0.5,
                    preemptible: true,
                    fairshare: 1.0,
                    used: map(&[("cpu", 0), ("memory", 0)]),
                    ..QueueStatus::default()
                },
            ],
        }
    }

    #[test]
    fn table() {
        insta::assert_snapshot!(render(&report()));
    }

    #[test]
    fn only_the_default_queue_unused() {
        let report = QueuesReport {
            queues: vec![QueueStatus {
                name: "default".into(),
                weight: 1.0,
                fairshare: 1.0,
                ..QueueStatus::default()
            }],
        };
        insta::assert_snapshot!(render(&report), @r"
        NAME     PRIO  WEIGHT  QUOTA  USED  BORROWED  LIMIT  RUNNING  PENDING  FAIRSHARE
        default  0     1       -      -     -         -      0        0        1.00

        no user has used a queue yet
        ");
    }

    #[test]
    fn json_names_are_the_interface() {
        let v = serde_json::to_value(report()).unwrap();
        let gpu = &v["queues"][1];
        assert_eq!(gpu["name"], "gpu");
        assert_eq!(gpu["maxPerUser"]["nvidia.com/gpu"], 64);
        assert_eq!(gpu["pendingJobs"], 7);
        assert_eq!(gpu["users"][0]["user"], "alice");
        assert_eq!(gpu["allowedGroups"], serde_json::json!(["ml"]));
    }

    #[test]
    fn usage_units() {
        assert_eq!(usage(0.0), "0");
        assert_eq!(usage(999.4), "999");
        assert_eq!(usage(12_345.0), "12.3k");
        assert_eq!(usage(4.5e6), "4.5M");
        assert_eq!(number(2.0), "2");
        assert_eq!(number(0.25), "0.25");
    }
}
