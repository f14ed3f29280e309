//! `hyperplan report usage|utilisation|waits`: sums over a period from the planner's
//! accounting database, like Slurm's `sreport`: CPU- and GPU-hours by user, account,
//! queue or HyperNode; how full each HyperNode and tier was; how long jobs waited.

use clap::{Subcommand, ValueEnum};
use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::history::{Report, ReportKind, ReportQuery, UsageBy, UsageRow, UtilisationRow, WaitRow};
use hyperplan_shared::names::escape_text;

use super::history::{ListOutput, When, check_period, csv, local_minute, parse_when, table};
use super::{Clock, call, decode, json, long_help, span};
use crate::client::ClientArgs;

const EXAMPLES: &str = "  hyperplan report usage                             # CPU- and GPU-hours by user, last 30 days
  hyperplan report usage --by account --since 2026-11-01 --until 2026-12-01
  hyperplan report usage --by queue --unit gpu-hours --since 7d
  hyperplan report utilisation --since 7d           # how full each HyperNode and tier was
  hyperplan report waits --since 2026-11-01         # waits by queue and job size
  hyperplan report usage --by hypernode --output csv > usage.csv";

/// Sum the accounting database over a period (like Slurm's sreport).
///
/// From the jobs the planner copied to its accounting database (see `hyperplan history`),
/// over a period: `--since` and `--until` take a time ago (`30d`, `2h`, `90m`), `now`, or a
/// date `2026-11-01` or date and time `2026-11-01T08:00` in this machine's local time
/// (UTC with `Z`, another zone with `+01:00`); by default the last 30 days until now. Only
/// the part of each job's run inside the period counts. The first line names the report
/// and its period in local time.
///
/// `usage`: what each user (`--by account`, `queue`, `hypernode`: each of those) held,
/// JOBS, CPU-HOURS (cores held × hours) and GPU-HOURS, and SHARE, its part of the total of
/// `--unit` (cpu-hours by default), largest first, then a TOTAL line. By HyperNode, `-`
/// gathers the jobs placed in none.
///
/// `utilisation`: per HyperNode (rows `tier N`: all of a tier), its NODES, CPU-HOURS its
/// jobs held against CAPACITY (its cores × the hours of the period) and CPU %, and the
/// same for GPUs.
///
/// `waits`: for jobs that started in the period, per queue and size (NODES: 1, 2-4, 5-16,
/// 17-64, 65-256, 257+), how many (JOBS) and how long they waited from eligible (submit,
/// or begin time) to start: MEAN, P95 and MAX.
///
/// `--users` narrows every report to those users' jobs (a plain user of a planner with
/// `privateData` gets only their own). `--output csv`: the table's columns with a header
/// line, RFC 4180 quoting, no title line. `--output json`: the planner's answer as is,
/// `{"kind", "since", "until", "database", "usage": [{"key", "jobs", "cpuHours",
/// "gpuHours"}], "utilisation": [{"hypernode", "tier", "nodes", "cpuHours",
/// "cpuCapacityHours", "gpuHours", "gpuCapacityHours"}], "waits": [{"queue", "size",
/// "jobs", "meanSecs", "p95Secs", "maxSecs"}]}`, times in Unix seconds.
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// CPU- and GPU-hours by user, account, queue or HyperNode, with each one's share.
    #[command(after_long_help = long_help(EXAMPLES))]
    Usage {
        /// What to sum by.
        #[arg(long, value_enum, default_value_t)]
        by: By,
        /// What SHARE and the order count.
        #[arg(long, value_enum, default_value_t)]
        unit: Unit,
        #[command(flatten)]
        period: Period,
    },
    /// How full each HyperNode and each tier was: CPU- and GPU-hours against capacity.
    #[command(alias = "utilization", after_long_help = long_help(EXAMPLES))]
    Utilisation {
        #[command(flatten)]
        period: Period,
    },
    /// How long jobs waited to start, by queue and size: mean, p95, max.
    #[command(after_long_help = long_help(EXAMPLES))]
    Waits {
        #[command(flatten)]
        period: Period,
    },
}

/// What every report takes: its period, whose jobs, how to print, where the planner is.
#[derive(clap::Args, Debug)]
struct Period {
    /// The period's start: `30d` (ago), `2h`, `2026-11-01`, `2026-11-01T08:00` (local
    /// time) [default: 30d].
    #[arg(short = 'S', long, value_name = "TIME", value_parser = parse_when)]
    since: Option<When>,
    /// The period's end, in --since's forms [default: now].
    #[arg(short = 'E', long, value_name = "TIME", value_parser = parse_when)]
    until: Option<When>,
    /// Only these users' jobs (repeat, or a comma list; `--user` is who you connect as).
    #[arg(short = 'u', long = "users", value_name = "USER", value_delimiter = ',')]
    users: Vec<String>,
    #[arg(long, value_enum, default_value_t)]
    output: ListOutput,
    #[command(flatten)]
    client: ClientArgs,
}

/// `--by`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
enum By {
    /// Who submitted the jobs.
    #[default]
    User,
    /// What they were charged to.
    Account,
    /// Their queue.
    Queue,
    /// The HyperNode each was placed in.
    Hypernode,
}

impl From<By> for UsageBy {
    fn from(by: By) -> Self {
        match by {
            By::User => UsageBy::User,
            By::Account => UsageBy::Account,
            By::Queue => UsageBy::Queue,
            By::Hypernode => UsageBy::Hypernode,
        }
    }
}

/// `--unit`: which hours SHARE and the order count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Unit {
    /// Cores held × hours.
    #[default]
    CpuHours,
    /// GPUs held × hours.
    GpuHours,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::CpuHours => "cpu-hours",
            Unit::GpuHours => "gpu-hours",
        }
    }

    fn of(self, row: &UsageRow) -> f64 {
        match self {
            Unit::CpuHours => row.cpu_hours,
            Unit::GpuHours => row.gpu_hours,
        }
    }
}

/// The default period: 30 days.
const DEFAULT_PERIOD_SECS: u64 = 30 * 86_400;

pub fn run(args: Args) -> anyhow::Result<()> {
    let clock = Clock::local();
    let (kind, by, unit, period) = match args.command {
        Command::Usage { by, unit, period } => (ReportKind::Usage, by.into(), unit, period),
        Command::Utilisation { period } => (ReportKind::Utilisation, UsageBy::default(), Unit::default(), period),
        Command::Waits { period } => (ReportKind::Waits, UsageBy::default(), Unit::default(), period),
    };
    let query = query(kind, by, &period, &clock)?;
    let value = call(&period.client, RequestCommand::Report(query))?;
    if period.output == ListOutput::Json {
        print!("{}", json(&value)?);
        return Ok(());
    }
    let report: Report = decode(value, "report")?;
    let text = match period.output {
        ListOutput::Csv => render_csv(&report, by, unit),
        _ => render_table(&report, by, unit, &clock),
    };
    print!("{}", escape_text(&text));
    Ok(())
}

/// The question: `kind` over the period the options name, resolved against `clock`.
fn query(kind: ReportKind, by: UsageBy, period: &Period, clock: &Clock) -> anyhow::Result<ReportQuery> {
    let until = period.until.map_or(clock.now, |w| w.resolve(clock));
    let since = period
        .since
        .map_or_else(|| until.saturating_sub(DEFAULT_PERIOD_SECS), |w| w.resolve(clock));
    check_period(since, Some(until))?;
    Ok(ReportQuery {
        kind,
        by,
        since,
        until,
        users: period.users.clone(),
    })
}

/// The report for people: a line naming it and its period, then its table.
pub fn render_table(report: &Report, by: UsageBy, unit: Unit, clock: &Clock) -> String {
    let period = format!(
        "{} – {}",
        local_minute(report.since, clock),
        local_minute(report.until, clock)
    );
    let (title, empty) = match report.kind {
        ReportKind::Usage => (
            format!("Usage by {}, {period} ({})", by.as_str(), unit.as_str()),
            "no job ran in that period",
        ),
        ReportKind::Utilisation => (
            format!("Utilisation by HyperNode and tier, {period}"),
            "no HyperNode in that period",
        ),
        ReportKind::Waits => (
            format!("Waits by queue and size, {period}"),
            "no job started in that period",
        ),
    };
    let rows = rows(report, by, unit);
    let mut out = format!("{title}\n\n{}", table(&rows));
    if rows.len() <= 1 {
        out.push_str(empty);
        out.push('\n');
    }
    out
}

/// The report's table as CSV (no title line).
pub fn render_csv(report: &Report, by: UsageBy, unit: Unit) -> String {
    csv(&rows(report, by, unit))
}

/// The header row and the report's rows.
fn rows(report: &Report, by: UsageBy, unit: Unit) -> Vec<Vec<String>> {
    match report.kind {
        ReportKind::Usage => usage_rows(&report.usage, by, unit),
        ReportKind::Utilisation => utilisation_rows(&report.utilisation),
        ReportKind::Waits => wait_rows(&report.waits),
    }
}

fn strings<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_string()).collect()
}

/// Hours: `1234.5`.
fn hours(h: f64) -> String {
    format!("{:.1}", if h.is_finite() { h.max(0.0) } else { 0.0 })
}

/// `part` of `total` as `12.3%`; `-` when the total is nothing.
fn percent(part: f64, total: f64) -> String {
    if total > 0.0 && part.is_finite() {
        format!("{:.1}%", 100.0 * part / total)
    } else {
        "-".into()
    }
}

/// One row per key, the largest in `unit` first (then by name), and a TOTAL line.
fn usage_rows(usage: &[UsageRow], by: UsageBy, unit: Unit) -> Vec<Vec<String>> {
    let key = by.as_str().to_ascii_uppercase();
    let mut rows = vec![strings([&key, "JOBS", "CPU-HOURS", "GPU-HOURS", "SHARE"])];
    if usage.is_empty() {
        return rows;
    }
    let mut sorted: Vec<&UsageRow> = usage.iter().collect();
    sorted.sort_by(|a, b| unit.of(b).total_cmp(&unit.of(a)).then_with(|| a.key.cmp(&b.key)));
    let total = UsageRow {
        key: "TOTAL".into(),
        jobs: usage.iter().map(|r| r.jobs).sum(),
        cpu_hours: usage.iter().map(|r| r.cpu_hours).sum(),
        gpu_hours: usage.iter().map(|r| r.gpu_hours).sum(),
    };
    for r in sorted.into_iter().chain(std::iter::once(&total)) {
        rows.push(vec![
            if r.key.is_empty() { "-".into() } else { r.key.clone() },
            r.jobs.to_string(),
            hours(r.cpu_hours),
            hours(r.gpu_hours),
            percent(unit.of(r), unit.of(&total)),
        ]);
    }
    rows
}

/// One row per HyperNode or tier, in the planner's order.
fn utilisation_rows(rows_in: &[UtilisationRow]) -> Vec<Vec<String>> {
    let mut rows = vec![strings([
        "HYPERNODE",
        "TIER",
        "NODES",
        "CPU-HOURS",
        "CAPACITY",
        "CPU %",
        "GPU-HOURS",
        "GPU CAPACITY",
        "GPU %",
    ])];
    for r in rows_in {
        rows.push(vec![
            r.hypernode.clone(),
            r.tier.to_string(),
            r.nodes.to_string(),
            hours(r.cpu_hours),
            hours(r.cpu_capacity_hours),
            percent(r.cpu_hours, r.cpu_capacity_hours),
            hours(r.gpu_hours),
            hours(r.gpu_capacity_hours),
            percent(r.gpu_hours, r.gpu_capacity_hours),
        ]);
    }
    rows
}

/// One row per queue and size, in the planner's order.
fn wait_rows(waits: &[WaitRow]) -> Vec<Vec<String>> {
    let mut rows = vec![strings(["QUEUE", "NODES", "JOBS", "MEAN", "P95", "MAX"])];
    for w in waits {
        let mean = if w.mean_secs.is_finite() && w.mean_secs > 0.0 {
            w.mean_secs.round() as u64
        } else {
            0
        };
        rows.push(vec![
            w.queue.clone(),
            w.size.clone(),
            w.jobs.to_string(),
            span(mean),
            span(w.p95_secs),
            span(w.max_secs),
        ]);
    }
    rows
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use clap::Parser;

    use super::*;

    /// 2026-12-05T10:00:00Z.
    const NOW: u64 = 1_796_464_800;
    /// 2026-11-05T00:00:00Z and 2026-12-05T00:00:00Z.
    const SINCE: u64 = 1_793_836_800;
    const UNTIL: u64 = 1_796_428_800;

    fn clock() -> Clock {
        Clock {
            now: NOW,
            utc_offset: |_| 0,
        }
    }

    fn usage() -> Report {
        Report {
            kind: ReportKind::Usage,
            since: SINCE,
            until: UNTIL,
            database: "sqlite /var/lib/hyperplan/accounting.db".into(),
            usage: vec![
                UsageRow {
                    key: "bob".into(),
                    jobs: 120,
                    cpu_hours: 1200.0,
                    gpu_hours: 800.25,
                },
                UsageRow {
                    key: "alice".into(),
                    jobs: 3,
                    cpu_hours: 2400.5,
                    gpu_hours: 0.0,
                },
                UsageRow {
                    key: "carol".into(),
                    jobs: 7,
                    cpu_hours: 1200.0,
                    gpu_hours: 16.0,
                },
            ],
            ..Report::default()
        }
    }

    #[test]
    fn usage_by_user() {
        insta::assert_snapshot!(render_table(&usage(), UsageBy::User, Unit::CpuHours, &clock()), @r"
        Usage by user, 2026-11-05T00:00 – 2026-12-05T00:00 (cpu-hours)

        USER   JOBS  CPU-HOURS  GPU-HOURS  SHARE
        alice  3     2400.5     0.0        50.0%
        bob    120   1200.0     800.2      25.0%
        carol  7     1200.0     16.0       25.0%
        TOTAL  130   4800.5     816.2      100.0%
        ");
    }

    #[test]
    fn usage_by_account_in_gpu_hours_as_csv() {
        let mut report = usage();
        report.usage[0].key = "ml, vision".into();
        insta::assert_snapshot!(render_csv(&report, UsageBy::Account, Unit::GpuHours), @r#"
        ACCOUNT,JOBS,CPU-HOURS,GPU-HOURS,SHARE
        "ml, vision",120,1200.0,800.2,98.0%
        carol,7,1200.0,16.0,2.0%
        alice,3,2400.5,0.0,0.0%
        TOTAL,130,4800.5,816.2,100.0%
        "#);
    }

    #[test]
    fn no_usage() {
        let report = Report {
            usage: vec![],
            ..usage()
        };
        insta::assert_snapshot!(render_table(&report, UsageBy::Queue, Unit::GpuHours, &clock()), @r"
        Usage by queue, 2026-11-05T00:00 – 2026-12-05T00:00 (gpu-hours)

        QUEUE  JOBS  CPU-HOURS  GPU-HOURS  SHARE
        no job ran in that period
        ");
    }

    #[test]
    fn usage_of_jobs_without_a_hypernode() {
        let report = Report {
            usage: vec![
                UsageRow {
                    key: String::new(),
                    jobs: 1,
                    cpu_hours: 0.5,
                    gpu_hours: 0.0,
                },
                UsageRow {
                    key: "leaf-0".into(),
                    jobs: 2,
                    cpu_hours: 1.5,
                    gpu_hours: 0.0,
                },
            ],
            ..usage()
        };
        insta::assert_snapshot!(render_csv(&report, UsageBy::Hypernode, Unit::CpuHours), @r"
        HYPERNODE,JOBS,CPU-HOURS,GPU-HOURS,SHARE
        leaf-0,2,1.5,0.0,75.0%
        -,1,0.5,0.0,25.0%
        TOTAL,3,2.0,0.0,100.0%
        ");
    }

    #[test]
    fn utilisation() {
        let row = |h: &str, tier, nodes, cpu, cap, gpu, gcap| UtilisationRow {
            hypernode: h.into(),
            tier,
            nodes,
            cpu_hours: cpu,
            cpu_capacity_hours: cap,
            gpu_hours: gpu,
            gpu_capacity_hours: gcap,
        };
        let report = Report {
            kind: ReportKind::Utilisation,
            since: SINCE,
            until: UNTIL + 90,
            utilisation: vec![
                row("leaf-0", 1, 16, 9000.0, 12_000.0, 2000.0, 3000.0),
                row("leaf-1", 1, 16, 120.0, 12_000.0, 0.0, 0.0),
                row("tier 1", 1, 32, 9120.0, 24_000.0, 2000.0, 3000.0),
                row("spine-0", 2, 32, 9120.0, 24_000.0, 2000.0, 3000.0),
                row("tier 2", 2, 32, 9120.0, 24_000.0, 2000.0, 3000.0),
            ],
            ..Report::default()
        };
        insta::assert_snapshot!(render_table(&report, UsageBy::User, Unit::CpuHours, &clock()));
    }

    #[test]
    fn waits() {
        let row = |q: &str, size: &str, jobs, mean, p95, max| WaitRow {
            queue: q.into(),
            size: size.into(),
            jobs,
            mean_secs: mean,
            p95_secs: p95,
            max_secs: max,
        };
        let report = Report {
            kind: ReportKind::Waits,
            since: SINCE,
            until: UNTIL,
            waits: vec![
                row("default", "1", 1200, 42.4, 300, 3599),
                row("default", "2-4", 30, 754.6, 7200, 8000),
                row("gpu", "17-64", 4, 93_784.0, 100_000, 200_000),
            ],
            ..Report::default()
        };
        insta::assert_snapshot!(render_table(&report, UsageBy::User, Unit::CpuHours, &clock()));
        insta::assert_snapshot!(render_csv(&report, UsageBy::User, Unit::CpuHours), @r"
        QUEUE,NODES,JOBS,MEAN,P95,MAX
        default,1,1200,42s,5m,59m59s
        default,2-4,30,12m35s,2h,2h13m
        gpu,17-64,4,1d2h,1d3h,2d7h
        ");
    }

    #[derive(Parser, Debug)]
    #[command(name = "report")]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parsed(argv: &[&str]) -> (ReportQuery, Option<Unit>) {
        let mut full = vec!["report"];
        full.extend_from_slice(argv);
        let cli = Cli::try_parse_from(full).unwrap();
        let c = clock();
        match cli.args.command {
            Command::Usage { by, unit, period } => {
                (query(ReportKind::Usage, by.into(), &period, &c).unwrap(), Some(unit))
            }
            Command::Utilisation { period } => (
                query(ReportKind::Utilisation, UsageBy::User, &period, &c).unwrap(),
                None,
            ),
            Command::Waits { period } => (query(ReportKind::Waits, UsageBy::User, &period, &c).unwrap(), None),
        }
    }

    #[test]
    fn periods_and_options() {
        let (q, unit) = parsed(&["usage"]);
        assert_eq!(
            (q.kind, q.by, q.since, q.until),
            (ReportKind::Usage, UsageBy::User, NOW - 30 * 86_400, NOW)
        );
        assert_eq!(unit, Some(Unit::CpuHours));
        let (q, unit) = parsed(&[
            "usage",
            "--by",
            "hypernode",
            "--unit",
            "gpu-hours",
            "-S",
            "2026-11-05",
            "-E",
            "2026-12-05T00:00",
            "--users",
            "alice,bob",
        ]);
        assert_eq!((q.by, q.since, q.until), (UsageBy::Hypernode, SINCE, UNTIL));
        assert_eq!(q.users, ["alice", "bob"]);
        assert_eq!(unit, Some(Unit::GpuHours));
        let (q, _) = parsed(&["utilization", "--since", "7d", "--output", "csv"]);
        assert_eq!(
            (q.kind, q.since, q.until),
            (ReportKind::Utilisation, NOW - 7 * 86_400, NOW)
        );
        let (q, _) = parsed(&["waits", "--until", "2026-12-05"]);
        assert_eq!(
            (q.kind, q.since, q.until),
            (ReportKind::Waits, UNTIL - 30 * 86_400, UNTIL)
        );
        let cli = Cli::try_parse_from(["report", "waits", "--since", "1d", "--until", "2d"]).unwrap();
        let Command::Waits { period } = cli.args.command else {
            panic!()
        };
        assert!(query(ReportKind::Waits, UsageBy::User, &period, &clock()).is_err());
        assert!(Cli::try_parse_from(["report", "usage", "--by", "node"]).is_err());
        assert!(Cli::try_parse_from(["report"]).is_err());
    }
}
