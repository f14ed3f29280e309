//! `hyperplan planners`: every planner of the list (a leader and its standbys), asked at
//! once: its role, the epoch it knows and the leader it names; unreachable ones and why.

use hyperplan_net::messages::RequestCommand;
use hyperplan_shared::names::escape_text;
use hyperplan_shared::status::{PlannerInfo, PlannerList, PlannerRow};

use super::columns::columns;
use super::{Output, json, long_help};
use crate::client::{self, ClientArgs, ClientConfig};

const EXAMPLES: &str = "  hyperplan planners --planner head01:7400,head02:7400
  HYPERPLAN_PLANNER=head01:7400,head02:7400,head03:7400 hyperplan planners
  hyperplan planners --output json | jq -r '.planners[] | select(.role == \"leader\") | .address'";

/// Show every planner of the list: which one leads, which stand by, which are unreachable.
///
/// Asks each address of the planner list (--planner, HYPERPLAN_PLANNER or `planner` in
/// client.toml, comma-separated: HOST:PORT,HOST:PORT) at once, not only the leader. With
/// `[store] backend = "etcd"` several planners share one state: one leads (it places jobs,
/// talks to the agents and answers every command) and the others stand by (they answer
/// only this command, send agents and every other command to the leader, and one of them
/// takes over when the leader goes). A single planner with the embedded store always
/// leads.
///
/// One row per address, in list order: ADDRESS as listed; ROLE leader, standby or
/// unreachable (the reason follows the table); EPOCH, the newest leadership term the
/// planner knows (it grows at every takeover; `-` when unreachable); LEADER, the address
/// the planner names as the leader's (`-`: none yet, an election is under way). Exits 0
/// when a planner leads, 1 when none answered as the leader. With `--output json`:
/// `{"planners": [{"address", "role", "epoch", "leader", "error"}]}` (`epoch` null and `error`
/// the reason for an unreachable planner).
///
/// Under the table, the leader's accounting: the database ended jobs are copied to and
/// how far behind it is (a database that is down keeps the planner scheduling; ended jobs
/// wait in the state store and are written when it is back).
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    #[arg(long, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = ClientConfig::from_process(&args.client)?;
    let answers: Vec<PlannerRow> = client::ask_every(&config, RequestCommand::Planners)?
        .into_iter()
        .map(|(address, reply)| answer(address, reply))
        .collect();
    match args.output {
        Output::Json => print!("{}", json(&serde_json::to_value(list(&answers))?)?),
        Output::Table => print!("{}", escape_text(&render(&answers))),
    }
    // Exit code 1, said on stderr after the table.
    anyhow::ensure!(
        answers.iter().any(|a| a.role == LEADER),
        "no planner answered as the leader"
    );
    Ok(())
}

const LEADER: &str = "leader";
const UNREACHABLE: &str = "unreachable";

/// One address's answer to `Planners`, or why there is none.
pub fn answer(address: String, reply: anyhow::Result<serde_json::Value>) -> PlannerRow {
    let unreachable = |address, error: String| PlannerRow {
        address,
        role: UNREACHABLE.into(),
        epoch: None,
        leader: None,
        error: Some(error),
        accounting: None,
    };
    match reply.map(serde_json::from_value::<PlannerInfo>) {
        Ok(Ok(info)) => PlannerRow {
            address,
            role: info.role,
            epoch: Some(info.epoch),
            leader: info.leader,
            error: None,
            accounting: info.accounting,
        },
        Ok(Err(e)) => unreachable(
            address,
            format!("its answer is not the planner info this hyperplan expects ({e}): another version?"),
        ),
        Err(e) => unreachable(address, format!("{e:#}")),
    }
}

/// `--output json`.
pub fn list(answers: &[PlannerRow]) -> PlannerList {
    PlannerList {
        planners: answers.to_vec(),
    }
}

/// `accounting (ADDRESS): DATABASE: up to date, N jobs written` or how far behind and why.
fn accounting_line(address: &str, a: &hyperplan_shared::status::AccountingInfo) -> String {
    let state = if a.behind_secs == 0 && a.error.is_none() {
        "up to date".to_string()
    } else if a.behind_secs == 0 {
        "behind by an unknown time".to_string()
    } else {
        format!("{} behind", super::span(a.behind_secs))
    };
    let mut line = format!(
        "accounting ({address}): {}: {state}, {} jobs written since it leads",
        a.database, a.written
    );
    if let Some(e) = &a.error {
        line.push_str(&format!("; failing: {e}"));
    }
    line.push('\n');
    line
}

/// The table, why each unreachable planner is, then a count line.
pub fn render(answers: &[PlannerRow]) -> String {
    let mut rows: Vec<[String; 4]> = vec![["ADDRESS".into(), "ROLE".into(), "EPOCH".into(), "LEADER".into()]];
    for a in answers {
        rows.push([
            a.address.clone(),
            a.role.clone(),
            a.epoch.map_or_else(|| "-".into(), |e| e.to_string()),
            a.leader.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = columns(&rows);
    for a in answers {
        if let Some(error) = &a.error {
            out.push_str(&format!("{}: {error}\n", a.address));
        }
    }
    for a in answers {
        if let Some(acct) = &a.accounting {
            out.push_str(&accounting_line(&a.address, acct));
        }
    }
    let count = |role: &str| answers.iter().filter(|a| a.role == role).count();
    let leaders: Vec<&PlannerRow> = answers.iter().filter(|a| a.role == LEADER).collect();
    if leaders.len() > 1 {
        let each: Vec<String> = leaders
            .iter()
            .map(|a| format!("{} at epoch {}", a.address, a.epoch.unwrap_or(0)))
            .collect();
        out.push_str(&format!(
            "warning: {} planners say they lead ({}): the highest epoch is the current leader, the others have \
             not noticed yet\n",
            leaders.len(),
            each.join(", ")
        ));
    }
    let plural = |n: usize, one: &str, many: &str| match n {
        0 if one == "leader" => "no leader".to_string(),
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    };
    out.push_str(&format!(
        "\n{}: {}, {}, {} unreachable\n",
        plural(answers.len(), "planner", "planners"),
        plural(leaders.len(), "leader", "leaders"),
        plural(count("standby"), "standby", "standbys"),
        count(UNREACHABLE),
    ));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn answered(address: &str, role: &str, epoch: u64, leader: Option<&str>) -> PlannerRow {
        let info = PlannerInfo {
            role: role.into(),
            epoch,
            leader: leader.map(Into::into),
            store: "etcd http://etcd-1:2379".into(),
            accounting: None,
        };
        answer(address.into(), Ok(serde_json::to_value(info).unwrap()))
    }

    fn unreachable(address: &str, why: &str) -> PlannerRow {
        answer(address.into(), Err(anyhow::anyhow!("{why}")))
    }

    fn three() -> Vec<PlannerRow> {
        vec![
            answered("head01:7400", "leader", 7, Some("head01:7400")),
            answered("head02:7400", "standby", 7, Some("head01:7400")),
            unreachable(
                "head03:7400",
                "cannot reach the planner at 10.0.0.3:7400 within 5 s: is hyperplan-planner running there, and \
                 is UDP port 7400 open? (set the address with --planner, HYPERPLAN_PLANNER or planner in \
                 client.toml)",
            ),
        ]
    }

    #[test]
    fn table() {
        insta::assert_snapshot!(render(&three()));
    }

    #[test]
    fn table_without_a_leader() {
        let answers = vec![
            answered("head02:7400", "standby", 8, None),
            unreachable(
                "head01:7400",
                "the planner at 10.0.0.1:7400 reset the connection (did it restart?)",
            ),
        ];
        insta::assert_snapshot!(render(&answers), @r"
        ADDRESS      ROLE         EPOCH  LEADER
        head02:7400  standby      8      -
        head01:7400  unreachable  -      -
        head01:7400: the planner at 10.0.0.1:7400 reset the connection (did it restart?)

        2 planners: no leader, 1 standby, 1 unreachable
        ");
    }

    #[test]
    fn one_planner_with_the_embedded_store() {
        let answers = vec![answered("127.0.0.1:7400", "leader", 1, None)];
        insta::assert_snapshot!(render(&answers), @r"
        ADDRESS         ROLE    EPOCH  LEADER
        127.0.0.1:7400  leader  1      -

        1 planner: 1 leader, 0 standbys, 0 unreachable
        ");
    }

    #[test]
    fn two_leaders_are_pointed_out() {
        let answers = vec![
            answered("head01:7400", "leader", 7, Some("head01:7400")),
            answered("head02:7400", "leader", 8, Some("head02:7400")),
        ];
        let text = render(&answers);
        assert!(
            text.contains("warning: 2 planners say they lead (head01:7400 at epoch 7, head02:7400 at epoch 8)"),
            "{text}"
        );
    }

    #[test]
    fn json_is_the_planner_list() {
        let value = serde_json::to_value(list(&three())).unwrap();
        assert_eq!(
            value["planners"][0],
            serde_json::json!({"address": "head01:7400", "role": "leader", "epoch": 7, "leader": "head01:7400"})
        );
        assert_eq!(value["planners"][1]["role"], "standby");
        assert_eq!(value["planners"][2]["role"], "unreachable");
        assert_eq!(value["planners"][2]["epoch"], serde_json::Value::Null);
        assert!(
            value["planners"][2]["error"]
                .as_str()
                .unwrap()
                .starts_with("cannot reach the planner at 10.0.0.3:7400")
        );
    }

    #[test]
    fn an_answer_of_another_shape_is_said() {
        let a = answer("h:1".into(), Ok(serde_json::json!({"role": 3})));
        assert_eq!(a.role, "unreachable");
        assert!(a.error.as_deref().unwrap().contains("another version?"), "{a:?}");
    }
}
