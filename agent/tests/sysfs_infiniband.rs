//! `read_infiniband` against real sysfs fixtures (hwloc's R910 dump with a QLogic qib0,
//! prometheus' node_exporter and procfs testdata) and against spoiled copies of them.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

mod sysfs_common;

use std::fs;
use std::path::Path;

use hyperplan_agent::probe::ProbeError;
use hyperplan_agent::probe::infiniband::{RdmaKind, classify, is_infiniband, read_infiniband};
use hyperplan_shared::topology::{IbPort, InfinibandHca};
use sysfs_common::{copy_tree, hwloc_sys, node_exporter_sys, node_exporter_ttar, procfs_sys, unpack_ttar};

const QIB0_PCI: &str = "devices/pci0000:40/0000:40:03.0/0000:43:00.0";

fn read(root: &Path) -> (Vec<InfinibandHca>, Vec<String>) {
    let mut warnings = Vec::new();
    let hcas = read_infiniband(root, &mut warnings).unwrap();
    (hcas, warnings)
}

fn active_port(number: u32, rate: f64) -> IbPort {
    IbPort {
        number,
        state: Some("ACTIVE".into()),
        physical_state: Some("LinkUp".into()),
        rate_gbps: Some(rate),
        link_layer: Some("InfiniBand".into()),
        ..IbPort::default()
    }
}

/// Values as read by hand from `sys/devices/pci0000:40/0000:40:03.0/0000:43:00.0/infiniband/qib0`.
fn expected_qib0(numa: Vec<u32>) -> InfinibandHca {
    InfinibandHca {
        name: "qib0".into(),
        node_guid: Some("0011:7500:0077:cfc8".into()),
        // The dump's node_desc is "@ HCA-1": the host name was cut off before the " HCA-1".
        node_description: Some("@ HCA-1".into()),
        pci_bus_id: Some("0000:43:00.0".into()),
        pci_class: None,
        numa,
        ports: vec![IbPort {
            lid: Some(0x12a),
            sm_lid: Some(1),
            port_guid: Some("0011:7500:0077:cfc8".into()),
            netdev: Some("ib0".into()),
            ..active_port(1, 40.0)
        }],
    }
}

#[test]
fn hwloc_dump_qib0_every_field() {
    // In this copy the sysfs symlinks are plain files holding their target.
    let (hcas, warnings) = read(&hwloc_sys());
    assert_eq!(hcas, vec![expected_qib0(vec![])]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(is_infiniband(&hcas[0]));
    assert_eq!(classify(&hcas[0]), RdmaKind::Infiniband);
}

#[test]
fn hwloc_dump_with_real_symlinks_and_numa_node() {
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path().join("sys");
    copy_tree(&hwloc_sys().join("class"), &sys.join("class"), true);
    copy_tree(
        &hwloc_sys().join("devices/pci0000:40"),
        &sys.join("devices/pci0000:40"),
        true,
    );
    copy_tree(
        &hwloc_sys().join("devices/pci0000:00"),
        &sys.join("devices/pci0000:00"),
        true,
    );
    assert!(
        fs::symlink_metadata(sys.join("class/infiniband/qib0"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // The original hwloc tarball has numa_node 2 here; the trimmed fixture left it out.
    fs::write(sys.join(QIB0_PCI).join("numa_node"), "2\n").unwrap();

    let (hcas, warnings) = read(&sys);
    assert_eq!(hcas, vec![expected_qib0(vec![2])]);
    assert!(warnings.is_empty(), "{warnings:?}");

    // numa_node -1: no locality, not an error.
    fs::write(sys.join(QIB0_PCI).join("numa_node"), "-1\n").unwrap();
    let (hcas, warnings) = read(&sys);
    assert_eq!(hcas[0].numa, Vec::<u32>::new());
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn netdev_found_through_class_net_when_device_net_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path();
    copy_tree(&hwloc_sys().join("class"), &sys.join("class"), true);
    copy_tree(
        &hwloc_sys().join("devices/pci0000:40"),
        &sys.join("devices/pci0000:40"),
        true,
    );
    // Move ib0 out of the PCI device's net/ and point class/net/ib0 at the new place.
    let moved = sys.join("devices/virtual/other/ib0");
    fs::create_dir_all(moved.parent().unwrap()).unwrap();
    fs::rename(sys.join(QIB0_PCI).join("net/ib0"), &moved).unwrap();
    fs::remove_dir(sys.join(QIB0_PCI).join("net")).unwrap();
    fs::remove_file(moved.join("device")).unwrap();
    std::os::unix::fs::symlink(format!("../../../../{QIB0_PCI}"), moved.join("device")).unwrap();
    fs::remove_file(sys.join("class/net/ib0")).unwrap();
    std::os::unix::fs::symlink("../../devices/virtual/other/ib0", sys.join("class/net/ib0")).unwrap();

    let (hcas, warnings) = read(sys);
    assert_eq!(hcas[0].ports[0].netdev.as_deref(), Some("ib0"));
    assert!(warnings.is_empty(), "{warnings:?}");
}

/// node_exporter: mlx4_0 (2 QDR ports) and i40iw0 (an Intel iWARP device that claims link
/// layer InfiniBand). Only state, phys_state, rate and link_layer are there.
fn expected_node_exporter() -> Vec<InfinibandHca> {
    vec![
        InfinibandHca {
            name: "i40iw0".into(),
            ports: vec![active_port(1, 10.0)],
            ..InfinibandHca::default()
        },
        InfinibandHca {
            name: "mlx4_0".into(),
            ports: vec![active_port(1, 40.0), active_port(2, 40.0)],
            ..InfinibandHca::default()
        },
    ]
}

#[test]
fn node_exporter_fixture() {
    let (hcas, warnings) = read(&node_exporter_sys());
    assert_eq!(hcas, expected_node_exporter());
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(classify(&hcas[0]), RdmaKind::Iwarp);
    assert!(!is_infiniband(&hcas[0]));
    assert!(is_infiniband(&hcas[1]));
}

#[test]
fn node_exporter_ttar_unpacks_to_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    unpack_ttar(&node_exporter_ttar(), tmp.path());
    let (hcas, warnings) = read(&tmp.path().join("sys"));
    assert_eq!(hcas, expected_node_exporter());
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn procfs_fixture() {
    let (hcas, warnings) = read(&procfs_sys());
    let expected = vec![
        // Omni-Path: link layer "InfiniBand", rate "100 Gb/sec (4X EDR)".
        InfinibandHca {
            name: "hfi1_0".into(),
            ports: vec![active_port(1, 100.0)],
            ..InfinibandHca::default()
        },
        // Port 2's link_layer is "InfiniBand\n\n" (a stray blank line).
        InfinibandHca {
            name: "mlx4_0".into(),
            ports: vec![active_port(1, 40.0), active_port(2, 40.0)],
            ..InfinibandHca::default()
        },
        // node_guid without a trailing newline; phys_state "4: ACTIVE" (sic), rate "25 Gb/sec (1X EDR)".
        InfinibandHca {
            name: "mlx5_0".into(),
            node_guid: Some("0a7f:bc12:45ef:d23b".into()),
            ports: vec![IbPort {
                physical_state: Some("ACTIVE".into()),
                ..active_port(1, 25.0)
            }],
            ..InfinibandHca::default()
        },
    ];
    assert_eq!(hcas, expected);
    assert!(warnings.is_empty(), "{warnings:?}");
    let kinds: Vec<RdmaKind> = hcas.iter().map(classify).collect();
    assert_eq!(kinds, [RdmaKind::OmniPath, RdmaKind::Infiniband, RdmaKind::Infiniband]);
}

/// A writable copy of the hwloc qib0 device, returning (sysfs root, port 1 dir).
fn spoilable_qib0(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let sys = tmp.join("sys");
    copy_tree(&hwloc_sys().join("class"), &sys.join("class"), false);
    copy_tree(
        &hwloc_sys().join("devices/pci0000:40"),
        &sys.join("devices/pci0000:40"),
        false,
    );
    let port = sys.join(QIB0_PCI).join("infiniband/qib0/ports/1");
    (sys, port)
}

fn warning_for<'a>(warnings: &'a [String], file: &str) -> &'a str {
    warnings
        .iter()
        .find(|w| w.contains(file))
        .unwrap_or_else(|| panic!("no warning naming {file}: {warnings:?}"))
}

#[test]
fn garbage_values_are_warnings_and_none() {
    let tmp = tempfile::tempdir().unwrap();
    let (sys, port) = spoilable_qib0(tmp.path());
    fs::write(port.join("rate"), "garbage\n").unwrap();
    fs::write(port.join("lid"), "N/A\n").unwrap();
    fs::write(port.join("state"), b"\xff\xfe\n").unwrap(); // not text
    fs::remove_file(port.join("sm_lid")).unwrap();
    fs::create_dir(port.join("sm_lid")).unwrap(); // there but unreadable (EISDIR, even for root)
    fs::write(port.join("phys_state"), "LinkUp\n").unwrap(); // no "5: "
    fs::write(port.join("link_layer"), "Infini Band?\n").unwrap();
    fs::write(port.join("gids/0"), "fe80::1\n").unwrap();
    let dev = sys.join(QIB0_PCI).join("infiniband/qib0");
    fs::write(dev.join("node_guid"), "0011:7500:0077\n").unwrap();
    fs::write(sys.join(QIB0_PCI).join("numa_node"), "north\n").unwrap();

    let (hcas, warnings) = read(&sys);
    let p = &hcas[0].ports[0];
    assert_eq!(p.rate_gbps, None);
    assert_eq!(p.lid, None);
    assert_eq!(p.state, None);
    assert_eq!(p.sm_lid, None);
    assert_eq!(p.physical_state, None);
    assert_eq!(p.link_layer, None);
    assert_eq!(p.port_guid, None);
    assert_eq!(hcas[0].node_guid, None);
    assert_eq!(hcas[0].numa, Vec::<u32>::new());
    // What still parses is kept.
    assert_eq!(p.netdev.as_deref(), Some("ib0"));
    assert_eq!(hcas[0].pci_bus_id.as_deref(), Some("0000:43:00.0"));
    assert_eq!(hcas[0].node_description.as_deref(), Some("@ HCA-1"));

    assert!(
        warning_for(&warnings, "ports/1/rate").contains("\"garbage\""),
        "{warnings:?}"
    );
    assert!(
        warning_for(&warnings, "ports/1/lid").contains("\"N/A\""),
        "{warnings:?}"
    );
    assert!(
        warning_for(&warnings, "ports/1/state").contains("not text"),
        "{warnings:?}"
    );
    assert!(
        warning_for(&warnings, "ports/1/sm_lid").contains("cannot read"),
        "{warnings:?}"
    );
    assert!(
        warning_for(&warnings, "ports/1/phys_state").contains("\"LinkUp\""),
        "{warnings:?}"
    );
    assert!(
        warning_for(&warnings, "ports/1/link_layer").contains("Infini Band?"),
        "{warnings:?}"
    );
    assert!(warning_for(&warnings, "gids/0").contains("fe80::1"), "{warnings:?}");
    assert!(
        warning_for(&warnings, "node_guid").contains("0011:7500:0077"),
        "{warnings:?}"
    );
    assert!(warning_for(&warnings, "numa_node").contains("north"), "{warnings:?}");
    assert_eq!(warnings.len(), 9, "{warnings:?}");
}

#[test]
fn odd_but_valid_values() {
    let tmp = tempfile::tempdir().unwrap();
    let (sys, port) = spoilable_qib0(tmp.path());
    let cases = [
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("56 Gb/sec (4X FDR)", 56.0),
        ("100 Gb/sec (4X EDR)", 100.0),
        ("10 Gb/sec (4X)", 10.0),
        ("400 Gb/sec (4X NDR)", 400.0),
    ];
    for (text, rate) in cases {
        fs::write(port.join("rate"), format!("{text}\n")).unwrap();
        let (hcas, warnings) = read(&sys);
        assert_eq!(hcas[0].ports[0].rate_gbps, Some(rate), "{text}");
        assert!(warnings.is_empty(), "{warnings:?}");
    }
    for bad in ["inf Gb/sec", "NaN Gb/sec (4X)", "40", "40 Mb/sec", "-40 Gb/sec", ""] {
        fs::write(port.join("rate"), bad).unwrap();
        let (hcas, warnings) = read(&sys);
        assert_eq!(hcas[0].ports[0].rate_gbps, None, "{bad:?}");
        assert_eq!(warnings.len(), 1, "{bad:?}: {warnings:?}");
    }
    // An unset GID 0 is no port GUID, and no warning either.
    fs::write(port.join("gids/0"), "fe80:0000:0000:0000:0000:0000:0000:0000\n").unwrap();
    fs::write(port.join("rate"), "40 Gb/sec (4X QDR)\n").unwrap();
    fs::write(port.join("lid"), "0xFFFF\n").unwrap();
    let (hcas, warnings) = read(&sys);
    assert_eq!(hcas[0].ports[0].port_guid, None);
    assert_eq!(hcas[0].ports[0].lid, Some(0xffff));
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn missing_class_infiniband_is_no_devices() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir_all(tmp.path().join("class/net")).unwrap();
    assert_eq!(read(tmp.path()), (vec![], vec![]));
}

#[test]
fn missing_sysfs_root_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("no-such-sys");
    let err = read_infiniband(&root, &mut Vec::new()).unwrap_err();
    assert!(matches!(&err, ProbeError::Read { path, .. } if *path == root), "{err}");
}

/// The qib0 fixture with real links, plus whatever odd entries a test adds.
fn qib0_with_real_links(tmp: &Path) -> std::path::PathBuf {
    let sys = tmp.join("sys");
    copy_tree(&hwloc_sys().join("class"), &sys.join("class"), true);
    copy_tree(
        &hwloc_sys().join("devices/pci0000:40"),
        &sys.join("devices/pci0000:40"),
        true,
    );
    sys
}

#[test]
fn dangling_class_entry_is_a_warning_naming_it_and_the_rest_is_read() {
    // A hot-unplugged HCA: its class entry points at a device directory that is gone.
    let tmp = tempfile::tempdir().unwrap();
    let sys = qib0_with_real_links(tmp.path());
    std::os::unix::fs::symlink(
        "../../devices/pci0000:00/0000:00:01.0/infiniband/mlx5_9",
        sys.join("class/infiniband/mlx5_9"),
    )
    .unwrap();
    let (hcas, warnings) = read(&sys);
    assert_eq!(hcas, vec![expected_qib0(vec![])]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("mlx5_9"), "{warnings:?}");
}

#[test]
fn device_link_to_a_missing_directory_is_a_warning_and_the_rest_is_read() {
    // A coprocessor's SCIF verbs device: `device` points at a directory that is not there.
    let tmp = tempfile::tempdir().unwrap();
    let sys = qib0_with_real_links(tmp.path());
    let scif = sys.join("devices/virtual/infiniband/scif0");
    fs::create_dir_all(scif.join("ports/1")).unwrap();
    fs::write(scif.join("ports/1/state"), "4: ACTIVE\n").unwrap();
    std::os::unix::fs::symlink("../../../mic0/scif", scif.join("device")).unwrap();
    std::os::unix::fs::symlink(
        "../../devices/virtual/infiniband/scif0",
        sys.join("class/infiniband/scif0"),
    )
    .unwrap();
    let (hcas, warnings) = read(&sys);
    let names: Vec<&str> = hcas.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["qib0", "scif0"], "{warnings:?}");
    assert_eq!(hcas[0], expected_qib0(vec![]));
    assert_eq!(hcas[1].ports.len(), 1);
    assert_eq!(hcas[1].pci_bus_id, None);
    let w = warning_for(&warnings, "scif0/device");
    assert!(w.contains("missing"), "{w}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");

    // The same device where `device` is neither a link nor a directory: still a warning.
    fs::remove_file(scif.join("device")).unwrap();
    fs::write(scif.join("device"), "garbage\n").unwrap();
    let (hcas, warnings) = read(&sys);
    assert_eq!(hcas.len(), 2, "{warnings:?}");
    warning_for(&warnings, "scif0/device");
}

/// Builds `class/infiniband/<name>` as a real-sysfs-like tree: the device under its PCI
/// function, one net interface per port.
fn fake_device(sys: &Path, name: &str, pci: &str, ports: &[(u32, &str, &str)]) {
    let pci_dir = sys.join("devices/pci0000:00").join(pci);
    let dev = pci_dir.join("infiniband").join(name);
    fs::create_dir_all(sys.join("class/infiniband")).unwrap();
    fs::create_dir_all(&dev).unwrap();
    std::os::unix::fs::symlink(
        format!("../../devices/pci0000:00/{pci}/infiniband/{name}"),
        sys.join("class/infiniband").join(name),
    )
    .unwrap();
    std::os::unix::fs::symlink(format!("../../../{pci}"), dev.join("device")).unwrap();
    fs::write(pci_dir.join("numa_node"), "1\n").unwrap();
    fs::write(dev.join("node_guid"), "248a:0703:0049:d4f0\n").unwrap();
    for &(n, layer, netdev) in ports {
        let port = dev.join(format!("ports/{n}"));
        fs::create_dir_all(&port).unwrap();
        fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        fs::write(port.join("phys_state"), "5: LinkUp\n").unwrap();
        fs::write(port.join("rate"), "100 Gb/sec (4X EDR)\n").unwrap();
        fs::write(port.join("link_layer"), format!("{layer}\n")).unwrap();
        let net = pci_dir.join("net").join(netdev);
        fs::create_dir_all(&net).unwrap();
        fs::write(net.join("dev_port"), format!("{}\n", n - 1)).unwrap();
        fs::write(net.join("dev_id"), "0x0\n").unwrap();
    }
}

#[test]
fn dual_port_netdevs_by_dev_port_and_roce() {
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path();
    // ConnectX-3 VPI: port 1 InfiniBand (ib0), port 2 Ethernet (enp5s0d1).
    fake_device(
        sys,
        "mlx4_0",
        "0000:05:00.0",
        &[(1, "InfiniBand", "ib0"), (2, "Ethernet", "enp5s0d1")],
    );
    // A RoCE-only ConnectX-5.
    fake_device(sys, "mlx5_0", "0000:3b:00.0", &[(1, "Ethernet", "ens1f0")]);
    fake_device(sys, "usnic_0", "0000:0a:00.0", &[(1, "Ethernet", "enic0")]);
    fake_device(sys, "hfi1_0", "0000:81:00.0", &[(1, "InfiniBand", "ib1")]);
    fake_device(sys, "siw_eth0", "0000:0b:00.0", &[(1, "Ethernet", "eth0")]);
    let (hcas, warnings) = read(sys);
    assert!(warnings.is_empty(), "{warnings:?}");
    let names: Vec<&str> = hcas.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["hfi1_0", "mlx4_0", "mlx5_0", "siw_eth0", "usnic_0"]);
    let mlx4 = &hcas[1];
    assert_eq!(mlx4.pci_bus_id.as_deref(), Some("0000:05:00.0"));
    assert_eq!(mlx4.numa, [1]);
    assert_eq!(mlx4.ports[0].netdev.as_deref(), Some("ib0"));
    assert_eq!(mlx4.ports[1].netdev.as_deref(), Some("enp5s0d1"));
    assert_eq!(hcas[2].ports[0].netdev.as_deref(), Some("ens1f0"));
    let kinds: Vec<RdmaKind> = hcas.iter().map(classify).collect();
    assert_eq!(
        kinds,
        [
            RdmaKind::OmniPath,
            RdmaKind::Infiniband,
            RdmaKind::Roce,
            RdmaKind::Iwarp,
            RdmaKind::Usnic
        ]
    );
}

#[test]
fn roce_netdev_from_gid_attrs() {
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path();
    fake_device(sys, "mlx5_1", "0000:3b:00.1", &[(1, "Ethernet", "ens1f1")]);
    let ndevs = sys.join("devices/pci0000:00/0000:3b:00.1/infiniband/mlx5_1/ports/1/gid_attrs/ndevs");
    fs::create_dir_all(&ndevs).unwrap();
    fs::write(ndevs.join("0"), "bond0\n").unwrap();
    let (hcas, _) = read(sys);
    assert_eq!(hcas[0].ports[0].netdev.as_deref(), Some("bond0"));
}

#[test]
fn name_prefix_decides_without_link_layer() {
    let hca = |name: &str| InfinibandHca {
        name: name.into(),
        ports: vec![IbPort::default()],
        ..Default::default()
    };
    assert!(is_infiniband(&hca("mlx5_0")));
    assert!(is_infiniband(&hca("qib0")));
    assert!(is_infiniband(&hca("mthca0")));
    assert_eq!(classify(&hca("efa_0")), RdmaKind::Other);
    assert_eq!(classify(&hca("hfi1_0")), RdmaKind::OmniPath);
    assert_eq!(classify(&hca("usnic_1")), RdmaKind::Usnic);
    assert_eq!(classify(&hca("i40iw1")), RdmaKind::Iwarp);
    assert_eq!(classify(&hca("iwp1s0")), RdmaKind::Iwarp);
}
