//! `hyperplan exec [--node NODE | --all] JOB -- COMMAND...`: a command inside a running
//! job's allocation, on its nodes, as its user, with its environment; standard input,
//! output and error carried both ways, its exit code returned. From a person's shell it
//! goes to the planner with their certificate (the job's owner or an admin); inside a
//! job (its tasks have `HYPERPLAN_CREDENTIAL` and `HYPERPLAN_EXEC_SOCKET`) it goes
//! through the node's agent with the job's credential, so `mpirun` in a batch script
//! can use it as its remote shell.

use std::io::{Read, Write};

use anyhow::{Context, bail};
use hyperplan_net::frame::{DEFAULT_MAX_FRAME, read_frame, write_frame};
use hyperplan_net::messages::{ExecFrame, ExecNodes, ExecRequest};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use super::long_help;
use crate::client::{self, ClientArgs, ClientConfig};

const EXAMPLES: &str = "  hyperplan exec train-64 -- nvidia-smi
  hyperplan exec --all train-64 -- sh -c 'hostname; nproc'
  hyperplan exec --node gpu017 train-64 -- cat /proc/self/status
  echo hi | hyperplan exec train-64 -- wc -c
  # inside a batch job (no JOB: the job's own), as mpirun's remote shell does, ssh-like:
  hyperplan exec --node gpu017 'orted -mca ess env'";

/// Run a command inside a running job's allocation.
///
/// The command runs on the job's node(s) inside the allocation of its task there (its
/// cgroup, CPUs and memory policy), as the job's user, with the task's environment and
/// working directory. Standard input goes to it (to every node with `--all`), its output
/// and errors come back (prefixed `NODE: ` with `--all`); `hyperplan exec` exits with its
/// exit code (128 + the signal that killed it; with `--all` the first failure's). When
/// `hyperplan exec` is killed or its connection drops, the remote command is killed too.
///
/// With `--`, the words after it are the program and its arguments, exactly. Without,
/// like ssh, the words are joined by spaces and run by `/bin/sh -c` on the node.
///
/// Outside a job, JOB is required and only its owner or an admin may. Inside a job's
/// task (`HYPERPLAN_CREDENTIAL` set), JOB defaults to the task's own job and the job's
/// credential is used instead of a certificate: a batch job's `mpirun` starts its
/// daemons on the other nodes this way (`OMPI_MCA_plm_rsh_agent`, hydra's
/// `HYDRA_LAUNCHER_EXEC`, set for it).
#[derive(clap::Args, Debug)]
#[command(after_long_help = long_help(EXAMPLES))]
pub struct Args {
    /// The node to run on; it must hold a task of the job. Default: rank 0's node.
    #[arg(long, value_name = "NODE", conflicts_with = "all")]
    node: Option<String>,
    /// Run on every node of the job at once.
    #[arg(long)]
    all: bool,
    /// JOB, then `--` and the program with its arguments (run as they are), or the
    /// command's words without `--` (ssh-like). Inside a job, JOB may be left out.
    #[arg(value_name = "JOB -- COMMAND", trailing_var_arg = true, allow_hyphen_values = true)]
    words: Vec<String>,
    #[command(flatten)]
    client: ClientArgs,
}

/// Where `hyperplan exec` runs from.
enum From {
    /// A person's shell: the planner, by certificate.
    Person,
    /// A task: its agent's socket, with the job's credential.
    Task {
        socket: String,
        credential: String,
        job: String,
    },
}

fn from_env() -> From {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        var("HYPERPLAN_EXEC_SOCKET"),
        var("HYPERPLAN_CREDENTIAL"),
        var("HYPERPLAN_JOB"),
    ) {
        (Some(socket), Some(credential), Some(job)) => From::Task {
            socket,
            credential,
            job,
        },
        _ => From::Person,
    }
}

/// JOB (when given) and the exact command, when `--` says where the command starts:
/// `JOB -- COMMAND` or `-- COMMAND` (which clap takes off when it comes first: `raw`, the
/// process's arguments, still has it). `None`: no `--`, the words are ssh-like.
fn split_exact(words: &[String], raw: &[String]) -> Option<(Option<String>, Vec<String>)> {
    match words {
        [job, dashes, rest @ ..] if dashes == "--" => Some((Some(job.clone()), rest.to_vec())),
        [dashes, rest @ ..] if dashes == "--" => Some((None, rest.to_vec())),
        _ if !words.iter().any(|w| w == "--") && raw.iter().any(|a| a == "--") => Some((None, words.to_vec())),
        _ => None,
    }
}

/// The request `args` make, from where it runs.
fn request(args: &Args, from: &From) -> anyhow::Result<ExecRequest> {
    let own_job = match from {
        From::Task { job, .. } => Some(job.clone()),
        From::Person => None,
    };
    let raw: Vec<String> = std::env::args().collect();
    let (job, argv, shell) = if let Some((job, command)) = split_exact(&args.words, &raw) {
        match (job, own_job) {
            (Some(job), _) | (None, Some(job)) => (job, command, false),
            (None, None) => bail!("expected the job's name before `--` (hyperplan exec JOB -- COMMAND...)"),
        }
    } else {
        match own_job {
            // Inside a job, ssh-like: every word is the command's.
            Some(job) => (job, args.words.clone(), true),
            None => match args.words.split_first() {
                Some((job, words)) => (job.clone(), words.to_vec(), true),
                None => bail!("expected JOB and a command (hyperplan exec JOB -- COMMAND...)"),
            },
        }
    };
    if argv.is_empty() || argv.iter().all(|w| w.trim().is_empty()) {
        bail!("expected a command to run in job {job} (hyperplan exec {job} -- COMMAND...)");
    }
    let nodes = match (&args.node, args.all) {
        (Some(n), _) => ExecNodes::Node(n.clone()),
        (None, true) => ExecNodes::All,
        (None, false) => ExecNodes::Rank0,
    };
    let credential = match from {
        From::Task { credential, .. } => Some(credential.clone()),
        From::Person => None,
    };
    Ok(ExecRequest {
        job,
        nodes,
        argv,
        shell,
        credential,
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let from = from_env();
    let request = request(&args, &from)?;
    let code = match from {
        From::Task { socket, .. } => runtime()?.block_on(async move {
            let mut stream = tokio::net::UnixStream::connect(&socket)
                .await
                .with_context(|| format!("cannot reach this node's agent at {socket} (HYPERPLAN_EXEC_SOCKET)"))?;
            write_frame(&mut stream, &request, DEFAULT_MAX_FRAME).await?;
            let (r, w) = stream.into_split();
            session(r, w, args.all).await
        })?,
        From::Person => {
            let config = ClientConfig::from_process(&args.client)?;
            as_person(&config, request, args.all)?
        }
    };
    std::process::exit(code)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `request` through the planner with the person's certificate; the exit code.
pub(crate) fn as_person(config: &ClientConfig, request: ExecRequest, all: bool) -> anyhow::Result<i32> {
    runtime()?.block_on(async move {
        let s = client::open_exec(config, request).await?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        // Killed politely: the connection is closed at once, so the command goes now
        // (killed outright, the planner notices when the connection times out).
        let code = tokio::select! {
            code = session(s.recv, s.send, all) => code,
            _ = tokio::signal::ctrl_c() => Ok(130),
            _ = term.recv() => Ok(143),
        };
        s.connection.close(quinn::VarInt::from_u32(0), b"");
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), s.endpoint.wait_idle()).await;
        code
    })
}

/// Carries the command's frames until every node has ended; returns the exit code.
async fn session<R, W>(mut recv: R, mut send: W, all: bool) -> anyhow::Result<i32>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let nodes = match read_frame::<ExecFrame, _>(&mut recv, DEFAULT_MAX_FRAME).await {
        Ok(Some(ExecFrame::Started { nodes, .. })) => nodes,
        Ok(Some(ExecFrame::Error { message, .. })) => bail!("{message}"),
        Ok(Some(other)) => bail!("the planner answered {other:?} before starting the command"),
        Ok(None) => bail!("the planner ended the stream before starting the command"),
        Err(e) => bail!("no answer from the planner ({e}); is it the leader?"),
    };
    // Standard input, read on a thread of its own, to every node.
    let (tx, mut rx) = mpsc::channel::<Option<Vec<u8>>>(4);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.blocking_send(None);
                    return;
                }
                Ok(n) => {
                    if tx.blocking_send(Some(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    tokio::spawn(async move {
        while let Some(chunk) = rx.recv().await {
            let frame = match chunk {
                Some(data) => ExecFrame::Stdin { data },
                None => ExecFrame::StdinEof,
            };
            if write_frame(&mut send, &frame, DEFAULT_MAX_FRAME).await.is_err() {
                return;
            }
        }
        // Never finished early: the other side reads a close as this process gone. The
        // writer lives until the process exits.
        std::future::pending::<()>().await;
    });
    let mut ended = vec![false; nodes.len()];
    let mut code = 0;
    let mut lines = Prefixer::new(&nodes, all);
    let name = |i: u32| nodes.get(i as usize).map_or("?", String::as_str).to_string();
    while ended.iter().any(|e| !e) {
        let frame = match read_frame::<ExecFrame, _>(&mut recv, DEFAULT_MAX_FRAME).await {
            Ok(Some(f)) => f,
            Ok(None) => bail!("the planner ended the command's stream before it ended"),
            Err(e) => bail!("lost the planner: {e}"),
        };
        match frame {
            ExecFrame::Stdout { node, data } => lines.write(node, &data, false),
            ExecFrame::Stderr { node, data } => lines.write(node, &data, true),
            ExecFrame::Exit { node, code: c, signal } => {
                let this = match (c, signal) {
                    (Some(c), _) => c,
                    (None, Some(s)) => {
                        eprintln!("hyperplan exec: on {}: killed by signal {s}", name(node));
                        128 + s
                    }
                    (None, None) => 255,
                };
                if code == 0 {
                    code = this;
                }
                if let Some(e) = ended.get_mut(node as usize) {
                    *e = true;
                }
            }
            ExecFrame::Error { node, message } => match node {
                Some(node) => {
                    eprintln!("hyperplan exec: on {}: {message}", name(node));
                    if code == 0 {
                        code = 255;
                    }
                    if let Some(e) = ended.get_mut(node as usize) {
                        *e = true;
                    }
                }
                None => bail!("{message}"),
            },
            _ => {}
        }
    }
    lines.flush();
    Ok(code)
}

/// Output as it comes; with `--all`, each line prefixed by its node's name (partial
/// lines kept per node until their newline).
struct Prefixer<'a> {
    nodes: &'a [String],
    prefix: bool,
    partial: Vec<(Vec<u8>, Vec<u8>)>,
}

impl<'a> Prefixer<'a> {
    fn new(nodes: &'a [String], prefix: bool) -> Self {
        Prefixer {
            nodes,
            prefix,
            partial: vec![(Vec::new(), Vec::new()); nodes.len()],
        }
    }

    fn write(&mut self, node: u32, data: &[u8], err: bool) {
        let out = |bytes: &[u8]| {
            if err {
                let _ = std::io::stderr().write_all(bytes);
            } else {
                let mut o = std::io::stdout();
                let _ = o.write_all(bytes);
                let _ = o.flush();
            }
        };
        if !self.prefix {
            return out(data);
        }
        let Some(name) = self.nodes.get(node as usize) else {
            return;
        };
        let Some((o, e)) = self.partial.get_mut(node as usize) else {
            return;
        };
        let buf = if err { e } else { o };
        buf.extend_from_slice(data);
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let mut text = format!("{name}: ").into_bytes();
            text.extend_from_slice(&line);
            out(&text);
        }
    }

    fn flush(&mut self) {
        for (i, (o, e)) in self.partial.iter_mut().enumerate() {
            for (buf, err) in [(o, false), (e, true)] {
                if !buf.is_empty() {
                    let mut text = format!("{}: ", self.nodes[i]).into_bytes();
                    text.append(buf);
                    text.push(b'\n');
                    if err {
                        let _ = std::io::stderr().write_all(&text);
                    } else {
                        let _ = std::io::stdout().write_all(&text);
                    }
                }
            }
        }
    }
}
