//! Slurm's time limit formats (`-t/--time`): `minutes`, `minutes:seconds`,
//! `hours:minutes:seconds`, `days-hours`, `days-hours:minutes`,
//! `days-hours:minutes:seconds`, and `UNLIMITED`/`infinite` (or `0`) for none.
//!
//! Slurm users bring these in their scripts; the job file's own form is
//! [`crate::timelimit`]. The result obeys the same bound, [`MAX_TIME_LIMIT_SECS`].

use crate::timelimit::MAX_TIME_LIMIT_SECS;

/// What a Slurm time looks like, for error messages.
const EXPECTED: &str = "a Slurm time: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS or UNLIMITED";

/// A Slurm time that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlurmTimeError {
    #[error("expected {EXPECTED}, got {0:?}")]
    Syntax(String),
    #[error("expected a time limit of at most 365 days ({MAX_TIME_LIMIT_SECS} seconds), got {0:?}")]
    TooLarge(String),
}

/// Reads a Slurm time into seconds; `None` for no limit (`UNLIMITED`, `infinite`, `0`,
/// as in Slurm, where a zero limit means none).
pub fn parse_slurm_time(text: &str) -> Result<Option<u64>, SlurmTimeError> {
    let syntax = || SlurmTimeError::Syntax(text.to_string());
    let t = text.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") {
        return Ok(None);
    }
    // Longest sensible text: days-hh:mm:ss with wide fields. Keeps u64 maths safe.
    if t.is_empty() || t.len() > 32 {
        return Err(syntax());
    }
    let field = |s: &str| -> Result<u64, SlurmTimeError> {
        if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(syntax());
        }
        s.parse().map_err(|_| syntax())
    };
    let secs = match t.split_once('-') {
        Some((days, rest)) => {
            let days = field(days)?;
            let parts: Vec<&str> = rest.split(':').collect();
            let (h, m, s) = match parts.as_slice() {
                [h] => (field(h)?, 0, 0),
                [h, m] => (field(h)?, field(m)?, 0),
                [h, m, s] => (field(h)?, field(m)?, field(s)?),
                _ => return Err(syntax()),
            };
            days * 86_400 + h * 3_600 + m * 60 + s
        }
        None => {
            let parts: Vec<&str> = t.split(':').collect();
            match parts.as_slice() {
                [m] => field(m)? * 60,
                [m, s] => field(m)? * 60 + field(s)?,
                [h, m, s] => field(h)? * 3_600 + field(m)? * 60 + field(s)?,
                _ => return Err(syntax()),
            }
        }
    };
    if secs == 0 {
        return Ok(None);
    }
    if secs > MAX_TIME_LIMIT_SECS {
        return Err(SlurmTimeError::TooLarge(text.to_string()));
    }
    Ok(Some(secs))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_slurm_format() {
        assert_eq!(parse_slurm_time("30"), Ok(Some(1800)));
        assert_eq!(parse_slurm_time("90:30"), Ok(Some(5430)));
        assert_eq!(parse_slurm_time("2:00:00"), Ok(Some(7200)));
        assert_eq!(parse_slurm_time("01:30:05"), Ok(Some(5405)));
        assert_eq!(parse_slurm_time("1-12"), Ok(Some(129_600)));
        assert_eq!(parse_slurm_time("1-0:30"), Ok(Some(88_200)));
        assert_eq!(parse_slurm_time("2-03:04:05"), Ok(Some(183_845)));
        assert_eq!(parse_slurm_time("0:30"), Ok(Some(30)));
        assert_eq!(parse_slurm_time(" 10 "), Ok(Some(600)));
        assert_eq!(parse_slurm_time("365-0"), Ok(Some(MAX_TIME_LIMIT_SECS)));
    }

    #[test]
    fn unlimited_is_no_limit() {
        for t in ["UNLIMITED", "unlimited", "infinite", "INFINITE", "0", "0:0", "0-0:0:0"] {
            assert_eq!(parse_slurm_time(t), Ok(None), "{t}");
        }
    }

    #[test]
    fn errors_say_what_was_expected() {
        for bad in [
            "",
            "1h",
            "1:2:3:4",
            "1-2:3:4:5",
            "-5",
            "1-",
            "a",
            "1.5",
            "1-2-3",
            "1::2",
            "x-1",
        ] {
            let e = parse_slurm_time(bad).unwrap_err();
            assert_eq!(e, SlurmTimeError::Syntax(bad.to_string()), "{bad:?}");
        }
        assert_eq!(
            parse_slurm_time("1h").unwrap_err().to_string(),
            "expected a Slurm time: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS or UNLIMITED, got \"1h\""
        );
        assert_eq!(
            parse_slurm_time("366-0").unwrap_err().to_string(),
            "expected a time limit of at most 365 days (31536000 seconds), got \"366-0\""
        );
        assert!(matches!(
            parse_slurm_time("99999999999999"),
            Err(SlurmTimeError::Syntax(_))
        ));
    }

    proptest! {
        #[test]
        fn days_hours_minutes_seconds(d in 0u64..300, h in 0u64..24, m in 0u64..60, s in 0u64..60) {
            let want = d * 86_400 + h * 3_600 + m * 60 + s;
            let got = parse_slurm_time(&format!("{d}-{h:02}:{m:02}:{s:02}")).unwrap();
            prop_assert_eq!(got, (want > 0).then_some(want));
        }

        #[test]
        fn any_text_reads_or_is_refused(text in "[0-9:-]{0,40}") {
            let _ = parse_slurm_time(&text);
        }
    }
}
