//! The daemon's side of discovery, its pollers: one task per polled source
//! (`[[discovery]]` entries, configured in `config::discovery`, other than `label`) reads
//! it at start, every `interval`, and at once on SIGHUP, and hands what it found to the
//! driver ([`Polled`]). The parsers are `hyperplan-fabric`'s; reconciling HyperNodes with
//! the nodes is the core's (`hyperplan_core::discovery`). Reading is blocking I/O (files, UFM over HTTPS, a
//! command), so it runs off the driver's task: a UFM that hangs delays only its source.
//!
//! A poll whose input is byte-for-byte what the last good poll read says `Unchanged`,
//! so an untouched file costs a read and a hash, never a re-parse or a topology rebuild.
//! Parsing happens here (errors name the file and line); tiering a fabric happens in the
//! core, which knows the agents' HCA GUIDs.
//!
//! A read that would block for good must not wedge its source: files that are not regular
//! files (a FIFO, a device) are refused, naming the file, and a read that does not return
//! within [`READ_TIMEOUT`] (a hung NFS mount) is reported as such; its thread is left to
//! finish on its own, and the source is not read again until it has, so a hung mount costs
//! one blocked thread per source, not one per poll. SIGHUP reads again once it returned.

use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use hyperplan_fabric::slurm::parse_topology_conf;
use hyperplan_fabric::ufm::{UfmSource, UfmTopology};
use hyperplan_fabric::{GuidMap, parse_ibnetdiscover};
use hyperplan_shared::hypernode::parse_hypernode_files;
use tokio::sync::watch;

use crate::config::{DumpInput, SourceConfig, SourceKind, SourceSpec};
use hyperplan_core::discovery::{Found, SourceError};

/// The largest file or command output a source reads (the CLI's fabric commands read
/// with the same limit).
pub const MAX_INPUT_BYTES: u64 = hyperplan_shared::limits::MAX_FABRIC_FILE;

/// How long one poll's blocking part (reading files, asking UFM, parsing) may take before
/// the source reports it as hung. Generous: a large fabric parses in well under a second.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// What one poll of a source gave.
#[derive(Debug)]
pub struct Polled {
    pub source: String,
    pub kind: SourceKind,
    pub result: Result<Found, SourceError>,
}

/// Starts one task per source. Each polls at once, then every `interval`, and at once
/// whenever `reload` changes (SIGHUP), handing each poll to `sink`; a task ends when
/// `sink` says the driver is gone (`false`).
pub fn spawn<S>(sources: &[SourceConfig], sink: &S, reload: &watch::Receiver<u64>)
where
    S: Fn(Polled) -> bool + Clone + Send + 'static,
{
    for source in sources {
        tokio::spawn(poll_loop(source.clone(), sink.clone(), reload.clone()));
    }
}

async fn poll_loop(source: SourceConfig, sink: impl Fn(Polled) -> bool, mut reload: watch::Receiver<u64>) {
    let mut reader = Reader::new(source.clone(), READ_TIMEOUT);
    loop {
        let result = reader.poll().await;
        match &result {
            Ok(Found::Unchanged) => tracing::debug!(source = source.name, "discovery: unchanged"),
            Ok(_) => tracing::info!(source = source.name, "discovery: new input read"),
            Err(e) => tracing::debug!(source = source.name, "discovery failed: {e}"),
        }
        let polled = Polled {
            source: source.name.clone(),
            kind: source.spec.kind(),
            result,
        };
        if !sink(polled) {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(source.interval) => {}
            changed = reload.changed() => {
                if changed.is_err() {
                    return;
                }
                tracing::info!(source = source.name, "SIGHUP: reading the source again");
            }
        }
    }
}

/// Reads `source` once and says what it holds, for `hyperplan-planner --check`: the
/// summary people see in `hyperplan hypernodes` (a dump is tiered without agents, so
/// only the GUID map and descriptions name its hosts), or why it fails.
pub async fn check(source: SourceConfig) -> Result<String, SourceError> {
    let found = Reader::new(source, READ_TIMEOUT).poll().await;
    match found? {
        Found::Unchanged => Ok("unchanged".into()),
        Found::HyperNodes {
            specs,
            warnings,
            summary,
            ..
        } => Ok(format!(
            "{summary}; {} HyperNode(s){}",
            specs.len(),
            if warnings.is_empty() {
                String::new()
            } else {
                format!("; {} warning(s): {}", warnings.len(), warnings.join("; "))
            }
        )),
        Found::Fabric { fabric, map_file } => {
            let t = hyperplan_core::discovery::fabric::tier(&fabric, &map_file, &hyperplan_fabric::GuidMap::new())?;
            Ok(t.summary)
        }
    }
}

/// A poll's blocking part running on its own thread: the poller comes back with its result.
type Blocking = tokio::task::JoinHandle<(Poller, Result<Found, SourceError>)>;

/// One source's polls, each given at most `timeout` for its blocking part.
struct Reader {
    config: SourceConfig,
    timeout: Duration,
    /// `None` while a poll that timed out still holds it (see `blocked`).
    poller: Option<Poller>,
    /// A poll that did not return in time; no new read starts until it has.
    blocked: Option<Blocking>,
}

impl Reader {
    fn new(config: SourceConfig, timeout: Duration) -> Self {
        Self {
            poller: Some(Poller::new(config.clone())),
            config,
            timeout,
            blocked: None,
        }
    }

    /// One poll: a command source's command first (it has its own timeout), then the
    /// blocking part.
    async fn poll(&mut self) -> Result<Found, SourceError> {
        let output = match &self.config.spec {
            SourceSpec::Ibnetdiscover {
                input: DumpInput::Command { argv, timeout },
                ..
            } => Some(run_command(argv, *timeout).await?),
            _ => None,
        };
        self.run_blocking(move |p| p.poll_blocking(output)).await
    }

    /// Runs `f` on the poller off the async threads, for at most `timeout`.
    async fn run_blocking(
        &mut self,
        f: impl FnOnce(&mut Poller) -> Result<Found, SourceError> + Send + 'static,
    ) -> Result<Found, SourceError> {
        if let Some(blocked) = self.blocked.take() {
            if !blocked.is_finished() {
                self.blocked = Some(blocked);
                return Err(SourceError::Unreadable(format!(
                    "{}: the previous read has still not returned (a FIFO, a hung NFS mount?); not read again until it does",
                    self.config.spec.target()
                )));
            }
            // What it read is stale by now: only the poller is taken back.
            self.poller = blocked.await.ok().map(|(p, _)| p);
        }
        let mut poller = self.poller.take().unwrap_or_else(|| Poller::new(self.config.clone()));
        let mut handle: Blocking = tokio::task::spawn_blocking(move || {
            let result = f(&mut poller);
            (poller, result)
        });
        match tokio::time::timeout(self.timeout, &mut handle).await {
            Ok(Ok((poller, result))) => {
                self.poller = Some(poller);
                result
            }
            // A panic in a parser would be a bug; the source stays, starts afresh, and
            // reports it.
            Ok(Err(e)) => Err(SourceError::Unreadable(format!(
                "internal error while reading this source: {e}"
            ))),
            Err(_) => {
                self.blocked = Some(handle);
                Err(SourceError::Unreadable(format!(
                    "{}: reading did not finish within {} s (a FIFO, a hung NFS mount?); expected a regular file that reads at once",
                    self.config.spec.target(),
                    self.timeout.as_secs_f64()
                )))
            }
        }
    }
}

/// One source's reader and what it remembers between polls.
struct Poller {
    config: SourceConfig,
    /// Hash of the input of the last good poll.
    last_input: Option<u64>,
    /// Built on the first poll (it reads the credentials and CA files, which may be
    /// fixed later), then reused (connection reuse, the CA parsed once).
    ufm: Option<Arc<UfmSource>>,
    last_ufm: Option<UfmTopology>,
}

impl Poller {
    fn new(config: SourceConfig) -> Self {
        Self {
            config,
            last_input: None,
            ufm: None,
            last_ufm: None,
        }
    }

    fn poll_blocking(&mut self, command_output: Option<Vec<u8>>) -> Result<Found, SourceError> {
        match self.config.spec.clone() {
            SourceSpec::Static { files } => {
                let texts = files
                    .iter()
                    .map(|f| read_text(f).map(|t| (f.clone(), t)))
                    .collect::<Result<Vec<_>, _>>()?;
                if self.unchanged(texts.iter().map(|(_, t)| t.as_bytes())) {
                    return Ok(Found::Unchanged);
                }
                let specs = parse_hypernode_files(texts.iter().map(|(p, t)| (p.as_path(), t.as_str())))
                    .map_err(|e| SourceError::Invalid(e.to_string()))?;
                self.commit(texts.iter().map(|(_, t)| t.as_bytes()));
                Ok(Found::HyperNodes {
                    summary: format!("{} HyperNode(s) from {} file(s)", specs.len(), files.len()),
                    specs,
                    warnings: Vec::new(),
                    degraded_links: Vec::new(),
                })
            }
            SourceSpec::Ibnetdiscover { input, guid_map } => {
                let (origin, dump) = match (input, command_output) {
                    (DumpInput::File(f), _) => (f.clone(), read_text(&f)?),
                    (DumpInput::Command { argv, .. }, Some(out)) => (
                        std::path::PathBuf::from(format!("`{}`", argv.join(" "))),
                        String::from_utf8_lossy(&out).into_owned(),
                    ),
                    (DumpInput::Command { .. }, None) => {
                        return Err(SourceError::Unreadable("the command did not run".into()));
                    }
                };
                let map_text = match &guid_map {
                    Some(m) => Some(read_text(m)?),
                    None => None,
                };
                let parts = [Some(dump.as_str()), map_text.as_deref()];
                if self.unchanged(parts.iter().map(|p| p.unwrap_or("").as_bytes())) {
                    return Ok(Found::Unchanged);
                }
                let map_file = match (&guid_map, &map_text) {
                    (Some(path), Some(text)) => {
                        GuidMap::parse(text, path).map_err(|e| SourceError::Invalid(e.to_string()))?
                    }
                    _ => GuidMap::new(),
                };
                let fabric = parse_ibnetdiscover(&dump, &origin).map_err(|e| SourceError::Invalid(e.to_string()))?;
                if fabric.switch_count() == 0 {
                    return Err(SourceError::Invalid(
                        hyperplan_fabric::FabricError::NoSwitches {
                            path: origin,
                            cas: fabric.ca_count(),
                        }
                        .to_string(),
                    ));
                }
                self.commit(parts.iter().map(|p| p.unwrap_or("").as_bytes()));
                Ok(Found::Fabric {
                    fabric: Arc::new(fabric),
                    map_file,
                })
            }
            SourceSpec::Ufm(config) => {
                let source = match &self.ufm {
                    Some(s) => s.clone(),
                    None => {
                        let s = Arc::new(UfmSource::new(config).map_err(|e| SourceError::Unreadable(e.to_string()))?);
                        self.ufm = Some(s.clone());
                        s
                    }
                };
                let topology = source.fetch().map_err(|e| SourceError::Unreadable(e.to_string()))?;
                if self.last_ufm.as_ref() == Some(&topology) {
                    return Ok(Found::Unchanged);
                }
                let found = Found::HyperNodes {
                    specs: topology.hypernodes.clone(),
                    warnings: topology.warnings.iter().map(ToString::to_string).collect(),
                    summary: format!(
                        "{} port records: {} host links, {} switch-to-switch links{}",
                        topology.records,
                        topology.host_links,
                        topology.switch_links,
                        match topology.degraded_links.len() {
                            0 => String::new(),
                            n => format!("; {n} link(s) below their neighbours' rate"),
                        }
                    ),
                    degraded_links: topology.degraded_links.clone(),
                };
                self.last_ufm = Some(topology);
                Ok(found)
            }
            SourceSpec::Slurm { file } => {
                let text = read_text(&file)?;
                if self.unchanged([text.as_bytes()]) {
                    return Ok(Found::Unchanged);
                }
                let imported = parse_topology_conf(&text, &file).map_err(|e| SourceError::Invalid(e.to_string()))?;
                if imported.hypernodes.is_empty() {
                    return Err(SourceError::Invalid(format!(
                        "{}: no SwitchName= lines; expected a topology/tree topology.conf",
                        file.display()
                    )));
                }
                self.commit([text.as_bytes()]);
                let switches = imported.hypernodes.len();
                Ok(Found::HyperNodes {
                    specs: imported.hypernodes,
                    warnings: imported.warnings,
                    summary: format!("{switches} switches"),
                    degraded_links: Vec::new(),
                })
            }
        }
    }

    fn unchanged<'a>(&self, parts: impl IntoIterator<Item = &'a [u8]>) -> bool {
        self.last_input == Some(digest(parts))
    }

    /// Remembers the input of a good poll.
    fn commit<'a>(&mut self, parts: impl IntoIterator<Item = &'a [u8]>) {
        self.last_input = Some(digest(parts));
    }
}

fn digest<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// A whole regular text file, at most [`MAX_INPUT_BYTES`]; bytes that are not UTF-8 become
/// U+FFFD (a node description with a stray byte must not stop a fabric from loading).
/// Anything else (a FIFO, whose open blocks until a writer comes; a device) is refused
/// before it is opened, and checked again once open.
fn read_text(path: &Path) -> Result<String, SourceError> {
    let unreadable = |e: std::io::Error| SourceError::Unreadable(format!("{}: cannot read: {e}", path.display()));
    let not_regular = |m: std::fs::Metadata| {
        (!m.is_file()).then(|| {
            SourceError::Invalid(format!(
                "{}: not a regular file ({}); expected a file of HyperNodes or a fabric dump",
                path.display(),
                hyperplan_shared::error::file_kind(&m)
            ))
        })
    };
    if let Some(e) = not_regular(std::fs::metadata(path).map_err(unreadable)?) {
        return Err(e);
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    if let Some(e) = not_regular(file.metadata().map_err(unreadable)?) {
        return Err(e);
    }
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(SourceError::Invalid(format!(
            "{}: larger than {} MiB; expected a text file of HyperNodes or a fabric dump",
            path.display(),
            MAX_INPUT_BYTES >> 20
        )));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Runs `argv` (no shell) with stdin closed and returns its stdout; killed after
/// `timeout`. A failure says how it ended and the last of what it wrote to stderr.
async fn run_command(argv: &[String], timeout: Duration) -> Result<Vec<u8>, SourceError> {
    run(argv, timeout)
        .await
        .map_err(|e| SourceError::Unreadable(e.to_string()))
}

/// Why a discovery command gave no fabric; `shown` is the command as run.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    #[error("an empty command")]
    Empty,
    #[error("{shown}: cannot start: {source}")]
    Start { shown: String, source: std::io::Error },
    #[error("{shown}: {source}")]
    Wait { shown: String, source: std::io::Error },
    #[error("{shown} did not finish within {secs} s and was killed; expected it to print the fabric (raise `timeout`)")]
    TimedOut { shown: String, secs: f64 },
    /// It exited unsuccessfully; `stderr` holds the last lines it wrote there.
    #[error("{shown} failed ({status}){}", last_words(.stderr))]
    Failed {
        shown: String,
        status: std::process::ExitStatus,
        stderr: Vec<String>,
    },
    #[error("{shown} printed more than {mib} MiB")]
    TooMuch { shown: String, mib: u64 },
}

/// `: A / B` for the lines a failed command wrote last; nothing when it wrote none.
fn last_words(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!(": {}", lines.join(" / "))
    }
}

/// [`run_command`], its failure said by [`CommandError`].
async fn run(argv: &[String], timeout: Duration) -> Result<Vec<u8>, CommandError> {
    let shown = format!("`{}`", argv.join(" "));
    let Some((program, args)) = argv.split_first() else {
        return Err(CommandError::Empty);
    };
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| CommandError::Start {
            shown: shown.clone(),
            source,
        })?;
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(source)) => return Err(CommandError::Wait { shown, source }),
        Err(_) => {
            return Err(CommandError::TimedOut {
                shown,
                secs: timeout.as_secs_f64(),
            });
        }
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        let stderr = tail.into_iter().rev().map(str::to_string).collect();
        return Err(CommandError::Failed {
            shown,
            status: output.status,
            stderr,
        });
    }
    if output.stdout.len() as u64 > MAX_INPUT_BYTES {
        return Err(CommandError::TooMuch {
            shown,
            mib: MAX_INPUT_BYTES >> 20,
        });
    }
    Ok(output.stdout)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn poller(spec: SourceSpec) -> Poller {
        Poller::new(SourceConfig {
            name: "t".into(),
            interval: Duration::from_secs(60),
            spec,
        })
    }

    #[test]
    fn a_slurm_file_is_parsed_once_then_unchanged_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("topology.conf");
        std::fs::write(&file, "SwitchName=l1 Nodes=n[1-2]\n").unwrap();
        let mut p = poller(SourceSpec::Slurm { file: file.clone() });
        assert!(matches!(p.poll_blocking(None), Ok(Found::HyperNodes { .. })));
        assert!(matches!(p.poll_blocking(None), Ok(Found::Unchanged)));
        std::fs::write(&file, "SwitchName=l1 Nodes=n[1-2]\nSwitchName=").unwrap();
        let e = p.poll_blocking(None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("topology.conf:2"), "{e}");
        // Back to the last good content: nothing to redo.
        std::fs::write(&file, "SwitchName=l1 Nodes=n[1-2]\n").unwrap();
        assert!(matches!(p.poll_blocking(None), Ok(Found::Unchanged)));
        std::fs::remove_file(&file).unwrap();
        let e = p.poll_blocking(None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("topology.conf: cannot read"), "{e}");
    }

    #[test]
    fn a_dump_without_switches_is_an_error_not_an_empty_fabric() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/ib/topograph/example-bad.out");
        let mut p = poller(SourceSpec::Ibnetdiscover {
            input: DumpInput::File(file),
            guid_map: None,
        });
        let e = p.poll_blocking(None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("no switches"), "{e}");
    }

    #[tokio::test]
    async fn commands_time_out_fail_with_their_stderr_and_print_their_dump() {
        let e = run_command(&["sleep".into(), "5".into()], Duration::from_millis(200))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`sleep 5` did not finish within 0.2 s and was killed"),
            "{e}"
        );
        let e = run_command(
            &["sh".into(), "-c".into(), "echo ibwarn: no umad >&2; exit 3".into()],
            Duration::from_secs(5),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("exit status: 3") && e.contains("ibwarn: no umad"), "{e}");
        let e = run_command(&["/nonexistent/ibnetdiscover".into()], Duration::from_secs(5))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot start"), "{e}");
        let out = run_command(&["echo".into(), "Switch".into()], Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(out, b"Switch\n");
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_naming_the_file_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("topology.conf");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let mut p = poller(SourceSpec::Slurm { file: fifo.clone() });
        let e = p.poll_blocking(None).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            e,
            format!(
                "{}: not a regular file (a FIFO); expected a file of HyperNodes or a fabric dump",
                fifo.display()
            )
        );
        let mut p = poller(SourceSpec::Static {
            files: vec![dir.path().to_path_buf()],
        });
        let e = p.poll_blocking(None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("not a regular file (a directory)"), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_that_hangs_is_reported_and_the_source_reads_again_once_it_returned() {
        let file = std::path::PathBuf::from("/srv/topology.conf");
        let mut r = Reader::new(
            SourceConfig {
                name: "t".into(),
                interval: Duration::from_secs(60),
                spec: SourceSpec::Slurm { file },
            },
            Duration::from_millis(200),
        );
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let e = r
            .run_blocking(move |_| {
                let _ = rx.recv(); // a hung NFS read, until the test lets go
                Ok(Found::Unchanged)
            })
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/srv/topology.conf: reading did not finish within 0.2 s"),
            "{e}"
        );
        // Still hung: no second thread is started.
        let e = r.run_blocking(|_| Ok(Found::Unchanged)).await.unwrap_err().to_string();
        assert!(e.contains("the previous read has still not returned"), "{e}");
        tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(matches!(
            r.run_blocking(|_| Ok(Found::Unchanged)).await,
            Ok(Found::Unchanged)
        ));
    }
}
