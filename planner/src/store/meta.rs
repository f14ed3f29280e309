//! The store's meta values with their checksums (store format 3), and the cluster a
//! store belongs to.
//!
//! **Checksums.** One flipped bit once took `nextJobId` from 41 to 9, and new jobs took
//! old jobs' ids. Every meta value now carries the CRC-32C the core puts on job records
//! (`hyperplan_core::checksum`), over `KEY=VALUE` (the key too: a value under the wrong
//! key is damage as well):
//!
//! - the embedded store keeps it beside the value, under `KEY.crc32c` in the same `meta`
//!   table (a table of numbers: a build before format 3 reads its keys as ever, and
//!   refuses the store by its format);
//! - etcd keeps it in the value, `41 crc32c:1a2b3c4d` (`meta/format` stays a bare number,
//!   for every build to read).
//!
//! A store written before format 3 has none: it is read as it is, and its values are
//! written again with their checksums when a planner opens it for writing (embedded) or
//! takes the lead (etcd). From format 3 on, a value without its checksum is damage.
//!
//! **The cluster.** A store belongs to one cluster: the first planner that writes it
//! records the SHA-256 fingerprint of its cluster CA's certificate (DER, as `openssl x509
//! -noout -fingerprint -sha256` prints it) under `caSha256`, with its checksum; a planner
//! of another CA refuses the store before it changes anything there (two clusters on one
//! etcd prefix took each other's jobs). A store without the record gets it at the next
//! start.

use std::path::{Path, PathBuf};

use hyperplan_core::checksum::crc32c;

use super::StoreError;

/// What follows a value's key in the embedded store's `meta` table: its checksum.
pub(super) const CRC_SUFFIX: &str = ".crc32c";

/// Where a checksum starts in a value as text (etcd, the cluster record).
const TEXT_MARK: &str = " crc32c:";

/// The key of the cluster record.
pub(super) const CLUSTER_KEY: &str = "caSha256";

/// The CRC-32C of `KEY=VALUE`.
pub(super) fn crc(key: &str, value: &str) -> u32 {
    crc32c(format!("{key}={value}").as_bytes())
}

/// A number's checksum as the embedded store keeps it (under `KEY.crc32c`).
pub(super) fn number_crc(key: &str, value: u64) -> u64 {
    u64::from(crc(key, &value.to_string()))
}

/// `VALUE crc32c:XXXXXXXX`: a value as text with its checksum.
pub(super) fn seal(key: &str, value: &str) -> String {
    format!("{value}{TEXT_MARK}{:08x}", crc(key, value))
}

/// A meta value as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum MetaValue<T> {
    /// Not there (a new store).
    #[default]
    Absent,
    Good(T),
    /// Its checksum does not match, or it has none where the format requires one: why,
    /// and what it says all the same (for `--check` and an export, never for a start).
    Damaged {
        why: String,
        raw: Option<T>,
    },
}

impl<T: Clone> MetaValue<T> {
    /// The value a start may use, or an error naming `key` (see [`damaged`]).
    pub(super) fn strict(self, key: &str, at: &Path, recover: &str) -> Result<Option<T>, StoreError> {
        match self {
            Self::Absent => Ok(None),
            Self::Good(v) => Ok(Some(v)),
            Self::Damaged { why, .. } => Err(damaged(at, key, &why, recover)),
        }
    }
}

/// The error a start stops with on a damaged meta value.
pub(super) fn damaged(at: &Path, key: &str, why: &str, recover: &str) -> StoreError {
    StoreError::MetaDamaged {
        path: at.to_path_buf(),
        key: key.to_string(),
        why: why.to_string(),
        recover: recover.to_string(),
    }
}

/// A number of the embedded store: `value` and the checksum under `KEY.crc32c`.
/// `required`: a value without its checksum is damage (format 3 and later).
pub(super) fn check_number(key: &str, value: Option<u64>, stored: Option<u64>, required: bool) -> MetaValue<u64> {
    match (value, stored) {
        (None, None) => MetaValue::Absent,
        (None, Some(_)) => MetaValue::Damaged {
            why: format!("the value is missing, its checksum ({key}{CRC_SUFFIX}) is there"),
            raw: None,
        },
        (Some(v), None) if required => MetaValue::Damaged {
            why: format!("it has no checksum ({key}{CRC_SUFFIX} is missing)"),
            raw: Some(v),
        },
        (Some(v), None) => MetaValue::Good(v),
        (Some(v), Some(c)) if c == number_crc(key, v) => MetaValue::Good(v),
        (Some(v), Some(c)) => MetaValue::Damaged {
            why: format!(
                "checksum mismatch (stored {c:08x}, computed {:08x} for {v}): its bytes changed on disk",
                number_crc(key, v)
            ),
            raw: Some(v),
        },
    }
}

/// A value as text, `VALUE crc32c:XXXXXXXX` (or bare `VALUE` where `required` is false).
pub(super) fn check_text(key: &str, bytes: &[u8], required: bool) -> MetaValue<String> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return MetaValue::Damaged {
            why: "it is not UTF-8 text".into(),
            raw: None,
        };
    };
    match text.rsplit_once(TEXT_MARK) {
        Some((value, sum)) => {
            let computed = crc(key, value);
            match u32::from_str_radix(sum, 16) {
                Ok(stored) if stored == computed => MetaValue::Good(value.to_string()),
                Ok(stored) => MetaValue::Damaged {
                    why: format!(
                        "checksum mismatch (stored {stored:08x}, computed {computed:08x} for {value:?}): its bytes changed"
                    ),
                    raw: Some(value.to_string()),
                },
                Err(_) => MetaValue::Damaged {
                    why: format!("its checksum {sum:?} is not 8 hexadecimal digits"),
                    raw: Some(value.to_string()),
                },
            }
        }
        None if required => MetaValue::Damaged {
            why: "it has no checksum (expected `VALUE crc32c:XXXXXXXX`)".into(),
            raw: Some(text.to_string()),
        },
        None => MetaValue::Good(text.to_string()),
    }
}

/// A number as text (etcd's `meta/epoch`, `meta/nextJobId`), see [`check_text`].
pub(super) fn check_number_text(key: &str, bytes: &[u8], required: bool) -> MetaValue<u64> {
    let digits = |s: &str| s.trim().parse::<u64>().ok();
    match check_text(key, bytes, required) {
        MetaValue::Absent => MetaValue::Absent,
        MetaValue::Good(s) => match digits(&s) {
            Some(n) => MetaValue::Good(n),
            None => MetaValue::Damaged {
                why: format!("expected a decimal number, found {s:?}"),
                raw: None,
            },
        },
        MetaValue::Damaged { why, raw } => MetaValue::Damaged {
            why,
            raw: raw.as_deref().and_then(digits),
        },
    }
}

/// The number in a value as text, its checksum not checked: what a standby shows as
/// the epoch before it leads (the checks are the take-over's).
pub(super) fn number_part(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let value = text.rsplit_once(TEXT_MARK).map_or(text, |(v, _)| v);
    value.trim().parse().ok()
}

/// The cluster a planner belongs to: the fingerprint of its cluster CA's certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// SHA-256 of the CA certificate's DER, `AB:CD:…` (as openssl prints it).
    pub fingerprint: String,
    /// The file it was read from, for messages.
    pub ca_file: PathBuf,
}

impl Cluster {
    /// The cluster of the CA certificate `der`, read from `ca_file`.
    pub fn of_ca(der: &[u8], ca_file: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            fingerprint: fingerprint(der).ok_or_else(|| StoreError::Io {
                path: ca_file.to_path_buf(),
                doing: "taking its SHA-256 fingerprint".into(),
                why: "no SHA-256 in this build's TLS library".into(),
            })?,
            ca_file: ca_file.to_path_buf(),
        })
    }

    /// The cluster of the CA in `ca_file` (PEM, `ca.pem`; its first certificate).
    pub fn from_ca_file(ca_file: &Path) -> Result<Self, StoreError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let err = |why: String| StoreError::Io {
            path: ca_file.to_path_buf(),
            doing: "reading the cluster CA certificate (ca.pem, from `hyperplan certs init`)".into(),
            why,
        };
        let first = CertificateDer::pem_file_iter(ca_file)
            .map_err(|e| err(e.to_string()))?
            .next()
            .ok_or_else(|| err("no certificate in it (expected PEM, \"-----BEGIN CERTIFICATE-----\")".into()))?
            .map_err(|e| err(e.to_string()))?;
        Self::of_ca(first.as_ref(), ca_file)
    }
}

/// SHA-256 of `der` as `AB:CD:…`; SHA-256 from rustls's provider (ring), the one the
/// planner's TLS uses (`None` only were that provider to lack it).
pub fn fingerprint(der: &[u8]) -> Option<String> {
    use rustls::crypto::hash::HashAlgorithm;
    let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256.tls13()?;
    let hash = suite.common.hash_provider;
    if hash.algorithm() != HashAlgorithm::SHA256 {
        return None;
    }
    let digest = hash.hash(der);
    let hex: Vec<String> = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
    Some(hex.join(":"))
}

/// What a store's recorded cluster says about `ours`: the start goes on, or stops with
/// the error naming both fingerprints.
pub(super) fn check_cluster(
    at: &Path,
    stored: MetaValue<String>,
    ours: &Cluster,
    own: &'static str,
    recover: &str,
) -> Result<Option<String>, StoreError> {
    match stored.strict(CLUSTER_KEY, at, recover)? {
        Some(theirs) if theirs != ours.fingerprint => Err(StoreError::OtherCluster {
            path: at.to_path_buf(),
            stored: theirs,
            ours: ours.fingerprint.clone(),
            ca_file: ours.ca_file.clone(),
            own,
        }),
        found => Ok(found),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_number_with_its_checksum_reads_back_and_a_flipped_bit_does_not() {
        let c = number_crc("nextJobId", 41);
        assert_eq!(check_number("nextJobId", Some(41), Some(c), true), MetaValue::Good(41));
        // 41 → 9 is bit 5 flipped: the case.
        assert!(matches!(
            check_number("nextJobId", Some(41 ^ 32), Some(c), true),
            MetaValue::Damaged { raw: Some(9), .. }
        ));
        // The same value under another key is damage too.
        assert!(matches!(
            check_number("epoch", Some(41), Some(c), true),
            MetaValue::Damaged { .. }
        ));
        // Before format 3: no checksum, read as it is; from format 3 on: damage.
        assert_eq!(check_number("epoch", Some(7), None, false), MetaValue::Good(7));
        assert!(matches!(
            check_number("epoch", Some(7), None, true),
            MetaValue::Damaged { .. }
        ));
        assert_eq!(check_number("epoch", None, None, true), MetaValue::Absent);
    }

    #[test]
    fn text_values_carry_their_checksum_inline() {
        let sealed = seal("epoch", "41");
        assert!(sealed.starts_with("41 crc32c:"), "{sealed}");
        assert_eq!(check_number_text("epoch", sealed.as_bytes(), true), MetaValue::Good(41));
        assert_eq!(number_part(sealed.as_bytes()), Some(41));
        let flipped = sealed.replacen("41", "49", 1);
        assert!(matches!(
            check_number_text("epoch", flipped.as_bytes(), true),
            MetaValue::Damaged { raw: Some(49), .. }
        ));
        assert_eq!(check_number_text("epoch", b"41", false), MetaValue::Good(41));
        assert!(matches!(
            check_number_text("epoch", b"41", true),
            MetaValue::Damaged { .. }
        ));
    }

    #[test]
    fn the_fingerprint_is_sha_256_as_openssl_prints_it() {
        // SHA-256 of "abc" (FIPS 180-2, appendix B.1).
        assert_eq!(
            fingerprint(b"abc").unwrap(),
            "BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:7A:9C:B4:10:FF:61:F2:00:15:AD"
        );
    }
}
