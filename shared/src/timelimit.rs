//! Job time limits: `timeLimit: 3600`, `90m`, `1h30m`, `2h`, `45s`, `1d`.
//!
//! A bare integer is seconds. Otherwise the text is one or more `<digits><unit>` parts with
//! units `d`, `h`, `m`, `s`, largest first, each at most once (`1h30m`, `1d12h`). The
//! result must be more than zero seconds and at most [`MAX_TIME_LIMIT_SECS`] (365 days:
//! what runs longer is a service, not a job). [`format_time_limit`] prints the same form
//! back.

/// What a time limit looks like, for error messages.
const EXPECTED: &str = "expected seconds (e.g. 3600) or a duration like 90m, 1h30m, 2h, 45s, 1d";

/// A time limit that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeLimitError {
    #[error("{EXPECTED}, got {0:?}")]
    Syntax(String),
    #[error("expected units largest first, each once (d, h, m, s, as in 1h30m), got {0:?}")]
    Order(String),
    #[error("expected a time limit above 0 seconds, got {0:?}")]
    Zero(String),
    #[error("expected a time limit of at most 365d ({MAX_TIME_LIMIT_SECS} seconds), got {text:?}")]
    TooLarge { text: String },
}

/// The longest time limit a job may ask for: 365 days.
pub const MAX_TIME_LIMIT_SECS: u64 = 365 * 86_400;

/// Seconds per unit, largest first.
const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

/// Reads a time limit into seconds.
pub fn parse_time_limit(text: &str) -> Result<u64, TimeLimitError> {
    let syntax = || TimeLimitError::Syntax(text.to_string());
    let too_large = || TimeLimitError::TooLarge { text: text.to_string() };
    let t = text.trim();
    if t.is_empty() {
        return Err(syntax());
    }
    let secs = if t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse::<u64>().map_err(|_| too_large())?
    } else {
        let mut total: u64 = 0;
        // Index into UNITS of the next unit allowed (units come largest first).
        let mut next_unit = 0;
        let mut rest = t;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(syntax());
            }
            let n: u64 = rest[..digits].parse().map_err(|_| too_large())?;
            let unit = rest[digits..].chars().next().ok_or_else(syntax)?;
            let Some(i) = UNITS.iter().position(|(u, _)| *u == unit.to_ascii_lowercase()) else {
                return Err(syntax());
            };
            if i < next_unit {
                return Err(TimeLimitError::Order(text.to_string()));
            }
            next_unit = i + 1;
            let part = n.checked_mul(UNITS[i].1).ok_or_else(too_large)?;
            total = total.checked_add(part).ok_or_else(too_large)?;
            rest = &rest[digits + unit.len_utf8()..];
        }
        total
    };
    if secs == 0 {
        return Err(TimeLimitError::Zero(text.to_string()));
    }
    if secs > MAX_TIME_LIMIT_SECS {
        return Err(too_large());
    }
    Ok(secs)
}

/// Prints seconds as [`parse_time_limit`] reads them: `1h30m`, `45s`, `1d2h`; `0s` for 0.
pub fn format_time_limit(secs: u64) -> String {
    if secs == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, size) in UNITS {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn seconds_and_durations() {
        assert_eq!(parse_time_limit("3600"), Ok(3600));
        assert_eq!(parse_time_limit("90m"), Ok(5400));
        assert_eq!(parse_time_limit("1h30m"), Ok(5400));
        assert_eq!(parse_time_limit("2h"), Ok(7200));
        assert_eq!(parse_time_limit("45s"), Ok(45));
        assert_eq!(parse_time_limit("1d"), Ok(86_400));
        assert_eq!(parse_time_limit("1d2h3m4s"), Ok(93_784));
        assert_eq!(parse_time_limit("2H"), Ok(7200));
        assert_eq!(parse_time_limit(" 10m "), Ok(600));
    }

    #[test]
    fn errors_say_what_was_expected() {
        for bad in ["", "1x", "h", "1h30", "1.5h", "-5", "1 h", "1h 30m", "m30", "1hé"] {
            let e = parse_time_limit(bad).unwrap_err();
            assert!(matches!(e, TimeLimitError::Syntax(_)), "{bad:?}: {e:?}");
            assert!(e.to_string().starts_with("expected seconds"), "{e}");
        }
        assert_eq!(parse_time_limit("30m1h"), Err(TimeLimitError::Order("30m1h".into())));
        assert_eq!(parse_time_limit("1h1h"), Err(TimeLimitError::Order("1h1h".into())));
        assert_eq!(parse_time_limit("0"), Err(TimeLimitError::Zero("0".into())));
        assert_eq!(parse_time_limit("0h0m"), Err(TimeLimitError::Zero("0h0m".into())));
        assert!(matches!(
            parse_time_limit("99999999999999999999"),
            Err(TimeLimitError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_time_limit("999999999999999999d"),
            Err(TimeLimitError::TooLarge { .. })
        ));
        // Past a year, or u64::MAX (which once overflowed the shepherd's clock).
        assert_eq!(parse_time_limit("365d"), Ok(MAX_TIME_LIMIT_SECS));
        for long in ["366d", "31536001", "18446744073709551615"] {
            let e = parse_time_limit(long).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("expected a time limit of at most 365d (31536000 seconds), got {long:?}")
            );
        }
    }

    #[test]
    fn formats_round_trip() {
        for secs in [1, 45, 60, 5400, 7200, 86_400, 93_784, MAX_TIME_LIMIT_SECS] {
            assert_eq!(parse_time_limit(&format_time_limit(secs)), Ok(secs), "{secs}");
        }
        assert_eq!(format_time_limit(5400), "1h30m");
        assert_eq!(format_time_limit(0), "0s");
    }
}
