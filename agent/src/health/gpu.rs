//! GPUs, through NVML when the node has it (`libnvidia-ml.so.1`, loaded at each check
//! as the probe loads it; a node without it has no GPU results). One result per GPU,
//! `gpu:<index>`, the worst problem first:
//!
//! - NVML says the GPU is lost (off the bus) → failed `gpu-lost`; another error reaching
//!   it → failed `gpu-error`;
//! - a row remap that failed → failed `gpu-remap-failed`;
//! - uncorrectable ECC errors since the driver loaded → failed `gpu-ecc`;
//! - an NVLink that was active when this agent first saw the GPU and is not now →
//!   failed `gpu-nvlink`;
//! - NVLink fabric registration that ended in an error → failed `gpu-fabric`; fabric
//!   health reporting trouble (degraded bandwidth, route recovery) → degraded
//!   `gpu-fabric`;
//! - a row remap or page retirement waiting for a reset → degraded `gpu-reset-needed`
//!   (the GPU works; it wants a reset when it is idle).
//!
//! And `gpus`: fewer GPUs than this agent first saw → failed `gpu-missing`; NVML that
//! does not answer (the driver not loaded, a wedged driver) → failed `gpu-error` where
//! NVIDIA GPUs are on the PCI bus, nothing where there are none (a CPU node whose image
//! carries the library).
//!
//! XID errors are not read here: [`super::xid`] reads them from the kernel log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hyperplan_shared::gpufabric::{FabricState, FabricStatus};
use hyperplan_shared::health::{CheckResult, CheckState};

use super::{Check, Context};
use crate::bounded::read_regular_no_link;
use crate::probe::nvlink::{GpuHealth, HealthReader};
use crate::probe::sysfs::{clean, follow, list_dir};

/// NVIDIA's PCI vendor id, as sysfs writes it.
const NVIDIA_VENDOR: &str = "0x10de";
/// PCI classes of GPUs: VGA controller, 3D controller (NVSwitches are bridges, 0x0680).
const GPU_CLASSES: [&str; 2] = ["0x0300", "0x0302"];
/// PCI functions looked at, at most.
const MAX_PCI: usize = 4096;

/// The check: remembers the GPU count and each GPU's active NVLinks when first seen.
pub struct GpuCheck {
    reader: Box<dyn HealthReader>,
    /// The sysfs tree, to count NVIDIA GPUs on the PCI bus when NVML does not answer.
    sysfs_root: PathBuf,
    first_count: Option<usize>,
    links: BTreeMap<u32, Vec<u32>>,
}

impl GpuCheck {
    pub fn new(reader: Box<dyn HealthReader>, sysfs_root: PathBuf) -> GpuCheck {
        GpuCheck {
            reader,
            sysfs_root,
            first_count: None,
            links: BTreeMap::new(),
        }
    }
}

/// NVIDIA GPUs on the PCI bus (`<sysfs>/bus/pci/devices/*/vendor` and `class`).
fn nvidia_gpus(sysfs_root: &Path) -> usize {
    let dir = sysfs_root.join("bus/pci/devices");
    let attr = |dev: &Path, name: &str| {
        read_regular_no_link(&dev.join(name), 64)
            .ok()
            .map(|b| clean(&String::from_utf8_lossy(&b)).to_ascii_lowercase())
    };
    list_dir(&dir)
        .ok()
        .flatten()
        .unwrap_or_default()
        .iter()
        .take(MAX_PCI)
        .map(|name| follow(&dir.join(name)))
        .filter(|dev| attr(dev, "vendor").as_deref() == Some(NVIDIA_VENDOR))
        .filter(|dev| attr(dev, "class").is_some_and(|c| GPU_CLASSES.iter().any(|g| c.starts_with(g))))
        .count()
}

impl Check for GpuCheck {
    fn kind(&self) -> &'static str {
        "gpu"
    }

    fn run(&mut self, ctx: &Context) -> Vec<CheckResult> {
        ctx.at("gpus");
        let gpus = match self.reader.read_health() {
            Ok(Some(gpus)) => gpus,
            Ok(None) => return Vec::new(),
            Err(e) => {
                let on_bus = nvidia_gpus(&self.sysfs_root);
                if on_bus == 0 {
                    tracing::debug!("NVML does not answer and no NVIDIA GPU is on the PCI bus: {e}");
                    return Vec::new();
                }
                return vec![CheckResult::bad(
                    "gpus",
                    CheckState::Failed,
                    "gpu-error",
                    format!("NVML: {e} ({on_bus} NVIDIA GPUs on the PCI bus)"),
                )];
            }
        };
        let mut out = Vec::with_capacity(gpus.len() + 1);
        let first = *self.first_count.get_or_insert(gpus.len());
        if gpus.len() < first {
            out.push(CheckResult::bad(
                "gpus",
                CheckState::Failed,
                "gpu-missing",
                format!("{} GPUs (expected {first})", gpus.len()),
            ));
        } else if first > 0 {
            out.push(CheckResult::ok("gpus"));
        }
        for gpu in &gpus {
            let up: Vec<u32> = gpu.nvlinks.iter().filter(|(_, a)| *a).map(|(l, _)| *l).collect();
            let was_up = self.links.entry(gpu.index).or_insert(up);
            out.push(judge(gpu, was_up));
        }
        out
    }
}

/// One GPU's result; `was_up`: its NVLinks active when first seen.
fn judge(gpu: &GpuHealth, was_up: &[u32]) -> CheckResult {
    let name = format!("gpu:{}", gpu.index);
    let who = if gpu.pci_bus_id.is_empty() {
        format!("GPU {}", gpu.index)
    } else {
        format!("GPU {} ({})", gpu.index, gpu.pci_bus_id)
    };
    let failed = |code: &str, text: String| CheckResult::bad(name.clone(), CheckState::Failed, code, text);
    if let Some(word) = &gpu.lost {
        let code = if word == "NVML_ERROR_GPU_IS_LOST" {
            "gpu-lost"
        } else {
            "gpu-error"
        };
        return failed(code, format!("{who} cannot be reached: {word}"));
    }
    if gpu.remap_failed == Some(true) {
        return failed("gpu-remap-failed", format!("{who}: a row remap failed"));
    }
    if let Some(n) = gpu.ecc_uncorrected.filter(|n| *n > 0) {
        return failed(
            "gpu-ecc",
            format!("{who}: {n} uncorrectable ECC errors since the driver loaded"),
        );
    }
    let down: Vec<String> = was_up
        .iter()
        .filter(|l| gpu.nvlinks.iter().any(|(n, active)| n == *l && !active))
        .map(u32::to_string)
        .collect();
    if !down.is_empty() {
        return failed(
            "gpu-nvlink",
            format!("{who}: NVLink {} down (active when first seen)", down.join(", ")),
        );
    }
    if let Some(fabric) = &gpu.fabric {
        if let (FabricState::Completed, FabricStatus::Error(e)) = (&fabric.state, &fabric.status) {
            return failed("gpu-fabric", format!("{who}: NVLink fabric registration failed: {e}"));
        }
        if fabric.health.degraded() {
            return CheckResult::bad(
                name,
                CheckState::Degraded,
                "gpu-fabric",
                format!("{who}: NVLink fabric {}", fabric.health.problems().join(", ")),
            );
        }
    }
    if gpu.remap_pending == Some(true) || gpu.retired_pages_pending == Some(true) {
        let what = if gpu.remap_pending == Some(true) {
            "a row remap"
        } else {
            "a page retirement"
        };
        return CheckResult::bad(
            name,
            CheckState::Degraded,
            "gpu-reset-needed",
            format!("{who}: {what} waits for a GPU reset"),
        );
    }
    CheckResult::ok(name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use hyperplan_shared::gpufabric::{FabricHealth, GpuFabric};

    use super::*;
    use crate::probe::nvlink::NvlinkError;

    /// Says what it is told.
    struct Fake(Arc<Mutex<Result<Option<Vec<GpuHealth>>, u32>>>);

    impl HealthReader for Fake {
        fn read_health(&self) -> Result<Option<Vec<GpuHealth>>, NvlinkError> {
            match &*self.0.lock().unwrap() {
                Ok(v) => Ok(v.clone()),
                Err(code) => Err(NvlinkError::Nvml {
                    call: "nvmlInit_v2".into(),
                    code: *code,
                }),
            }
        }
    }

    fn healthy(index: u32) -> GpuHealth {
        GpuHealth {
            index,
            pci_bus_id: format!("0000:{:02x}:00.0", 0x18 + index),
            ecc_uncorrected: Some(0),
            remap_pending: Some(false),
            remap_failed: Some(false),
            nvlinks: (0..4).map(|l| (l, true)).collect(),
            ..GpuHealth::default()
        }
    }

    fn by_name<'a>(results: &'a [CheckResult], name: &str) -> &'a CheckResult {
        results.iter().find(|r| r.check == name).unwrap()
    }

    #[test]
    fn gpu_troubles_are_judged_worst_first() {
        let said = Arc::new(Mutex::new(Ok(Some(vec![healthy(0), healthy(1)]))));
        let sys = tempfile::tempdir().unwrap();
        let mut check = GpuCheck::new(Box::new(Fake(said.clone())), sys.path().to_path_buf());
        let ctx = Context::detached();
        let r = check.run(&ctx);
        assert!(r.iter().all(|c| c.state == CheckState::Ok), "{r:?}");
        assert_eq!(r.len(), 3, "gpus, gpu:0, gpu:1");
        let mut sick = healthy(1);
        sick.nvlinks[2].1 = false;
        sick.remap_pending = Some(true);
        *said.lock().unwrap() = Ok(Some(vec![healthy(0), sick.clone()]));
        let r = check.run(&ctx);
        let g1 = by_name(&r, "gpu:1");
        assert_eq!((g1.state, g1.code.as_str()), (CheckState::Failed, "gpu-nvlink"));
        assert_eq!(g1.text, "GPU 1 (0000:19:00.0): NVLink 2 down (active when first seen)");
        sick.nvlinks[2].1 = true;
        *said.lock().unwrap() = Ok(Some(vec![healthy(0), sick.clone()]));
        let r = check.run(&ctx);
        let g1 = by_name(&r, "gpu:1");
        assert_eq!((g1.state, g1.code.as_str()), (CheckState::Degraded, "gpu-reset-needed"));
        sick.ecc_uncorrected = Some(2);
        *said.lock().unwrap() = Ok(Some(vec![healthy(0), sick]));
        let r = check.run(&ctx);
        assert_eq!(
            by_name(&r, "gpu:1").text,
            "GPU 1 (0000:19:00.0): 2 uncorrectable ECC errors since the driver loaded"
        );
        // One falls off the bus, then is gone from NVML's list.
        let lost = GpuHealth {
            index: 1,
            lost: Some("NVML_ERROR_GPU_IS_LOST".into()),
            ..GpuHealth::default()
        };
        *said.lock().unwrap() = Ok(Some(vec![healthy(0), lost]));
        let r = check.run(&ctx);
        let g1 = by_name(&r, "gpu:1");
        assert_eq!((g1.state, g1.code.as_str()), (CheckState::Failed, "gpu-lost"));
        *said.lock().unwrap() = Ok(Some(vec![healthy(0)]));
        let r = check.run(&ctx);
        let gpus = by_name(&r, "gpus");
        assert_eq!((gpus.state, gpus.code.as_str()), (CheckState::Failed, "gpu-missing"));
        assert_eq!(gpus.text, "1 GPUs (expected 2)");
        assert!(r.iter().all(|c| c.check != "gpu:1"));
        // NVML that fails where no NVIDIA GPU is on the bus, or no NVML: nothing.
        *said.lock().unwrap() = Err(9);
        assert!(check.run(&ctx).is_empty());
        *said.lock().unwrap() = Ok(None);
        assert!(check.run(&ctx).is_empty());
        // Where GPUs are on the bus, NVML that fails is a failure.
        pci(sys.path(), "0000:18:00.0", "0x10de", "0x030200");
        *said.lock().unwrap() = Err(9);
        let r = check.run(&ctx);
        assert_eq!((r[0].check.as_str(), r[0].code.as_str()), ("gpus", "gpu-error"));
        assert_eq!(
            r[0].text,
            "NVML: nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED (1 NVIDIA GPUs on the PCI bus)"
        );
    }

    fn pci(sys: &Path, address: &str, vendor: &str, class: &str) {
        let dev = sys.join("bus/pci/devices").join(address);
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), format!("{vendor}\n")).unwrap();
        std::fs::write(dev.join("class"), format!("{class}\n")).unwrap();
    }

    #[test]
    fn nvidia_gpus_are_counted_on_the_pci_bus_and_nothing_else() {
        let sys = tempfile::tempdir().unwrap();
        assert_eq!(nvidia_gpus(sys.path()), 0);
        pci(sys.path(), "0000:18:00.0", "0x10de", "0x030200");
        pci(sys.path(), "0000:19:00.0", "0x10de", "0x030000");
        pci(sys.path(), "0000:05:00.0", "0x10de", "0x068000"); // an NVSwitch
        pci(sys.path(), "0000:00:02.0", "0x8086", "0x030000"); // Intel graphics
        assert_eq!(nvidia_gpus(sys.path()), 2);
    }

    #[test]
    fn the_nvlink_fabric_is_judged() {
        let mut gpu = healthy(0);
        let mut fabric = GpuFabric::not_supported();
        fabric.state = FabricState::Completed;
        fabric.status = FabricStatus::Error("NVML_ERROR_TIMEOUT".into());
        gpu.fabric = Some(fabric.clone());
        let r = judge(&gpu, &[]);
        assert_eq!((r.state, r.code.as_str()), (CheckState::Failed, "gpu-fabric"));
        fabric.status = FabricStatus::Success;
        fabric.health = FabricHealth {
            degraded_bandwidth: Some(true),
            ..FabricHealth::default()
        };
        gpu.fabric = Some(fabric);
        let r = judge(&gpu, &[]);
        assert_eq!((r.state, r.code.as_str()), (CheckState::Degraded, "gpu-fabric"));
        assert_eq!(r.text, "GPU 0 (0000:18:00.0): NVLink fabric bandwidth degraded");
    }

    #[test]
    fn a_node_without_nvml_has_no_gpu_results() {
        let nvml = crate::probe::nvlink::Nvml {
            library: "/nonexistent/hyperplan/libnvidia-ml.so.1".into(),
        };
        let sys = tempfile::tempdir().unwrap();
        let mut check = GpuCheck::new(Box::new(nvml), sys.path().to_path_buf());
        assert!(check.run(&Context::detached()).is_empty());
    }
}
