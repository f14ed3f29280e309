//! A job's begin time (Slurm's `--begin`): the instant before which it is never placed.
//! A job file says it absolutely (`begin: "2026-12-24T08:00"`, UTC unless an offset is
//! given); `hyperplan submit --begin` also takes Slurm's relative forms, which the client
//! turns into an instant with its own clock, so the planner only ever compares instants.

use crate::civil::{civil_from_days, days_from_civil};

/// Why a begin time was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BeginError {
    /// Not one of the forms a begin time takes.
    #[error(
        "expected a begin time like 2026-12-24T08:00 (UTC unless an offset like +01:00 or Z follows), 2026-12-24, 08:00[:SS] or now+N[seconds|minutes|hours|days|weeks], got {0:?}"
    )]
    Form(String),
    /// A form only the client can resolve (it needs the clock) in a job file.
    #[error(
        "expected an absolute begin time like 2026-12-24T08:00 in a job file, got {0:?} (the relative forms are for `hyperplan submit --begin`)"
    )]
    Relative(String),
    /// Before 1970, or past what an instant holds.
    #[error("begin time {0:?} is out of range")]
    Range(String),
}

/// An absolute begin time, `YYYY-MM-DD[THH:MM[:SS]]` with an optional `Z` or `±HH:MM`
/// (UTC without one), or whole Unix seconds, as Unix seconds.
pub fn parse_date(text: &str) -> Result<u64, BeginError> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map_err(|_| BeginError::Range(text.to_string()));
    }
    let form = || BeginError::Form(text.to_string());
    let num = |s: Option<&str>, len: usize| -> Result<i64, BeginError> {
        s.filter(|s| s.len() == len && s.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or_else(form)
    };
    let (date, rest) = match t.find(['T', 't', ' ']) {
        Some(i) => (&t[..i], &t[i + 1..]),
        None => (t, ""),
    };
    let mut d = date.split('-');
    let (y, mo, day) = (num(d.next(), 4)?, num(d.next(), 2)?, num(d.next(), 2)?);
    if d.next().is_some() || !(1..=12).contains(&mo) || !(1..=31).contains(&day) {
        return Err(form());
    }
    let (clock, offset) = split_offset(rest).ok_or_else(form)?;
    let secs_of_day = if clock.is_empty() {
        if !rest.is_empty() {
            return Err(form());
        }
        0
    } else {
        time_of_day(clock).ok_or_else(form)?
    };
    let secs = days_from_civil(y, mo, day) * 86_400 + secs_of_day - offset;
    u64::try_from(secs).map_err(|_| BeginError::Range(text.to_string()))
}

/// A begin time in any of Slurm's forms, relative ones against `now` (Unix seconds):
/// `now`, `now+N[seconds|minutes|hours|days|weeks]` (seconds without a unit), `HH:MM[:SS]`
/// (today, or tomorrow once that time has passed today, in UTC), or [`parse_date`]'s.
pub fn parse_begin(text: &str, now: u64) -> Result<u64, BeginError> {
    let t = text.trim();
    let form = || BeginError::Form(text.to_string());
    if let Some(rest) = t.strip_prefix("now") {
        if rest.is_empty() {
            return Ok(now);
        }
        let rest = rest.strip_prefix('+').ok_or_else(form)?;
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let n: u64 = rest[..digits].parse().map_err(|_| form())?;
        let unit = match &rest[digits..] {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86_400,
            "w" | "week" | "weeks" => 604_800,
            _ => return Err(form()),
        };
        return n
            .checked_mul(unit)
            .and_then(|d| now.checked_add(d))
            .ok_or_else(|| BeginError::Range(text.to_string()));
    }
    if t.len() <= 8 && t.contains(':') && !t.contains('-') {
        let of_day = u64::try_from(time_of_day(t).ok_or_else(form)?).map_err(|_| form())?;
        let today = now - now % 86_400 + of_day;
        return Ok(if today <= now { today + 86_400 } else { today });
    }
    parse_date(t)
}

/// Only what a job file may say (an instant, no clock needed): [`parse_date`], with
/// the relative forms named as such.
pub fn parse_file_begin(text: &str) -> Result<u64, BeginError> {
    let t = text.trim();
    if t.starts_with("now") || (t.len() <= 8 && t.contains(':') && !t.contains('-')) {
        return Err(BeginError::Relative(text.to_string()));
    }
    parse_date(t)
}

/// `2026-12-24T08:00Z` (seconds only when there are some): how `status` shows a begin time.
pub fn format_begin(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let of_day = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let (h, mi, s) = (of_day / 3600, of_day / 60 % 60, of_day % 60);
    if s == 0 {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    }
}

/// `HH:MM[:SS]` as seconds of the day.
fn time_of_day(t: &str) -> Option<i64> {
    let mut p = t.split(':');
    let part = |s: Option<&str>| -> Option<i64> {
        s.filter(|s| s.len() == 2 && s.bytes().all(|c| c.is_ascii_digit()))?
            .parse()
            .ok()
    };
    let (h, m) = (part(p.next())?, part(p.next())?);
    let s = match p.next() {
        Some(s) => part(Some(s))?,
        None => 0,
    };
    (p.next().is_none() && h <= 23 && m <= 59 && s <= 59).then_some(h * 3600 + m * 60 + s)
}

/// The clock part and the offset east of UTC in seconds (`Z`, `+01:00`, none: 0).
fn split_offset(rest: &str) -> Option<(&str, i64)> {
    if let Some(c) = rest.strip_suffix(['Z', 'z']) {
        return Some((c, 0));
    }
    if rest.len() >= 6 {
        let (c, o) = rest.split_at(rest.len() - 6);
        let sign = match o.as_bytes()[0] {
            b'+' => 1,
            b'-' => -1,
            _ => return Some((rest, 0)),
        };
        let hh: i64 = o.get(1..3)?.parse().ok()?;
        let mm: i64 = o.get(4..6)?.parse().ok()?;
        if o.as_bytes()[3] != b':' || hh > 23 || mm > 59 {
            return None;
        }
        return Some((c, sign * (hh * 3600 + mm * 60)));
    }
    Some((rest, 0))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// 2026-12-24T08:00:00Z.
    const XMAS: u64 = 1_798_099_200;

    #[test]
    fn absolute_forms_are_utc_unless_an_offset_is_given() {
        assert_eq!(parse_date("2026-12-24T08:00"), Ok(XMAS));
        assert_eq!(parse_date("2026-12-24T08:00:00Z"), Ok(XMAS));
        assert_eq!(parse_date("2026-12-24T09:00+01:00"), Ok(XMAS));
        assert_eq!(parse_date("2026-12-24"), Ok(XMAS - 8 * 3600));
        assert_eq!(parse_date("1798099200"), Ok(XMAS));
        assert!(matches!(parse_date("2026-13-01"), Err(BeginError::Form(_))));
        assert!(matches!(parse_date("2026-12-24T25:00"), Err(BeginError::Form(_))));
        assert!(matches!(parse_date("24/12/2026"), Err(BeginError::Form(_))));
    }

    #[test]
    fn relative_forms_count_from_now() {
        let now = XMAS - 3600;
        assert_eq!(parse_begin("now", now), Ok(now));
        assert_eq!(parse_begin("now+1hour", now), Ok(XMAS));
        assert_eq!(parse_begin("now+60minutes", now), Ok(XMAS));
        assert_eq!(parse_begin("now+3600", now), Ok(XMAS));
        assert_eq!(parse_begin("now+2days", now), Ok(now + 2 * 86_400));
        assert_eq!(parse_begin("now+1weeks", now), Ok(now + 604_800));
        assert_eq!(parse_begin("08:00", now), Ok(XMAS));
        // Passed today: tomorrow.
        assert_eq!(parse_begin("06:30:10", now), Ok(XMAS + 86_400 - 5390));
        assert!(matches!(parse_begin("now+1fortnight", now), Err(BeginError::Form(_))));
        assert!(matches!(parse_file_begin("now+1hour"), Err(BeginError::Relative(_))));
        assert_eq!(parse_file_begin("2026-12-24T08:00"), Ok(XMAS));
    }

    #[test]
    fn a_job_file_says_hold_and_begin() {
        let file = "name: j\nhold: true\nbegin: \"2026-12-24T09:00+01:00\"\ntasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 1}\n";
        let jobs = crate::parse_jobs(file, std::path::Path::new("j.yaml")).unwrap();
        assert!(jobs[0].hold);
        assert_eq!(jobs[0].begin, Some(XMAS));
        let bad = file.replace("2026-12-24T09:00+01:00", "now+1hour");
        let e = crate::parse_jobs(&bad, std::path::Path::new("j.yaml")).unwrap_err();
        insta::assert_snapshot!(e.to_string(), @"j.yaml:3:8: begin: expected an absolute begin time like 2026-12-24T08:00 in a job file, got \"now+1hour\" (the relative forms are for `hyperplan submit --begin`)");
    }

    #[test]
    fn begin_times_print_in_utc() {
        assert_eq!(format_begin(XMAS), "2026-12-24T08:00Z");
        assert_eq!(format_begin(XMAS + 5), "2026-12-24T08:00:05Z");
        for d in [0, 59, 60 * 86_400, XMAS, 4_102_444_800] {
            assert_eq!(parse_date(&format_begin(d)), Ok(d));
        }
    }
}
