//! What this node keeps of `hyperplan exec` steps' output for `hyperplan logs JOB.STEP`
//! (`STATE/steps/JOB.ID/STEP.out`, see `super::step::output_path`). The files are the
//! agent's, on its disk, and a user fills them at will; so they are bounded per step,
//! per job (across its steps) and per node (across all jobs), the oldest jobs' output
//! removed first to make room, never that of a job with a step running. What is not
//! kept still goes to the caller; the file then ends with a line saying where keeping
//! stopped and why. Totals are counted as output is written (the directory is read once,
//! when the agent first keeps a step), never read from the disk for a chunk.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use super::said::{EVERY, Said};

/// The most kept of one step, of one job and of all jobs on the node, and the number of
/// jobs whose steps' output is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub step: u64,
    pub job: u64,
    pub node: u64,
    pub jobs: usize,
}

/// A step's first 64 MiB, as before; a job's 256 MiB (four such steps, or many small
/// ones: enough to debug by, `hyperplan exec` being for commands, not a job's output);
/// 1 GiB on the node for the newest 256 jobs, the state directory's disk being the
/// system's (a user wrote 385 MiB in 2.5 s there before these bounds).
pub const BOUNDS: Bounds = Bounds {
    step: 64 << 20,
    job: 256 << 20,
    node: 1 << 30,
    jobs: 256,
};

/// Held back in every bound from the output for the lines that say where keeping stopped
/// (each under 200 bytes), so that those lines fit in the bounds too.
const NOTE_ROOM: u64 = 4096;

/// Which bound stopped the keeping of a step's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    Step,
    Job,
    Node,
}

/// Steps' output cut, files that could not be written or removed: said at most every
/// [`EVERY`].
static CUT: Said = Said::new(EVERY);
static FAILED: Said = Said::new(EVERY);

fn warn_limited(said: &Said, what: std::fmt::Arguments<'_>) {
    match said.now(Instant::now()) {
        Some(unsaid) => tracing::warn!(unsaid, "{what}"),
        None => tracing::debug!("{what}"),
    }
}

/// One job's kept output.
#[derive(Debug)]
struct JobKept {
    bytes: u64,
    /// Its steps keeping output now: while any does, nothing of the job is removed.
    running: u32,
    /// When last used (a counter): the least recently used go first.
    used: u64,
}

/// The kept output of one state directory's steps (`STATE/steps`), by job directory.
#[derive(Debug)]
pub struct Ledger {
    dir: PathBuf,
    bounds: Bounds,
    jobs: HashMap<String, JobKept>,
    total: u64,
    clock: u64,
}

impl Ledger {
    /// What `dir` holds now; its jobs ordered by their directories' modification times.
    fn scan(dir: &Path, bounds: Bounds) -> Ledger {
        let mut found: Vec<(SystemTime, String, u64)> = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                // (Not followed: a link is not the agent's directory.)
                let Ok(meta) = e.metadata() else { continue };
                let Some(name) = e.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                if meta.is_dir() {
                    let time = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    found.push((time, name, dir_bytes(&e.path())));
                }
            }
        }
        found.sort();
        let mut ledger = Ledger {
            dir: dir.to_path_buf(),
            bounds,
            jobs: HashMap::new(),
            total: 0,
            clock: 0,
        };
        for (_, name, bytes) in found {
            let used = ledger.tick();
            ledger.total += bytes;
            ledger.jobs.insert(
                name,
                JobKept {
                    bytes,
                    running: 0,
                    used,
                },
            );
        }
        ledger
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// A step of `job` starts keeping: the job is the newest, and the oldest others go
    /// beyond [`Bounds::jobs`].
    fn begin(&mut self, job: &str) {
        let used = self.tick();
        let entry = self.jobs.entry(job.to_string()).or_insert(JobKept {
            bytes: 0,
            running: 0,
            used,
        });
        entry.running += 1;
        entry.used = used;
        while self.jobs.len() > self.bounds.jobs {
            if !self.remove_oldest(job) {
                break;
            }
        }
    }

    /// A step of `job` stopped keeping.
    fn end(&mut self, job: &str) {
        let used = self.tick();
        if let Some(j) = self.jobs.get_mut(job) {
            j.running = j.running.saturating_sub(1);
            j.used = used;
        }
    }

    /// How much of `want` more bytes of `job` may be kept (the oldest other jobs removed
    /// for room when the node's bound is reached), and, when less, which bound stopped it.
    fn grant(&mut self, job: &str, want: u64) -> (u64, Option<Cut>) {
        let Some(kept) = self.jobs.get(job).map(|j| j.bytes) else {
            return (0, Some(Cut::Job));
        };
        let job_room = self.bounds.job.saturating_sub(NOTE_ROOM).saturating_sub(kept);
        let mut take = want.min(job_room);
        let mut cut = (take < want).then_some(Cut::Job);
        let node_cap = self.bounds.node.saturating_sub(NOTE_ROOM);
        while self.total + take > node_cap {
            if !self.remove_oldest(job) {
                break;
            }
        }
        let node_room = node_cap.saturating_sub(self.total);
        if node_room < take {
            take = node_room;
            cut = Some(Cut::Node);
        }
        self.add(job, take);
        (take, cut)
    }

    /// Whether a note of `len` bytes fits in `job`'s and the node's bounds (counted if so).
    fn grant_note(&mut self, job: &str, len: u64) -> bool {
        let Some(kept) = self.jobs.get(job).map(|j| j.bytes) else {
            return false;
        };
        if kept + len > self.bounds.job || self.total + len > self.bounds.node {
            return false;
        }
        self.add(job, len);
        true
    }

    fn add(&mut self, job: &str, bytes: u64) {
        if let Some(j) = self.jobs.get_mut(job) {
            j.bytes += bytes;
            self.total += bytes;
        }
    }

    /// Removes the least recently used job with no step running, never `keep`; false
    /// when there is none.
    fn remove_oldest(&mut self, keep: &str) -> bool {
        let oldest = self
            .jobs
            .iter()
            .filter(|(name, j)| j.running == 0 && name.as_str() != keep)
            .min_by_key(|(_, j)| j.used)
            .map(|(name, _)| name.clone());
        let Some(name) = oldest else { return false };
        let path = self.dir.join(&name);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn_limited(
                &FAILED,
                format_args!("cannot remove the kept step output {}: {e}", path.display()),
            ),
        }
        if let Some(j) = self.jobs.remove(&name) {
            self.total = self.total.saturating_sub(j.bytes);
        }
        true
    }
}

/// The bytes of the files in `dir` (a job's steps).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// The ledgers, by steps directory: one for an agent (its state directory); more only in
/// tests. Global, as the steps that share one run apart from each other.
static LEDGERS: Mutex<BTreeMap<PathBuf, Ledger>> = Mutex::new(BTreeMap::new());

fn with<T>(steps: &Path, f: impl FnOnce(&mut Ledger) -> T) -> T {
    let mut all = LEDGERS.lock().unwrap_or_else(PoisonError::into_inner);
    let ledger = all
        .entry(steps.to_path_buf())
        .or_insert_with(|| Ledger::scan(steps, BOUNDS));
    f(ledger)
}

/// One step's output being kept.
pub struct Kept {
    steps: PathBuf,
    job: String,
    path: PathBuf,
    bounds: Bounds,
    /// None once keeping stopped.
    file: Option<File>,
    written: u64,
    /// The last byte kept was a newline (or none was kept).
    line_ended: bool,
}

impl Kept {
    /// Starts keeping to `path` (`STATE/steps/JOB.ID/STEP.out`): the job counted as
    /// running (so its output is not removed meanwhile), the file made (its directories
    /// 0700, the file 0600, appended to); `None`, said in the log, when it cannot be.
    pub fn open(path: &Path) -> Option<Kept> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = path.parent()?;
        let steps = dir.parent()?.to_path_buf();
        let job = dir.file_name()?.to_str()?.to_string();
        let bounds = with(&steps, |l| {
            l.begin(&job);
            l.bounds
        });
        let opened = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(path)
            });
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                with(&steps, |l| l.end(&job));
                warn_limited(
                    &FAILED,
                    format_args!("cannot keep the step's output in {}: {e}", path.display()),
                );
                return None;
            }
        };
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        Some(Kept {
            steps,
            job,
            path: path.to_path_buf(),
            bounds,
            file: Some(file),
            written,
            line_ended: true,
        })
    }

    /// Keeps what of `data` the bounds allow; past them, ends the file with a note and
    /// keeps nothing more.
    pub fn write(&mut self, data: &[u8]) {
        if self.file.is_none() || data.is_empty() {
            return;
        }
        let len = data.len() as u64;
        let step_room = self.bounds.step.saturating_sub(NOTE_ROOM).saturating_sub(self.written);
        let want = len.min(step_room);
        let (granted, cut) = with(&self.steps, |l| l.grant(&self.job, want));
        let cut = cut.or((want < len).then_some(Cut::Step));
        let n = usize::try_from(granted).map_or(data.len(), |g| g.min(data.len()));
        if n > 0 {
            let Some(file) = &mut self.file else { return };
            if let Err(e) = file.write_all(&data[..n]) {
                self.file = None;
                warn_limited(
                    &FAILED,
                    format_args!("cannot keep the step's output in {}: {e}", self.path.display()),
                );
                return;
            }
            self.written += n as u64;
            self.line_ended = data[n - 1] == b'\n';
        }
        if let Some(cut) = cut {
            self.stop(cut);
        }
    }

    /// Ends the file with a line saying why no more is kept.
    fn stop(&mut self, cut: Cut) {
        let Some(mut file) = self.file.take() else { return };
        let b = self.bounds;
        let why = match cut {
            Cut::Step => format!("a step keeps at most {}", size(b.step)),
            Cut::Job => format!("a job keeps at most {} across its steps", size(b.job)),
            Cut::Node => format!(
                "this node keeps at most {} of all jobs' steps, the rest held by steps running now",
                size(b.node)
            ),
        };
        let note = format!(
            "{}[hyperplan: output beyond the first {} bytes not kept on this node: {why}; the caller got all of it]\n",
            if self.line_ended { "" } else { "\n" },
            self.written
        );
        if with(&self.steps, |l| l.grant_note(&self.job, note.len() as u64)) {
            let _ = file.write_all(note.as_bytes());
        }
        warn_limited(
            &CUT,
            format_args!(
                "exec step output {}: no more kept after {} bytes ({why}); the caller still gets it",
                self.path.display(),
                self.written
            ),
        );
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        with(&self.steps, |l| l.end(&self.job));
    }
}

/// `bytes` in the largest binary unit that says it exactly.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;
    const SMALL: Bounds = Bounds {
        step: 128 * KIB,
        job: 200 * KIB,
        node: 400 * KIB,
        jobs: 8,
    };

    /// A steps directory with its own (small) bounds.
    fn steps(bounds: Bounds) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let steps = dir.path().join("steps");
        std::fs::create_dir(&steps).unwrap();
        LEDGERS
            .lock()
            .unwrap()
            .insert(steps.clone(), Ledger::scan(&steps, bounds));
        dir
    }

    fn path(dir: &tempfile::TempDir, job: &str, step: u32) -> PathBuf {
        dir.path().join("steps").join(job).join(format!("{step}.out"))
    }

    /// A step of `job` that writes `bytes` in 10 KiB lines; its `Kept`, still open.
    fn run(dir: &tempfile::TempDir, job: &str, step: u32, bytes: u64) -> Kept {
        let mut kept = Kept::open(&path(dir, job, step)).unwrap();
        let mut line = vec![b'x'; 10 * 1024];
        *line.last_mut().unwrap() = b'\n';
        let mut left = bytes;
        while left > 0 {
            let n = left.min(line.len() as u64) as usize;
            kept.write(&line[..n]);
            left -= n as u64;
        }
        kept
    }

    fn len(p: &Path) -> u64 {
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    }

    fn last_line(p: &Path) -> String {
        let text = std::fs::read_to_string(p).unwrap();
        text.lines().last().unwrap_or_default().to_string()
    }

    fn total(dir: &tempfile::TempDir) -> u64 {
        LEDGERS.lock().unwrap()[&dir.path().join("steps")].total
    }

    #[test]
    fn a_step_and_a_job_keep_at_most_their_bounds_and_say_so() {
        let dir = steps(SMALL);
        // One step past its bound: cut, the file within it, ending with the note.
        drop(run(&dir, "a.1", 0, 150 * KIB));
        let p0 = path(&dir, "a.1", 0);
        assert!(len(&p0) <= SMALL.step, "{}", len(&p0));
        assert!(len(&p0) >= SMALL.step - NOTE_ROOM, "{}", len(&p0));
        assert!(
            last_line(&p0).contains("not kept on this node: a step keeps at most 128 KiB"),
            "{}",
            last_line(&p0)
        );
        // More steps of the job: the job's bound across them.
        drop(run(&dir, "a.1", 1, 60 * KIB));
        assert_eq!(len(&path(&dir, "a.1", 1)), 60 * KIB);
        drop(run(&dir, "a.1", 2, 60 * KIB));
        let p2 = path(&dir, "a.1", 2);
        assert!(last_line(&p2).contains("a job keeps at most 200 KiB across its steps"));
        // Out of room: the next step's file holds the note alone, if that.
        drop(run(&dir, "a.1", 3, 10 * KIB));
        let job: u64 = (0..4).map(|s| len(&path(&dir, "a.1", s))).sum();
        assert!(job <= SMALL.job, "{job}");
        assert_eq!(total(&dir), job);
        // Another job is not held by this one's bound.
        drop(run(&dir, "b.2", 0, 10 * KIB));
        assert_eq!(len(&path(&dir, "b.2", 0)), 10 * KIB);
    }

    #[test]
    fn the_node_makes_room_from_ended_jobs_never_from_running_steps() {
        let dir = steps(SMALL);
        drop(run(&dir, "old.1", 0, 120 * KIB));
        drop(run(&dir, "mid.2", 0, 120 * KIB));
        // Running steps: the least recently used ended job goes for their room.
        let d = run(&dir, "d.3", 0, 120 * KIB);
        let e = run(&dir, "e.4", 0, 120 * KIB);
        assert!(!dir.path().join("steps/old.1").exists());
        assert!(dir.path().join("steps/mid.2").exists());
        let f = run(&dir, "f.5", 0, 120 * KIB);
        assert!(!dir.path().join("steps/mid.2").exists());
        // No ended job left: the running ones are kept whole, and the next is cut.
        let g = run(&dir, "g.6", 0, 120 * KIB);
        for job in ["d.3", "e.4", "f.5"] {
            assert_eq!(len(&path(&dir, job, 0)), 120 * KIB, "{job}");
        }
        let pg = path(&dir, "g.6", 0);
        assert!(
            last_line(&pg).contains("this node keeps at most 400 KiB of all jobs' steps"),
            "{}",
            last_line(&pg)
        );
        assert!(total(&dir) <= SMALL.node, "{}", total(&dir));
        drop((d, e, f, g));
        // What is on the disk is what was counted: a new scan finds the same.
        let scanned = Ledger::scan(&dir.path().join("steps"), SMALL);
        assert_eq!(scanned.total, total(&dir));
        assert_eq!(scanned.jobs.len(), 4);
    }

    #[test]
    fn only_the_newest_jobs_are_kept() {
        let dir = steps(Bounds { jobs: 3, ..SMALL });
        for job in ["j.1", "j.2", "j.3", "j.4"] {
            drop(run(&dir, job, 0, KIB));
        }
        assert!(!dir.path().join("steps/j.1").exists());
        for job in ["j.2", "j.3", "j.4"] {
            assert!(dir.path().join("steps").join(job).exists(), "{job}");
        }
        assert_eq!(total(&dir), 3 * KIB);
    }

    #[test]
    fn sizes_are_said_in_the_largest_exact_unit() {
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(1 << 30), "1 GiB");
        assert_eq!(size(160 * KIB), "160 KiB");
        assert_eq!(size(1000), "1000 bytes");
    }
}
