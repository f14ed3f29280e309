//! `ReadLog`: up to `max_bytes` (at most [`MAX_LOG_CHUNK`]) of a task's output or error
//! file from an offset, the path taken from the task's spec, or, once its end was
//! acknowledged and its directory removed, from what the agent kept of it (`hyperplan
//! logs` of an ended job). Blocking (a file on NFS may be slow): the link runs it off the
//! async thread, a few at a time.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use hyperplan_net::messages::LogChunk;

use crate::shepherd::{LaunchSpec, current_euid};

/// The most bytes one answer carries, whatever was asked.
pub const MAX_LOG_CHUNK: u32 = 1 << 20;

/// Where a task's output files are named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The task's spec (its directory is still there).
    Spec(PathBuf),
    /// The files, kept after its directory was removed.
    Files(Outputs),
}

/// A task's output and error files, and the user it ran as: the agent (root) reads a
/// file for `logs` only when that user owns it, so a task that swapped its output for a
/// link to a file it may not read (`/etc/shadow`) gets nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outputs {
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    pub user: String,
}

/// The output files a spec names.
pub fn output_files(spec: &Path) -> Option<Outputs> {
    LaunchSpec::read(spec).ok().map(|s| Outputs {
        stdout: s.stdout,
        stderr: s.stderr,
        user: s.user,
    })
}

/// Reads the chunk `request` asks for from the task's output (`stderr`: its error file).
pub fn read_chunk(request: u64, source: &Source, stderr: bool, offset: u64, max_bytes: u32) -> LogChunk {
    let mut chunk = LogChunk {
        request,
        offset,
        data: Vec::new(),
        size: 0,
        error: None,
    };
    let outputs = match source {
        Source::Spec(spec) => match output_files(spec) {
            Some(o) => o,
            None => {
                chunk.error = Some(
                    LaunchSpec::read(spec)
                        .err()
                        .map_or_else(|| "cannot read the launch spec".to_string(), |e| e.to_string()),
                );
                return chunk;
            }
        },
        Source::Files(o) => o.clone(),
    };
    let path = if stderr { &outputs.stderr } else { &outputs.stdout };
    // Root reads only what the task's user owns; any other agent reads only what it may.
    let owner = if current_euid() == 0 {
        match crate::shepherd::user::lookup(&outputs.user) {
            Ok(id) => Some(id.uid),
            Err(e) => {
                chunk.error = Some(e.to_string());
                return chunk;
            }
        }
    } else {
        None
    };
    match read_file(path, owner, offset, max_bytes.min(MAX_LOG_CHUNK)) {
        Ok((data, size)) => {
            chunk.data = data;
            chunk.size = size;
        }
        Err(e) => chunk.error = Some(format!("{}: {e}", path.display())),
    }
    chunk
}

/// `(bytes from offset, the file's length)`. Only a regular file is read (a FIFO or a
/// device named as output is refused, not waited on), and with `owner`, only one that
/// uid owns (checked on the opened file, so no link or rename in between fools it).
fn read_file(path: &Path, owner: Option<u32>, offset: u64, max: u32) -> std::io::Result<(Vec<u8>, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if let Some(uid) = owner
        && meta.uid() != uid
    {
        return Err(std::io::Error::other(format!(
            "owned by uid {}, not by the task's user (uid {uid}): not read",
            meta.uid()
        )));
    }
    let size = meta.len();
    let mut data = Vec::new();
    if offset < size {
        file.seek(SeekFrom::Start(offset))?;
        let want = u64::from(max).min(size - offset);
        data.reserve(want as usize);
        file.take(want).read_to_end(&mut data)?;
    }
    Ok((data, size))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn me() -> String {
        let out = std::process::Command::new("id").arg("-un").output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn reads_pieces_and_refuses_what_is_not_a_file() {
        let me = me();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::write(&out, b"hello world\n").unwrap();
        let spec = serde_json::json!({
            "job": "j", "task": "t", "rank": 0, "argv": ["true"], "workingDir": "/",
            "stdout": out, "stderr": dir.path(), "user": me, "stateDir": "/s"
        });
        let spec_path = Source::Spec(dir.path().join("spec.json"));
        std::fs::write(dir.path().join("spec.json"), spec.to_string()).unwrap();
        let c = read_chunk(1, &spec_path, false, 6, 3);
        assert_eq!((c.data.as_slice(), c.size, c.error), (&b"wor"[..], 12, None));
        let c = read_chunk(2, &spec_path, false, 100, 3);
        assert!(c.data.is_empty() && c.size == 12 && c.error.is_none());
        let c = read_chunk(3, &spec_path, true, 0, 3);
        assert!(c.error.unwrap().contains("not a regular file"));
        let c = read_chunk(4, &Source::Spec(dir.path().join("nope.json")), false, 0, 3);
        assert!(c.error.unwrap().contains("cannot read the launch spec"));
        let kept = Source::Files(Outputs {
            stdout: out.clone(),
            stderr: out,
            user: me,
        });
        assert_eq!(read_chunk(5, &kept, true, 0, 5).data, b"hello");
    }

    /// As root, a file the task's user does not own (its output swapped for a link to
    /// `/etc/shadow`, say) is not read for it.
    #[test]
    fn root_reads_only_what_the_tasks_user_owns() {
        if current_euid() != 0 {
            eprintln!("skipped: needs root (chown)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"root only\n").unwrap();
        let link = dir.path().join("out");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let kept = |user: &str| {
            Source::Files(Outputs {
                stdout: link.clone(),
                stderr: link.clone(),
                user: user.into(),
            })
        };
        let c = read_chunk(1, &kept("nobody"), false, 0, 100);
        assert!(c.data.is_empty(), "{:?}", c.data);
        assert!(c.error.unwrap().contains("not by the task's user"));
        assert_eq!(read_chunk(2, &kept("root"), false, 0, 100).data, b"root only\n");
    }
}
