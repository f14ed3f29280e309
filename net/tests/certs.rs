//! The cluster CA and issued certificates on disk: layout, modes, subjects, refusals.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hyperplan_net::certs::{self, CertError, CertPaths, UserRole};
use hyperplan_net::identity::{CertRole, Identity, identity_from_der};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn identity(path: &Path) -> Identity {
    identity_from_der(&CertificateDer::from_pem_file(path).unwrap()).unwrap()
}

#[test]
fn layout_modes_and_subjects() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("certs");
    let ca = certs::init_ca(&dir, false).unwrap();
    assert_eq!(ca.cert, dir.join("ca.pem"));
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&ca.key), 0o600);

    let planner = certs::issue_planner(&dir, &["head01".into(), "10.1.2.3".into()]).unwrap();
    let node = certs::issue_node(&dir, "n001").unwrap();
    let admin = certs::issue_user(&dir, "alice", UserRole::Admin).unwrap();
    let user = certs::issue_user(&dir, "bob", UserRole::User).unwrap();
    assert_eq!(node, CertPaths::node(&dir, "n001"));
    assert_eq!(node.cert, dir.join("nodes/n001.pem"));
    assert_eq!(admin.key, dir.join("users/alice.key"));
    for paths in [&planner, &node, &admin, &user] {
        assert_eq!(mode(&paths.key), 0o600, "{}", paths.key.display());
        assert_eq!(paths.ca, dir.join("ca.pem"));
    }
    assert_eq!(mode(&dir.join("nodes")), 0o700);
    assert_eq!(mode(&dir.join("users")), 0o700);

    assert_eq!(
        identity(&planner.cert),
        Identity {
            name: "hyperplan-planner".into(),
            role: CertRole::Planner
        }
    );
    assert_eq!(
        identity(&node.cert),
        Identity {
            name: "n001".into(),
            role: CertRole::Agent
        }
    );
    assert_eq!(
        identity(&admin.cert),
        Identity {
            name: "alice".into(),
            role: CertRole::Admin
        }
    );
    assert_eq!(
        identity(&user.cert),
        Identity {
            name: "bob".into(),
            role: CertRole::User
        }
    );
}

#[test]
fn reissuing_keeps_a_key_private_even_if_loosened() {
    let tmp = tempfile::tempdir().unwrap();
    certs::init_ca(tmp.path(), false).unwrap();
    let first = certs::issue_node(tmp.path(), "n1").unwrap();
    std::fs::set_permissions(&first.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = std::fs::read(&first.key).unwrap();
    let second = certs::issue_node(tmp.path(), "n1").unwrap();
    assert_eq!(mode(&second.key), 0o600);
    assert_ne!(std::fs::read(&second.key).unwrap(), before);
}

#[test]
fn the_ca_is_not_overwritten_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    certs::init_ca(tmp.path(), false).unwrap();
    let before = std::fs::read(tmp.path().join("ca.key")).unwrap();
    let err = certs::init_ca(tmp.path(), false).unwrap_err();
    assert!(matches!(err, CertError::CaExists(_)), "{err}");
    assert!(err.to_string().contains("--force"), "{err}");
    assert_eq!(std::fs::read(tmp.path().join("ca.key")).unwrap(), before);
    certs::init_ca(tmp.path(), true).unwrap();
    assert_ne!(std::fs::read(tmp.path().join("ca.key")).unwrap(), before);
    assert_eq!(mode(&tmp.path().join("ca.key")), 0o600);
}

#[test]
fn issuing_without_a_ca_says_how_to_make_one() {
    let tmp = tempfile::tempdir().unwrap();
    let err = certs::issue_node(tmp.path(), "n1").unwrap_err();
    assert!(matches!(err, CertError::NoCa { .. }), "{err}");
    assert!(err.to_string().contains("hyperplan certs init"), "{err}");
}

#[test]
fn bad_names_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    certs::init_ca(tmp.path(), false).unwrap();
    for bad in ["../etc/passwd", "a b", "", "x/y"] {
        let err = certs::issue_node(tmp.path(), bad).unwrap_err();
        assert!(matches!(err, CertError::InvalidName { .. }), "{bad}: {err}");
    }
    assert!(certs::issue_user(tmp.path(), "al ice", UserRole::User).is_err());
    assert!(certs::issue_planner(tmp.path(), &["bad_host".into()]).is_err());
    assert!(!tmp.path().join("nodes").exists());
}
