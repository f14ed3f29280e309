//! End-to-end (issue 26): Prometheus metrics of the real `hyperplan-planner` and
//! `hyperplan-agent` on 127.0.0.1, scraped over HTTP with Prometheus' `Accept` header and
//! parsed by an independent OpenMetrics parser (Python's `prometheus_client`, Debian's
//! python3-prometheus-client, which `make deps` installs; the test skips with a printed
//! reason without it). Scraped without asking for OpenMetrics (issue 37), the planner
//! answers in the classic text format, which Python's classic parser reads alike and
//! `promtool check metrics` finds clean (Debian's `prometheus`; skipped without it). A job
//! runs and a node is drained: the planner's gauges say so (jobs by queue and status,
//! nodes by state, per HyperNode allocation from a Slurm topology file), its counters and
//! histograms moved (placements, launches, launch latency, tick time per system, store
//! commits), and the agent reports the running task's CPU and memory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, all_running, path_str, task_user, wait_for};
use serde_json::Value;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const LONG: Duration = Duration::from_secs(40);

const PLANNER_TOML: &str = r#"
[[discovery]]
source = "slurm"
file = "topology.conf"
"#;

/// The parser, as a script: OpenMetrics text (the classic format with the argument
/// `classic`) on stdin, `[[name, type, [[sample name, labels, value], …]], …]` as JSON on
/// stdout; a parse error exits non-zero.
const PARSE: &str = r#"
import json, sys
if sys.argv[1:] == ["classic"]:
    from prometheus_client.parser import text_string_to_metric_families
else:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append([f.name, f.type, [[s.name, s.labels, s.value] for s in f.samples]])
print(json.dumps(out))
"#;

/// A Python that has the parser: Debian's (where apt installs it; a pyenv or venv first
/// on PATH may lack it), else whichever `python3` is first on PATH.
fn python() -> Option<&'static str> {
    ["/usr/bin/python3", "python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import prometheus_client.openmetrics.parser"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// `http://ADDR/metrics` from a daemon's log line.
fn metrics_addr(log: &str) -> Option<String> {
    let at = log.find("serving metrics on http://")? + "serving metrics on http://".len();
    let rest = &log[at..];
    Some(rest[..rest.find("/metrics")?].to_string())
}

/// What Prometheus 3 sends by default (its `scrape_protocols`, best first).
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                                 application/openmetrics-text;version=0.0.1;q=0.5,\
                                 text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,\
                                 text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// GET /metrics as Prometheus asks: (status line, content type, body).
fn scrape(addr: &str) -> (String, String, String) {
    scrape_accepting(addr, Some(PROMETHEUS_ACCEPT))
}

/// GET /metrics with `accept` as its `Accept` header (none: none).
fn scrape_accepting(addr: &str, accept: Option<&str>) -> (String, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LONG)).unwrap();
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.lines().next().unwrap().to_string();
    let ctype = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    // Chunked or not: the exposition is the text from the first `#` to `# EOF` (the
    // classic format has no `# EOF`: the whole body).
    let body = match (body.find('#'), body.find("# EOF")) {
        (Some(a), Some(b)) => body[a..b + "# EOF".len()].to_string() + "\n",
        _ => body.to_string(),
    };
    (status, ctype, body)
}

/// The families, parsed by the independent parser.
fn parse(py: &str, text: &str) -> Vec<Value> {
    parse_as(py, "openmetrics", text)
}

/// The families of `text` in `format` (`openmetrics` or `classic`).
fn parse_as(py: &str, format: &str, text: &str) -> Vec<Value> {
    let mut child = Command::new(py)
        .args(["-c", PARSE, format])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the {format} parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

/// The value of the sample `name` whose labels include `labels`.
fn sample(families: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    families
        .iter()
        .flat_map(|f| f[2].as_array().unwrap())
        .find(|s| s[0] == name && labels.iter().all(|(k, v)| s[1][*k] == *v))
        .and_then(|s| s[2].as_f64())
}

fn family_type<'a>(families: &'a [Value], name: &str) -> Option<&'a str> {
    families.iter().find(|f| f[0] == name).and_then(|f| f[1].as_str())
}

/// `promtool check metrics` on `text`: its exit code and what it said; `None` when
/// promtool is not on PATH.
fn promtool_check(text: &str) -> Option<(i32, String)> {
    Command::new("promtool")
        .arg("--version")
        .output()
        .ok()?
        .status
        .success()
        .then_some(())?;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(text.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Some((out.status.code().unwrap_or(-1), said))
}

#[test]
fn planner_and_agent_metrics_parse_and_say_what_runs() {
    let Some(py) = python() else {
        println!("skipped: python3 with prometheus_client (apt python3-prometheus-client) is not installed");
        return;
    };
    let mut c = Cluster::prepare(&NODES, Some(PLANNER_TOML));
    c.write(
        "topology.conf",
        "SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n3\nSwitchName=spine Switches=leaf[1-2]\n",
    );
    c.planner_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    c.start_planner("127.0.0.1:0");
    let user = task_user();
    c.issue_user(&user);
    for n in NODES {
        c.start_agent_with(n, MACHINE, &[], &["--metrics-listen", "127.0.0.1:0"]);
    }
    for n in NODES {
        c.wait_state(n, "Ready", LONG);
    }
    let planner = wait_for(LONG, "the planner's metrics address", || metrics_addr(&c.planner_log()));
    let agent_log = |n: &str| std::fs::read_to_string(c.dir.path().join(format!("agent-{n}.log"))).unwrap_or_default();

    let work = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = c.write(
        "busy.yaml",
        &format!(
            "name: busy\ntasks:\n  - name: t\n    replicas: 1\n    resources: {{cpu: 4}}\n    workingDir: {}\n    \
             output: /dev/null\n    command: [sh, -c, 'while :; do :; done']\n",
            path_str(work.path())
        ),
    );
    assert!(c.cli(&user, &["submit", path_str(&file)]).status.success());
    let job = wait_for(LONG, "busy running", || {
        let j = c.jobs(&user, &["busy"]).remove(0);
        all_running(&j).then_some(j)
    });
    let on = job["tasks"][0]["node"].as_str().unwrap().to_string();
    let idle = NODES.iter().find(|n| **n != on).unwrap().to_string();
    assert!(c.cli("root", &["nodes", "drain", &idle]).status.success());

    // The planner.
    let (status, ctype, text) = scrape(&planner);
    assert_eq!(status, "HTTP/1.1 200 OK", "{text}");
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    let f = parse(py, &text);
    assert_eq!(
        sample(&f, "hyperplan_jobs", &[("queue", "default"), ("status", "running")]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&f, "hyperplan_nodes", &[("state", "drained")]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&f, "hyperplan_nodes", &[("state", "ready")]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(sample(&f, "hyperplan_agents_connected", &[]), Some(3.0));
    assert_eq!(sample(&f, "hyperplan_leader", &[]), Some(1.0));
    assert_eq!(sample(&f, "hyperplan_placements_total", &[]), Some(1.0));
    assert_eq!(sample(&f, "hyperplan_launches_total", &[]), Some(1.0));
    assert_eq!(sample(&f, "hyperplan_launch_latency_seconds_count", &[]), Some(1.0));
    assert_eq!(family_type(&f, "hyperplan_launch_latency_seconds"), Some("histogram"));
    assert!(sample(&f, "hyperplan_tick_duration_seconds_count", &[("system", "allocate")]).unwrap() >= 1.0);
    assert!(sample(&f, "hyperplan_tick_duration_seconds_count", &[("system", "tick")]).unwrap() >= 1.0);
    assert!(sample(&f, "hyperplan_store_commit_duration_seconds_count", &[]).unwrap() >= 1.0);
    // leaf1 holds n1, n2; the job's 4 CPUs (and a drained node's) are allocated.
    let leaf = |name, n: &str| sample(&f, name, &[("hypernode", n), ("tier", "1")]);
    assert_eq!(leaf("hyperplan_hypernode_cpus", "leaf1"), Some(8.0), "{text}");
    let allocated = leaf("hyperplan_hypernode_cpus_allocated", "leaf1").unwrap()
        + leaf("hyperplan_hypernode_cpus_allocated", "leaf2").unwrap();
    assert_eq!(allocated, 8.0, "the job's node and the drained one: {text}");
    assert_eq!(
        sample(&f, "hyperplan_discovery_source_up", &[("source", "slurm")]),
        Some(1.0),
        "{text}"
    );
    assert!(
        sample(
            &f,
            "hyperplan_discovery_source_last_success_timestamp_seconds",
            &[("source", "slurm")]
        )
        .unwrap()
            > 1.7e9,
        "{text}"
    );
    // No job or task name is a label anywhere.
    assert!(!text.contains("busy"), "{text}");

    // Asked for nothing in particular (curl, promtool's users): the classic text format.
    let (status, ctype, classic) = scrape_accepting(&planner, None);
    assert_eq!(status, "HTTP/1.1 200 OK", "{classic}");
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"), "{classic}");
    assert!(
        classic.contains("# HELP hyperplan_placements_total Tasks placed on nodes.\n"),
        "{classic}"
    );
    let fc = parse_as(py, "classic", &classic);
    assert_eq!(sample(&fc, "hyperplan_placements_total", &[]), Some(1.0), "{classic}");
    assert_eq!(
        sample(&fc, "hyperplan_nodes", &[("state", "drained")]),
        Some(1.0),
        "{classic}"
    );
    assert_eq!(family_type(&fc, "hyperplan_launch_latency_seconds"), Some("histogram"));
    assert_eq!(
        fc.len(),
        f.len(),
        "the same families in both formats:\n{classic}\n{text}"
    );
    match promtool_check(&classic) {
        None => println!("promtool check metrics skipped: promtool (apt prometheus) is not on PATH"),
        Some((code, said)) => {
            println!("promtool check metrics: exit {code}, said {said:?}");
            assert_eq!((code, said.trim()), (0, ""), "promtool check metrics on\n{classic}");
        }
    }

    // The agent of the node that runs it.
    let addr = wait_for(LONG, "the agent's metrics address", || metrics_addr(&agent_log(&on)));
    let f = wait_for(LONG, "the task's use sampled", || {
        let (_, _, text) = scrape(&addr);
        let f = parse(py, &text);
        sample(&f, "hyperplan_agent_task_cpu_cores", &[("index", "0")]).map(|_| f)
    });
    assert_eq!(sample(&f, "hyperplan_agent_tasks_running", &[]), Some(1.0));
    assert_eq!(sample(&f, "hyperplan_agent_link_up", &[]), Some(1.0));
    assert!(sample(&f, "hyperplan_agent_task_memory_bytes", &[("index", "0")]).unwrap() > 0.0);
    assert!(sample(&f, "hyperplan_agent_probe_duration_seconds", &[]).is_some());
    assert_eq!(sample(&f, "hyperplan_agent_unacknowledged_task_ends", &[]), Some(0.0));
    // An idle agent.
    let addr = wait_for(LONG, "an idle agent's metrics address", || {
        metrics_addr(&agent_log(&idle))
    });
    let (_, _, text) = scrape(&addr);
    assert_eq!(
        sample(&parse(py, &text), "hyperplan_agent_tasks_running", &[]),
        Some(0.0)
    );
    assert!(c.cli(&user, &["cancel", "busy"]).status.success());
}
