//! GUID → host name maps: the ones agents report and the ones people keep in a file.
//!
//! The file format is one `GUID NAME` pair per line, `#` comments and blank lines allowed.
//! The GUID may be written `H-003048c74e4a0000` (ibnetdiscover's node name, as in X5.map),
//! `0x3048c74e4a0000` or bare hex; that is also ibnetdiscover's own `--node-name-map` format
//! (`0x0002c90300080e84 "r510gluster1 HCA-1"`). The name may be quoted; only its first word
//! is kept, so node descriptions (`"gpu017 mlx5_0"`) map to the host.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::FabricError;
use crate::ibnetdiscover::parse_guid;

/// GUID (node or port) → host name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuidMap {
    names: BTreeMap<u64, String>,
}

impl GuidMap {
    pub fn new() -> Self {
        GuidMap::default()
    }

    /// Maps a node or port GUID to a host (agents report both for each HCA).
    pub fn insert(&mut self, guid: u64, host: impl Into<String>) {
        self.names.insert(guid, host.into());
    }

    pub fn get(&self, guid: u64) -> Option<&str> {
        self.names.get(&guid).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Reads a map file (see the module docs). A GUID given twice with different names is
    /// an error naming both lines.
    pub fn parse(text: &str, path: &Path) -> Result<GuidMap, FabricError> {
        let mut map = GuidMap::new();
        let mut lines: BTreeMap<u64, u64> = BTreeMap::new();
        for (n, raw) in text.lines().enumerate() {
            let line_no = n as u64 + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, name) = match line.split_once(char::is_whitespace) {
                Some((k, rest)) => (k, rest.trim()),
                None => (line, ""),
            };
            let hex = key
                .strip_prefix("H-")
                .or_else(|| key.strip_prefix("S-"))
                .or_else(|| key.strip_prefix("R-"))
                .unwrap_or(key);
            let guid = parse_guid(hex).ok_or_else(|| {
                FabricError::parse(
                    path,
                    line_no,
                    format!("expected a GUID (`H-<16 hex digits>`, `0x<hex>` or hex) first, got {key:?}"),
                )
            })?;
            let host = name.trim_matches('"').split_whitespace().next().unwrap_or("");
            if host.is_empty() {
                return Err(FabricError::parse(
                    path,
                    line_no,
                    format!("expected a host name after the GUID {key}"),
                ));
            }
            if let Some(old) = map.get(guid)
                && old != host
            {
                let first = lines.get(&guid).copied().unwrap_or(0);
                return Err(FabricError::parse(
                    path,
                    line_no,
                    format!("GUID {key} maps to {host:?} here but to {old:?} at line {first}"),
                ));
            }
            lines.entry(guid).or_insert(line_no);
            map.insert(guid, host);
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn all_three_guid_spellings_and_quoted_names() {
        let text = "# cluster\nH-003048c74e4a0000 x5570comp1\n0x2c90300080e84 \"r510gluster1 HCA-1\"\nabc gpu1\n";
        let m = GuidMap::parse(text, Path::new("m")).unwrap();
        assert_eq!(m.get(0x3048c74e4a0000), Some("x5570comp1"));
        assert_eq!(m.get(0x2c90300080e84), Some("r510gluster1"));
        assert_eq!(m.get(0xabc), Some("gpu1"));
    }

    #[test]
    fn conflicting_names_name_both_lines() {
        let e = GuidMap::parse("0x1 a\n0x1 b\n", Path::new("m")).unwrap_err();
        assert_eq!(e.to_string(), "m:2: GUID 0x1 maps to \"b\" here but to \"a\" at line 1");
    }

    #[test]
    fn bad_guid_and_missing_name() {
        let e = GuidMap::parse("zz a\n", Path::new("m")).unwrap_err().to_string();
        assert!(e.starts_with("m:1: expected a GUID"), "{e}");
        let e = GuidMap::parse("0x12\n", Path::new("m")).unwrap_err().to_string();
        assert!(e.starts_with("m:1: expected a host name"), "{e}");
    }
}
