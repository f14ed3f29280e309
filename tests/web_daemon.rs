//! End-to-end (issue 26): the web view of the real `hyperplan-planner` with agents on
//! 127.0.0.1, opened in headless Chromium (Debian's `chromium`, which `make deps`
//! installs; the test skips with a printed reason without it). Over TLS: refused without
//! a certificate or the token, served with a user's certificate or the token. A running
//! job's nodes light up in the page and a drained node is marked (read from the page's
//! `#summary` element after it rendered); a screenshot is saved under the test target
//! directory (`web-view.png`).
//!
//! Issue 38: one certificate holds at most 8 live streams (`/api/events`); one more is
//! refused with 429 and says why, while another certificate's stream is served, and a
//! stream that ended frees its slot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::ha::MACHINE;
use common::{Cluster, all_running, path_str, task_user, wait_for};

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const LONG: Duration = Duration::from_secs(40);
const TOKEN: &str = "s3cret-token-for-the-proxy-0123";

const PLANNER_TOML: &str = r#"
[web]
tokenFile = "web.token"

[[discovery]]
source = "slurm"
file = "topology.conf"
"#;

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser"].iter().find_map(|b| {
        let out = Command::new("sh")
            .args(["-c", &format!("command -v {b}")])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    })
}

/// `curl` of `url` with `args`: the HTTP status.
fn status(url: &str, args: &[&str]) -> u16 {
    let out = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20"])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
}

/// Headless Chromium on `url` with `args`, its own profile in `profile`.
fn browse(bin: &Path, profile: &Path, url: &str, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("90")
        .arg(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--ignore-certificate-errors",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .unwrap()
}

/// The value of `attr` on the page's `#summary` element in a DOM dump.
fn summary(dom: &str, attr: &str) -> Option<String> {
    let at = dom.find("id=\"summary\"")?;
    let tag = &dom[dom[..at].rfind('<')?..];
    let tag = &tag[..tag.find('>')?];
    let key = format!("{attr}=\"");
    let from = tag.find(&key)? + key.len();
    Some(tag[from..from + tag[from..].find('"')?].to_string())
}

#[test]
fn the_page_lights_a_jobs_nodes_and_marks_a_drained_one_in_chromium() {
    let Some(bin) = chromium() else {
        println!("skipped: no chromium (apt install chromium)");
        return;
    };
    let mut c = Cluster::prepare(&NODES, Some(PLANNER_TOML));
    c.write("topology.conf", "SwitchName=leaf1 Nodes=n[1-3]\n");
    let token = c.write("web.token", &format!("{TOKEN}\n"));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    c.planner_args = vec![
        "--web-listen".into(),
        "127.0.0.1:0".into(),
        "--metrics-listen".into(),
        "".into(),
    ];
    c.start_planner("127.0.0.1:0");
    let user = task_user();
    c.issue_user(&user);
    for n in NODES {
        c.start_agent(n, MACHINE, &[]);
    }
    for n in NODES {
        c.wait_state(n, "Ready", LONG);
    }
    let addr = wait_for(LONG, "the web view's address", || {
        let log = c.planner_log();
        let at = log.find("serving the web view on https://")? + "serving the web view on https://".len();
        Some(log[at..at + log[at..].find('/')?].to_string())
    });
    let base = format!("https://{addr}/");

    // Who may read it.
    assert_eq!(status(&format!("{base}api/state"), &[]), 401);
    assert_eq!(
        status(&format!("{base}api/state?token=wrong-token-wrong-token"), &[]),
        401
    );
    let bearer = format!("Authorization: Bearer {TOKEN}");
    assert_eq!(status(&format!("{base}api/state"), &["-H", &bearer]), 200);
    let certs = c.certs();
    let (cert, key) = (certs.join("users/alice.pem"), certs.join("users/alice.key"));
    let alice = ["--cert", path_str(&cert), "--key", path_str(&key)];
    assert_eq!(status(&format!("{base}api/state"), &alice), 200);
    assert_eq!(status(&format!("{base}api/nothing"), &alice), 404);

    // A job on two nodes; the third drained.
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = c.write(
        "train.yaml",
        &format!(
            "name: train\ntasks:\n  - name: t\n    replicas: 2\n    resources: {{cpu: 4}}\n    workingDir: {}\n    \
             output: /dev/null\n    command: [sleep, '600']\n",
            path_str(work.path())
        ),
    );
    assert!(c.cli(&user, &["submit", path_str(&file)]).status.success());
    let job = wait_for(LONG, "train running", || {
        let j = c.jobs(&user, &["train"]).remove(0);
        all_running(&j).then_some(j)
    });
    let mut on: Vec<String> = job["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["node"].as_str().unwrap().to_string())
        .collect();
    on.sort();
    let idle = NODES.iter().find(|n| !on.contains(&n.to_string())).unwrap().to_string();
    assert!(
        c.cli("root", &["nodes", "drain", &idle, "--reason", "fw"])
            .status
            .success()
    );

    // The page, rendered by Chromium.
    let profile = tempfile::tempdir().unwrap();
    let url = format!("{base}?token={TOKEN}#job=train");
    let out = browse(&bin, profile.path(), &url, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("id=\"summary\""),
        "no rendered page: {}\n{dom}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary(&dom, "data-nodes").as_deref(), Some("3"), "{dom}");
    assert_eq!(summary(&dom, "data-selected-job").as_deref(), Some("train"));
    assert_eq!(summary(&dom, "data-highlighted"), Some(on.join(" ")));
    assert_eq!(summary(&dom, "data-drained"), Some(idle.clone()));
    assert_eq!(summary(&dom, "data-notready").as_deref(), Some(""));

    // A screenshot, kept for people to look at.
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-view.png");
    let _ = std::fs::remove_file(&shot);
    let arg = format!("--screenshot={}", shot.display());
    let out = browse(&bin, profile.path(), &url, &[&arg, "--window-size=1280,900"]);
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot at {} ({e}): {}",
            shot.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{} bytes", png.len());
    println!("screenshot: {}", shot.display());

    // Live: the events stream sends the state at once.
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "3", "-H", &bearer])
        .arg(format!("{base}api/events"))
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout);
    assert!(events.starts_with("event: state\ndata: {"), "{events}");
    assert!(c.cli(&user, &["cancel", "train"]).status.success());
}

/// The web view's address once the planner logged it.
fn web_base(c: &Cluster) -> String {
    wait_for(LONG, "the web view's address", || {
        let log = c.planner_log();
        let at = log.find("serving the web view on https://")? + "serving the web view on https://".len();
        Some(format!("https://{}/", &log[at..at + log[at..].find('/')?]))
    })
}

/// `curl` arguments for `user`'s certificate.
fn cert_args(c: &Cluster, user: &str) -> Vec<String> {
    let certs = c.certs();
    vec![
        "--cert".into(),
        path_str(&certs.join(format!("users/{user}.pem"))).into(),
        "--key".into(),
        path_str(&certs.join(format!("users/{user}.key"))).into(),
    ]
}

/// A live stream of `/api/events` as `user`, once its first event came.
struct Stream(std::process::Child);

impl Stream {
    fn open(c: &Cluster, base: &str, user: &str) -> Stream {
        use std::io::BufRead;
        let mut child = Command::new("curl")
            .args(["-skN"])
            .args(cert_args(c, user))
            .arg(format!("{base}api/events"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert_eq!(first, "event: state\n", "{user}'s stream");
        Stream(child)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn one_certificate_cannot_take_every_live_stream() {
    let mut c = Cluster::prepare(&[], None);
    c.planner_args = ["--web-listen", "127.0.0.1:0", "--metrics-listen", ""]
        .map(String::from)
        .to_vec();
    c.start_planner("127.0.0.1:0");
    let base = web_base(&c);
    // alice's 8 streams (a few tabs): all served.
    let mut alices: Vec<Stream> = (0..8).map(|_| Stream::open(&c, &base, "alice")).collect();
    // Her ninth is refused, and says why.
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(cert_args(&c, "alice"))
        .arg(format!("{base}api/events"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    assert_eq!(code, "429", "{text}");
    assert_eq!(
        body.trim_end(),
        "the certificate of alice holds 8 live views (api/events) already, the most one certificate may: \
         close one (another tab or window of this view); the page reads api/state every few seconds meanwhile"
    );
    assert!(c.planner_log().contains("web: refused a live view"));
    // The state itself is still hers to read, and bob's stream is served.
    let alice = cert_args(&c, "alice");
    let alice: Vec<&str> = alice.iter().map(String::as_str).collect();
    assert_eq!(status(&format!("{base}api/state"), &alice), 200);
    let _bob = Stream::open(&c, &base, "bob");
    // One of hers ends: another is served again (once the planner saw it end).
    alices.pop();
    wait_for(LONG, "alice's slot back", || {
        let out = Command::new("curl")
            .args(["-sk", "--max-time", "2", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(&alice)
            .arg(format!("{base}api/events"))
            .output()
            .unwrap();
        (String::from_utf8_lossy(&out.stdout).trim() == "200").then_some(())
    });
}
