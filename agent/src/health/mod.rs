//! Node health checks (`[health]` in agent.toml): what is broken on this node, as the
//! planner should know it before it places work here (issue 43, the agent's half).
//!
//! Each kind of check runs on a worker thread of its own, started with the agent and
//! never sharing the link's runtime: a check that blocks (a `statvfs` on a dead NFS
//! mount sits in the kernel for minutes, a wedged GPU driver holds NVML) stalls only
//! itself. One scheduler thread starts each kind every `interval` and waits for it at
//! most its `timeout`; a run that takes longer yields `failed` with code `timeout`,
//! named after the check it was at ([`Context::at`]), and its worker is abandoned until
//! it comes back (its late answer is dropped, and no second thread is started for it, so
//! a hung mount costs one thread, not one per interval).
//!
//! Results are kept by check name; the link puts them in the heartbeat through
//! [`Health::for_heartbeat`]: all of them on a link's first heartbeat and whenever a
//! check's state or code changed, else nothing ([`heartbeat`]).
//!
//! - [`ib`]: InfiniBand ports (state, width, speed, error counters), from sysfs.
//! - [`gpu`]: GPUs through NVML, when the library is there (lost GPUs, uncorrectable ECC
//!   errors, row remapping, NVLinks down, NVLink fabric).
//! - [`xid`]: NVIDIA XID errors the driver writes to the kernel log (`/dev/kmsg`) since
//!   the agent started: the GPU's faults fail or degrade it, the application's do not.
//! - [`disk`]: free space and inodes of the state directory and the configured paths.
//! - [`mounts`]: mount points that must be mounted.
//! - [`memory`]: memory the kernel reports as hardware-corrupted.
//! - [`script`]: a site command (NHC's `nhc`), killed with its process group past its
//!   timeout.

pub mod disk;
pub mod gpu;
pub mod heartbeat;
pub mod ib;
pub mod memory;
pub mod mounts;
pub mod script;
pub mod xid;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hyperplan_shared::health::{CheckResult, CheckState};

use crate::config::HealthSection;
pub use heartbeat::Sent;

/// Seconds between two runs of a check when `[health] interval` says nothing.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// How long a check may take when `[health] timeout` says nothing.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Free space or inodes below this percentage of a checked file system fail it.
pub const DEFAULT_MIN_FREE_PERCENT: f64 = 5.0;
/// What the site script gets beyond its own timeout before the runner gives up on its
/// worker (the script check kills the script itself at its timeout).
const SCRIPT_GRACE: Duration = Duration::from_secs(5);
/// How long [`Health::stop`] waits for the workers to end; one stuck in the kernel is
/// left behind (it ends with the process).
const STOP_GRACE: Duration = Duration::from_secs(2);
/// The code of a check that could not look (a file it needs is unreadable): degraded,
/// as the node may well be fine.
pub const CHECK_ERROR: &str = "check-error";
/// The code of a check that did not finish within its timeout.
pub const TIMEOUT: &str = "timeout";

/// What the checks need, resolved from `[health]` and the agent's other settings.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthOptions {
    /// Between two runs of each built-in check.
    pub interval: Duration,
    /// How long each built-in check may take.
    pub timeout: Duration,
    pub disk: disk::DiskOptions,
    pub mounts: mounts::MountOptions,
    /// `/proc/meminfo`.
    pub meminfo: PathBuf,
    pub ib: ib::IbOptions,
    /// Whether GPUs are checked through NVML (when the library is there).
    pub gpu: bool,
    /// Whether XID errors are read from the kernel log.
    pub xid: bool,
    /// The kernel log (`/dev/kmsg`).
    pub kmsg: PathBuf,
    /// The site script, when one is configured.
    pub script: Option<script::ScriptOptions>,
}

impl HealthOptions {
    /// The checks `[health]` asks for on a node whose state directory is `state_dir` and
    /// whose sysfs is at `sysfs_root`; `None` when `enabled = false`.
    pub fn from_section(section: &HealthSection, state_dir: &Path, sysfs_root: &Path) -> Option<HealthOptions> {
        if section.enabled == Some(false) {
            return None;
        }
        let interval = section.interval.map_or(DEFAULT_INTERVAL, Duration::from_secs);
        let timeout = section.timeout.map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        let mut paths = vec![state_dir.to_path_buf()];
        for p in section.paths.iter().flatten() {
            if !paths.contains(p) {
                paths.push(p.clone());
            }
        }
        let script = section
            .script
            .clone()
            .filter(|argv| !argv.is_empty())
            .map(|argv| script::ScriptOptions {
                argv,
                interval: section.script_interval.map_or(interval, Duration::from_secs),
                timeout: section.script_timeout.map_or(timeout, Duration::from_secs),
            });
        Some(HealthOptions {
            interval,
            timeout,
            disk: disk::DiskOptions {
                paths,
                min_free_percent: section.min_free_percent.unwrap_or(DEFAULT_MIN_FREE_PERCENT),
                min_free_inodes_percent: section.min_free_inodes_percent.unwrap_or(DEFAULT_MIN_FREE_PERCENT),
            },
            mounts: mounts::MountOptions {
                mounts: section.mounts.clone().unwrap_or_default(),
                mountinfo: PathBuf::from(mounts::MOUNTINFO),
            },
            meminfo: PathBuf::from(memory::MEMINFO),
            ib: ib::IbOptions {
                sysfs_root: sysfs_root.to_path_buf(),
                error_threshold: section.ib_error_threshold.unwrap_or(0),
                width: section.ib_width,
                speed: section.ib_speed,
            },
            gpu: section.gpu.unwrap_or(true),
            xid: section.xid.unwrap_or(true),
            kmsg: PathBuf::from(xid::KMSG),
            script,
        })
    }

    /// The checks these options ask for, each with its interval and timeout.
    pub fn checks(&self) -> Vec<Scheduled> {
        let every = |check: Box<dyn Check>| Scheduled {
            check,
            interval: self.interval,
            timeout: self.timeout,
        };
        let mut out = vec![
            every(Box::new(ib::IbCheck::new(self.ib.clone()))),
            every(Box::new(disk::DiskCheck::new(self.disk.clone()))),
            every(Box::new(memory::MemoryCheck::new(self.meminfo.clone()))),
        ];
        if !self.mounts.mounts.is_empty() {
            out.push(every(Box::new(mounts::MountCheck::new(self.mounts.clone()))));
        }
        if self.gpu {
            let nvml = Box::new(crate::probe::nvlink::Nvml::default());
            out.push(every(Box::new(gpu::GpuCheck::new(nvml, self.ib.sysfs_root.clone()))));
        }
        if self.xid {
            out.push(every(Box::new(xid::XidCheck::new(self.kmsg.clone()))));
        }
        if let Some(s) = &self.script {
            out.push(Scheduled {
                interval: s.interval,
                timeout: s.timeout.saturating_add(SCRIPT_GRACE),
                check: Box::new(script::ScriptCheck::new(s.clone())),
            });
        }
        out
    }
}

/// One kind of check: run again and again on its worker thread.
pub trait Check: Send {
    /// What to call it in logs, and the name of a timeout that happened before it said
    /// which check it was at (`ib`, `disk`, `script`, …).
    fn kind(&self) -> &'static str;
    /// Runs once and returns one result per thing checked (an IB port, a path). Names
    /// it returned before and not now are forgotten.
    fn run(&mut self, ctx: &Context) -> Vec<CheckResult>;
}

/// A check with when to run it.
pub struct Scheduled {
    pub check: Box<dyn Check>,
    pub interval: Duration,
    pub timeout: Duration,
}

/// What a running check may ask of the runner.
pub struct Context {
    item: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
}

impl Context {
    /// Says which check it is at now, so a timeout names it (`disk:/scratch`).
    pub fn at(&self, check: &str) {
        *lock(&self.item) = Some(check.to_string());
    }

    /// The agent is stopping: a check that waits on something (a script) ends now.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A context for running a check outside the runner (tests, a one-off run).
    pub fn detached() -> Context {
        Context {
            item: Arc::default(),
            stop: Arc::default(),
        }
    }
}

/// The results and who waits on them.
#[derive(Default)]
struct Shared {
    state: Mutex<Results>,
    changed: Condvar,
}

#[derive(Default)]
struct Results {
    checks: BTreeMap<String, CheckResult>,
    /// Kinds that have not finished (or timed out) a first run: until they all have,
    /// heartbeats carry nothing rather than a partial picture.
    pending: usize,
}

/// The running checks: dropped or [`Health::stop`]ped, they end.
pub struct Health {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    tell: mpsc::Sender<Msg>,
    scheduler: Option<JoinHandle<()>>,
    workers: Vec<(&'static str, JoinHandle<()>)>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health").field("workers", &self.workers.len()).finish()
    }
}

/// To the scheduler.
enum Msg {
    Done {
        slot: usize,
        run: u64,
        results: Vec<CheckResult>,
    },
    Stop,
}

/// The scheduler's view of one kind of check.
struct Slot {
    kind: &'static str,
    interval: Duration,
    timeout: Duration,
    /// Run orders to its worker; `None` when its thread could not be started.
    runs: Option<mpsc::SyncSender<u64>>,
    item: Arc<Mutex<Option<String>>>,
    next_due: Instant,
    /// The run waited for, and until when.
    waiting: Option<(u64, Instant)>,
    /// Its worker has a run in hand (waited for or abandoned).
    busy: bool,
    last_run: u64,
    /// The check names its results had.
    names: BTreeSet<String>,
    /// Counted in [`Results::pending`] still.
    first: bool,
}

impl Health {
    /// Starts the checks `opts` asks for (said once in the log).
    pub fn start(opts: &HealthOptions) -> Health {
        let checks = opts.checks();
        let kinds: Vec<&str> = checks.iter().map(|s| s.check.kind()).collect();
        tracing::info!(
            checks = %kinds.join(", "),
            interval_s = opts.interval.as_secs(),
            timeout_s = opts.timeout.as_secs(),
            paths = opts.disk.paths.len(),
            mounts = opts.mounts.mounts.len(),
            script = opts.script.as_ref().and_then(|s| s.argv.first()).map_or("", String::as_str),
            "health checks start"
        );
        Self::start_checks(checks)
    }

    /// Starts these checks: a worker thread each and the scheduler. A thread that cannot
    /// be started is logged and its check left out.
    pub fn start_checks(checks: Vec<Scheduled>) -> Health {
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (tell, inbox) = mpsc::channel();
        let now = Instant::now();
        let mut slots = Vec::with_capacity(checks.len());
        let mut workers = Vec::with_capacity(checks.len());
        for (
            index,
            Scheduled {
                check,
                interval,
                timeout,
            },
        ) in checks.into_iter().enumerate()
        {
            let kind = check.kind();
            let item: Arc<Mutex<Option<String>>> = Arc::default();
            let (runs, orders) = mpsc::sync_channel(1);
            let ctx = Context {
                item: item.clone(),
                stop: stop.clone(),
            };
            let spawned = std::thread::Builder::new().name(format!("health-{kind}")).spawn({
                let tell = tell.clone();
                move || work(index, check, &ctx, &orders, &tell)
            });
            let runs = match spawned {
                Ok(handle) => {
                    workers.push((kind, handle));
                    Some(runs)
                }
                Err(e) => {
                    tracing::warn!(
                        check = kind,
                        "cannot start the health check's thread; it does not run: {e}"
                    );
                    None
                }
            };
            slots.push(Slot {
                kind,
                interval: interval.max(Duration::from_millis(10)),
                timeout: timeout.max(Duration::from_millis(10)),
                first: runs.is_some(),
                runs,
                item,
                next_due: now,
                waiting: None,
                busy: false,
                last_run: 0,
                names: BTreeSet::new(),
            });
        }
        lock(&shared.state).pending = slots.iter().filter(|s| s.first).count();
        let scheduler = std::thread::Builder::new().name("health".into()).spawn({
            let shared = shared.clone();
            move || schedule(slots, &inbox, &shared)
        });
        let scheduler = match scheduler {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::warn!("cannot start the health checks' scheduler; no checks run: {e}");
                None
            }
        };
        Health {
            shared,
            stop,
            tell,
            scheduler,
            workers,
        }
    }

    /// Every check's current result, by name.
    pub fn current(&self) -> Vec<CheckResult> {
        lock(&self.shared.state).checks.values().cloned().collect()
    }

    /// What the next heartbeat carries ([`heartbeat::to_send`]); `sent` is the link's.
    /// Nothing until every check has run once.
    pub fn for_heartbeat(&self, sent: &mut Sent) -> Option<Vec<CheckResult>> {
        let state = lock(&self.shared.state);
        if state.pending > 0 {
            return None;
        }
        let current: Vec<CheckResult> = state.checks.values().cloned().collect();
        drop(state);
        heartbeat::to_send(current, sent)
    }

    /// Waits until `ready` holds of the results (checked at every change), at most
    /// `timeout`; whether it held.
    pub fn wait_for(&self, timeout: Duration, ready: impl Fn(&BTreeMap<String, CheckResult>) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = lock(&self.shared.state);
        loop {
            if ready(&state.checks) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .map_or_else(|e| e.into_inner().0, |(s, _)| s);
        }
    }

    /// Stops the checks: the scheduler ends, a running script is killed, idle workers
    /// end. Waits for them a moment; one stuck in the kernel is left to end with the
    /// process (said in the log).
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.tell.send(Msg::Stop);
        if let Some(scheduler) = self.scheduler.take() {
            let _ = scheduler.join();
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && self.workers.iter().any(|(_, w)| !w.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        for (kind, worker) in self.workers.drain(..) {
            if worker.is_finished() {
                let _ = worker.join();
            } else {
                tracing::warn!(check = kind, "a health check is still stuck at stop; left behind");
            }
        }
    }
}

impl Drop for Health {
    fn drop(&mut self) {
        if self.scheduler.is_some() || !self.workers.is_empty() {
            self.stop_now();
        }
    }
}

/// A worker: one run per order until the orders end. A check that panics is a failed
/// result, not a dead worker.
fn work(slot: usize, mut check: Box<dyn Check>, ctx: &Context, orders: &mpsc::Receiver<u64>, tell: &mpsc::Sender<Msg>) {
    while let Ok(run) = orders.recv() {
        *lock(&ctx.item) = None;
        let kind = check.kind();
        let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check.run(ctx))).unwrap_or_else(|_| {
            vec![CheckResult::bad(
                kind,
                CheckState::Failed,
                CHECK_ERROR,
                format!("the {kind} check panicked"),
            )]
        });
        if tell.send(Msg::Done { slot, run, results }).is_err() {
            return;
        }
    }
}

/// The scheduler: orders runs when due, takes their results, times them out.
fn schedule(mut slots: Vec<Slot>, inbox: &mpsc::Receiver<Msg>, shared: &Shared) {
    loop {
        let now = Instant::now();
        for (index, slot) in slots.iter_mut().enumerate() {
            if let Some((_, deadline)) = slot.waiting
                && now >= deadline
            {
                slot.waiting = None;
                slot.next_due = now + slot.interval;
                let name = lock(&slot.item).clone().unwrap_or_else(|| slot.kind.to_string());
                let text = format!("{name} did not finish within {}", seconds(slot.timeout));
                tracing::debug!(check = slot.kind, slot = index, "health check timed out: {text}");
                let result = CheckResult::bad(name.clone(), CheckState::Failed, TIMEOUT, text);
                let mut names = slot.names.clone();
                names.insert(name);
                apply(shared, slot, names, vec![result], true);
            }
            if !slot.busy && slot.waiting.is_none() && now >= slot.next_due {
                let Some(runs) = &slot.runs else { continue };
                slot.last_run += 1;
                match runs.try_send(slot.last_run) {
                    Ok(()) => {
                        slot.busy = true;
                        slot.waiting = Some((slot.last_run, now + slot.timeout));
                    }
                    // Not busy, so its one-order queue is empty: cannot happen; next time.
                    Err(mpsc::TrySendError::Full(_)) => slot.next_due = now + slot.interval,
                    Err(mpsc::TrySendError::Disconnected(_)) => slot.runs = None, // its worker is gone
                }
            }
        }
        let wake = slots
            .iter()
            .filter_map(|s| match s.waiting {
                Some((_, deadline)) => Some(deadline),
                None if !s.busy && s.runs.is_some() => Some(s.next_due),
                None => None,
            })
            .min();
        let message = match wake {
            Some(at) => inbox.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => inbox.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match message {
            Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(Msg::Done { slot, run, results }) => {
                let Some(s) = slots.get_mut(slot) else { continue };
                s.busy = false;
                match s.waiting {
                    Some((waited, _)) if waited == run => {
                        s.waiting = None;
                        s.next_due = Instant::now() + s.interval;
                        let names = results.iter().map(|r| r.check.clone()).collect();
                        apply(shared, s, names, results, false);
                    }
                    // Came back after its timeout: the timeout stands until the next run.
                    _ => tracing::debug!(check = s.kind, "a health check came back after its timeout"),
                }
            }
        }
    }
}

/// Puts a kind's new results in place of its old ones (`names`: the names it has now;
/// `keep_others`: a timeout replaces one result and keeps the rest), logs the changes
/// and wakes whoever waits.
fn apply(shared: &Shared, slot: &mut Slot, names: BTreeSet<String>, results: Vec<CheckResult>, keep_others: bool) {
    let mut state = lock(&shared.state);
    if !keep_others {
        for gone in slot.names.difference(&names) {
            if let Some(old) = state.checks.remove(gone) {
                tracing::info!(check = %old.check, "health check no longer reported");
            }
        }
    }
    for result in results {
        let old = state.checks.get(&result.check);
        let changed = old.is_none_or(|o| o.state != result.state || o.code != result.code);
        if changed {
            say_change(old, &result);
        }
        state.checks.insert(result.check.clone(), result);
    }
    slot.names = names;
    if slot.first {
        slot.first = false;
        state.pending = state.pending.saturating_sub(1);
    }
    drop(state);
    shared.changed.notify_all();
}

/// One line per change of a check's state or code (so a check that stays broken is said
/// once, not at every run).
fn say_change(old: Option<&CheckResult>, new: &CheckResult) {
    match (new.state, old.map(|o| o.state)) {
        (CheckState::Ok, None) => tracing::debug!(check = %new.check, "health check ok"),
        (CheckState::Ok, Some(_)) => tracing::info!(check = %new.check, "health check ok again"),
        (state, _) => tracing::warn!(
            check = %new.check,
            state = state.as_str(),
            code = %new.code,
            "health check {}: {}",
            state.as_str(),
            new.text
        ),
    }
}

/// `30 s`, `1.5 s`: a duration as a person reads it.
pub(crate) fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A check that says what it is told, and hangs while told to.
    struct Puppet {
        say: Arc<Mutex<Vec<CheckResult>>>,
        hang: Arc<AtomicBool>,
        runs: Arc<std::sync::atomic::AtomicU64>,
    }

    impl Check for Puppet {
        fn kind(&self) -> &'static str {
            "puppet"
        }
        fn run(&mut self, ctx: &Context) -> Vec<CheckResult> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            ctx.at("puppet:stuck-here");
            while self.hang.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            lock(&self.say).clone()
        }
    }

    struct Steady;

    impl Check for Steady {
        fn kind(&self) -> &'static str {
            "steady"
        }
        fn run(&mut self, _: &Context) -> Vec<CheckResult> {
            vec![CheckResult::ok("steady")]
        }
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn a_hung_check_times_out_alone_and_comes_back_when_it_answers_again() {
        let say = Arc::new(Mutex::new(vec![CheckResult::ok("puppet:a")]));
        let hang = Arc::new(AtomicBool::new(false));
        let runs = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let puppet = Puppet {
            say: say.clone(),
            hang: hang.clone(),
            runs: runs.clone(),
        };
        let health = Health::start_checks(vec![
            Scheduled {
                check: Box::new(puppet),
                interval: Duration::from_millis(20),
                timeout: Duration::from_millis(200),
            },
            Scheduled {
                check: Box::new(Steady),
                interval: Duration::from_millis(20),
                timeout: Duration::from_millis(200),
            },
        ]);
        assert!(health.wait_for(WAIT, |c| c.contains_key("puppet:a") && c.contains_key("steady")));
        hang.store(true, Ordering::SeqCst);
        assert!(health.wait_for(WAIT, |c| {
            c.get("puppet:stuck-here")
                .is_some_and(|r| r.state == CheckState::Failed && r.code == TIMEOUT)
        }));
        let text = health
            .current()
            .into_iter()
            .find(|r| r.code == TIMEOUT)
            .map(|r| r.text)
            .unwrap_or_default();
        assert!(text.contains("did not finish within"), "{text}");
        // The other check goes on meanwhile, and the stuck one is not started again.
        let before = runs.load(Ordering::SeqCst);
        let mut sent = Sent::default();
        assert!(health.for_heartbeat(&mut sent).is_some());
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(runs.load(Ordering::SeqCst), before, "no second run while one hangs");
        // It answers again: its late answer is dropped, the next run counts.
        *lock(&say) = vec![CheckResult::ok("puppet:b")];
        hang.store(false, Ordering::SeqCst);
        assert!(health.wait_for(WAIT, |c| c.contains_key("puppet:b")
            && !c.contains_key("puppet:a")
            && !c.contains_key("puppet:stuck-here")));
        health.stop();
    }

    #[test]
    fn nothing_is_sent_before_every_check_ran_once() {
        let hang = Arc::new(AtomicBool::new(true));
        let puppet = Puppet {
            say: Arc::new(Mutex::new(vec![CheckResult::ok("puppet:a")])),
            hang: hang.clone(),
            runs: Arc::default(),
        };
        let health = Health::start_checks(vec![
            Scheduled {
                check: Box::new(puppet),
                interval: Duration::from_millis(20),
                timeout: Duration::from_secs(60),
            },
            Scheduled {
                check: Box::new(Steady),
                interval: Duration::from_millis(20),
                timeout: Duration::from_secs(60),
            },
        ]);
        assert!(health.wait_for(WAIT, |c| c.contains_key("steady")));
        let mut sent = Sent::default();
        assert_eq!(health.for_heartbeat(&mut sent), None, "the puppet has not answered");
        hang.store(false, Ordering::SeqCst);
        assert!(health.wait_for(WAIT, |c| c.contains_key("puppet:a")));
        let first = health.for_heartbeat(&mut sent).unwrap_or_default();
        assert_eq!(first.len(), 2);
        assert_eq!(health.for_heartbeat(&mut sent), None, "nothing changed");
        health.stop();
    }

    #[test]
    fn a_panicking_check_is_a_failed_result_and_stop_ends_the_threads() {
        struct Panics;
        impl Check for Panics {
            fn kind(&self) -> &'static str {
                "panics"
            }
            fn run(&mut self, _: &Context) -> Vec<CheckResult> {
                panic!("a bug");
            }
        }
        let health = Health::start_checks(vec![Scheduled {
            check: Box::new(Panics),
            interval: Duration::from_millis(20),
            timeout: Duration::from_secs(5),
        }]);
        assert!(health.wait_for(WAIT, |c| {
            c.get("panics")
                .is_some_and(|r| r.state == CheckState::Failed && r.code == CHECK_ERROR)
        }));
        let started = Instant::now();
        health.stop();
        assert!(started.elapsed() < STOP_GRACE, "idle workers end at once");
    }

    #[test]
    fn options_from_the_section_default_to_the_built_in_checks() {
        let state = Path::new("/var/lib/hyperplan-agent");
        let sys = Path::new("/sys");
        let opts = HealthOptions::from_section(&HealthSection::default(), state, sys).unwrap();
        assert_eq!((opts.interval, opts.timeout), (DEFAULT_INTERVAL, DEFAULT_TIMEOUT));
        assert_eq!(opts.disk.paths, vec![state.to_path_buf()]);
        assert!(opts.script.is_none() && opts.gpu && opts.xid && opts.mounts.mounts.is_empty());
        assert_eq!(opts.kmsg, PathBuf::from("/dev/kmsg"));
        let kinds: Vec<&str> = opts.checks().iter().map(|s| s.check.kind()).collect();
        assert_eq!(kinds, ["ib", "disk", "memory", "gpu", "xid"]);
        let section = HealthSection {
            enabled: Some(true),
            interval: Some(10),
            script: Some(vec!["/usr/sbin/nhc".into()]),
            script_timeout: Some(100),
            mounts: Some(vec!["/scratch".into()]),
            paths: Some(vec!["/scratch".into(), state.to_path_buf()]),
            gpu: Some(false),
            xid: Some(false),
            ..HealthSection::default()
        };
        let opts = HealthOptions::from_section(&section, state, sys).unwrap();
        assert_eq!(opts.disk.paths, vec![state.to_path_buf(), PathBuf::from("/scratch")]);
        let script = opts.script.clone().unwrap();
        assert_eq!(
            (script.interval, script.timeout),
            (Duration::from_secs(10), Duration::from_secs(100))
        );
        let kinds: Vec<&str> = opts.checks().iter().map(|s| s.check.kind()).collect();
        assert_eq!(kinds, ["ib", "disk", "memory", "mount", "script"]);
        let off = HealthSection {
            enabled: Some(false),
            ..HealthSection::default()
        };
        assert!(HealthOptions::from_section(&off, state, sys).is_none());
    }
}
