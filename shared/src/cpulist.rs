//! Linux CPU list text (`0-23,112-135`, as in `Cpus_allowed_list` and `cpuset.cpus`):
//! reading it into PU numbers and printing PU numbers back in the same form.

/// Highest CPU number a list may name: far above any kernel's `NR_CPUS` (8,192 today), low
/// enough that a corrupt `0-4294967295` cannot make a reader allocate gigabytes.
pub const MAX_CPU: u32 = 1 << 20;

/// Why a kernel CPU list does not parse; each names the element that was wrong (and the
/// list), since the list is what a person finds in the sysfs file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("empty element in CPU list {list:?}")]
    EmptyElement { list: String },
    #[error("range {element:?} in CPU list {list:?} goes backwards")]
    Backwards { element: String, list: String },
    #[error("{text:?} in {element:?} is not a CPU number")]
    NotANumber { text: String, element: String },
    /// Above [`MAX_CPU`]: a corrupt list, not a machine.
    #[error("CPU {cpu} in {element:?} is beyond any machine (limit {})", MAX_CPU)]
    TooLarge { cpu: u32, element: String },
}

/// Parses a kernel CPU list, "0-3,8-11" (and "" → empty; surrounding whitespace and a
/// trailing NUL are ignored). The result is sorted and free of duplicates. Errors name
/// the element that was wrong.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, CpuListError> {
    let s = clean(s);
    let mut cpus = Vec::new();
    if s.is_empty() {
        return Ok(cpus);
    }
    for element in s.split(',') {
        let element = element.trim();
        if element.is_empty() {
            return Err(CpuListError::EmptyElement { list: s.to_string() });
        }
        let (first, last) = match element.split_once('-') {
            Some((a, b)) => (cpu_number(a, element)?, cpu_number(b, element)?),
            None => {
                let n = cpu_number(element, element)?;
                (n, n)
            }
        };
        if last < first {
            return Err(CpuListError::Backwards {
                element: element.to_string(),
                list: s.to_string(),
            });
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Sysfs values end in a newline; some saved ones carry a blank line or a NUL as well.
fn clean(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c == '\0')
}

fn parse_decimal(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn cpu_number(text: &str, element: &str) -> Result<u32, CpuListError> {
    let n = parse_decimal(text.trim()).ok_or_else(|| CpuListError::NotANumber {
        text: text.to_string(),
        element: element.to_string(),
    })?;
    if n > MAX_CPU {
        return Err(CpuListError::TooLarge {
            cpu: n,
            element: element.to_string(),
        });
    }
    Ok(n)
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
        for bad in ["a", "1-", "-1", "1,,2", "1-2-3", "0x1", "1.5", "+1", "1 2"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
        }
        assert!(parse_cpu_list("3-1").unwrap_err().to_string().contains("backwards"));
        assert!(matches!(
            parse_cpu_list("0-4000000000"),
            Err(CpuListError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_cpu_list("0-99999999999"),
            Err(CpuListError::NotANumber { .. })
        ));
    }
}
