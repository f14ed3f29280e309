//! The revocation list: `revoked.txt` beside `ca.pem`, the certificates the planner
//! refuses although they chain to the cluster CA (a lost laptop's, a retired node's).
//! `hyperplan certs revoke` and `unrevoke` write it; the planner reads it at start and on
//! SIGHUP and checks it at every handshake and against every open connection.
//!
//! ```text
//! # comments and blank lines are ignored
//! user alice 2025-06-01T12:00:00Z    alice's certificates issued up to then (UTC)
//! node n017                          every certificate node n017 ever had
//! ```
//!
//! An entry names a holder the way the planner identifies peers: `user NAME` for a
//! person's certificate (role admin or user), `node NAME` for an agent's. The planner's
//! certificate is not revocable here (make a new CA for that).
//!
//! Why a time and not a serial or fingerprint: issuing again for a name replaces the
//! files, so only the newest certificate of a name is ever at hand, while every older
//! one is still valid. A fingerprint would revoke the one on disk and miss the copies
//! that matter (the laptop that was lost may hold an older one). A name alone revokes
//! them all but also the new certificate the person gets next. A name with a time
//! revokes every certificate of that name issued up to the revocation, and a certificate
//! issued afterwards works without touching the list. The issue time is the
//! certificate's notBefore plus the hour `certs` dates it back ([`ISSUE_BACKDATE_SECS`]);
//! both times come from the machine that keeps the CA, so the planner's clock does not
//! matter. A certificate issued in the very second of its revocation counts as revoked
//! (`certs issue` waits for the next second). Without a time, an entry revokes every
//! certificate of that name, past and future.
//!
//! The file is written to a temporary name and renamed (mode 0644: it holds no secret),
//! so the planner never reads half of it. Rewriting it keeps the entries, not comments
//! added by hand. A malformed file is an error naming the file, the line and what was
//! expected: the planner does not start on it, and on SIGHUP keeps the list it had.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use rustls_pki_types::CertificateDer;
use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

use crate::certs::validate_name;
use crate::identity::{CertRole, Identity};

/// The list's file name in the certificate directory.
pub const FILE_NAME: &str = "revoked.txt";

/// How far before its issue `certs` dates a certificate's notBefore (an hour, for clocks
/// a little behind the CA's machine).
pub const ISSUE_BACKDATE_SECS: i64 = 3600;

/// The largest revocation list read (a million entries fit).
pub const MAX_BYTES: u64 = 64 << 20;

const HEADER: &str = "\
# Revoked hyperplan certificates. `hyperplan certs revoke` and `unrevoke` write this file;
# the planner reads it at start and on SIGHUP (systemctl reload hyperplan-planner).
#   user NAME [TIME]   a person's certificates (role admin or user)
#   node NAME [TIME]   a node's agent certificates
# With TIME (UTC, 2025-06-01T12:00:00Z) the certificates issued up to then are refused and
# newer ones work; without it every certificate of that name is.
";

/// Whose certificates an entry revokes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HolderKind {
    /// A person (a certificate of role admin or user).
    User,
    /// A node's agent.
    Node,
}

impl HolderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Node => "node",
        }
    }

    /// The kind of holder a certificate role belongs to (none for the planner).
    pub fn of(role: CertRole) -> Option<Self> {
        match role {
            CertRole::Admin | CertRole::User => Some(Self::User),
            CertRole::Agent => Some(Self::Node),
            CertRole::Planner => None,
        }
    }
}

/// A person or node whose certificates may be revoked.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Holder {
    pub kind: HolderKind,
    pub name: String,
}

impl Holder {
    pub fn user(name: &str) -> Self {
        Self {
            kind: HolderKind::User,
            name: name.to_owned(),
        }
    }

    pub fn node(name: &str) -> Self {
        Self {
            kind: HolderKind::Node,
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.as_str(), self.name)
    }
}

/// Which of a holder's certificates are revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every one, whenever issued.
    All,
    /// Those issued at or before this time (Unix seconds).
    IssuedUpTo(i64),
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("every certificate of that name"),
            Self::IssuedUpTo(t) => write!(f, "certificates issued up to {}", format_time(*t)),
        }
    }
}

/// Why a certificate is refused: its holder's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revoked {
    pub holder: Holder,
    pub scope: Scope,
}

impl fmt::Display for Revoked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the certificate of {} is revoked ({FILE_NAME}: {})",
            self.holder, self.scope
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RevocationError {
    #[error("{}:{line}: {reason}", .path.display())]
    Parse { path: PathBuf, line: usize, reason: String },
    #[error("cannot read the revocation list {}: {source}", .path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the revocation list {} is not a regular file", .path.display())]
    NotRegular { path: PathBuf },
    #[error("the revocation list {} is larger than {MAX_BYTES} bytes", .path.display())]
    TooLarge { path: PathBuf },
    #[error("cannot write the revocation list {}: {source}", .path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

/// The revoked holders, one entry each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevocationList {
    entries: BTreeMap<Holder, Scope>,
}

impl RevocationList {
    /// Where the list of the certificate directory `dir` is.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE_NAME)
    }

    /// Reads the list at `path`; a missing file is an empty list.
    pub fn load(path: &Path) -> Result<Self, RevocationError> {
        let read_err = |source| RevocationError::Read {
            path: path.to_owned(),
            source,
        };
        let meta = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(read_err(e)),
        };
        if !meta.is_file() {
            return Err(RevocationError::NotRegular { path: path.to_owned() });
        }
        let mut bytes = Vec::new();
        fs::File::open(path)
            .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes))
            .map_err(read_err)?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(RevocationError::TooLarge { path: path.to_owned() });
        }
        Self::parse(path, &bytes)
    }

    /// Parses the list's text; `path` is for the errors.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, RevocationError> {
        let mut entries = BTreeMap::new();
        let mut seen: BTreeMap<Holder, usize> = BTreeMap::new();
        for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
            let line = i + 1;
            let err = |reason: String| RevocationError::Parse {
                path: path.to_owned(),
                line,
                reason,
            };
            let text = std::str::from_utf8(raw).map_err(|_| err("not UTF-8 text".into()))?;
            let text = text.split('#').next().unwrap_or_default();
            let mut words = text.split_whitespace();
            let Some(kind) = words.next() else { continue };
            let kind = match kind {
                "user" => HolderKind::User,
                "node" => HolderKind::Node,
                other => {
                    return Err(err(format!(
                        "expected `user NAME [TIME]` or `node NAME [TIME]`, got {}",
                        shown(other)
                    )));
                }
            };
            let name = words
                .next()
                .ok_or_else(|| err(format!("expected a {} name after `{}`", kind.as_str(), kind.as_str())))?;
            validate_name(kind.as_str(), name).map_err(|e| err(e.to_string()))?;
            let scope = match words.next() {
                None => Scope::All,
                Some(t) => Scope::IssuedUpTo(parse_time(t).ok_or_else(|| {
                    err(format!(
                        "expected a time in UTC like 2025-06-01T12:00:00Z after the name, got {}",
                        shown(t)
                    ))
                })?),
            };
            if let Some(extra) = words.next() {
                return Err(err(format!(
                    "unexpected {} after the time (one entry per line)",
                    shown(extra)
                )));
            }
            let holder = Holder {
                kind,
                name: name.to_owned(),
            };
            if let Some(first) = seen.insert(holder.clone(), line) {
                return Err(err(format!("{holder} is listed twice (first on line {first})")));
            }
            entries.insert(holder, scope);
        }
        Ok(Self { entries })
    }

    /// The file's text: a header and one sorted line per entry.
    pub fn render(&self) -> String {
        let mut out = String::from(HEADER);
        for (holder, scope) in &self.entries {
            match scope {
                Scope::All => out.push_str(&format!("{holder}\n")),
                Scope::IssuedUpTo(t) => out.push_str(&format!("{holder} {}\n", format_time(*t))),
            }
        }
        out
    }

    /// Writes the list to `path`: a temporary file (0644) renamed over it.
    pub fn save(&self, path: &Path) -> Result<(), RevocationError> {
        crate::atomic::write_atomic(path, self.render().as_bytes(), 0o644).map_err(|source| RevocationError::Write {
            path: path.to_owned(),
            source,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The holder's entry, if any.
    pub fn get(&self, holder: &Holder) -> Option<Scope> {
        self.entries.get(holder).copied()
    }

    /// Revokes the holder's certificates issued up to `now` (Unix seconds); an entry that
    /// already revokes every one stays so.
    pub fn revoke(&mut self, holder: Holder, now: i64) {
        let scope = self.entries.entry(holder).or_insert(Scope::IssuedUpTo(now));
        if let Scope::IssuedUpTo(t) = scope {
            *t = (*t).max(now);
        }
    }

    /// Removes the holder's entry; false when there was none.
    pub fn unrevoke(&mut self, holder: &Holder) -> bool {
        self.entries.remove(holder).is_some()
    }

    /// Whether the certificate of `identity`, issued at `issued` (Unix seconds, see
    /// [`issued_at`]; `None` when unknown), is revoked, and by which entry. An unknown
    /// issue time counts as revoked where the holder has an entry.
    pub fn check(&self, identity: &Identity, issued: Option<i64>) -> Option<Revoked> {
        let kind = HolderKind::of(identity.role)?;
        let holder = Holder {
            kind,
            name: identity.name.clone(),
        };
        let scope = *self.entries.get(&holder)?;
        let revoked = match (scope, issued) {
            (Scope::All, _) | (Scope::IssuedUpTo(_), None) => true,
            (Scope::IssuedUpTo(upto), Some(at)) => at <= upto,
        };
        revoked.then_some(Revoked { holder, scope })
    }
}

/// When a certificate `certs` made was issued (Unix seconds): its notBefore plus
/// [`ISSUE_BACKDATE_SECS`]. `None` when it cannot be parsed.
pub fn issued_at(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    parsed
        .validity()
        .not_before
        .timestamp()
        .checked_add(ISSUE_BACKDATE_SECS)
}

/// [`issued_at`] of the certificate the other end of a QUIC connection presented.
pub fn peer_issued_at(connection: &quinn::Connection) -> Option<i64> {
    let chain = connection
        .peer_identity()?
        .downcast::<Vec<CertificateDer<'static>>>()
        .ok()?;
    issued_at(chain.first()?)
}

/// The current time in Unix seconds.
pub fn now() -> i64 {
    OffsetDateTime::now_utc().unix_timestamp()
}

/// `2025-06-01T12:00:00Z`.
pub fn format_time(unix: i64) -> String {
    match OffsetDateTime::from_unix_timestamp(unix) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => unix.to_string(),
    }
}

/// Reads exactly `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub fn parse_time(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let shape_ok = b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        });
    if !shape_ok {
        return None;
    }
    let num = |from: usize, to: usize| text.get(from..to)?.parse::<u16>().ok();
    let month = Month::try_from(u8::try_from(num(5, 7)?).ok()?).ok()?;
    let date = Date::from_calendar_date(i32::from(num(0, 4)?), month, u8::try_from(num(8, 10)?).ok()?).ok()?;
    let time = Time::from_hms(
        u8::try_from(num(11, 13)?).ok()?,
        u8::try_from(num(14, 16)?).ok()?,
        u8::try_from(num(17, 19)?).ok()?,
    )
    .ok()?;
    Some(PrimitiveDateTime::new(date, time).assume_utc().unix_timestamp())
}

/// A word from the file for an error: escaped, at most 64 characters.
fn shown(word: &str) -> String {
    let cut: String = word.chars().take(64).collect();
    if cut.len() < word.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn parse(text: &str) -> Result<RevocationList, RevocationError> {
        RevocationList::parse(Path::new("/c/revoked.txt"), text.as_bytes())
    }

    fn id(name: &str, role: CertRole) -> Identity {
        Identity {
            name: name.into(),
            role,
        }
    }

    #[test]
    fn entries_comments_and_blank_lines() {
        let list = parse(
            "# header\n\nuser alice 2025-06-01T12:00:00Z   # lost laptop\n  node n017\nuser root\t2024-01-01T00:00:00Z\n",
        )
        .unwrap();
        assert_eq!(list.len(), 3);
        let t = parse_time("2025-06-01T12:00:00Z").unwrap();
        assert_eq!(t, 1_748_779_200);
        assert_eq!(list.get(&Holder::user("alice")), Some(Scope::IssuedUpTo(t)));
        assert_eq!(list.get(&Holder::node("n017")), Some(Scope::All));
        assert_eq!(list.get(&Holder::node("alice")), None);
    }

    #[test]
    fn a_bad_line_is_an_error_naming_file_line_and_what_was_expected() {
        for (text, line, expected) in [
            (
                "user alice\nfrobnicate x\n",
                2,
                "expected `user NAME [TIME]` or `node NAME [TIME]`",
            ),
            ("\n\nuser\n", 3, "expected a user name"),
            ("node ../etc\n", 1, "invalid node name"),
            ("user a 2025-13-01T00:00:00Z\n", 1, "expected a time in UTC"),
            ("user a yesterday\n", 1, "\"yesterday\""),
            ("user a 2025-01-01T00:00:00Z extra\n", 1, "unexpected \"extra\""),
            (
                "node a\n# x\nnode a 2025-01-01T00:00:00Z\n",
                3,
                "node a is listed twice (first on line 1)",
            ),
            ("user \u{1b}[31m\n", 1, "invalid user name"),
        ] {
            let err = parse(text).unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with(&format!("/c/revoked.txt:{line}: ")), "{text:?}: {msg}");
            assert!(msg.contains(expected), "{text:?}: {msg}");
            assert!(!msg.contains('\u{1b}'), "escaped: {msg:?}");
        }
        let err = RevocationList::parse(Path::new("/c/revoked.txt"), b"user a\nuser \xff\n").unwrap_err();
        assert_eq!(err.to_string(), "/c/revoked.txt:2: not UTF-8 text");
    }

    #[test]
    fn render_round_trips() {
        let mut list = RevocationList::default();
        list.revoke(Holder::user("alice"), 1_748_779_200);
        list.revoke(Holder::node("n1"), 1_700_000_000);
        let text = list.render();
        assert!(text.contains("user alice 2025-06-01T12:00:00Z\n"), "{text}");
        assert_eq!(parse(&text).unwrap(), list);
        assert!(list.unrevoke(&Holder::node("n1")));
        assert!(!list.unrevoke(&Holder::node("n1")));
    }

    #[test]
    fn check_matches_name_role_and_issue_time() {
        let list = parse("user alice 2025-06-01T12:00:00Z\nnode n1\n").unwrap();
        let t = parse_time("2025-06-01T12:00:00Z").unwrap();
        let alice = id("alice", CertRole::User);
        assert!(list.check(&alice, Some(t - 100)).is_some());
        assert!(
            list.check(&alice, Some(t)).is_some(),
            "the same second counts as revoked"
        );
        assert!(list.check(&alice, Some(t + 1)).is_none(), "issued after the revocation");
        assert!(list.check(&alice, None).is_some(), "unknown issue time: refused");
        assert!(list.check(&id("alice", CertRole::Admin), Some(t)).is_some());
        assert!(list.check(&id("alice", CertRole::Agent), Some(t)).is_none());
        assert!(list.check(&id("bob", CertRole::User), Some(t)).is_none());
        let n1 = list.check(&id("n1", CertRole::Agent), Some(i64::MAX)).unwrap();
        assert_eq!(
            n1.to_string(),
            "the certificate of node n1 is revoked (revoked.txt: every certificate of that name)"
        );
    }

    #[test]
    fn revoking_again_moves_the_time_forward_and_keeps_all() {
        let mut list = parse("node n1\nuser a 2025-06-01T12:00:00Z\n").unwrap();
        list.revoke(Holder::node("n1"), 5);
        list.revoke(Holder::user("a"), 1);
        list.revoke(Holder::user("b"), 7);
        assert_eq!(list.get(&Holder::node("n1")), Some(Scope::All));
        assert_eq!(
            list.get(&Holder::user("a")),
            parse_time("2025-06-01T12:00:00Z").map(Scope::IssuedUpTo)
        );
        assert_eq!(list.get(&Holder::user("b")), Some(Scope::IssuedUpTo(7)));
    }

    #[test]
    fn times() {
        for bad in [
            "",
            "2025-06-01",
            "2025-06-01T12:00:00",
            "2025-02-30T00:00:00Z",
            "2025-06-01T24:00:00Z",
            "２025-06-01T12:00:00Z",
        ] {
            assert_eq!(parse_time(bad), None, "{bad:?}");
        }
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(parse_time(&format_time(1_748_779_200)), Some(1_748_779_200));
    }

    #[test]
    fn issue_time_is_the_backdated_not_before_plus_the_backdate() {
        let dir = tempfile::tempdir().unwrap();
        crate::certs::init_ca(dir.path(), false).unwrap();
        let before = now();
        let paths = crate::certs::issue_user(dir.path(), "alice", crate::certs::UserRole::User).unwrap();
        let after = now();
        let pem = fs::read(&paths.cert).unwrap();
        let der = rustls_pki_types::pem::PemObject::from_pem_slice(&pem).unwrap();
        let at = issued_at(&der).unwrap();
        assert!((before..=after).contains(&at), "{before} <= {at} <= {after}");
    }

    #[test]
    fn load_and_save() {
        let dir = tempfile::tempdir().unwrap();
        let path = RevocationList::path(dir.path());
        assert!(RevocationList::load(&path).unwrap().is_empty(), "missing: empty");
        let mut list = RevocationList::default();
        list.revoke(Holder::user("alice"), 1_748_779_200);
        list.save(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        assert_eq!(RevocationList::load(&path).unwrap(), list);
        let err = RevocationList::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
