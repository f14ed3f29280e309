//! Memory the kernel reports as hardware-corrupted (`HardwareCorrupted` in
//! `/proc/meminfo`: pages it took out of use after a machine check): a DIMM is failing,
//! and the next error may not be one the kernel can contain. Above 0 kB fails
//! `memory-corrupted`. A kernel built without memory-failure handling has no such line:
//! ok. One result, `memory`.

use std::path::PathBuf;

use hyperplan_shared::health::{CheckResult, CheckState};

use super::{CHECK_ERROR, Check, Context};
use crate::bounded::read_regular;

/// Where the kernel says it.
pub const MEMINFO: &str = "/proc/meminfo";
/// `/proc/meminfo` is a few KiB.
const MAX_MEMINFO: u64 = 64 << 10;

/// The check.
pub struct MemoryCheck {
    meminfo: PathBuf,
}

impl MemoryCheck {
    pub fn new(meminfo: PathBuf) -> MemoryCheck {
        MemoryCheck { meminfo }
    }
}

impl Check for MemoryCheck {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn run(&mut self, ctx: &Context) -> Vec<CheckResult> {
        ctx.at("memory");
        let text = match read_regular(&self.meminfo, MAX_MEMINFO) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                let text = format!("{}: {e}", self.meminfo.display());
                return vec![CheckResult::bad("memory", CheckState::Degraded, CHECK_ERROR, text)];
            }
        };
        vec![judge(&text)]
    }
}

/// The result from meminfo's text.
fn judge(meminfo: &str) -> CheckResult {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("HardwareCorrupted:"));
    let Some(value) = line else {
        return CheckResult::ok("memory");
    };
    let mut words = value.split_whitespace();
    match (words.next().and_then(|n| n.parse::<u64>().ok()), words.next()) {
        (Some(0), _) => CheckResult::ok("memory"),
        (Some(kb), Some("kB") | None) => CheckResult::bad(
            "memory",
            CheckState::Failed,
            "memory-corrupted",
            format!("the kernel reports {kb} kB of memory as hardware-corrupted"),
        ),
        _ => CheckResult::bad(
            "memory",
            CheckState::Degraded,
            CHECK_ERROR,
            format!(
                "HardwareCorrupted:{} in {MEMINFO} is not a size in kB",
                hyperplan_shared::names::shorten(value, 40)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const HEALTHY: &str = "MemTotal:       263842544 kB\nMemFree:        250000000 kB\nHardwareCorrupted:     0 kB\nAnonHugePages:         0 kB\n";

    #[test]
    fn corrupted_memory_fails_and_none_or_no_line_is_ok() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("meminfo");
        let mut check = MemoryCheck::new(path.clone());
        let ctx = Context::detached();
        std::fs::write(&path, HEALTHY).unwrap();
        assert_eq!(check.run(&ctx), vec![CheckResult::ok("memory")]);
        std::fs::write(
            &path,
            HEALTHY.replace("HardwareCorrupted:     0", "HardwareCorrupted:  4096"),
        )
        .unwrap();
        let r = check.run(&ctx);
        assert_eq!(
            (r[0].state, r[0].code.as_str()),
            (CheckState::Failed, "memory-corrupted")
        );
        assert_eq!(r[0].text, "the kernel reports 4096 kB of memory as hardware-corrupted");
        std::fs::write(&path, "MemTotal: 1 kB\n").unwrap();
        assert_eq!(
            check.run(&ctx),
            vec![CheckResult::ok("memory")],
            "no line: no such support"
        );
        std::fs::write(&path, "HardwareCorrupted: lots\n").unwrap();
        assert_eq!(check.run(&ctx)[0].code, CHECK_ERROR);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(check.run(&ctx)[0].code, CHECK_ERROR);
        // This machine's own.
        assert_eq!(MemoryCheck::new(MEMINFO.into()).run(&ctx).len(), 1);
    }
}
