//! Free space and free inodes of the state directory and the configured paths
//! (`[health] paths`), from `statvfs(3)`: a full state disk stops tasks from starting
//! (their directories, records and output live there), a full `/tmp` or scratch fails
//! jobs in ways users cannot read. Below `minFreePercent` of the space or
//! `minFreeInodesPercent` of the inodes (what unprivileged users may use) fails
//! `disk-space` / `disk-inodes`; a path that does not exist fails `disk-missing`; one
//! that cannot be asked (`EIO`, a stale NFS handle) fails `disk-error`. One result per
//! path, `disk:<path>`.
//!
//! A path on a dead network file system blocks `statvfs` in the kernel: the runner's
//! timeout names it ([`Context::at`]).

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use hyperplan_shared::health::{CheckResult, CheckState};

use super::{Check, Context};

/// What the disk check needs.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskOptions {
    /// The state directory first, then `[health] paths`.
    pub paths: Vec<PathBuf>,
    /// Free space below this percentage fails the path.
    pub min_free_percent: f64,
    /// Free inodes below this percentage fail the path.
    pub min_free_inodes_percent: f64,
}

/// What `statvfs` said of a file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Bytes in all, and free to unprivileged users.
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// Inodes in all (0: the file system has no fixed number, as btrfs), and free to
    /// unprivileged users.
    pub total_inodes: u64,
    pub free_inodes: u64,
}

/// Why a path could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum StatError {
    #[error("{} has a NUL byte", path.display())]
    Nul { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Os { path: PathBuf, source: std::io::Error },
}

impl StatError {
    fn is_missing(&self) -> bool {
        matches!(self, StatError::Os { source, .. }
            if matches!(source.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)))
    }
}

/// The file system `path` is on.
// statvfs's fields are u64 on 64-bit Linux, narrower elsewhere: converted all the same.
#[allow(clippy::useless_conversion)]
pub fn usage(path: &Path) -> Result<Usage, StatError> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| StatError::Nul {
        path: path.to_path_buf(),
    })?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated string alive for the call and `st` points at
    // writable memory the size of a `struct statvfs`, which the call fills on success;
    // it is read only then.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(StatError::Os {
            path: path.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: statvfs returned 0, so it initialised the struct (and it was zeroed before).
    let st = unsafe { st.assume_init() };
    let frsize = if st.f_frsize > 0 { st.f_frsize } else { st.f_bsize };
    let frsize = u64::try_from(frsize).unwrap_or(0);
    let n = |v| u64::try_from(v).unwrap_or(0);
    Ok(Usage {
        total_bytes: n(st.f_blocks).saturating_mul(frsize),
        free_bytes: n(st.f_bavail).saturating_mul(frsize),
        total_inodes: n(st.f_files),
        free_inodes: n(st.f_favail),
    })
}

/// The check.
pub struct DiskCheck {
    opts: DiskOptions,
}

impl DiskCheck {
    pub fn new(opts: DiskOptions) -> DiskCheck {
        DiskCheck { opts }
    }
}

impl Check for DiskCheck {
    fn kind(&self) -> &'static str {
        "disk"
    }

    fn run(&mut self, ctx: &Context) -> Vec<CheckResult> {
        let mut out = Vec::with_capacity(self.opts.paths.len());
        for path in &self.opts.paths {
            let name = format!("disk:{}", path.display());
            ctx.at(&name);
            out.push(judge(&name, path, usage(path), &self.opts));
        }
        out
    }
}

/// One path's result.
fn judge(name: &str, path: &Path, usage: Result<Usage, StatError>, opts: &DiskOptions) -> CheckResult {
    let usage = match usage {
        Ok(u) => u,
        Err(e) if e.is_missing() => {
            return CheckResult::bad(
                name,
                CheckState::Failed,
                "disk-missing",
                format!("{} does not exist", path.display()),
            );
        }
        Err(e) => return CheckResult::bad(name, CheckState::Failed, "disk-error", e.to_string()),
    };
    let percent = |free: u64, total: u64| free as f64 * 100.0 / total as f64;
    if usage.total_bytes > 0 {
        let p = percent(usage.free_bytes, usage.total_bytes);
        if p < opts.min_free_percent {
            return CheckResult::bad(
                name,
                CheckState::Failed,
                "disk-space",
                format!(
                    "{}: {} free of {} ({p:.1} %, below {} %)",
                    path.display(),
                    bytes(usage.free_bytes),
                    bytes(usage.total_bytes),
                    opts.min_free_percent
                ),
            );
        }
    }
    if usage.total_inodes > 0 {
        let p = percent(usage.free_inodes, usage.total_inodes);
        if p < opts.min_free_inodes_percent {
            return CheckResult::bad(
                name,
                CheckState::Failed,
                "disk-inodes",
                format!(
                    "{}: {} inodes free of {} ({p:.1} %, below {} %)",
                    path.display(),
                    usage.free_inodes,
                    usage.total_inodes,
                    opts.min_free_inodes_percent
                ),
            );
        }
    }
    CheckResult::ok(name)
}

/// `1.5 GiB`, `512 KiB`, `300 B`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn opts(paths: Vec<PathBuf>) -> DiskOptions {
        DiskOptions {
            paths,
            min_free_percent: 5.0,
            min_free_inodes_percent: 5.0,
        }
    }

    #[test]
    fn a_real_directory_is_asked_and_a_missing_one_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let u = usage(tmp.path()).unwrap();
        assert!(u.total_bytes > 0 && u.free_bytes <= u.total_bytes, "{u:?}");
        let missing = tmp.path().join("nope");
        let mut check = DiskCheck::new(DiskOptions {
            min_free_percent: 0.0,
            min_free_inodes_percent: 0.0,
            ..opts(vec![tmp.path().to_path_buf(), missing.clone()])
        });
        let r = check.run(&Context::detached());
        assert_eq!(r[0].state, CheckState::Ok, "{r:?}");
        assert_eq!(r[1].check, format!("disk:{}", missing.display()));
        assert_eq!((r[1].state, r[1].code.as_str()), (CheckState::Failed, "disk-missing"));
        assert_eq!(r[1].text, format!("{} does not exist", missing.display()));
        // A file in the way of a directory's path is missing too (ENOTDIR).
        let file = tmp.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(usage(&file.join("below")).unwrap_err().is_missing());
    }

    /// Issue 43's "a full tmpfs": a real 1 MiB tmpfs filled to the last block fails
    /// `disk-space`, one with its inodes used up fails `disk-inodes`, and emptied it
    /// passes again. Needs root to mount; skipped with the reason otherwise.
    #[test]
    fn a_real_tmpfs_filled_up_fails_and_passes_once_emptied() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            println!("skipped: mounting a small tmpfs needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let mnt = tmp.path().join("scratch");
        std::fs::create_dir(&mnt).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,nr_inodes=64", "hyperplan-test"])
            .arg(&mnt)
            .status();
        if !mounted.is_ok_and(|s| s.success()) {
            println!("skipped: cannot mount a tmpfs here");
            return;
        }
        struct Unmount(PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
        let _unmount = Unmount(mnt.clone());
        let mut check = DiskCheck::new(opts(vec![mnt.clone()]));
        assert_eq!(check.run(&Context::detached())[0].state, CheckState::Ok);
        // Full: every block written.
        let fill = mnt.join("fill");
        let mut f = std::fs::File::create(&fill).unwrap();
        let block = vec![0u8; 64 * 1024];
        while std::io::Write::write_all(&mut f, &block).is_ok() {}
        drop(f);
        let r = check.run(&Context::detached());
        assert_eq!(
            (r[0].state, r[0].code.as_str()),
            (CheckState::Failed, "disk-space"),
            "{r:?}"
        );
        assert!(r[0].text.starts_with(&format!("{}: ", mnt.display())), "{}", r[0].text);
        std::fs::remove_file(&fill).unwrap();
        assert_eq!(check.run(&Context::detached())[0].state, CheckState::Ok);
        // Out of inodes: empty files until the file system refuses one more.
        let mut k = 0;
        while std::fs::File::create(mnt.join(format!("f{k}"))).is_ok() && k < 1000 {
            k += 1;
        }
        let r = check.run(&Context::detached());
        assert_eq!(
            (r[0].state, r[0].code.as_str()),
            (CheckState::Failed, "disk-inodes"),
            "{r:?}"
        );
        for i in 0..k {
            std::fs::remove_file(mnt.join(format!("f{i}"))).unwrap();
        }
        assert_eq!(check.run(&Context::detached())[0].state, CheckState::Ok);
    }

    #[test]
    fn space_and_inodes_below_the_threshold_fail_with_the_numbers() {
        let path = Path::new("/scratch");
        let full = Usage {
            total_bytes: 100 << 30,
            free_bytes: 1 << 30,
            total_inodes: 1000,
            free_inodes: 900,
        };
        let r = judge("disk:/scratch", path, Ok(full), &opts(vec![]));
        assert_eq!((r.state, r.code.as_str()), (CheckState::Failed, "disk-space"));
        assert_eq!(r.text, "/scratch: 1.0 GiB free of 100.0 GiB (1.0 %, below 5 %)");
        let no_inodes = Usage {
            free_bytes: 50 << 30,
            free_inodes: 10,
            ..full
        };
        let r = judge("disk:/scratch", path, Ok(no_inodes), &opts(vec![]));
        assert_eq!((r.state, r.code.as_str()), (CheckState::Failed, "disk-inodes"));
        assert_eq!(r.text, "/scratch: 10 inodes free of 1000 (1.0 %, below 5 %)");
        // A file system without a fixed number of inodes is not judged by them.
        let btrfs = Usage {
            total_inodes: 0,
            free_inodes: 0,
            ..no_inodes
        };
        assert_eq!(
            judge("disk:/scratch", path, Ok(btrfs), &opts(vec![])).state,
            CheckState::Ok
        );
        let e = StatError::Os {
            path: path.into(),
            source: std::io::Error::from_raw_os_error(libc::ESTALE),
        };
        let r = judge("disk:/scratch", path, Err(e), &opts(vec![]));
        assert_eq!((r.state, r.code.as_str()), (CheckState::Failed, "disk-error"));
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(bytes(300), "300 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(5 << 40), "5.0 TiB");
    }
}
