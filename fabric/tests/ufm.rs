//! The UFM source end to end: Volcano's mock port list gives Volcano's expected
//! HyperNodes, through the pure grouping and through a real local HTTP server (a thread
//! with hand-written HTTP/1.1 answers) that checks basic auth; plus 401, 500, garbage,
//! a server that never answers, a world-readable credentials file and N/A records.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use hyperplan_fabric::ufm::{self, UfmConfig, UfmError, UfmSource};
use hyperplan_shared::{HyperNodeSpec, MemberType, Selector};
use serde_json::Value;

const MOCK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/ufm/volcano_mock/");
/// `admin:secret`, base64.
const GOOD_AUTH: &str = "Basic YWRtaW46c2VjcmV0";

fn mock_ports() -> Vec<u8> {
    std::fs::read(format!("{MOCK}resources_ports.mock.json")).unwrap()
}

/// (name, tier, member type, exact names) per HyperNode, in file order.
type Shape = Vec<(String, u64, String, Vec<String>)>;

/// Volcano's expected result, as its file writes it (`members: {type, exactMatch: [..]}`).
fn expected_shape() -> Shape {
    let text = std::fs::read_to_string(format!("{MOCK}expected_hypernodes.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["hypernodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap().to_string(),
                h["tier"].as_u64().unwrap(),
                h["members"]["type"].as_str().unwrap().to_string(),
                h["members"]["exactMatch"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

/// Ours in the same shape; every HyperNode must have one member type and exact selectors.
fn shape(specs: &[HyperNodeSpec]) -> Shape {
    specs
        .iter()
        .map(|h| {
            let kinds: Vec<MemberType> = h.members.iter().map(|m| m.kind).collect();
            assert!(kinds.windows(2).all(|w| w[0] == w[1]), "{}: mixed member types", h.name);
            let kind = match kinds.first() {
                Some(MemberType::Node) => "Node",
                Some(MemberType::HyperNode) => "HyperNode",
                None => panic!("{} has no members", h.name),
            };
            let names = h
                .members
                .iter()
                .map(|m| match &m.selector {
                    Selector::Exact { name } => name.clone(),
                    other => panic!("{}: non-exact selector {other:?}", h.name),
                })
                .collect();
            (h.name.clone(), u64::from(h.tier), kind.to_string(), names)
        })
        .collect()
}

#[test]
fn volcano_mock_gives_volcano_expected_hypernodes() {
    let body: Value = serde_json::from_slice(&mock_ports()).unwrap();
    let t = ufm::group_ports(&body);
    assert_eq!(shape(&t.hypernodes), expected_shape());
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    assert_eq!((t.records, t.host_links, t.switch_links), (30, 30, 0));
}

// ---------------------------------------------------------------------------------------
// A minimal HTTP/1.1 server

/// What the test server does with a request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// 200 with this body when the Authorization header is `admin:secret`, else 401.
    Serve(&'static [u8]),
    /// Always this status with a short text body.
    Status(u16),
    /// Accept, read the request, never answer (the connection stays open for a while).
    Hang,
}

/// Starts a server on 127.0.0.1:0; returns its base URL and the Authorization headers seen.
fn server(behaviour: Behaviour) -> (String, mpsc::Receiver<Option<String>>) {
    serve(behaviour, None)
}

/// Like [`server`], with TLS under this rustls configuration when given (`https://`).
fn serve(behaviour: Behaviour, tls: Option<Arc<rustls::ServerConfig>>) -> (String, mpsc::Receiver<Option<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    let scheme = if tls.is_some() { "https" } else { "http" };
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let tx = tx.clone();
            let tls = tls.clone();
            std::thread::spawn(move || match tls {
                None => handle(stream, behaviour, &tx),
                Some(config) => {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    handle(rustls::StreamOwned::new(conn, stream), behaviour, &tx);
                }
            });
        }
    });
    (format!("{scheme}://{addr}"), rx)
}

/// Reads one request (line and headers; a GET has no body) and answers it. I/O errors
/// (a client that gave up, a refused TLS handshake) end the connection quietly.
fn handle<S: Read + Write>(mut stream: S, behaviour: Behaviour, seen: &mpsc::Sender<Option<String>>) {
    let mut reader = BufReader::new(&mut stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut auth = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("authorization")
        {
            auth = Some(v.trim().to_string());
        }
    }
    drop(reader);
    assert!(
        request_line.starts_with("GET /ufmRest/resources/ports HTTP/1.1"),
        "{request_line:?}"
    );
    let _ = seen.send(auth.clone());
    let (status, body): (u16, &[u8]) = match behaviour {
        Behaviour::Hang => {
            std::thread::sleep(Duration::from_secs(5));
            return;
        }
        Behaviour::Serve(body) if auth.as_deref() == Some(GOOD_AUTH) => (200, body),
        Behaviour::Serve(_) => (401, b"Unauthorized"),
        Behaviour::Status(s) => (s, b"Internal Server Error"),
    };
    let head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    let _ = stream.flush();
}

fn credentials(dir: &Path, text: &str, mode: u32) -> PathBuf {
    let path = dir.join("ufm-credentials");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn config(url: &str, creds: PathBuf) -> UfmConfig {
    let mut c = UfmConfig::new(url, creds);
    c.timeout = Duration::from_millis(300);
    c
}

fn leak(v: Vec<u8>) -> &'static [u8] {
    Box::leak(v.into_boxed_slice())
}

#[test]
fn http_success_gives_expected_hypernodes_and_sends_basic_auth() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = server(Behaviour::Serve(leak(mock_ports())));
    let source = UfmSource::new(config(&url, credentials(dir.path(), "admin:secret\n", 0o600))).unwrap();
    assert_eq!(source.url(), format!("{url}/ufmRest/resources/ports"));
    assert_eq!(source.interval(), Duration::from_secs(3600));
    let t = source.fetch().unwrap();
    assert_eq!(shape(&t.hypernodes), expected_shape());
    assert_eq!(seen.recv().unwrap().as_deref(), Some(GOOD_AUTH));

    // Polls again with the same agent, and the one-shot `fetch` agrees.
    assert_eq!(source.fetch().unwrap(), t);
    assert_eq!(ufm::fetch(source.config()).unwrap(), t);
}

#[test]
fn wrong_credentials_are_unauthorized_naming_url_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = server(Behaviour::Serve(b"[]"));
    let creds = credentials(dir.path(), "admin:wrong\n", 0o600);
    let err = ufm::fetch(&config(&url, creds.clone())).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, UfmError::Unauthorized { .. }), "{msg}");
    assert!(
        msg.contains(&url) && msg.contains(&creds.display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("refused the credentials"), "{msg}");
    assert_eq!(seen.recv().unwrap().as_deref(), Some("Basic YWRtaW46d3Jvbmc="));
}

#[test]
fn server_error_is_http_status() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _seen) = server(Behaviour::Status(500));
    let err = ufm::fetch(&config(&url, credentials(dir.path(), "admin:secret", 0o600))).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, UfmError::HttpStatus { status: 500, .. }), "{msg}");
    assert!(msg.contains(&url) && msg.contains("500"), "{msg}");
}

#[test]
fn garbage_body_is_not_json_with_position_and_first_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _seen) = server(Behaviour::Serve(b"<html>\n  <title>UFM login</title>\n</html>"));
    let err = ufm::fetch(&config(&url, credentials(dir.path(), "admin:secret", 0o400))).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, UfmError::NotJson { .. }), "{msg}");
    assert!(msg.contains("line 1 column 1"), "{msg}");
    assert!(msg.contains("<title>UFM login"), "{msg}");
    assert!(msg.contains(&url), "{msg}");
}

#[test]
fn a_server_that_never_answers_times_out_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _seen) = server(Behaviour::Hang);
    let cfg = config(&url, credentials(dir.path(), "admin:secret", 0o600));
    let started = Instant::now();
    let err = ufm::fetch(&cfg).unwrap_err();
    let elapsed = started.elapsed();
    let msg = err.to_string();
    assert!(matches!(err, UfmError::Timeout { .. }), "{msg}");
    assert!(msg.contains(&url) && msg.contains("0.3 s"), "{msg}");
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[test]
fn nothing_listening_is_a_transport_error() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let err = ufm::fetch(&config(&url, credentials(dir.path(), "admin:secret", 0o600))).unwrap_err();
    assert!(matches!(err, UfmError::Transport { .. } | UfmError::Io { .. }), "{err}");
    assert!(err.to_string().contains(&url), "{err}");
}

#[test]
fn credentials_readable_by_others_are_refused_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = server(Behaviour::Serve(b"[]"));
    for mode in [0o644, 0o640, 0o604, 0o660] {
        let creds = credentials(dir.path(), "admin:secret\n", mode);
        let err = UfmSource::new(config(&url, creds.clone())).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, UfmError::Credentials { .. }), "{msg}");
        assert!(msg.contains(&creds.display().to_string()), "{msg}");
        assert!(msg.contains(&format!("{mode:04o}")) && msg.contains("0600"), "{msg}");
    }
    assert!(seen.try_recv().is_err(), "a request was sent");

    let err = UfmSource::new(config(&url, dir.path().join("missing"))).unwrap_err();
    assert!(matches!(err, UfmError::Credentials { .. }), "{err}");
    let err = UfmSource::new(config(&url, credentials(dir.path(), "admin\n", 0o600))).unwrap_err();
    assert!(err.to_string().contains("username:password"), "{err}");
}

#[test]
fn records_with_null_or_na_fields_are_skipped_with_warnings() {
    let mut records: Vec<Value> = serde_json::from_slice(&mock_ports()).unwrap();
    records
        .push(serde_json::json!({"description": "Computer IB Port", "system_name": "N/A", "peer_node_name": "leaf0"}));
    records
        .push(serde_json::json!({"description": "Computer IB Port", "system_name": "node9", "peer_node_name": null}));
    records.push(serde_json::json!({"description": "Computer IB Port", "system_name": "node9"}));
    records.push(serde_json::json!({"description": null, "system_name": "node9", "peer_node_name": "leaf9"}));
    records.push(serde_json::json!("N/A"));
    let body = leak(serde_json::to_vec(&records).unwrap());

    let dir = tempfile::tempdir().unwrap();
    let (url, _seen) = server(Behaviour::Serve(body));
    let t = ufm::fetch(&config(&url, credentials(dir.path(), "admin:secret", 0o600))).unwrap();
    assert_eq!(shape(&t.hypernodes), expected_shape());
    assert_eq!(t.warnings.iter().map(|w| w.count).sum::<usize>(), 5, "{:?}", t.warnings);
    assert_eq!(t.warnings[0].first_record, 30);
    assert!(
        t.warnings.iter().any(|w| w.to_string().contains("peer_node_name")),
        "{:?}",
        t.warnings
    );
}

#[test]
fn config_errors_for_a_bad_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), "admin:secret", 0o600);
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not a certificate\n").unwrap();
    let mut cfg = UfmConfig::new("https://ufm.invalid", creds);
    cfg.ca_file = Some(ca.clone());
    let err = UfmSource::new(cfg).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, UfmError::CaFile { .. }), "{msg}");
    assert!(
        msg.contains(&ca.display().to_string()) && msg.contains("CERTIFICATE"),
        "{msg}"
    );
}

/// A 4,096-host, 2-rail fabric: 256 leaves (a rail pair serves 32 hosts), 32 spines in 4 pods,
/// 8 cores, both ends of every switch link listed. Checks the tiers and reports the time.
#[test]
fn large_fabric_groups_into_pods_quickly() {
    let mut records = Vec::new();
    let port =
        |desc: &str, a: &str, b: &str| serde_json::json!({"description": desc, "system_name": a, "peer_node_name": b});
    for h in 0..4096 {
        let pair = h / 32; // leaves 2*pair and 2*pair+1 carry the two rails
        for rail in 0..2 {
            let leaf = format!("leaf{:03}", 2 * pair + rail);
            records.push(port("Computer IB Port", &format!("gpu{h:04}"), &leaf));
            records.push(port("Switch IB Port", &leaf, &format!("gpu{h:04} mlx5_{rail}")));
        }
    }
    for l in 0..256 {
        let pod = l / 64;
        for s in 0..8 {
            let (leaf, spine) = (format!("leaf{l:03}"), format!("spine{pod}-{s}"));
            records.push(port("Switch IB Port", &leaf, &spine));
            records.push(port("Switch IB Port", &spine, &leaf));
        }
    }
    for pod in 0..4 {
        for s in 0..8 {
            for c in 0..8 {
                let (spine, core) = (format!("spine{pod}-{s}"), format!("core{c}"));
                records.push(port("Switch IB Port", &spine, &core));
                records.push(port("Switch IB Port", &core, &spine));
            }
        }
    }
    let body = serde_json::to_vec(&records).unwrap();
    let started = Instant::now();
    let t = ufm::parse_ports("test", &body).unwrap();
    let elapsed = started.elapsed();
    eprintln!("{} port records parsed and grouped in {elapsed:?}", t.records);
    let per_tier = |k: u32| t.hypernodes.iter().filter(|h| h.tier == k).count();
    assert_eq!((per_tier(1), per_tier(2), per_tier(3)), (128, 4, 1));
    assert!(
        t.hypernodes
            .iter()
            .filter(|h| h.tier == 1)
            .all(|h| h.members.len() == 32)
    );
    assert_eq!(t.hypernodes.last().unwrap().name, "core-hn");
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

/// A self-signed certificate for 127.0.0.1: its PEM (for `caFile`) and a rustls server
/// configuration on ring.
fn self_signed() -> (String, Arc<rustls::ServerConfig>) {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key.into())
        .unwrap();
    (ck.cert.pem(), Arc::new(config))
}

#[test]
fn https_verifies_the_certificate_unless_told_not_to() {
    let dir = tempfile::tempdir().unwrap();
    let creds = credentials(dir.path(), "admin:secret\n", 0o600);
    let (pem, tls) = self_signed();
    let (url, seen) = serve(Behaviour::Serve(leak(mock_ports())), Some(tls));
    assert!(url.starts_with("https://"));
    let mut cfg = config(&url, creds);
    cfg.timeout = Duration::from_secs(5);

    // Verification on, server's certificate not from a trusted CA: refused, no request.
    let err = ufm::fetch(&cfg).unwrap_err();
    assert!(matches!(err, UfmError::Tls { .. }), "{err}");
    assert!(
        err.to_string().contains(&url) && err.to_string().contains("caFile"),
        "{err}"
    );
    assert!(
        seen.try_recv().is_err(),
        "credentials were sent over an unverified connection"
    );

    // Trusted through caFile.
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pem).unwrap();
    let mut trusted = cfg.clone();
    trusted.ca_file = Some(ca);
    let t = ufm::fetch(&trusted).unwrap();
    assert_eq!(shape(&t.hypernodes), expected_shape());
    assert_eq!(seen.recv().unwrap().as_deref(), Some(GOOD_AUTH));

    // Not verified at all with insecureSkipVerify.
    let mut insecure = cfg;
    insecure.insecure_skip_verify = true;
    let t = ufm::fetch(&insecure).unwrap();
    assert_eq!(shape(&t.hypernodes), expected_shape());
}
