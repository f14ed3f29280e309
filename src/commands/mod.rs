//! The commands that talk to a running planner: `nodes`, `hypernodes`, `submit`, `status`,
//! `cancel`, `explain`, `logs`, and `planners` (which asks every planner of the list,
//! not only the leader). Each sends one request (see `crate::client`) and prints the reply
//! through [`run_request`] (`submit`, sending one request per file, through
//! [`print_reply`]): `--output json` prints the planner's JSON value exactly,
//! `--output table` renders it for people. Renderers are pure functions of the reply
//! values, snapshot-tested here.

pub mod cancel;
mod columns;
pub mod explain;
pub mod hypernodes;
pub mod logs;
pub mod nodes;
pub mod planners;
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
}
