//! NVIDIA XID errors, from the kernel log (`/dev/kmsg`), as LBNL NHC and most sites read
//! them. The driver logs every GPU error it sees as a line like
//!
//! ```text
//! NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
//! NVRM: Xid (0000:3b:00): 48, An uncorrectable double bit error...       (older drivers)
//! ```
//!
//! Some XIDs are the GPU's or the node's fault and stay with the node until a GPU reset
//! or a reboot; most are the application's (a bad pointer, a kernel killed) and say
//! nothing about the node. NVML can report XIDs too, but only through an event set held
//! open between checks; the kernel log has them all, from every driver version, and
//! needs no library.
//!
//! What each XID means to the node, after NVIDIA's "XID Errors" document
//! (<https://docs.nvidia.com/deploy/xid-errors/>):
//!
//! | XID | what                                                   | here       |
//! |-----|--------------------------------------------------------|------------|
//! | 48  | double-bit ECC error                                   | failed     |
//! | 61  | internal micro-controller breakpoint/warning           | failed     |
//! | 62  | internal micro-controller halt                         | failed     |
//! | 63  | ECC page retirement or row remapping recorded          | degraded   |
//! | 64  | ECC page retirement or row remapping failed            | failed     |
//! | 74  | NVLink error                                           | failed     |
//! | 79  | GPU has fallen off the bus                             | failed     |
//! | 92  | high single-bit ECC error rate                         | degraded   |
//! | 94  | contained ECC error                                    | degraded   |
//! | 95  | uncontained ECC error                                  | failed     |
//! | 119 | GSP RPC timeout                                        | failed     |
//! | 120 | GSP error                                              | failed     |
//! | 140 | unrecovered ECC error                                  | failed     |
//! | any other (13, 31, 43, 45: usually the application's)      | | counted, ok |
//!
//! One result per GPU that had a failed or degraded XID since the agent started,
//! `xid:<pci id>` (`xid:0000:3b:00`), code `gpu-xid`, the worst first; its text names
//! the worst XID the GPU had (the first of them), e.g. `XID 79 on 0000:3b:00 (GPU has
//! fallen off the bus) at kernel time 12345.678s`. Nothing when no GPU had one.
//!
//! Both kinds stick until the agent restarts: a failed XID needs a GPU reset or a
//! reboot, and a degraded one (a page retired, ECC errors piling up) says the GPU wants
//! looking at; a reboot restarts the agent, and so does a driver reload done right
//! (the agent's tasks hold the GPUs). Only XIDs logged after the agent first opened the
//! log count (it seeks to the end then): an XID from before its start is the previous
//! boot's business or already known.
//!
//! `/dev/kmsg` is opened non-blocking once and kept open; each run reads the records
//! that came since until `EAGAIN` (`EPIPE`: records were overwritten before they were
//! read, noted, and reading goes on), at most [`MAX_RECORDS`] of them, each line cut to
//! [`MAX_LINE`] bytes, and at most [`MAX_GPUS`] GPUs tracked. Where the log cannot be
//! opened (not root, `dmesg_restrict`, no such file) the check says nothing, as the GPU
//! check says nothing without a driver: it never fails the node for it. `[health] xid =
//! false` turns it off.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use hyperplan_shared::health::{CheckResult, CheckState};

use super::{Check, Context};

/// Where the kernel log is read.
pub const KMSG: &str = "/dev/kmsg";
/// The code of a GPU with a failed or degraded XID.
pub const CODE: &str = "gpu-xid";
/// Records (lines) read in one run at most; the rest wait for the next run.
pub const MAX_RECORDS: usize = 10_000;
/// Bytes of a line looked at; the rest of a longer line is skipped.
pub const MAX_LINE: usize = 1024;
/// GPUs tracked at most; XIDs of further ones are dropped (and said in the log).
pub const MAX_GPUS: usize = 64;
/// One read: a `/dev/kmsg` record is at most 8 KiB (the kernel's `CONSOLE_EXT_LOG_MAX`),
/// and a smaller buffer gets `EINVAL`.
const READ_BUF: usize = 16 << 10;
/// What starts an XID line.
const MARK: &[u8] = b"NVRM: Xid (";
/// Bytes of a PCI id at most (`0000:3b:00.0` is 12).
const MAX_PCI_ID: usize = 32;

/// Why the kernel log cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum KmsgError {
    /// Open failed: missing, not root, `dmesg_restrict`.
    #[error("cannot open: {0}")]
    Open(#[source] std::io::Error),
    /// A directory, FIFO or socket in its place.
    #[error("not a character device or a regular file")]
    NotALog,
    /// Seeking to its end failed.
    #[error("cannot seek to its end: {0}")]
    Seek(#[source] std::io::Error),
}

/// The check: the open log and what it found since the agent started.
pub struct XidCheck {
    path: PathBuf,
    /// `None` until the log could be opened.
    log: Option<Log>,
    /// The debug line about an unopenable log was said.
    said_unopenable: bool,
    faults: Faults,
    /// Lines read in the last run (for the tests).
    last_lines: usize,
}

/// The open log and the line being put together across reads (a regular file standing in
/// for `/dev/kmsg` returns many lines per read, and may cut one).
struct Log {
    file: File,
    /// The current line so far, at most [`MAX_LINE`] bytes.
    partial: Vec<u8>,
}

/// What the XIDs seen said.
#[derive(Default)]
struct Faults {
    /// GPUs with a failed or degraded XID, by PCI id.
    gpus: BTreeMap<String, Fault>,
    /// XIDs that are not the node's fault.
    application: u64,
    /// Node-fault XIDs dropped because [`MAX_GPUS`] GPUs were tracked already.
    untracked: u64,
}

/// A GPU's worst XID.
#[derive(Clone, Debug, PartialEq)]
struct Fault {
    xid: u32,
    state: CheckState,
    what: &'static str,
    /// Kernel time of the record, microseconds since boot, when the line had it.
    at_us: Option<u64>,
    /// Further failed or degraded XIDs on this GPU.
    more: u64,
}

/// One XID line, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Xid {
    pci: String,
    code: u32,
    at_us: Option<u64>,
}

impl XidCheck {
    /// A check of the log at `path` (normally [`KMSG`]); nothing is opened until it runs.
    pub fn new(path: PathBuf) -> XidCheck {
        XidCheck {
            path,
            log: None,
            said_unopenable: false,
            faults: Faults::default(),
            last_lines: 0,
        }
    }

    /// Reads the records that came since the last run, at most [`MAX_RECORDS`].
    fn read_new(&mut self) {
        let Some(log) = &mut self.log else { return };
        let faults = &mut self.faults;
        let mut buf = vec![0u8; READ_BUF];
        let (mut lines, mut reads, mut overwritten) = (0usize, 0usize, 0u64);
        loop {
            if lines >= MAX_RECORDS || reads >= MAX_RECORDS {
                tracing::debug!(path = %self.path.display(), "kernel log: {lines} lines read, the rest next run");
                break;
            }
            reads += 1;
            match log.file.read(&mut buf) {
                Ok(0) => break, // a regular file's end
                Ok(n) => lines += log.push(buf.get(..n).unwrap_or_default(), |line| faults.see(line)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => overwritten += 1,
                Err(e) => {
                    tracing::debug!(path = %self.path.display(), "kernel log: read: {e}");
                    break;
                }
            }
        }
        if overwritten > 0 {
            tracing::debug!(
                path = %self.path.display(),
                "kernel log: records were overwritten before they were read ({overwritten} times); XIDs may be missed"
            );
        }
        self.last_lines = lines;
    }
}

/// Opens the log non-blocking and seeks to its end.
fn open(path: &Path) -> Result<File, KmsgError> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(KmsgError::Open)?;
    let kind = file.metadata().map_err(KmsgError::Open)?.file_type();
    if !(kind.is_char_device() || kind.is_file()) {
        return Err(KmsgError::NotALog);
    }
    file.seek(SeekFrom::End(0)).map_err(KmsgError::Seek)?;
    Ok(file)
}

impl Check for XidCheck {
    fn kind(&self) -> &'static str {
        "xid"
    }

    fn run(&mut self, ctx: &Context) -> Vec<CheckResult> {
        ctx.at("xid");
        if self.log.is_none() {
            match open(&self.path) {
                Ok(file) => {
                    self.log = Some(Log {
                        file,
                        partial: Vec::new(),
                    })
                }
                Err(e) => {
                    if !self.said_unopenable {
                        self.said_unopenable = true;
                        tracing::debug!(path = %self.path.display(), "XIDs are not watched: {e}");
                    }
                    return Vec::new();
                }
            }
        }
        let before = (self.faults.application, self.faults.untracked);
        self.read_new();
        if self.faults.application > before.0 {
            tracing::debug!(
                new = self.faults.application - before.0,
                total = self.faults.application,
                "XIDs that are not the node's fault (the application's)"
            );
        }
        if self.faults.untracked > before.1 {
            tracing::debug!(
                total = self.faults.untracked,
                "XIDs of GPUs past the first {MAX_GPUS} dropped"
            );
        }
        self.faults.results()
    }
}

impl Log {
    /// Adds `bytes` to the lines read, calling `each` with every line they end (cut to
    /// [`MAX_LINE`]); how many they ended.
    fn push(&mut self, bytes: &[u8], mut each: impl FnMut(&[u8])) -> usize {
        let mut ended = 0;
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let (body, ends) = match piece.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (piece, false),
            };
            let room = MAX_LINE.saturating_sub(self.partial.len());
            self.partial
                .extend_from_slice(body.get(..room.min(body.len())).unwrap_or_default());
            if ends {
                each(&self.partial);
                self.partial.clear();
                ended += 1;
            }
        }
        ended
    }
}

impl Faults {
    /// Takes one line of the log.
    fn see(&mut self, line: &[u8]) {
        // Continuation lines of a /dev/kmsg record (` SUBSYSTEM=pci`) start with a space.
        if line.first() == Some(&b' ') {
            return;
        }
        let Some(xid) = parse(line) else { return };
        let Some((state, what)) = classify(xid.code) else {
            self.application += 1;
            return;
        };
        if !self.gpus.contains_key(&xid.pci) && self.gpus.len() >= MAX_GPUS {
            self.untracked += 1;
            return;
        }
        let new = Fault {
            xid: xid.code,
            state,
            what,
            at_us: xid.at_us,
            more: 0,
        };
        match self.gpus.get_mut(&xid.pci) {
            None => {
                self.gpus.insert(xid.pci, new);
            }
            Some(old) if state > old.state => {
                *old = Fault {
                    more: old.more + 1,
                    ..new
                }
            }
            Some(old) => old.more += 1,
        }
    }

    /// One result per GPU with a fault, the worst first.
    fn results(&self) -> Vec<CheckResult> {
        let mut out: Vec<(&String, &Fault)> = self.gpus.iter().collect();
        out.sort_by(|a, b| b.1.state.cmp(&a.1.state).then_with(|| a.0.cmp(b.0)));
        out.into_iter()
            .map(|(pci, f)| CheckResult::bad(format!("xid:{pci}"), f.state, CODE, text(pci, f)))
            .collect()
    }
}

/// `XID 79 on 0000:3b:00 (GPU has fallen off the bus) at kernel time 12345.678s`.
fn text(pci: &str, f: &Fault) -> String {
    let mut s = format!("XID {} on {pci} ({})", f.xid, f.what);
    if let Some(us) = f.at_us {
        s.push_str(&format!(
            " at kernel time {}.{:03}s",
            us / 1_000_000,
            us % 1_000_000 / 1000
        ));
    }
    if f.more > 0 {
        s.push_str(&format!("; {} more on this GPU", f.more));
    }
    s
}

/// What XID `code` means to the node (the table above); `None`: not the node's fault.
fn classify(code: u32) -> Option<(CheckState, &'static str)> {
    use CheckState::{Degraded, Failed};
    Some(match code {
        48 => (Failed, "double-bit ECC error"),
        61 => (Failed, "internal micro-controller breakpoint/warning"),
        62 => (Failed, "internal micro-controller halt"),
        63 => (Degraded, "ECC page retirement or row remapping recorded"),
        64 => (Failed, "ECC page retirement or row remapping failed"),
        74 => (Failed, "NVLink error"),
        79 => (Failed, "GPU has fallen off the bus"),
        92 => (Degraded, "high single-bit ECC error rate"),
        94 => (Degraded, "contained ECC error"),
        95 => (Failed, "uncontained ECC error"),
        119 => (Failed, "GSP RPC timeout"),
        120 => (Failed, "GSP error"),
        140 => (Failed, "unrecovered ECC error"),
        _ => return None,
    })
}

/// The XID of a log line, if it is one: `[prio,seq,usec,flags;]… NVRM: Xid (<pci>[ …]): <code>…`.
fn parse(line: &[u8]) -> Option<Xid> {
    let at = find(line, MARK)?;
    let rest = line.get(at + MARK.len()..)?;
    let close = rest.iter().position(|b| *b == b')')?;
    let inside = rest.get(..close)?;
    // `PCI:0000:3b:00`, `0000:3b:00`; under MIG `PCI:0000:3b:00 GPU-I:05`.
    let first = inside.split(|b| b.is_ascii_whitespace()).next()?;
    let id = first.strip_prefix(b"PCI:").unwrap_or(first);
    let id_ok = !id.is_empty()
        && id.len() <= MAX_PCI_ID
        && id.iter().all(|b| b.is_ascii_hexdigit() || *b == b':' || *b == b'.');
    if !id_ok {
        return None;
    }
    let after = rest.get(close + 1..)?.strip_prefix(b": ")?;
    let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
    let code = std::str::from_utf8(after.get(..digits)?).ok()?.parse().ok()?;
    Some(Xid {
        pci: String::from_utf8_lossy(id).to_ascii_lowercase(),
        code,
        at_us: kmsg_time(line.get(..at)?),
    })
}

/// The time field of a `/dev/kmsg` record's prefix (`6,1234,12345678,-;`), microseconds.
fn kmsg_time(head: &[u8]) -> Option<u64> {
    let semi = head.iter().position(|b| *b == b';')?;
    let mut fields = head.get(..semi)?.split(|b| *b == b',');
    let number = |f: Option<&[u8]>| -> Option<u64> {
        let f = f?;
        if f.is_empty() || !f.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(f).ok()?.parse().ok()
    };
    number(fields.next())?; // priority and facility
    number(fields.next())?; // sequence number
    number(fields.next())
}

/// Where `needle` first is in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Write;

    use super::*;

    const FELL_OFF: &str =
        "3,2001,12345678000,-;NVRM: Xid (PCI:0000:3B:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n";

    fn append(path: &Path, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(bytes).unwrap();
    }

    /// A check of an empty temporary log, run once (so opened at its end).
    fn opened() -> (tempfile::TempDir, PathBuf, XidCheck) {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("kmsg");
        std::fs::write(&path, "").unwrap();
        let mut check = XidCheck::new(path.clone());
        assert!(check.run(&Context::detached()).is_empty());
        (tmp, path, check)
    }

    #[test]
    fn xids_before_the_first_open_are_ignored_and_a_79_after_fails_the_gpu() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("kmsg");
        std::fs::write(&path, FELL_OFF.replace("3B", "18")).unwrap();
        let mut check = XidCheck::new(path.clone());
        let ctx = Context::detached();
        assert!(check.run(&ctx).is_empty(), "logged before the agent started");
        append(&path, b"6,2000,12345000000,-;usb 1-1: new device\n");
        append(&path, FELL_OFF.as_bytes());
        append(&path, b" SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n");
        let want = vec![CheckResult::bad(
            "xid:0000:3b:00",
            CheckState::Failed,
            CODE,
            "XID 79 on 0000:3b:00 (GPU has fallen off the bus) at kernel time 12345.678s",
        )];
        assert_eq!(check.run(&ctx), want);
        assert_eq!(check.run(&ctx), want, "a failed XID sticks through quiet runs");
    }

    #[test]
    fn an_application_xid_is_counted_but_fails_nothing() {
        let (_tmp, path, mut check) = opened();
        append(
            &path,
            b"4,10,5000000,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=99, name=a.out, Graphics Exception\n\
              4,11,5000001,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=99, name=a.out, Ch 00000010, MMU Fault\n\
              4,12,5000002,-;NVRM: Xid (PCI:0000:3b:00): 43, pid=99, name=a.out, Ch 00000010\n",
        );
        assert!(check.run(&Context::detached()).is_empty());
        assert_eq!(check.faults.application, 3);
    }

    #[test]
    fn xid_63_degrades_and_faults_stick_worst_first() {
        let (_tmp, path, mut check) = opened();
        let ctx = Context::detached();
        append(
            &path,
            b"4,20,7000000,-;NVRM: Xid (PCI:0000:18:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping\n",
        );
        let r = check.run(&ctx);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].check.as_str(), r[0].state, r[0].code.as_str()),
            ("xid:0000:18:00", CheckState::Degraded, CODE)
        );
        // An old driver's line (no `PCI:`, no prefix) and a GSP timeout on other GPUs.
        append(
            &path,
            b"NVRM: Xid (0000:86:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.\n\
              4,22,8000000,-;NVRM: Xid (PCI:0000:af:00): 119, pid='<unknown>', name=<unknown>, Timeout after 6s of waiting for RPC response from GPU0 GSP!\n",
        );
        let r = check.run(&ctx);
        let got: Vec<(&str, CheckState)> = r.iter().map(|c| (c.check.as_str(), c.state)).collect();
        assert_eq!(
            got,
            [
                ("xid:0000:86:00", CheckState::Failed),
                ("xid:0000:af:00", CheckState::Failed),
                ("xid:0000:18:00", CheckState::Degraded),
            ]
        );
        assert_eq!(r[0].text, "XID 48 on 0000:86:00 (double-bit ECC error)");
        // A failed XID on the degraded GPU takes its place; a later degraded one is counted.
        append(
            &path,
            b"4,23,9000000,-;NVRM: Xid (PCI:0000:18:00): 95, pid=1, name=x, Uncontained\n\
              4,24,9100000,-;NVRM: Xid (PCI:0000:18:00): 94, pid=1, name=x, Contained\n",
        );
        let r = check.run(&ctx);
        let gpu18 = r.iter().find(|c| c.check == "xid:0000:18:00").unwrap();
        assert_eq!(gpu18.state, CheckState::Failed);
        assert_eq!(
            gpu18.text,
            "XID 95 on 0000:18:00 (uncontained ECC error) at kernel time 9.000s; 2 more on this GPU"
        );
    }

    #[test]
    fn parse_takes_the_driver_forms_and_refuses_garbage() {
        let xid = |s: &str| parse(s.as_bytes()).map(|x| (x.pci, x.code, x.at_us));
        assert_eq!(
            xid("4,1,77,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1"),
            Some(("0000:3b:00".into(), 79, Some(77)))
        );
        assert_eq!(
            xid("[  12.5] NVRM: Xid (0000:3b:00): 48, An uncorrectable"),
            Some(("0000:3b:00".into(), 48, None))
        );
        assert_eq!(
            xid("NVRM: Xid (PCI:0000:4b:00 GPU-I:05): 43, pid=1"),
            Some(("0000:4b:00".into(), 43, None))
        );
        for bad in [
            "",
            "NVRM: Xid (",
            "NVRM: Xid (PCI:0000:3b:00",
            "NVRM: Xid (PCI:0000:3b:00): ",
            "NVRM: Xid (PCI:0000:3b:00): x79",
            "NVRM: Xid (PCI:0000:3b:00): 99999999999999999999",
            "NVRM: Xid (PCI:../../etc): 79",
            "NVRM: Xid (): 79",
            "NVRM: Xid (PCI:0000:3b:00)79",
        ] {
            assert_eq!(xid(bad), None, "{bad:?}");
        }
        assert_eq!(kmsg_time(b"a,b,c;"), None);
        assert_eq!(kmsg_time(b"6,1,;"), None);
    }

    #[test]
    fn garbage_huge_and_non_utf8_lines_do_not_panic_and_stay_bounded() {
        let (_tmp, path, mut check) = opened();
        let ctx = Context::detached();
        let mut junk = Vec::new();
        junk.extend_from_slice(b"\xff\xfe\x00;;;,,,NVRM: Xid (\xff): \xff\n");
        junk.extend_from_slice(b"NVRM: Xid (PCI:0000:01:00): 79\xff\xfe, name=\xc3\x28\n");
        junk.extend_from_slice(b"NVRM: Xid (PCI:0000:02:00): 4294967296, overflow\n");
        junk.extend(std::iter::repeat_n(b'A', 10 << 20));
        junk.extend_from_slice(b"NVRM: Xid (PCI:0000:03:00): 79, past the first KiB\n");
        junk.extend_from_slice(FELL_OFF.as_bytes());
        // A line cut at the end of what is there now, finished later.
        junk.extend_from_slice(b"4,3,1,-;NVRM: Xid (PCI:0000:04:");
        append(&path, &junk);
        let names = |r: Vec<CheckResult>| r.into_iter().map(|c| c.check).collect::<Vec<_>>();
        assert_eq!(names(check.run(&ctx)), ["xid:0000:01:00", "xid:0000:3b:00"]);
        assert!(check.log.as_ref().unwrap().partial.len() <= MAX_LINE);
        append(&path, b"00): 62, halt\n");
        assert_eq!(
            names(check.run(&ctx)),
            ["xid:0000:01:00", "xid:0000:04:00", "xid:0000:3b:00"]
        );
        // Many lines: at most MAX_RECORDS (and one read's worth) per run, the rest next.
        let mut many = b"4,5,1,-;some driver chatter\n".repeat(3 * MAX_RECORDS);
        many.extend_from_slice(b"4,6,1,-;NVRM: Xid (PCI:0000:05:00): 74, NVLink\n");
        append(&path, &many);
        assert!(!names(check.run(&ctx)).contains(&"xid:0000:05:00".to_string()));
        assert!(check.last_lines >= MAX_RECORDS && check.last_lines < MAX_RECORDS + READ_BUF);
        let mut runs = 1;
        while !names(check.run(&ctx)).contains(&"xid:0000:05:00".to_string()) {
            runs += 1;
            assert!(runs < 10, "the XID after the chatter is never read");
        }
        // At most MAX_GPUS GPUs.
        let gpus: String = (0..MAX_GPUS + 10)
            .map(|i| format!("NVRM: Xid (PCI:0001:{i:02x}:00): 79, off\n"))
            .collect();
        append(&path, gpus.as_bytes());
        assert_eq!(check.run(&ctx).len(), MAX_GPUS);
        assert!(check.faults.untracked > 0);
    }

    #[test]
    fn an_unreadable_kmsg_gives_no_results() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = Context::detached();
        assert!(XidCheck::new(tmp.path().join("missing")).run(&ctx).is_empty());
        let mut dir = XidCheck::new(tmp.path().to_path_buf());
        assert!(dir.run(&ctx).is_empty(), "a directory");
        assert!(dir.run(&ctx).is_empty() && dir.log.is_none());
    }

    #[test]
    fn the_real_kmsg_opens_and_reads_without_an_xid_failure() {
        if let Err(e) = File::open(KMSG) {
            println!("skipped: {KMSG} cannot be opened here: {e}");
            return;
        }
        let mut check = XidCheck::new(PathBuf::from(KMSG));
        let ctx = Context::detached();
        let first = check.run(&ctx);
        assert!(check.log.is_some(), "opened");
        let second = check.run(&ctx);
        assert!(
            first.iter().chain(&second).all(|r| r.state != CheckState::Failed),
            "{first:?} {second:?}"
        );
        // From the start of the log instead of its end: the device's one record per read
        // is taken as the lines of a file are, and the buffer holds any record.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(KMSG)
            .unwrap();
        let mut whole = XidCheck::new(PathBuf::from(KMSG));
        whole.log = Some(Log {
            file,
            partial: Vec::new(),
        });
        whole.run(&ctx);
        assert!(whole.last_lines > 0, "the boot's records");
        assert!(
            whole.log.as_ref().unwrap().partial.is_empty(),
            "every record ends its line"
        );
    }
}
