//! Job dependencies in Slurm's words (`--dependency`, `#SBATCH -d`):
//! `afterok:prep`, `afterok:a:b`, `after:123+10`, `afterany:1,afternotok:2` (all of),
//! `afterok:a?afterok:b` (any of), `singleton`.
//!
//! Targets are job names or numeric ids (digits only: an id). `,` and `?` do not mix in
//! one expression, as in Slurm. `+minutes` is for `after` only (started at least that
//! long ago). Bounds keep untrusted text cheap: [`MAX_DEPENDENCY_LEN`] characters.

use std::fmt;

use crate::names::{NameKind, check_name};

/// Longest expression read.
pub const MAX_DEPENDENCY_LEN: usize = 4096;

/// What an expression looks like, for error messages.
const EXPECTED: &str = "a dependency like afterok:JOB[:JOB...], after:JOB[+MINUTES], afterany:A,afternotok:B, afterok:A?afterok:B or singleton";

/// An expression that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DependencyError {
    #[error("expected {EXPECTED}, got {0:?}")]
    Syntax(String),
    #[error(
        "expected a kind (after, afterok, afternotok, afterany, aftercorr or singleton) in dependency {text:?}, got {got:?}"
    )]
    Kind { text: String, got: String },
    #[error("expected {what} in dependency {text:?}, got {got:?}")]
    Part { text: String, what: String, got: String },
    #[error("expected either , (all of) or ? (any of) in dependency {0:?}, not both")]
    Mixed(String),
    #[error("expected a dependency of at most {MAX_DEPENDENCY_LEN} characters, got {0}")]
    TooLong(usize),
}

/// When a job may start, relative to its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AfterKind {
    /// The target started (or was cancelled).
    After,
    /// The target completed with exit code 0.
    AfterOk,
    /// The target failed.
    AfterNotOk,
    /// The target ended, however.
    AfterAny,
    /// Element i of this array after element i of the target array succeeded.
    AfterCorr,
}

impl AfterKind {
    const ALL: [AfterKind; 5] = [
        AfterKind::After,
        AfterKind::AfterOk,
        AfterKind::AfterNotOk,
        AfterKind::AfterAny,
        AfterKind::AfterCorr,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AfterKind::After => "after",
            AfterKind::AfterOk => "afterok",
            AfterKind::AfterNotOk => "afternotok",
            AfterKind::AfterAny => "afterany",
            AfterKind::AfterCorr => "aftercorr",
        }
    }
}

/// The job waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Id(u64),
    Name(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Id(id) => write!(f, "{id}"),
            Target::Name(n) => f.write_str(n),
        }
    }
}

/// One target of a condition, with `after`'s optional delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterTarget {
    pub target: Target,
    /// `+N`: minutes after the target started (`after` only).
    pub delay_minutes: Option<u32>,
}

/// One condition of the expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `kind:target[:target...]`: every target meets `kind`.
    After { kind: AfterKind, targets: Vec<AfterTarget> },
    /// One running job of this name and user at a time.
    Singleton,
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::Singleton => f.write_str("singleton"),
            Condition::After { kind, targets } => {
                f.write_str(kind.as_str())?;
                for t in targets {
                    write!(f, ":{}", t.target)?;
                    if let Some(m) = t.delay_minutes {
                        write!(f, "+{m}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// How the conditions combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// `,`: every condition (also the form of a single one).
    All,
    /// `?`: any one.
    Any,
}

/// A parsed `--dependency` expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub combine: Combine,
    /// Never empty.
    pub conditions: Vec<Condition>,
}

impl Dependency {
    /// Reads an expression in Slurm's form.
    pub fn parse(text: &str) -> Result<Dependency, DependencyError> {
        if text.len() > MAX_DEPENDENCY_LEN {
            return Err(DependencyError::TooLong(text.len()));
        }
        let t = text.trim();
        if t.is_empty() {
            return Err(DependencyError::Syntax(text.to_string()));
        }
        let combine = match (t.contains(','), t.contains('?')) {
            (true, true) => return Err(DependencyError::Mixed(text.to_string())),
            (false, true) => Combine::Any,
            _ => Combine::All,
        };
        let sep = if combine == Combine::Any { '?' } else { ',' };
        let conditions = t
            .split(sep)
            .map(|c| parse_condition(c, text))
            .collect::<Result<Vec<_>, _>>()?;
        // One condition reads the same either way: keep one form per meaning.
        let combine = if conditions.len() == 1 { Combine::All } else { combine };
        Ok(Dependency { combine, conditions })
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = if self.combine == Combine::Any { "?" } else { "," };
        for (i, c) in self.conditions.iter().enumerate() {
            if i > 0 {
                f.write_str(sep)?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// Kept as its text in job files, records and frames.
impl serde::Serialize for Dependency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Dependency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Dependency::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Dependency {
    /// Whether it has `singleton`.
    pub fn has_singleton(&self) -> bool {
        self.conditions.iter().any(|c| matches!(c, Condition::Singleton))
    }
}

fn parse_condition(part: &str, text: &str) -> Result<Condition, DependencyError> {
    let part_error = |what: &str, got: &str| DependencyError::Part {
        text: text.to_string(),
        what: what.to_string(),
        got: got.to_string(),
    };
    let mut pieces = part.split(':');
    let kind_text = pieces.next().unwrap_or_default();
    if kind_text == "singleton" {
        return match pieces.next() {
            None => Ok(Condition::Singleton),
            Some(_) => Err(part_error("singleton without targets", part)),
        };
    }
    let Some(kind) = AfterKind::ALL.into_iter().find(|k| k.as_str() == kind_text) else {
        return Err(DependencyError::Kind {
            text: text.to_string(),
            got: kind_text.to_string(),
        });
    };
    let mut targets = Vec::new();
    for piece in pieces {
        let (name, delay) = match piece.split_once('+') {
            None => (piece, None),
            Some(_) if kind != AfterKind::After => {
                return Err(part_error(
                    &format!("a job name or id after {kind_text}: (+minutes is for after only)"),
                    piece,
                ));
            }
            Some((name, minutes)) => {
                let m = if !minutes.is_empty() && minutes.bytes().all(|b| b.is_ascii_digit()) {
                    minutes.parse::<u32>().ok()
                } else {
                    None
                };
                (
                    name,
                    Some(m.ok_or_else(|| part_error("minutes after + (a number)", minutes))?),
                )
            }
        };
        targets.push(AfterTarget {
            target: target(name).ok_or_else(|| part_error("a job name or numeric id", name))?,
            delay_minutes: delay,
        });
    }
    if targets.is_empty() {
        return Err(part_error(
            &format!("{kind_text}:JOB (at least one job name or id)"),
            part,
        ));
    }
    Ok(Condition::After { kind, targets })
}

/// A name or an id; `None` for neither.
fn target(text: &str) -> Option<Target> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok().map(Target::Id);
    }
    check_name(NameKind::Job, text).ok()?;
    Some(Target::Name(text.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    fn name(n: &str) -> AfterTarget {
        AfterTarget {
            target: Target::Name(n.into()),
            delay_minutes: None,
        }
    }

    #[test]
    fn slurm_forms() {
        let d = Dependency::parse("afterok:prep").unwrap();
        assert_eq!(
            d,
            Dependency {
                combine: Combine::All,
                conditions: vec![Condition::After {
                    kind: AfterKind::AfterOk,
                    targets: vec![name("prep")]
                }]
            }
        );
        let d = Dependency::parse("after:123+10:train").unwrap();
        assert_eq!(
            d.conditions,
            vec![Condition::After {
                kind: AfterKind::After,
                targets: vec![
                    AfterTarget {
                        target: Target::Id(123),
                        delay_minutes: Some(10)
                    },
                    name("train")
                ]
            }]
        );
        let d = Dependency::parse("afterany:1,afternotok:2,singleton").unwrap();
        assert_eq!((d.combine, d.conditions.len()), (Combine::All, 3));
        let d = Dependency::parse("afterok:a?afterok:b").unwrap();
        assert_eq!((d.combine, d.conditions.len()), (Combine::Any, 2));
        assert_eq!(
            Dependency::parse("aftercorr:sweep").unwrap().to_string(),
            "aftercorr:sweep"
        );
        assert!(
            Dependency::parse("singleton?")
                .unwrap_err()
                .to_string()
                .contains("got \"\"")
        );
    }

    #[test]
    fn errors_say_what_was_expected() {
        let cases = [
            (
                "",
                "expected a dependency like afterok:JOB[:JOB...], after:JOB[+MINUTES], afterany:A,afternotok:B, afterok:A?afterok:B or singleton, got \"\"",
            ),
            (
                "afterok",
                "expected afterok:JOB (at least one job name or id) in dependency \"afterok\", got \"afterok\"",
            ),
            (
                "afterok:",
                "expected a job name or numeric id in dependency \"afterok:\", got \"\"",
            ),
            (
                "aftr:1",
                "expected a kind (after, afterok, afternotok, afterany, aftercorr or singleton) in dependency \"aftr:1\", got \"aftr\"",
            ),
            (
                "afterok:1,afterok:2?afterok:3",
                "expected either , (all of) or ? (any of) in dependency \"afterok:1,afterok:2?afterok:3\", not both",
            ),
            (
                "afterok:1+5",
                "expected a job name or id after afterok: (+minutes is for after only) in dependency \"afterok:1+5\", got \"1+5\"",
            ),
            (
                "after:1+x",
                "expected minutes after + (a number) in dependency \"after:1+x\", got \"x\"",
            ),
            (
                "singleton:a",
                "expected singleton without targets in dependency \"singleton:a\", got \"singleton:a\"",
            ),
            (
                "afterok:a b",
                "expected a job name or numeric id in dependency \"afterok:a b\", got \"a b\"",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(Dependency::parse(text).unwrap_err().to_string(), message, "{text:?}");
        }
        assert_eq!(
            Dependency::parse(&"a".repeat(5000)).unwrap_err(),
            DependencyError::TooLong(5000)
        );
    }

    fn target_strategy() -> impl Strategy<Value = Target> {
        prop_oneof![
            any::<u64>().prop_map(Target::Id),
            "[a-z][a-z0-9-]{0,10}".prop_map(Target::Name),
        ]
    }

    fn condition() -> impl Strategy<Value = Condition> {
        prop_oneof![
            Just(Condition::Singleton),
            (
                prop::sample::select(AfterKind::ALL.to_vec()),
                prop::collection::vec((target_strategy(), prop::option::of(0u32..10_000)), 1..4)
            )
                .prop_map(|(kind, targets)| Condition::After {
                    kind,
                    targets: targets
                        .into_iter()
                        .map(|(target, delay)| AfterTarget {
                            target,
                            delay_minutes: delay.filter(|_| kind == AfterKind::After),
                        })
                        .collect(),
                }),
        ]
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(conditions in prop::collection::vec(condition(), 1..4), any in any::<bool>()) {
            let combine = if any && conditions.len() > 1 { Combine::Any } else { Combine::All };
            let d = Dependency { combine, conditions };
            prop_assert_eq!(Dependency::parse(&d.to_string()).unwrap(), d);
        }

        #[test]
        fn any_text_reads_or_is_refused(text in "[a-z0-9:,?+ ]{0,40}") {
            let _ = Dependency::parse(&text);
        }
    }
}
