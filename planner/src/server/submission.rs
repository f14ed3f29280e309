//! A submitted file read into jobs on the connection's task, never on the driver's: the
//! YAML (a list, several documents, Volcano Jobs) is parsed, the command line's
//! `--hold`, `--begin`, `--array`, `--dependency` and `--account` and the submit
//! directory are set on each job, and each gets its credential. None of it needs the
//! planner's state, and a large file parsed on the driver's task would hold up its ticks
//! and the agents' heartbeats; a file larger than [`INLINE_MAX`] is parsed on a blocking
//! thread, so it holds up no other connection either. What the planner's state decides
//! (owners, queues, limits, dependencies) stays the driver's.
//!
//! A refusal here is answered at once and never reaches the driver, with the words the
//! driver used to answer it with (the file, line and field of a YAML error).

use std::path::Path;

use hyperplan_net::messages::{RequestCommand, ResponseError};

use super::inbox::{Asked, Submission};

/// The largest file parsed on the connection's own task; larger ones go to a blocking
/// thread (the task shares its worker thread with other connections).
pub const INLINE_MAX: usize = 64 * 1024;

/// `command` as the driver takes it: a submit's file read into jobs (on a blocking thread
/// when it is larger than [`INLINE_MAX`]), every other command as it came.
pub async fn read_off_driver(command: RequestCommand) -> Result<Asked, ResponseError> {
    match &command {
        RequestCommand::Submit { text, .. } if text.len() > INLINE_MAX => {
            match tokio::task::spawn_blocking(move || read(command)).await {
                Ok(read) => read,
                Err(e) => Err(ResponseError::new(format!("reading the job file failed: {e}"))),
            }
        }
        _ => read(command),
    }
}

/// `command` as the driver takes it: a submit's file read into jobs, every other command
/// as it came. Blocks while it parses (see [`read_off_driver`]).
pub fn read(command: RequestCommand) -> Result<Asked, ResponseError> {
    let RequestCommand::Submit {
        file_name,
        text,
        submit_dir,
        hold,
        begin,
        array,
        dependency,
        account,
    } = command
    else {
        return Ok(Asked::Command(command));
    };
    let submit_dir = submit_dir.map(checked_submit_dir).transpose()?;
    let mut jobs = hyperplan_shared::parse_jobs(&text, Path::new(&file_name)).map_err(|e| e.to_string())?;
    for j in &mut jobs {
        j.submit_dir.clone_from(&submit_dir);
        // `--hold`/`--begin` say it for every job of the file.
        j.hold |= hold;
        if begin.is_some() {
            j.begin = begin;
        }
        // `--array`/`--dependency` say it for every job of the file, over the file.
        if array.is_some() {
            j.array.clone_from(&array);
        }
        if dependency.is_some() {
            j.depends_on.clone_from(&dependency);
        }
        // `--account` over the file's.
        if account.is_some() {
            j.account.clone_from(&account);
        }
        j.credential = Some(super::credential::new().map_err(|e| format!("cannot make the job's credential: {e}"))?);
    }
    Ok(Asked::Submit(Submission { file_name, jobs }))
}

/// The submit directory a client sent: an absolute path of at most `PATH_MAX` bytes,
/// without NUL or control characters (it becomes tasks' working directories).
pub fn checked_submit_dir(dir: String) -> Result<String, ResponseError> {
    const PATH_MAX: usize = 4096;
    if !dir.starts_with('/') || dir.len() > PATH_MAX || dir.chars().any(char::is_control) {
        // (`escape` shows the control characters; `shorten` keeps the message short.)
        return Err(format!(
            "the submit directory must be an absolute path of at most {PATH_MAX} bytes without control characters, got \"{}\"",
            hyperplan_shared::names::escape(&hyperplan_shared::names::shorten(&dir, 200))
        )
        .into());
    }
    Ok(dir)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn submit(text: &str) -> RequestCommand {
        RequestCommand::Submit {
            file_name: "job.yaml".into(),
            text: text.into(),
            submit_dir: Some("/home/alice".into()),
            hold: true,
            begin: None,
            array: None,
            dependency: None,
            account: Some("physics".into()),
        }
    }

    fn job(name: &str) -> String {
        format!("- name: {name}\n  tasks:\n    - name: w\n      replicas: 1\n      resources: {{cpu: 1}}\n")
    }

    #[test]
    fn a_file_is_read_into_jobs_with_the_command_lines_settings_and_credentials() {
        let Ok(Asked::Submit(s)) = read(submit(&format!("{}{}", job("a"), job("b")))) else {
            panic!("not read into jobs");
        };
        assert_eq!(s.file_name, "job.yaml");
        let names: Vec<&str> = s.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        for j in &s.jobs {
            assert!(j.hold);
            assert_eq!(j.account.as_deref(), Some("physics"));
            assert_eq!(j.submit_dir.as_deref(), Some("/home/alice"));
            assert_eq!(j.credential.as_ref().map(String::len), Some(64));
        }
        assert_ne!(s.jobs[0].credential, s.jobs[1].credential);
        // Anything else passes as it came.
        assert!(matches!(
            read(RequestCommand::Queues),
            Ok(Asked::Command(RequestCommand::Queues))
        ));
    }

    #[test]
    fn a_refusal_says_what_the_driver_said_file_line_and_field() {
        let text = "name: a\ntasks:\n  - name: w\n    replicas: many\n";
        let e = read(submit(text)).unwrap_err().to_string();
        let before = hyperplan_shared::parse_jobs(text, Path::new("job.yaml"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, before);
        assert!(e.starts_with("job.yaml:4:"), "{e}");
        assert!(e.contains("replicas"), "{e}");
        let mut relative = submit(&job("a"));
        if let RequestCommand::Submit { submit_dir, .. } = &mut relative {
            *submit_dir = Some("runs".into());
        }
        let e = read(relative).unwrap_err().to_string();
        assert!(e.contains("must be an absolute path"), "{e}");
    }

    /// A file over [`INLINE_MAX`] is parsed on a blocking thread: the task that reads it
    /// yields, and every other task of its worker (here the runtime's only thread) runs
    /// meanwhile.
    #[tokio::test]
    async fn a_large_file_is_parsed_off_the_connections_thread() {
        let text: String = (0..4000).map(|i| job(&format!("j{i}"))).collect();
        assert!(text.len() > INLINE_MAX);
        let turns = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = {
            let turns = turns.clone();
            tokio::spawn(async move {
                loop {
                    turns.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            })
        };
        tokio::task::yield_now().await;
        let before = turns.load(std::sync::atomic::Ordering::Relaxed);
        let Ok(Asked::Submit(s)) = read_off_driver(submit(&text)).await else {
            panic!("not read into jobs");
        };
        let during = turns.load(std::sync::atomic::Ordering::Relaxed) - before;
        counter.abort();
        assert_eq!(s.jobs.len(), 4000);
        // Parsed inline, the other task would have had a turn or two at most.
        assert!(
            during > 100,
            "the other task ran {during} times while the file was parsed"
        );
    }

    #[test]
    fn a_submit_directory_is_absolute_short_and_printable() {
        assert_eq!(
            checked_submit_dir("/home/alice/runs".into()).ok().as_deref(),
            Some("/home/alice/runs")
        );
        for bad in [
            "runs/a".to_string(),
            String::new(),
            "/tmp/\u{1b}[31mx".into(),
            format!("/{}", "a".repeat(5000)),
        ] {
            let e = checked_submit_dir(bad.clone())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("must be an absolute path"), "{bad:?}: {e}");
            assert!(!e.contains('\u{1b}') && e.len() < 400, "{e}");
        }
    }
}
