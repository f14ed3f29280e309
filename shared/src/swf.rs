//! A reader for the Standard Workload Format (SWF) of the Parallel Workloads Archive.
//!
//! Benches and `hyperplan simulate --swf` replay real job logs so that the planner is measured
//! on the load real clusters saw, not only on synthetic jobs. An SWF log is text: lines that
//! start with `;` are header comments (`; MaxNodes: 100`), every other non-blank line is one
//! job of 18 whitespace-separated numbers, `-1` meaning unknown. Logs are untrusted input: the
//! reader reads line by line, bounds each line ([`MAX_LINE_BYTES`]) and the file
//! ([`MAX_SWF_FILE`]), and every problem names the file, the line and the field.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

/// Largest SWF file, in bytes (1 GiB; the largest logs of the archive are a few hundred MiB).
pub const MAX_SWF_FILE: u64 = 1 << 30;

/// Longest line, in bytes, without its line end (64 KiB; a job line is under 200 bytes).
pub const MAX_LINE_BYTES: usize = 64 << 10;

/// Number of fields of a job line; further fields are ignored.
pub const FIELDS: usize = 18;

/// The name of each field, by number − 1, as the archive's format description gives it.
const FIELD_NAMES: [&str; FIELDS] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable",
    "queue",
    "partition",
    "preceding job",
    "think time",
];

/// One job line of a log. Times are in seconds; `None` is the log's `-1` (unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwfJob {
    /// Field 1, the job number.
    pub id: u64,
    /// Field 2, seconds since the start of the log.
    pub submit: u64,
    /// Field 3, rounded to whole seconds (some logs write decimals here).
    pub wait: Option<u64>,
    /// Field 4, the run time.
    pub runtime: Option<u64>,
    /// Processors the job used: field 5 (allocated) when above 0, else field 8 (requested)
    /// when above 0.
    pub procs: Option<u32>,
    /// Field 8, as written.
    pub requested_procs: Option<u32>,
    /// Field 9, the time limit the user asked for.
    pub requested_time: Option<u64>,
    /// Field 11: 1 completed, 0 failed, 5 cancelled, -1 unknown (others in some logs).
    pub status: i32,
    /// Field 12.
    pub user: Option<u32>,
    /// Field 13.
    pub group: Option<u32>,
    /// Field 15.
    pub queue: Option<u32>,
    /// Field 16.
    pub partition: Option<u32>,
    /// The 1-based line of the file this job was read from.
    pub line: usize,
}

/// A log: its header, in file order, and its jobs, in file order (not sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwfLog {
    /// `; Key: value` comment lines, e.g. (`MaxNodes`, `100`). A following comment line
    /// indented further continues the value (joined with `\n`).
    pub header: Vec<(String, String)>,
    pub jobs: Vec<SwfJob>,
}

impl SwfLog {
    /// The first header value for `key` (ASCII case ignored).
    pub fn header_value(&self, key: &str) -> Option<&str> {
        self.header
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }

    /// The machine's size in processors: `MaxProcs`, else `MaxNodes` (the first number of
    /// the value, when above 0).
    pub fn max_procs(&self) -> Option<u32> {
        let number = |key| {
            self.header_value(key)
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u32>().ok())
                .filter(|&n| n > 0)
        };
        number("MaxProcs").or_else(|| number("MaxNodes"))
    }

    /// The `Acknowledge` line: whom the archive asks users of the log to credit.
    pub fn acknowledge(&self) -> Option<&str> {
        self.header_value("Acknowledge")
    }
}

/// A log that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SwfError {
    /// The cause is in the message, not chained: `{:#}` would print it twice.
    #[error("cannot read {}: {error}", path.display())]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{}: not a regular file ({kind}); expected an SWF log file", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{}: larger than the limit of 1 GiB ({MAX_SWF_FILE} bytes); expected an SWF log file", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}:{line}: line longer than 64 KiB ({MAX_LINE_BYTES} bytes); expected a job line or a `;` comment", path.display())]
    LineTooLong { path: PathBuf, line: usize },
    #[error("{}:{line}: not UTF-8 text", path.display())]
    NotUtf8 { path: PathBuf, line: usize },
    #[error("{}:{line}: expected {FIELDS} fields, got {got}", path.display())]
    FieldCount { path: PathBuf, line: usize, got: usize },
    #[error("{}:{line}: field {field} ({}): {problem}", path.display(), FIELD_NAMES[field - 1])]
    Field {
        path: PathBuf,
        line: usize,
        /// 1-based, as the format numbers them.
        field: usize,
        problem: FieldProblem,
    },
    #[error("{}: no jobs; expected lines of {FIELDS} numbers besides the `;` header", path.display())]
    NoJobs { path: PathBuf },
}

/// What is wrong with one field of a job line. `got` is the text (cut at 40 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    #[error("expected a number (or -1 for unknown), got {got:?}")]
    NotANumber { got: String },
    #[error("expected an integer{}, got {got:?}", or_unknown(*unknown_ok))]
    NotAnInteger { got: String, unknown_ok: bool },
    #[error("expected 0 or more{}, got {got:?}", or_unknown(*unknown_ok))]
    Negative { got: String, unknown_ok: bool },
    #[error("expected at most {max}{}, got {got:?}", or_unknown(*unknown_ok))]
    TooLarge { got: String, max: u64, unknown_ok: bool },
    #[error("unknown (-1), but every job needs one")]
    Unknown,
}

/// The hint for fields that may be `-1`.
fn or_unknown(unknown_ok: bool) -> &'static str {
    if unknown_ok { " (or -1 for unknown)" } else { "" }
}

/// Reads a log from `text`; `path` names it in errors. With `max_jobs`, stops after that
/// many job lines (reading no further: later lines are not checked). With `Some(0)` only
/// the header is read; a log with no job line at all is still [`SwfError::NoJobs`].
pub fn parse_swf(path: &Path, text: &str, max_jobs: Option<usize>) -> Result<SwfLog, SwfError> {
    read_swf(path, text.as_bytes(), max_jobs)
}

/// Reads the log file at `path`, line by line, as [`parse_swf`] does: with `max_jobs`, only
/// as much of the file as needed is read. Refuses what is not a regular file (a FIFO, whose
/// open would block; a device; a directory), before opening it and again once open, and a
/// file above [`MAX_SWF_FILE`].
pub fn load_swf_file(path: &Path, max_jobs: Option<usize>) -> Result<SwfLog, SwfError> {
    let io = |error| SwfError::Io {
        path: path.to_path_buf(),
        error,
    };
    let check = |m: std::fs::Metadata| {
        if !m.is_file() {
            return Err(SwfError::NotRegular {
                path: path.to_path_buf(),
                kind: crate::error::file_kind(&m),
            });
        }
        if m.len() > MAX_SWF_FILE {
            return Err(SwfError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        Ok(())
    };
    check(std::fs::metadata(path).map_err(io)?)?;
    let file = std::fs::File::open(path).map_err(io)?;
    check(file.metadata().map_err(io)?)?;
    // The file may grow after the check: read one byte past the limit at most.
    let mut reader = std::io::BufReader::new(file.take(MAX_SWF_FILE + 1));
    let log = read_swf(path, &mut reader, max_jobs)?;
    if reader.get_ref().limit() == 0 {
        return Err(SwfError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(log)
}

/// The reader behind [`parse_swf`] and [`load_swf_file`].
fn read_swf(path: &Path, mut reader: impl BufRead, max_jobs: Option<usize>) -> Result<SwfLog, SwfError> {
    let mut log = SwfLog::default();
    let mut buf = Vec::new();
    let mut line = 0;
    let mut saw_job = false;
    // Whether the last line was a header entry (or its continuation) that a further
    // indented comment line continues.
    let mut open = false;
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|error| SwfError::Io {
                path: path.to_path_buf(),
                error,
            })?;
        if n == 0 {
            break;
        }
        line += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() > MAX_LINE_BYTES {
            return Err(SwfError::LineTooLong {
                path: path.to_path_buf(),
                line,
            });
        }
        let text = std::str::from_utf8(&buf).map_err(|_| SwfError::NotUtf8 {
            path: path.to_path_buf(),
            line,
        })?;
        let text = text.trim();
        if let Some(comment) = text.strip_prefix(';') {
            open = read_comment(&mut log.header, comment, open);
            continue;
        }
        open = false;
        if text.is_empty() {
            continue;
        }
        saw_job = true;
        if max_jobs.is_some_and(|max| log.jobs.len() >= max) {
            break;
        }
        log.jobs.push(parse_job(text, line).map_err(|e| e.at(path))?);
    }
    if !saw_job {
        return Err(SwfError::NoJobs {
            path: path.to_path_buf(),
        });
    }
    Ok(log)
}

/// Takes one comment line (without its `;`) into the header; returns whether a next,
/// further indented comment line continues this entry. `; Key: value` with at most one
/// blank before the key starts an entry; an indented line continues an `open` one.
fn read_comment(header: &mut Vec<(String, String)>, comment: &str, open: bool) -> bool {
    let body = comment.trim_start();
    if body.is_empty() {
        return false;
    }
    let indent = comment.len() - body.len();
    if indent <= 1
        && let Some((key, value)) = body.split_once(':')
        && !key.is_empty()
        && key.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-')
    {
        header.push((key.to_string(), value.trim().to_string()));
        return true;
    }
    if open && let Some((_, value)) = header.last_mut() {
        if !value.is_empty() {
            value.push('\n');
        }
        value.push_str(body);
        return true;
    }
    false
}

/// A field error before the file is known.
struct At {
    line: usize,
    field: usize,
    problem: FieldProblem,
}

/// A job line that could not be read, before the file name is attached.
enum LineError {
    Count { line: usize, got: usize },
    Field(At),
}

impl LineError {
    fn at(self, path: &Path) -> SwfError {
        let path = path.to_path_buf();
        match self {
            LineError::Count { line, got } => SwfError::FieldCount { path, line, got },
            LineError::Field(At { line, field, problem }) => SwfError::Field {
                path,
                line,
                field,
                problem,
            },
        }
    }
}

/// Reads one job line (trimmed, not blank).
fn parse_job(text: &str, line: usize) -> Result<SwfJob, LineError> {
    let mut f: [&str; FIELDS] = [""; FIELDS];
    let mut got = 0;
    for (slot, token) in f.iter_mut().zip(text.split_whitespace()) {
        *slot = token;
        got += 1;
    }
    if got < FIELDS {
        return Err(LineError::Count { line, got });
    }
    let err = |field: usize| move |problem| LineError::Field(At { line, field, problem });
    // Fields kept as unsigned integers, -1 being unknown.
    let int = |field: usize, max: u64| unsigned(f[field - 1], max, true).map_err(err(field));
    let small = |field: usize| -> Result<Option<u32>, LineError> {
        Ok(int(field, u64::from(u32::MAX))?.and_then(|v| u32::try_from(v).ok()))
    };
    // Fields that may be any number, decimals included.
    let number = |field: usize| decimal(f[field - 1]).map_err(err(field));

    let id = unsigned(f[0], u64::MAX, false).map_err(err(1))?.unwrap_or_default();
    let submit = unsigned(f[1], u64::MAX, false).map_err(err(2))?.unwrap_or_default();
    let wait = number(3)?;
    let wait = if wait == -1.0 {
        None
    } else if wait < 0.0 {
        return Err(err(3)(FieldProblem::Negative {
            got: shown(f[2]),
            unknown_ok: true,
        }));
    } else {
        // A saturating cast: a wait beyond u64 seconds is not worth an error.
        Some(wait.round() as u64)
    };
    let runtime = int(4, u64::MAX)?;
    let allocated = small(5)?;
    for field in [6, 7] {
        number(field)?;
    }
    let requested_procs = small(8)?;
    let requested_time = int(9, u64::MAX)?;
    number(10)?;
    let status = status(f[10]).map_err(err(11))?;
    let user = small(12)?;
    let group = small(13)?;
    number(14)?;
    let queue = small(15)?;
    let partition = small(16)?;
    for field in [17, 18] {
        number(field)?;
    }
    let procs = allocated.filter(|&p| p > 0).or(requested_procs.filter(|&p| p > 0));
    Ok(SwfJob {
        id,
        submit,
        wait,
        runtime,
        procs,
        requested_procs,
        requested_time,
        status,
        user,
        group,
        queue,
        partition,
        line,
    })
}

/// The token as an error shows it: at most 40 characters.
fn shown(token: &str) -> String {
    match token.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &token[..cut]),
        None => token.to_string(),
    }
}

/// An optional sign and at least one ASCII digit: (negative, digits).
fn split_integer(token: &str) -> Option<(bool, &str)> {
    let (negative, digits) = match token.as_bytes().first() {
        Some(b'-') => (true, &token[1..]),
        Some(b'+') => (false, &token[1..]),
        _ => (false, token),
    };
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some((negative, digits))
}

/// An integer in `0..=max`, or -1 (`None`) when `unknown_ok`.
fn unsigned(token: &str, max: u64, unknown_ok: bool) -> Result<Option<u64>, FieldProblem> {
    let got = || shown(token);
    let Some((negative, digits)) = split_integer(token) else {
        return Err(FieldProblem::NotAnInteger { got: got(), unknown_ok });
    };
    let value = digits.parse::<u64>().ok().filter(|&v| v <= max);
    match (negative, value) {
        (_, Some(0)) => Ok(Some(0)),
        (true, Some(1)) if unknown_ok => Ok(None),
        (true, Some(1)) => Err(FieldProblem::Unknown),
        (true, _) => Err(FieldProblem::Negative { got: got(), unknown_ok }),
        (false, Some(v)) => Ok(Some(v)),
        (false, None) => Err(FieldProblem::TooLarge {
            got: got(),
            max,
            unknown_ok,
        }),
    }
}

/// Field 11: any integer that fits an `i32` (-1 is unknown, kept as -1).
fn status(token: &str) -> Result<i32, FieldProblem> {
    let Some((negative, digits)) = split_integer(token) else {
        return Err(FieldProblem::NotAnInteger {
            got: shown(token),
            unknown_ok: true,
        });
    };
    let magnitude = digits.parse::<i64>().ok();
    let value = magnitude.map(|m| if negative { -m } else { m });
    value.and_then(|v| i32::try_from(v).ok()).ok_or(FieldProblem::TooLarge {
        got: shown(token),
        max: i32::MAX as u64,
        unknown_ok: true,
    })
}

/// Any finite number, decimals and exponents included (`12.5`, `-1`, `3e2`).
fn decimal(token: &str) -> Result<f64, FieldProblem> {
    token
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| FieldProblem::NotANumber { got: shown(token) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The header and first 5 jobs of the KTH SP2 log (cleaned version), verbatim.
    const KTH_HEAD: &str = "\
; Version: 2.2
; Computer: IBM SP2
; Installation: Swedish Royal Institute of Technology (KTH)
; Acknowledge: Lars Malinowsky
; Information: http://www.pdc.kth.se/
;              http://www.cs.huji.ac.il/labs/parallel/workload/
; Conversion: Dror Feitelson (feit@cs.huji.ac.il) 01 Jan 2012
; MaxJobs: 28490
; MaxRecords: 28476
; MaxNodes: 100
; MaxProcs: 100
; Note: uses the EASY scheduler
;
;
; Note: THIS IS A CLEANED VERSION OF THE LOG!
;       The filter used to produce it was
;         job<=14 (14 jobs removed)
;
   15   599850 192180   3477    4     -1    -1    4  53940    -1  1  12  12  -1 -1 -1 -1 -1
   16   600022  11940   2488   25     -1    -1   25   3600    -1  1  13  13  -1 -1 -1 -1 -1
   17   600476 364560 215337    5     -1    -1    5 215400    -1  0  14  14  -1 -1 -1 -1 -1
   18   600836  32100  35373   17     -1    -1   17  36000    -1  1  15  15  -1 -1 -1 -1 -1
   19   603930   8100     29    8     -1    -1    8   2400    -1  1  16  16  -1 -1 -1 -1 -1
";

    const JOB: &str = "1 10 5 100 4 -1 -1 4 200 -1 1 3 4 -1 -1 -1 -1 -1";

    fn parse(text: &str) -> Result<SwfLog, String> {
        parse_swf(Path::new("trace.swf"), text, None).map_err(|e| e.to_string())
    }

    /// Parses `JOB` with field `n` replaced by `value`; the error's text.
    fn field_error(n: usize, value: &str) -> String {
        let mut f: Vec<&str> = JOB.split(' ').collect();
        f[n - 1] = value;
        parse(&format!("; MaxNodes: 4\n{}\n", f.join(" "))).unwrap_err()
    }

    #[test]
    fn reads_the_kth_header_and_jobs() {
        let log = parse(KTH_HEAD).unwrap();
        assert_eq!(log.jobs.len(), 5);
        assert_eq!(log.max_procs(), Some(100));
        assert_eq!(log.acknowledge(), Some("Lars Malinowsky"));
        assert_eq!(log.header_value("maxrecords"), Some("28476"));
        assert_eq!(
            log.header_value("Information"),
            Some("http://www.pdc.kth.se/\nhttp://www.cs.huji.ac.il/labs/parallel/workload/")
        );
        let notes: Vec<&str> = log
            .header
            .iter()
            .filter(|(k, _)| k == "Note")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(
            notes,
            [
                "uses the EASY scheduler",
                "THIS IS A CLEANED VERSION OF THE LOG!\nThe filter used to produce it was\njob<=14 (14 jobs removed)"
            ]
        );
        assert_eq!(log.header[0], ("Version".to_string(), "2.2".to_string()));
        assert_eq!(
            log.jobs[0],
            SwfJob {
                id: 15,
                submit: 599_850,
                wait: Some(192_180),
                runtime: Some(3477),
                procs: Some(4),
                requested_procs: Some(4),
                requested_time: Some(53_940),
                status: 1,
                user: Some(12),
                group: Some(12),
                queue: None,
                partition: None,
                line: 19,
            }
        );
        assert_eq!(log.jobs[2].status, 0);
        assert_eq!(log.jobs[4].line, 23);
        assert_eq!(log.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [15, 16, 17, 18, 19]);
    }

    #[test]
    fn max_procs_falls_back_to_max_nodes() {
        let log = parse(&format!("; MaxNodes: 64\n; MaxProcs: -1\n{JOB}")).unwrap();
        assert_eq!(log.max_procs(), Some(64));
        assert_eq!(parse(JOB).unwrap().max_procs(), None);
    }

    #[test]
    fn max_jobs_stops_early_without_reading_further() {
        let log = parse_swf(Path::new("t"), &format!("{KTH_HEAD}this line is never read\n"), Some(2)).unwrap();
        assert_eq!(log.jobs.len(), 2);
        assert_eq!(log.jobs[1].id, 16);
        let log = parse_swf(Path::new("t"), KTH_HEAD, Some(0)).unwrap();
        assert!(log.jobs.is_empty());
        assert_eq!(log.max_procs(), Some(100));
        assert_eq!(parse_swf(Path::new("t"), KTH_HEAD, Some(50)).unwrap().jobs.len(), 5);
    }

    #[test]
    fn decimals_are_accepted_where_logs_write_them() {
        let log = parse("1 10 5.6 100 4 12.5 1e3 4 200 0.5 1 3 4 -1 -1 -1 -1.0 2.25\r\n").unwrap();
        assert_eq!(log.jobs[0].wait, Some(6));
        assert_eq!(log.jobs[0].runtime, Some(100));
    }

    #[test]
    fn unknown_fields_are_none_and_procs_fall_back_to_requested() {
        let log = parse("7 0 -1 -1 -1 -1 -1 8 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 extra 99\n").unwrap();
        let j = &log.jobs[0];
        assert_eq!(
            (j.wait, j.runtime, j.procs, j.requested_procs),
            (None, None, Some(8), Some(8))
        );
        assert_eq!((j.requested_time, j.status, j.user, j.queue), (None, -1, None, None));
        let log = parse("7 0 0 5 0 -1 -1 -1 -1 -1 5 -1 -1 -1 -1 -1 -1 -1").unwrap();
        assert_eq!((log.jobs[0].procs, log.jobs[0].requested_procs), (None, None));
    }

    #[test]
    fn jobs_out_of_submit_order_are_kept_in_file_order() {
        let log = parse("1 50 0 1 1 -1 -1 1 1 -1 1 1 1 -1 -1 -1 -1 -1\n2 10 0 1 1 -1 -1 1 1 -1 1 1 1 -1 -1 -1 -1 -1\n")
            .unwrap();
        assert_eq!(log.jobs.iter().map(|j| j.submit).collect::<Vec<_>>(), [50, 10]);
    }

    #[test]
    fn a_field_that_is_not_an_integer_names_line_field_and_expectation() {
        assert_eq!(
            field_error(5, "x4"),
            r#"trace.swf:2: field 5 (allocated processors): expected an integer (or -1 for unknown), got "x4""#
        );
        assert_eq!(
            field_error(9, "3600.5"),
            r#"trace.swf:2: field 9 (requested time): expected an integer (or -1 for unknown), got "3600.5""#
        );
        assert_eq!(
            field_error(6, "abc"),
            r#"trace.swf:2: field 6 (average CPU time): expected a number (or -1 for unknown), got "abc""#
        );
        assert_eq!(
            field_error(18, "NaN"),
            r#"trace.swf:2: field 18 (think time): expected a number (or -1 for unknown), got "NaN""#
        );
        assert_eq!(
            field_error(1, "1.5"),
            r#"trace.swf:2: field 1 (job number): expected an integer, got "1.5""#
        );
        assert_eq!(
            field_error(4, "-7"),
            r#"trace.swf:2: field 4 (run time): expected 0 or more (or -1 for unknown), got "-7""#
        );
        assert_eq!(
            field_error(12, "4294967296"),
            r#"trace.swf:2: field 12 (user id): expected at most 4294967295 (or -1 for unknown), got "4294967296""#
        );
        assert_eq!(
            field_error(11, "99999999999"),
            r#"trace.swf:2: field 11 (status): expected at most 2147483647 (or -1 for unknown), got "99999999999""#
        );
        assert_eq!(
            field_error(3, "-2.5"),
            r#"trace.swf:2: field 3 (wait time): expected 0 or more (or -1 for unknown), got "-2.5""#
        );
        let long = "9".repeat(100);
        assert_eq!(
            field_error(7, &format!("x{long}")),
            format!(
                r#"trace.swf:2: field 7 (used memory): expected a number (or -1 for unknown), got "x{}…""#,
                "9".repeat(39)
            )
        );
    }

    #[test]
    fn submit_time_must_be_known_and_not_negative() {
        assert_eq!(
            field_error(2, "-5"),
            r#"trace.swf:2: field 2 (submit time): expected 0 or more, got "-5""#
        );
        assert_eq!(
            field_error(2, "-1"),
            "trace.swf:2: field 2 (submit time): unknown (-1), but every job needs one"
        );
        assert_eq!(
            field_error(2, "x"),
            r#"trace.swf:2: field 2 (submit time): expected an integer, got "x""#
        );
    }

    #[test]
    fn too_few_fields() {
        assert_eq!(
            parse(&format!("{JOB}\n1 2 3 4 5 6 7\n")).unwrap_err(),
            "trace.swf:2: expected 18 fields, got 7"
        );
    }

    #[test]
    fn an_empty_log_or_one_without_jobs() {
        let no_jobs = "trace.swf: no jobs; expected lines of 18 numbers besides the `;` header";
        assert_eq!(parse("").unwrap_err(), no_jobs);
        assert_eq!(parse("; MaxNodes: 100\n;\n\n   \n").unwrap_err(), no_jobs);
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let mut bytes = format!("; MaxNodes: 4\n{JOB}\n; Acknowledge: ").into_bytes();
        bytes.extend_from_slice(b"\xff\xfe\n");
        let e = read_swf(Path::new("trace.swf"), &bytes[..], None).unwrap_err();
        assert_eq!(e.to_string(), "trace.swf:3: not UTF-8 text");
    }

    #[test]
    fn a_line_longer_than_64_kib_is_refused_without_reading_it_whole() {
        let at_limit = format!("{JOB}{}\n", " ".repeat(MAX_LINE_BYTES - JOB.len()));
        assert_eq!(parse(&at_limit).unwrap().jobs.len(), 1);
        let e = parse(&format!("{JOB}\n{JOB}{}\n", " ".repeat(MAX_LINE_BYTES))).unwrap_err();
        assert_eq!(
            e,
            "trace.swf:2: line longer than 64 KiB (65536 bytes); expected a job line or a `;` comment"
        );
        // An endless line: the reader stops at the limit.
        let endless = std::io::BufReader::new(std::io::repeat(b'1'));
        let e = read_swf(Path::new("trace.swf"), endless, None).unwrap_err();
        assert!(matches!(e, SwfError::LineTooLong { line: 1, .. }), "{e}");
    }

    #[test]
    fn a_device_a_directory_or_a_fifo_is_refused_without_blocking() {
        let e = load_swf_file(Path::new("/dev/null"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/null: not a regular file (a device); expected an SWF log file"
        );
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let e = load_swf_file(dir, None).unwrap_err().to_string();
        assert!(
            e.ends_with(": not a regular file (a directory); expected an SWF log file"),
            "{e}"
        );
        let tmp = std::env::temp_dir().join(format!("hyperplan-swf-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let fifo = tmp.join("trace.swf");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let e = load_swf_file(&fifo, None).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "{}: not a regular file (a FIFO); expected an SWF log file",
                    fifo.display()
                )
            );
        }
        std::fs::remove_dir_all(&tmp).unwrap();
        let e = load_swf_file(Path::new("/nonexistent/trace.swf"), None).unwrap_err();
        assert!(e.to_string().starts_with("cannot read /nonexistent/trace.swf: "), "{e}");
    }

    const KTH: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/traces/KTH-SP2-1996-2.1-cln.swf"
    );

    #[test]
    fn reads_the_real_kth_log() {
        let log = load_swf_file(Path::new(KTH), Some(2000)).unwrap();
        assert_eq!(log.jobs.len(), 2000);
        assert_eq!(log.max_procs(), Some(100));
        assert_eq!(log.acknowledge(), Some("Lars Malinowsky"));
        let first = &log.jobs[0];
        assert_eq!((first.id, first.submit, first.line), (15, 599_850, 25));
        assert_eq!(
            (first.runtime, first.procs, first.requested_time),
            (Some(3477), Some(4), Some(53_940))
        );
        assert_eq!(log.jobs[1999].id, 2014);

        let full = load_swf_file(Path::new(KTH), None).unwrap();
        assert_eq!(full.jobs.len(), 28_476);
        assert_eq!(full.header_value("MaxRecords"), Some("28476"));
        assert_eq!(full.jobs[..2000], log.jobs[..]);
        let last = full.jobs.last().unwrap();
        assert_eq!((last.id, last.submit), (28_490, 29_363_618));
        // One job (27313) has neither its processors nor its run time in the log.
        let unknown: Vec<u64> = full.jobs.iter().filter(|j| j.procs.is_none()).map(|j| j.id).collect();
        assert_eq!(unknown, [27_313]);
        assert!(full.jobs.iter().all(|j| j.procs.is_none_or(|p| p <= 100)));
    }
}
