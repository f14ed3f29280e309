//! Talking to a running planner: one QUIC connection (mutual TLS with the user's
//! certificate), one bidirectional stream, hellos both ways, one request and its response,
//! then close with code 0. With a list of planners (a leader and its standbys) the
//! request goes to the first that takes it: see [`failover`].
//!
//! Every failure says where it happened and what to do: a missing certificate names the
//! file and the `hyperplan certs issue` command that makes it, an unreachable planner names
//! the address and where that address came from, a refusal carries the planner's reason.

pub mod config;

use std::collections::VecDeque;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use hyperplan_net::certs::CertPaths;
use hyperplan_net::hello::close;
use hyperplan_net::messages::{Hello, Request, RequestCommand, Response, ResponseError};
use hyperplan_net::tls::any_addr_for;
use hyperplan_net::{
    CertRole, DEFAULT_MAX_FRAME, PROTOCOL_VERSION, Role, TlsError, TlsMaterial, read_frame, write_frame,
};
use quinn::{Connection, ConnectionError, VarInt};

use config::Source;
pub use config::{ClientArgs, ClientConfig};

/// How long the handshake and the planner's hello may take before we call it unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the planner may think about one request (an explain on a large cluster).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The planner is authenticated by then, so its replies may be larger than the frames we
/// accept from strangers (a node list for 10,000 nodes is a few MiB).
const MAX_REPLY_FRAME: usize = 16 * DEFAULT_MAX_FRAME;

/// After an error, how long to wait for the planner's close frame to learn its reason.
const CLOSE_REASON_WAIT: Duration = Duration::from_millis(500);

/// One planner's answer to [`ask_every`]: its address as listed, and its reply value or
/// why there is none.
pub type AddressReply = (String, anyhow::Result<serde_json::Value>);

/// The planner's replies on one connection, in order; an `Err` (a refusal) is the last.
type Replies = Vec<Result<serde_json::Value, ResponseError>>;

/// Sends `command` to the planner `config` names and returns its reply value. A planner
/// `Err` (no such job, not yours to cancel) becomes this function's error as is.
pub fn request(config: &ClientConfig, command: RequestCommand) -> anyhow::Result<serde_json::Value> {
    let mut replies = requests(config, vec![command])?;
    match replies.pop() {
        Some(reply) => reply.map_err(anyhow::Error::new),
        None => bail!("the planner sent no reply"),
    }
}

/// Sends `commands` one after another on one connection and returns the replies in
/// order, stopping after the first the planner refuses (that `Err` is the last element).
/// With a list of planners, to the leader: see [`failover`].
pub fn requests(
    config: &ClientConfig,
    commands: Vec<RequestCommand>,
) -> anyhow::Result<Vec<Result<serde_json::Value, ResponseError>>> {
    requests_waiting(config, commands, ELECTION_WAIT)
}

/// [`requests`], waiting at most `wait` for a leader while every planner stands by.
fn requests_waiting(config: &ClientConfig, commands: Vec<RequestCommand>, wait: Duration) -> anyhow::Result<Replies> {
    let material = Arc::new(load_material(config)?);
    let runtime = runtime()?;
    runtime.block_on(failover(&material, config, commands, wait))
}

/// Sends `command` to every planner on the list at once, the standbys too, and returns
/// each one's answer (the transport's error or the planner's refusal as the error), in
/// list order (`hyperplan planners`).
pub fn ask_every(config: &ClientConfig, command: RequestCommand) -> anyhow::Result<Vec<AddressReply>> {
    let material = Arc::new(load_material(config)?);
    let runtime = runtime()?;
    runtime.block_on(async {
        let asked: Vec<_> = config
            .planner
            .value
            .iter()
            .map(|planner| {
                let (material, planner, command) = (material.clone(), planner.clone(), command.clone());
                let (source, user) = (config.planner.source.clone(), config.user.value.clone());
                tokio::spawn(async move {
                    match exchange_with(&material, &planner, &source, &user, vec![command]).await {
                        Ok(mut replies) => match replies.pop() {
                            Some(reply) => reply.map_err(anyhow::Error::new),
                            None => Err(anyhow!("the planner sent no reply")),
                        },
                        Err(failure) => Err(failure.error),
                    }
                })
            })
            .collect();
        let mut answers = Vec::with_capacity(asked.len());
        for (planner, task) in config.planner.value.iter().zip(asked) {
            let answer = task.await.unwrap_or_else(|e| Err(anyhow!("asking it failed: {e}")));
            answers.push((planner.clone(), answer));
        }
        Ok(answers)
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// One address tried by [`failover`]: as listed, or the leader a standby named.
struct Tried {
    planner: String,
    /// The listed address whose standby named this one.
    named_by: Option<String>,
    outcome: anyhow::Result<Replies>,
}

/// The planners in list order until one takes the request: an unreachable one (or one
/// that cannot be resolved, or refuses the connection) → the next; a standby's "not the
/// leader" naming the leader → that leader next (once per request), else the next. A
/// connection lost after a request went out is retried elsewhere only for requests that
/// change nothing (a `submit` may have been carried out). One address: its error or
/// refusal as before; several, all failed: one error listing each and why.
async fn failover(
    material: &Arc<TlsMaterial>,
    config: &ClientConfig,
    commands: Vec<RequestCommand>,
    wait: Duration,
) -> anyhow::Result<Replies> {
    let started = std::time::Instant::now();
    loop {
        let leader = if config.planner.value.len() > 1 {
            match find_leader(material, config).await {
                Leader::Is(leader) => Some(leader),
                Leader::NoneYet => None,
                // Nobody answered at all: no election to wait for, and going through the
                // list one by one would only time out again.
                Leader::Unreachable(errors) => {
                    let mut message = format!(
                        "no planner answered; tried {} planners ({}):",
                        errors.len(),
                        config.planner.source
                    );
                    for (planner, e) in errors {
                        message.push_str(&format!("\n  {planner}: {e:#}"));
                    }
                    return Err(anyhow!(message));
                }
            }
        } else {
            None
        };
        // No planner of the list leads now: ask them all again shortly (one by one they
        // would name the dead leader, and waiting for it to time out costs seconds), and
        // only when the wait is over go through the list for an error naming each.
        if leader.is_none() && config.planner.value.len() > 1 && started.elapsed() < wait {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        match failover_once(material, config, commands.clone(), leader).await {
            // Nobody leads (a takeover is under way): nothing was done; ask again.
            Err(Refused::AllStandby(_)) if started.elapsed() < wait => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(Refused::AllStandby(e) | Refused::Other(e)) => return Err(e),
            Ok(replies) => return Ok(replies),
        }
    }
}

/// How long a request waits for a leader while every planner on the list stands by (a
/// takeover takes up to about the lease TTL).
const ELECTION_WAIT: Duration = Duration::from_secs(20);

/// Why [`failover_once`] failed: every planner that answered stood by (try again), or
/// anything else.
enum Refused {
    AllStandby(anyhow::Error),
    Other(anyhow::Error),
}

/// What asking the whole list who leads found.
enum Leader {
    /// This planner answered as the leader.
    Is(String),
    /// Some answered, none as the leader (an election may be under way).
    NoneYet,
    /// None answered at all: why not, for each.
    Unreachable(Vec<(String, anyhow::Error)>),
}

/// Asks every planner of the list at once who it is and returns the first that answers
/// as the leader (without waiting for the others: a dead planner costs nothing).
async fn find_leader(material: &Arc<TlsMaterial>, config: &ClientConfig) -> Leader {
    let mut asking = tokio::task::JoinSet::new();
    for planner in &config.planner.value {
        let (material, planner) = (material.clone(), planner.clone());
        let (source, user) = (config.planner.source.clone(), config.user.value.clone());
        asking.spawn(async move {
            let replies = match exchange_with(&material, &planner, &source, &user, vec![RequestCommand::Planners]).await
            {
                Ok(replies) => replies,
                Err(failure) => return (planner, Err(failure.error)),
            };
            let leads = replies
                .into_iter()
                .next()
                .and_then(Result::ok)
                .and_then(|v| serde_json::from_value::<hyperplan_shared::status::PlannerInfo>(v).ok())
                .is_some_and(|info| info.role == "leader");
            (planner, Ok(leads))
        });
    }
    let mut unreachable = Vec::new();
    while let Some(done) = asking.join_next().await {
        match done {
            Ok((planner, Ok(true))) => {
                asking.abort_all();
                return Leader::Is(planner);
            }
            Ok((planner, Err(e))) => unreachable.push((planner, e)),
            Ok((_, Ok(false))) | Err(_) => {}
        }
    }
    if unreachable.len() == config.planner.value.len() {
        // In list order, whatever order they failed in.
        let order = |p: &String| config.planner.value.iter().position(|q| q == p);
        unreachable.sort_by_key(|(p, _)| order(p));
        Leader::Unreachable(unreachable)
    } else {
        Leader::NoneYet
    }
}

/// One round of [`failover`]: `leader` (when one answered as such) first, then the list.
async fn failover_once(
    material: &TlsMaterial,
    config: &ClientConfig,
    commands: Vec<RequestCommand>,
    leader: Option<String>,
) -> Result<Replies, Refused> {
    let source = &config.planner.source;
    let repeatable = commands.iter().all(repeatable);
    let mut queue: VecDeque<(String, Option<String>)> =
        config.planner.value.iter().map(|p| (p.clone(), None)).collect();
    if let Some(leader) = leader {
        queue.retain(|(p, _)| !same_planner(p, &leader));
        queue.push_front((leader, None));
    }
    let mut tried: Vec<Tried> = Vec::new();
    let mut redirected = false;
    while let Some((planner, named_by)) = queue.pop_front() {
        let outcome = match exchange_with(material, &planner, source, &config.user.value, commands.clone()).await {
            Ok(replies) => match standby_refusal(&replies) {
                None => return Ok(replies),
                Some(leader) => {
                    if let Some(leader) = leader
                        && !redirected
                        && !tried.iter().any(|t| same_planner(&t.planner, leader))
                        && !same_planner(&planner, leader)
                    {
                        // Asked next, and not again later in the list.
                        redirected = true;
                        queue.retain(|(p, _)| !same_planner(p, leader));
                        queue.push_front((leader.to_owned(), Some(planner.clone())));
                    }
                    Ok(replies)
                }
            },
            Err(failure) if failure.request_sent && !repeatable => {
                if queue.is_empty() {
                    return Err(Refused::Other(failure.error));
                }
                return Err(Refused::Other(anyhow!(
                    "{:#}; not sent to another planner, as {planner} may have carried it out (see `hyperplan \
                     status`)",
                    failure.error
                )));
            }
            Err(failure) => Err(failure.error),
        };
        tried.push(Tried {
            planner,
            named_by,
            outcome,
        });
    }
    // Every planner that answered refused as a standby: nothing was done anywhere.
    let standby = |t: &Tried| matches!(&t.outcome, Ok(r) if standby_refusal(r).is_some());
    let all_standby = tried.iter().any(standby) && tried.iter().all(|t| standby(t) || t.outcome.is_err());
    let wrap = |e| {
        if all_standby {
            Refused::AllStandby(e)
        } else {
            Refused::Other(e)
        }
    };
    if tried.len() == 1 {
        // One planner: its refusal or error exactly as before lists existed.
        if let Some(only) = tried.pop() {
            return match only.outcome {
                Ok(replies) if all_standby => Err(wrap(anyhow!(
                    "{}",
                    replies
                        .last()
                        .and_then(|r| r.as_ref().err())
                        .map_or_else(String::new, ToString::to_string)
                ))),
                other => other.map_err(Refused::Other),
            };
        }
    }
    let mut message = format!(
        "no planner took the request; tried {} planners ({source}):",
        tried.len()
    );
    for t in &tried {
        let why = match &t.outcome {
            Ok(replies) => match replies.last() {
                Some(Err(refusal)) => refusal.to_string(),
                _ => "no reply".to_owned(),
            },
            Err(e) => format!("{e:#}"),
        };
        match &t.named_by {
            Some(by) => message.push_str(&format!("\n  {} (named as the leader by {by}): {why}", t.planner)),
            None => message.push_str(&format!("\n  {}: {why}", t.planner)),
        }
    }
    Err(wrap(anyhow!(message)))
}

/// `Some(leader)` when the planner refused the first request as a standby (nothing was
/// done); `Some(None)` when it knows no leader.
fn standby_refusal(replies: &[Result<serde_json::Value, ResponseError>]) -> Option<Option<&str>> {
    match replies {
        [Err(refusal)] => refusal.not_leader_hint(),
        _ => None,
    }
}

/// Whether a request may be sent again after its connection broke: it only reads.
fn repeatable(command: &RequestCommand) -> bool {
    match command {
        RequestCommand::Submit { .. }
        | RequestCommand::Cancel { .. }
        | RequestCommand::Hold { .. }
        | RequestCommand::Release { .. }
        | RequestCommand::NodeAdmin { .. } => false,
        RequestCommand::Status { .. }
        | RequestCommand::Nodes
        | RequestCommand::HyperNodes
        | RequestCommand::Manifests
        | RequestCommand::Explain { .. }
        | RequestCommand::Planners
        | RequestCommand::Queues
        | RequestCommand::History(_)
        | RequestCommand::Report(_)
        | RequestCommand::Logs { .. } => true,
        RequestCommand::Exec(_) => false,
    }
}

/// The same planner address: host names compare without case, a missing port is
/// [`config::DEFAULT_PORT`].
fn same_planner(a: &str, b: &str) -> bool {
    let with_port = |p: &str| {
        let p = p.trim().to_ascii_lowercase();
        let has_port = match p.rsplit_once(':') {
            Some((host, port)) => port.parse::<u16>().is_ok() && (host.ends_with(']') || !host.contains(':')),
            None => false,
        };
        if has_port {
            p
        } else {
            format!("{p}:{}", config::DEFAULT_PORT)
        }
    };
    with_port(a) == with_port(b)
}

/// The user's certificate, key and the CA, with advice when one is missing.
fn load_material(config: &ClientConfig) -> anyhow::Result<TlsMaterial> {
    let dir = &config.cert_dir.value;
    let user = &config.user.value;
    let paths = CertPaths::user(dir, user);
    let issue = format!(
        "an admin makes it with `hyperplan certs issue --user {user} --role user` on the machine holding the \
         cluster CA and copies users/{user}.pem, users/{user}.key and ca.pem into {dir} (the cert dir is {}; \
         --cert-dir or HYPERPLAN_CERT_DIR point elsewhere)",
        config.cert_dir.source,
        dir = dir.display(),
    );
    for (path, what) in [
        (&paths.cert, format!("no client certificate for user {user}")),
        (&paths.key, format!("no private key for user {user}")),
        (&paths.ca, "no cluster CA certificate".to_owned()),
    ] {
        if !exists(path) {
            bail!("{what}: {} does not exist; {issue}", path.display());
        }
    }
    // ssh-like: a key others may read or a certificate of another role is refused.
    TlsMaterial::load_for(&paths, &[CertRole::Admin, CertRole::User]).map_err(Into::into)
}

fn exists(path: &Path) -> bool {
    // A file we may not read still "exists": TlsMaterial::load reports the permission error.
    path.try_exists().unwrap_or(true)
}

/// `HOST:PORT` (or `HOST`, on the default port) to one socket address; `source` says
/// where the address came from.
fn resolve_addr(planner: &str, source: &Source) -> anyhow::Result<SocketAddr> {
    if let Ok(addr) = planner.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let with_port = |host: &'_ str| {
        (
            host.trim_start_matches('[').trim_end_matches(']').to_string(),
            config::DEFAULT_PORT,
        )
    };
    let found = if planner.contains(':') && !planner.ends_with(']') && planner.matches(':').count() == 1 {
        planner.to_socket_addrs().map(|mut a| a.next())
    } else {
        with_port(planner).to_socket_addrs().map(|mut a| a.next())
    };
    match found {
        Ok(Some(addr)) => Ok(addr),
        Ok(None) => bail!("planner address {planner} ({source}) resolves to no address"),
        Err(e) => bail!("cannot resolve the planner address {planner} ({source}): {e}; expected HOST:PORT"),
    }
}

/// A failed exchange: why, and whether a request had gone out (the planner may have
/// carried it out).
struct Failure {
    error: anyhow::Error,
    request_sent: bool,
}

impl Failure {
    fn before_sending(error: anyhow::Error) -> Self {
        Self {
            error,
            request_sent: false,
        }
    }
}

/// Resolves `planner` and runs [`exchange`] with it.
async fn exchange_with(
    material: &TlsMaterial,
    planner: &str,
    source: &Source,
    user: &str,
    commands: Vec<RequestCommand>,
) -> Result<Replies, Failure> {
    let addr = resolve_addr(planner, source).map_err(Failure::before_sending)?;
    exchange(material, addr, user, commands).await
}

/// One connection's whole life. The outer error is the transport's (with advice); an
/// inner `Err` is the planner's answer to a request.
async fn exchange(
    material: &TlsMaterial,
    addr: SocketAddr,
    user: &str,
    commands: Vec<RequestCommand>,
) -> Result<Replies, Failure> {
    let endpoint =
        hyperplan_net::client_endpoint(any_addr_for(addr), material).map_err(|e| Failure::before_sending(e.into()))?;
    let connection = match tokio::time::timeout(CONNECT_TIMEOUT, hyperplan_net::connect(&endpoint, addr)).await {
        Err(_) => {
            endpoint.close(VarInt::from_u32(close::NORMAL), b"");
            return Err(Failure::before_sending(anyhow!(
                "cannot reach the planner at {addr} within {} s: is hyperplan-planner running there, and is UDP \
                 port {} open? (set the address with --planner, HYPERPLAN_PLANNER or planner in client.toml)",
                CONNECT_TIMEOUT.as_secs(),
                addr.port()
            )));
        }
        Ok(Err(TlsError::Handshake { source, .. })) => {
            return Err(Failure::before_sending(connection_error(addr, &source)));
        }
        Ok(Err(e)) => return Err(Failure::before_sending(e.into())),
        Ok(Ok(connection)) => connection,
    };
    let mut request_sent = false;
    let result = talk(&connection, user, commands, &mut request_sent).await;
    let result = match result {
        Ok(reply) => Ok(reply),
        Err(e) => Err(Failure {
            error: explain_failure(&connection, addr, e).await,
            request_sent,
        }),
    };
    connection.close(VarInt::from_u32(close::NORMAL), b"");
    // Lets our close frame leave; the reply is already in hand, so do not wait long.
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    result
}

/// The protocol on the one stream: hello, hello, then request, response, request, ...
/// `request_sent` turns true before the first request is written.
async fn talk(
    connection: &Connection,
    user: &str,
    commands: Vec<RequestCommand>,
    request_sent: &mut bool,
) -> anyhow::Result<Vec<Result<serde_json::Value, ResponseError>>> {
    let (mut send, mut recv) = connection.open_bi().await?;
    hellos(&mut send, &mut recv, user).await?;
    let mut replies = Vec::with_capacity(commands.len());
    for (id, command) in (1..).zip(commands) {
        *request_sent = true;
        write_frame(&mut send, &Request { id, command }, DEFAULT_MAX_FRAME).await?;
        let response: Response = tokio::time::timeout(REPLY_TIMEOUT, read_frame(&mut recv, MAX_REPLY_FRAME))
            .await
            .map_err(|_| anyhow!("no reply from the planner within {} s", REPLY_TIMEOUT.as_secs()))??
            .ok_or_else(|| anyhow!("the planner ended the stream without a reply"))?;
        if response.id != id {
            bail!("the planner answered request {} instead of request {id}", response.id);
        }
        let refused = response.result.is_err();
        replies.push(response.result);
        if refused {
            break;
        }
    }
    // The planner may have gone already; its replies are what matters.
    let _ = send.finish();
    Ok(replies)
}

/// Our hello, then the planner's, checked: its protocol version and its role.
async fn hellos(send: &mut quinn::SendStream, recv: &mut quinn::RecvStream, user: &str) -> anyhow::Result<()> {
    write_frame(send, &Hello::new(Role::Client, user), DEFAULT_MAX_FRAME).await?;
    let hello: Hello = tokio::time::timeout(CONNECT_TIMEOUT, read_frame(recv, DEFAULT_MAX_FRAME))
        .await
        .map_err(|_| anyhow!("no hello from the planner within {} s", CONNECT_TIMEOUT.as_secs()))??
        .ok_or_else(|| anyhow!("the planner ended the stream before its hello"))?;
    if hello.version != PROTOCOL_VERSION {
        bail!(
            "the planner speaks protocol version {} and this hyperplan version {PROTOCOL_VERSION}; use the \
             hyperplan that came with the planner",
            hello.version
        );
    }
    if hello.role != Role::Planner {
        bail!(
            "the peer introduced itself as {:?} {:?}, not as the planner",
            hello.role,
            hello.name
        );
    }
    Ok(())
}

/// A failed exchange, explained by the connection's close reason when there is one (the
/// planner closes with a reason when it refuses us).
async fn explain_failure(connection: &Connection, addr: SocketAddr, error: anyhow::Error) -> anyhow::Error {
    let reason = match connection.close_reason() {
        Some(reason) => Some(reason),
        None => tokio::time::timeout(CLOSE_REASON_WAIT, connection.closed()).await.ok(),
    };
    match reason {
        Some(ConnectionError::LocallyClosed) | None => error.context(format!("talking to the planner at {addr}")),
        Some(reason) => connection_error(addr, &reason),
    }
}

/// Words for why a connection to the planner ended.
fn connection_error(addr: SocketAddr, error: &ConnectionError) -> anyhow::Error {
    match error {
        ConnectionError::ApplicationClosed(close) if close.reason.is_empty() => {
            anyhow!("planner at {addr} closed the connection (code {})", close.error_code)
        }
        ConnectionError::ApplicationClosed(close) => anyhow!(
            "planner at {addr} closed the connection: {}",
            String::from_utf8_lossy(&close.reason)
        ),
        ConnectionError::ConnectionClosed(close) => anyhow!(
            "planner at {addr} refused the connection ({close}); is your certificate issued by this cluster's CA \
             and still valid?"
        ),
        ConnectionError::TransportError(e) => anyhow!(
            "cannot verify the planner at {addr} ({e}); is ca.pem this cluster's CA, and does the planner's \
             certificate come from it?"
        ),
        ConnectionError::TimedOut => anyhow!("the planner at {addr} stopped answering (timed out)"),
        ConnectionError::Reset => anyhow!("the planner at {addr} reset the connection (did it restart?)"),
        other => anyhow!("connection to the planner at {addr} failed: {other}"),
    }
}

/// A stream to the leader that carries one `hyperplan exec` (see `commands::exec`): the
/// connection (kept open by the caller), and the stream after the request went out.
pub struct ExecStream {
    pub endpoint: quinn::Endpoint,
    pub connection: Connection,
    pub send: quinn::SendStream,
    pub recv: quinn::RecvStream,
}

/// Connects to the first planner of the list that answers and sends `request` as an
/// exec; the frames that follow are the caller's.
pub async fn open_exec(
    config: &ClientConfig,
    request: hyperplan_net::messages::ExecRequest,
) -> anyhow::Result<ExecStream> {
    let material = load_material(config)?;
    let mut last = None;
    for planner in &config.planner.value {
        let addr = match resolve_addr(planner, &config.planner.source) {
            Ok(a) => a,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        let endpoint = hyperplan_net::client_endpoint(any_addr_for(addr), &material)?;
        let connection = match tokio::time::timeout(CONNECT_TIMEOUT, hyperplan_net::connect(&endpoint, addr)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                last = Some(anyhow::Error::new(e).context(format!("connecting to the planner at {addr}")));
                continue;
            }
            Err(_) => {
                last = Some(anyhow!(
                    "cannot reach the planner at {addr} within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ));
                continue;
            }
        };
        let (mut send, mut recv) = connection.open_bi().await?;
        hellos(&mut send, &mut recv, &config.user.value).await?;
        let command = RequestCommand::Exec(request);
        write_frame(&mut send, &Request { id: 1, command }, DEFAULT_MAX_FRAME).await?;
        return Ok(ExecStream {
            endpoint,
            connection,
            send,
            recv,
        });
    }
    Err(last.unwrap_or_else(|| anyhow!("no planner address to try")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::config::{Setting, Source};
    use super::*;

    fn config(planner: &str, dir: &Path, user: &str) -> ClientConfig {
        ClientConfig {
            planner: Setting {
                value: planner.split(',').map(Into::into).collect(),
                source: Source::Default,
            },
            cert_dir: Setting {
                value: dir.to_owned(),
                source: Source::Env("HYPERPLAN_CERT_DIR"),
            },
            user: Setting {
                value: user.into(),
                source: Source::Flag("--user"),
            },
        }
    }

    #[test]
    fn addresses_with_and_without_ports() {
        let addr = |s: &str| resolve_addr(s, &Source::Default).unwrap();
        assert_eq!(addr("127.0.0.1:9"), "127.0.0.1:9".parse().unwrap());
        assert_eq!(addr("127.0.0.1"), "127.0.0.1:7400".parse().unwrap());
        assert_eq!(addr("[::1]:9"), "[::1]:9".parse().unwrap());
        assert_eq!(addr("[::1]"), "[::1]:7400".parse().unwrap());
        assert_eq!(addr("::1"), "[::1]:7400".parse().unwrap());
        assert_eq!(addr("localhost:9").port(), 9);
        let err = resolve_addr("127.0.0.1:notaport", &Source::Flag("--planner"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("127.0.0.1:notaport (from --planner)") && err.contains("HOST:PORT"),
            "{err}"
        );
    }

    #[test]
    fn missing_certificate_names_the_file_and_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let err = load_material(&config("127.0.0.1:1", dir.path(), "alice"))
            .unwrap_err()
            .to_string();
        let cert = dir.path().join("users/alice.pem");
        assert!(err.contains(&cert.display().to_string()), "{err}");
        assert!(err.contains("hyperplan certs issue --user alice --role user"), "{err}");
        assert!(err.contains("from $HYPERPLAN_CERT_DIR"), "{err}");
    }

    #[test]
    fn missing_ca_is_named() {
        let dir = tempfile::tempdir().unwrap();
        hyperplan_net::certs::init_ca(dir.path(), false).unwrap();
        hyperplan_net::certs::issue_user(dir.path(), "alice", hyperplan_net::certs::UserRole::User).unwrap();
        std::fs::remove_file(dir.path().join("ca.pem")).unwrap();
        let err = load_material(&config("127.0.0.1:1", dir.path(), "alice"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("no cluster CA certificate: "), "{err}");
        assert!(err.contains("ca.pem does not exist"), "{err}");
    }

    /// A planner for these tests on 127.0.0.1:0, in a thread: hellos, then `answer` for
    /// every request. Returns its address and how many requests it got.
    fn fake_planner(
        dir: &Path,
        answer: fn(&RequestCommand) -> Result<serde_json::Value, ResponseError>,
    ) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let material = TlsMaterial::load(&CertPaths::planner(dir)).unwrap();
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = runtime().unwrap();
            runtime.block_on(async move {
                let endpoint = hyperplan_net::server_endpoint("127.0.0.1:0".parse().unwrap(), &material).unwrap();
                tx.send(endpoint.local_addr().unwrap()).unwrap();
                while let Some(incoming) = endpoint.accept().await {
                    let Ok(conn) = incoming.await else { continue };
                    let Ok((mut send, mut recv)) = conn.accept_bi().await else {
                        continue;
                    };
                    let _: Option<Hello> = read_frame(&mut recv, DEFAULT_MAX_FRAME).await.unwrap();
                    let hello = Hello::new(Role::Planner, "hyperplan-planner");
                    write_frame(&mut send, &hello, DEFAULT_MAX_FRAME).await.unwrap();
                    while let Ok(Some(request)) = read_frame::<Request, _>(&mut recv, DEFAULT_MAX_FRAME).await {
                        if request.command != RequestCommand::Planners {
                            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        let response = Response {
                            id: request.id,
                            result: answer(&request.command),
                        };
                        write_frame(&mut send, &response, DEFAULT_MAX_FRAME).await.unwrap();
                    }
                }
            });
        });
        (rx.recv().unwrap(), asked)
    }

    fn cluster_certs() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        hyperplan_net::certs::init_ca(dir.path(), false).unwrap();
        hyperplan_net::certs::issue_planner(dir.path(), &[]).unwrap();
        hyperplan_net::certs::issue_user(dir.path(), "alice", hyperplan_net::certs::UserRole::User).unwrap();
        dir
    }

    fn leader(command: &RequestCommand) -> Result<serde_json::Value, ResponseError> {
        if *command == RequestCommand::Planners {
            return Ok(serde_json::json!({"role": "leader", "epoch": 3, "leader": null, "store": "etcd"}));
        }
        Ok(serde_json::json!("from the leader"))
    }

    /// A request as `request` sends it, without waiting for an election to end.
    fn request_now(config: &ClientConfig, command: RequestCommand) -> anyhow::Result<serde_json::Value> {
        match requests_waiting(config, vec![command], Duration::ZERO)?.pop() {
            Some(reply) => Ok(reply?),
            None => bail!("no reply"),
        }
    }

    fn standby_without_leader(_: &RequestCommand) -> Result<serde_json::Value, ResponseError> {
        Err(ResponseError::not_leader(None))
    }

    #[test]
    fn a_standby_sends_the_request_to_the_leader_it_names() {
        let dir = cluster_certs();
        let (leader_addr, asked) = fake_planner(dir.path(), leader);
        // The standby names the leader from a static: the address is only known now.
        static LEADER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        LEADER.set(leader_addr.to_string()).unwrap();
        let (standby, _) = fake_planner(dir.path(), |_| {
            Err(ResponseError::not_leader(LEADER.get().map(String::as_str)))
        });
        // Only the standby is listed: its leader is asked all the same.
        let reply = request(
            &config(&standby.to_string(), dir.path(), "alice"),
            RequestCommand::Nodes,
        )
        .unwrap();
        assert_eq!(reply, "from the leader");
        // Both listed, the standby first: the leader is asked once (not again as listed).
        let both = format!("{standby},{leader_addr}");
        let before = asked.load(std::sync::atomic::Ordering::SeqCst);
        let reply = request(&config(&both, dir.path(), "alice"), RequestCommand::Nodes).unwrap();
        assert_eq!(reply, "from the leader");
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), before + 1);
    }

    #[test]
    fn unreachable_and_standby_planners_are_skipped_then_listed() {
        let dir = cluster_certs();
        let (leader_addr, _) = fake_planner(dir.path(), leader);
        let (standby, _) = fake_planner(dir.path(), standby_without_leader);
        let list = format!("127.0.0.1:notaport,{standby},{leader_addr}");
        let reply = request(
            &config(&list, dir.path(), "alice"),
            RequestCommand::Status {
                job: None,
                all: false,
                since_secs: None,
                page: None,
            },
        )
        .unwrap();
        assert_eq!(reply, "from the leader");
        // No leader anywhere: one error, each address and why.
        let list = format!("127.0.0.1:notaport,{standby}");
        let err = request_now(&config(&list, dir.path(), "alice"), RequestCommand::Nodes).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            format!(
                "no planner took the request; tried 2 planners (the default):\n  127.0.0.1:notaport: cannot resolve the \
                 planner address 127.0.0.1:notaport (the default): invalid port value; expected HOST:PORT\n  \
                 {standby}: not the leader; the leader is unknown (an election is under way)"
            )
        );
    }

    /// Nobody on the list answers at all: one round asked at once, then the error,
    /// instead of waiting out an election that nobody holds (it took 31–36 s).
    #[test]
    fn a_list_where_nobody_answers_fails_after_one_round() {
        let dir = cluster_certs();
        let list = "127.0.0.1:notaport,127.0.0.1:alsonot";
        let err = request(&config(list, dir.path(), "alice"), RequestCommand::Nodes).unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.starts_with(
                "no planner answered; tried 2 planners (the default):\n  127.0.0.1:notaport: cannot resolve"
            ) && err.contains("\n  127.0.0.1:alsonot: cannot resolve"),
            "{err}"
        );
    }

    #[test]
    fn one_standby_alone_answers_as_before() {
        let dir = cluster_certs();
        let (standby, _) = fake_planner(dir.path(), standby_without_leader);
        let err = request_now(
            &config(&standby.to_string(), dir.path(), "alice"),
            RequestCommand::Nodes,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "not the leader; the leader is unknown (an election is under way)"
        );
    }

    #[test]
    fn every_planner_is_asked() {
        let dir = cluster_certs();
        let (leader_addr, _) = fake_planner(dir.path(), leader);
        let (standby, _) = fake_planner(dir.path(), standby_without_leader);
        let list = format!("{leader_addr},127.0.0.1:notaport,{standby}");
        let answers = ask_every(&config(&list, dir.path(), "alice"), RequestCommand::Planners).unwrap();
        let shown: Vec<(String, String)> = answers
            .into_iter()
            .map(|(p, a)| (p, a.map_or_else(|e| format!("error: {e:#}"), |v| v.to_string())))
            .collect();
        assert_eq!(
            shown,
            [
                (
                    leader_addr.to_string(),
                    r#"{"epoch":3,"leader":null,"role":"leader","store":"etcd"}"#.to_string()
                ),
                (
                    "127.0.0.1:notaport".to_string(),
                    "error: cannot resolve the planner address 127.0.0.1:notaport (the default): invalid port \
                     value; expected HOST:PORT"
                        .to_string()
                ),
                (
                    standby.to_string(),
                    "error: not the leader; the leader is unknown (an election is under way)".to_string()
                ),
            ]
        );
    }

    #[test]
    fn addresses_compare_without_case_and_with_the_default_port() {
        assert!(same_planner("Head01:7400", "head01:7400"));
        assert!(same_planner("head01", "head01:7400"));
        assert!(same_planner("[::1]", "[::1]:7400"));
        assert!(!same_planner("head01:7401", "head01"));
        assert!(!same_planner("head01:7400", "head02:7400"));
    }

    #[test]
    fn only_reading_requests_are_sent_twice() {
        assert!(repeatable(&RequestCommand::Nodes));
        assert!(repeatable(&RequestCommand::Planners));
        assert!(!repeatable(&RequestCommand::Cancel {
            job: "j".into(),
            grace_secs: 10
        }));
    }
}
