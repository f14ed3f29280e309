//! Talking to a running planner: one QUIC connection (mutual TLS with the user's
//! certificate), one bidirectional stream, hellos both ways, one request and its response,
//! then close with code 0.
//!
//! Every failure says where it happened and what to do: a missing certificate names the
//! file and the `hyperplan certs issue` command that makes it, an unreachable planner names
//! the address and where that address came from, a refusal carries the planner's reason.

pub mod config;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
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
pub fn requests(
    config: &ClientConfig,
    commands: Vec<RequestCommand>,
) -> anyhow::Result<Vec<Result<serde_json::Value, ResponseError>>> {
    let material = load_material(config)?;
    let addr = resolve_addr(config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(exchange(&material, addr, &config.user.value, commands))
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

/// `HOST:PORT` (or `HOST`, on the default port) to one socket address.
fn resolve_addr(config: &ClientConfig) -> anyhow::Result<SocketAddr> {
    let planner = &config.planner.value;
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
        Ok(None) => bail!(
            "planner address {planner} ({}) resolves to no address",
            config.planner.source
        ),
        Err(e) => bail!(
            "cannot resolve the planner address {planner} ({}): {e}; expected HOST:PORT",
            config.planner.source
        ),
    }
}

/// One connection's whole life. The outer error is the transport's (with advice); an
/// inner `Err` is the planner's answer to a request.
async fn exchange(
    material: &TlsMaterial,
    addr: SocketAddr,
    user: &str,
    commands: Vec<RequestCommand>,
) -> anyhow::Result<Vec<Result<serde_json::Value, ResponseError>>> {
    let endpoint = hyperplan_net::client_endpoint(any_addr_for(addr), material)?;
    let connection = match tokio::time::timeout(CONNECT_TIMEOUT, hyperplan_net::connect(&endpoint, addr)).await {
        Err(_) => {
            endpoint.close(VarInt::from_u32(close::NORMAL), b"");
            bail!(
                "cannot reach the planner at {addr} within {} s: is hyperplan-planner running there, and is UDP \
                 port {} open? (set the address with --planner, HYPERPLAN_PLANNER or planner in client.toml)",
                CONNECT_TIMEOUT.as_secs(),
                addr.port()
            );
        }
        Ok(Err(TlsError::Handshake { source, .. })) => return Err(connection_error(addr, &source)),
        Ok(Err(e)) => return Err(e.into()),
        Ok(Ok(connection)) => connection,
    };
    let result = talk(&connection, user, commands).await;
    let result = match result {
        Ok(reply) => Ok(reply),
        Err(e) => Err(explain_failure(&connection, addr, e).await),
    };
    connection.close(VarInt::from_u32(close::NORMAL), b"");
    // Lets our close frame leave; the reply is already in hand, so do not wait long.
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    result
}

/// The protocol on the one stream: hello, hello, then request, response, request, ...
async fn talk(
    connection: &Connection,
    user: &str,
    commands: Vec<RequestCommand>,
) -> anyhow::Result<Vec<Result<serde_json::Value, ResponseError>>> {
    let (mut send, mut recv) = connection.open_bi().await?;
    write_frame(&mut send, &Hello::new(Role::Client, user), DEFAULT_MAX_FRAME).await?;
    let hello: Hello = tokio::time::timeout(CONNECT_TIMEOUT, read_frame(&mut recv, DEFAULT_MAX_FRAME))
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
    let mut replies = Vec::with_capacity(commands.len());
    for (id, command) in (1..).zip(commands) {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::PathBuf;

    use super::config::{Setting, Source};
    use super::*;

    fn config(planner: &str, dir: &Path, user: &str) -> ClientConfig {
        ClientConfig {
            planner: Setting {
                value: planner.into(),
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
        let dir = PathBuf::from("/nonexistent");
        let addr = |s: &str| resolve_addr(&config(s, &dir, "a")).unwrap();
        assert_eq!(addr("127.0.0.1:9"), "127.0.0.1:9".parse().unwrap());
        assert_eq!(addr("127.0.0.1"), "127.0.0.1:7400".parse().unwrap());
        assert_eq!(addr("[::1]:9"), "[::1]:9".parse().unwrap());
        assert_eq!(addr("[::1]"), "[::1]:7400".parse().unwrap());
        assert_eq!(addr("::1"), "[::1]:7400".parse().unwrap());
        assert_eq!(addr("localhost:9").port(), 9);
        let err = resolve_addr(&config("127.0.0.1:notaport", &dir, "a"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("127.0.0.1:notaport") && err.contains("HOST:PORT"), "{err}");
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
}
