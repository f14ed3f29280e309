//! Task output file patterns (`output`, `error` in the job file): `%j` job name, `%x` the
//! name without an array element's index (`sweep` of `sweep[7]`; Slurm's `%x`), `%i` job id, `%t` task name, `%r` rank, `%n` node, `%u` user, `%A` array id (the job's own
//! id for a job that is not an element of an array), `%a` array index (empty for such a
//! job), `%%` a literal `%`. `%i`, `%A` and `%a` keep the files of an array's elements,
//! and of jobs that reuse a name, apart.
//!
//! A pattern is relative to the task's working directory (an absolute pattern is used as
//! it is). It may leave that directory (`../logs/%j.out` is fine: the file is opened as the
//! user, who can only write where they may). A NUL byte is refused, and so is a file in
//! the kernel's own trees, `/proc`, `/sys` and `/dev` (`/dev/null` aside): no task's output
//! belongs there, and the agent, which reads outputs for `hyperplan logs`, would read its
//! own (`/proc/self/fd/2` is the agent's log when the agent opens it).

use std::path::{Component, Path, PathBuf};

/// The pattern a task's output goes to when the job does not say (its errors go to the
/// same file unless `error` is set).
pub const DEFAULT_OUTPUT: &str = "hyperplan-%j-%t.out";

/// A pattern that cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("unknown placeholder %{} (expected %j job, %x job name without the array index, %i job id, %t task, %r rank, %n node, %u user, %A array id, %a array index, or %% for a literal %)", .0.escape_debug())]
    Unknown(char),
    #[error("a lone % at the end (expected %j, %x, %i, %t, %r, %n, %u, %A, %a, or %% for a literal %)")]
    Trailing,
    #[error("expected a file name pattern, got nothing")]
    Empty,
    #[error("expected a path without NUL bytes")]
    Nul,
    /// The file would be in `/proc`, `/sys` or `/dev` ([`in_kernel_tree`]).
    #[error(
        "expected a file outside /proc, /sys and /dev (/dev/null aside), got {}: the kernel's files are no task's output", .0.display()
    )]
    KernelFile(PathBuf),
}

/// Whether `path`, an absolute path, names something in `/proc`, `/sys` or `/dev` other
/// than `/dev/null`, with `.` and `..` taken as written (links are the reader's to
/// refuse: the agent opens outputs without following `/proc`'s).
pub fn in_kernel_tree(path: &Path) -> bool {
    if !path.is_absolute() {
        return false;
    }
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::ParentDir => {
                parts.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    match parts.first().and_then(|p| p.to_str()) {
        Some("proc" | "sys") => true,
        Some("dev") => parts.len() != 2 || parts[1] != "null",
        _ => false,
    }
}

/// Checks where a task's output or error file would be, its pattern joined onto its
/// `workingDir` (when that is absolute, as the job file gives it): not in the kernel's
/// trees.
pub fn check_output_place(working_dir: Option<&str>, pattern: &str) -> Result<(), PatternError> {
    let expanded = expand_pattern(pattern, &ANY)?;
    let path = match working_dir {
        Some(dir) if Path::new(dir).is_absolute() => Path::new(dir).join(&expanded),
        _ => PathBuf::from(&expanded),
    };
    if in_kernel_tree(&path) {
        return Err(PatternError::KernelFile(path));
    }
    Ok(())
}

/// What the placeholders stand for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternValues<'a> {
    /// `%j`: the job's name.
    pub job: &'a str,
    /// `%i`: the job's numeric id.
    pub job_id: u64,
    pub task: &'a str,
    pub rank: u32,
    pub node: &'a str,
    pub user: &'a str,
    /// `(array id, index)` for an element of an array: `%A` and `%a`.
    pub array: Option<(u64, u32)>,
}

/// Checks a pattern as the job file gives it, before any values are known.
pub fn check_pattern(pattern: &str) -> Result<(), PatternError> {
    check_output_place(None, pattern)
}

/// Values for checking a pattern before the real ones are known.
const ANY: PatternValues<'static> = PatternValues {
    job: "j",
    job_id: 0,
    task: "t",
    rank: 0,
    node: "n",
    user: "u",
    array: None,
};

/// Expands the placeholders of `pattern`.
pub fn expand_pattern(pattern: &str, values: &PatternValues<'_>) -> Result<String, PatternError> {
    if pattern.is_empty() {
        return Err(PatternError::Empty);
    }
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('j') => out.push_str(values.job),
            Some('x') => {
                out.push_str(crate::array::split_element_name(values.job).map_or(values.job, |(name, _)| name))
            }
            Some('i') => out.push_str(&values.job_id.to_string()),
            Some('A') => out.push_str(&values.array.map_or(values.job_id, |(id, _)| id).to_string()),
            Some('a') => {
                if let Some((_, index)) = values.array {
                    out.push_str(&index.to_string());
                }
            }
            Some('t') => out.push_str(values.task),
            Some('r') => out.push_str(&values.rank.to_string()),
            Some('n') => out.push_str(values.node),
            Some('u') => out.push_str(values.user),
            Some('%') => out.push('%'),
            Some(other) => return Err(PatternError::Unknown(other)),
            None => return Err(PatternError::Trailing),
        }
    }
    if out.contains('\0') {
        return Err(PatternError::Nul);
    }
    Ok(out)
}

/// The file a task writes to: the expanded pattern joined onto its working directory.
pub fn output_path(working_dir: &Path, pattern: &str, values: &PatternValues<'_>) -> Result<PathBuf, PatternError> {
    if working_dir.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(PatternError::Nul);
    }
    let path = working_dir.join(expand_pattern(pattern, values)?);
    if in_kernel_tree(&path) {
        return Err(PatternError::KernelFile(path));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const V: PatternValues<'static> = PatternValues {
        job: "train",
        job_id: 57,
        task: "worker-3",
        rank: 3,
        node: "gpu002",
        user: "alice",
        array: None,
    };

    #[test]
    fn expands_every_placeholder() {
        assert_eq!(
            expand_pattern(DEFAULT_OUTPUT, &V).unwrap(),
            "hyperplan-train-worker-3.out"
        );
        assert_eq!(
            expand_pattern("%u/%j.%r@%n-100%%", &V).unwrap(),
            "alice/train.3@gpu002-100%"
        );
        assert_eq!(expand_pattern("plain.log", &V).unwrap(), "plain.log");
        assert_eq!(expand_pattern("%%j", &V).unwrap(), "%j");
        assert_eq!(expand_pattern("é%t", &V).unwrap(), "éworker-3");
    }

    #[test]
    fn job_ids_and_array_placeholders() {
        assert_eq!(expand_pattern("%j-%i.out", &V).unwrap(), "train-57.out");
        // Not an element: %A is the job's own id, %a nothing.
        assert_eq!(expand_pattern("slurm-%A_%a.out", &V).unwrap(), "slurm-57_.out");
        let element = PatternValues {
            job: "sweep[7]",
            job_id: 64,
            array: Some((58, 7)),
            ..V
        };
        assert_eq!(
            expand_pattern("slurm-%A_%a.%i.out", &element).unwrap(),
            "slurm-58_7.64.out"
        );
        assert_eq!(expand_pattern("%%A%%a%%i", &element).unwrap(), "%A%a%i");
        // %x: the array's name for an element, the name for any other job.
        assert_eq!(expand_pattern("%x-%j", &element).unwrap(), "sweep-sweep[7]");
        assert_eq!(expand_pattern("%x", &V).unwrap(), "train");
        assert_eq!(check_pattern("logs/%A_%a-%i.out"), Ok(()));
    }

    #[test]
    fn bad_patterns() {
        assert_eq!(expand_pattern("%q.out", &V), Err(PatternError::Unknown('q')));
        assert_eq!(expand_pattern("out%", &V), Err(PatternError::Trailing));
        assert_eq!(expand_pattern("", &V), Err(PatternError::Empty));
        assert_eq!(expand_pattern("a\0b", &V), Err(PatternError::Nul));
        assert_eq!(check_pattern("%é"), Err(PatternError::Unknown('é')));
        let e = check_pattern("%\u{1b}").unwrap_err().to_string();
        assert!(e.starts_with("unknown placeholder %\\u{1b} (expected"), "{e}");
        assert_eq!(check_pattern("../logs/%j.out"), Ok(()));
        let nul_user = PatternValues { user: "a\0", ..V };
        assert_eq!(expand_pattern("%u", &nul_user), Err(PatternError::Nul));
    }

    #[test]
    fn joined_onto_the_working_directory() {
        let wd = Path::new("/home/alice/run");
        assert_eq!(
            output_path(wd, "../logs/%j-%r.out", &V).unwrap(),
            PathBuf::from("/home/alice/run/../logs/train-3.out")
        );
        assert_eq!(
            output_path(wd, "/scratch/%t", &V).unwrap(),
            PathBuf::from("/scratch/worker-3")
        );
        assert_eq!(output_path(Path::new("/a\0"), "x", &V), Err(PatternError::Nul));
        assert_eq!(
            output_path(Path::new("/proc/self/fd"), "1", &V),
            Err(PatternError::KernelFile("/proc/self/fd/1".into()))
        );
        assert!(output_path(wd, "/dev/null", &V).is_ok());
    }

    /// `/proc/self/fd/1` named by the job is the agent's own stdout when the agent reads it.
    #[test]
    fn the_kernels_trees_are_refused_but_dev_null() {
        for refused in [
            "/proc/self/fd/1",
            "/sys/kernel/x",
            "/dev/stdout",
            "/dev",
            "/tmp/../proc/1/environ",
            "//proc/x",
            "/dev/null/../shm/x",
        ] {
            assert!(in_kernel_tree(Path::new(refused)), "{refused}");
            let e = check_pattern(refused).unwrap_err().to_string();
            assert!(e.starts_with("expected a file outside /proc, /sys and /dev"), "{e}");
        }
        for fine in ["/dev/null", "/tmp/proc/x", "proc/self/fd/1", "/devices/x", "/tmp/%j"] {
            assert!(!in_kernel_tree(Path::new(fine)), "{fine}");
        }
        assert_eq!(check_pattern("/dev/null"), Ok(()));
        assert_eq!(
            check_output_place(Some("/home/a"), "../../proc/self/fd/2").unwrap_err(),
            PatternError::KernelFile("/home/a/../../proc/self/fd/2".into())
        );
        assert_eq!(
            check_output_place(Some("/proc/self/fd"), "1"),
            Err(PatternError::KernelFile("/proc/self/fd/1".into()))
        );
        assert_eq!(check_output_place(Some("relative"), "1"), Ok(()));
        assert_eq!(check_output_place(Some("/home/a"), "%j.out"), Ok(()));
    }
}
