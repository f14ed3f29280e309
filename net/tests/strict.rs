//! `TlsMaterial::load_for`: ssh-like strict modes on a party's own certificate files —
//! a key others may read, a certificate directory others may write, a certificate of
//! another role than the one expected are refused with an error naming the file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hyperplan_net::certs::{self, CertPaths, UserRole};
use hyperplan_net::{CertRole, TlsMaterial};

fn cluster(dir: &Path) {
    certs::init_ca(dir, false).unwrap();
    certs::issue_planner(dir, &[]).unwrap();
    certs::issue_node(dir, "n001").unwrap();
    certs::issue_user(dir, "alice", UserRole::User).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn refused(paths: &CertPaths, roles: &[CertRole], file: &Path, words: &str) {
    let err = TlsMaterial::load_for(paths, roles).unwrap_err();
    let shown = err.to_string();
    assert!(shown.contains(&file.display().to_string()), "{shown}");
    assert!(shown.contains(words), "{shown}");
}

#[test]
fn sane_material_loads_for_each_party() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    TlsMaterial::load_for(&CertPaths::planner(dir.path()), &[CertRole::Planner]).unwrap();
    TlsMaterial::load_for(&CertPaths::node(dir.path(), "n001"), &[CertRole::Agent]).unwrap();
    TlsMaterial::load_for(
        &CertPaths::user(dir.path(), "alice"),
        &[CertRole::Admin, CertRole::User],
    )
    .unwrap();
}

#[test]
fn a_key_readable_by_group_or_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    for (paths, role) in [
        (CertPaths::planner(dir.path()), CertRole::Planner),
        (CertPaths::node(dir.path(), "n001"), CertRole::Agent),
        (CertPaths::user(dir.path(), "alice"), CertRole::User),
    ] {
        for mode in [0o644, 0o640, 0o604, 0o660] {
            chmod(&paths.key, mode);
            refused(&paths, &[role], &paths.key, &format!("{mode:04o}"));
        }
        chmod(&paths.key, 0o400);
        TlsMaterial::load_for(&paths, &[role]).unwrap();
    }
}

#[test]
fn a_certificate_directory_writable_by_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    chmod(dir.path(), 0o777);
    refused(
        &CertPaths::planner(dir.path()),
        &[CertRole::Planner],
        dir.path(),
        "writable by others",
    );
    chmod(dir.path(), 0o755);
    let nodes = dir.path().join("nodes");
    chmod(&nodes, 0o777);
    refused(
        &CertPaths::node(dir.path(), "n001"),
        &[CertRole::Agent],
        &nodes,
        "writable by others",
    );
    // Sticky does not help: anyone may still add a file where a certificate is missing.
    chmod(&nodes, 0o1777);
    refused(
        &CertPaths::node(dir.path(), "n001"),
        &[CertRole::Agent],
        &nodes,
        "writable by others",
    );
}

#[test]
fn a_certificate_of_another_role_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    let planner = CertPaths::planner(dir.path());
    let node = CertPaths::node(dir.path(), "n001");
    // An agent certificate installed as planner.pem.
    fs::copy(&node.cert, &planner.cert).unwrap();
    fs::copy(&node.key, &planner.key).unwrap();
    refused(&planner, &[CertRole::Planner], &planner.cert, "role agent");
    // A user's certificate where an agent's should be.
    let user = CertPaths::user(dir.path(), "alice");
    fs::copy(&user.cert, &node.cert).unwrap();
    fs::copy(&user.key, &node.key).unwrap();
    refused(&node, &[CertRole::Agent], &node.cert, "role user");
}
