//! `hyperplan-agent run` running real tasks for a fake planner (QUIC on 127.0.0.1,
//! certificates in a temp dir): Job and Launch start a shepherd, `TaskStarted` and
//! `TaskFinished` come back until acknowledged, an acknowledged end removes the task's
//! directory, a repeated Launch starts nothing, Kill cancels, heartbeats list running
//! tasks, ReadLog returns the output, and an agent killed with SIGKILL and started again
//! finds its task and reports its end. Every process a test starts is killed by pid at
//! its end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyperplan_net::certs::{self, CertPaths};
use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{AgentMessage, JobWorld, LaunchTask, LogChunk, PlannerToAgent, RunningTask, TaskRef};
use hyperplan_net::tls::{self, TlsMaterial};
use hyperplan_shared::taskend::TaskOutcome;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(60);
const NODE: &str = "n001";

/// A planner that registers the agent, reports every agent message, and sends what the
/// test asks on the newest connection.
struct Planner {
    addr: SocketAddr,
    messages: mpsc::UnboundedReceiver<AgentMessage>,
    to_agent: Arc<Mutex<Option<mpsc::UnboundedSender<PlannerToAgent>>>>,
    /// Registrations seen.
    registrations: Arc<Mutex<usize>>,
}

impl Planner {
    fn start(dir: &Path) -> Self {
        let material = TlsMaterial::load(&CertPaths::planner(dir)).unwrap();
        let endpoint = tls::server_endpoint(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), &material).unwrap();
        let addr = endpoint.local_addr().unwrap();
        let (tx, messages) = mpsc::unbounded_channel();
        let to_agent = Arc::new(Mutex::new(None));
        let registrations = Arc::new(Mutex::new(0));
        let (slot, count) = (to_agent.clone(), registrations.clone());
        tokio::spawn(async move {
            while let Some(incoming) = endpoint.accept().await {
                let Ok(connection) = incoming.await else { continue };
                tokio::spawn(serve(connection, tx.clone(), slot.clone(), count.clone()));
            }
        });
        Self {
            addr,
            messages,
            to_agent,
            registrations,
        }
    }

    fn send(&self, message: PlannerToAgent) {
        let slot = self.to_agent.lock().unwrap();
        slot.as_ref().expect("no agent connected").send(message).unwrap();
    }

    async fn wait_registered(&self, n: usize) {
        let deadline = Instant::now() + WAIT;
        while *self.registrations.lock().unwrap() < n {
            assert!(Instant::now() < deadline, "the agent did not register");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The next message `pick` accepts (others are dropped), within `WAIT`.
    async fn find<T>(&mut self, what: &str, mut pick: impl FnMut(&AgentMessage) -> Option<T>) -> T {
        let found = tokio::time::timeout(WAIT, async {
            while let Some(m) = self.messages.recv().await {
                if let Some(t) = pick(&m) {
                    return t;
                }
            }
            panic!("planner stopped")
        })
        .await;
        found.unwrap_or_else(|_| panic!("no {what} from the agent in time"))
    }

    /// Every message within `span`.
    async fn collect(&mut self, span: Duration) -> Vec<AgentMessage> {
        let mut all = Vec::new();
        let deadline = tokio::time::Instant::now() + span;
        while let Ok(Some(m)) = tokio::time::timeout_at(deadline, self.messages.recv()).await {
            all.push(m);
        }
        all
    }

    async fn started(&mut self, task: &TaskRef) -> u32 {
        self.find("TaskStarted", |m| match m {
            AgentMessage::TaskStarted(s) if &s.task == task => Some(s.pid),
            _ => None,
        })
        .await
    }

    async fn finished(&mut self, task: &TaskRef) -> hyperplan_shared::taskend::TaskEnd {
        self.find("TaskFinished", |m| match m {
            AgentMessage::TaskFinished(f) if &f.task == task => Some(f.end.clone()),
            _ => None,
        })
        .await
    }
}

async fn serve(
    connection: quinn::Connection,
    tx: mpsc::UnboundedSender<AgentMessage>,
    slot: Arc<Mutex<Option<mpsc::UnboundedSender<PlannerToAgent>>>>,
    registrations: Arc<Mutex<usize>>,
) {
    let Some((mut send, mut recv, hello)) = common::planner_hello(&connection).await else {
        return;
    };
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<PlannerToAgent>();
    out_tx
        .send(PlannerToAgent::Registered {
            node: hello.name.clone(),
            heartbeat_interval_ms: 200,
            epoch: 1,
            fence_after_ms: None,
        })
        .unwrap();
    let mut registered = false;
    loop {
        tokio::select! {
            frame = read_frame::<AgentMessage, _>(&mut recv, DEFAULT_MAX_FRAME) => match frame {
                Ok(Some(AgentMessage::Register { .. })) if !registered => {
                    registered = true;
                    // Registered first, then the test may send.
                    if let Some(m) = out_rx.recv().await
                        && write_frame(&mut send, &m, DEFAULT_MAX_FRAME).await.is_err()
                    {
                        return;
                    }
                    *slot.lock().unwrap() = Some(out_tx.clone());
                    *registrations.lock().unwrap() += 1;
                }
                Ok(Some(message)) => { let _ = tx.send(message); }
                _ => return,
            },
            Some(m) = out_rx.recv(), if registered => {
                if write_frame(&mut send, &m, DEFAULT_MAX_FRAME).await.is_err() { return; }
            }
        }
    }
}

fn me() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("State:"))
            .is_some_and(|st| !st.trim().starts_with('Z') && !st.trim().starts_with('X'))
    })
}

fn kill(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Pids killed (SIGKILL) when the test ends, whatever happened.
#[derive(Default)]
struct Reaper(Vec<u32>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if alive(pid) {
                kill(pid, "KILL");
            }
        }
    }
}

/// The agent process (killed when dropped); stderr echoed for failures.
struct Agent {
    child: Child,
}

impl Agent {
    fn spawn(certs: &Path, planner: SocketAddr, state: &Path) -> Self {
        let mut child = agent_command(certs, planner, state).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("agent: {line}");
            }
        });
        Agent { child }
    }

    /// With more arguments, and its log lines for the test (keep them: stderr is read as
    /// long as they are).
    fn spawn_logged(
        certs: &Path,
        planner: SocketAddr,
        state: &Path,
        args: &[&str],
    ) -> (Self, mpsc::UnboundedReceiver<String>) {
        let mut command = agent_command(certs, planner, state);
        command.args(args);
        let mut child = command.spawn().unwrap();
        let lines = common::lines(child.stderr.take().unwrap());
        (Agent { child }, lines)
    }
}

/// `hyperplan-agent run` for the fake planner, under a private umask as its systemd unit
/// runs it (UMask=0077): the tasks still get the usual one.
fn agent_command(certs: &Path, planner: SocketAddr, state: &Path) -> Command {
    let mut command = Command::new("sh");
    command
        .args([
            "-c",
            "umask 077; exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_hyperplan-agent"),
        ])
        .arg("run")
        .args(["--planner", &planner.to_string(), "--node", NODE])
        .args(["--synthetic", "pack:1 numa:1 core:2 pu:1", "--reprobe-interval", "0"])
        .args(["--config", "/dev/null"])
        // Tasks write into the test's temp directory under the node's /tmp.
        .args(["--private-tmp", "off"])
        .arg("--cert-dir")
        .arg(certs)
        .arg("--state-dir")
        .arg(state)
        .env("RUST_LOG", "hyperplan_agent=debug")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if me() == "root" {
        command.arg("--allow-root");
    }
    command
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Setup {
    dir: tempfile::TempDir,
    planner: Planner,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        certs::init_ca(dir.path(), false).unwrap();
        certs::issue_planner(dir.path(), &[]).unwrap();
        certs::issue_node(dir.path(), NODE).unwrap();
        std::fs::create_dir(dir.path().join("work")).unwrap();
        let planner = Planner::start(dir.path());
        Setup { dir, planner }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    fn agent(&self) -> Agent {
        Agent::spawn(self.dir.path(), self.planner.addr, &self.state())
    }

    fn task_dir(&self, task: &TaskRef) -> PathBuf {
        self.state()
            .join("tasks")
            .join(format!("{}.{}", task.job, task.job_id))
            .join(&task.task)
    }

    /// Job + Launch of a one-task job running `script` with `sh -c`.
    fn launch(&self, job: &str, job_id: u64, script: &str) -> TaskRef {
        let world = JobWorld {
            job: job.into(),
            job_id: job_id.into(),
            nodes: vec![NODE.into()],
            node_of_rank: vec![0],
            master_addr: "127.0.0.1".into(),
            master_port: 29500,
            launch: Default::default(),
            restart: 0,
            slurm: None,
            array: None,
        };
        self.planner.send(PlannerToAgent::Job(Box::new(world)));
        self.planner.send(PlannerToAgent::Launch(Box::new(launch_task(
            job,
            job_id,
            &me(),
            script,
            &self.work(),
        ))));
        TaskRef {
            job: job.into(),
            job_id: job_id.into(),
            task: "w-0".into(),
            index: 0,
        }
    }

    fn output(&self, task: &TaskRef) -> String {
        std::fs::read_to_string(self.work().join(format!("{}-{}.out", task.job, task.task))).unwrap_or_default()
    }
}

fn launch_task(job: &str, job_id: u64, user: &str, script: &str, work: &Path) -> LaunchTask {
    LaunchTask {
        job: job.into(),
        job_id: job_id.into(),
        task: "w-0".into(),
        index: 0,
        rank: 0,
        user: user.into(),
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::new(),
        working_dir: Some(work.to_string_lossy().into_owned()),
        output: "%j-%t.out".into(),
        error: "%j-%t.out".into(),
        time_limit_secs: None,
        hyper_nodes: vec!["leaf-1".into()],
        cpus: "0-1".into(),
        numa_nodes: vec![0],
        bind_memory: false,
        gpus: vec![],
        nics: vec![],
        memory_bytes: None,
        max_processes: None,
        epoch: 1,
        mpi: None,
        credential: None,
        run: 0,
        fence: false,
    }
}

/// Asks for the first 6 bytes of `task`'s output and waits for the answer.
async fn read_log(planner: &mut Planner, request: u64, task: TaskRef) -> LogChunk {
    planner.send(PlannerToAgent::ReadLog {
        request,
        task,
        stderr: false,
        offset: 0,
        max_bytes: 6,
        step: None,
    });
    planner
        .find("Log", |m| match m {
            AgentMessage::Log(c) if c.request == request => Some(c.clone()),
            _ => None,
        })
        .await
}

fn ack(planner: &Planner, task: &TaskRef, finished: bool) {
    planner.send(PlannerToAgent::Ack {
        task: task.clone(),
        finished,
    });
}

async fn wait_gone(path: &Path) {
    let deadline = Instant::now() + WAIT;
    while path.exists() {
        assert!(Instant::now() < deadline, "{} still there", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn runs_a_task_reports_its_end_and_forgets_it_when_acknowledged() {
    let mut s = Setup::new();
    let _agent = s.agent();
    s.planner.wait_registered(1).await;

    let script = "echo rank $RANK home $HOME; echo umask $(umask); grep Cpus_allowed_list /proc/self/status; exit 3";
    let task = s.launch("exit3", 11, script);
    let pid = s.planner.started(&task).await;
    assert!(pid > 1);
    let end = s.planner.finished(&task).await;
    assert_eq!(end.outcome, TaskOutcome::Exited, "{end:?}");
    assert_eq!(end.exit_code, Some(3));
    assert_eq!(end.pid, Some(pid));
    assert!(end.start_time_ms.is_some() && end.end_time_ms >= end.start_time_ms.unwrap());
    let out = s.output(&task);
    assert!(out.starts_with("rank 0 home /"), "{out}");
    assert!(out.contains("Cpus_allowed_list:"), "{out}");
    let out_file = s.work().join("exit3-w-0.out");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&out_file).unwrap().permissions());
    assert!(
        out.contains("umask 0022"),
        "the task's umask is 0022, not the agent's: {out}"
    );
    assert_eq!(mode & 0o777, 0o600, "output is the user's alone ([exec] outputMode)");
    let dir = s.task_dir(&task);
    assert!(dir.join("record.json").is_file());

    // ReadLog: the output, in pieces; an unknown task is an error.
    let chunk = read_log(&mut s.planner, 7, task.clone()).await;
    assert_eq!((chunk.data.as_slice(), chunk.error), (&b"rank 0"[..], None));
    assert_eq!(chunk.size, out.len() as u64);
    let mut other = task.clone();
    other.task = "w-9".into();
    let error = read_log(&mut s.planner, 8, other).await.error.unwrap_or_default();
    assert_eq!(error, "no task exit3/w-9 on this node");

    // Unacknowledged, the end comes again; a repeated Launch starts nothing.
    s.launch("exit3", 11, script);
    s.planner.finished(&task).await;
    ack(&s.planner, &task, false);
    ack(&s.planner, &task, true);
    wait_gone(&dir).await;
    wait_gone(dir.parent().unwrap()).await;
    // After the ack: nothing more about it, and a late repeated Launch starts nothing.
    s.launch("exit3", 11, script);
    let later = s.planner.collect(Duration::from_secs(4)).await;
    let about: Vec<_> = later
        .iter()
        .filter(|m| {
            matches!(m, AgentMessage::TaskStarted(t) if t.task == task)
                || matches!(m, AgentMessage::TaskFinished(f) if f.task == task)
        })
        .collect();
    // One report may have been on its way when the ack came.
    assert!(about.len() <= 1, "{about:?}");
    assert_eq!(s.output(&task).matches("rank 0").count(), 1, "ran once");
    assert!(!dir.exists());
    // Its output is still readable (`hyperplan logs` of an ended job).
    let chunk = read_log(&mut s.planner, 9, task.clone()).await;
    assert_eq!((chunk.data.as_slice(), chunk.error), (&b"rank 0"[..], None));

    // The same job name with a new id is another job.
    let again = s.launch("exit3", 12, "exit 0");
    let end = s.planner.finished(&again).await;
    assert_eq!((end.outcome, end.exit_code), (TaskOutcome::Exited, Some(0)));

    // No Job frame: failed, with the reason; an unknown user: failed by the shepherd.
    let lonely = launch_task("lonely", 13, &me(), "true", &s.work());
    s.planner.send(PlannerToAgent::Launch(Box::new(lonely)));
    let lonely = TaskRef {
        job: "lonely".into(),
        job_id: 13.into(),
        task: "w-0".into(),
        index: 0,
    };
    let end = s.planner.finished(&lonely).await;
    assert_eq!(end.outcome, TaskOutcome::Failed);
    assert!(end.reason.as_deref().unwrap().contains("no Job frame"), "{end:?}");
    let stranger = s.launch("stranger", 14, "true");
    // (same world, another user)
    s.planner.send(PlannerToAgent::Launch(Box::new(launch_task(
        "stranger",
        15,
        "no-such-user-hp",
        "true",
        &s.work(),
    ))));
    let _ = stranger;
    let strange = TaskRef {
        job: "stranger".into(),
        job_id: 15.into(),
        task: "w-0".into(),
        index: 0,
    };
    let end = s.planner.finished(&strange).await;
    assert_eq!(end.outcome, TaskOutcome::Failed);
}

#[tokio::test]
async fn kill_cancels_a_task_and_heartbeats_list_running_ones() {
    let mut s = Setup::new();
    let _agent = s.agent();
    let mut reaper = Reaper::default();
    s.planner.wait_registered(1).await;
    s.planner.send(PlannerToAgent::Job(Box::new(JobWorld {
        job: "sleepy".into(),
        job_id: 21.into(),
        nodes: vec![NODE.into()],
        node_of_rank: vec![0],
        master_addr: "127.0.0.1".into(),
        master_port: 29500,
        launch: Default::default(),
        restart: 0,
        slurm: None,
        array: None,
    })));
    let mut launch = launch_task("sleepy", 21, &me(), "", &s.work());
    launch.argv = vec!["sleep".into(), "60".into()];
    s.planner.send(PlannerToAgent::Launch(Box::new(launch)));
    let task = TaskRef {
        job: "sleepy".into(),
        job_id: 21.into(),
        task: "w-0".into(),
        index: 0,
    };
    let pid = s.planner.started(&task).await;
    reaper.0.push(pid);
    let shepherd: u32 = std::fs::read_to_string(s.task_dir(&task).join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    reaper.0.push(shepherd);
    // A heartbeat lists it, with its pid and memory.
    let running: RunningTask = s
        .planner
        .find("a heartbeat listing the task", |m| match m {
            AgentMessage::Heartbeat { running_tasks, .. } => running_tasks
                .iter()
                .find(|r| r.task == task && r.rss_bytes > 0)
                .cloned(),
            _ => None,
        })
        .await;
    assert_eq!(running.pid, pid);
    assert!(running.cpu_cores >= 0.0);

    s.planner.send(PlannerToAgent::Kill {
        task: task.clone(),
        grace_secs: 2,
        epoch: 1,
        signal: None,
    });
    // A second Kill while it is being killed changes nothing.
    s.planner.send(PlannerToAgent::Kill {
        task: task.clone(),
        grace_secs: 0,
        epoch: 1,
        signal: None,
    });
    let end = s.planner.finished(&task).await;
    assert_eq!(end.outcome, TaskOutcome::Cancelled, "{end:?}");
    assert_eq!(end.signal, Some(15));
    assert!(!alive(pid), "the task is gone");
    let deadline = Instant::now() + WAIT;
    while alive(shepherd) {
        assert!(Instant::now() < deadline, "the shepherd did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Once ended, it is no longer listed.
    let listed = s
        .planner
        .find("a heartbeat", |m| match m {
            AgentMessage::Heartbeat { running_tasks, .. } => Some(running_tasks.clone()),
            _ => None,
        })
        .await;
    assert!(listed.is_empty(), "{listed:?}");
    // A Kill right behind its Launch (the shepherd has no pid yet) still cancels it.
    let mut launch = launch_task("sleepy", 21, &me(), "", &s.work());
    launch.task = "w-1".into();
    launch.index = 1;
    launch.argv = vec!["sleep".into(), "60".into()];
    s.planner.send(PlannerToAgent::Launch(Box::new(launch)));
    let quick = TaskRef {
        job: "sleepy".into(),
        job_id: 21.into(),
        task: "w-1".into(),
        index: 1,
    };
    s.planner.send(PlannerToAgent::Kill {
        task: quick.clone(),
        grace_secs: 1,
        epoch: 1,
        signal: None,
    });
    let end = s.planner.finished(&quick).await;
    assert_eq!(end.outcome, TaskOutcome::Cancelled, "{end:?}");
    if let Some(pid) = end.pid {
        reaper.0.push(pid);
        assert!(!alive(pid));
    }
    // A preemption's warning signal (the job's checkpoint hook) reaches the task in
    // place of SIGTERM, and the task may end on its own within the grace.
    let marker = s.work().join("usr1");
    // The script says, through a FIFO, that its trap is set: the test waits for that.
    let up = marker.with_extension("up");
    let made = Command::new("mkfifo").arg("-m").arg("666").arg(&up).status().unwrap();
    assert!(made.success(), "mkfifo {}", up.display());
    let told = {
        let up = up.clone();
        tokio::task::spawn_blocking(move || std::fs::read_to_string(up))
    };
    let mut launch = launch_task("sleepy", 21, &me(), "", &s.work());
    launch.task = "w-2".into();
    launch.index = 2;
    launch.argv = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "trap 'echo checkpointed > {}; exit 0' USR1; echo up > {}; while :; do sleep 0.05; done",
            marker.display(),
            up.display()
        ),
    ];
    s.planner.send(PlannerToAgent::Launch(Box::new(launch)));
    let ckpt = TaskRef {
        job: "sleepy".into(),
        job_id: 21.into(),
        task: "w-2".into(),
        index: 2,
    };
    reaper.0.push(s.planner.started(&ckpt).await);
    match tokio::time::timeout(WAIT, told).await {
        Ok(said) => assert_eq!(said.unwrap().unwrap(), "up\n"),
        Err(_) => {
            // Unblocks the reader before failing.
            let _ = std::fs::OpenOptions::new().write(true).open(&up);
            panic!("the script did not start");
        }
    }
    s.planner.send(PlannerToAgent::Kill {
        task: ckpt.clone(),
        grace_secs: 30,
        epoch: 1,
        signal: Some(libc::SIGUSR1),
    });
    let end = s.planner.finished(&ckpt).await;
    assert_eq!(end.exit_code, Some(0), "{end:?}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "checkpointed\n");
    // Kill of an unknown task: nothing happens, the link goes on.
    s.planner.send(PlannerToAgent::Kill {
        task: TaskRef {
            job: "ghost".into(),
            job_id: 1.into(),
            task: "w-0".into(),
            index: 0,
        },
        grace_secs: 1,
        epoch: 1,
        signal: None,
    });
    s.planner
        .find("a heartbeat", |m| {
            matches!(m, AgentMessage::Heartbeat { .. }).then_some(())
        })
        .await;
}

#[tokio::test]
async fn a_restarted_agent_reports_the_end_of_a_task_started_before_once() {
    let mut s = Setup::new();
    let mut reaper = Reaper::default();
    let mut agent = s.agent();
    s.planner.wait_registered(1).await;
    let task = s.launch("survivor", 31, "echo started; sleep 2; echo done");
    let pid = s.planner.started(&task).await;
    reaper.0.push(pid);
    ack(&s.planner, &task, false);

    // kill -9 of the agent: the shepherd and its task go on.
    kill(agent.child.id(), "KILL");
    let _ = agent.child.wait();
    assert!(alive(pid), "the task outlives the agent");
    let agent2 = s.agent();
    s.planner.wait_registered(2).await;
    let end = s.planner.finished(&task).await;
    assert_eq!((end.outcome, end.exit_code), (TaskOutcome::Exited, Some(0)), "{end:?}");
    ack(&s.planner, &task, true);
    wait_gone(&s.task_dir(&task)).await;
    let later = s.planner.collect(Duration::from_secs(4)).await;
    let finished = later
        .iter()
        .filter(|m| matches!(m, AgentMessage::TaskFinished(f) if f.task == task))
        .count();
    assert!(finished <= 1, "{later:?}");
    assert_eq!(s.output(&task), "started\ndone\n", "ran once");
    drop(agent2);
}

/// The address of the agent's `/metrics`, from its log line.
async fn metrics_address(lines: &mut mpsc::UnboundedReceiver<String>) -> SocketAddr {
    let found = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.recv().await {
            if let Some(addr) = common::metrics_addr(&line) {
                return addr;
            }
        }
        panic!("the agent ended before serving its metrics")
    })
    .await;
    found.unwrap_or_else(|_| panic!("no \"serving metrics on\" line in time"))
}

/// Scrapes `/metrics` until `ok` takes the body, within `WAIT`; returns that body.
async fn scrape_until(addr: SocketAddr, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = common::http(addr, "GET", "/metrics").await.unwrap();
        assert_eq!(got.status, 200, "{got:?}");
        if ok(&got.body) {
            return got.body;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} in time; the last scrape:\n{}",
            got.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn has_line(body: &str, line: &str) -> bool {
    body.lines().any(|l| l == line)
}

/// The value of the sample `series` (name and labels), if there is one.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_follow_the_link_and_a_task_from_launch_to_acknowledged_end() {
    let mut s = Setup::new();
    let mut reaper = Reaper::default();
    let (_agent, mut lines) = Agent::spawn_logged(
        s.dir.path(),
        s.planner.addr,
        &s.state(),
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let addr = metrics_address(&mut lines).await;
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    s.planner.wait_registered(1).await;
    let body = scrape_until(addr, "link up", |b| has_line(b, "hyperplan_agent_link_up 1")).await;
    assert!(has_line(&body, "hyperplan_agent_tasks_running 0"), "{body}");
    assert!(
        sample(&body, "hyperplan_agent_probe_duration_seconds").is_some_and(|s| s > 0.0),
        "{body}"
    );

    let task = s.launch("metered", 51, "exec sleep 60");
    reaper.0.push(s.planner.started(&task).await);
    let shepherd = std::fs::read_to_string(s.task_dir(&task).join("pid")).unwrap();
    reaper.0.push(shepherd.trim().parse().unwrap());
    // Running, with its memory sampled: one series per task, by job id and index.
    let memory = "hyperplan_agent_task_memory_bytes{job_id=\"51\",index=\"0\"}";
    let body = scrape_until(addr, "the task's use", |b| sample(b, memory).is_some_and(|m| m > 0.0)).await;
    assert!(has_line(&body, "hyperplan_agent_tasks_running 1"), "{body}");
    let cpu = sample(&body, "hyperplan_agent_task_cpu_cores{job_id=\"51\",index=\"0\"}");
    assert!(cpu.is_some_and(|c| c >= 0.0), "{body}");
    assert!(!body.contains("metered"), "no job names in labels: {body}");

    // Ended: its series go; its end waits for the planner's acknowledgement.
    s.planner.send(PlannerToAgent::Kill {
        task: task.clone(),
        grace_secs: 1,
        epoch: 1,
        signal: None,
    });
    s.planner.finished(&task).await;
    let body = scrape_until(addr, "the end unacknowledged", |b| {
        has_line(b, "hyperplan_agent_unacknowledged_task_ends 1")
    })
    .await;
    assert!(has_line(&body, "hyperplan_agent_tasks_running 0"), "{body}");
    assert!(!body.contains("job_id=\"51\""), "{body}");
    ack(&s.planner, &task, true);
    scrape_until(addr, "the end acknowledged", |b| {
        has_line(b, "hyperplan_agent_unacknowledged_task_ends 0")
    })
    .await;
}

#[tokio::test]
async fn a_metrics_address_in_use_is_logged_and_the_agent_runs_on() {
    let s = Setup::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (_agent, mut lines) =
        Agent::spawn_logged(s.dir.path(), s.planner.addr, &s.state(), &["--metrics-listen", &addr]);
    let said = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.recv().await {
            if line.contains("ERROR") && line.contains(&format!("cannot serve metrics on {addr} (--metrics-listen)")) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(said.ok(), Some(true), "no error naming {addr} and --metrics-listen");
    s.planner.wait_registered(1).await;
}
