//! The GPUs' NVLink fabric information (cluster UUID, clique, registration state and
//! health), read on the machine the agent runs on so the planner can make NVLink domains
//! (GB200/GB300 NVL72 racks) into HyperNodes.
//!
//! Two sources, tried in order behind [`FabricReader`] (so everything above them is tested
//! without a GPU): NVML, `libnvidia-ml.so.1` loaded at run time ([`Nvml`]: a node without
//! the library simply has none, and the agent does not link against it), then
//! `nvidia-smi --query-gpu=… --format=csv` ([`NvidiaSmi`]), run with a timeout and a cap on
//! what is read; it asks for the fabric health fields too, and asks again without those a
//! driver older than them refuses. The conversion and the domain rule live in
//! [`hyperplan_shared::gpufabric`].
//!
//! `unsafe` is allowed here only, for the NVML FFI and for killing a timed-out
//! `nvidia-smi`'s process group; every block says why it holds.

#![allow(unsafe_code)]

use std::ffi::{c_uint, c_void};
use std::io::{self, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use hyperplan_shared::gpufabric::{
    self, GpuFabric, MAX_GPUS, MAX_SMI_CSV, NodeDomain, NvmlFabricInfo, SMI_HEALTH_FIELDS, SMI_QUERY_HEALTH,
    domain_name,
};

/// How long `nvidia-smi` may run: it answers in well under a second on a healthy node,
/// and hangs for minutes on a wedged driver.
pub const SMI_TIMEOUT: Duration = Duration::from_secs(10);

/// The NVML library's name, as the driver installs it.
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// Most bytes of `nvidia-smi`'s standard error kept for a message.
const MAX_STDERR: usize = 4096;

/// Why a fabric source that is on the node did not answer.
#[derive(Debug, thiserror::Error)]
pub enum NvlinkError {
    #[error("could not run {binary}: {source}")]
    Spawn { binary: String, source: io::Error },
    #[error("{binary} did not finish within the timeout of {timeout:?}; killed")]
    Timeout { binary: String, timeout: Duration },
    #[error("{binary} printed more than {limit} bytes; killed")]
    TooLong { binary: String, limit: usize },
    #[error("{binary} failed ({status}): {output}")]
    Exit {
        binary: String,
        status: String,
        output: String,
    },
    #[error("{binary}: {source}")]
    Io { binary: String, source: io::Error },
    #[error("{binary} output: {source}")]
    Parse {
        binary: String,
        source: gpufabric::FabricParseError,
    },
    #[error("{library}: {symbol} not found: {message}")]
    Symbol {
        library: String,
        symbol: &'static str,
        message: String,
    },
    #[error("{call}: {}", gpufabric::nvml_return_name(*.code))]
    Nvml { call: String, code: u32 },
}

/// One source of fabric information.
pub trait FabricReader {
    /// `Ok(None)`: this source is not on the node (no library, no binary);
    /// `Ok(Some(gpus))`: what it read, one entry per GPU; `Err`: it is there but failed.
    fn read(&self) -> Result<Option<Vec<GpuFabric>>, NvlinkError>;
    /// What to call it in messages.
    fn name(&self) -> &'static str;
}

/// The first reader present wins; the others are not asked. Returns its GPUs (empty when
/// none answered) and the warnings to log: one per reader that is there but failed.
pub fn read_fabric(readers: &[&dyn FabricReader]) -> (Vec<GpuFabric>, Vec<String>) {
    let mut warnings = Vec::new();
    for reader in readers {
        match reader.read() {
            Ok(Some(gpus)) => return (gpus, warnings),
            Ok(None) => tracing::debug!(source = reader.name(), "no NVLink fabric source"),
            Err(e) => warnings.push(format!("NVLink fabric information from {}: {e}", reader.name())),
        }
    }
    (Vec::new(), warnings)
}

/// A saved fabric report, `nvidia-smi --query-gpu=… --format=csv` or `nvidia-smi -q`
/// output (told apart by a comma in the first line), for `--gpu-fabric FILE`. Opened
/// without blocking, so a FIFO in its place is refused rather than waited on; at most
/// [`gpufabric::MAX_SMI_QUERY`] bytes.
pub fn read_file(path: &std::path::Path) -> Result<Vec<GpuFabric>, super::ProbeError> {
    use crate::bounded::{BoundedReadError, read_regular};
    let limit = gpufabric::MAX_SMI_QUERY;
    let bytes = read_regular(path, limit as u64).map_err(|e| match e {
        BoundedReadError::Read(source) => super::ProbeError::Read {
            path: path.to_path_buf(),
            source,
        },
        BoundedReadError::NotAFile => super::ProbeError::Parse {
            path: path.to_path_buf(),
            message: "expected a regular file (a saved nvidia-smi report), got something else".into(),
        },
        BoundedReadError::TooLarge(_) => super::ProbeError::TooLarge {
            origin: path.display().to_string(),
            message: format!("more than {limit} bytes; expected a saved nvidia-smi report"),
        },
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let csv = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| l.contains(','));
    let parsed = if csv {
        gpufabric::parse_smi_csv(&text)
    } else {
        gpufabric::parse_smi_query(&text)
    };
    parsed.map_err(|e| super::ProbeError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The machine's readers, NVML first: what [`super::probe`] asks.
pub fn read_local() -> (Vec<GpuFabric>, Vec<String>) {
    let nvml = Nvml::default();
    let smi = NvidiaSmi::default();
    read_fabric(&[&nvml, &smi])
}

/// One line on the node's NVLink domain: `NVLink domain nvl-6b8d7c1e, partition c32766`,
/// `no NVLink domain: …`, and so on.
pub fn verdict(gpus: &[GpuFabric]) -> String {
    match gpufabric::node_domain(gpus) {
        NodeDomain::None { why } => format!("no NVLink domain: {why}"),
        NodeDomain::Pending { why } => format!("NVLink domain pending: {why}"),
        NodeDomain::Failed { why } => format!("NVLink fabric failed: {why}"),
        NodeDomain::Domain {
            cluster_uuid,
            clique_id,
            degraded,
        } => format!(
            "NVLink domain {}, partition c{clique_id}{}",
            domain_name(&cluster_uuid),
            if degraded { " (degraded)" } else { "" }
        ),
        NodeDomain::Disagree { gpus } => {
            let each: Vec<String> = gpus
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    let who = g.index.map_or_else(|| format!("#{}", i + 1), |n| n.to_string());
                    if g.cluster_uuid.is_empty() {
                        format!("GPU {who} {}", g.state)
                    } else {
                        format!("GPU {who} {} c{}", domain_name(&g.cluster_uuid), g.clique_id)
                    }
                })
                .collect();
            format!("NVLink domain: the GPUs disagree: {}", each.join(", "))
        }
    }
}

/// The last verdict and warnings logged, so a re-probe logs only a change.
static LAST_LOGGED: Mutex<Option<(String, Vec<String>)>> = Mutex::new(None);

/// Logs the verdict at info and the warnings at warn, when either differs from the last.
pub fn log_change(gpus: &[GpuFabric], warnings: &[String]) {
    let now = (verdict(gpus), warnings.to_vec());
    let Ok(mut last) = LAST_LOGGED.lock() else {
        return;
    };
    if last.as_ref() == Some(&now) {
        return;
    }
    for w in &now.1 {
        tracing::warn!("{w}");
    }
    tracing::info!(gpus = gpus.len(), "{}", now.0);
    *last = Some(now);
}

/// `nvidia-smi --query-gpu=<SMI_QUERY_HEALTH> --format=csv`: the fabric fields and the
/// fabric health ones (driver 580 and later). A driver that refuses a health field
/// (`Field "fabric.health.summary" is not a valid field to query.`) is asked again
/// without it, then without any health field, so a 535 or 570 driver still answers,
/// without health: at most three runs, all within [`NvidiaSmi::timeout`].
#[derive(Clone, Debug)]
pub struct NvidiaSmi {
    /// The binary; a bare name is looked up in `PATH`.
    pub binary: PathBuf,
    /// For all tries together.
    pub timeout: Duration,
}

impl Default for NvidiaSmi {
    fn default() -> Self {
        Self {
            binary: PathBuf::from("nvidia-smi"),
            timeout: SMI_TIMEOUT,
        }
    }
}

impl NvidiaSmi {
    /// One run of `nvidia-smi --query-gpu=<query> --format=csv`, to `deadline`.
    fn run(&self, binary: &str, query: &str, deadline: Instant) -> Result<Option<Finished>, NvlinkError> {
        let mut cmd = Command::new(&self.binary);
        cmd.arg(format!("--query-gpu={query}"))
            .arg("--format=csv")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group, so a timeout kills whatever it started too.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        run_limited(cmd, binary, deadline, self.timeout, MAX_SMI_CSV)
    }
}

impl FabricReader for NvidiaSmi {
    fn read(&self) -> Result<Option<Vec<GpuFabric>>, NvlinkError> {
        let binary = self.binary.display().to_string();
        let deadline = Instant::now() + self.timeout;
        let mut fields: Vec<&str> = SMI_QUERY_HEALTH.split(',').collect();
        let mut tries = 0;
        loop {
            let Some(done) = self.run(&binary, &fields.join(","), deadline)? else {
                return Ok(None);
            };
            tries += 1;
            if let Some(refused) = refused_field(&done) {
                // First the health field it named (a driver that lacks that one only),
                // then all of them (a driver older than them all): at most three runs,
                // since each may cost nvidia-smi's start-up on a node without persistence
                // mode. A refused field that is not a health field is an error.
                let before = fields.len();
                if tries == 1 {
                    fields.retain(|f| *f != refused || !SMI_HEALTH_FIELDS.contains(f));
                }
                if fields.len() == before {
                    fields.retain(|f| !SMI_HEALTH_FIELDS.contains(f));
                }
                if fields.len() < before {
                    tracing::debug!(
                        field = %hyperplan_shared::names::shorten(&hyperplan_shared::names::escape(&refused), 80),
                        "{binary} does not know a fabric health field; asking without it"
                    );
                    continue;
                }
            }
            if !done.status.success() {
                return Err(exit_error(&binary, &done));
            }
            let text = String::from_utf8_lossy(&done.stdout);
            return gpufabric::parse_smi_csv(&text)
                .map(Some)
                .map_err(|source| NvlinkError::Parse { binary, source });
        }
    }

    fn name(&self) -> &'static str {
        "nvidia-smi"
    }
}

/// What a run printed, run to its end: its status, at most the limit of standard output
/// and [`MAX_STDERR`] bytes of standard error.
struct Finished {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// The `--query-gpu` field nvidia-smi refused, from its `Field "NAME" is not a valid field
/// to query.` (on standard output; standard error is looked at too); an empty name when
/// the line names none readably; `None` when it refused none.
fn refused_field(done: &Finished) -> Option<String> {
    const REFUSED: &str = "is not a valid field to query";
    [&done.stdout, &done.stderr].into_iter().find_map(|bytes| {
        let text = String::from_utf8_lossy(bytes);
        let line = text.lines().find(|l| l.contains(REFUSED))?;
        let name = line
            .trim()
            .strip_prefix("Field \"")
            .and_then(|rest| rest.split_once('"'))
            .map_or("", |(name, _)| name);
        Some(name.to_string())
    })
}

/// Why a run that exited with a failure failed: its status and what it printed.
fn exit_error(binary: &str, done: &Finished) -> NvlinkError {
    // nvidia-smi says why on standard output ("couldn't communicate with the driver").
    let mut output = String::from_utf8_lossy(&done.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&done.stderr);
    if !stderr.trim().is_empty() {
        output = format!("{output} {}", stderr.trim());
    }
    NvlinkError::Exit {
        binary: binary.into(),
        status: done.status.to_string(),
        output: hyperplan_shared::names::shorten(&hyperplan_shared::names::escape(output.trim()), 200),
    }
}

/// Spawns `cmd`, again for a while when the binary is busy (ETXTBSY): being replaced by a
/// package upgrade, or, in a test, just written while another thread forked.
pub(crate) fn spawn_retrying_busy(cmd: &mut Command, deadline: Instant) -> io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 10 && Instant::now() < deadline => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Runs `cmd` (spawned in its own process group) to its end, by `deadline`, reading at
/// most `limit` bytes of its standard output; `timeout` is what a timeout error names.
/// `Ok(None)` when the binary is not there.
fn run_limited(
    mut cmd: Command,
    binary: &str,
    deadline: Instant,
    timeout: Duration,
    limit: usize,
) -> Result<Option<Finished>, NvlinkError> {
    let timed_out = || NvlinkError::Timeout {
        binary: binary.into(),
        timeout,
    };
    if Instant::now() >= deadline {
        return Err(timed_out());
    }
    let mut child = match spawn_retrying_busy(&mut cmd, deadline) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(NvlinkError::Spawn {
                binary: binary.into(),
                source,
            });
        }
    };
    let out_rx = reader_thread(child.stdout.take(), limit + 1);
    let err_rx = reader_thread(child.stderr.take(), MAX_STDERR);
    let out = match out_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(Ok(out)) => out,
        Ok(Err(source)) => {
            kill_and_reap(&mut child);
            return Err(NvlinkError::Io {
                binary: binary.into(),
                source,
            });
        }
        Err(_) => {
            kill_and_reap(&mut child);
            return Err(timed_out());
        }
    };
    if out.len() > limit {
        kill_and_reap(&mut child);
        return Err(NvlinkError::TooLong {
            binary: binary.into(),
            limit,
        });
    }
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                kill_and_reap(&mut child);
                return Err(timed_out());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(source) => {
                kill_and_reap(&mut child);
                return Err(NvlinkError::Io {
                    binary: binary.into(),
                    source,
                });
            }
        }
    };
    // The child has exited, so its standard error is at its end (or held open by
    // something it started: then it is left unread).
    let stderr = err_rx
        .recv_timeout(Duration::from_millis(100))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    Ok(Some(Finished {
        status,
        stdout: out,
        stderr,
    }))
}

/// Reads at most `limit` bytes of `pipe` on a thread, then drains the rest (so the child
/// never blocks on a full pipe); the bytes come back on the channel.
fn reader_thread(pipe: Option<impl Read + Send + 'static>, limit: usize) -> mpsc::Receiver<io::Result<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Some(mut pipe) = pipe else {
            let _ = tx.send(Ok(Vec::new()));
            return;
        };
        let mut buf = Vec::new();
        let read = pipe.by_ref().take(limit as u64).read_to_end(&mut buf).map(|_| buf);
        let _ = tx.send(read);
        let _ = io::copy(&mut pipe, &mut io::sink());
    });
    rx
}

/// Kills the child's process group (it leads one: `process_group(0)`), then the child by
/// pid, and reaps it: no zombie is left.
fn kill_and_reap(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) takes plain integers and touches none of our memory. The child is
        // not reaped yet, so its pid, which is also its process group id, cannot have been
        // reused: the signal reaches only it and what it started.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// NVML, `libnvidia-ml.so.1` loaded at run time.
#[derive(Clone, Debug)]
pub struct Nvml {
    /// The library to load (a bare name is looked up as the dynamic loader does).
    pub library: PathBuf,
}

impl Default for Nvml {
    fn default() -> Self {
        Self {
            library: PathBuf::from(NVML_LIBRARY),
        }
    }
}

/// `nvmlDevice_t`.
type Device = *mut c_void;
/// `nvmlReturn_t`, a C enum (an `int`; every value is non-negative).
type Ret = u32;

const NVML_SUCCESS: Ret = 0;
const NVML_ERROR_NOT_SUPPORTED: Ret = 3;
const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: Ret = 25;

/// `nvmlGpuFabricInfo_v3_t` (= `nvmlGpuFabricInfoV_t`) from nvml.h (CUDA 12.4 and later):
/// `unsigned int version; unsigned char clusterUuid[16]; nvmlReturn_t status;
/// unsigned int cliqueId; nvmlGpuFabricState_t state` (an `unsigned char`)`;
/// unsigned int healthMask; unsigned char healthSummary;` — 40 bytes with C padding, the
/// size nvml.h's `nvmlGpuFabricInfo_v3` (`0x3000028`) encodes. The v2 struct is the same
/// without `healthSummary` (36 bytes, `0x2000024`).
#[repr(C)]
#[derive(Default)]
struct FabricInfoV3 {
    version: c_uint,
    cluster_uuid: [u8; 16],
    status: Ret,
    clique_id: c_uint,
    state: u8,
    health_mask: c_uint,
    health_summary: u8,
}

/// `NVML_STRUCT_VERSION(GpuFabricInfo, 3)`: `sizeof | 3 << 24`.
const FABRIC_INFO_V3: c_uint = size_of::<FabricInfoV3>() as c_uint | (3 << 24);
/// `NVML_STRUCT_VERSION(GpuFabricInfo, 2)`, for drivers that know no v3 (same prefix).
const FABRIC_INFO_V2: c_uint = 36 | (2 << 24);

const _: () = assert!(size_of::<FabricInfoV3>() == 40);
const _: () = assert!(FABRIC_INFO_V3 == 0x0300_0028);

/// `nvmlPciInfo_t` (`nvmlDeviceGetPciInfo_v3`): `char busIdLegacy[16]; unsigned int
/// domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32];` (68 bytes).
#[repr(C)]
struct PciInfo {
    bus_id_legacy: [u8; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [u8; 32],
}

type InitFn = unsafe extern "C" fn() -> Ret;
type CountFn = unsafe extern "C" fn(*mut c_uint) -> Ret;
type HandleFn = unsafe extern "C" fn(c_uint, *mut Device) -> Ret;
type PciFn = unsafe extern "C" fn(Device, *mut PciInfo) -> Ret;
type FabricFn = unsafe extern "C" fn(Device, *mut FabricInfoV3) -> Ret;

/// Calls `nvmlShutdown` when dropped, after a successful `nvmlInit_v2`.
struct Session<'lib> {
    shutdown: libloading::Symbol<'lib, InitFn>,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // SAFETY: `nvmlShutdown` has the signature `nvmlReturn_t (void)` (nvml.h) and is
        // called once for the one successful `nvmlInit_v2` this session stands for; the
        // library stays loaded while the symbol borrows it.
        unsafe {
            (self.shutdown)();
        }
    }
}

impl Nvml {
    fn symbol<'lib, T>(
        &self,
        lib: &'lib libloading::Library,
        name: &'static str,
    ) -> Result<libloading::Symbol<'lib, T>, NvlinkError> {
        let mut cname = name.as_bytes().to_vec();
        cname.push(0);
        // SAFETY: every `T` used with this is the exact C signature nvml.h gives `name`
        // (the `*Fn` types above), so calling through the symbol is sound.
        unsafe { lib.get::<T>(&cname) }.map_err(|e| NvlinkError::Symbol {
            library: self.library.display().to_string(),
            symbol: name,
            message: e.to_string(),
        })
    }
}

fn check(call: impl FnOnce() -> String, code: Ret) -> Result<(), NvlinkError> {
    if code == NVML_SUCCESS {
        Ok(())
    } else {
        Err(NvlinkError::Nvml { call: call(), code })
    }
}

impl Nvml {
    /// NVML initialised (shut down when the session drops), the per-index handle call and
    /// the GPU count (at most [`MAX_GPUS`]): what both readers start with.
    fn open<'l>(
        &self,
        lib: &'l libloading::Library,
    ) -> Result<(Session<'l>, libloading::Symbol<'l, HandleFn>, c_uint), NvlinkError> {
        let init: libloading::Symbol<InitFn> = self.symbol(lib, "nvmlInit_v2")?;
        let shutdown: libloading::Symbol<InitFn> = self.symbol(lib, "nvmlShutdown")?;
        let count_fn: libloading::Symbol<CountFn> = self.symbol(lib, "nvmlDeviceGetCount_v2")?;
        let handle_fn: libloading::Symbol<HandleFn> = self.symbol(lib, "nvmlDeviceGetHandleByIndex_v2")?;
        // SAFETY: `nvmlInit_v2` is `nvmlReturn_t (void)`; NVML counts initialisations, so
        // this one is paired with the `nvmlShutdown` of `Session`.
        check(|| "nvmlInit_v2".into(), unsafe { init() })?;
        let session = Session { shutdown };
        let mut count: c_uint = 0;
        // SAFETY: `count` is a valid, writable `unsigned int` for the call's duration.
        check(|| "nvmlDeviceGetCount_v2".into(), unsafe { count_fn(&mut count) })?;
        Ok((session, handle_fn, count.min(MAX_GPUS as c_uint)))
    }

    /// The library, loaded; `None` where it is not there (no NVIDIA driver).
    fn load(&self) -> Option<libloading::Library> {
        // SAFETY: loading runs the library's initialisers. libnvidia-ml is the driver's
        // management library, made to be loaded at run time by monitoring tools; its
        // initialisers require nothing of the caller.
        match unsafe { libloading::Library::new(&self.library) } {
            Ok(lib) => Some(lib),
            Err(e) => {
                tracing::debug!("NVML not loaded ({}): {e}", self.library.display());
                None
            }
        }
    }
}

impl FabricReader for Nvml {
    fn read(&self) -> Result<Option<Vec<GpuFabric>>, NvlinkError> {
        let Some(lib) = self.load() else {
            return Ok(None);
        };
        let pci_fn: libloading::Symbol<PciFn> = self.symbol(&lib, "nvmlDeviceGetPciInfo_v3")?;
        let fabric_fn: libloading::Symbol<FabricFn> = self.symbol(&lib, "nvmlDeviceGetGpuFabricInfoV")?;
        let (_session, handle_fn, count) = self.open(&lib)?;
        let mut gpus = Vec::with_capacity(count as usize);
        for index in 0..count {
            let mut device: Device = std::ptr::null_mut();
            // SAFETY: `device` is a valid, writable `nvmlDevice_t`; `index` < the count NVML
            // gave.
            let code = unsafe { handle_fn(index, &mut device) };
            check(|| format!("nvmlDeviceGetHandleByIndex_v2({index})"), code)?;
            let mut pci = PciInfo {
                bus_id_legacy: [0; 16],
                domain: 0,
                bus: 0,
                device: 0,
                pci_device_id: 0,
                pci_sub_system_id: 0,
                bus_id: [0; 32],
            };
            // SAFETY: `device` is the handle NVML just returned; `pci` is a writable
            // `nvmlPciInfo_t` of the layout nvml.h declares.
            let pci_code = unsafe { pci_fn(device, &mut pci) };
            let bus_id = if pci_code == NVML_SUCCESS {
                let end = pci.bus_id.iter().position(|&b| b == 0).unwrap_or(pci.bus_id.len());
                std::str::from_utf8(&pci.bus_id[..end])
                    .ok()
                    .and_then(gpufabric::normalize_pci_bus_id)
                    .unwrap_or_default()
            } else {
                String::new()
            };
            let mut gpu = read_one(&fabric_fn, device, index)?;
            gpu.index = Some(index);
            gpu.pci_bus_id = bus_id;
            gpus.push(gpu);
        }
        Ok(Some(gpus))
    }

    fn name(&self) -> &'static str {
        "NVML"
    }
}

/// One GPU's fabric information: the v3 struct, or v2 where the driver knows no v3.
fn read_one(fabric_fn: &FabricFn, device: Device, index: c_uint) -> Result<GpuFabric, NvlinkError> {
    let mut info = FabricInfoV3 {
        version: FABRIC_INFO_V3,
        ..FabricInfoV3::default()
    };
    // SAFETY: `device` is a handle NVML returned; `info` is a writable 40-byte
    // `nvmlGpuFabricInfo_v3_t` whose version field says so, and NVML writes no more than
    // the version's size.
    let mut code = unsafe { fabric_fn(device, &mut info) };
    let mut v3 = true;
    if code == NVML_ERROR_ARGUMENT_VERSION_MISMATCH {
        info = FabricInfoV3 {
            version: FABRIC_INFO_V2,
            ..FabricInfoV3::default()
        };
        v3 = false;
        // SAFETY: as above; the v2 struct is the 36-byte prefix of `info`.
        code = unsafe { fabric_fn(device, &mut info) };
    }
    if code == NVML_ERROR_NOT_SUPPORTED {
        return Ok(GpuFabric::not_supported());
    }
    check(|| format!("nvmlDeviceGetGpuFabricInfoV(GPU {index})"), code)?;
    Ok(gpufabric::from_nvml(NvmlFabricInfo {
        cluster_uuid: info.cluster_uuid,
        status: info.status,
        clique_id: info.clique_id,
        state: u32::from(info.state),
        health_mask: Some(info.health_mask),
        health_summary: v3.then_some(info.health_summary),
    }))
}

/// One GPU's health as NVML reports it, for the health checks (`crate::health::gpu`
/// judges it). `None`: not supported by this GPU or driver.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuHealth {
    /// NVML's index.
    pub index: u32,
    /// `0000:41:00.0`; empty when unknown.
    pub pci_bus_id: String,
    /// NVML cannot reach it (`NVML_ERROR_GPU_IS_LOST`: off the bus), with NVML's word.
    pub lost: Option<String>,
    /// Uncorrectable ECC errors since the driver loaded (volatile).
    pub ecc_uncorrected: Option<u64>,
    /// A page retirement waits for the next driver load or reset (before Ampere).
    pub retired_pages_pending: Option<bool>,
    /// A row remap waits for a reset, and whether one ever failed (Ampere and later).
    pub remap_pending: Option<bool>,
    pub remap_failed: Option<bool>,
    /// Each NVLink the GPU has: its number and whether it is active.
    pub nvlinks: Vec<(u32, bool)>,
    /// Its NVLink fabric information (multi-node NVLink systems), when it has one.
    pub fabric: Option<GpuFabric>,
}

/// Where the GPUs' health comes from: NVML on a node, a fake in tests.
pub trait HealthReader: Send {
    /// `Ok(None)`: no NVML on this node (no GPUs to check); `Ok(Some)`: one entry per
    /// GPU; `Err`: NVML is there but did not answer.
    fn read_health(&self) -> Result<Option<Vec<GpuHealth>>, NvlinkError>;
}

/// `NVML_ERROR_INVALID_ARGUMENT`: an NVLink number past the GPU's last.
const NVML_ERROR_INVALID_ARGUMENT: Ret = 2;
/// `NVML_ERROR_GPU_IS_LOST`.
const NVML_ERROR_GPU_IS_LOST: Ret = 15;
/// `NVML_NVLINK_MAX_LINKS` (nvml.h, CUDA 12).
const NVLINK_MAX_LINKS: c_uint = 18;
/// `NVML_MEMORY_ERROR_TYPE_UNCORRECTED`, `NVML_VOLATILE_ECC`.
const MEMORY_ERROR_TYPE_UNCORRECTED: c_uint = 1;
const VOLATILE_ECC: c_uint = 0;
/// `NVML_FEATURE_ENABLED` (`nvmlEnableState_t`).
const FEATURE_ENABLED: c_uint = 1;

/// `nvmlDeviceGetTotalEccErrors(device, nvmlMemoryErrorType_t, nvmlEccCounterType_t,
/// unsigned long long *)`; both enums are C `int`s.
type EccFn = unsafe extern "C" fn(Device, c_uint, c_uint, *mut u64) -> Ret;
/// `nvmlDeviceGetRetiredPagesPendingStatus(device, nvmlEnableState_t *)`.
type PendingFn = unsafe extern "C" fn(Device, *mut c_uint) -> Ret;
/// `nvmlDeviceGetRemappedRows(device, unsigned int *corrRows, unsigned int *uncRows,
/// unsigned int *isPending, unsigned int *failureOccurred)`.
type RemapFn = unsafe extern "C" fn(Device, *mut c_uint, *mut c_uint, *mut c_uint, *mut c_uint) -> Ret;
/// `nvmlDeviceGetNvLinkState(device, unsigned int link, nvmlEnableState_t *isActive)`.
type LinkStateFn = unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> Ret;

impl HealthReader for Nvml {
    fn read_health(&self) -> Result<Option<Vec<GpuHealth>>, NvlinkError> {
        let Some(lib) = self.load() else {
            return Ok(None);
        };
        // These may be missing from an older driver: that figure is then unknown.
        let pci_fn: Option<libloading::Symbol<PciFn>> = self.symbol(&lib, "nvmlDeviceGetPciInfo_v3").ok();
        let ecc_fn: Option<libloading::Symbol<EccFn>> = self.symbol(&lib, "nvmlDeviceGetTotalEccErrors").ok();
        let pending_fn: Option<libloading::Symbol<PendingFn>> =
            self.symbol(&lib, "nvmlDeviceGetRetiredPagesPendingStatus").ok();
        let remap_fn: Option<libloading::Symbol<RemapFn>> = self.symbol(&lib, "nvmlDeviceGetRemappedRows").ok();
        let link_fn: Option<libloading::Symbol<LinkStateFn>> = self.symbol(&lib, "nvmlDeviceGetNvLinkState").ok();
        let fabric_fn: Option<libloading::Symbol<FabricFn>> = self.symbol(&lib, "nvmlDeviceGetGpuFabricInfoV").ok();
        let (_session, handle_fn, count) = self.open(&lib)?;
        let mut gpus = Vec::with_capacity(count as usize);
        for index in 0..count {
            let mut gpu = GpuHealth {
                index,
                ..GpuHealth::default()
            };
            let mut device: Device = std::ptr::null_mut();
            // SAFETY: `device` is a valid, writable `nvmlDevice_t`; `index` < the count.
            let code = unsafe { handle_fn(index, &mut device) };
            if code != NVML_SUCCESS {
                gpu.lost = Some(gpufabric::nvml_return_name(code));
                gpus.push(gpu);
                continue;
            }
            if let Some(pci_fn) = &pci_fn {
                let mut pci = PciInfo {
                    bus_id_legacy: [0; 16],
                    domain: 0,
                    bus: 0,
                    device: 0,
                    pci_device_id: 0,
                    pci_sub_system_id: 0,
                    bus_id: [0; 32],
                };
                // SAFETY: `device` is the handle NVML returned; `pci` is a writable
                // `nvmlPciInfo_t` of the layout nvml.h declares.
                if answered(unsafe { pci_fn(device, &mut pci) }, &mut gpu.lost) {
                    let end = pci.bus_id.iter().position(|&b| b == 0).unwrap_or(pci.bus_id.len());
                    gpu.pci_bus_id = std::str::from_utf8(&pci.bus_id[..end])
                        .ok()
                        .and_then(gpufabric::normalize_pci_bus_id)
                        .unwrap_or_default();
                }
            }
            let mut ecc: u64 = 0;
            // SAFETY: `device` is NVML's handle, the two enums are in range, and `ecc` is a
            // writable `unsigned long long` for the call.
            if let Some(f) = &ecc_fn
                && answered(
                    unsafe { f(device, MEMORY_ERROR_TYPE_UNCORRECTED, VOLATILE_ECC, &mut ecc) },
                    &mut gpu.lost,
                )
            {
                gpu.ecc_uncorrected = Some(ecc);
            }
            let mut pending: c_uint = 0;
            // SAFETY: `device` is NVML's handle; `pending` is a writable `nvmlEnableState_t`.
            if let Some(f) = &pending_fn
                && answered(unsafe { f(device, &mut pending) }, &mut gpu.lost)
            {
                gpu.retired_pages_pending = Some(pending == FEATURE_ENABLED);
            }
            let (mut corrected, mut uncorrected, mut remap_pending, mut failed) = (0, 0, 0, 0);
            // SAFETY: `device` is NVML's handle; the four are writable `unsigned int`s.
            if let Some(f) = &remap_fn
                && answered(
                    unsafe {
                        f(
                            device,
                            &mut corrected,
                            &mut uncorrected,
                            &mut remap_pending,
                            &mut failed,
                        )
                    },
                    &mut gpu.lost,
                )
            {
                gpu.remap_pending = Some(remap_pending != 0);
                gpu.remap_failed = Some(failed != 0);
            }
            if let Some(f) = &link_fn {
                for link in 0..NVLINK_MAX_LINKS {
                    let mut active: c_uint = 0;
                    // SAFETY: `device` is NVML's handle, `link` below NVML's maximum, and
                    // `active` a writable `nvmlEnableState_t`.
                    let code = unsafe { f(device, link, &mut active) };
                    if code == NVML_ERROR_INVALID_ARGUMENT || code == NVML_ERROR_NOT_SUPPORTED {
                        break; // past its last link, or no NVLink
                    }
                    if answered(code, &mut gpu.lost) {
                        gpu.nvlinks.push((link, active == FEATURE_ENABLED));
                    }
                }
            }
            if let Some(f) = &fabric_fn {
                gpu.fabric = read_one(f, device, index)
                    .ok()
                    .filter(|g| g.state != gpufabric::FabricState::NotSupported);
            }
            gpus.push(gpu);
        }
        Ok(Some(gpus))
    }
}

/// Whether an NVML call succeeded; a GPU it says is lost is marked so.
fn answered(code: Ret, lost: &mut Option<String>) -> bool {
    if code == NVML_ERROR_GPU_IS_LOST && lost.is_none() {
        *lost = Some(gpufabric::nvml_return_name(code));
    }
    code == NVML_SUCCESS
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use hyperplan_shared::gpufabric::FabricState;

    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/nvidia")
            .join(name)
    }

    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("nvidia-smi");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    struct Fake(Result<Option<Vec<GpuFabric>>, &'static str>, &'static str);

    impl FabricReader for Fake {
        fn read(&self) -> Result<Option<Vec<GpuFabric>>, NvlinkError> {
            match &self.0 {
                Ok(v) => Ok(v.clone()),
                Err(msg) => Err(NvlinkError::Nvml {
                    call: (*msg).into(),
                    code: 9,
                }),
            }
        }
        fn name(&self) -> &'static str {
            self.1
        }
    }

    #[test]
    fn nvlink_first_present_reader_wins_and_failures_warn() {
        let failing = Fake(Err("nvmlInit_v2"), "NVML");
        let absent = Fake(Ok(None), "absent");
        let present = Fake(Ok(Some(vec![GpuFabric::not_supported()])), "smi");
        let never = Fake(Ok(Some(Vec::new())), "never");
        let (gpus, warnings) = read_fabric(&[&failing, &absent, &present, &never]);
        assert_eq!(gpus, vec![GpuFabric::not_supported()]);
        assert_eq!(
            warnings,
            vec!["NVLink fabric information from NVML: nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED".to_string()]
        );
        let (gpus, warnings) = read_fabric(&[&absent]);
        assert!(gpus.is_empty() && warnings.is_empty());
    }

    #[test]
    fn nvlink_smi_script_output_is_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let csv = fixture("gb200-nvl72-tray.csv");
        let smi = NvidiaSmi {
            binary: script(dir.path(), &format!("cat '{}'", csv.display())),
            timeout: Duration::from_secs(10),
        };
        let gpus = smi.read().unwrap().unwrap();
        assert_eq!(gpus.len(), 4);
        assert!(
            gpus.iter()
                .all(|g| g.state == FabricState::Completed && g.clique_id == 32766)
        );
        assert_eq!(verdict(&gpus), "NVLink domain nvl-6b8d7c1e, partition c32766");
    }

    #[test]
    fn nvlink_smi_failure_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let smi = NvidiaSmi {
            binary: script(dir.path(), "echo 'NVIDIA-SMI has failed'; exit 9"),
            timeout: Duration::from_secs(10),
        };
        let e = smi.read().unwrap_err().to_string();
        assert!(e.contains("NVIDIA-SMI has failed") && e.contains("9"), "{e}");
    }

    #[test]
    fn nvlink_smi_timeout_kills_the_child() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let smi = NvidiaSmi {
            binary: script(dir.path(), &format!("echo $$ > '{}'\nexec sleep 30", pidfile.display())),
            timeout: Duration::from_millis(300),
        };
        let started = Instant::now();
        let e = smi.read().unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(matches!(e, NvlinkError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("timeout"), "{e}");
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        // Killed and reaped: not even a zombie is left.
        assert!(!Path::new("/proc").join(pid.trim()).exists(), "pid {pid} still there");
    }

    #[test]
    fn nvlink_smi_missing_binary_is_absent() {
        let smi = NvidiaSmi {
            binary: PathBuf::from("/nonexistent/hyperplan/nvidia-smi"),
            timeout: Duration::from_secs(1),
        };
        assert!(smi.read().unwrap().is_none());
    }

    /// A stand-in nvidia-smi that knows the `--query-gpu` fields in `known`: it appends
    /// each query it is asked to `log`, refuses the first field it does not know as
    /// nvidia-smi does (on standard output, exit status 2), and otherwise prints `answer`.
    fn smi_knowing(dir: &Path, known: &[&str], log: &Path, answer: &Path) -> NvidiaSmi {
        let body = format!(
            "q=''\nfor a in \"$@\"; do case \"$a\" in --query-gpu=*) q=\"${{a#--query-gpu=}}\";; esac; done\n\
             echo \"$q\" >> '{log}'\nknown=',{known},'\nIFS=,\nfor f in $q; do\n  case \"$known\" in\n    \
             *\",$f,\"*) ;;\n    *) echo \"Field \\\"$f\\\" is not a valid field to query.\"; exit 2;;\n  esac\ndone\n\
             cat '{answer}'",
            log = log.display(),
            known = known.join(","),
            answer = answer.display(),
        );
        NvidiaSmi {
            binary: script(dir, &body),
            timeout: Duration::from_secs(10),
        }
    }

    fn queries(log: &Path) -> Vec<String> {
        std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    const BASE_FIELDS: [&str; 6] = [
        "index",
        "pci.bus_id",
        "fabric.clusterUuid",
        "fabric.cliqueId",
        "fabric.state",
        "fabric.status",
    ];

    #[test]
    fn nvlink_smi_asks_for_health_and_an_unhealthy_tray_is_degraded() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("queries");
        let known: Vec<&str> = BASE_FIELDS.iter().chain(&SMI_HEALTH_FIELDS).copied().collect();
        let smi = smi_knowing(dir.path(), &known, &log, &fixture("gb300-580-tray-unhealthy.csv"));
        let gpus = smi.read().unwrap().unwrap();
        assert_eq!(queries(&log), [SMI_QUERY_HEALTH]);
        assert_eq!(gpus[2].health.problems(), ["route unhealthy", "summary unhealthy"]);
        assert_eq!(
            verdict(&gpus),
            "NVLink domain nvl-00000001, partition c32766 (degraded)"
        );
    }

    #[test]
    fn nvlink_smi_older_driver_is_asked_again_without_health() {
        // 535 to 570: no fabric.health.* field at all. Three runs: all, all but the one
        // it named, none of them.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("queries");
        let smi = smi_knowing(dir.path(), &BASE_FIELDS, &log, &fixture("gb200-nvl72-tray.csv"));
        let gpus = smi.read().unwrap().unwrap();
        let without_summary: Vec<&str> = SMI_QUERY_HEALTH
            .split(',')
            .filter(|f| *f != "fabric.health.summary")
            .collect();
        assert_eq!(
            queries(&log),
            [
                SMI_QUERY_HEALTH.to_string(),
                without_summary.join(","),
                hyperplan_shared::gpufabric::SMI_QUERY.to_string()
            ]
        );
        assert!(gpus.iter().all(|g| g.health.is_unreported()));
        assert_eq!(verdict(&gpus), "NVLink domain nvl-6b8d7c1e, partition c32766");

        // A driver without just one of them: asked again without that one, the rest read.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("queries");
        let answer = dir.path().join("answer.csv");
        let csv = std::fs::read_to_string(fixture("gb300-580-tray.csv")).unwrap();
        let cut: String = csv
            .lines()
            .map(|l| l.rsplit_once(", ").unwrap().0.to_string() + "\n")
            .collect();
        std::fs::write(&answer, cut).unwrap();
        let known: Vec<&str> = BASE_FIELDS.iter().chain(&SMI_HEALTH_FIELDS[..5]).copied().collect();
        let smi = smi_knowing(dir.path(), &known, &log, &answer);
        let gpus = smi.read().unwrap().unwrap();
        assert_eq!(queries(&log).len(), 2);
        assert_eq!(queries(&log)[1], known.join(","));
        assert_eq!(
            gpus[0].health.summary,
            Some(hyperplan_shared::gpufabric::FabricHealthSummary::Healthy)
        );
        assert_eq!(verdict(&gpus), "NVLink domain nvl-00000001, partition c32766");
    }

    #[test]
    fn nvlink_smi_refusing_a_fabric_field_is_an_error_after_three_runs_at_most() {
        // A driver older than the fabric fields themselves.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("queries");
        let smi = smi_knowing(dir.path(), &BASE_FIELDS[..2], &log, &fixture("gb200-nvl72-tray.csv"));
        let e = smi.read().unwrap_err();
        assert!(matches!(e, NvlinkError::Exit { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("Field \"fabric.clusterUuid\" is not a valid field to query."),
            "{e}"
        );
        assert_eq!(queries(&log).len(), 2);
        // A refusal that names no field: asked once more without health, then the error.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("queries");
        let smi = NvidiaSmi {
            binary: script(
                dir.path(),
                &format!(
                    "echo x >> '{}'\necho 'Some field is not a valid field to query.' >&2\nexit 2",
                    log.display()
                ),
            ),
            timeout: Duration::from_secs(10),
        };
        let e = smi.read().unwrap_err().to_string();
        assert!(e.contains("is not a valid field to query"), "{e}");
        assert_eq!(queries(&log).len(), 2);
    }

    #[test]
    fn nvlink_smi_tries_share_one_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("queries");
        let smi = NvidiaSmi {
            binary: script(
                dir.path(),
                &format!(
                    "echo x >> '{}'\nsleep 0.3\necho 'Field \"fabric.health.summary\" is not a valid field to query.'\nexit 2",
                    log.display()
                ),
            ),
            timeout: Duration::from_millis(500),
        };
        let started = Instant::now();
        let e = smi.read().unwrap_err();
        assert!(matches!(e, NvlinkError::Timeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(queries(&log).len() <= 2);
    }

    #[test]
    fn nvlink_smi_output_cap_holds_on_every_try() {
        let dir = tempfile::tempdir().unwrap();
        let smi = NvidiaSmi {
            binary: script(dir.path(), "head -c 2000000 /dev/zero | tr '\\0' 'x'"),
            timeout: Duration::from_secs(10),
        };
        let e = smi.read().unwrap_err();
        assert!(matches!(e, NvlinkError::TooLong { .. }), "{e}");
    }

    #[test]
    fn nvlink_saved_reports_of_real_drivers() {
        // Driver 535 (a real capture): State and Status only, so no cluster UUID.
        let gpus = read_file(&fixture("gpud/nvidia-smi-query.535.161.08.out.0.valid")).unwrap();
        assert_eq!(gpus.len(), 8);
        let line = verdict(&gpus);
        assert!(
            line.starts_with(
                "no NVLink domain: every GPU completed NVLink fabric registration without reporting a cluster UUID"
            ),
            "{line}"
        );
        // Driver 580, -q and CSV with health.
        let gpus = read_file(&fixture("gb300-580-tray.q.txt")).unwrap();
        assert_eq!(verdict(&gpus), "NVLink domain nvl-00000001, partition c32766");
        let gpus = read_file(&fixture("gb300-580-tray-unhealthy.csv")).unwrap();
        assert_eq!(
            verdict(&gpus),
            "NVLink domain nvl-00000001, partition c32766 (degraded)"
        );
    }

    #[test]
    fn nvlink_nvml_missing_library_is_absent() {
        let nvml = Nvml {
            library: PathBuf::from("/nonexistent/hyperplan/libnvidia-ml.so.1"),
        };
        assert!(nvml.read().unwrap().is_none());
    }

    #[test]
    fn nvlink_verdict_lines() {
        let read = |name: &str| gpufabric::parse_smi_csv(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap();
        assert_eq!(
            verdict(&read("gb200-nvl72-x36-partition.csv")),
            "NVLink domain nvl-6b8d7c1e, partition c1"
        );
        assert!(verdict(&read("hgx-h100.csv")).starts_with("no NVLink domain: "));
        assert!(verdict(&read("gb200-tray-in-progress.csv")).starts_with("NVLink domain pending: "));
        assert_eq!(
            verdict(&read("gb300-580-tray-unhealthy.csv")),
            "NVLink domain nvl-00000001, partition c32766 (degraded)"
        );
        let disagree = verdict(&read("gb200-tray-disagree.csv"));
        assert!(
            disagree.contains("disagree") && disagree.contains("c32765"),
            "{disagree}"
        );
    }
}
