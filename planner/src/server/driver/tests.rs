//! The driver in process: a real store and its writer thread in a temporary directory,
//! fake agent links (a frame channel and a [`LinkControl`] that records its close), a
//! virtual clock, and ticks when the test says. What the driver sends after a commit
//! arrives through the writer, so the tests wait for frames and replies, never for time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyperplan_core::testing::MachineBuilder;
use hyperplan_net::messages::{AgentMessage, LogChunk, RequestCommand, ResponseError, TaskFinished, TaskStarted};
use hyperplan_shared::taskend::{TaskEnd, TaskOutcome};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use super::*;
use crate::server::close;
use crate::server::inbox::{AgentLink, FromAgent, LinkControl, Request, StepEnded};
use std::collections::BTreeMap;

/// A link's far end as the test sees it: what the driver closed it with.
#[derive(Debug)]
struct FakeControl {
    peer: SocketAddr,
    closed: Mutex<Option<(u32, String)>>,
}

impl LinkControl for FakeControl {
    fn close(&self, code: u32, reason: &str) {
        *self.closed.lock().unwrap() = Some((code, reason.to_string()));
    }

    fn peer(&self) -> SocketAddr {
        self.peer
    }
}

/// A fake agent: the frames the driver sends it and how its link was closed.
struct Agent {
    node: String,
    link_id: u64,
    frames: mpsc::UnboundedReceiver<PlannerToAgent>,
    control: Arc<FakeControl>,
}

impl Agent {
    /// The next frame; a test fails rather than hangs when none comes.
    async fn next(&mut self) -> PlannerToAgent {
        tokio::time::timeout(Duration::from_secs(10), self.frames.recv())
            .await
            .expect("no frame within 10 s")
            .expect("the link's sender is gone")
    }

    /// Frames until one `pick` accepts (those before it are skipped).
    async fn until<T>(&mut self, mut pick: impl FnMut(PlannerToAgent) -> Option<T>) -> T {
        loop {
            if let Some(t) = pick(self.next().await) {
                return t;
            }
        }
    }

    /// The next `Ack`: (task, finished).
    async fn ack(&mut self) -> (String, bool) {
        self.until(|f| match f {
            PlannerToAgent::Ack { task, finished } => Some((task.task, finished)),
            _ => None,
        })
        .await
    }

    fn closed(&self) -> Option<(u32, String)> {
        self.control.closed.lock().unwrap().clone()
    }

    fn says(&self, message: AgentMessage) -> ToCore {
        ToCore::Agent(FromAgent::Tasks {
            node: self.node.clone(),
            link_id: self.link_id,
            message: Box::new(message),
        })
    }

    fn gone(&self) -> ToCore {
        ToCore::Agent(FromAgent::Gone {
            node: self.node.clone(),
            link_id: self.link_id,
        })
    }
}

/// A driver with its store in a temporary directory, on a virtual clock.
struct Rig {
    d: Option<Driver>,
    clock: Clock,
    dir: tempfile::TempDir,
    config: String,
    writer: Option<std::thread::JoinHandle<()>>,
    next_link: u64,
}

/// 2026-11-27 00:00 UTC: job times read as dates.
const T0_MS: u64 = 1_795_737_600_000;

impl Rig {
    fn new(extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = format!("[store]\npath = \"{}/state.redb\"\n{extra}", dir.path().display());
        let mut rig = Self {
            d: None,
            clock: Clock::virtual_at(T0_MS),
            dir,
            config,
            writer: None,
            next_link: 0,
        };
        rig.start();
        rig
    }

    /// Starts a driver on the rig's store, as the daemon does (a restart after `stop`).
    fn start(&mut self) {
        let origin = self.dir.path().join("planner.toml");
        let config = DaemonConfig::parse(&self.config, &origin.display().to_string()).unwrap();
        let store = Store::open(&config.store).unwrap();
        let Store::Embedded(s) = &store else { panic!("embedded") };
        let loaded = s.load().unwrap();
        let (failed, _) = watch::channel(None);
        let (writer, thread) =
            crate::store::writer::Writer::spawn(store.clone(), failed, crate::metrics::Metrics::new(), None).unwrap();
        let start = Start {
            store,
            loaded,
            writer,
            advertise: "127.0.0.1:7070".into(),
            describe: "test store".into(),
            metrics: crate::metrics::Metrics::new(),
            accounting: None,
        };
        self.d = Some(Driver::new(config, start, self.clock.clone()));
        self.writer = Some(thread);
        self.flush();
    }

    /// Stops the driver; its writer writes what is queued and closes the store.
    fn stop(&mut self) {
        self.d = None;
        if let Some(t) = self.writer.take() {
            t.join().unwrap();
        }
    }

    fn d(&mut self) -> &mut Driver {
        self.d.as_mut().expect("started")
    }

    fn flush(&mut self) {
        self.d().flush();
    }

    /// One tick, then the commit and what waits for it.
    fn step(&mut self) {
        self.d().tick();
        self.flush();
    }

    fn handle(&mut self, msg: ToCore) {
        self.d().handle(msg);
        self.flush();
    }

    /// An agent for `node` (8 PUs) registering on a new link, having obeyed `epoch`.
    fn connect(&mut self, node: &str, epoch: u64) -> Agent {
        self.next_link += 1;
        let (tx, frames) = mpsc::unbounded_channel();
        let control = Arc::new(FakeControl {
            peer: SocketAddr::from(([10, 0, 0, self.next_link as u8], 40000)),
            closed: Mutex::new(None),
        });
        let topology = MachineBuilder::new(1, 1, 4, 2).build();
        self.handle(ToCore::Agent(FromAgent::Register {
            node: node.into(),
            link_id: self.next_link,
            labels: BTreeMap::new(),
            topology: Box::new(topology),
            confinement: None,
            advertise: None,
            epoch,
            link: AgentLink {
                frames: tx,
                control: control.clone(),
            },
        }));
        Agent {
            node: node.into(),
            link_id: self.next_link,
            frames,
            control,
        }
    }

    /// A request from `user`; the answer comes once what it changed is committed. A
    /// submitted file is read first, as its connection's task reads it (a refusal there
    /// is answered without the driver).
    fn ask(&mut self, user: &str, admin: bool, command: RequestCommand) -> oneshot::Receiver<Answer> {
        let (reply, answer) = oneshot::channel();
        let asked = match crate::server::submission::read(command) {
            Ok(asked) => asked,
            Err(refused) => {
                let _ = reply.send(Err(refused));
                return answer;
            }
        };
        self.handle(ToCore::Request(Request {
            user: user.into(),
            admin,
            groups: Vec::new(),
            peer: SocketAddr::from(([127, 0, 0, 1], 50000)),
            asked,
            reply,
        }));
        answer
    }

    async fn answer(&mut self, user: &str, admin: bool, command: RequestCommand) -> Answer {
        let rx = self.ask(user, admin, command);
        wait(rx).await
    }

    async fn submit(&mut self, user: &str, yaml: &str) -> Answer {
        let command = RequestCommand::Submit {
            file_name: "job.yaml".into(),
            text: yaml.into(),
            submit_dir: Some("/home/test".into()),
            hold: false,
            begin: None,
            array: None,
            dependency: None,
            account: None,
        };
        self.answer(user, false, command).await
    }

    async fn status(&mut self, user: &str, job: &str) -> Answer {
        let command = RequestCommand::Status {
            job: Some(job.into()),
            all: false,
            since_secs: None,
            page: None,
        };
        self.answer(user, false, command).await
    }

    async fn nodes(&mut self) -> Value {
        self.answer("root", true, RequestCommand::Nodes).await.unwrap()
    }

    fn epoch(&mut self) -> u64 {
        self.d().epoch
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop();
    }
}

type Answer = Result<Value, ResponseError>;

async fn wait(rx: oneshot::Receiver<Answer>) -> Answer {
    tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .expect("no answer within 10 s")
        .expect("the reply was dropped")
}

fn job(name: &str, replicas: u32) -> String {
    format!("name: {name}\ntasks:\n  - name: w\n    replicas: {replicas}\n    resources: {{cpu: 1}}\n")
}

fn node<'a>(nodes: &'a Value, name: &str) -> &'a Value {
    nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name} in {nodes}"))
}

/// The `Launch` frames up to and including the `count`-th, with the epochs they carry.
async fn launches(agent: &mut Agent, count: usize) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    while out.len() < count {
        if let PlannerToAgent::Launch(l) = agent.next().await {
            out.push((l.task.clone(), l.epoch));
        }
    }
    out
}

/// `w-<i>` of the one-role jobs here: index `i`.
fn index_of(task: &str) -> u32 {
    task.rsplit_once('-').and_then(|(_, i)| i.parse().ok()).unwrap_or(0)
}

/// `n1` registered and alice's `train` (`tasks` tasks) placed there, its Launches read.
async fn train_placed(rig: &mut Rig, tasks: u32) -> Agent {
    let mut a = rig.connect("n1", 0);
    rig.step();
    rig.submit("alice", &job("train", tasks)).await.unwrap();
    rig.step();
    launches(&mut a, tasks as usize).await;
    a
}

fn started(agent: &Agent, job: &str, job_id: u64, task: &str) -> ToCore {
    agent.says(AgentMessage::TaskStarted(TaskStarted {
        task: TaskRef {
            job: job.into(),
            job_id: job_id.into(),
            task: task.into(),
            index: index_of(task),
        },
        pid: 4242,
        start_time_ms: T0_MS,
    }))
}

fn finished(agent: &Agent, job: &str, job_id: u64, task: &str) -> ToCore {
    agent.says(AgentMessage::TaskFinished(Box::new(TaskFinished {
        task: TaskRef {
            job: job.into(),
            job_id: job_id.into(),
            task: task.into(),
            index: index_of(task),
        },
        end: TaskEnd {
            outcome: TaskOutcome::Exited,
            exit_code: Some(0),
            signal: None,
            pid: Some(4242),
            start_time_ms: Some(T0_MS),
            end_time_ms: T0_MS + 1000,
            cpu_seconds: 0.5,
            max_rss_bytes: 1 << 20,
            oom_killed: false,
            reason: None,
        },
    })))
}

#[tokio::test]
async fn a_registered_agent_hears_its_interval_epoch_and_fence_and_its_node_is_ready() {
    let mut rig = Rig::new("[server]\nheartbeatInterval = 2\nnodeLostAfter = 30\n");
    let epoch = rig.epoch();
    assert!(epoch >= 1, "a start raises the epoch");
    let mut a = rig.connect("n1", 0);
    match a.next().await {
        PlannerToAgent::Registered {
            node,
            heartbeat_interval_ms,
            epoch: e,
            fence_after_ms,
        } => assert_eq!(
            (node.as_str(), heartbeat_interval_ms, e, fence_after_ms),
            // Silent for 3 heartbeats of 2 s, then nodeLostAfter.
            ("n1", 2000, epoch, Some(36_000))
        ),
        other => panic!("expected Registered, got {other:?}"),
    }
    // Each heartbeat is acknowledged: the agent's node-lost fence counts from it.
    rig.handle(ToCore::Agent(FromAgent::Heartbeat {
        node: "n1".into(),
        link_id: a.link_id,
        seq: 7,
        running: Vec::new(),
        ports_in_use: Vec::new(),
        strained: None,
        health: None,
    }));
    assert_eq!(a.next().await, PlannerToAgent::HeartbeatAck { seq: 7 });
    rig.step();
    let nodes = rig.nodes().await;
    assert_eq!(node(&nodes, "n1")["state"], "Ready", "{nodes}");
    assert_eq!(a.closed(), None);
}

#[tokio::test]
async fn an_agent_that_obeyed_a_newer_epoch_is_closed_and_the_node_says_why() {
    let mut rig = Rig::new("");
    let newer = rig.epoch() + 1;
    let a = rig.connect("n1", newer);
    let (code, why) = a.closed().expect("closed");
    assert_eq!(code, close::STALE_EPOCH);
    assert!(why.contains(&format!("obeyed planner epoch {newer}")), "{why}");
    rig.step();
    let nodes = rig.nodes().await.to_string();
    assert!(nodes.contains("obeyed planner epoch"), "people see why: {nodes}");
}

#[tokio::test]
async fn a_second_link_for_a_live_node_is_refused_and_the_first_keeps_it() {
    let mut rig = Rig::new("");
    let first = rig.connect("n1", 0);
    rig.step();
    let mut second = rig.connect("n1", 0);
    let (code, _) = second.closed().expect("the second link is refused");
    assert_eq!(code, close::REFUSED);
    assert_eq!(first.closed(), None, "the first agent keeps its node");
    assert!(second.frames.try_recv().is_err(), "no Registered for a refused link");
}

#[tokio::test]
async fn a_silent_link_is_replaced_by_a_new_one_of_the_same_node() {
    let mut rig = Rig::new("[server]\nheartbeatInterval = 1\nnodeLostAfter = 30\n");
    let first = rig.connect("n1", 0);
    rig.step();
    rig.clock.advance(Duration::from_secs(20));
    rig.step();
    let nodes = rig.nodes().await;
    assert_eq!(node(&nodes, "n1")["state"], "NotReady", "silent: NotReady {nodes}");
    let mut second = rig.connect("n1", 0);
    let (code, why) = first.closed().expect("the silent link is closed");
    assert_eq!(code, close::NORMAL);
    assert!(why.contains("replaced by a newer connection"), "{why}");
    assert!(matches!(second.next().await, PlannerToAgent::Registered { .. }));
    rig.step();
    assert_eq!(node(&rig.nodes().await, "n1")["state"], "Ready");
}

#[tokio::test]
async fn a_submission_is_answered_with_its_ids_once_committed_and_launched_on_the_next_tick() {
    let mut rig = Rig::new("");
    let mut a = rig.connect("n1", 0);
    rig.step();
    let v = rig.submit("alice", &job("train", 2)).await.unwrap();
    assert_eq!(v["submitted"], serde_json::json!(["train"]));
    assert_eq!(v["ids"], serde_json::json!([1]));
    let v = rig.submit("alice", &job("eval", 1)).await.unwrap();
    assert_eq!(v["ids"], serde_json::json!([2]), "ids count up without a tick between");
    rig.step();
    let epoch = rig.epoch();
    let world = a
        .until(|f| match f {
            PlannerToAgent::Job(w) if w.job == "eval" => Some(w),
            _ => None,
        })
        .await;
    assert_eq!(world.job_id.0, 2);
    let mut l = launches(&mut a, 1).await;
    l.sort();
    assert_eq!(l, vec![("w-0".to_string(), epoch)]);
    let v = rig.status("alice", "train").await.unwrap();
    assert_eq!(v["jobs"][0]["status"], "placed", "{v}");
    assert_eq!(v["jobs"][0]["owner"], "alice");
}

#[tokio::test]
async fn a_node_that_registers_again_gets_the_launch_of_its_unstarted_tasks() {
    let mut rig = Rig::new("");
    let a = train_placed(&mut rig, 2).await;
    // rank 0 started; the link then dropped, and the agent came back on a new one.
    rig.handle(started(&a, "train", 1, "w-0"));
    rig.step();
    rig.handle(a.gone());
    rig.step();
    let mut b = rig.connect("n1", 0);
    rig.step();
    assert!(matches!(b.next().await, PlannerToAgent::Registered { .. }));
    assert_eq!(launches(&mut b, 1).await[0].0, "w-1", "only the unstarted task again");
    rig.step();
    assert!(
        !std::iter::from_fn(|| b.frames.try_recv().ok()).any(|f| matches!(f, PlannerToAgent::Launch(_))),
        "once per registration"
    );
}

#[tokio::test]
async fn task_starts_and_ends_are_acknowledged_after_their_commit_and_end_the_job() {
    let mut rig = Rig::new("");
    let mut a = train_placed(&mut rig, 1).await;
    rig.handle(started(&a, "train", 1, "w-0"));
    assert!(a.frames.try_recv().is_err(), "no Ack before the tick that applies it");
    rig.step();
    let ack = a.ack().await;
    assert_eq!(ack, ("w-0".to_string(), false));
    rig.handle(finished(&a, "train", 1, "w-0"));
    rig.step();
    let ack = a.ack().await;
    assert_eq!(ack, ("w-0".to_string(), true));
    let v = rig.status("alice", "train").await.unwrap();
    assert_eq!(v["jobs"][0]["status"], "completed", "{v}");
    assert_eq!(v["jobs"][0]["exitCode"], 0);
}

#[tokio::test]
async fn only_the_owner_or_an_admin_may_cancel_and_a_cancel_kills_on_the_node() {
    let mut rig = Rig::new("");
    let mut a = train_placed(&mut rig, 1).await;
    rig.handle(started(&a, "train", 1, "w-0"));
    rig.step();
    let cancel = |grace_secs| RequestCommand::Cancel {
        job: "train".into(),
        grace_secs,
    };
    let e = rig.answer("bob", false, cancel(5)).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "job train belongs to alice; only alice or an admin may cancel it"
    );
    let v = rig.answer("alice", false, cancel(7)).await.unwrap();
    assert_eq!(v["cancelled"], "train");
    let kill = a
        .until(|f| match f {
            PlannerToAgent::Kill {
                task,
                grace_secs,
                epoch,
                ..
            } => Some((task.task, grace_secs, epoch)),
            _ => None,
        })
        .await;
    assert_eq!(kill, ("w-0".to_string(), 7, rig.epoch()));
}

#[tokio::test]
async fn logs_are_read_on_the_tasks_node_for_its_owner_only() {
    let mut rig = Rig::new("");
    let mut a = train_placed(&mut rig, 1).await;
    let logs = || RequestCommand::Logs {
        job: "train".into(),
        task: None,
        stderr: false,
        offset: 0,
        max_bytes: 4096,
        node: None,
    };
    let e = rig.answer("bob", false, logs()).await.unwrap_err();
    assert!(
        e.to_string().contains("only its owner or an admin may read its output"),
        "{e}"
    );
    let answer = rig.ask("alice", false, logs());
    let (request, task) = a
        .until(|f| match f {
            PlannerToAgent::ReadLog { request, task, .. } => Some((request, task)),
            _ => None,
        })
        .await;
    assert_eq!(
        (task.job.as_str(), task.job_id, task.task.as_str()),
        ("train", 1.into(), "w-0")
    );
    rig.handle(a.says(AgentMessage::Log(LogChunk {
        request,
        offset: 0,
        data: b"epoch 1 loss 0.3\n".to_vec(),
        size: 17,
        error: None,
    })));
    let v = wait(answer).await.unwrap();
    assert_eq!(v["data"], "epoch 1 loss 0.3\n");
    assert_eq!(v["node"], "n1");
}

#[tokio::test]
async fn a_link_that_ends_fails_the_logs_requests_waiting_for_it_and_its_node_turns_not_ready() {
    let mut rig = Rig::new("");
    let a = train_placed(&mut rig, 1).await;
    let answer = rig.ask(
        "alice",
        false,
        RequestCommand::Logs {
            job: "train".into(),
            task: Some("w-0".into()),
            stderr: true,
            offset: 0,
            max_bytes: 10,
            node: None,
        },
    );
    rig.handle(a.gone());
    let e = wait(answer).await.unwrap_err();
    assert!(e.to_string().contains("node n1 disconnected"), "{e}");
    rig.step();
    assert_eq!(node(&rig.nodes().await, "n1")["state"], "NotReady");
}

#[tokio::test]
async fn a_refused_submission_names_the_file_and_admits_nothing() {
    let mut rig = Rig::new("[limits]\nmaxTasksPerJob = 2\n");
    let two = format!("{}---\n{}", job("small", 1), job("big", 3));
    let e = rig.submit("alice", &two).await.unwrap_err().to_string();
    assert!(e.starts_with("job.yaml: "), "{e}");
    assert!(e.contains("maxTasksPerJob = 2"), "{e}");
    let e = rig.status("alice", "small").await.unwrap_err().to_string();
    assert_eq!(e, "no job named \"small\"", "all or nothing");
    let bad = rig
        .answer(
            "alice",
            false,
            RequestCommand::Submit {
                file_name: "job.yaml".into(),
                text: job("x", 1),
                submit_dir: Some("relative/dir".into()),
                hold: false,
                begin: None,
                array: None,
                dependency: None,
                account: None,
            },
        )
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("must be an absolute path"), "{bad}");
}

#[tokio::test]
async fn queues_refuse_at_submit_and_a_reload_adds_one_but_keeps_one_in_use() {
    let queues = "[[queue]]\nname = \"gpu\"\nusers = [\"alice\"]\nmaxTimeLimit = \"1h\"\n";
    let mut rig = Rig::new(queues);
    let in_queue = |name: &str, queue: &str| format!("{}queue: {queue}\n", job(name, 1));
    let e = rig
        .submit("alice", &in_queue("a", "cpu"))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(e, "job.yaml: job a: queue \"cpu\" does not exist; queues: default, gpu");
    let e = rig.submit("bob", &in_queue("b", "gpu")).await.unwrap_err().to_string();
    assert_eq!(
        e,
        "job.yaml: job b: user bob may not submit to queue \"gpu\"; it takes users alice"
    );
    let long = format!("{}timeLimit: 2h\n", in_queue("c", "gpu"));
    let e = rig.submit("alice", &long).await.unwrap_err().to_string();
    assert_eq!(
        e,
        "job.yaml: job c: timeLimit 2h is above queue \"gpu\"'s maxTimeLimit of 1h"
    );
    rig.submit("alice", &in_queue("d", "gpu")).await.unwrap();
    let as_bob = format!("{}user: bob\n", job("f", 1));
    let e = rig.submit("alice", &as_bob).await.unwrap_err().to_string();
    assert_eq!(
        e,
        "job.yaml: job f: user: \"bob\" is not you (alice); `user` is read by `hyperplan simulate` only, the planner takes who submits from the certificate"
    );
    // SIGHUP with a file that drops gpu (d waits in it) and adds cpu: refused whole.
    let drop_gpu = hyperplan_core::PlannerConfig::parse("[[queue]]\nname = \"cpu\"\n", "planner.toml").unwrap();
    rig.handle(ToCore::Policy(Box::new(drop_gpu)));
    let e = rig.submit("bob", &in_queue("e", "cpu")).await.unwrap_err().to_string();
    assert!(e.contains("queue \"cpu\" does not exist"), "{e}");
    // One that keeps gpu and adds cpu is taken.
    let both =
        hyperplan_core::PlannerConfig::parse(&format!("{queues}[[queue]]\nname = \"cpu\"\n"), "planner.toml").unwrap();
    rig.handle(ToCore::Policy(Box::new(both)));
    rig.submit("bob", &in_queue("e", "cpu")).await.unwrap();
    let q = rig.answer("bob", false, RequestCommand::Queues).await.unwrap();
    let names: Vec<&str> = q["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "cpu", "gpu"]);
}

#[tokio::test]
async fn holds_are_answered_once_committed_and_kept_across_a_restart() {
    let mut rig = Rig::new("");
    let submit = RequestCommand::Submit {
        file_name: "job.yaml".into(),
        text: job("h", 1),
        submit_dir: Some("/home/test".into()),
        hold: true,
        begin: Some(4_102_444_800),
        array: None,
        dependency: None,
        account: None,
    };
    rig.answer("alice", false, submit).await.unwrap();
    rig.step();
    let reason = |v: Value| v["jobs"][0]["reason"].clone();
    assert_eq!(reason(rig.status("alice", "h").await.unwrap()), "held by alice");
    let release = || RequestCommand::Release { jobs: vec!["h".into()] };
    let e = rig.answer("bob", false, release()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "job h belongs to alice; only alice or an admin may release it"
    );
    let hold = RequestCommand::Hold { jobs: vec!["h".into()] };
    let v = rig.answer("root", true, hold).await.unwrap();
    assert_eq!(v, serde_json::json!({"action": "held", "jobs": ["h"]}));
    rig.stop();
    rig.clock.advance(Duration::from_secs(5));
    rig.start();
    rig.step();
    let v = rig.status("alice", "h").await.unwrap();
    assert_eq!(reason(v), "held by an admin (root)");
    let e = rig.answer("alice", false, release()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "job h is held by an admin (root); only an admin may release it"
    );
    rig.answer("root", true, release()).await.unwrap();
    rig.step();
    let v = rig.status("alice", "h").await.unwrap();
    assert_eq!(reason(v), "begins 2100-01-01T00:00Z");
}

#[tokio::test]
async fn under_private_data_another_users_job_reads_as_missing() {
    let mut rig = Rig::new("[server]\nprivateData = true\n");
    rig.submit("alice", &job("secret", 1)).await.unwrap();
    rig.step();
    for command in [
        RequestCommand::Status {
            job: Some("secret".into()),
            all: false,
            since_secs: None,
            page: None,
        },
        RequestCommand::Explain { job: "secret".into() },
        RequestCommand::Cancel {
            job: "secret".into(),
            grace_secs: 1,
        },
        RequestCommand::Hold {
            jobs: vec!["secret".into()],
        },
        RequestCommand::Release {
            jobs: vec!["secret".into()],
        },
        RequestCommand::Logs {
            job: "secret".into(),
            task: None,
            stderr: false,
            offset: 0,
            max_bytes: 1,
            node: None,
        },
    ] {
        let e = rig.answer("bob", false, command.clone()).await.unwrap_err();
        assert_eq!(e.to_string(), "no job named \"secret\"", "{command:?}");
    }
    let all = rig
        .answer(
            "bob",
            false,
            RequestCommand::Status {
                job: None,
                all: true,
                since_secs: None,
                page: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(all["jobs"], serde_json::json!([]), "{all}");
    assert_eq!(
        rig.status("alice", "secret").await.unwrap()["jobs"][0]["name"],
        "secret"
    );
}

#[tokio::test]
async fn a_job_that_ended_before_a_restart_is_read_from_the_store_and_ids_go_on() {
    let mut rig = Rig::new("");
    train_ended(&mut rig).await;
    let before = rig.epoch();
    rig.stop();
    rig.clock.advance(Duration::from_secs(60));
    rig.start();
    assert!(rig.epoch() > before, "a restart raises the epoch");
    let v = rig.status("alice", "train").await.unwrap();
    assert_eq!(v["jobs"][0]["status"], "completed", "{v}");
    assert_eq!(v["jobs"][0]["id"], 1);
    let v = rig.submit("alice", &job("train", 1)).await.unwrap();
    assert_eq!(
        v["ids"],
        serde_json::json!([2]),
        "the name is free again, the id is new"
    );
    let all = rig
        .answer(
            "alice",
            false,
            RequestCommand::Status {
                job: Some("train".into()),
                all: true,
                since_secs: None,
                page: None,
            },
        )
        .await
        .unwrap();
    let ids: Vec<u64> = all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![1, 2], "stored and live, by id");
}

/// Job 1, `train`, placed, started and ended (and committed).
async fn train_ended(rig: &mut Rig) {
    let a = train_placed(rig, 1).await;
    rig.handle(started(&a, "train", 1, "w-0"));
    rig.handle(finished(&a, "train", 1, "w-0"));
    rig.step();
}

/// Restarts the rig: the writer has done all it was handed, and a purge due is done.
fn restart(rig: &mut Rig) {
    rig.stop();
    rig.start();
}

/// Ended jobs' ids in `status --all` for alice.
async fn all_ids(rig: &mut Rig) -> Vec<u64> {
    let command = RequestCommand::Status {
        job: None,
        all: true,
        since_secs: None,
        page: None,
    };
    let all = rig.answer("alice", false, command).await.unwrap();
    all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn ended_jobs_are_deleted_keep_finished_after_they_ended_by_the_drivers_clock() {
    // The one clock: the rig's virtual clock says 2026-11-27 whatever the date is, and
    // the purge of ended jobs follows it, not the wall clock.
    let mut rig = Rig::new("keepFinished = 3600");
    train_ended(&mut rig).await;
    rig.clock.advance(Duration::from_secs(1800));
    rig.step();
    restart(&mut rig);
    assert_eq!(
        all_ids(&mut rig).await,
        vec![1],
        "half an hour after it ended, it is kept"
    );
    rig.clock.advance(Duration::from_secs(3 * 3600));
    rig.step();
    restart(&mut rig);
    assert_eq!(
        all_ids(&mut rig).await,
        Vec::<u64>::new(),
        "past keepFinished, it is gone"
    );
}

#[tokio::test]
async fn an_ended_job_leaves_the_planners_memory_keep_finished_after_it_ended() {
    let mut rig = Rig::new("keepFinished = 3600");
    train_ended(&mut rig).await;
    let in_memory = |rig: &mut Rig| rig.d().planner.jobs().iter().map(|j| j.id).collect::<Vec<u64>>();
    rig.clock.advance(Duration::from_secs(1800));
    rig.step();
    assert_eq!(in_memory(&mut rig), vec![1], "half an hour after it ended, it is kept");
    rig.clock.advance(Duration::from_secs(1801));
    rig.step();
    assert_eq!(
        in_memory(&mut rig),
        Vec::<u64>::new(),
        "past keepFinished, it left memory"
    );
}

#[tokio::test]
async fn a_planner_started_with_its_clock_days_ahead_deletes_no_history() {
    let mut rig = Rig::new("keepFinished = 86400");
    train_ended(&mut rig).await;
    rig.stop();
    // Started again with a clock 8 days ahead: the job ended "8 days ago" by it.
    rig.clock.advance(Duration::from_secs(8 * 86_400));
    rig.start();
    rig.step();
    restart(&mut rig);
    assert_eq!(all_ids(&mut rig).await, vec![1], "kept: the store's time has not moved");
    // A day and more of running: now it is old by the store's time too.
    rig.clock.advance(Duration::from_secs(86_400 + 2 * 3600));
    rig.step();
    restart(&mut rig);
    assert_eq!(
        all_ids(&mut rig).await,
        Vec::<u64>::new(),
        "past keepFinished of running"
    );
}

/// The `default` queue's usage and alice's there, as `hyperplan queues` reports them.
fn default_usage(rig: &mut Rig) -> (f64, f64) {
    let report = rig.d().planner.queues();
    let q = report
        .queues
        .iter()
        .find(|q| q.name == "default")
        .unwrap_or_else(|| panic!("no default queue in {report:?}"));
    let alice = q.users.iter().find(|u| u.user == "alice").map_or(0.0, |u| u.usage);
    (q.usage, alice)
}

#[tokio::test]
async fn fair_share_usage_is_stored_and_a_restart_goes_on_from_it() {
    let mut rig = Rig::new("");
    let a = train_placed(&mut rig, 1).await;
    rig.handle(started(&a, "train", 1, "w-0"));
    rig.step();
    // Two minutes of one core: past `[priority] recalcInterval` (60 s), so this tick's
    // commit carries the usage table.
    rig.clock.advance(Duration::from_secs(120));
    rig.step();
    let (queue, alice) = default_usage(&mut rig);
    assert!((100.0..=121.0).contains(&alice), "one core for 120 s: {alice}");
    assert!((queue - alice).abs() < 1e-9, "alice alone: {queue} vs {alice}");
    rig.stop();
    let down = 30u64;
    rig.clock.advance(Duration::from_secs(down));
    rig.start();
    let (queue_after, alice_after) = default_usage(&mut rig);
    // Decayed over the time down (half-life 7 days), nothing lost, nothing counted twice.
    let half_life = 7.0 * 86_400.0;
    let decayed = alice * (-(down as f64) / half_life).exp2();
    assert!(
        (alice_after - decayed).abs() < 1e-6 * alice,
        "before {alice}, after {alice_after}, expected {decayed}"
    );
    assert!(
        (queue_after - alice_after).abs() < 1e-9,
        "{queue_after} vs {alice_after}"
    );
}

#[tokio::test]
async fn a_steps_end_from_its_exec_session_is_kept_in_the_jobs_record() {
    use hyperplan_core::model::jobstate::StepEnd;
    let mut rig = Rig::new("");
    let a = train_placed(&mut rig, 1).await;
    rig.handle(started(&a, "train", 1, "w-0"));
    rig.step();
    // What `exec` does when it plans a step, then what its session says at its end.
    let argv = vec!["sh".to_string(), "-c".into(), "exit 3".into()];
    let now = rig.clock.now_secs();
    let step = rig
        .d()
        .planner
        .begin_step("train", 1.into(), vec!["n1".into()], &argv, now);
    assert_eq!(step, Some(0));
    rig.clock.advance(Duration::from_secs(5));
    let mut end = StepEnd::default();
    end.node_exited(Some(3), None);
    rig.handle(ToCore::StepEnded(StepEnded {
        job: "train".into(),
        job_id: 1.into(),
        step: 0,
        end,
    }));
    rig.step();
    // Kept across a restart: it is in the stored record.
    restart(&mut rig);
    let v = rig.status("alice", "train").await.unwrap();
    let s = &v["jobs"][0]["steps"][0];
    assert_eq!(s["exitCode"], 3, "{v}");
    assert_eq!(s["startTime"], now, "{v}");
    assert_eq!(s["endTime"], now + 5, "{v}");
    assert_eq!(s["command"], "sh -c exit 3", "{v}");
    assert_eq!(s["nodes"], serde_json::json!(["n1"]), "{v}");
}
