//! InfiniBand ports, from `<sysfsRoot>/class/infiniband/<dev>/ports/<n>/`: a port that
//! is not `ACTIVE` and `LinkUp`, having been up since the agent started, is down (failed
//! `ib-down`; one never up is taken for a port without a cable and left alone); one that trained narrower
//! than it should (`1X` on a `4X` cable: a quarter of the bandwidth, and collectives
//! across the leaf run at its pace) fails `ib-width`; a slower lane speed (FDR on an EDR
//! fabric) is degraded `ib-speed`; error counters that rose since the last check by more
//! than `ibErrorThreshold` are degraded `ib-errors` (a cable or transceiver going bad),
//! ok again once they stop rising. One result per port, `ib:<dev>/<port>`, the worst
//! problem first.
//!
//! What a port should have: `ibWidth` / `ibSpeed` when set, else what it had the first
//! time this agent saw it `ACTIVE` (so a port already narrow when the agent starts is
//! caught only with `ibWidth` set).
//!
//! Only InfiniBand ports are looked at (RoCE, Omni-Path, iWARP and usNIC devices that
//! `class/infiniband` lists too are not), with the probe's sysfs rules: attributes read
//! with a bound and never through a link, device links followed only inside the tree,
//! and anything that does not parse a `check-error` of that port, never a panic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hyperplan_shared::health::{CheckResult, CheckState};

use super::{CHECK_ERROR, Check, Context};
use crate::bounded::read_regular_no_link;
use crate::exec::said::{EVERY, Said};
use crate::probe::infiniband::{IB_PREFIXES, numbered_text, parse_rate};
use crate::probe::sysfs::{clean, follow, list_dir, parse_decimal, parse_decimal_u64};

/// A sysfs attribute is a page at most.
const MAX_ATTR: u64 = 4096;
/// Devices and ports looked at, at most (the heartbeat carries 64 results anyway).
const MAX_PORTS: usize = 64;

/// The error counters watched: file under `counters/`, and what to call it.
const COUNTERS: [(&str, &str); 3] = [
    ("symbol_error", "symbol errors"),
    ("link_downed", "link downed"),
    ("excessive_buffer_overrun_errors", "excessive buffer overruns"),
];

/// What the InfiniBand check needs.
#[derive(Clone, Debug, PartialEq)]
pub struct IbOptions {
    /// The sysfs tree (`/sys`, or `sysfsRoot`).
    pub sysfs_root: PathBuf,
    /// A counter may rise by this much between two checks before the port is degraded.
    pub error_threshold: u64,
    /// Lanes every port should have (`ibWidth`); `None`: what it had when first seen.
    pub width: Option<u32>,
    /// The lane speed every port should have (`ibSpeed`); `None`: as first seen.
    pub speed: Option<IbSpeed>,
}

pub use hyperplan_shared::ibrate::{IbSpeed, parse_width};

/// The check: remembers each port's expected width and speed and its last counters.
pub struct IbCheck {
    opts: IbOptions,
    ports: BTreeMap<String, Memory>,
    said: Said,
}

/// What one port had.
#[derive(Default)]
struct Memory {
    /// Width and lane speed when first seen active (speed name, Gb/s a lane).
    width: Option<u32>,
    speed: Option<(Option<String>, f64)>,
    counters: BTreeMap<&'static str, u64>,
    /// Seen `ACTIVE` and `LinkUp` by this agent: only then is it down when it is not.
    seen_up: bool,
}

/// What was read of one port now.
#[derive(Debug, Default)]
struct Reading {
    state: Option<String>,
    phys: Option<String>,
    rate: Option<Rate>,
    counters: Vec<(&'static str, u64)>,
    /// An attribute that is there but could not be read or parsed, said.
    trouble: Option<String>,
}

/// `100 Gb/sec (4X EDR)`.
#[derive(Clone, Debug, PartialEq)]
struct Rate {
    gbps: f64,
    width: Option<u32>,
    speed: Option<String>,
}

impl IbCheck {
    pub fn new(opts: IbOptions) -> IbCheck {
        IbCheck {
            opts,
            ports: BTreeMap::new(),
            said: Said::new(EVERY),
        }
    }
}

impl Check for IbCheck {
    fn kind(&self) -> &'static str {
        "ib"
    }

    fn run(&mut self, ctx: &Context) -> Vec<CheckResult> {
        let root = &self.opts.sysfs_root;
        let class = root.join("class/infiniband");
        let devices = match list_dir(&class) {
            Ok(Some(names)) => names,
            Ok(None) => return Vec::new(), // no RDMA devices
            Err(e) => return vec![CheckResult::bad("ib", CheckState::Degraded, CHECK_ERROR, e.to_string())],
        };
        let inside = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
        let mut results = Vec::new();
        for dev in devices {
            if !maybe_infiniband(&dev) {
                continue;
            }
            let dir = follow(&class.join(&dev));
            match std::fs::canonicalize(&dir) {
                Ok(real) if real.starts_with(&inside) => {}
                _ => {
                    if let Some(unsaid) = self.said.now(Instant::now()) {
                        tracing::warn!(
                            device = %dev,
                            unsaid,
                            "{} leads out of {} or nowhere; not checked",
                            class.join(&dev).display(),
                            root.display()
                        );
                    }
                    continue;
                }
            }
            let ports_dir = dir.join("ports");
            let Ok(Some(ports)) = list_dir(&ports_dir) else {
                continue;
            };
            for port in ports {
                if results.len() >= MAX_PORTS {
                    return results;
                }
                let port_dir = ports_dir.join(&port);
                let is_dir = std::fs::symlink_metadata(&port_dir).is_ok_and(|m| m.is_dir());
                if parse_decimal(&port).is_none() || !is_dir {
                    continue;
                }
                let name = format!("ib:{dev}/{port}");
                ctx.at(&name);
                match read_port(&port_dir, &dev) {
                    Some(reading) => {
                        let memory = self.ports.entry(name.clone()).or_default();
                        results.push(judge(
                            &name,
                            &format!("{dev} port {port}"),
                            &reading,
                            memory,
                            &self.opts,
                        ));
                    }
                    None => continue, // not an InfiniBand port
                }
            }
        }
        let seen: Vec<&str> = results.iter().map(|r| r.check.as_str()).collect();
        self.ports.retain(|name, _| seen.contains(&name.as_str()));
        results
    }
}

/// Devices whose name says another fabric are left out at once.
fn maybe_infiniband(dev: &str) -> bool {
    !["hfi1", "usnic", "iw", "i40iw", "cxgb", "siw", "rxe", "efa"]
        .iter()
        .any(|p| dev.starts_with(p))
}

/// An attribute that is there but cannot be read as text; said as the port's trouble.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
struct AttrError {
    path: String,
    why: String,
}

/// One attribute: `Ok(None)` when it is not there.
fn attr(path: &Path) -> Result<Option<String>, AttrError> {
    let fail = |why: String| AttrError {
        path: path.display().to_string(),
        why,
    };
    match read_regular_no_link(path, MAX_ATTR) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(|t| Some(clean(&t).to_string()))
            .map_err(|_| fail("not text".into())),
        Err(e) if e.is_missing() => Ok(None),
        Err(e) => Err(fail(e.to_string())),
    }
}

/// The port's attributes; `None` when it is not an InfiniBand port (its link layer says
/// Ethernet, or the device says nothing and is no IB driver).
fn read_port(dir: &Path, dev: &str) -> Option<Reading> {
    let mut reading = Reading::default();
    let mut trouble = |text: String| {
        if reading.trouble.is_none() {
            reading.trouble = Some(text);
        }
    };
    match attr(&dir.join("link_layer")) {
        Ok(Some(layer)) if layer.eq_ignore_ascii_case("InfiniBand") => {}
        Ok(Some(_)) => return None,
        _ if IB_PREFIXES.iter().any(|p| dev.starts_with(p)) => {}
        _ => return None,
    }
    let mut parsed = |file: &str, what: &str, parse: fn(&str) -> Option<String>| match attr(&dir.join(file)) {
        Ok(Some(text)) => match parse(&text) {
            Some(v) => Some(v),
            None => {
                trouble(format!(
                    "{}: {:?} is not {what}",
                    dir.join(file).display(),
                    hyperplan_shared::names::shorten(&text, 40)
                ));
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            trouble(e.to_string());
            None
        }
    };
    let state = parsed("state", "a port state", numbered_text);
    let phys = parsed("phys_state", "a physical state", numbered_text);
    let rate = parsed("rate", "a rate", |t| parse_rate(t).map(|_| t.to_string()));
    let mut counters = Vec::new();
    for (file, _) in COUNTERS {
        if let Some(n) = parsed(&format!("counters/{file}"), "a count", |t| {
            parse_decimal_u64(t).map(|n| n.to_string())
        }) && let Ok(n) = n.parse()
        {
            counters.push((file, n));
        }
    }
    reading.state = state;
    reading.phys = phys;
    reading.rate = rate.as_deref().and_then(rate_of);
    reading.counters = counters;
    Some(reading)
}

/// `100 Gb/sec (4X EDR)` → 100, 4, EDR; `10 Gb/sec (4X)` → 10, 4, none.
fn rate_of(text: &str) -> Option<Rate> {
    let gbps = parse_rate(text)?;
    let inner = text
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(i, _)| i);
    let mut words = inner.unwrap_or_default().split_whitespace();
    let width = words.next().and_then(parse_width);
    let speed = words.next().map(str::to_string);
    Some(Rate { gbps, width, speed })
}

/// One port's result from what was read and what it had; remembers what it has now.
fn judge(name: &str, port: &str, now: &Reading, memory: &mut Memory, opts: &IbOptions) -> CheckResult {
    // Counters first: their baseline moves on whatever else is wrong.
    let mut rose = Vec::new();
    for (file, value) in &now.counters {
        let before = memory.counters.insert(file, *value);
        if let Some(before) = before
            && *value > before
            && value - before > opts.error_threshold
        {
            let words = COUNTERS.iter().find(|(f, _)| f == file).map_or(*file, |(_, w)| w);
            rose.push(format!("{words} +{}", value - before));
        }
    }
    let active = now.state.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("ACTIVE"));
    let up = now.phys.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("LinkUp"));
    if now.state.is_none() || now.phys.is_none() {
        let text = now
            .trouble
            .clone()
            .unwrap_or_else(|| format!("{port}: no state or physical state"));
        return CheckResult::bad(name, CheckState::Degraded, CHECK_ERROR, text);
    }
    if !active || !up {
        let (state, phys) = (now.state.as_deref().unwrap_or("?"), now.phys.as_deref().unwrap_or("?"));
        // A port never up since the agent started is taken for one without a cable (the
        // second port of many HCAs): failing it would drain every such node.
        if !memory.seen_up {
            let mut ok = CheckResult::ok(name);
            ok.text = format!("{port} is {state} (physical state {phys}) and was never up: not checked");
            return ok;
        }
        return CheckResult::bad(
            name,
            CheckState::Failed,
            "ib-down",
            format!("{port} is {state} (physical state {phys})"),
        );
    }
    memory.seen_up = true;
    let lane = now
        .rate
        .as_ref()
        .and_then(|r| r.width.map(|w| (r.speed.clone(), r.gbps / f64::from(w))));
    if memory.width.is_none() {
        memory.width = now.rate.as_ref().and_then(|r| r.width);
    }
    if memory.speed.is_none() {
        memory.speed = lane.clone();
    }
    let want_width = opts.width.or(memory.width);
    if let (Some(want), Some(have)) = (want_width, now.rate.as_ref().and_then(|r| r.width))
        && have < want
    {
        return CheckResult::bad(
            name,
            CheckState::Failed,
            "ib-width",
            format!("{port} width {have}x (expected {want}x)"),
        );
    }
    let want_speed = opts
        .speed
        .map(|s| (Some(s.name().to_string()), s.lane_gbps()))
        .or_else(|| memory.speed.clone());
    if let (Some((want_name, want)), Some((have_name, have))) = (want_speed, lane)
        && have < want * 0.999
    {
        let text = match (have_name, want_name) {
            (Some(h), Some(w)) => format!("{port} speed {h} (expected {w})"),
            _ => format!("{port} speed {have} Gb/sec a lane (expected {want})"),
        };
        return CheckResult::bad(name, CheckState::Degraded, "ib-speed", text);
    }
    if !rose.is_empty() {
        return CheckResult::bad(
            name,
            CheckState::Degraded,
            "ib-errors",
            format!("{port} {} since the last check", rose.join(", ")),
        );
    }
    if let Some(trouble) = &now.trouble {
        return CheckResult::bad(name, CheckState::Degraded, CHECK_ERROR, trouble.clone());
    }
    CheckResult::ok(name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The probe's fixture tree: an mlx4_0 with two `4X QDR` ports, an mlx5_0 at `1X EDR`
    /// with a garbled physical state, an Omni-Path hfi1_0 (left out).
    fn fixture() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/sysfs/procfs/fixtures/sys/class/infiniband");
        let to = tmp.path().join("class/infiniband");
        copy_tree(&from, &to);
        let sys = tmp.path().to_path_buf();
        (tmp, sys)
    }

    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_tree(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }

    fn set(sys: &Path, port: &str, file: &str, value: &str) {
        let path = sys.join("class/infiniband").join(port).join(file);
        std::fs::write(path, format!("{value}\n")).unwrap();
    }

    fn options(sys: &Path) -> IbOptions {
        IbOptions {
            sysfs_root: sys.to_path_buf(),
            error_threshold: 0,
            width: None,
            speed: None,
        }
    }

    fn port<'a>(results: &'a [CheckResult], name: &str) -> &'a CheckResult {
        results.iter().find(|r| r.check == name).unwrap()
    }

    #[test]
    fn the_fixture_ports_are_read_and_only_infiniband_ones() {
        let (_tmp, sys) = fixture();
        let mut check = IbCheck::new(options(&sys));
        let results = check.run(&Context::detached());
        let names: Vec<&str> = results.iter().map(|r| r.check.as_str()).collect();
        assert_eq!(names, ["ib:mlx4_0/1", "ib:mlx4_0/2", "ib:mlx5_0/1"]);
        assert_eq!(port(&results, "ib:mlx4_0/1"), &CheckResult::ok("ib:mlx4_0/1"));
        // mlx5_0's fixture says `4: ACTIVE` as its physical state: not LinkUp, and never
        // up since the agent started: taken for a port without a cable, not checked.
        let mlx5 = port(&results, "ib:mlx5_0/1");
        assert_eq!((mlx5.state, mlx5.code.as_str()), (CheckState::Ok, ""));
        assert_eq!(
            mlx5.text,
            "mlx5_0 port 1 is ACTIVE (physical state ACTIVE) and was never up: not checked"
        );
    }

    #[test]
    fn a_port_flipped_to_1x_fails_with_the_reason_and_returns_when_flipped_back() {
        let (_tmp, sys) = fixture();
        let mut check = IbCheck::new(options(&sys));
        let ctx = Context::detached();
        assert_eq!(port(&check.run(&ctx), "ib:mlx4_0/1").state, CheckState::Ok);
        set(&sys, "mlx4_0/ports/1", "rate", "10 Gb/sec (1X QDR)");
        let results = check.run(&ctx);
        let r = port(&results, "ib:mlx4_0/1");
        assert_eq!((r.state, r.code.as_str()), (CheckState::Failed, "ib-width"));
        assert_eq!(r.text, "mlx4_0 port 1 width 1x (expected 4x)");
        assert_eq!(r.describe(), "ib:mlx4_0/1: mlx4_0 port 1 width 1x (expected 4x)");
        assert_eq!(
            port(&results, "ib:mlx4_0/2").state,
            CheckState::Ok,
            "the other port is fine"
        );
        set(&sys, "mlx4_0/ports/1", "rate", "40 Gb/sec (4X QDR)");
        assert_eq!(port(&check.run(&ctx), "ib:mlx4_0/1"), &CheckResult::ok("ib:mlx4_0/1"));
        // Down, then up again.
        set(&sys, "mlx4_0/ports/1", "state", "1: DOWN");
        set(&sys, "mlx4_0/ports/1", "phys_state", "2: Polling");
        let r = check.run(&ctx);
        let r = port(&r, "ib:mlx4_0/1");
        assert_eq!((r.state, r.code.as_str()), (CheckState::Failed, "ib-down"));
        assert_eq!(r.text, "mlx4_0 port 1 is DOWN (physical state Polling)");
        set(&sys, "mlx4_0/ports/1", "state", "4: ACTIVE");
        set(&sys, "mlx4_0/ports/1", "phys_state", "5: LinkUp");
        assert_eq!(port(&check.run(&ctx), "ib:mlx4_0/1").state, CheckState::Ok);
    }

    #[test]
    fn configured_width_and_speed_win_over_what_was_first_seen() {
        let (_tmp, sys) = fixture();
        let mut opts = options(&sys);
        opts.width = Some(8);
        let ctx = Context::detached();
        let r = IbCheck::new(opts.clone()).run(&ctx);
        assert_eq!(port(&r, "ib:mlx4_0/1").text, "mlx4_0 port 1 width 4x (expected 8x)");
        opts.width = Some(4);
        opts.speed = Some(IbSpeed::Edr);
        let r = IbCheck::new(opts).run(&ctx);
        let r = port(&r, "ib:mlx4_0/2");
        assert_eq!((r.state, r.code.as_str()), (CheckState::Degraded, "ib-speed"));
        assert_eq!(r.text, "mlx4_0 port 2 speed QDR (expected EDR)");
        // A lane speed lost since first seen is degraded too.
        let mut check = IbCheck::new(options(&sys));
        check.run(&ctx);
        set(&sys, "mlx4_0/ports/2", "rate", "20 Gb/sec (4X DDR)");
        let r = check.run(&ctx);
        assert_eq!(port(&r, "ib:mlx4_0/2").text, "mlx4_0 port 2 speed DDR (expected QDR)");
    }

    #[test]
    fn counters_rising_degrade_the_port_until_they_stop() {
        let (_tmp, sys) = fixture();
        let mut opts = options(&sys);
        opts.error_threshold = 5;
        let mut check = IbCheck::new(opts);
        let ctx = Context::detached();
        set(&sys, "mlx4_0/ports/1", "counters/symbol_error", "100");
        assert_eq!(
            port(&check.run(&ctx), "ib:mlx4_0/1").state,
            CheckState::Ok,
            "a baseline, not news"
        );
        set(&sys, "mlx4_0/ports/1", "counters/symbol_error", "104");
        assert_eq!(
            port(&check.run(&ctx), "ib:mlx4_0/1").state,
            CheckState::Ok,
            "within the threshold"
        );
        set(&sys, "mlx4_0/ports/1", "counters/symbol_error", "116");
        set(&sys, "mlx4_0/ports/1", "counters/link_downed", "1");
        let r = check.run(&ctx);
        let r = port(&r, "ib:mlx4_0/1");
        assert_eq!((r.state, r.code.as_str()), (CheckState::Degraded, "ib-errors"));
        assert_eq!(r.text, "mlx4_0 port 1 symbol errors +12 since the last check");
        assert_eq!(
            port(&check.run(&ctx), "ib:mlx4_0/1").state,
            CheckState::Ok,
            "stopped rising"
        );
        // A counter that went back (reset) is a new baseline.
        set(&sys, "mlx4_0/ports/1", "counters/symbol_error", "0");
        assert_eq!(port(&check.run(&ctx), "ib:mlx4_0/1").state, CheckState::Ok);
    }

    #[test]
    fn garbage_is_a_check_error_never_a_panic_and_links_out_are_not_followed() {
        let (tmp, sys) = fixture();
        let ctx = Context::detached();
        set(&sys, "mlx4_0/ports/1", "state", "\u{0}\u{1}garbage");
        set(&sys, "mlx4_0/ports/2", "counters/symbol_error", "-3");
        let mut check = IbCheck::new(options(&sys));
        let r = check.run(&ctx);
        let p1 = port(&r, "ib:mlx4_0/1");
        assert_eq!((p1.state, p1.code.as_str()), (CheckState::Degraded, CHECK_ERROR));
        assert!(p1.text.contains("is not a port state"), "{}", p1.text);
        let p2 = port(&r, "ib:mlx4_0/2");
        assert_eq!((p2.state, p2.code.as_str()), (CheckState::Degraded, CHECK_ERROR));
        // An attribute that is a link (out of the tree) is refused, said as trouble.
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "4: ACTIVE\n").unwrap();
        let state = sys.join("class/infiniband/mlx4_0/ports/2/state");
        std::fs::remove_file(&state).unwrap();
        std::os::unix::fs::symlink(&outside, &state).unwrap();
        let r = check.run(&ctx);
        assert_eq!(port(&r, "ib:mlx4_0/2").code, CHECK_ERROR);
        // A device that leads out of the tree is not looked at.
        let elsewhere = tempfile::tempdir().unwrap();
        copy_tree(&sys.join("class/infiniband/mlx4_0"), &elsewhere.path().join("mlx4_9"));
        std::os::unix::fs::symlink(elsewhere.path().join("mlx4_9"), sys.join("class/infiniband/mlx4_9")).unwrap();
        let r = check.run(&ctx);
        assert!(r.iter().all(|c| !c.check.starts_with("ib:mlx4_9")), "{r:?}");
        // No class/infiniband at all: nothing to say.
        let none = tempfile::tempdir().unwrap();
        assert!(IbCheck::new(options(none.path())).run(&ctx).is_empty());
    }

    #[test]
    fn widths_speeds_and_rates_parse() {
        assert_eq!(parse_width("4x"), Some(4));
        assert_eq!(parse_width("12X"), Some(12));
        assert_eq!(parse_width("3x"), None);
        assert_eq!(parse_width("4"), None);
        assert_eq!(IbSpeed::parse("edr"), Some(IbSpeed::Edr));
        assert_eq!(IbSpeed::parse("FDR10").map(IbSpeed::lane_gbps), Some(10.0));
        assert_eq!(IbSpeed::parse("fast"), None);
        assert_eq!(
            rate_of("100 Gb/sec (4X EDR)"),
            Some(Rate {
                gbps: 100.0,
                width: Some(4),
                speed: Some("EDR".into())
            })
        );
        assert_eq!(
            rate_of("10 Gb/sec (4X)"),
            Some(Rate {
                gbps: 10.0,
                width: Some(4),
                speed: None
            })
        );
        assert_eq!(rate_of("fast"), None);
    }
}
