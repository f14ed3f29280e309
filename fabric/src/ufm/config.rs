//! The UFM source's settings as written in `planner.toml` (`[[discovery]] source = "ufm"`),
//! and the small duration syntax they use (`"1h"`, `"30m"`, `"90s"`, `"1h30m"`, `"500ms"`,
//! or a number of seconds).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// Volcano's default poll period.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(3600);
/// Connect + whole-request budget of one poll.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Options of the UFM discovery source (camelCase keys, Volcano's names where it has them).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UfmConfig {
    /// `https://ufm.example:443` or a bare host (then `https://` is assumed, as Volcano does).
    pub endpoint: String,
    /// File holding `username:password` (see [`super::credentials`]); mode 0600.
    pub credentials_file: PathBuf,
    /// Skip TLS certificate and host-name verification. For lab UFMs with self-signed
    /// certificates; prefer `caFile`.
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// PEM file with the CA certificate(s) that signed UFM's certificate, used instead of
    /// the built-in Mozilla roots (a UFM appliance usually has a private CA).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// How often to poll (also once at start). Default 1 h.
    #[serde(default = "default_interval", deserialize_with = "deserialize_duration")]
    pub interval: Duration,
    /// Connect timeout, and the budget of the whole request including the body. Default 30 s.
    #[serde(default = "default_timeout", deserialize_with = "deserialize_duration")]
    pub timeout: Duration,
}

impl UfmConfig {
    /// A config with the defaults for everything but the two required fields.
    pub fn new(endpoint: impl Into<String>, credentials_file: impl Into<PathBuf>) -> Self {
        UfmConfig {
            endpoint: endpoint.into(),
            credentials_file: credentials_file.into(),
            insecure_skip_verify: false,
            ca_file: None,
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// `{endpoint}/ufmRest/resources/ports`, with `https://` added to a bare host.
    pub fn ports_url(&self) -> String {
        let base = self.endpoint.trim().trim_end_matches('/');
        if base.contains("://") {
            format!("{base}/ufmRest/resources/ports")
        } else {
            format!("https://{base}/ufmRest/resources/ports")
        }
    }
}

fn default_interval() -> Duration {
    DEFAULT_INTERVAL
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

/// A duration written as it is in the config, kept for printing it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HumanDuration(pub Duration);

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_millis() != 0 || d.as_secs() == 0 {
            return write!(f, "{}ms", d.as_millis());
        }
        let s = d.as_secs();
        let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
        if h > 0 {
            write!(f, "{h}h")?;
        }
        if m > 0 {
            write!(f, "{m}m")?;
        }
        if s > 0 {
            write!(f, "{s}s")?;
        }
        Ok(())
    }
}

/// What every duration error repeats: the forms that are accepted.
const EXPECTED: &str =
    "expected a duration such as \"1h\", \"30m\", \"90s\", \"1h30m\", \"500ms\" or a number of seconds";

/// Why a duration in the config does not read. Each message shows the accepted forms and
/// the text as written, so it can be fixed from the message alone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{}, got an empty string", EXPECTED)]
    Empty,
    /// Not digits followed by a unit (a sign, a decimal point, a unit first).
    #[error("{}, got {text:?}", EXPECTED)]
    Malformed { text: String },
    /// A number with no unit after it, inside a compound such as `"1h30"`.
    #[error("{}, got {text:?} (a number without a unit inside it)", EXPECTED)]
    NoUnit { text: String },
    #[error("{}, got {text:?} (unknown unit {unit:?}; use ms, s, m, h or d)", EXPECTED)]
    UnknownUnit { text: String, unit: String },
    /// Beyond what a [`Duration`] holds.
    #[error("{}, got {text:?} (too large)", EXPECTED)]
    TooLarge { text: String },
    /// Zero: a zero poll period or timeout is a mistake, not a request to spin.
    #[error("expected a duration greater than zero, got {text:?}")]
    Zero { text: String },
}

/// Parses `"1h"`, `"30m"`, `"90s"`, `"500ms"`, `"2d"`, compounds such as `"1h30m"`, and a
/// bare number of seconds (`"90"`). Zero is refused: a zero poll period or timeout is a
/// mistake, not a request to spin.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    let too_large = || DurationError::TooLarge { text: text.to_string() };
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = s.parse().map_err(|_| too_large())?;
        return positive(Duration::from_secs(secs), text);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::Malformed { text: text.to_string() });
        }
        let (num, tail) = rest.split_at(digits);
        let unit_len = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, tail) = tail.split_at(unit_len);
        let n: u64 = num.parse().map_err(|_| too_large())?;
        let part = match unit {
            "ms" => Some(Duration::from_millis(n)),
            "s" => Some(Duration::from_secs(n)),
            "m" => n.checked_mul(60).map(Duration::from_secs),
            "h" => n.checked_mul(3600).map(Duration::from_secs),
            "d" => n.checked_mul(86_400).map(Duration::from_secs),
            "" => return Err(DurationError::NoUnit { text: text.to_string() }),
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text.to_string(),
                    unit: other.to_string(),
                });
            }
        };
        total = part.and_then(|p| total.checked_add(p)).ok_or_else(too_large)?;
        rest = tail;
    }
    positive(total, text)
}

fn positive(d: Duration, text: &str) -> Result<Duration, DurationError> {
    if d.is_zero() {
        Err(DurationError::Zero { text: text.to_string() })
    } else {
        Ok(d)
    }
}

/// Serde adapter: a string in [`parse_duration`]'s syntax or a number of seconds.
pub fn deserialize_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"1h\", \"30m\", \"90s\" or a number of seconds")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            parse_duration(v).map_err(E::custom)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            positive(Duration::from_secs(v), &v.to_string()).map_err(E::custom)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            let secs = u64::try_from(v).map_err(|_| E::custom(format!("expected a positive duration, got {v}")))?;
            self.visit_u64(secs)
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
            match Duration::try_from_secs_f64(v) {
                Ok(d) => positive(d, &v.to_string()).map_err(E::custom),
                Err(_) => Err(E::custom(format!("expected a positive duration in seconds, got {v}"))),
            }
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn durations_in_every_accepted_form() {
        for (text, secs_ms) in [
            ("1h", 3_600_000),
            ("30m", 1_800_000),
            ("90s", 90_000),
            ("90", 90_000),
            (" 1h30m ", 5_400_000),
            ("1h0m5s", 3_605_000),
            ("500ms", 500),
            ("1s500ms", 1_500),
            ("2d", 172_800_000),
        ] {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(secs_ms)), "{text:?}");
        }
    }

    #[test]
    fn bad_durations_say_what_was_expected() {
        for (text, part) in [
            ("", "empty"),
            ("h", "got \"h\""),
            ("1x", "unknown unit \"x\""),
            ("1h30", "without a unit"),
            ("0s", "greater than zero"),
            ("0", "greater than zero"),
            ("-5s", "got \"-5s\""),
            ("1.5h", "without a unit"),
            ("99999999999999999999s", "too large"),
            ("9999999999999999h", "too large"),
        ] {
            let e = parse_duration(text).unwrap_err().to_string();
            assert!(e.contains(part), "{text:?}: {e}");
        }
    }

    #[test]
    fn human_duration_prints_back() {
        for text in ["1h", "30m", "1h30m5s", "500ms"] {
            assert_eq!(HumanDuration(parse_duration(text).unwrap()).to_string(), text);
        }
    }

    #[test]
    fn config_from_json_with_defaults_and_both_duration_forms() {
        let c: UfmConfig =
            serde_json::from_str(r#"{"endpoint": "ufm.lab", "credentialsFile": "/etc/hyperplan/ufm"}"#).unwrap();
        assert_eq!(c, UfmConfig::new("ufm.lab", "/etc/hyperplan/ufm"));
        assert_eq!(c.interval, Duration::from_secs(3600));
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(c.ports_url(), "https://ufm.lab/ufmRest/resources/ports");

        let c: UfmConfig = serde_json::from_str(
            r#"{"endpoint": "http://10.0.0.1:8080/", "credentialsFile": "c", "insecureSkipVerify": true,
                "interval": "30m", "timeout": 5, "caFile": "/etc/ufm-ca.pem"}"#,
        )
        .unwrap();
        assert!(c.insecure_skip_verify);
        assert_eq!(c.interval, Duration::from_secs(1800));
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.ca_file, Some(PathBuf::from("/etc/ufm-ca.pem")));
        assert_eq!(c.ports_url(), "http://10.0.0.1:8080/ufmRest/resources/ports");

        let e = serde_json::from_str::<UfmConfig>(r#"{"endpoint": "e", "credentialsFile": "c", "interval": "soon"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected a duration"), "{e}");
        let e = serde_json::from_str::<UfmConfig>(r#"{"endpoint": "e", "credentialsFile": "c", "timeout": -1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("positive"), "{e}");
    }
}
