//! The resource limits (`setrlimit`) a task gets: the user's, as a login through
//! `pam_limits` would set them from `/etc/security/limits.conf` and
//! `/etc/security/limits.d/*.conf`, with an admin's `[exec] rlimits` table from
//! `agent.toml` on top. Without this a task's `ulimit -a` shows the agent's limits, not the
//! user's. Everything here is pure (it reads files, sets nothing); applying the result with
//! `setrlimit` is the caller's, between fork and exec.
//!
//! The pam_limits rules followed (Linux-PAM 1.6, plus Debian's root rule):
//!
//! - a line is `<domain> <type> <item> <value>`; `#` starts a comment anywhere; blank lines
//!   are skipped; `<type>`, `<item>` and `<value>` are case-insensitive, `<domain>` is not;
//! - `<domain>` is a user name, `@group` (the user's primary or a supplementary group),
//!   `*`, a uid range `min:max`, `min:` or `:uid` (exactly `uid`), or a gid range
//!   `@min:max`, `@min:` (the primary gid only) or `@:gid` (any of the user's groups);
//!   `%` and `%group` only count for `maxlogins`, so they are ignored here;
//! - `<type>` is `soft`, `hard` or `-` (both);
//! - each line has a priority: a user name or uid range, then `@group` or gid range, then
//!   `*`. A line sets a value only when its priority is at least that of the line that set
//!   the value before, so among equals the later line wins. Like pam_limits, a `-` line
//!   whose soft half loses does not set its hard half either;
//! - files are read as if concatenated: `limits.conf`, then `limits.d/*.conf` sorted by
//!   byte order of their names (hidden files excluded, as `glob` does);
//! - a two-field `<domain> -` line matching the user means "no limits": pam_limits then
//!   stops reading and sets nothing at all, so [`for_user`] returns no limits;
//! - uid 0 (root) is matched only by its literal user name: group, wildcard and range lines
//!   do not apply to it. This is Debian's and Ubuntu's pam_limits (and their
//!   `limits.conf` says so); upstream Linux-PAM applies them to root too;
//! - units: `core`, `data`, `fsize`, `memlock`, `rss`, `stack` and `as` are KiB, `cpu` is
//!   minutes, `nice` is a nice value clamped to -20..19 (the rlimit is `20 - nice`);
//!   `unlimited`, `infinity`, `-1` and `-` mean no limit (not for `nice`); a value too big
//!   for the kernel's unit becomes unlimited. [`Limit`] holds the kernel's units;
//! - `nofile` unlimited becomes `fs.nr_open` ([`finalize`]), since the kernel refuses more;
//! - `maxlogins`, `maxsyslogins`, `priority`, `nonewprivs` and `chroot` are not rlimits and
//!   are ignored.
//!
//! Where this differs from pam_limits, it is to warn rather than act silently: a malformed
//! or unknown line (pam_limits logs it to syslog, if at all) is a warning naming
//! `file:line`; a value must be a whole number (pam_limits reads `64k` as 64); every line
//! is checked, not only those for this user; an unreadable or oversized file is a warning
//! and the other files still apply (pam_limits fails the session).

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bounded::BoundedReadError;

/// No limit: `RLIM_INFINITY` on 64-bit Linux (`!0`).
pub const UNLIMITED: u64 = u64::MAX;

/// The largest limits file read; a bigger one is skipped with a warning.
pub const MAX_CONF_BYTES: u64 = 1 << 20;

/// The most `limits.d` files read, so a directory full of files cannot stall a launch.
const MAX_CONF_FILES: usize = 1024;

/// Warnings kept per file; a file full of bad lines gets a count instead of one each.
const MAX_WARNINGS_PER_FILE: usize = 32;

/// The type `setrlimit` takes its resource as: glibc's enum, an `int` elsewhere.
#[cfg(any(target_env = "gnu", target_env = "uclibc"))]
pub type RawResource = libc::__rlimit_resource_t;
/// The type `setrlimit` takes its resource as: glibc's enum, an `int` elsewhere.
#[cfg(not(any(target_env = "gnu", target_env = "uclibc")))]
pub type RawResource = libc::c_int;

/// A resource `setrlimit` limits, named as `limits.conf` names it (also in JSON and TOML).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    Core,
    Data,
    Fsize,
    Memlock,
    Nofile,
    Rss,
    Stack,
    Cpu,
    Nproc,
    As,
    Locks,
    Sigpending,
    Msgqueue,
    Nice,
    Rtprio,
    Rttime,
}

/// The unit a `limits.conf` value is in, so it can be turned into the kernel's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// KiB in the file, bytes in the kernel.
    Kib,
    /// Minutes in the file, seconds in the kernel.
    Minutes,
    /// A nice value in the file, `20 - nice` in the kernel.
    Nice,
    /// The same in both (counts, bytes for `msgqueue`, microseconds for `rttime`).
    Same,
}

impl Resource {
    /// Every resource, in [`Ord`] order.
    pub const ALL: [Resource; 16] = [
        Resource::Core,
        Resource::Data,
        Resource::Fsize,
        Resource::Memlock,
        Resource::Nofile,
        Resource::Rss,
        Resource::Stack,
        Resource::Cpu,
        Resource::Nproc,
        Resource::As,
        Resource::Locks,
        Resource::Sigpending,
        Resource::Msgqueue,
        Resource::Nice,
        Resource::Rtprio,
        Resource::Rttime,
    ];

    /// The names, for messages that say what was expected.
    const NAMES: &'static str = "core, data, fsize, memlock, nofile, rss, stack, cpu, nproc, as, locks, sigpending, msgqueue, nice, rtprio, rttime";

    /// The `limits.conf` item name (lowercase), also the JSON and TOML key.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Core => "core",
            Resource::Data => "data",
            Resource::Fsize => "fsize",
            Resource::Memlock => "memlock",
            Resource::Nofile => "nofile",
            Resource::Rss => "rss",
            Resource::Stack => "stack",
            Resource::Cpu => "cpu",
            Resource::Nproc => "nproc",
            Resource::As => "as",
            Resource::Locks => "locks",
            Resource::Sigpending => "sigpending",
            Resource::Msgqueue => "msgqueue",
            Resource::Nice => "nice",
            Resource::Rtprio => "rtprio",
            Resource::Rttime => "rttime",
        }
    }

    /// The resource a `limits.conf` item names (lowercase, as pam_limits compares it after
    /// lowercasing); `None` for anything else, the non-rlimit items (`maxlogins`, …) too.
    pub fn from_item(item: &str) -> Option<Resource> {
        Resource::ALL.into_iter().find(|r| r.name() == item)
    }

    /// The `RLIMIT_*` constant for `setrlimit`/`getrlimit` (they differ between
    /// architectures, so they come from `libc`, never written down here).
    pub fn libc_resource(self) -> RawResource {
        match self {
            Resource::Core => libc::RLIMIT_CORE,
            Resource::Data => libc::RLIMIT_DATA,
            Resource::Fsize => libc::RLIMIT_FSIZE,
            Resource::Memlock => libc::RLIMIT_MEMLOCK,
            Resource::Nofile => libc::RLIMIT_NOFILE,
            Resource::Rss => libc::RLIMIT_RSS,
            Resource::Stack => libc::RLIMIT_STACK,
            Resource::Cpu => libc::RLIMIT_CPU,
            Resource::Nproc => libc::RLIMIT_NPROC,
            Resource::As => libc::RLIMIT_AS,
            Resource::Locks => libc::RLIMIT_LOCKS,
            Resource::Sigpending => libc::RLIMIT_SIGPENDING,
            Resource::Msgqueue => libc::RLIMIT_MSGQUEUE,
            Resource::Nice => libc::RLIMIT_NICE,
            Resource::Rtprio => libc::RLIMIT_RTPRIO,
            Resource::Rttime => libc::RLIMIT_RTTIME,
        }
    }

    fn unit(self) -> Unit {
        match self {
            Resource::Core
            | Resource::Data
            | Resource::Fsize
            | Resource::Memlock
            | Resource::Rss
            | Resource::Stack
            | Resource::As => Unit::Kib,
            Resource::Cpu => Unit::Minutes,
            Resource::Nice => Unit::Nice,
            _ => Unit::Same,
        }
    }

    /// Whether the kernel counts this resource in bytes (so a size suffix makes sense).
    fn is_bytes(self) -> bool {
        self.unit() == Unit::Kib || self == Resource::Msgqueue
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `limits.conf` items that pam_limits knows but that are not rlimits: skipped silently.
fn is_pam_only_item(item: &str) -> bool {
    matches!(
        item,
        "maxlogins" | "maxsyslogins" | "priority" | "nonewprivs" | "chroot"
    )
}

/// One resource's limits in the kernel's units (bytes, seconds, counts; `nice` as the
/// rlimit `20 - nice`), [`UNLIMITED`] for no limit. `None`: not set, the task keeps the
/// value it inherits, as pam_limits leaves a hard limit alone when only `soft` is given.
/// In JSON: `{"soft": 1024, "hard": "unlimited"}`, either field optional.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rlim_serde")]
    pub soft: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rlim_serde")]
    pub hard: Option<u64>,
}

impl Limit {
    /// Soft and hard both `value`, as a `-` line or a plain value in `agent.toml` sets them.
    pub fn both(value: u64) -> Limit {
        Limit {
            soft: Some(value),
            hard: Some(value),
        }
    }

    /// The `(soft, hard)` to pass to `setrlimit`, given the inherited ones for what is not
    /// set; a soft above the hard becomes the hard (what pam_limits does last).
    pub fn resolve(&self, current_soft: u64, current_hard: u64) -> (u64, u64) {
        let hard = self.hard.unwrap_or(current_hard);
        let soft = self.soft.unwrap_or(current_soft).min(hard);
        (soft, hard)
    }
}

/// The limits a task gets, one entry per resource set; a `BTreeMap` so that JSON and the
/// order of `setrlimit` calls are the same every time.
pub type Rlimits = BTreeMap<Resource, Limit>;

/// A value for messages: a number or `unlimited`.
fn show(value: u64) -> String {
    if value == UNLIMITED {
        "unlimited".to_string()
    } else {
        value.to_string()
    }
}

/// (De)serializes a limit value: a number, or the string `"unlimited"` for [`UNLIMITED`].
mod rlim_serde {
    use std::fmt;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    use super::UNLIMITED;

    pub fn serialize<S: Serializer>(value: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match *value {
            Some(UNLIMITED) => s.serialize_str("unlimited"),
            Some(n) => s.serialize_u64(n),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(Value)
    }

    struct Value;

    impl<'de> Visitor<'de> for Value {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a non-negative integer or \"unlimited\"")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            u64::try_from(v)
                .map(Some)
                .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            if v == "unlimited" {
                Ok(Some(UNLIMITED))
            } else {
                Err(E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
}

/// The user whose limits are computed, as looked up before the fork (NSS): `groups` holds
/// every group the user is in, the primary one included, by name and gid, because
/// `limits.conf` names groups (`@wheel`) and gids (`@:10`, `@100:200`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Who {
    pub name: String,
    pub uid: u32,
    /// The primary gid (the only one `@min:max` ranges look at, as in pam_limits).
    pub gid: u32,
    /// `(name, gid)` of every group, the primary one included.
    pub groups: Vec<(String, u32)>,
}

impl Who {
    fn in_group_named(&self, name: &str) -> bool {
        self.groups.iter().any(|(n, _)| n == name)
    }

    fn in_group_gid(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.iter().any(|&(_, g)| g == gid)
    }
}

/// A line's priority, strongest first (pam_limits' `LIMITS_DEF_USER`, `_GROUP`,
/// `_DEFAULT`): a line may replace a value set by a line of the same or a weaker priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Priority {
    User,
    Group,
    Wildcard,
}

/// What pam_limits has gathered for one user so far, file after file: each value with the
/// priority of the line that set it, and whether a `<domain> -` line exempted the user.
#[derive(Clone, Debug, Default)]
pub struct LimitsConf {
    slots: BTreeMap<Resource, Slot>,
    exempt: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    soft: Option<(u64, Priority)>,
    hard: Option<(u64, Priority)>,
}

impl LimitsConf {
    pub fn new() -> LimitsConf {
        LimitsConf::default()
    }

    /// Whether a `<domain> -` line named this user: pam_limits then sets no limits at all
    /// and reads no further line or file.
    pub fn exempt(&self) -> bool {
        self.exempt
    }

    /// The limits gathered (none when [`exempt`](Self::exempt)).
    pub fn rlimits(&self) -> Rlimits {
        if self.exempt {
            return Rlimits::new();
        }
        self.slots
            .iter()
            .filter(|(_, s)| s.soft.is_some() || s.hard.is_some())
            .map(|(&r, s)| {
                let limit = Limit {
                    soft: s.soft.map(|(v, _)| v),
                    hard: s.hard.map(|(v, _)| v),
                };
                (r, limit)
            })
            .collect()
    }

    /// pam_limits' `process_limit`: sets the soft and/or hard value unless a stronger line
    /// set it; a `-` line stops at a soft value it may not replace (its hard one stays too).
    fn apply(&mut self, resource: Resource, soft: bool, hard: bool, value: u64, priority: Priority) {
        let slot = self.slots.entry(resource).or_default();
        if soft {
            if slot.soft.is_some_and(|(_, p)| p < priority) {
                return;
            }
            slot.soft = Some((value, priority));
        }
        if hard {
            if slot.hard.is_some_and(|(_, p)| p < priority) {
                return;
            }
            slot.hard = Some((value, priority));
        }
    }
}

/// A line's domain, parsed as pam_limits' `parse_uid_range` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Range {
    /// No `:`: a name, `@name`, `*` or `%…`.
    None,
    /// `:id`, `@:id`: exactly `id`.
    One(u32),
    /// `min:`, `@min:`.
    From(u32),
    /// `min:max`, `@min:max`.
    Between(u32, u32),
}

fn parse_range(domain: &str) -> Result<Range, ()> {
    let Some((min, max)) = domain.split_once(':') else {
        return Ok(Range::None);
    };
    let min = min.strip_prefix(['@', '%']).unwrap_or(min);
    let number = |s: &str| {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse::<u32>().map_err(|_| ())
        } else {
            Err(())
        }
    };
    match (min.is_empty(), max.is_empty()) {
        (true, true) => Err(()),
        (true, false) => Ok(Range::One(number(max)?)),
        (false, true) => Ok(Range::From(number(min)?)),
        (false, false) => Ok(Range::Between(number(min)?, number(max)?)),
    }
}

fn in_range(id: u32, range: Range) -> bool {
    match range {
        Range::None => false,
        Range::One(x) => id == x,
        Range::From(min) => id >= min,
        Range::Between(min, max) => (min..=max).contains(&id),
    }
}

/// The priority a line with this domain has for `who`, or `None` if it does not apply.
fn domain_priority(domain: &str, range: Range, who: &Who) -> Option<Priority> {
    if domain == who.name {
        return Some(Priority::User);
    }
    if who.uid == 0 {
        // Debian's rule: only `root` itself applies to root.
        return None;
    }
    if let Some(group) = domain.strip_prefix('@') {
        let member = match range {
            Range::None => who.in_group_named(group),
            Range::One(gid) => who.in_group_gid(gid),
            range => in_range(who.gid, range),
        };
        return member.then_some(Priority::Group);
    }
    if domain.starts_with('%') {
        // `%` and `%group`: maxlogins only.
        return None;
    }
    match range {
        Range::None => (domain == "*").then_some(Priority::Wildcard),
        range => in_range(who.uid, range).then_some(Priority::User),
    }
}

/// Whether a two-field `<domain> -` line exempts `who`; unlike a limit line, `*` never does.
fn exempts(domain: &str, range: Range, who: &Who) -> bool {
    match domain_priority(domain, range, who) {
        Some(Priority::User | Priority::Group) => true,
        Some(Priority::Wildcard) | None => false,
    }
}

/// Why a `limits.conf` value is unusable: the line's warning says what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum ConfValueError {
    #[error("expected a nice value -20..19 for nice, got {0:?}")]
    Nice(String),
    #[error("expected a whole number, `unlimited`, `infinity` or -1 for {resource}, got {value:?}")]
    NotALimit { resource: Resource, value: String },
}

/// Parses a (lowercased) `limits.conf` value for `resource` into the kernel's units.
fn parse_conf_value(resource: Resource, value: &str) -> Result<u64, ConfValueError> {
    if resource.unit() == Unit::Nice {
        let bad = || ConfValueError::Nice(value.to_string());
        let nice = parse_signed(value).ok_or_else(bad)?;
        let nice = nice.clamp(-20, 19);
        return u64::try_from(20 - nice).map_err(|_| bad());
    }
    if matches!(value, "unlimited" | "infinity" | "-1" | "-") {
        return Ok(UNLIMITED);
    }
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConfValueError::NotALimit {
            resource,
            value: value.to_string(),
        });
    }
    // All digits: only overflow can fail, and strtoull saturates to RLIM_INFINITY.
    let n = value.parse::<u64>().unwrap_or(UNLIMITED);
    let factor = match resource.unit() {
        Unit::Kib => 1024,
        Unit::Minutes => 60,
        Unit::Nice | Unit::Same => 1,
    };
    Ok(if n == UNLIMITED {
        UNLIMITED
    } else {
        n.checked_mul(factor).unwrap_or(UNLIMITED)
    })
}

/// An optionally signed decimal, saturating like `strtol` does.
fn parse_signed(value: &str) -> Option<i64> {
    let (negative, digits) = match value.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, value.strip_prefix('+').unwrap_or(value)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.parse::<i64>().unwrap_or(i64::MAX);
    Some(if negative { -magnitude } else { magnitude })
}

/// Collects a file's warnings, keeping the first [`MAX_WARNINGS_PER_FILE`] and counting the rest.
struct FileWarnings<'a> {
    origin: &'a str,
    out: &'a mut Vec<String>,
    kept: usize,
    dropped: usize,
}

impl FileWarnings<'_> {
    fn line(&mut self, line: usize, what: impl fmt::Display) {
        if self.kept < MAX_WARNINGS_PER_FILE {
            self.out.push(format!("{}:{line}: {what}; line skipped", self.origin));
            self.kept += 1;
        } else {
            self.dropped += 1;
        }
    }

    fn finish(self) {
        if self.dropped > 0 {
            self.out
                .push(format!("{}: {} more bad lines skipped", self.origin, self.dropped));
        }
    }
}

/// Applies one limits file's `text` for `who` to `conf`, as pam_limits reads one file:
/// `origin` (the path) names the file in warnings. Call it for each file in order with the
/// same `conf`, since a line's priority counts against values from earlier files too. Once
/// `conf` is [`exempt`](LimitsConf::exempt) it reads nothing more. Never fails: a line that
/// cannot be used is a warning `origin:line: …` and is skipped.
pub fn parse_limits_conf(text: &str, origin: &str, who: &Who, conf: &mut LimitsConf, warnings: &mut Vec<String>) {
    let mut warn = FileWarnings {
        origin,
        out: warnings,
        kept: 0,
        dropped: 0,
    };
    for (index, raw) in text.lines().enumerate() {
        if conf.exempt {
            break;
        }
        let lineno = index + 1;
        let line = raw.split_once('#').map_or(raw, |(before, _)| before);
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let domain = fields[0];
        let Ok(range) = parse_range(domain) else {
            warn.line(
                lineno,
                format_args!("invalid uid/gid range {domain:?} (expected min:max, min: or :id, or @ before them)"),
            );
            continue;
        };
        match fields.len() {
            4 => {}
            2 if fields[1].starts_with('-') => {
                if exempts(domain, range, who) {
                    conf.exempt = true;
                }
                continue;
            }
            n => {
                warn.line(
                    lineno,
                    format_args!("expected `<domain> <type> <item> <value>`, got {n} field(s)"),
                );
                continue;
            }
        }
        let kind = fields[1].to_ascii_lowercase();
        let item = fields[2].to_ascii_lowercase();
        let value = fields[3].to_ascii_lowercase();
        let Some(resource) = Resource::from_item(&item) else {
            if !is_pam_only_item(&item) {
                warn.line(
                    lineno,
                    format_args!("unknown item {item:?} (expected one of {})", Resource::NAMES),
                );
            }
            continue;
        };
        if domain.starts_with('%') {
            // pam_limits: "'%' domain valid for maxlogins type only".
            continue;
        }
        let (soft, hard) = match kind.as_str() {
            "soft" => (true, false),
            "hard" => (false, true),
            "-" => (true, true),
            _ => {
                warn.line(lineno, format_args!("unknown type {kind:?} (expected soft, hard or -)"));
                continue;
            }
        };
        let value = match parse_conf_value(resource, &value) {
            Ok(v) => v,
            Err(e) => {
                warn.line(lineno, e);
                continue;
            }
        };
        if let Some(priority) = domain_priority(domain, range, who) {
            conf.apply(resource, soft, hard, value, priority);
        }
    }
    warn.finish();
}

/// Why a limits file is skipped: a warning, never an error (see [`for_user`]).
#[derive(Debug, thiserror::Error)]
enum ReadConfError {
    #[error("{}: cannot read: {source}; file skipped", path.display())]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a regular file; skipped", path.display())]
    NotAFile { path: std::path::PathBuf },
    #[error("{}: larger than {MAX_CONF_BYTES} bytes; file skipped", path.display())]
    TooLarge { path: std::path::PathBuf },
}

/// Reads a limits file of at most [`MAX_CONF_BYTES`]; `Ok(None)` when it does not exist.
/// A FIFO in its place cannot hang the launch (see [`crate::bounded`]).
fn read_conf(path: &Path) -> Result<Option<String>, ReadConfError> {
    let path_buf = || path.to_path_buf();
    match crate::bounded::read_regular(path, MAX_CONF_BYTES) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.is_missing() => Ok(None),
        Err(BoundedReadError::Read(source)) => Err(ReadConfError::Read {
            path: path_buf(),
            source,
        }),
        Err(BoundedReadError::NotAFile) => Err(ReadConfError::NotAFile { path: path_buf() }),
        Err(BoundedReadError::TooLarge(_)) => Err(ReadConfError::TooLarge { path: path_buf() }),
    }
}

/// The `*.conf` files of `dir` in the order pam_limits reads them: by the bytes of their
/// names, hidden ones left out (`glob` does not match a leading dot).
fn conf_d_files(dir: &Path, warnings: &mut Vec<String>) -> Vec<std::path::PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            warnings.push(format!("{}: cannot list: {e}; skipped", dir.display()));
            return Vec::new();
        }
    };
    let mut names: Vec<Vec<u8>> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().as_bytes().to_vec())
        .filter(|n| n.ends_with(b".conf") && !n.starts_with(b"."))
        .collect();
    names.sort();
    if names.len() > MAX_CONF_FILES {
        warnings.push(format!(
            "{}: {} files, only the first {MAX_CONF_FILES} read",
            dir.display(),
            names.len()
        ));
        names.truncate(MAX_CONF_FILES);
    }
    names
        .into_iter()
        .map(|n| dir.join(std::ffi::OsStr::from_bytes(&n)))
        .collect()
}

/// The limits pam_limits would set for `who` at login: `root/etc/security/limits.conf`,
/// then `root/etc/security/limits.d/*.conf` (`root` is `/` but for tests). Missing files
/// are fine; unreadable, oversized or malformed content is a warning, never an error.
pub fn for_user(who: &Who, root: &Path) -> (Rlimits, Vec<String>) {
    let security = root.join("etc/security");
    let mut conf = LimitsConf::new();
    let mut warnings = Vec::new();
    let mut files = vec![security.join("limits.conf")];
    files.extend(conf_d_files(&security.join("limits.d"), &mut warnings));
    for path in files {
        if conf.exempt() {
            break;
        }
        match read_conf(&path) {
            Ok(Some(text)) => {
                let origin = path.display().to_string();
                parse_limits_conf(&text, &origin, who, &mut conf, &mut warnings);
            }
            Ok(None) => {}
            Err(warning) => warnings.push(warning.to_string()),
        }
    }
    (conf.rlimits(), warnings)
}

/// Why an `[exec] rlimits` table in `agent.toml` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RlimitsError {
    #[error("rlimits.{key}: not a resource limit (expected one of {})", Resource::NAMES)]
    UnknownResource { key: String },
    #[error("rlimits.{key}: {found} is not a limit (expected {expected})")]
    BadValue {
        key: String,
        found: String,
        expected: &'static str,
    },
    #[error("rlimits.{key}: unknown field {field:?} (expected soft or hard)")]
    UnknownField { key: String, field: String },
    #[error("rlimits.{key}: the soft limit {soft} is above the hard limit {hard}")]
    SoftAboveHard { key: String, soft: String, hard: String },
}

const EXPECTED_COUNT: &str = "a non-negative integer, -1, \"unlimited\" or { soft = …, hard = … }";
const EXPECTED_BYTES: &str =
    "a non-negative integer (bytes), a size like \"64K\", \"8M\", \"1G\", -1, \"unlimited\" or { soft = …, hard = … }";

/// A TOML value, shortly, for messages.
fn describe(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(_) => "a date-time".to_string(),
        toml::Value::Array(_) => "an array".to_string(),
        toml::Value::Table(_) => "a table".to_string(),
    }
}

/// One value of the admin table, in the kernel's units.
fn table_value(key: &str, resource: Resource, value: &toml::Value) -> Result<u64, RlimitsError> {
    let expected = if resource.is_bytes() {
        EXPECTED_BYTES
    } else {
        EXPECTED_COUNT
    };
    let bad = || RlimitsError::BadValue {
        key: key.to_string(),
        found: describe(value),
        expected,
    };
    match value {
        toml::Value::Integer(-1) => Ok(UNLIMITED),
        toml::Value::Integer(i) => u64::try_from(*i).map_err(|_| bad()),
        toml::Value::String(s) => {
            let s = s.trim().to_ascii_lowercase();
            if s == "unlimited" || s == "infinity" {
                return Ok(UNLIMITED);
            }
            let digits_end = s.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(s.len());
            let (digits, suffix) = s.split_at(digits_end);
            let n: u64 = digits.parse().map_err(|_| bad())?;
            let shift = match suffix {
                "" => 0,
                _ if !resource.is_bytes() => return Err(bad()),
                "k" | "kib" => 10,
                "m" | "mib" => 20,
                "g" | "gib" => 30,
                "t" | "tib" => 40,
                _ => return Err(bad()),
            };
            n.checked_mul(1 << shift).filter(|&v| v != UNLIMITED).ok_or_else(bad)
        }
        _ => Err(bad()),
    }
}

/// Reads the admin's `[exec] rlimits` table from `agent.toml`: each key a resource name
/// (`nofile`, `memlock`, …), each value in the kernel's units (bytes, seconds, counts; `nice`
/// as the rlimit `20 - nice`, 1..40):
///
/// ```toml
/// [exec.rlimits]
/// memlock = "unlimited"                  # soft and hard; also "infinity" or -1
/// nofile = 65536                         # soft and hard
/// nproc = { soft = 4096, hard = 8192 }   # either may be left out: not changed
/// stack = "8M"                           # bytes; K, M, G, T (or KiB, …): powers of 1024
/// ```
///
/// Size suffixes are accepted only for byte-valued resources (`core`, `data`, `fsize`,
/// `memlock`, `rss`, `stack`, `as`, `msgqueue`). A soft limit above the hard one in the
/// same entry is an error.
pub fn parse_table(table: &toml::Table) -> Result<Rlimits, RlimitsError> {
    let mut out = Rlimits::new();
    for (key, value) in table {
        let resource = Resource::from_item(key).ok_or_else(|| RlimitsError::UnknownResource { key: key.clone() })?;
        let limit = match value {
            toml::Value::Table(parts) => {
                let mut limit = Limit::default();
                for (field, v) in parts {
                    let path = format!("{key}.{field}");
                    match field.as_str() {
                        "soft" => limit.soft = Some(table_value(&path, resource, v)?),
                        "hard" => limit.hard = Some(table_value(&path, resource, v)?),
                        _ => {
                            return Err(RlimitsError::UnknownField {
                                key: key.clone(),
                                field: field.clone(),
                            });
                        }
                    }
                }
                if limit == Limit::default() {
                    return Err(RlimitsError::BadValue {
                        key: key.clone(),
                        found: "an empty table".to_string(),
                        expected: "soft, hard or both",
                    });
                }
                limit
            }
            v => Limit::both(table_value(key, resource, v)?),
        };
        if let (Some(soft), Some(hard)) = (limit.soft, limit.hard)
            && soft > hard
        {
            return Err(RlimitsError::SoftAboveHard {
                key: key.clone(),
                soft: show(soft),
                hard: show(hard),
            });
        }
        out.insert(resource, limit);
    }
    Ok(out)
}

/// Lays `over` on `base` (the admin's table on the user's `limits.conf`): per resource,
/// `over`'s soft and hard replace `base`'s where `over` sets them.
pub fn merge(base: &mut Rlimits, over: &Rlimits) {
    for (&resource, limit) in over {
        let entry = base.entry(resource).or_default();
        if limit.soft.is_some() {
            entry.soft = limit.soft;
        }
        if limit.hard.is_some() {
            entry.hard = limit.hard;
        }
    }
}

/// Makes the final limits ones `setrlimit` accepts, as pam_limits does before setting
/// them: `nofile` unlimited becomes `nr_open` (`/proc/sys/fs/nr_open`, see [`read_nr_open`];
/// the kernel refuses more) or, unknown, is left unset with a warning; a soft limit above
/// its hard one becomes the hard one, with a warning. (A soft limit above an inherited hard
/// one is clamped by [`Limit::resolve`].)
pub fn finalize(limits: &mut Rlimits, nr_open: Option<u64>, warnings: &mut Vec<String>) {
    for (resource, limit) in limits.iter_mut() {
        if *resource == Resource::Nofile {
            for (which, value) in [("soft", &mut limit.soft), ("hard", &mut limit.hard)] {
                if *value == Some(UNLIMITED) {
                    *value = nr_open;
                    if nr_open.is_none() {
                        warnings.push(format!(
                            "nofile: {which} limit unlimited, but fs.nr_open (the kernel's most) is unknown; not set"
                        ));
                    }
                }
            }
        }
        if let (Some(soft), Some(hard)) = (limit.soft, limit.hard)
            && soft > hard
        {
            warnings.push(format!(
                "{resource}: soft limit {} is above the hard limit {}; using {}",
                show(soft),
                show(hard),
                show(hard)
            ));
            limit.soft = Some(hard);
        }
    }
    limits.retain(|_, l| l.soft.is_some() || l.hard.is_some());
}

/// `root/proc/sys/fs/nr_open`: the most `nofile` may be, for [`finalize`].
pub fn read_nr_open(root: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(root.join("proc/sys/fs/nr_open")).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn alice() -> Who {
        Who {
            name: "alice".into(),
            uid: 1500,
            gid: 100,
            groups: vec![("users".into(), 100), ("gpu".into(), 44), ("hpc".into(), 2001)],
        }
    }

    fn root() -> Who {
        Who {
            name: "root".into(),
            uid: 0,
            gid: 0,
            groups: vec![("root".into(), 0)],
        }
    }

    fn parse(text: &str, who: &Who) -> (Rlimits, Vec<String>) {
        let mut conf = LimitsConf::new();
        let mut warnings = Vec::new();
        parse_limits_conf(text, "limits.conf", who, &mut conf, &mut warnings);
        (conf.rlimits(), warnings)
    }

    fn limit(soft: Option<u64>, hard: Option<u64>) -> Limit {
        Limit { soft, hard }
    }

    #[test]
    fn user_beats_group_beats_wildcard_whatever_the_order() {
        let text = "alice soft nofile 10\n@gpu soft nofile 20\n* soft nofile 30\n";
        let (l, w) = parse(text, &alice());
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(l[&Resource::Nofile], limit(Some(10), None));
        let text = "* soft nofile 30\n@gpu soft nofile 20\nalice soft nofile 10\n";
        assert_eq!(parse(text, &alice()).0[&Resource::Nofile], limit(Some(10), None));
        let text = "* hard nproc 30\n@gpu hard nproc 20\n* hard nproc 40\n";
        assert_eq!(parse(text, &alice()).0[&Resource::Nproc], limit(None, Some(20)));
        // Lines for others do not apply.
        let (l, _) = parse("bob - nofile 5\n@wheel - nofile 6\n", &alice());
        assert!(l.is_empty(), "{l:?}");
    }

    #[test]
    fn the_later_line_wins_among_equals() {
        let text = "* soft core 1\n* soft core 2\nalice hard core 3\nalice hard core 4\n";
        assert_eq!(parse(text, &alice()).0[&Resource::Core], limit(Some(2048), Some(4096)));
        let text = "@gpu soft nofile 1\n@hpc soft nofile 2\n";
        assert_eq!(parse(text, &alice()).0[&Resource::Nofile], limit(Some(2), None));
    }

    #[test]
    fn dash_sets_both_and_stops_where_pam_limits_stops() {
        let (l, _) = parse("* - nofile 4096\n", &alice());
        assert_eq!(l[&Resource::Nofile], limit(Some(4096), Some(4096)));
        // Soft and hard are ranked separately.
        let (l, _) = parse("alice hard nofile 100\n* - nofile 50\n", &alice());
        assert_eq!(l[&Resource::Nofile], limit(Some(50), Some(100)));
        // pam_limits' quirk: a `-` line whose soft half loses sets no hard either.
        let (l, _) = parse("alice soft nofile 100\n* - nofile 50\n", &alice());
        assert_eq!(l[&Resource::Nofile], limit(Some(100), None));
    }

    #[test]
    fn values_are_converted_to_the_kernels_units() {
        let text = "\
            * - memlock 64\n* - cpu 2\n* - nice -5\n* - msgqueue 819200\n* - rtprio 50\n\
            * - stack 8192\n* - as 1\n* - nofile 1024\n* - rttime 5000\n";
        let (l, w) = parse(text, &alice());
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(l[&Resource::Memlock], Limit::both(65536));
        assert_eq!(l[&Resource::Cpu], Limit::both(120));
        assert_eq!(l[&Resource::Nice], Limit::both(25));
        assert_eq!(l[&Resource::Msgqueue], Limit::both(819200));
        assert_eq!(l[&Resource::Rtprio], Limit::both(50));
        assert_eq!(l[&Resource::Stack], Limit::both(8 << 20));
        assert_eq!(l[&Resource::As], Limit::both(1024));
        assert_eq!(l[&Resource::Nofile], Limit::both(1024));
        assert_eq!(l[&Resource::Rttime], Limit::both(5000));
        // nice is clamped to -20..19; sizes too big for bytes become unlimited.
        let (l, _) = parse("* - nice 30\n* hard nice -99\n* - data 18014398509481984\n", &alice());
        assert_eq!(l[&Resource::Nice], limit(Some(1), Some(40)));
        assert_eq!(l[&Resource::Data], Limit::both(UNLIMITED));
        let (l, _) = parse("* - cpu 99999999999999999999999\n", &alice());
        assert_eq!(l[&Resource::Cpu], Limit::both(UNLIMITED));
    }

    #[test]
    fn unlimited_has_four_spellings_and_any_case() {
        for v in ["unlimited", "infinity", "-1", "-", "Unlimited", "INFINITY"] {
            let (l, w) = parse(&format!("* - memlock {v}\n"), &alice());
            assert!(w.is_empty(), "{v}: {w:?}");
            assert_eq!(l[&Resource::Memlock], Limit::both(UNLIMITED), "{v}");
        }
        // Not for nice, where -1 is a nice value.
        let (l, w) = parse("* - nice unlimited\n* soft nice -1\n", &alice());
        assert_eq!(l[&Resource::Nice], limit(Some(21), None));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("limits.conf:1: expected a nice value"), "{w:?}");
        // SOFT and NoFile: case-insensitive type and item; the domain is not.
        let (l, _) = parse("ALICE soft nofile 1\nalice SOFT NoFile 2\n", &alice());
        assert_eq!(l[&Resource::Nofile], limit(Some(2), None));
    }

    #[test]
    fn root_is_matched_only_by_its_name() {
        let text = "* - nofile 10\n@root - core 0\n0: - nproc 5\n:0 - stack 1\n@:0 - data 1\n@0: - rss 1\n";
        let (l, w) = parse(text, &root());
        assert!(w.is_empty(), "{w:?}");
        assert!(l.is_empty(), "{l:?}");
        let (l, _) = parse(&format!("{text}root soft nofile 20\n"), &root());
        assert_eq!(l, Rlimits::from([(Resource::Nofile, limit(Some(20), None))]));
        // The same lines do apply to others.
        let (l, _) = parse(text, &alice());
        assert_eq!(l[&Resource::Nofile], Limit::both(10));
        assert_eq!(l[&Resource::Nproc], Limit::both(5));
    }

    #[test]
    fn uid_and_gid_ranges_follow_pam_limits() {
        let who = alice(); // uid 1500, primary gid 100, also in 44 and 2001
        let one = |domain: &str| {
            parse(&format!("{domain} hard nofile 7\n"), &who)
                .0
                .get(&Resource::Nofile)
                .copied()
        };
        let hit = Some(limit(None, Some(7)));
        assert_eq!(one("1000:2000"), hit);
        assert_eq!(one("1500:1500"), hit);
        assert_eq!(one("1000:"), hit);
        assert_eq!(one(":1500"), hit, ":uid is exactly uid");
        assert_eq!(one(":1000"), None);
        assert_eq!(one("2000:3000"), None);
        assert_eq!(one("1501:"), None);
        // Gid ranges look at the primary gid only; `@:gid` at every group.
        assert_eq!(one("@50:150"), hit);
        assert_eq!(one("@100:"), hit);
        assert_eq!(one("@2000:2002"), None, "a supplementary gid does not count in a range");
        assert_eq!(one("@:2001"), hit);
        assert_eq!(one("@:7"), None);
        // A uid range ranks as a user line, a gid range as a group line.
        let (l, _) = parse("1000: soft nofile 5\n@gpu soft nofile 6\n* soft nofile 7\n", &who);
        assert_eq!(l[&Resource::Nofile], limit(Some(5), None));
        let (l, _) = parse("@:44 soft nofile 5\n* soft nofile 7\n@gpu soft nofile 6\n", &who);
        assert_eq!(l[&Resource::Nofile], limit(Some(6), None));
    }

    #[test]
    fn bad_lines_are_warnings_naming_file_and_line() {
        let text = "\
# comment\n\
\n\
   * soft nofile 10   # trailing comment\n\
alice soft nofile\n\
alice medium nofile 5\n\
alice soft nofile lots\n\
alice soft nofiles 5\n\
1000:x soft nofile 5\n\
alice soft nofile 5 6\n\
alice maxlogins 4\n\
alice soft memlock -5\n\
%gpu - maxlogins 2\n\
% hard nofile 2\n\
@gpu - maxsyslogins 1\n\
* hard priority 5\n\
* - nonewprivs 1\n\
* - chroot /srv\n";
        let (l, w) = parse(text, &alice());
        assert_eq!(l, Rlimits::from([(Resource::Nofile, limit(Some(10), None))]));
        assert_eq!(w.len(), 8, "{w:#?}");
        let expect = [
            "limits.conf:4: expected `<domain> <type> <item> <value>`, got 3 field(s); line skipped",
            "limits.conf:5: unknown type \"medium\" (expected soft, hard or -); line skipped",
            "limits.conf:6: expected a whole number, `unlimited`, `infinity` or -1 for nofile, got \"lots\"; line skipped",
            "limits.conf:7: unknown item \"nofiles\" (expected one of core,",
            "limits.conf:8: invalid uid/gid range \"1000:x\"",
            "limits.conf:9: expected `<domain> <type> <item> <value>`, got 5 field(s); line skipped",
            "limits.conf:10: expected `<domain> <type> <item> <value>`, got 3 field(s); line skipped",
            "limits.conf:11: expected a whole number",
        ];
        for (got, want) in w.iter().zip(expect) {
            assert!(got.starts_with(want), "{got:?} does not start with {want:?}");
        }
    }

    #[test]
    fn a_no_limits_line_drops_everything_and_stops() {
        let text = "alice soft nofile 10\nalice -\nalice soft core 0\n";
        let mut conf = LimitsConf::new();
        let mut w = Vec::new();
        parse_limits_conf(text, "a", &alice(), &mut conf, &mut w);
        assert!(conf.exempt());
        assert!(conf.rlimits().is_empty());
        parse_limits_conf("garbage\n", "b", &alice(), &mut conf, &mut w);
        assert!(w.is_empty(), "nothing is read once exempt: {w:?}");
        assert!(parse("@gpu -\n", &alice()).0.is_empty());
        assert!(parse("1000: -\n", &alice()).0.is_empty());
        // `* -` is not a no-limits line, and others' lines do not count.
        let (l, _) = parse("* -\nbob -\n@wheel -\n* soft core 0\n", &alice());
        assert_eq!(l[&Resource::Core], limit(Some(0), None));
    }

    #[test]
    fn many_bad_lines_give_a_bounded_number_of_warnings() {
        let text = "x y\n".repeat(10_000);
        let (_, w) = parse(&text, &alice());
        assert_eq!(w.len(), MAX_WARNINGS_PER_FILE + 1);
        assert_eq!(w.last().unwrap(), "limits.conf: 9968 more bad lines skipped");
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn limits_conf_then_limits_d_in_byte_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            root,
            "etc/security/limits.conf",
            "* soft nofile 1\n* soft nproc 1\nalice soft core 1\n@gpu soft stack 1\n",
        );
        write(
            root,
            "etc/security/limits.d/20-b.conf",
            "* soft nofile 20\n* soft core 20\n",
        );
        write(
            root,
            "etc/security/limits.d/10-a.conf",
            "* soft nofile 10\n* soft nproc 10\n",
        );
        write(root, "etc/security/limits.d/Z-upper.conf", "* soft nproc 5\n");
        write(root, "etc/security/limits.d/.hidden.conf", "* soft nofile 99\n");
        write(root, "etc/security/limits.d/99-notes.txt", "* soft nofile 98\n");
        write(root, "etc/security/limits.d/30-c.conf.rpmsave", "* soft nofile 97\n");
        write(
            root,
            "etc/security/limits.d/40-d.conf",
            "@gpu soft stack 40\n* soft stack 41\n",
        );
        std::fs::create_dir(root.join("etc/security/limits.d/dir.conf")).unwrap();
        let (l, w) = for_user(&alice(), root);
        // Byte order: "10-a" < "20-b" < "40-d" < "Z-upper" < "dir".
        assert_eq!(l[&Resource::Nofile], limit(Some(20), None));
        assert_eq!(l[&Resource::Nproc], limit(Some(5), None));
        assert_eq!(
            l[&Resource::Core],
            limit(Some(1024), None),
            "a user line beats later wildcards"
        );
        assert_eq!(l[&Resource::Stack], limit(Some(40 * 1024), None));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].ends_with("dir.conf: not a regular file; skipped"), "{w:?}");
        // A warning names the file it came from.
        write(root, "etc/security/limits.d/50-e.conf", "\n* soft bogus 1\n");
        let (_, w) = for_user(&alice(), root);
        let origin = root.join("etc/security/limits.d/50-e.conf");
        assert!(
            w.iter()
                .any(|w| w.starts_with(&format!("{}:2: unknown item", origin.display()))),
            "{w:?}"
        );
        // A no-limits line stops the files after it.
        write(root, "etc/security/limits.d/15-x.conf", "alice -\n");
        let (l, w) = for_user(&alice(), root);
        assert!(l.is_empty(), "{l:?}");
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn missing_files_are_fine_and_huge_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(for_user(&alice(), dir.path()), (Rlimits::new(), Vec::new()));
        let big = format!("* soft nofile 7\n{}", "#".repeat(MAX_CONF_BYTES as usize));
        write(dir.path(), "etc/security/limits.conf", &big);
        write(dir.path(), "etc/security/limits.d/a.conf", "* soft core 1\n");
        let (l, w) = for_user(&alice(), dir.path());
        assert_eq!(l, Rlimits::from([(Resource::Core, limit(Some(1024), None))]));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].ends_with("limits.conf: larger than 1048576 bytes; file skipped"),
            "{w:?}"
        );
        // Exactly the bound is read.
        let edge = format!("* soft nofile 7\n{}", "#".repeat(MAX_CONF_BYTES as usize - 16));
        write(dir.path(), "etc/security/limits.conf", &edge);
        let (l, w) = for_user(&alice(), dir.path());
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(l[&Resource::Nofile], limit(Some(7), None));
    }

    fn table(text: &str) -> Result<Rlimits, RlimitsError> {
        parse_table(&text.parse::<toml::Table>().unwrap())
    }

    #[test]
    fn the_admin_table_takes_numbers_words_sizes_and_pairs() {
        let l = table(
            "memlock = \"unlimited\"\nnofile = 65536\nnproc = { soft = 4096, hard = 8192 }\n\
             stack = \"8M\"\ncore = { hard = 0 }\nas = -1\nmsgqueue = \"64KiB\"\ncpu = \"3600\"\nrss = \"1g\"\n",
        )
        .unwrap();
        assert_eq!(l[&Resource::Memlock], Limit::both(UNLIMITED));
        assert_eq!(l[&Resource::Nofile], Limit::both(65536));
        assert_eq!(l[&Resource::Nproc], limit(Some(4096), Some(8192)));
        assert_eq!(l[&Resource::Stack], Limit::both(8 << 20));
        assert_eq!(l[&Resource::Core], limit(None, Some(0)));
        assert_eq!(l[&Resource::As], Limit::both(UNLIMITED));
        assert_eq!(l[&Resource::Msgqueue], Limit::both(65536));
        assert_eq!(l[&Resource::Cpu], Limit::both(3600));
        assert_eq!(l[&Resource::Rss], Limit::both(1 << 30));
        assert_eq!(table("").unwrap(), Rlimits::new());
    }

    #[test]
    fn the_admin_table_errors_name_the_key_and_what_was_expected() {
        let err = |text: &str| table(text).unwrap_err().to_string();
        assert!(err("nofiles = 5").starts_with("rlimits.nofiles: not a resource limit (expected one of core,"));
        assert!(err("maxlogins = 5").starts_with("rlimits.maxlogins: not a resource limit"));
        assert_eq!(
            err("nofile = 1.5"),
            "rlimits.nofile: 1.5 is not a limit (expected a non-negative integer, -1, \"unlimited\" or { soft = …, hard = … })"
        );
        assert!(
            err("nofile = \"64K\"").starts_with("rlimits.nofile: \"64K\" is not a limit"),
            "no sizes for counts"
        );
        assert!(
            err("stack = \"8Q\"").starts_with(
                "rlimits.stack: \"8Q\" is not a limit (expected a non-negative integer (bytes), a size like"
            )
        );
        assert!(err("stack = \"99999999T\"").starts_with("rlimits.stack: \"99999999T\" is not a limit"));
        assert!(err("nproc = -2").starts_with("rlimits.nproc: -2 is not a limit"));
        assert!(err("nproc = true").starts_with("rlimits.nproc: true is not a limit"));
        assert!(err("nproc = [1]").starts_with("rlimits.nproc: an array is not a limit"));
        assert!(err("nproc = { soft = \"x\" }").starts_with("rlimits.nproc.soft: \"x\" is not a limit"));
        assert_eq!(
            err("nproc = { sfot = 1 }"),
            "rlimits.nproc: unknown field \"sfot\" (expected soft or hard)"
        );
        assert_eq!(
            err("nproc = {}"),
            "rlimits.nproc: an empty table is not a limit (expected soft, hard or both)"
        );
        assert_eq!(
            err("nofile = { soft = \"unlimited\", hard = 1024 }"),
            "rlimits.nofile: the soft limit unlimited is above the hard limit 1024"
        );
    }

    #[test]
    fn merge_replaces_soft_and_hard_separately() {
        let mut base = Rlimits::from([
            (Resource::Nofile, limit(Some(1024), Some(4096))),
            (Resource::Core, Limit::both(0)),
        ]);
        let over = Rlimits::from([
            (Resource::Nofile, limit(None, Some(65536))),
            (Resource::Memlock, Limit::both(UNLIMITED)),
        ]);
        merge(&mut base, &over);
        assert_eq!(
            base,
            Rlimits::from([
                (Resource::Nofile, limit(Some(1024), Some(65536))),
                (Resource::Core, Limit::both(0)),
                (Resource::Memlock, Limit::both(UNLIMITED)),
            ])
        );
    }

    #[test]
    fn finalize_clamps_soft_to_hard_and_bounds_nofile() {
        let mut l = Rlimits::from([
            (Resource::Nproc, limit(Some(100), Some(50))),
            (Resource::Nofile, limit(Some(1024), Some(UNLIMITED))),
            (Resource::Stack, limit(Some(UNLIMITED), Some(UNLIMITED))),
        ]);
        let mut w = Vec::new();
        let mut unknown = l.clone();
        finalize(&mut l, Some(1 << 20), &mut w);
        assert_eq!(l[&Resource::Nproc], Limit::both(50));
        assert_eq!(l[&Resource::Nofile], limit(Some(1024), Some(1 << 20)));
        assert_eq!(l[&Resource::Stack], Limit::both(UNLIMITED));
        assert_eq!(w, ["nproc: soft limit 100 is above the hard limit 50; using 50"]);
        let mut w = Vec::new();
        unknown.insert(Resource::Nofile, Limit::both(UNLIMITED));
        finalize(&mut unknown, None, &mut w);
        assert!(!unknown.contains_key(&Resource::Nofile), "{unknown:?}");
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].starts_with("nofile: soft limit unlimited, but fs.nr_open"),
            "{w:?}"
        );
    }

    #[test]
    fn resolve_fills_in_the_inherited_values() {
        assert_eq!(limit(Some(10), None).resolve(5, 100), (10, 100));
        assert_eq!(limit(None, Some(50)).resolve(1024, 4096), (50, 50));
        assert_eq!(limit(Some(UNLIMITED), None).resolve(5, 100), (100, 100));
        assert_eq!(Limit::default().resolve(5, UNLIMITED), (5, UNLIMITED));
    }

    #[test]
    fn json_uses_item_names_and_unlimited() {
        let l = Rlimits::from([
            (Resource::Nofile, limit(Some(1024), Some(UNLIMITED))),
            (Resource::As, limit(None, Some(0))),
        ]);
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(json, r#"{"nofile":{"soft":1024,"hard":"unlimited"},"as":{"hard":0}}"#);
        assert_eq!(serde_json::from_str::<Rlimits>(&json).unwrap(), l);
        assert!(serde_json::from_str::<Rlimits>(r#"{"nofile":{"soft":-1}}"#).is_err());
        assert!(serde_json::from_str::<Rlimits>(r#"{"nofile":{"sfot":1}}"#).is_err());
        assert!(serde_json::from_str::<Rlimits>(r#"{"maxlogins":{"soft":1}}"#).is_err());
        assert_eq!(serde_json::from_str::<Limit>("{}").unwrap(), Limit::default());
    }

    #[test]
    fn items_map_to_the_libc_constants() {
        for r in Resource::ALL {
            assert_eq!(Resource::from_item(r.name()), Some(r));
        }
        assert_eq!(Resource::from_item("maxlogins"), None);
        assert_eq!(Resource::Nofile.libc_resource(), libc::RLIMIT_NOFILE);
        assert_eq!(Resource::Memlock.libc_resource(), libc::RLIMIT_MEMLOCK);
        let mut raw: Vec<_> = Resource::ALL.iter().map(|r| r.libc_resource()).collect();
        raw.sort_unstable();
        raw.dedup();
        assert_eq!(raw.len(), Resource::ALL.len());
        let mut sorted = Resource::ALL;
        sorted.sort();
        assert_eq!(sorted, Resource::ALL);
    }

    #[test]
    fn nr_open_is_read_from_proc() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_nr_open(dir.path()), None);
        write(dir.path(), "proc/sys/fs/nr_open", "1048576\n");
        assert_eq!(read_nr_open(dir.path()), Some(1 << 20));
    }
}
