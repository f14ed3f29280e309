//! The one rule for names hyperplan keeps (jobs, tasks, nodes, HyperNodes), used by every
//! place a name arrives: job and cluster files, HyperNode manifests, fabric imports,
//! agent hellos, requests over the wire.
//!
//! A name is 1–253 characters of ASCII letters, digits, `.`, `_` and `-`, starting with a
//! letter or digit (job and task names: at most 63, they become Unix-ish identifiers and
//! rank environment values). Anything else could forge table rows, move a terminal cursor
//! or walk out of a directory (`../../etc/passwd`), so it is refused where it comes in,
//! not cleaned up where it goes out.

use std::fmt;

/// What a name names; it sets the length limit and the word in messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    Job,
    Task,
    Node,
    HyperNode,
    /// A `[[queue]]` name.
    Queue,
    /// A user name (the simulator's `user`; Unix login names are stricter).
    User,
    /// A `[[priorityClass]]` name.
    PriorityClass,
    /// An `[[account]]` name (what a job is charged to).
    Account,
}

impl NameKind {
    /// Longest name of this kind, in characters (= bytes: names are ASCII).
    pub const fn max_len(self) -> usize {
        match self {
            NameKind::Job
            | NameKind::Task
            | NameKind::Queue
            | NameKind::User
            | NameKind::PriorityClass
            | NameKind::Account => MAX_JOB_NAME,
            NameKind::Node | NameKind::HyperNode => MAX_NAME,
        }
    }
}

impl NameKind {
    /// `a` or `an`, as the word in messages needs.
    pub const fn article(self) -> &'static str {
        match self {
            NameKind::Account => "an",
            _ => "a",
        }
    }
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Job => "job",
            NameKind::Task => "task",
            NameKind::Node => "node",
            NameKind::HyperNode => "HyperNode",
            NameKind::Queue => "queue",
            NameKind::User => "user",
            NameKind::PriorityClass => "priority class",
            NameKind::Account => "account",
        })
    }
}

/// Longest node or HyperNode name (a DNS name's limit).
pub const MAX_NAME: usize = 253;
/// Longest job or task name (a DNS label's limit).
pub const MAX_JOB_NAME: usize = 63;

/// A name that breaks the rule; the message says what was expected and what was got
/// (escaped, and cut short when long).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected {article} {kind} name of 1-{max} letters, digits, `.`, `_` or `-` starting with a letter or digit, got {got}: {why}", article = kind.article(), max = kind.max_len())]
pub struct NameError {
    pub kind: NameKind,
    /// The offending name, escaped and shortened for printing.
    pub got: String,
    pub why: String,
}

/// Checks `name` as a name of `kind`.
pub fn check_name(kind: NameKind, name: &str) -> Result<(), NameError> {
    let fail = |why: String| {
        Err(NameError {
            kind,
            got: format!("\"{}\"", escape(&shorten(name, 40))),
            why,
        })
    };
    let Some(first) = name.chars().next() else {
        return fail("it is empty".into());
    };
    let len = name.chars().count();
    if len > kind.max_len() {
        return fail(format!("it is {len} characters long"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return fail(format!("{} is not allowed", describe_char(bad)));
    }
    if !first.is_ascii_alphanumeric() {
        return fail(format!("it starts with {}", describe_char(first)));
    }
    Ok(())
}

/// Checks a job name as a node meets it: a [`NameKind::Job`] name, or an element of an
/// array, `NAME[INDEX]` (the planner names each element so), whose NAME is one. The
/// agent makes directories and cgroups of it: the brackets and digits are safe there.
pub fn check_job_name(name: &str) -> Result<(), NameError> {
    match crate::array::split_element_name(name) {
        Some((base, _)) => check_name(NameKind::Job, base),
        None => check_name(NameKind::Job, name),
    }
}

fn describe_char(c: char) -> String {
    if c == ' ' {
        "a space".into()
    } else if c.is_control() || is_invisible(c) {
        format!("the character {}", escape(&c.to_string()))
    } else {
        format!("`{c}`")
    }
}

/// Format characters that reorder or hide text: bidi overrides and isolates, zero-width
/// characters, the BOM.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}' | '\u{061c}')
}

fn escape_char(c: char) -> String {
    c.escape_unicode().to_string()
}

/// `s` safe to print on a terminal: control characters (ESC, NUL, newlines, tabs, DEL,
/// C1) and bidi/zero-width format characters become `\u{…}` escapes (`\n`, `\t`, `\\`
/// kept short); everything else is unchanged. For text that was never validated
/// (labels, reasons, messages quoting a file).
pub fn escape(s: &str) -> String {
    if !s.chars().any(needs_escape) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) => out.push_str(&escape_char(c)),
            c => out.push(c),
        }
    }
    out
}

/// [`escape`] for whole lines of output: newlines stay newlines, every other control or
/// format character is escaped. Escaped text passes through unchanged.
pub fn escape_text(s: &str) -> String {
    if !s.chars().any(|c| c != '\n' && needs_escape(c)) {
        return s.to_string();
    }
    s.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

fn needs_escape(c: char) -> bool {
    c.is_control() || is_invisible(c)
}

/// `s` cut to at most `max` characters, the last of them `…` when anything was cut.
pub fn shorten(s: &str, max: usize) -> String {
    if max == 0 {
        return String::new();
    }
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some(_) => {
            let keep: String = s.chars().take(max - 1).collect();
            format!("{keep}…")
        }
    }
}

/// An IP address (v4 or v6) or a DNS host name (labels of letters, digits and `-`, at
/// most 63 bytes each, 253 in all): what may stand in `MASTER_ADDR` (an agent's
/// `advertiseAddress`), nothing a shell or an environment could misread.
pub fn is_host_or_ip(a: &str) -> bool {
    if a.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !a.is_empty()
        && a.len() <= 253
        && a.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// `HOST:PORT`: a host name or IP address ([`is_host_or_ip`]; IPv6 in brackets) and a
/// port number (planner addresses, etcd endpoints, `[ha] advertise`).
pub fn is_host_port(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    let host = match host.strip_prefix('[') {
        Some(v6) => match v6.strip_suffix(']') {
            Some(v6) if v6.parse::<std::net::Ipv6Addr>().is_ok() => v6,
            _ => return false,
        },
        // An IPv6 address needs its brackets.
        None if host.contains(':') => return false,
        None => host,
    };
    port.parse::<u16>().is_ok() && is_host_or_ip(host)
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn host_and_port() {
        for good in ["head-1:7400", "10.0.0.1:2379", "[fe80::1]:7400", "n001.ib.example:1"] {
            assert!(is_host_port(good), "{good}");
        }
        for bad in [
            "head-1",
            "head-1:99999",
            "head-1:x",
            "fe80::1:7400",
            "[zz]:1",
            ":7400",
            "a b:1",
            "a/b:1",
        ] {
            assert!(!is_host_port(bad), "{bad}");
        }
    }

    #[test]
    fn host_names_and_ip_addresses() {
        for good in ["10.0.0.7", "fe80::1", "n001", "n001.ib.example", "a-b.c"] {
            assert!(is_host_or_ip(good), "{good}");
        }
        for bad in [
            "",
            "a b",
            "a;b",
            "-a",
            "a..b",
            "a.",
            "$(id)",
            &"a".repeat(64),
            &"a.".repeat(130),
        ] {
            assert!(!is_host_or_ip(bad), "{bad}");
        }
    }

    #[test]
    fn good_names() {
        for n in ["a", "gpu001", "leaf-1", "s1.r2_x", "0abc", &"a".repeat(253)] {
            check_name(NameKind::Node, n).unwrap();
        }
        check_name(NameKind::Job, &"j".repeat(63)).unwrap();
    }

    #[test]
    fn bad_names() {
        for n in [
            "",
            "-a",
            ".hidden",
            "../../etc/passwd",
            "a b",
            "a\u{1b}[31m",
            "a\0",
            "a\nb",
            "evil\u{202e}txt",
            "ünïcode",
            &"a".repeat(254),
        ] {
            assert!(check_name(NameKind::Node, n).is_err(), "{n:?}");
        }
        assert!(check_name(NameKind::Task, &"t".repeat(64)).is_err());
    }

    #[test]
    fn messages_say_what_and_why() {
        let e = check_name(NameKind::Job, "a\u{1b}[2J").unwrap_err();
        assert_eq!(
            e.to_string(),
            "expected a job name of 1-63 letters, digits, `.`, `_` or `-` starting with a letter or digit, got \"a\\u{1b}[2J\": the character \\u{1b} is not allowed"
        );
        let e = check_name(NameKind::Node, &"x".repeat(70_000)).unwrap_err();
        assert!(e.to_string().len() < 300, "{e}");
        assert!(e.why.contains("70000 characters"), "{e}");
    }

    #[test]
    fn escape_neutralises_terminal_controls() {
        assert_eq!(escape("plain ü"), "plain ü");
        assert_eq!(escape("a\nb\u{1b}c\u{202e}d\0"), "a\\nb\\u{1b}c\\u{202e}d\\u{0}");
    }

    #[test]
    fn escape_text_keeps_lines() {
        assert_eq!(escape_text("a\nb\u{1b}\n"), "a\nb\\u{1b}\n");
        assert_eq!(escape_text("plain\n"), "plain\n");
    }

    #[test]
    fn shorten_marks_the_cut() {
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("abcd", 4), "abcd");
        assert_eq!(shorten("ééééé", 3), "éé…");
    }

    #[test]
    fn array_elements_are_job_names_on_nodes() {
        for good in ["sweep[7]", "sweep[0]", "a.b-c[4000000]", "train"] {
            assert_eq!(check_job_name(good), Ok(()), "{good}");
        }
        for bad in [
            "[7]",
            "sweep[]",
            "sweep[x]",
            "sweep[1]]",
            "../x[1]",
            "a b[1]",
            "sweep[-1]",
            "s[1]/x",
        ] {
            assert!(check_job_name(bad).is_err(), "{bad}");
        }
        // Only on nodes: a job file's name stays a plain name.
        assert!(check_name(NameKind::Job, "sweep[7]").is_err());
    }
}
