//! TLS and QUIC endpoints: rustls with the *ring* provider, TLS 1.3 only, ALPN
//! `hyperplan/1`, and mutual authentication against the cluster CA in both directions.
//!
//! The planner's endpoint requires a client certificate issued by the CA; clients
//! check the planner's certificate against the CA under the fixed name
//! [`PLANNER_SERVER_NAME`]. Who the peer is comes afterwards from
//! [`crate::identity::peer_identity`].

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub use crate::certs::{CertPaths, PLANNER_SERVER_NAME};

/// The one ALPN protocol both sides speak.
pub const ALPN: &[u8] = b"hyperplan/1";

/// A client pings this often so an idle connection (an agent between heartbeats, a CLI
/// waiting on a slow answer) outlives its idle timeout.
pub const KEEP_ALIVE: Duration = Duration::from_secs(2);

/// A connection with no packets for this long is gone (the agent or planner died): the
/// planner's side.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The clients' side, which QUIC takes as the connection's (the smaller one wins): an
/// agent whose planner was killed (a leader that failed over, a crash) notices within
/// this long and goes to the next planner; the pings above keep a live one open. The
/// planner's QUIC stack answers them whatever its tick loop is doing.
pub const CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the {what} from {}: {source}", .path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{} holds no {what}", .path.display())]
    Empty { what: &'static str, path: PathBuf },
    #[error("the CA certificate in {} is unusable: {source}", .path.display())]
    BadCa { path: PathBuf, source: rustls::Error },
    /// The party's own files fail the ssh-like checks (modes, role).
    #[error(transparent)]
    Strict(#[from] crate::strict::StrictError),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("QUIC crypto: {0}")]
    Quic(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
    #[error("cannot bind UDP {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: quinn::ConnectError,
    },
    #[error("connection to {addr} failed: {source}")]
    Handshake {
        addr: SocketAddr,
        source: quinn::ConnectionError,
    },
}

const CA_WHAT: &str = "cluster CA certificate (PEM, ca.pem from `hyperplan certs init`)";
const CERT_WHAT: &str = "certificate (PEM, from `hyperplan certs issue`)";
const KEY_WHAT: &str = "private key (PEM, the .key beside the certificate)";

/// What one party needs for TLS: the CA to check the peer against, its own chain and key.
#[derive(Debug)]
pub struct TlsMaterial {
    pub ca: Vec<CertificateDer<'static>>,
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl TlsMaterial {
    /// Reads the three PEM files; errors name the file and what it should have held.
    pub fn load(paths: &CertPaths) -> Result<Self, TlsError> {
        let material = Self {
            ca: read_certs(&paths.ca, CA_WHAT)?,
            chain: read_certs(&paths.cert, CERT_WHAT)?,
            key: read_key(&paths.key)?,
        };
        material.roots().map_err(|source| TlsError::BadCa {
            path: paths.ca.clone(),
            source,
        })?;
        Ok(material)
    }

    /// [`TlsMaterial::load`] for a party that expects its certificate to carry one of
    /// `roles`, after the ssh-like checks of [`crate::strict`] on its files.
    pub fn load_for(paths: &CertPaths, roles: &[crate::identity::CertRole]) -> Result<Self, TlsError> {
        crate::strict::check_modes(paths)?;
        let material = Self::load(paths)?;
        if let Some(leaf) = material.chain.first() {
            crate::strict::check_role(&paths.cert, leaf, roles)?;
        }
        Ok(material)
    }

    fn roots(&self) -> Result<Arc<RootCertStore>, rustls::Error> {
        let mut roots = RootCertStore::empty();
        for cert in &self.ca {
            roots.add(cert.clone())?;
        }
        Ok(Arc::new(roots))
    }
}

impl Clone for TlsMaterial {
    fn clone(&self) -> Self {
        Self {
            ca: self.ca.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

fn read_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read_err = |source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_err)?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| match source {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            what: KEY_WHAT,
            path: path.to_owned(),
        },
        source => TlsError::Read {
            what: KEY_WHAT,
            path: path.to_owned(),
            source,
        },
    })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The planner's rustls config: TLS 1.3, ALPN `hyperplan/1`, client certificates from
/// the CA required.
pub fn server_config(material: &TlsMaterial) -> Result<rustls::ServerConfig, TlsError> {
    let roots = material.roots()?;
    let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider()).build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(material.chain.clone(), material.key.clone_key())?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// An agent's or CLI's rustls config: TLS 1.3, ALPN `hyperplan/1`, the planner checked
/// against the CA, our certificate presented.
pub fn client_config(material: &TlsMaterial) -> Result<rustls::ClientConfig, TlsError> {
    let roots = material.roots()?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_client_auth_cert(material.chain.clone(), material.key.clone_key())?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

fn transport(keep_alive: bool) -> Arc<quinn::TransportConfig> {
    let mut transport = quinn::TransportConfig::default();
    // 30 s and 10 s always fit QUIC's varint; the fallback never runs.
    let idle = if keep_alive { CLIENT_IDLE_TIMEOUT } else { IDLE_TIMEOUT };
    transport.max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
    if keep_alive {
        transport.keep_alive_interval(Some(KEEP_ALIVE));
    }
    Arc::new(transport)
}

/// The planner's QUIC endpoint listening on `addr` (port 0 picks one: see
/// `Endpoint::local_addr`). Call inside a tokio runtime.
///
/// Its stateless-reset key is derived from its private key, so a planner started again
/// on the same address answers the packets of its predecessor's connections with a reset
/// the agents and clients believe: they notice the restart at once and register again,
/// instead of waiting out the idle timeout.
pub fn server_endpoint(addr: SocketAddr, material: &TlsMaterial) -> Result<quinn::Endpoint, TlsError> {
    let crypto = QuicServerConfig::try_from(server_config(material)?)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(transport(false));
    let seed = ring::digest::digest(
        &ring::digest::SHA256,
        &[b"hyperplan stateless reset\0".as_slice(), material.key.secret_der()].concat(),
    );
    let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, seed.as_ref());
    let mut endpoint_config = quinn::EndpointConfig::new(Arc::new(reset_key));
    // quinn's default ids carry a checksum under a per-process key, and a successor
    // would drop its predecessor's packets instead of resetting them: plain random ids.
    endpoint_config.cid_generator(|| Box::new(RandomCid::default()));
    // After a restart every agent learns of it from a reset: quinn's default of one per
    // 20 ms told 10,000 agents in 200 s (most waited out their idle timeout instead). A
    // reset is smaller than the packet that causes it, so a faster rate amplifies nothing.
    endpoint_config.min_reset_interval(MIN_RESET_INTERVAL);
    let bind = |source| TlsError::Bind { addr, source };
    let socket = std::net::UdpSocket::bind(addr).map_err(bind)?;
    // Thousands of agents registering at once overflow the default 208 KiB receive
    // buffer: the handshakes lost cost seconds of retries each. As much as the kernel
    // allows (net.core.rmem_max) up to RECV_BUFFER; less is no error.
    let _ = socket2::SockRef::from(&socket).set_recv_buffer_size(RECV_BUFFER);
    let runtime =
        quinn::default_runtime().ok_or_else(|| bind(std::io::Error::other("no async runtime (call inside tokio)")))?;
    quinn::Endpoint::new(endpoint_config, Some(config), socket, runtime).map_err(bind)
}

/// The shortest time between two stateless resets (see [`server_endpoint`]).
pub const MIN_RESET_INTERVAL: Duration = Duration::from_micros(200);

/// The planner's UDP receive buffer asked for (see [`server_endpoint`]).
pub const RECV_BUFFER: usize = 8 << 20;

/// Random 8-byte connection ids that any planner process takes for its own (see
/// [`server_endpoint`]).
#[derive(Default)]
struct RandomCid {
    /// Mixed in should the system's random source ever fail.
    counter: u64,
}

impl quinn::ConnectionIdGenerator for RandomCid {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        let mut bytes = [0u8; 8];
        if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_err() {
            self.counter += 1;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            bytes = (now ^ self.counter.rotate_left(32)).to_le_bytes();
        }
        quinn::ConnectionId::new(&bytes)
    }

    fn cid_len(&self) -> usize {
        8
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// A client QUIC endpoint bound to `bind` (use [`any_addr_for`] the planner's address)
/// that presents our certificate on every connection. Call inside a tokio runtime.
pub fn client_endpoint(bind: SocketAddr, material: &TlsMaterial) -> Result<quinn::Endpoint, TlsError> {
    let crypto = QuicClientConfig::try_from(client_config(material)?)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(transport(true));
    let mut endpoint = quinn::Endpoint::client(bind).map_err(|source| TlsError::Bind { addr: bind, source })?;
    endpoint.set_default_client_config(config);
    Ok(endpoint)
}

/// The unspecified address, port 0, of `target`'s family: where a client binds to reach it.
pub fn any_addr_for(target: SocketAddr) -> SocketAddr {
    match target {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// Connects to the planner at `addr` and completes the handshake. A planner that
/// refuses our certificate may only say so after this returns: the first stream
/// operation then fails with the close reason.
pub async fn connect(endpoint: &quinn::Endpoint, addr: SocketAddr) -> Result<quinn::Connection, TlsError> {
    let connecting = endpoint
        .connect(addr, PLANNER_SERVER_NAME)
        .map_err(|source| TlsError::Connect { addr, source })?;
    connecting.await.map_err(|source| TlsError::Handshake { addr, source })
}
