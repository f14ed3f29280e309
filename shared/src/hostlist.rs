//! Slurm-style hostlists: `gpu[001-004,009],cpu7`.
//!
//! [`compress`] shortens long node lists in reports and messages; [`expand`] reads the
//! lists Slurm's `topology.conf` uses.

use std::collections::{BTreeSet, HashMap, HashSet};

/// The most names one expression may expand to; guards against `n[0-99999999999]`.
const MAX_EXPANSION: usize = 1_000_000;

/// A hostlist expression that could not be expanded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("unbalanced brackets in hostlist {0:?}")]
    Unbalanced(String),
    #[error("bad range {range:?} in hostlist: {reason}")]
    BadRange { range: String, reason: String },
    #[error("empty name in hostlist {0:?}")]
    EmptyName(String),
    #[error("hostlist {0:?} expands to more than 1000000 names")]
    TooLarge(String),
}

/// Splits `gpu017` into (`gpu`, `017`); `None` when there is no usable numeric suffix.
fn split_number(name: &str) -> Option<(&str, &str, u64)> {
    let start = name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let digits = &name[start..];
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    Some((&name[..start], digits, digits.parse().ok()?))
}

/// Compresses host names into a Slurm hostlist: names sharing a prefix and a numeric
/// suffix width become one bracket group of ranges (`gpu[001-004,009]`), zero padding
/// kept. Groups appear in the order their first name does; numbers inside a group are
/// sorted and duplicates dropped. Names without a numeric suffix are listed plainly.
///
/// Unpadded numbers of the same width as a zero-padded group join it (`gpu099`,
/// `gpu100` → `gpu[099-100]`); other unpadded numbers of one prefix form a group of
/// their own whatever their widths (`n9`, `n10` → `n[9-10]`), as Slurm writes them.
pub fn compress(names: &[&str]) -> String {
    let mut padded: HashSet<(&str, usize)> = HashSet::new();
    for name in names {
        if let Some((prefix, digits, _)) = split_number(name)
            && digits.len() > 1
            && digits.starts_with('0')
        {
            padded.insert((prefix, digits.len()));
        }
    }
    // (prefix, width; 0 = unpadded) → numbers; `order` keeps first appearance.
    let mut groups: HashMap<(&str, usize), BTreeSet<u64>> = HashMap::new();
    let mut plain_seen: HashSet<&str> = HashSet::new();
    let mut order: Vec<Result<(&str, usize), &str>> = Vec::new();
    for name in names {
        match split_number(name) {
            Some((prefix, digits, n)) => {
                let width = if padded.contains(&(prefix, digits.len())) {
                    digits.len()
                } else {
                    0
                };
                let key = (prefix, width);
                let set = groups.entry(key).or_default();
                if set.is_empty() {
                    order.push(Ok(key));
                }
                set.insert(n);
            }
            None => {
                if plain_seen.insert(name) {
                    order.push(Err(name));
                }
            }
        }
    }
    let mut parts = Vec::with_capacity(order.len());
    for entry in order {
        match entry {
            Err(name) => parts.push(name.to_string()),
            Ok(key @ (prefix, width)) => {
                let Some(numbers) = groups.get(&key) else {
                    continue;
                };
                parts.push(format_group(prefix, width, numbers));
            }
        }
    }
    parts.join(",")
}

fn format_group(prefix: &str, width: usize, numbers: &BTreeSet<u64>) -> String {
    let num = |n: u64| format!("{n:0width$}");
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for &n in numbers {
        match ranges.last_mut() {
            Some((_, hi)) if hi.checked_add(1) == Some(n) => *hi = n,
            _ => ranges.push((n, n)),
        }
    }
    if let [(lo, hi)] = ranges.as_slice()
        && lo == hi
    {
        return format!("{prefix}{}", num(*lo));
    }
    let body: Vec<String> = ranges
        .iter()
        .map(|&(lo, hi)| {
            if lo == hi {
                num(lo)
            } else {
                format!("{}-{}", num(lo), num(hi))
            }
        })
        .collect();
    format!("{prefix}[{}]", body.join(","))
}

/// Splits at commas that are not inside brackets.
fn split_top_level(expr: &str) -> Result<Vec<&str>, HostlistError> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err(HostlistError::Unbalanced(expr.to_string())),
            ']' if depth == 1 => depth = 0,
            ']' => return Err(HostlistError::Unbalanced(expr.to_string())),
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Unbalanced(expr.to_string()));
    }
    parts.push(&expr[start..]);
    Ok(parts)
}

/// The numbers of one bracket body (`001-016,020`) as zero-padded strings.
fn expand_brackets(body: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for item in body.split(',') {
        let item = item.trim();
        let bad = |reason: &str| HostlistError::BadRange {
            range: item.to_string(),
            reason: reason.to_string(),
        };
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let is_number = |s: &str| !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit());
        if !is_number(lo) || !is_number(hi) {
            return Err(bad("expected a number or a range such as 001-016"));
        }
        let (Ok(a), Ok(b)) = (lo.parse::<u64>(), hi.parse::<u64>()) else {
            return Err(bad("expected a number or a range such as 001-016"));
        };
        if b < a {
            return Err(bad("the range ends before it starts"));
        }
        if b - a >= MAX_EXPANSION as u64 || out.len() + (b - a) as usize >= MAX_EXPANSION {
            return Err(bad("the range is too long"));
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// Expands a Slurm hostlist such as `gpu[001-016,020],cpu7` or `r[1-2]n[01-04]` into
/// names, in the order written. A range keeps the width of its first number.
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    let mut names = Vec::new();
    for part in split_top_level(expr.trim())? {
        let part = part.trim();
        if part.is_empty() {
            return Err(HostlistError::EmptyName(expr.to_string()));
        }
        let mut current = vec![String::new()];
        let mut rest = part;
        while !rest.is_empty() {
            let (literal, after) = match rest.find('[') {
                Some(i) => (&rest[..i], Some(&rest[i + 1..])),
                None => (rest, None),
            };
            for c in &mut current {
                c.push_str(literal);
            }
            let Some(after) = after else { break };
            let Some(close) = after.find(']') else {
                return Err(HostlistError::Unbalanced(expr.to_string()));
            };
            let numbers = expand_brackets(&after[..close])?;
            if current.len().saturating_mul(numbers.len()) > MAX_EXPANSION {
                return Err(HostlistError::TooLarge(expr.to_string()));
            }
            current = current
                .iter()
                .flat_map(|c| numbers.iter().map(move |n| format!("{c}{n}")))
                .collect();
            rest = &after[close + 1..];
        }
        if names.len() + current.len() > MAX_EXPANSION {
            return Err(HostlistError::TooLarge(expr.to_string()));
        }
        names.extend(current);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    #[test]
    fn compresses_ranges_keeping_padding() {
        let v: Vec<String> = (17..=32).map(|i| format!("gpu{i:03}")).collect();
        assert_eq!(compress(&names(&v)), "gpu[017-032]");
        assert_eq!(
            compress(&["gpu004", "gpu001", "gpu002", "gpu003", "gpu009", "cpu7", "gpu002"]),
            "gpu[001-004,009],cpu7"
        );
        assert_eq!(compress(&["n9", "n10", "n11", "n13"]), "n[9-11,13]");
        assert_eq!(compress(&["gpu099", "gpu100", "gpu101"]), "gpu[099-101]");
        assert_eq!(compress(&["login", "gpu1", "login", "gpu2"]), "login,gpu[1-2]");
        assert_eq!(compress(&["a5"]), "a5");
        assert_eq!(compress(&[]), "");
        assert_eq!(compress(&["n01", "n1", "n2"]), "n01,n[1-2]");
    }

    #[test]
    fn expands_groups() -> Result<(), HostlistError> {
        assert_eq!(
            expand("gpu[001-003,020],cpu7")?,
            ["gpu001", "gpu002", "gpu003", "gpu020", "cpu7"]
        );
        assert_eq!(expand("r[1-2]n[01-02]")?, ["r1n01", "r1n02", "r2n01", "r2n02"]);
        assert_eq!(expand("n[8-10]")?, ["n8", "n9", "n10"]);
        assert_eq!(expand("plain")?, ["plain"]);
        assert_eq!(expand("a[1]b")?, ["a1b"]);
        Ok(())
    }

    #[test]
    fn expand_errors() {
        for bad in [
            "n[3-1]",
            "n[1-",
            "n[a-b]",
            "n[1-2",
            "n]1[",
            "n[[1]]",
            "a,,b",
            "n[]",
            "n[0-99999999999]",
            "n[-3]",
        ] {
            assert!(expand(bad).is_err(), "{bad} should fail");
        }
        assert!(matches!(expand("n[0-999]m[0-9999]"), Err(HostlistError::TooLarge(_))));
    }

    #[test]
    fn round_trips() -> Result<(), HostlistError> {
        for expr in [
            "gpu[001-016,020]",
            "gpu[017-032],cpu7",
            "n[9-11,13]",
            "login",
            "a[01-10],b[1-3,7]",
        ] {
            let expanded = expand(expr)?;
            assert_eq!(compress(&names(&expanded)), expr);
        }
        let v: Vec<String> = (1..=10000)
            .filter(|i| i % 7 != 0)
            .map(|i| format!("node{i:05}"))
            .collect();
        assert_eq!(expand(&compress(&names(&v)))?, v);
        Ok(())
    }
}
