//! Linux CPU list text (`0-23,112-135`, as in `Cpus_allowed_list` and `cpuset.cpus`):
//! reading it into PU numbers and printing PU numbers back in the same form.

use std::collections::BTreeSet;

/// The largest PU number accepted (Linux's `NR_CPUS` upper bound), so a list like
/// `0-4000000000` cannot make a reader allocate without end.
pub const MAX_PU: u32 = 8191;

/// A CPU list that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("expected a CPU list like 0-23,112-135, got {0:?}")]
    Syntax(String),
    #[error("expected a range from low to high, got {0:?}")]
    Backwards(String),
    #[error("expected CPU numbers up to {MAX_PU}, got {0}")]
    TooLarge(u64),
}

/// Reads a CPU list into sorted, distinct PU numbers. Empty text (or only spaces) is the
/// empty list.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, CpuListError> {
    let mut out = BTreeSet::new();
    let t = text.trim();
    if t.is_empty() {
        return Ok(Vec::new());
    }
    let number = |s: &str| -> Result<u32, CpuListError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CpuListError::Syntax(text.to_string()));
        }
        let n: u64 = s.parse().map_err(|_| CpuListError::TooLarge(u64::MAX))?;
        u32::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_PU)
            .ok_or(CpuListError::TooLarge(n))
    };
    for part in t.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            None => {
                out.insert(number(part)?);
            }
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo.trim())?, number(hi.trim())?);
                if lo > hi {
                    return Err(CpuListError::Backwards(part.to_string()));
                }
                out.extend(lo..=hi);
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// Prints PU numbers as a CPU list, runs collapsed (`0-3,8`); the input need not be sorted.
/// The planner prints one per placed task, so no allocation per run.
pub fn format_cpu_list(pus: &[u32]) -> String {
    use std::fmt::Write;
    let mut sorted = pus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while let Some(&lo) = sorted.get(i) {
        let mut hi = lo;
        while sorted.get(i + 1).is_some_and(|&next| Some(next) == hi.checked_add(1)) {
            i += 1;
            hi = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        // Writing to a String cannot fail.
        let _ = if lo == hi {
            write!(out, "{lo}")
        } else {
            write!(out, "{lo}-{hi}")
        };
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn reads_and_prints() {
        assert_eq!(parse_cpu_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("8, 0-1 ,1").unwrap(), vec![0, 1, 8]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("0-23,112-135").unwrap().len(), 48);
        assert_eq!(format_cpu_list(&[8, 3, 0, 1, 2]), "0-3,8");
        assert_eq!(format_cpu_list(&[]), "");
        let text = "0-23,112-135";
        assert_eq!(format_cpu_list(&parse_cpu_list(text).unwrap()), text);
    }

    #[test]
    fn bad_lists_are_errors() {
        for bad in ["a", "1-", "-1", "1,,2", "1-2-3", "0x1", "1.5"] {
            assert!(matches!(parse_cpu_list(bad), Err(CpuListError::Syntax(_))), "{bad:?}");
        }
        assert_eq!(parse_cpu_list("3-1"), Err(CpuListError::Backwards("3-1".into())));
        assert_eq!(
            parse_cpu_list("0-4000000000"),
            Err(CpuListError::TooLarge(4_000_000_000))
        );
        assert_eq!(
            parse_cpu_list("99999999999999999999999"),
            Err(CpuListError::TooLarge(u64::MAX))
        );
    }
}
