//! The synthetic fat-tree dump the benchmark uses reads back as the tree it describes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use hyperplan_fabric::synthetic::FatTreeDump;
use hyperplan_fabric::{HostNames, discover, parse_ibnetdiscover};

#[test]
fn issue_6_size_fabric_gives_pods_then_one_core() {
    for sharp in [false, true] {
        let spec = FatTreeDump {
            sharp,
            ..FatTreeDump::ISSUE_6
        };
        let text = spec.generate();
        // How long it takes: `cargo bench -p hyperplan-fabric --bench discover`.
        let f = parse_ibnetdiscover(&text, Path::new("synthetic.out")).unwrap();
        let d = discover(&f, &HostNames::default()).unwrap();
        assert_eq!(f.switch_count(), 700);
        assert_eq!(spec.switch_count(), 700);
        assert_eq!(d.hosts.len(), 4000);
        assert_eq!(d.excluded.len(), if sharp { 700 } else { 0 });
        assert!(d.unmapped.is_empty());
        let per_tier = |t| d.hypernodes.iter().filter(|h| h.tier == t).count();
        assert_eq!(
            (per_tier(1), per_tier(2), per_tier(3), d.hypernodes.len()),
            (25, 25, 1, 51)
        );
        assert!(
            d.hypernodes
                .iter()
                .filter(|h| h.tier == 1)
                .all(|h| h.members.len() == 40)
        );
        assert_eq!(d.hypernodes[0].name, "leaf-pod00-leaf00");
        assert_eq!(d.hypernodes[25].name, "spine-pod00-spine00");
        assert_eq!(d.hypernodes[50].name, "core-core00-00");
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    }
}
