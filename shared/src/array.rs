//! Job array specs in Slurm's words (`--array`, `#SBATCH -a`): `1-100`, `1,3,7-9`,
//! `0-30:10`, each with an optional `%N` limit on how many elements run at once.
//!
//! The spec keeps its parts as written (so it prints back the same way) and gives its
//! indices sorted and unique. Bounds keep untrusted text cheap: at most
//! [`MAX_ARRAY_ELEMENTS`] elements (counted as written) and indices up to
//! [`MAX_ARRAY_INDEX`] (Slurm's largest `MaxArraySize` less one).

use std::collections::BTreeSet;
use std::fmt;

/// Most elements one array may have, counted over its parts as written.
pub const MAX_ARRAY_ELEMENTS: u64 = 10_000;
/// Largest index an element may have.
pub const MAX_ARRAY_INDEX: u32 = 4_000_000;
/// Longest spec read, so a hostile one costs little before it is refused.
const MAX_SPEC_LEN: usize = 4096;

/// What an array spec looks like, for error messages.
const EXPECTED: &str = "an array spec like 1-100, 1,3,7-9, 0-30:10 or 1-100%8";

/// An array spec that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    #[error("expected {EXPECTED}, got {0:?}")]
    Syntax(String),
    #[error("expected {what} in array spec {text:?}, got {got:?}")]
    Part {
        text: String,
        what: &'static str,
        got: String,
    },
    #[error("expected a range that goes up (start ≤ end) in array spec {text:?}, got {got:?}")]
    Backwards { text: String, got: String },
    #[error("expected indices up to {MAX_ARRAY_INDEX} in array spec {text:?}, got {got:?}")]
    IndexTooLarge { text: String, got: String },
    #[error("expected at most {MAX_ARRAY_ELEMENTS} elements, got {count} in array spec {text:?}")]
    TooMany { text: String, count: u64 },
    #[error("expected an array spec of at most {MAX_SPEC_LEN} characters, got {0}")]
    TooLong(usize),
}

/// One comma-separated part: `start-end:step`, `start-end` or a lone index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayRange {
    pub start: u32,
    /// As written; the last index is the last step at or below it.
    pub end: u32,
    /// At least 1; 1 for a lone index.
    pub step: u32,
}

impl ArrayRange {
    /// Elements in this part.
    pub fn len(&self) -> u64 {
        u64::from((self.end - self.start) / self.step) + 1
    }

    /// Never empty: a part has at least its start.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Its indices, in order.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        (self.start..=self.end).step_by(self.step as usize)
    }
}

impl fmt::Display for ArrayRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else if self.step == 1 {
            write!(f, "{}-{}", self.start, self.end)
        } else {
            write!(f, "{}-{}:{}", self.start, self.end, self.step)
        }
    }
}

/// A parsed `--array` spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    /// As written, in order; never empty.
    pub ranges: Vec<ArrayRange>,
    /// `%N`: at most this many elements run at once (at least 1).
    pub limit: Option<u32>,
}

impl ArraySpec {
    /// Reads `1-100%8` and the rest of Slurm's forms.
    pub fn parse(text: &str) -> Result<ArraySpec, ArrayError> {
        if text.len() > MAX_SPEC_LEN {
            return Err(ArrayError::TooLong(text.len()));
        }
        let t = text.trim();
        if t.is_empty() {
            return Err(ArrayError::Syntax(text.to_string()));
        }
        let part_error = |what: &'static str, got: &str| ArrayError::Part {
            text: text.to_string(),
            what,
            got: got.to_string(),
        };
        let (list, limit) = match t.split_once('%') {
            None => (t, None),
            Some((list, n)) => {
                let n = number(n).ok_or_else(|| part_error("a limit %N with N a number from 1", n))?;
                if n == 0 || u64::from(n) > MAX_ARRAY_ELEMENTS {
                    return Err(part_error("a limit %N from 1 to 10000", &n.to_string()));
                }
                (list, Some(n))
            }
        };
        let mut ranges = Vec::new();
        let mut count: u64 = 0;
        for part in list.split(',') {
            let range = parse_range(part, text)?;
            count += range.len();
            if count > MAX_ARRAY_ELEMENTS {
                return Err(ArrayError::TooMany {
                    text: text.to_string(),
                    count,
                });
            }
            ranges.push(range);
        }
        Ok(ArraySpec { ranges, limit })
    }

    /// Every index, sorted, each once.
    pub fn indices(&self) -> Vec<u32> {
        let set: BTreeSet<u32> = self.ranges.iter().flat_map(ArrayRange::indices).collect();
        set.into_iter().collect()
    }
}

impl fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        if let Some(n) = self.limit {
            write!(f, "%{n}")?;
        }
        Ok(())
    }
}

/// Kept as its text in job files, records and frames: it prints back as written.
impl serde::Serialize for ArraySpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ArraySpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ArraySpec::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// What an element of an array knows of its array: given by the planner when it splits
/// an array into its elements (each a job of its own, named `NAME[INDEX]`), kept in the
/// element's spec so that its variables, its output names, the `%N` limit and `status`'s
/// one line per array come back with it after a restart.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArrayElement {
    /// The array's id: the id of its first element (`HYPERPLAN_ARRAY_JOB_ID`, `%A`).
    pub array_id: u64,
    /// The array's name, without the index (`NAME` of `NAME[7]`).
    pub array_name: String,
    /// This element's index (`HYPERPLAN_ARRAY_TASK_ID`, `%a`).
    pub index: u32,
    /// How many elements the array has.
    pub count: u32,
    /// Its lowest and highest index.
    pub min: u32,
    pub max: u32,
    /// The spec as written, `%N` included (what `status` shows).
    pub spec: ArraySpec,
}

impl ArrayElement {
    /// The name the element is known by: `NAME[INDEX]`.
    pub fn element_name(array_name: &str, index: u32) -> String {
        format!("{array_name}[{index}]")
    }

    /// `%N` of the array: how many of its elements may run at once.
    pub fn limit(&self) -> Option<u32> {
        self.spec.limit
    }
}

/// A job's name read as an array element's, `NAME[INDEX]`: the array's name and the
/// index; `None` for any other name.
pub fn split_element_name(name: &str) -> Option<(&str, u32)> {
    let (base, rest) = name.split_once('[')?;
    let index = rest.strip_suffix(']')?;
    if base.is_empty() {
        return None;
    }
    Some((base, number(index)?))
}

/// Plain decimal digits, no sign, fitting in a u32.
fn number(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// One part of the list; `text` is the whole spec, for messages.
fn parse_range(part: &str, text: &str) -> Result<ArrayRange, ArrayError> {
    let part_error = |what: &'static str, got: &str| ArrayError::Part {
        text: text.to_string(),
        what,
        got: got.to_string(),
    };
    let index = |s: &str| -> Result<u32, ArrayError> {
        let too_large = || ArrayError::IndexTooLarge {
            text: text.to_string(),
            got: s.to_string(),
        };
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            let n = number(s).ok_or_else(too_large)?;
            if n > MAX_ARRAY_INDEX {
                return Err(too_large());
            }
            return Ok(n);
        }
        Err(part_error("an index (a number from 0)", s))
    };
    let (range, step) = match part.split_once(':') {
        None => (part, None),
        Some((range, step)) => {
            let s = number(step)
                .filter(|s| *s > 0)
                .ok_or_else(|| part_error("a step :N with N from 1", step))?;
            (range, Some(s))
        }
    };
    let (start, end) = match range.split_once('-') {
        None if step.is_some() => return Err(part_error("a range start-end before a :step", part)),
        None => {
            let i = index(range)?;
            (i, i)
        }
        Some((a, b)) => (index(a)?, index(b)?),
    };
    if end < start {
        return Err(ArrayError::Backwards {
            text: text.to_string(),
            got: part.to_string(),
        });
    }
    // `5-5:3` is the lone index 5: one form per meaning, so it prints back the same.
    let step = if start == end { 1 } else { step.unwrap_or(1) };
    Ok(ArrayRange { start, end, step })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slurm_forms() {
        let a = ArraySpec::parse("1-5").unwrap();
        assert_eq!(a.indices(), vec![1, 2, 3, 4, 5]);
        assert_eq!(a.limit, None);
        assert_eq!(ArraySpec::parse("1,3,7-9").unwrap().indices(), vec![1, 3, 7, 8, 9]);
        assert_eq!(ArraySpec::parse("0-30:10").unwrap().indices(), vec![0, 10, 20, 30]);
        assert_eq!(ArraySpec::parse("0-31:10").unwrap().indices(), vec![0, 10, 20, 30]);
        let l = ArraySpec::parse("1-100%8").unwrap();
        assert_eq!((l.indices().len(), l.limit), (100, Some(8)));
        assert_eq!(ArraySpec::parse("7").unwrap().indices(), vec![7]);
        assert_eq!(ArraySpec::parse("3,1,3,2").unwrap().indices(), vec![1, 2, 3]);
        assert_eq!(ArraySpec::parse("0-30:10%2").unwrap().to_string(), "0-30:10%2");
        assert_eq!(ArraySpec::parse("4-4:3").unwrap().to_string(), "4");
        assert_eq!(ArraySpec::parse("1-9:1").unwrap().to_string(), "1-9");
        assert_eq!(ArraySpec::parse("4000000").unwrap().indices(), vec![MAX_ARRAY_INDEX]);
        assert_eq!(ArraySpec::parse("1-10000").unwrap().indices().len(), 10_000);
    }

    #[test]
    fn errors_say_what_was_expected() {
        let cases = [
            (
                "",
                "expected an array spec like 1-100, 1,3,7-9, 0-30:10 or 1-100%8, got \"\"",
            ),
            (
                "a-b",
                "expected an index (a number from 0) in array spec \"a-b\", got \"a\"",
            ),
            (
                "1-",
                "expected an index (a number from 0) in array spec \"1-\", got \"\"",
            ),
            (
                "1,,2",
                "expected an index (a number from 0) in array spec \"1,,2\", got \"\"",
            ),
            (
                "-1",
                "expected an index (a number from 0) in array spec \"-1\", got \"\"",
            ),
            (
                "5-1",
                "expected a range that goes up (start ≤ end) in array spec \"5-1\", got \"5-1\"",
            ),
            (
                "1-10:0",
                "expected a step :N with N from 1 in array spec \"1-10:0\", got \"0\"",
            ),
            (
                "5:2",
                "expected a range start-end before a :step in array spec \"5:2\", got \"5:2\"",
            ),
            (
                "1-10%0",
                "expected a limit %N from 1 to 10000 in array spec \"1-10%0\", got \"0\"",
            ),
            (
                "1-10%x",
                "expected a limit %N with N a number from 1 in array spec \"1-10%x\", got \"x\"",
            ),
            (
                "1-10%2%3",
                "expected a limit %N with N a number from 1 in array spec \"1-10%2%3\", got \"2%3\"",
            ),
            (
                "4000001",
                "expected indices up to 4000000 in array spec \"4000001\", got \"4000001\"",
            ),
            (
                "99999999999",
                "expected indices up to 4000000 in array spec \"99999999999\", got \"99999999999\"",
            ),
            (
                "0-10000",
                "expected at most 10000 elements, got 10001 in array spec \"0-10000\"",
            ),
            (
                "1-6000,1-6000",
                "expected at most 10000 elements, got 12000 in array spec \"1-6000,1-6000\"",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(ArraySpec::parse(text).unwrap_err().to_string(), message, "{text:?}");
        }
        let long = "1,".repeat(3000);
        assert_eq!(ArraySpec::parse(&long).unwrap_err(), ArrayError::TooLong(6000));
    }

    fn range() -> impl Strategy<Value = ArrayRange> {
        (0..MAX_ARRAY_INDEX - 2000, 0u32..2000, 1u32..50).prop_map(|(start, len, step)| ArrayRange {
            start,
            end: start + len,
            step: if len == 0 { 1 } else { step },
        })
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(ranges in prop::collection::vec(range(), 1..5), limit in prop::option::of(1u32..10_000)) {
            let spec = ArraySpec { ranges, limit };
            prop_assert_eq!(ArraySpec::parse(&spec.to_string()).unwrap(), spec);
        }

        #[test]
        fn ranges_give_their_indices(start in 0u32..1000, len in 0u32..1000, step in 1u32..40) {
            let end = start + len;
            let spec = ArraySpec::parse(&format!("{start}-{end}:{step}")).unwrap();
            let expected: Vec<u32> = (start..=end).filter(|i| (i - start) % step == 0).collect();
            prop_assert_eq!(spec.indices(), expected);
        }

        #[test]
        fn any_text_reads_or_is_refused(text in "[0-9,:%-]{0,40}") {
            let _ = ArraySpec::parse(&text);
        }
    }
}
