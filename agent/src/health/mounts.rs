//! Mount points that must be mounted (`[health] mounts`): a node whose `/scratch` or
//! home file system did not mount runs jobs that fail at their first file, or, worse,
//! fill the root file system under the empty mount point. Read from
//! `/proc/self/mountinfo` (bounded: a node with thousands of container mounts still has
//! a finite one); a mount point not listed fails `mount-missing`. One result per mount
//! point, `mount:<path>`.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use hyperplan_shared::health::{CheckResult, CheckState};

use super::{CHECK_ERROR, Check, Context};
use crate::bounded::read_regular;

/// Where the mounts are listed.
pub const MOUNTINFO: &str = "/proc/self/mountinfo";
/// The most of it read (some 200 bytes a mount: tens of thousands of mounts).
const MAX_MOUNTINFO: u64 = 8 << 20;

/// What the mount check needs.
#[derive(Clone, Debug, PartialEq)]
pub struct MountOptions {
    /// The mount points that must be mounted.
    pub mounts: Vec<PathBuf>,
    /// `/proc/self/mountinfo` (another file in tests).
    pub mountinfo: PathBuf,
}

/// The check.
pub struct MountCheck {
    opts: MountOptions,
}

impl MountCheck {
    pub fn new(opts: MountOptions) -> MountCheck {
        MountCheck { opts }
    }
}

impl Check for MountCheck {
    fn kind(&self) -> &'static str {
        "mount"
    }

    fn run(&mut self, _ctx: &Context) -> Vec<CheckResult> {
        let names = || self.opts.mounts.iter().map(|m| (format!("mount:{}", m.display()), m));
        let mounted = match read_regular(&self.opts.mountinfo, MAX_MOUNTINFO) {
            Ok(bytes) => mount_points(&String::from_utf8_lossy(&bytes)),
            Err(e) => {
                let text = format!("{}: {e}", self.opts.mountinfo.display());
                return names()
                    .map(|(name, _)| CheckResult::bad(name, CheckState::Degraded, CHECK_ERROR, text.clone()))
                    .collect();
            }
        };
        names()
            .map(|(name, path)| {
                if mounted.contains(&lexical(path)) {
                    CheckResult::ok(name)
                } else {
                    CheckResult::bad(
                        name,
                        CheckState::Failed,
                        "mount-missing",
                        format!("{} is not mounted", path.display()),
                    )
                }
            })
            .collect()
    }
}

/// The mount points mountinfo lists (its fifth field, octal escapes undone).
fn mount_points(text: &str) -> BTreeSet<PathBuf> {
    text.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| lexical(Path::new(&unescape(field))))
        .collect()
}

/// The kernel writes space, tab, newline and backslash in a path as `\040`, `\011`,
/// `\012`, `\134`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `/scratch/` and `/scratch/.` are `/scratch`.
fn lexical(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, Component::CurDir)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const MOUNTINFO_TEXT: &str = "\
22 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw
25 22 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
40 22 0:35 / /scratch rw,relatime shared:20 - lustre 10.0.0.1@o2ib:/scratch rw
41 22 0:36 / /mnt/with\\040space rw,relatime shared:21 - nfs4 nas:/x rw
";

    fn check(dir: &Path, mounts: &[&str]) -> MountCheck {
        MountCheck::new(MountOptions {
            mounts: mounts.iter().map(PathBuf::from).collect(),
            mountinfo: dir.join("mountinfo"),
        })
    }

    #[test]
    fn listed_mount_points_pass_and_missing_ones_fail() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("mountinfo"), MOUNTINFO_TEXT).unwrap();
        let r = check(tmp.path(), &["/scratch/", "/mnt/with space", "/home"]).run(&Context::detached());
        assert_eq!(r[0], CheckResult::ok("mount:/scratch/"));
        assert_eq!(r[1], CheckResult::ok("mount:/mnt/with space"));
        assert_eq!(
            r[2],
            CheckResult::bad(
                "mount:/home",
                CheckState::Failed,
                "mount-missing",
                "/home is not mounted"
            )
        );
        // /scratch unmounted: its line gone.
        let without: String = MOUNTINFO_TEXT
            .lines()
            .filter(|l| !l.contains("lustre"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(tmp.path().join("mountinfo"), without).unwrap();
        let r = check(tmp.path(), &["/scratch"]).run(&Context::detached());
        assert_eq!((r[0].state, r[0].code.as_str()), (CheckState::Failed, "mount-missing"));
    }

    #[test]
    fn an_unreadable_mountinfo_is_a_check_error_and_the_real_one_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let r = check(tmp.path(), &["/scratch"]).run(&Context::detached());
        assert_eq!((r[0].state, r[0].code.as_str()), (CheckState::Degraded, CHECK_ERROR));
        let real = MountCheck::new(MountOptions {
            mounts: vec![PathBuf::from("/")],
            mountinfo: PathBuf::from(MOUNTINFO),
        })
        .run(&Context::detached());
        assert_eq!(real, vec![CheckResult::ok("mount:/")]);
        assert_eq!(unescape("a\\134b\\011c\\0"), "a\\b\tc\\0");
    }
}
