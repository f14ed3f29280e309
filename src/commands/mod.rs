//! The commands that talk to a running planner: `nodes`, `hypernodes`, `queues`, `submit`,
//! `status`, `cancel`, `explain`, `logs`, `exec` (a stream of its own, see `exec`), and `planners` (which asks every planner of the
//! list, not only the leader). Each sends one request (see `crate::client`) and prints the reply
//! through [`run_request`] (`submit`, sending one request per file, through
//! [`print_reply`]): `--output json` prints the planner's JSON value exactly,
//! `--output table` renders it for people. Renderers are pure functions of the reply
//! values, snapshot-tested here.

pub mod alloc;
pub mod cancel;
mod columns;
pub mod exec;
pub mod explain;
pub mod history;
pub mod hold;
pub mod hypernodes;
pub mod logs;
pub mod nodes;
pub mod planners;
pub mod queues;
pub mod report;
pub mod run;
pub mod sbatch;
pub mod status;
pub mod submit;

use anyhow::Context;
use clap::ValueEnum;
use hyperplan_net::messages::RequestCommand;
use serde::de::DeserializeOwned;

use crate::client::config::CONNECTION_HELP;
use crate::client::{self, ClientArgs, ClientConfig};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Columns for people.
    #[default]
    Table,
    /// The planner's reply as is, pretty-printed; field names are a stable interface.
    Json,
}

/// A command's long help: its examples, then where the planner and certificates come from.
pub fn long_help(examples: &str) -> String {
    format!("Examples:\n{examples}\n\n{CONNECTION_HELP}")
}

/// Resolves the connection settings and sends one request.
pub fn call(client: &ClientArgs, command: RequestCommand) -> anyhow::Result<serde_json::Value> {
    let config = ClientConfig::from_process(client)?;
    client::request(&config, command)
}

/// Every command's shape: resolve the connection settings, send `command`, and print the
/// reply as [`print_reply`] does. `what` names the reply in the error for a reply of
/// another shape; `table` renders it for people.
pub fn run_request<T: DeserializeOwned>(
    client: &ClientArgs,
    command: RequestCommand,
    output: Output,
    what: &str,
    table: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    let value = call(client, command)?;
    print_reply(output, value, what, table)
}

/// Prints a reply on stdout: with `--output json` the value exactly as the planner sent it
/// (so scripts see every field, even ones this CLI does not know), else decoded as `T`
/// (see [`decode`]) and rendered by `table`.
pub fn print_reply<T: DeserializeOwned>(
    output: Output,
    value: serde_json::Value,
    what: &str,
    table: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    print!("{}", render_reply(output, value, what, table)?);
    Ok(())
}

/// What [`print_reply`] prints. Tables print names as validated and everything else
/// (labels, reasons, warnings that quote files) escaped: a control character or bidi
/// override in a reply never reaches the terminal raw.
fn render_reply<T: DeserializeOwned>(
    output: Output,
    value: serde_json::Value,
    what: &str,
    table: impl FnOnce(&T) -> String,
) -> anyhow::Result<String> {
    Ok(match output {
        Output::Json => json(&value)?,
        Output::Table => hyperplan_shared::names::escape_text(&table(&decode::<T>(value, what)?)),
    })
}

/// The reply value, pretty, with a final newline.
pub fn json(value: &serde_json::Value) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(value).context("encoding the planner's reply")? + "\n")
}

/// The reply value as the type a table renders; a mismatch means planner and CLI differ in
/// version, and the JSON output still shows what came.
pub fn decode<T: DeserializeOwned>(value: serde_json::Value, what: &str) -> anyhow::Result<T> {
    serde_json::from_value(value).with_context(|| {
        format!("the planner's reply is not the {what} this hyperplan expects (--output json shows it as is)")
    })
}

/// How a table shows times: `now` (Unix seconds) for `in 2h13m` and `5m ago`, and the
/// local time zone's offset from UTC (seconds) at a given time. Tests pass a fixed one.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub now: u64,
    pub utc_offset: fn(u64) -> i64,
}

impl Clock {
    /// This machine's clock and time zone (`TZ`, else /etc/localtime).
    pub fn local() -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self {
            now,
            utc_offset: local_utc_offset,
        }
    }

    /// `2025-06-01 14:13:00 +0200`: `unix` in the local time zone, with its offset.
    pub fn local_time(&self, unix: u64) -> String {
        let offset = (self.utc_offset)(unix);
        let local = i64::try_from(unix).unwrap_or(i64::MAX).saturating_add(offset);
        let (days, secs) = (local.div_euclid(86_400), local.rem_euclid(86_400));
        let (y, m, d) = hyperplan_shared::civil::civil_from_days(days);
        let sign = if offset < 0 { '-' } else { '+' };
        let off = offset.unsigned_abs() / 60;
        format!(
            "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} {sign}{:02}{:02}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            off / 60,
            off % 60
        )
    }

    /// `in 2h13m`, `5m ago`, `now` (within a second): `unix` against `now`.
    pub fn relative(&self, unix: u64) -> String {
        match unix.cmp(&self.now) {
            std::cmp::Ordering::Greater => format!("in {}", span(unix - self.now)),
            std::cmp::Ordering::Less => format!("{} ago", span(self.now - unix)),
            std::cmp::Ordering::Equal => "now".into(),
        }
    }
}

/// A duration for people: its two largest units, `2h13m`, `3d4h`, `45s`.
pub fn span(secs: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400, "d"), (3600, "h"), (60, "m"), (1, "s")];
    let Some(first) = UNITS.iter().position(|(size, _)| secs >= *size) else {
        return "0s".into();
    };
    let mut out = String::new();
    let mut rest = secs;
    for (size, unit) in &UNITS[first..(first + 2).min(UNITS.len())] {
        if rest >= *size {
            out.push_str(&format!("{}{unit}", rest / size));
        }
        rest %= size;
    }
    out
}

/// The local time zone's offset from UTC at `unix`, in seconds (0 when unknown).
#[allow(unsafe_code)]
fn local_utc_offset(unix: u64) -> i64 {
    let Ok(t) = libc::time_t::try_from(unix) else {
        return 0;
    };
    // SAFETY: `libc::tm` is plain data (integers and a pointer) for which all zeros is a
    // valid value; `localtime_r` only writes into the `tm` it is given and reads `t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live, properly aligned values of this frame.
    let done = unsafe { libc::localtime_r(&raw const t, &raw mut tm) };
    if done.is_null() { 0 } else { tm.tm_gmtoff }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Issue 12 item 8: a reply's free text (a warning quoting a label) prints escaped.
    #[test]
    fn table_output_escapes_control_characters() {
        let text = render_reply::<serde_json::Value>(Output::Table, serde_json::json!(1), "x", |_| {
            "warning: label rack=\u{1b}]0;owned\u{7} \u{202e}kcab\nnext line\n".to_string()
        })
        .unwrap();
        assert_eq!(
            text,
            "warning: label rack=\\u{1b}]0;owned\\u{7} \\u{202e}kcab\nnext line\n"
        );
    }

    #[test]
    fn times_for_people() {
        let utc = Clock {
            now: 1_748_787_180,
            utc_offset: |_| 0,
        };
        assert_eq!(utc.local_time(0), "1970-01-01 00:00:00 +0000");
        assert_eq!(utc.local_time(1_748_787_180), "2025-06-01 14:13:00 +0000");
        assert_eq!(utc.local_time(951_825_600), "2000-02-29 12:00:00 +0000");
        let east = Clock {
            utc_offset: |_| 2 * 3600 + 1800,
            ..utc
        };
        assert_eq!(east.local_time(1_748_787_180), "2025-06-01 16:43:00 +0230");
        let west = Clock {
            utc_offset: |_| -5 * 3600,
            ..utc
        };
        assert_eq!(west.local_time(1_748_736_000), "2025-05-31 19:00:00 -0500");
        assert_eq!(utc.relative(utc.now + 7_985), "in 2h13m");
        assert_eq!(utc.relative(utc.now - 300), "5m ago");
        assert_eq!(utc.relative(utc.now), "now");
        assert_eq!(span(45), "45s");
        assert_eq!(span(3600), "1h");
        assert_eq!(span(93_784), "1d2h");
        assert_eq!(span(0), "0s");
    }
}
