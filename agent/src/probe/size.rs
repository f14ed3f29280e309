//! How big a machine the probe describes: at most [`MAX_PUS`] PUs (hardware threads).
//!
//! hwloc builds a synthetic description without asking how big it is: `pack:64 numa:8
//! core:64 pu:8` (262,144 PUs) took it past 25 s and 1.3 GB, `pack:99999 …` never ends.
//! So the PU count of a description is worked out here, from the text, before hwloc sees
//! it; XML exports and this machine are counted once built (their size is bounded by
//! the file or the hardware). hwloc also inserts siblings in quadratic time (`pack:1
//! core:16384 pu:1` would take many minutes), so one level may have at most
//! [`MAX_PER_LEVEL`] objects per parent (`pack:32 core:512 pu:1` builds in seconds).

/// PUs per machine hyperplan describes (the largest single-image machines have a few
/// thousand). Documented in README.md ("Limits").
pub const MAX_PUS: usize = hyperplan_shared::topology::MAX_PUS;

/// Objects per parent at one level of a synthetic description (a package of 288 cores
/// fits; 512 siblings are seconds for hwloc, 4,096 nearly a minute).
pub const MAX_PER_LEVEL: u64 = 512;

/// Why a synthetic description is not handed to hwloc.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("unbalanced {0:?}: attributes are written `type:count(attr=value)`, memory children `[numa]`")]
    Unbalanced(char),
    #[error("level {0:?} has no count: expected TYPE:COUNT, e.g. core:8")]
    NoCount(String),
    #[error("{}; a machine may have at most {MAX_PUS} PUs", shown_pus(*.0))]
    TooManyPus(u64),
    #[error("level {level:?} has {count} objects per parent; at most {MAX_PER_LEVEL}")]
    TooWide { level: String, count: u64 },
}

impl SizeError {
    /// True when the description reads fine but is too big to build.
    pub fn is_too_large(&self) -> bool {
        matches!(self, Self::TooManyPus(_) | Self::TooWide { .. })
    }
}

fn shown_pus(pus: u64) -> String {
    if pus == u64::MAX {
        format!("more than {} PUs", u64::MAX)
    } else {
        format!("{pus} PUs")
    }
}

/// Checks a synthetic description before hwloc builds it: every level has a count of at
/// most [`MAX_PER_LEVEL`], and their product (the PUs) is at most [`MAX_PUS`]. Returns
/// the PU count.
pub fn check_synthetic(description: &str) -> Result<u64, SizeError> {
    let pus = synthetic_pus(description)?;
    if pus > MAX_PUS as u64 {
        return Err(SizeError::TooManyPus(pus));
    }
    Ok(pus)
}

/// The number of PUs `description` asks hwloc for: the product of the counts of its
/// levels, saturating (memory children in `[…]` and attributes in `(…)` add none). A
/// level wider than [`MAX_PER_LEVEL`] is an error.
fn synthetic_pus(description: &str) -> Result<u64, SizeError> {
    let mut pus: u64 = 1;
    let mut too_wide = None;
    for level in top_level_words(description)? {
        if level.starts_with('[') || level.starts_with('(') {
            continue; // a memory child, or the root's attributes
        }
        let level = level.split('(').next().unwrap_or_default();
        let count = level.rsplit(':').next().unwrap_or_default();
        let count = parse_count(count).ok_or_else(|| SizeError::NoCount(level.to_owned()))?;
        pus = pus.saturating_mul(count);
        if count > MAX_PER_LEVEL && too_wide.is_none() {
            too_wide = Some(SizeError::TooWide {
                level: level.to_owned(),
                count,
            });
        }
    }
    // The PU limit says more when both are crossed.
    match too_wide {
        Some(_) if pus > MAX_PUS as u64 => Err(SizeError::TooManyPus(pus)),
        Some(wide) => Err(wide),
        None => Ok(pus),
    }
}

/// The words of a description split at blanks outside `(…)` and `[…]`.
fn top_level_words(description: &str) -> Result<Vec<&str>, SizeError> {
    let mut words = Vec::new();
    let mut open: Vec<char> = Vec::new();
    let mut start = None;
    for (i, c) in description.char_indices() {
        match c {
            '(' | '[' => open.push(c),
            ')' | ']' => {
                let expected = if c == ')' { '(' } else { '[' };
                if open.pop() != Some(expected) {
                    return Err(SizeError::Unbalanced(c));
                }
            }
            _ => {}
        }
        if c.is_whitespace() && open.is_empty() {
            if let Some(s) = start.take() {
                words.push(&description[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(c) = open.pop() {
        return Err(SizeError::Unbalanced(c));
    }
    if let Some(s) = start {
        words.push(&description[s..]);
    }
    Ok(words)
}

/// A count as hwloc reads it (C `strtoul` with base 0): `16`, `0x10`, `020`.
fn parse_count(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_levels_and_skips_memory_children_and_attributes() {
        assert_eq!(synthetic_pus("pack:2 numa:2 core:8 pu:2"), Ok(64));
        assert_eq!(synthetic_pus("pack:2 [numa(memory=1GB)] core:4 pu:2"), Ok(16));
        assert_eq!(synthetic_pus("(memory=1GB) pack:2 core:2 pu:1"), Ok(4));
        assert_eq!(synthetic_pus("pack:2 l2:2(size=32kB linesize=64) pu:2"), Ok(8));
        assert_eq!(synthetic_pus("pack:0x10 pu:010"), Ok(128));
        assert_eq!(synthetic_pus("2 2 2"), Ok(8));
        assert_eq!(
            check_synthetic("pack:99 core:99 pu:99 pu:99 pu:99 pu:99 pu:99 pu:99 pu:99 pu:99 pu:99"),
            Err(SizeError::TooManyPus(u64::MAX))
        );
        assert_eq!(
            synthetic_pus("pack:1 core:16384 pu:1"),
            Err(SizeError::TooWide {
                level: "core:16384".into(),
                count: 16384
            })
        );
        assert_eq!(check_synthetic("pack:8 numa:4 core:64 pu:8"), Ok(16_384));
        assert_eq!(
            check_synthetic("pack:8 numa:4 core:64 pu:9"),
            Err(SizeError::TooManyPus(18_432))
        );
        assert_eq!(synthetic_pus("pack:two"), Err(SizeError::NoCount("pack:two".into())));
        assert_eq!(synthetic_pus("pack:2 (pu:2"), Err(SizeError::Unbalanced('(')));
        assert_eq!(synthetic_pus("pack:2 pu:2)"), Err(SizeError::Unbalanced(')')));
    }
}
