//! `GpuFabric`: what a GPU says about the NVLink fabric it joined, and the rule that turns
//! one machine's GPUs into an NVLink domain (or says plainly why not).
//!
//! GB200/GB300 NVL72 racks put up to 72 GPUs in one NVLink domain, spread over 18 compute
//! trays (machines). Each GPU learns its domain from Fabric Manager: a cluster UUID (the
//! domain) and a clique id (the NVLink partition inside it). The agent reads them with
//! NVML (`nvmlDeviceGetGpuFabricInfoV`, see [`from_nvml`]) or, failing that, with
//! `nvidia-smi` ([`parse_smi_csv`], [`parse_smi_query`]); the planner makes HyperNodes of
//! the domains ([`node_domain`], [`domain_name`], [`partition_name`]).
//!
//! Everything here is pure: no I/O, no panics, bounded input. Text from `nvidia-smi` is
//! untrusted: values kept from it are escaped and cut short, and errors name the line and
//! the field and say what was expected.
//!
//! A plain HGX/DGX H100 or B200 (NVLink inside one machine only) reports `Completed`,
//! `Success`, clique 0 and the all-zero cluster UUID: it is in no multi-node domain. So is
//! a machine whose driver reports no cluster UUID at all (the 535 series prints only the
//! fabric `State` and `Status`).
//!
//! What nvidia-smi prints, by driver (real captures: see `testdata/nvidia/README.md`):
//! 535 prints a `-q` `Fabric` block with `State` and `Status` only; 550 and 560 add
//! `CliqueId`, `ClusterUUID` and a `Health` block (`Bandwidth`, route and timeout flags);
//! 580 and later add `Summary` and `Incorrect Configuration` to it (595: `Partition
//! Assigned`, not read here), and `--query-gpu` gains the `fabric.health.*` fields
//! ([`SMI_HEALTH_FIELDS`]), which older drivers refuse (`Field "…" is not a valid field
//! to query.`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limits::human;
use crate::names::{escape, shorten};

/// The `--query-gpu=` fields every driver with an NVLink fabric knows, as in
/// `nvidia-smi --query-gpu=index,pci.bus_id,fabric.clusterUuid,fabric.cliqueId,fabric.state,fabric.status --format=csv`;
/// [`parse_smi_csv`] reads its output. They say nothing of health: the agent asks for
/// [`SMI_QUERY_HEALTH`] first and falls back to this list on a driver that refuses the
/// health fields.
pub const SMI_QUERY: &str = "index,pci.bus_id,fabric.clusterUuid,fabric.cliqueId,fabric.state,fabric.status";

/// The fabric health fields of `--query-gpu` (driver 580 and later; `nvidia-smi
/// --help-query-gpu` lists them after `fabric.clusterUuid`), in the order of
/// [`SMI_QUERY_HEALTH`]. Their values are those of `-q`'s `Health` block: `Healthy`,
/// `Unhealthy`, `Limited Capacity`; `Full`, `Degraded`; `True`, `False`; `None` or what is
/// wrong; `N/A` when the GPU does not report it. Older drivers refuse them with
/// `Field "fabric.health.summary" is not a valid field to query.`
/// (`fabric.health.partition_assigned`, 595 and later, is not asked for.)
pub const SMI_HEALTH_FIELDS: [&str; 6] = [
    "fabric.health.summary",
    "fabric.health.bandwidth",
    "fabric.health.route_recovery_in_progress",
    "fabric.health.route_unhealthy",
    "fabric.health.access_timeout_recovery",
    "fabric.health.incorrect_configuration",
];

/// The `--query-gpu=` value the agent runs first: [`SMI_QUERY`] and then
/// [`SMI_HEALTH_FIELDS`]. [`parse_smi_csv`] reads the health columns into
/// [`GpuFabric::health`].
pub const SMI_QUERY_HEALTH: &str = "index,pci.bus_id,fabric.clusterUuid,fabric.cliqueId,fabric.state,fabric.status,\
fabric.health.summary,fabric.health.bandwidth,fabric.health.route_recovery_in_progress,fabric.health.route_unhealthy,\
fabric.health.access_timeout_recovery,fabric.health.incorrect_configuration";

/// Largest `nvidia-smi --query-gpu` output read, in bytes (1 MiB; [`MAX_GPUS`] lines of
/// [`SMI_QUERY_HEALTH`] are about 150 KiB).
pub const MAX_SMI_CSV: usize = 1 << 20;

/// Largest `nvidia-smi -q` output read, in bytes (8 MiB; `-q` prints some 8 KiB per GPU).
pub const MAX_SMI_QUERY: usize = 8 << 20;

/// Most GPUs one machine's output may list: more is not one machine.
pub const MAX_GPUS: usize = 1024;

/// Longest text kept from a value nvidia-smi printed (an unknown state, an error status).
const MAX_KEPT: usize = 64;

/// Longest text quoted in an error message.
const MAX_QUOTED: usize = 40;

/// Where a GPU stands in registering with the NVLink fabric (`nvmlGpuFabricState_t`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FabricState {
    /// No NVLink fabric (`NVML_GPU_FABRIC_STATE_NOT_SUPPORTED`, 0); nvidia-smi prints `N/A`.
    NotSupported,
    /// `NVML_GPU_FABRIC_STATE_NOT_STARTED` (1).
    NotStarted,
    /// `NVML_GPU_FABRIC_STATE_IN_PROGRESS` (2).
    InProgress,
    /// `NVML_GPU_FABRIC_STATE_COMPLETED` (3): the status says how it ended.
    Completed,
    /// A state this code does not know (a newer driver, an nvidia-smi error such as
    /// `[GPU is lost]`), as reported: escaped and cut short.
    Unknown(String),
}

impl FabricState {
    /// The state as nvidia-smi words it (`Completed`, `In Progress`, …).
    pub fn as_str(&self) -> &str {
        match self {
            FabricState::NotSupported => "Not Supported",
            FabricState::NotStarted => "Not Started",
            FabricState::InProgress => "In Progress",
            FabricState::Completed => "Completed",
            FabricState::Unknown(text) => text,
        }
    }

    /// Reads nvidia-smi's wording; `N/A`, `[N/A]` and `Not Supported` are
    /// [`FabricState::NotSupported`], anything unknown is kept as [`FabricState::Unknown`].
    pub fn from_smi(text: &str) -> FabricState {
        let t = text.trim();
        if is_not_available(t) {
            return FabricState::NotSupported;
        }
        match squash(t).as_str() {
            "completed" => FabricState::Completed,
            "inprogress" => FabricState::InProgress,
            "notstarted" => FabricState::NotStarted,
            _ => FabricState::Unknown(keep(t)),
        }
    }
}

impl fmt::Display for FabricState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How fabric registration ended (`nvmlReturn_t`); meaningful only once the state is
/// [`FabricState::Completed`], as NVML documents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FabricStatus {
    Success,
    /// Not reported (nvidia-smi's `N/A`, a GPU without a fabric).
    NotAvailable,
    /// Anything but success: the NVML name (`NVML_ERROR_TIMEOUT`) from NVML, nvidia-smi's
    /// text (escaped, cut short) from nvidia-smi.
    Error(String),
}

impl FabricStatus {
    /// Reads nvidia-smi's wording: `Success` (or `NVML_SUCCESS`), `N/A`, or an error text,
    /// kept escaped and cut short.
    pub fn from_smi(text: &str) -> FabricStatus {
        let t = text.trim();
        if matches!(squash(t).as_str(), "success" | "nvmlsuccess") {
            FabricStatus::Success
        } else if is_not_available(t) {
            FabricStatus::NotAvailable
        } else {
            FabricStatus::Error(keep(t))
        }
    }
}

impl fmt::Display for FabricStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FabricStatus::Success => f.write_str("Success"),
            FabricStatus::NotAvailable => f.write_str("N/A"),
            FabricStatus::Error(text) => f.write_str(text),
        }
    }
}

/// NVML's one-word verdict on fabric health (`NVML_GPU_FABRIC_HEALTH_SUMMARY_*`,
/// `nvmlGpuFabricInfo_v3_t.healthSummary`; nvidia-smi `-q` prints it as `Summary`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FabricHealthSummary {
    Healthy,
    Unhealthy,
    LimitedCapacity,
}

/// The fabric health a GPU reports, decoded from NVML's health mask ([`FabricHealth::from_mask`])
/// or read from nvidia-smi: `-q`'s `Health` block, or the `fabric.health.*` columns of
/// `--query-gpu` ([`SMI_HEALTH_FIELDS`]). The three sources name a problem the same way.
/// `None` is "not reported" (not supported, or a value this code cannot read);
/// `Some(false)` is a reported all-clear.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FabricHealth {
    /// NVLink bandwidth is degraded (`Bandwidth : Degraded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_bandwidth: Option<bool>,
    /// Route recovery is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_recovery: Option<bool>,
    /// A route is unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_unhealthy: Option<bool>,
    /// Access timeout recovery is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_timeout_recovery: Option<bool>,
    /// What is wrong with the fabric configuration (`insufficient NVLinks`, …); `None`
    /// when it is correct or not reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incorrect_configuration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<FabricHealthSummary>,
}

/// Bit layout of `healthMask` (NVML's `NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*` and `_WIDTH_*`,
/// where the width is the mask applied after the shift). Each 2-bit field is 0 not
/// supported, 1 true, 2 false.
mod mask {
    pub const DEGRADED_BW: u32 = 0;
    pub const ROUTE_RECOVERY: u32 = 2;
    pub const ROUTE_UNHEALTHY: u32 = 4;
    pub const ACCESS_TIMEOUT_RECOVERY: u32 = 6;
    pub const TWO_BITS: u32 = 0x3;
    /// 4 bits: 0 not supported, 1 none (correct), 2 and up: what is wrong.
    pub const INCORRECT_CONFIGURATION: u32 = 8;
    pub const FOUR_BITS: u32 = 0xf;
}

impl FabricHealth {
    /// Decodes NVML's `healthMask`. Fields NVML marks not supported stay `None`; bits past
    /// the incorrect-configuration field (partition assigned, global Fabric Manager state
    /// on newer drivers) are left to the raw mask.
    pub fn from_mask(health_mask: u32) -> FabricHealth {
        let flag = |shift: u32| match (health_mask >> shift) & mask::TWO_BITS {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        };
        let incorrect_configuration = match (health_mask >> mask::INCORRECT_CONFIGURATION) & mask::FOUR_BITS {
            0 | 1 => None,
            code => Some(incorrect_configuration_name(code)),
        };
        FabricHealth {
            degraded_bandwidth: flag(mask::DEGRADED_BW),
            route_recovery: flag(mask::ROUTE_RECOVERY),
            route_unhealthy: flag(mask::ROUTE_UNHEALTHY),
            access_timeout_recovery: flag(mask::ACCESS_TIMEOUT_RECOVERY),
            incorrect_configuration,
            summary: None,
        }
    }

    /// Whether the GPU reports any fabric trouble: a flag set, a configuration problem, or
    /// a summary other than healthy. Nothing reported is not trouble.
    pub fn degraded(&self) -> bool {
        [
            self.degraded_bandwidth,
            self.route_recovery,
            self.route_unhealthy,
            self.access_timeout_recovery,
        ]
        .contains(&Some(true))
            || self.incorrect_configuration.is_some()
            || matches!(
                self.summary,
                Some(FabricHealthSummary::Unhealthy | FabricHealthSummary::LimitedCapacity)
            )
    }

    /// Whether nothing at all was reported.
    pub fn is_unreported(&self) -> bool {
        *self == FabricHealth::default()
    }

    /// The problems, in words (`bandwidth degraded`, `route unhealthy`), for messages.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut flag = |v: Option<bool>, what: &str| {
            if v == Some(true) {
                out.push(what.to_string());
            }
        };
        flag(self.degraded_bandwidth, "bandwidth degraded");
        flag(self.route_recovery, "route recovery in progress");
        flag(self.route_unhealthy, "route unhealthy");
        flag(self.access_timeout_recovery, "access timeout recovery in progress");
        if let Some(what) = &self.incorrect_configuration {
            out.push(format!("incorrect configuration: {what}"));
        }
        match self.summary {
            Some(FabricHealthSummary::Unhealthy) => out.push("summary unhealthy".into()),
            Some(FabricHealthSummary::LimitedCapacity) => out.push("summary limited capacity".into()),
            _ => {}
        }
        out
    }
}

/// `NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*` values 2 and up, in words.
fn incorrect_configuration_name(code: u32) -> String {
    match code {
        2 => "incorrect SysGUID".into(),
        3 => "incorrect chassis serial number".into(),
        4 => "no partition".into(),
        5 => "insufficient NVLinks".into(),
        6 => "incompatible GPU firmware".into(),
        7 => "invalid location".into(),
        8 => "GPU state invalid".into(),
        n => format!("code {n}"),
    }
}

/// One GPU's NVLink fabric information. Field names (camelCase in JSON) are an interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuFabric {
    /// `0008:01:00.0`, the form [`crate::topology::Gpu`] uses ([`normalize_pci_bus_id`]);
    /// empty when unknown.
    #[serde(default)]
    pub pci_bus_id: String,
    /// nvidia-smi's / NVML's GPU index, when the source says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The NVLink domain, canonical (`6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24`, lowercase);
    /// empty when not reported. All zeros on a machine with NVLink inside it only.
    #[serde(default)]
    pub cluster_uuid: String,
    /// The NVLink partition inside the domain; 0 when not reported.
    #[serde(default)]
    pub clique_id: u32,
    pub state: FabricState,
    pub status: FabricStatus,
    /// NVML's raw `healthMask` (struct v2 and later); `None` from nvidia-smi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_mask: Option<u32>,
    /// The health, decoded (from the mask, or from `nvidia-smi -q`).
    #[serde(default, skip_serializing_if = "FabricHealth::is_unreported")]
    pub health: FabricHealth,
}

impl GpuFabric {
    /// A GPU with no NVLink fabric: state not supported, nothing else reported.
    pub fn not_supported() -> GpuFabric {
        GpuFabric {
            pci_bus_id: String::new(),
            index: None,
            cluster_uuid: String::new(),
            clique_id: 0,
            state: FabricState::NotSupported,
            status: FabricStatus::NotAvailable,
            health_mask: None,
            health: FabricHealth::default(),
        }
    }

    /// `GPU 2 (0008:01:00.0)`, `GPU 0008:01:00.0`, `GPU 2`, or `GPU #k` (its position in
    /// the list, 1-based) when nothing names it: for messages.
    fn label(&self, position: usize) -> String {
        match (self.index, self.pci_bus_id.is_empty()) {
            (Some(i), false) => format!("GPU {i} ({})", keep(&self.pci_bus_id)),
            (Some(i), true) => format!("GPU {i}"),
            (None, false) => format!("GPU {}", keep(&self.pci_bus_id)),
            (None, true) => format!("GPU #{}", position + 1),
        }
    }
}

/// `nvmlGpuFabricInfoV_t` (`nvmlGpuFabricInfo_v3_t`) as plain values, so the agent's NVML
/// loader and the tests share one conversion ([`from_nvml`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmlFabricInfo {
    /// `clusterUuid[NVML_GPU_FABRIC_UUID_LEN]`, in struct order.
    pub cluster_uuid: [u8; 16],
    /// `status`, an `nvmlReturn_t` (0 is `NVML_SUCCESS`).
    pub status: u32,
    /// `cliqueId`.
    pub clique_id: u32,
    /// `state`, an `nvmlGpuFabricState_t` (an `unsigned char` in C): 0 not supported,
    /// 1 not started, 2 in progress, 3 completed.
    pub state: u32,
    /// `healthMask`; `None` from the v1 struct, which has none.
    pub health_mask: Option<u32>,
    /// `healthSummary` (v3): 0 not supported, 1 healthy, 2 unhealthy, 3 limited capacity;
    /// `None` from v1 and v2.
    pub health_summary: Option<u8>,
}

/// Converts what `nvmlDeviceGetGpuFabricInfoV` filled in. A GPU whose state is not
/// supported reads as nvidia-smi prints it (nothing but the state; NVML leaves the other
/// fields zero). The caller fills in [`GpuFabric::pci_bus_id`] and [`GpuFabric::index`].
pub fn from_nvml(raw: NvmlFabricInfo) -> GpuFabric {
    let state = match raw.state {
        0 => return GpuFabric::not_supported(),
        1 => FabricState::NotStarted,
        2 => FabricState::InProgress,
        3 => FabricState::Completed,
        n => FabricState::Unknown(format!("NVML fabric state {n}")),
    };
    let status = match raw.status {
        0 => FabricStatus::Success,
        code => FabricStatus::Error(nvml_return_name(code)),
    };
    let mut health = raw.health_mask.map(FabricHealth::from_mask).unwrap_or_default();
    health.summary = match raw.health_summary {
        Some(1) => Some(FabricHealthSummary::Healthy),
        Some(2) => Some(FabricHealthSummary::Unhealthy),
        Some(3) => Some(FabricHealthSummary::LimitedCapacity),
        _ => None,
    };
    GpuFabric {
        pci_bus_id: String::new(),
        index: None,
        cluster_uuid: format_uuid(&raw.cluster_uuid),
        clique_id: raw.clique_id,
        state,
        status,
        health_mask: raw.health_mask,
        health,
    }
}

/// The `nvmlReturn_t` name of `code` (`NVML_ERROR_TIMEOUT`), or `NVML error N`.
pub fn nvml_return_name(code: u32) -> String {
    let name = match code {
        0 => "NVML_SUCCESS",
        1 => "NVML_ERROR_UNINITIALIZED",
        2 => "NVML_ERROR_INVALID_ARGUMENT",
        3 => "NVML_ERROR_NOT_SUPPORTED",
        4 => "NVML_ERROR_NO_PERMISSION",
        5 => "NVML_ERROR_ALREADY_INITIALIZED",
        6 => "NVML_ERROR_NOT_FOUND",
        7 => "NVML_ERROR_INSUFFICIENT_SIZE",
        8 => "NVML_ERROR_INSUFFICIENT_POWER",
        9 => "NVML_ERROR_DRIVER_NOT_LOADED",
        10 => "NVML_ERROR_TIMEOUT",
        11 => "NVML_ERROR_IRQ_ISSUE",
        12 => "NVML_ERROR_LIBRARY_NOT_FOUND",
        13 => "NVML_ERROR_FUNCTION_NOT_FOUND",
        14 => "NVML_ERROR_CORRUPTED_INFOROM",
        15 => "NVML_ERROR_GPU_IS_LOST",
        16 => "NVML_ERROR_RESET_REQUIRED",
        17 => "NVML_ERROR_OPERATING_SYSTEM",
        18 => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        19 => "NVML_ERROR_IN_USE",
        20 => "NVML_ERROR_MEMORY",
        21 => "NVML_ERROR_NO_DATA",
        22 => "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
        23 => "NVML_ERROR_INSUFFICIENT_RESOURCES",
        24 => "NVML_ERROR_FREQ_NOT_SUPPORTED",
        25 => "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        26 => "NVML_ERROR_DEPRECATED",
        27 => "NVML_ERROR_NOT_READY",
        28 => "NVML_ERROR_GPU_NOT_FOUND",
        29 => "NVML_ERROR_INVALID_STATE",
        30 => "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
        999 => "NVML_ERROR_UNKNOWN",
        n => return format!("NVML error {n}"),
    };
    name.to_string()
}

/// Why nvidia-smi output could not be read. Lines are 1-based; quoted text is escaped and
/// cut short.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FabricParseError {
    #[error("{what} is larger than the limit of {}; expected the output of one machine", human(*limit as u64))]
    TooLarge { what: &'static str, limit: usize },
    #[error("{what} lists more than {MAX_GPUS} GPUs; expected the GPUs of one machine")]
    TooManyGpus { what: &'static str },
    /// A line as a whole is wrong (a header, a row with too few values).
    #[error("line {line}: expected {expected}, got {got}")]
    Line { line: usize, expected: String, got: String },
    /// One value is wrong; `field` is the CSV column or the `-q` key (`fabric.clusterUuid`,
    /// `GPU 00000008:01:00.0 Fabric.ClusterUUID`).
    #[error("line {line}: {field}: expected {expected}, got {got}")]
    Field {
        line: usize,
        field: String,
        expected: String,
        got: String,
    },
    /// The `--query-gpu=` list given for headerless CSV lacks a fabric column.
    #[error("expected a --query-gpu list naming {missing} (such as {SMI_QUERY}), got {got}")]
    Query { missing: String, got: String },
}

/// What [`parse_smi_csv`] calls the output in errors.
const CSV_WHAT: &str = "nvidia-smi --query-gpu output";
/// What [`parse_smi_query`] calls the output in errors.
const QUERY_WHAT: &str = "nvidia-smi -q output";

/// The columns the CSV parsers know; others are skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Column {
    Index,
    BusId,
    ClusterUuid,
    CliqueId,
    State,
    Status,
    /// One of [`SMI_HEALTH_FIELDS`]: optional, older drivers have none.
    Health(HealthField),
    Other,
}

impl Column {
    /// From a header cell or a `--query-gpu` name (case-insensitive; a unit such as
    /// ` [MiB]` is dropped).
    fn from_name(name: &str) -> Column {
        let name = name.split('[').next().unwrap_or_default().trim().to_ascii_lowercase();
        match name.as_str() {
            "index" => Column::Index,
            "pci.bus_id" | "gpu_bus_id" => Column::BusId,
            "fabric.clusteruuid" => Column::ClusterUuid,
            "fabric.cliqueid" => Column::CliqueId,
            "fabric.state" => Column::State,
            "fabric.status" => Column::Status,
            other => HealthField::ALL
                .into_iter()
                .find(|f| f.query_name() == other)
                .map_or(Column::Other, Column::Health),
        }
    }
}

/// One fabric health value, as `-q`'s `Health` block and the `fabric.health.*` columns
/// print it; both read it the same way ([`HealthField::apply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HealthField {
    Summary,
    Bandwidth,
    RouteRecovery,
    RouteUnhealthy,
    AccessTimeoutRecovery,
    IncorrectConfiguration,
}

impl HealthField {
    /// In the order of [`SMI_HEALTH_FIELDS`].
    const ALL: [HealthField; 6] = [
        HealthField::Summary,
        HealthField::Bandwidth,
        HealthField::RouteRecovery,
        HealthField::RouteUnhealthy,
        HealthField::AccessTimeoutRecovery,
        HealthField::IncorrectConfiguration,
    ];

    /// The `--query-gpu` field (`fabric.health.summary`).
    fn query_name(self) -> &'static str {
        SMI_HEALTH_FIELDS[self as usize]
    }

    /// From a key of `-q`'s `Health` block (`Route Recovery in progress`); case, spaces
    /// and `_` do not matter.
    fn from_query_key(key: &str) -> Option<HealthField> {
        Some(match squash(key).as_str() {
            "summary" => HealthField::Summary,
            "bandwidth" => HealthField::Bandwidth,
            "routerecoveryinprogress" => HealthField::RouteRecovery,
            "routeunhealthy" => HealthField::RouteUnhealthy,
            "accesstimeoutrecovery" => HealthField::AccessTimeoutRecovery,
            "incorrectconfiguration" => HealthField::IncorrectConfiguration,
            _ => return None,
        })
    }

    /// Sets this field of `health` from nvidia-smi's text. `N/A`, `[Not Supported]`, an
    /// error token or a value this code does not know is "not reported" (`None`), never
    /// an error: the domain does not hang on health.
    fn apply(self, health: &mut FabricHealth, value: &str) {
        let v = squash(value);
        let flag = match v.as_str() {
            "true" | "yes" => Some(true),
            "false" | "no" => Some(false),
            _ => None,
        };
        match self {
            HealthField::Summary => {
                health.summary = match v.as_str() {
                    "healthy" => Some(FabricHealthSummary::Healthy),
                    "unhealthy" => Some(FabricHealthSummary::Unhealthy),
                    "limitedcapacity" => Some(FabricHealthSummary::LimitedCapacity),
                    _ => None,
                }
            }
            HealthField::Bandwidth => {
                health.degraded_bandwidth = match v.as_str() {
                    "degraded" | "true" => Some(true),
                    "full" | "false" | "notdegraded" => Some(false),
                    _ => None,
                }
            }
            HealthField::RouteRecovery => health.route_recovery = flag,
            HealthField::RouteUnhealthy => health.route_unhealthy = flag,
            HealthField::AccessTimeoutRecovery => health.access_timeout_recovery = flag,
            HealthField::IncorrectConfiguration => health.incorrect_configuration = incorrect_configuration(value),
        }
    }
}

/// What an `Incorrect Configuration` value says is wrong, in the words
/// [`FabricHealth::from_mask`] uses for NVML's codes when the text names one of them
/// (`Insufficient NVLinks`, `no_partition`), else as printed (escaped, cut short). `None`
/// (correct), `N/A` and error tokens are `None`.
fn incorrect_configuration(value: &str) -> Option<String> {
    let code = match squash(value).as_str() {
        "none" | "false" | "no" => return None,
        _ if is_token(value.trim()) => return None,
        "incorrectsysguid" | "sysguid" => 2,
        "incorrectchassissn" | "incorrectchassisserialnumber" | "chassisserialnumber" | "chassissn" => 3,
        "nopartition" => 4,
        "insufficientnvlinks" => 5,
        "incompatiblegpufw" | "incompatiblegpufirmware" => 6,
        "invalidlocation" => 7,
        "gpustateinvalid" | "invalidgpustate" => 8,
        _ => return Some(keep(value)),
    };
    Some(incorrect_configuration_name(code))
}

/// The columns a CSV must have: without them there is no fabric to read.
const REQUIRED: [(Column, &str); 4] = [
    (Column::ClusterUuid, "fabric.clusterUuid"),
    (Column::CliqueId, "fabric.cliqueId"),
    (Column::State, "fabric.state"),
    (Column::Status, "fabric.status"),
];

/// Reads `nvidia-smi --query-gpu=… --format=csv` output: a header line naming the columns
/// (those of [`SMI_QUERY`], required, and of [`SMI_HEALTH_FIELDS`], read when present as
/// driver 580 and later print them; `index` and `pci.bus_id` may be left out, other
/// columns are skipped), then one line per GPU, values separated by `, `. `N/A`, `[N/A]`,
/// `[Not Supported]` and nvidia-smi's other bracketed tokens are "not reported", except
/// in `fabric.state`, where an unknown token is kept ([`FabricState::Unknown`]). Health
/// values this code cannot read are "not reported" too, never errors.
pub fn parse_smi_csv(text: &str) -> Result<Vec<GpuFabric>, FabricParseError> {
    check_size(text, MAX_SMI_CSV, CSV_WHAT)?;
    let mut lines = numbered_lines(text);
    let Some((line, header)) = lines.next() else {
        return Err(FabricParseError::Line {
            line: 1,
            expected: format!("a CSV header line (nvidia-smi --query-gpu={SMI_QUERY} --format=csv)"),
            got: "nothing".into(),
        });
    };
    let columns = columns_of(header, Some(line))?;
    read_rows(lines, &columns)
}

/// Reads `nvidia-smi --query-gpu=QUERY --format=csv,noheader` output: `query` is the
/// `--query-gpu=` value it ran (such as [`SMI_QUERY`]) and names the columns. No line at
/// all is no GPU.
pub fn parse_smi_csv_noheader(text: &str, query: &str) -> Result<Vec<GpuFabric>, FabricParseError> {
    check_size(text, MAX_SMI_CSV, CSV_WHAT)?;
    let columns = columns_of(query, None)?;
    read_rows(numbered_lines(text), &columns)
}

/// The columns a header on `line` (or a `--query-gpu=` list, no line) names; an error if a
/// required one is missing.
fn columns_of(header: &str, line: Option<usize>) -> Result<Vec<(Column, String)>, FabricParseError> {
    let columns: Vec<(Column, String)> = header
        .split(',')
        .map(|cell| (Column::from_name(cell), cell.trim().to_string()))
        .collect();
    let missing: Vec<&str> = REQUIRED
        .iter()
        .filter(|(c, _)| !columns.iter().any(|(have, _)| have == c))
        .map(|(_, name)| *name)
        .collect();
    if missing.is_empty() {
        return Ok(columns);
    }
    let missing = missing.join(", ");
    Err(match line {
        Some(line) => FabricParseError::Line {
            line,
            expected: format!("a CSV header naming {missing} (nvidia-smi --query-gpu={SMI_QUERY})"),
            got: quote(header),
        },
        None => FabricParseError::Query {
            missing,
            got: quote(header),
        },
    })
}

/// Non-blank lines with their 1-based numbers, `\r` and a leading BOM dropped.
fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_start_matches('\u{feff}').trim_end()))
        .filter(|(_, l)| !l.trim().is_empty())
}

fn read_rows<'a>(
    lines: impl Iterator<Item = (usize, &'a str)>,
    columns: &[(Column, String)],
) -> Result<Vec<GpuFabric>, FabricParseError> {
    let mut gpus = Vec::new();
    for (line, text) in lines {
        if gpus.len() == MAX_GPUS {
            return Err(FabricParseError::TooManyGpus { what: CSV_WHAT });
        }
        gpus.push(read_row(line, text, columns)?);
    }
    Ok(gpus)
}

fn read_row(line: usize, text: &str, columns: &[(Column, String)]) -> Result<GpuFabric, FabricParseError> {
    let values: Vec<&str> = text.split(',').map(str::trim).collect();
    if values.len() != columns.len() {
        let names: Vec<&str> = columns.iter().map(|(_, n)| n.as_str()).collect();
        return Err(FabricParseError::Line {
            line,
            expected: format!(
                "{} comma-separated values ({})",
                columns.len(),
                shorten(&names.join(", "), 200)
            ),
            got: format!("{}: {}", values.len(), quote(text)),
        });
    }
    let mut gpu = GpuFabric::not_supported();
    for ((column, name), value) in columns.iter().zip(values) {
        let field = |expected: &str| FabricParseError::Field {
            line,
            field: shorten(&escape(name), MAX_QUOTED),
            expected: expected.into(),
            got: quote(value),
        };
        match column {
            Column::Index if !is_token(value) => {
                gpu.index = Some(value.parse().map_err(|_| field("a GPU index (a number)"))?);
            }
            Column::BusId if !is_token(value) => {
                gpu.pci_bus_id =
                    normalize_pci_bus_id(value).ok_or_else(|| field("a PCI address such as 00000008:01:00.0"))?;
            }
            Column::ClusterUuid if !is_token(value) => {
                gpu.cluster_uuid = parse_uuid(value).ok_or_else(|| field(UUID_EXPECTED))?;
            }
            Column::CliqueId if !is_token(value) => {
                gpu.clique_id = value.parse().map_err(|_| field(CLIQUE_EXPECTED))?;
            }
            Column::State => gpu.state = FabricState::from_smi(value),
            Column::Status => gpu.status = FabricStatus::from_smi(value),
            Column::Health(health) => health.apply(&mut gpu.health, value),
            _ => {}
        }
    }
    Ok(gpu)
}

const UUID_EXPECTED: &str = "a UUID such as 6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24, or N/A";
const CLIQUE_EXPECTED: &str = "a clique id (a number from 0 to 4294967295), or N/A";

/// Reads `nvidia-smi -q` output: for each `GPU 00000008:01:00.0` section, its `Fabric`
/// block (`State`, `Status`, `CliqueId`, `ClusterUUID`) and the `Health` block inside it
/// (`Summary`, `Bandwidth`, `Route Recovery in progress`, `Route Unhealthy`,
/// `Access Timeout Recovery`, `Incorrect Configuration`; others such as `Partition
/// Assigned` are skipped). A GPU without a `Fabric` block (a driver older than the block)
/// has no fabric. A block with `State` and `Status` only (the 535 series) reports no
/// cluster UUID (empty) and clique 0; `CliqueId` without `ClusterUUID`, or the other way
/// round, is a block cut short. Health values this code cannot read are "not reported"
/// rather than errors: the domain does not hang on them. Indexes are not in `-q` output
/// and stay `None`.
pub fn parse_smi_query(text: &str) -> Result<Vec<GpuFabric>, FabricParseError> {
    check_size(text, MAX_SMI_QUERY, QUERY_WHAT)?;
    let mut gpus = Vec::new();
    let mut current: Option<QueryGpu> = None;
    // Sections open inside the current GPU: (indent, what).
    let mut sections: Vec<(usize, Section)> = Vec::new();
    for (line, raw) in numbered_lines(text) {
        let content = raw.trim_start();
        let indent = raw.len() - content.len();
        if indent == 0 {
            if let Some(gpu) = current.take() {
                gpus.push(gpu.finish()?);
            }
            sections.clear();
            if let Some(bus) = content.strip_prefix("GPU ").map(str::trim)
                && let Some(pci_bus_id) = normalize_pci_bus_id(bus)
            {
                if gpus.len() == MAX_GPUS {
                    return Err(FabricParseError::TooManyGpus { what: QUERY_WHAT });
                }
                current = Some(QueryGpu::new(bus, pci_bus_id));
            }
            continue;
        }
        let Some(gpu) = current.as_mut() else {
            continue;
        };
        while sections.last().is_some_and(|(open, _)| *open >= indent) {
            sections.pop();
        }
        let Some((key, value)) = content.split_once(':') else {
            let section = match (sections.as_slice(), content) {
                ([], "Fabric") => {
                    gpu.fabric_line = Some(line);
                    Section::Fabric
                }
                ([(_, Section::Fabric)], "Health") => Section::Health,
                _ => Section::Other,
            };
            sections.push((indent, section));
            continue;
        };
        match sections.as_slice() {
            [(_, Section::Fabric)] => gpu.fabric_value(line, key.trim(), value.trim())?,
            [(_, Section::Fabric), (_, Section::Health)] => {
                if let Some(field) = HealthField::from_query_key(key) {
                    field.apply(&mut gpu.fabric.health, value.trim());
                }
            }
            _ => {}
        }
    }
    if let Some(gpu) = current.take() {
        gpus.push(gpu.finish()?);
    }
    Ok(gpus)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    Fabric,
    Health,
    Other,
}

/// One `GPU …` section of `-q` output as it is read.
struct QueryGpu {
    /// The bus id as printed, escaped and cut short, for messages.
    printed: String,
    fabric_line: Option<usize>,
    fabric: GpuFabric,
    seen_state: bool,
    seen_status: bool,
    seen_clique: bool,
    seen_uuid: bool,
}

impl QueryGpu {
    fn new(printed: &str, pci_bus_id: String) -> QueryGpu {
        QueryGpu {
            printed: shorten(&escape(printed), MAX_QUOTED),
            fabric_line: None,
            fabric: GpuFabric {
                pci_bus_id,
                ..GpuFabric::not_supported()
            },
            seen_state: false,
            seen_status: false,
            seen_clique: false,
            seen_uuid: false,
        }
    }

    fn field(&self, line: usize, key: &str, expected: &str, got: &str) -> FabricParseError {
        FabricParseError::Field {
            line,
            field: format!("GPU {} Fabric.{key}", self.printed),
            expected: expected.into(),
            got: quote(got),
        }
    }

    fn fabric_value(&mut self, line: usize, key: &str, value: &str) -> Result<(), FabricParseError> {
        match key {
            "State" => {
                self.fabric.state = FabricState::from_smi(value);
                self.seen_state = true;
            }
            "Status" => {
                self.fabric.status = FabricStatus::from_smi(value);
                self.seen_status = true;
            }
            "CliqueId" => {
                if !is_token(value) {
                    self.fabric.clique_id = value
                        .parse()
                        .map_err(|_| self.field(line, key, CLIQUE_EXPECTED, value))?;
                }
                self.seen_clique = true;
            }
            "ClusterUUID" => {
                if !is_token(value) {
                    self.fabric.cluster_uuid =
                        parse_uuid(value).ok_or_else(|| self.field(line, key, UUID_EXPECTED, value))?;
                }
                self.seen_uuid = true;
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<GpuFabric, FabricParseError> {
        let Some(fabric_line) = self.fabric_line else {
            return Ok(self.fabric);
        };
        if !self.seen_state {
            return Err(self.field(
                fabric_line,
                "State",
                "a State line (Completed, In Progress, Not Started or N/A) in the Fabric block",
                "none",
            ));
        }
        if self.fabric.state == FabricState::NotSupported {
            return Ok(GpuFabric {
                pci_bus_id: self.fabric.pci_bus_id,
                ..GpuFabric::not_supported()
            });
        }
        // 535-series drivers print `State` and `Status` only; later ones both `CliqueId`
        // and `ClusterUUID`. One of the two alone is a block cut short.
        let missing = match (self.seen_status, self.seen_clique, self.seen_uuid) {
            (false, _, _) => Some("Status"),
            (true, true, false) => Some("ClusterUUID"),
            (true, false, true) => Some("CliqueId"),
            _ => None,
        };
        match missing {
            Some(key) => Err(self.field(fabric_line, key, &format!("a {key} line in the Fabric block"), "none")),
            None => Ok(self.fabric),
        }
    }
}

fn check_size(text: &str, limit: usize, what: &'static str) -> Result<(), FabricParseError> {
    if text.len() > limit {
        Err(FabricParseError::TooLarge { what, limit })
    } else {
        Ok(())
    }
}

/// `N/A`, `[N/A]`, `Not Supported`, `[Not Supported]`, `Not Available`, or nothing.
fn is_not_available(text: &str) -> bool {
    let t = text.trim();
    let t = t.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(t);
    t.is_empty()
        || t.eq_ignore_ascii_case("n/a")
        || t.eq_ignore_ascii_case("not supported")
        || t.eq_ignore_ascii_case("not available")
}

/// A value that is not data: "not available" or a bracketed nvidia-smi token such as
/// `[Unknown Error]` or `[GPU is lost]`.
fn is_token(text: &str) -> bool {
    is_not_available(text) || (text.starts_with('[') && text.ends_with(']'))
}

/// Lowercase, without spaces, `_` or `-`: `In Progress` → `inprogress`.
fn squash(text: &str) -> String {
    text.chars()
        .filter(|c| !matches!(c, ' ' | '_' | '-'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Text kept from untrusted input: escaped, cut short.
fn keep(text: &str) -> String {
    shorten(&escape(text.trim()), MAX_KEPT)
}

/// Text quoted in an error message: escaped, cut short, in quotes.
fn quote(text: &str) -> String {
    format!("\"{}\"", shorten(&escape(text), MAX_QUOTED))
}

/// A PCI address as [`crate::topology::Gpu`] writes it (`0008:01:00.0`, lowercase; an
/// 8-digit domain only when it does not fit 4), from nvidia-smi's `00000008:01:00.0`,
/// sysfs's `0008:01:00.0` or a bare `01:00.0`. `None` if it is not one.
pub fn normalize_pci_bus_id(text: &str) -> Option<String> {
    let t = text.trim();
    let (rest, function) = t.rsplit_once('.')?;
    let mut parts = rest.rsplitn(3, ':');
    let device = parts.next()?;
    let bus = parts.next()?;
    let domain = parts.next().unwrap_or("0");
    let hex = |s: &str, max_len: usize| {
        if s.is_empty() || s.len() > max_len || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            None
        } else {
            u32::from_str_radix(s, 16).ok()
        }
    };
    let domain = hex(domain, 8)?;
    let bus = hex(bus, 2)?;
    let device = hex(device, 2).filter(|d| *d < 32)?;
    let function = hex(function, 1).filter(|f| *f < 8)?;
    Some(if domain > 0xffff {
        format!("{domain:08x}:{bus:02x}:{device:02x}.{function}")
    } else {
        format!("{domain:04x}:{bus:02x}:{device:02x}.{function}")
    })
}

/// A UUID in canonical form (`6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24`, lowercase), from that
/// form in any case or 32 bare hex digits. `None` if it is not one.
pub fn parse_uuid(text: &str) -> Option<String> {
    let t = text.trim();
    let hex: String = match t.len() {
        36 => {
            let dashes_right = t
                .char_indices()
                .all(|(i, c)| matches!(i, 8 | 13 | 18 | 23) == (c == '-'));
            if !dashes_right {
                return None;
            }
            t.chars().filter(|c| *c != '-').collect()
        }
        32 => t.to_string(),
        _ => return None,
    };
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let hex = hex.to_ascii_lowercase();
    Some(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

/// Whether `text` is a UUID in canonical form already.
pub fn is_canonical_uuid(text: &str) -> bool {
    parse_uuid(text).is_some_and(|u| u == text)
}

/// 16 bytes in canonical UUID form, in array order.
fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The all-zero UUID a machine with NVLink inside it only reports.
pub const ZERO_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// What one machine's GPUs say about its NVLink domain ([`node_domain`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum NodeDomain {
    /// In no multi-node domain: no GPU has a fabric, or every GPU completed registration
    /// with the all-zero cluster UUID (HGX/DGX: NVLink inside the machine only) or without
    /// reporting one (535-series drivers print none).
    None { why: String },
    /// Some GPU has not finished registering (not started, in progress): not yet usable.
    Pending { why: String },
    /// Some GPU finished registering with an error, reports a state this code does not
    /// know, or completed with a cluster UUID that is not a UUID.
    Failed { why: String },
    /// Every GPU completed registration successfully in the same domain and partition.
    Domain {
        cluster_uuid: String,
        clique_id: u32,
        /// Some GPU reports fabric trouble ([`FabricHealth::degraded`]).
        degraded: bool,
    },
    /// The GPUs of one machine report different domains or partitions (or some report a
    /// fabric and some none): reported as they are, not averaged.
    Disagree { gpus: Vec<GpuFabric> },
}

/// How many GPUs a message names before `and N more`.
const LISTED: usize = 4;

/// The acceptance rule: one machine's GPUs make a domain only when every one completed
/// registration successfully with the same non-zero cluster UUID and the same clique.
/// Checked in this order: no GPU, or none with a fabric ([`NodeDomain::None`]); some with
/// a fabric and some without ([`NodeDomain::Disagree`]); errors ([`NodeDomain::Failed`]);
/// registration under way ([`NodeDomain::Pending`]); different UUIDs or cliques
/// ([`NodeDomain::Disagree`]); the all-zero UUID, or none reported, which reads as the
/// all-zero one ([`NodeDomain::None`]).
pub fn node_domain(gpus: &[GpuFabric]) -> NodeDomain {
    if gpus.is_empty() {
        return NodeDomain::None {
            why: "no GPU reported NVLink fabric information".into(),
        };
    }
    let without = gpus.iter().filter(|g| g.state == FabricState::NotSupported).count();
    if without == gpus.len() {
        return NodeDomain::None {
            why: format!(
                "no GPU has an NVLink fabric (fabric state Not Supported on {} GPU{})",
                gpus.len(),
                plural(gpus.len())
            ),
        };
    }
    if without > 0 {
        return NodeDomain::Disagree { gpus: gpus.to_vec() };
    }
    let mut failed = Vec::new();
    let mut pending = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        match &g.state {
            FabricState::Unknown(text) => failed.push(format!("{}: fabric state {}", g.label(i), keep(text))),
            FabricState::NotStarted | FabricState::InProgress => {
                pending.push(format!("{}: fabric registration {}", g.label(i), g.state))
            }
            FabricState::Completed if g.status != FabricStatus::Success => failed.push(format!(
                "{}: fabric registration completed with status {}",
                g.label(i),
                keep(&g.status.to_string())
            )),
            FabricState::Completed if !g.cluster_uuid.is_empty() && !is_canonical_uuid(&g.cluster_uuid) => {
                failed.push(format!(
                    "{}: fabric registration completed with a cluster UUID that is not one (got \"{}\")",
                    g.label(i),
                    shorten(&escape(&g.cluster_uuid), MAX_QUOTED)
                ))
            }
            _ => {}
        }
    }
    if !failed.is_empty() {
        return NodeDomain::Failed { why: listing(failed) };
    }
    if !pending.is_empty() {
        return NodeDomain::Pending { why: listing(pending) };
    }
    // A cluster UUID not reported (a 535-series driver, nvidia-smi's `N/A`) is no domain,
    // as the all-zero one is.
    fn uuid(g: &GpuFabric) -> &str {
        if g.cluster_uuid.is_empty() {
            ZERO_UUID
        } else {
            &g.cluster_uuid
        }
    }
    let first = &gpus[0];
    if gpus
        .iter()
        .any(|g| uuid(g) != uuid(first) || g.clique_id != first.clique_id)
    {
        return NodeDomain::Disagree { gpus: gpus.to_vec() };
    }
    if uuid(first) == ZERO_UUID {
        let unreported = gpus.iter().filter(|g| g.cluster_uuid.is_empty()).count();
        let why = if unreported == gpus.len() {
            format!(
                "every GPU completed NVLink fabric registration without reporting a cluster UUID \
                 (535-series drivers report none; clique {}): no multi-node domain",
                first.clique_id
            )
        } else if unreported > 0 {
            format!(
                "every GPU completed NVLink fabric registration with the all-zero cluster UUID or \
                 none ({unreported} of {} GPUs report none; clique {}): no multi-node domain",
                gpus.len(),
                first.clique_id
            )
        } else {
            format!(
                "every GPU completed NVLink fabric registration with the all-zero cluster UUID \
                 (clique {}): NVLink inside this machine only, no multi-node domain",
                first.clique_id
            )
        };
        return NodeDomain::None { why };
    }
    NodeDomain::Domain {
        cluster_uuid: first.cluster_uuid.clone(),
        clique_id: first.clique_id,
        degraded: gpus.iter().any(|g| g.health.degraded()),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `a; b; c; d; and 3 more`.
fn listing(items: Vec<String>) -> String {
    let more = items.len().saturating_sub(LISTED);
    let mut out: Vec<String> = items.into_iter().take(LISTED).collect();
    if more > 0 {
        out.push(format!("and {more} more"));
    }
    out.join("; ")
}

/// What every NVLink HyperNode name starts with.
pub const NAME_PREFIX: &str = "nvl-";

/// Hex digits of a UUID a name shows by default.
pub const NAME_HEX: usize = 8;

/// The lowercase hex digits of `uuid` (at most 32).
fn uuid_hex(uuid: &str) -> String {
    uuid.chars()
        .filter(char::is_ascii_hexdigit)
        .take(32)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn name_with(uuid: &str, hex_len: usize) -> String {
    let hex = uuid_hex(uuid);
    let cut = hex_len.min(hex.len());
    format!("{NAME_PREFIX}{}", &hex[..cut])
}

/// The HyperNode name of an NVLink domain: `nvl-` and the first 8 hex digits of its
/// cluster UUID (`nvl-6b8d7c1e`); a valid HyperNode name ([`crate::names`]) for any input,
/// since it keeps only hex digits. Two domains may share 8 digits (for 1,000 racks, about
/// one chance in 10,000): name a set of domains together with [`domain_names`], which
/// lengthens the colliding ones.
pub fn domain_name(cluster_uuid: &str) -> String {
    name_with(cluster_uuid, NAME_HEX)
}

/// The HyperNode name of an NVLink partition (clique) inside a domain:
/// `nvl-6b8d7c1e-c32766`. With [`domain_names`], use [`partition_name_under`].
pub fn partition_name(cluster_uuid: &str, clique_id: u32) -> String {
    partition_name_under(&domain_name(cluster_uuid), clique_id)
}

/// The partition name under a domain name [`domain_names`] gave: `DOMAIN-cCLIQUE`.
pub fn partition_name_under(domain_name: &str, clique_id: u32) -> String {
    format!("{domain_name}-c{clique_id}")
}

/// Names for a set of domains, keyed by canonical cluster UUID: [`domain_name`] for each,
/// except that UUIDs sharing their first 8 hex digits get as many more digits as tell
/// them apart (git's short hashes do the same). A name changes only when a UUID sharing
/// its prefix joins the set. Inputs that are not UUIDs are skipped.
pub fn domain_names<'a>(cluster_uuids: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    let uuids: BTreeSet<String> = cluster_uuids.into_iter().filter_map(parse_uuid).collect();
    let hexes: Vec<(String, String)> = uuids.into_iter().map(|u| (uuid_hex(&u), u)).collect();
    let mut out = BTreeMap::new();
    // Sorted by hex, the longest prefix shared with any other is shared with a neighbour.
    for (i, (hex, uuid)) in hexes.iter().enumerate() {
        let shared = |other: Option<&(String, String)>| {
            other.map_or(0, |(o, _)| {
                hex.bytes().zip(o.bytes()).take_while(|(a, b)| a == b).count()
            })
        };
        let longest = shared(i.checked_sub(1).and_then(|j| hexes.get(j))).max(shared(hexes.get(i + 1)));
        let len = (longest + 1).clamp(NAME_HEX, 32);
        out.insert(uuid.clone(), name_with(uuid, len));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::names::{NameKind, check_name};

    const RACK: &str = "6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24";

    const TRAY_CSV: &str = include_str!("../../testdata/nvidia/gb200-nvl72-tray.csv");
    const TRAY_Q: &str = include_str!("../../testdata/nvidia/gb200-nvl72-tray.q.txt");
    const X36_CSV: &str = include_str!("../../testdata/nvidia/gb200-nvl72-x36-partition.csv");
    const HGX_CSV: &str = include_str!("../../testdata/nvidia/hgx-h100.csv");
    const HGX_Q: &str = include_str!("../../testdata/nvidia/hgx-h100.q.txt");
    const IN_PROGRESS_CSV: &str = include_str!("../../testdata/nvidia/gb200-tray-in-progress.csv");
    const DISAGREE_CSV: &str = include_str!("../../testdata/nvidia/gb200-tray-disagree.csv");
    const DEGRADED_Q: &str = include_str!("../../testdata/nvidia/gb200-tray-degraded.q.txt");
    const OLD_CSV: &str = include_str!("../../testdata/nvidia/older-gpu-not-supported.csv");
    // Real captures (testdata/nvidia/README.md says where each comes from).
    /// `nvidia-smi -q`, driver 535.161.08, 8x H100 (leptonai/gpud).
    const H100_535_Q: &str = include_str!("../../testdata/nvidia/gpud/nvidia-smi-query.535.161.08.out.0.valid");
    /// `--help-query-gpu`, `--query-gpu` CSV and `-q`, driver 590.48.01, 1x H100
    /// (utkuozdemir/nvidia_gpu_exporter).
    const H100_590_CAPTURE: &str =
        include_str!("../../testdata/nvidia/nvidia_gpu_exporter/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt");
    /// `nvidia-smi -q -x`, driver 580.173.02, a GB300 tray (NVIDIA/k8s-test-infra).
    const GB300_XML: &str = include_str!("../../testdata/nvidia/k8s-test-infra/qx-gb300.xml");
    /// `nvidia-smi -q -x` by nvidia-smi 580.65.06 over NVIDIA's NVML mock, GPU 1 with a
    /// route unhealthy (NVIDIA/k8s-test-infra).
    const DEGRADED_XML: &str = include_str!("../../testdata/nvidia/k8s-test-infra/qx-gb200-fabric-degraded.xml");
    // Hand-written from GB300_XML, in the text layout of H100_590_CAPTURE.
    const GB300_Q: &str = include_str!("../../testdata/nvidia/gb300-580-tray.q.txt");
    const GB300_CSV: &str = include_str!("../../testdata/nvidia/gb300-580-tray.csv");
    const GB300_UNHEALTHY_CSV: &str = include_str!("../../testdata/nvidia/gb300-580-tray-unhealthy.csv");
    /// The GB300 capture's cluster UUID (scrubbed upstream to this placeholder).
    const GB300_RACK: &str = "00000001-0000-0000-0000-000000000001";

    const TRAY_BUSES: [&str; 4] = ["0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"];

    fn buses(gpus: &[GpuFabric]) -> Vec<&str> {
        gpus.iter().map(|g| g.pci_bus_id.as_str()).collect()
    }

    #[test]
    fn nvl72_tray_csv_is_one_domain() {
        let gpus = parse_smi_csv(TRAY_CSV).unwrap();
        assert_eq!(buses(&gpus), TRAY_BUSES);
        assert_eq!(
            gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2), Some(3)]
        );
        for g in &gpus {
            assert_eq!(g.cluster_uuid, RACK);
            assert_eq!(g.clique_id, 32766);
            assert_eq!(g.state, FabricState::Completed);
            assert_eq!(g.status, FabricStatus::Success);
            assert_eq!(g.health_mask, None);
            assert!(g.health.is_unreported());
        }
        assert_eq!(
            node_domain(&gpus),
            NodeDomain::Domain {
                cluster_uuid: RACK.into(),
                clique_id: 32766,
                degraded: false
            }
        );
    }

    #[test]
    fn nvl72_tray_query_matches_the_csv_and_reads_health() {
        let q = parse_smi_query(TRAY_Q).unwrap();
        let csv = parse_smi_csv(TRAY_CSV).unwrap();
        assert_eq!(q.len(), 4);
        for (q, csv) in q.iter().zip(&csv) {
            assert_eq!(q.pci_bus_id, csv.pci_bus_id);
            assert_eq!(q.index, None);
            assert_eq!((&q.cluster_uuid, q.clique_id), (&csv.cluster_uuid, csv.clique_id));
            assert_eq!((&q.state, &q.status), (&csv.state, &csv.status));
            assert_eq!(
                q.health,
                FabricHealth {
                    degraded_bandwidth: Some(false),
                    route_recovery: Some(false),
                    route_unhealthy: Some(false),
                    access_timeout_recovery: Some(false),
                    incorrect_configuration: None,
                    summary: Some(FabricHealthSummary::Healthy),
                }
            );
        }
        assert_eq!(node_domain(&q), node_domain(&csv));
    }

    #[test]
    fn x36_partition_is_another_clique_of_the_same_domain() {
        let whole = parse_smi_csv(TRAY_CSV).unwrap();
        let half = parse_smi_csv(X36_CSV).unwrap();
        let NodeDomain::Domain {
            cluster_uuid,
            clique_id,
            degraded: false,
        } = node_domain(&half)
        else {
            panic!("{:?}", node_domain(&half));
        };
        assert_eq!((cluster_uuid.as_str(), clique_id), (RACK, 1));
        assert_eq!(domain_name(&cluster_uuid), domain_name(&whole[0].cluster_uuid));
        assert_eq!(partition_name(&cluster_uuid, clique_id), "nvl-6b8d7c1e-c1");
        assert_eq!(partition_name(RACK, whole[0].clique_id), "nvl-6b8d7c1e-c32766");
    }

    #[test]
    fn plain_hgx_is_in_no_domain() {
        for gpus in [parse_smi_csv(HGX_CSV).unwrap(), parse_smi_query(HGX_Q).unwrap()] {
            assert_eq!(gpus.len(), 8);
            assert_eq!(gpus[1].pci_bus_id, "0000:2a:00.0");
            assert!(gpus.iter().all(|g| g.cluster_uuid == ZERO_UUID && g.clique_id == 0));
            assert!(gpus.iter().all(|g| g.state == FabricState::Completed));
            let NodeDomain::None { why } = node_domain(&gpus) else {
                panic!("{:?}", node_domain(&gpus));
            };
            assert!(why.contains("all-zero cluster UUID"), "{why}");
        }
        // `Bandwidth : N/A` is not reported, not trouble.
        let q = parse_smi_query(HGX_Q).unwrap();
        assert!(q.iter().all(|g| g.health.is_unreported()));
    }

    #[test]
    fn a_gpu_in_progress_makes_the_tray_pending() {
        let gpus = parse_smi_csv(IN_PROGRESS_CSV).unwrap();
        assert_eq!(gpus[2].state, FabricState::InProgress);
        assert_eq!(gpus[2].status, FabricStatus::NotAvailable);
        assert_eq!(
            node_domain(&gpus),
            NodeDomain::Pending {
                why: "GPU 2 (0018:01:00.0): fabric registration In Progress".into()
            }
        );
    }

    #[test]
    fn gpus_that_disagree_are_reported_as_they_are() {
        let gpus = parse_smi_csv(DISAGREE_CSV).unwrap();
        assert_eq!(gpus[3].clique_id, 32765);
        assert_eq!(node_domain(&gpus), NodeDomain::Disagree { gpus: gpus.clone() });
        // A zero UUID beside a real one disagrees too, and so does a GPU without a fabric.
        let mut mixed = parse_smi_csv(TRAY_CSV).unwrap();
        mixed[0].cluster_uuid = ZERO_UUID.into();
        assert!(matches!(node_domain(&mixed), NodeDomain::Disagree { .. }));
        let mut mixed = parse_smi_csv(TRAY_CSV).unwrap();
        mixed[0] = GpuFabric::not_supported();
        assert!(matches!(node_domain(&mixed), NodeDomain::Disagree { .. }));
    }

    #[test]
    fn a_degraded_gpu_marks_the_domain_degraded() {
        let gpus = parse_smi_query(DEGRADED_Q).unwrap();
        assert_eq!(gpus[2].health.degraded_bandwidth, Some(true));
        assert_eq!(gpus[2].health.summary, Some(FabricHealthSummary::LimitedCapacity));
        assert_eq!(
            gpus[2].health.problems(),
            ["bandwidth degraded", "summary limited capacity"]
        );
        assert!(!gpus[0].health.degraded());
        assert_eq!(
            node_domain(&gpus),
            NodeDomain::Domain {
                cluster_uuid: RACK.into(),
                clique_id: 32766,
                degraded: true
            }
        );
    }

    #[test]
    fn older_gpus_have_no_fabric() {
        let gpus = parse_smi_csv(OLD_CSV).unwrap();
        assert_eq!(buses(&gpus), ["0000:3b:00.0", "0000:d8:00.0"]);
        for g in &gpus {
            assert_eq!(g.state, FabricState::NotSupported);
            assert_eq!(g.status, FabricStatus::NotAvailable);
            assert_eq!((g.cluster_uuid.as_str(), g.clique_id), ("", 0));
        }
        assert_eq!(
            node_domain(&gpus),
            NodeDomain::None {
                why: "no GPU has an NVLink fabric (fabric state Not Supported on 2 GPUs)".into()
            }
        );
        // Bare `N/A`, as some drivers print it, and `-q`'s N/A block read the same.
        let bare = parse_smi_csv(&OLD_CSV.replace("[N/A]", "N/A")).unwrap();
        assert_eq!(bare, gpus);
        // `-q` has no index.
        let first = GpuFabric {
            index: None,
            ..gpus[0].clone()
        };
        let q = "GPU 00000000:3B:00.0\n    Fabric\n        State : N/A\n        Status : N/A\n        \
                 CliqueId : N/A\n        ClusterUUID : N/A\n        Health\n            Bandwidth : N/A\n";
        assert_eq!(parse_smi_query(q).unwrap(), vec![first.clone()]);
        // A driver without the Fabric block at all.
        let q = "GPU 00000000:3B:00.0\n    Product Name : Tesla V100\n";
        assert_eq!(parse_smi_query(q).unwrap(), vec![first.clone()]);
        assert!(matches!(node_domain(&[]), NodeDomain::None { .. }));
    }

    #[test]
    fn noheader_csv_takes_its_columns_from_the_query() {
        let body: String = TRAY_CSV.lines().skip(1).map(|l| format!("{l}\n")).collect();
        assert_eq!(
            parse_smi_csv_noheader(&body, SMI_QUERY).unwrap(),
            parse_smi_csv(TRAY_CSV).unwrap()
        );
        assert_eq!(parse_smi_csv_noheader("", SMI_QUERY).unwrap(), vec![]);
        // Fewer columns, another order, an extra one: fine.
        let gpus = parse_smi_csv_noheader(
            "Completed, Success, 7, 6B8D7C1E-2F4A-4C9B-8E3D-5A1F0B9C7D24, NVIDIA GB200\n",
            "fabric.state,fabric.status,fabric.cliqueId,fabric.clusterUuid,name",
        )
        .unwrap();
        assert_eq!((gpus[0].cluster_uuid.as_str(), gpus[0].clique_id), (RACK, 7));
        assert_eq!((gpus[0].index, gpus[0].pci_bus_id.as_str()), (None, ""));
        let e = parse_smi_csv_noheader("0\n", "index").unwrap_err();
        assert!(e.to_string().contains("fabric.clusterUuid, fabric.cliqueId"), "{e}");
    }

    #[test]
    fn header_may_carry_units_case_and_crlf() {
        let text = TRAY_CSV
            .replacen("fabric.cliqueId", "Fabric.CliqueId [id]", 1)
            .replace('\n', "\r\n");
        assert_eq!(parse_smi_csv(&text).unwrap(), parse_smi_csv(TRAY_CSV).unwrap());
    }

    #[test]
    fn error_tokens_in_state_fail_the_node() {
        let text = TRAY_CSV.replacen(
            "1, 00000009:01:00.0, 6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24, 32766, Completed, Success",
            "1, 00000009:01:00.0, [GPU is lost], [GPU is lost], [GPU is lost], [GPU is lost]",
            1,
        );
        let gpus = parse_smi_csv(&text).unwrap();
        assert_eq!(gpus[1].state, FabricState::Unknown("[GPU is lost]".into()));
        assert_eq!(
            node_domain(&gpus),
            NodeDomain::Failed {
                why: "GPU 1 (0009:01:00.0): fabric state [GPU is lost]".into()
            }
        );
        let text = TRAY_CSV.replace("Completed, Success", "Completed, Timeout");
        let NodeDomain::Failed { why } = node_domain(&parse_smi_csv(&text).unwrap()) else {
            panic!()
        };
        assert_eq!(
            why,
            "GPU 0 (0008:01:00.0): fabric registration completed with status Timeout; \
             GPU 1 (0009:01:00.0): fabric registration completed with status Timeout; \
             GPU 2 (0018:01:00.0): fabric registration completed with status Timeout; \
             GPU 3 (0019:01:00.0): fabric registration completed with status Timeout"
        );
        // Completed without a cluster UUID is no domain (issue 37), not a failure; a
        // cluster UUID that is not one (only JSON can carry it) still fails.
        let text = TRAY_CSV.replace(RACK, "[N/A]");
        let NodeDomain::None { why } = node_domain(&parse_smi_csv(&text).unwrap()) else {
            panic!()
        };
        assert!(why.contains("without reporting a cluster UUID"), "{why}");
        let mut gpus = parse_smi_csv(TRAY_CSV).unwrap();
        gpus[1].cluster_uuid = "not-a-uuid".into();
        let NodeDomain::Failed { why } = node_domain(&gpus) else {
            panic!()
        };
        assert!(
            why.contains("GPU 1 (0009:01:00.0): fabric registration completed with a cluster UUID that is not one"),
            "{why}"
        );
    }

    #[test]
    fn truncated_line_names_the_line_and_the_columns() {
        let text: String = TRAY_CSV.lines().take(3).collect::<Vec<_>>().join("\n");
        let text = format!("{text}\n3, 00000019:01:00.0, 6b8d7c1e");
        let e = parse_smi_csv(&text).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 4: expected 6 comma-separated values (index, pci.bus_id, fabric.clusterUuid, \
             fabric.cliqueId, fabric.state, fabric.status), got 3: \"3, 00000019:01:00.0, 6b8d7c1e\""
        );
    }

    #[test]
    fn garbage_uuid_names_the_line_and_the_field() {
        let text = TRAY_CSV.replacen(RACK, "not-a-uuid\u{1b}[2J", 2);
        let e = parse_smi_csv(&text).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2: fabric.clusterUuid: expected a UUID such as 6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24, \
             or N/A, got \"not-a-uuid\\u{1b}[2J\""
        );
        let text = TRAY_Q.replacen(RACK, "6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d2", 1);
        let e = parse_smi_query(&text).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 27: GPU 00000008:01:00.0 Fabric.ClusterUUID: expected a UUID such as \
             6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24, or N/A, got \"6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d2\""
        );
    }

    #[test]
    fn missing_column_and_bad_values_are_errors() {
        let e = parse_smi_csv("index, pci.bus_id, fabric.state\n0, 00000008:01:00.0, Completed\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "line 1: expected a CSV header naming fabric.clusterUuid, fabric.cliqueId, fabric.status \
                 (nvidia-smi --query-gpu={SMI_QUERY}), got \"index, pci.bus_id, fabric.state\""
            )
        );
        let e = parse_smi_csv("").unwrap_err();
        assert!(e.to_string().starts_with("line 1: expected a CSV header line"), "{e}");
        let e = parse_smi_csv(&TRAY_CSV.replacen("32766", "-1", 1)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 2: fabric.cliqueId: expected a clique id"),
            "{e}"
        );
        let e = parse_smi_csv(&TRAY_CSV.replacen("00000009:01:00.0", "9:1", 1)).unwrap_err();
        assert!(
            e.to_string().starts_with("line 3: pci.bus_id: expected a PCI address"),
            "{e}"
        );
        let e = parse_smi_csv(&TRAY_CSV.replacen("\n0,", "\nzero,", 1)).unwrap_err();
        assert!(e.to_string().starts_with("line 2: index: expected a GPU index"), "{e}");
        let e = parse_smi_query(&TRAY_Q.replacen("32766", "many", 1)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 26: GPU 00000008:01:00.0 Fabric.CliqueId"),
            "{e}"
        );
    }

    #[test]
    fn a_fabric_block_cut_short_is_an_error() {
        let cut: String = TRAY_Q.lines().take(26).map(|l| format!("{l}\n")).collect();
        let e = parse_smi_query(&cut).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 23: GPU 00000008:01:00.0 Fabric.ClusterUUID: expected a ClusterUUID line in the Fabric block, \
             got \"none\""
        );
        let no_state = "GPU 00000008:01:00.0\n    Fabric\n        Status : Success\n";
        let e = parse_smi_query(no_state).unwrap_err();
        assert!(
            e.to_string().starts_with("line 2: GPU 00000008:01:00.0 Fabric.State"),
            "{e}"
        );
    }

    #[test]
    fn query_reads_only_the_gpu_level_fabric_block() {
        // `State` and `CliqueId` keys elsewhere, and a `Fabric` section deeper down, are
        // not the GPU's fabric.
        let q = "GPU 00000008:01:00.0\n    Inforom Version\n        State : Bogus\n        CliqueId : 9\n    \
                 Fabric\n        State : Completed\n        Status : Success\n        CliqueId : 32766\n        \
                 ClusterUUID : 6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24\n    Other\n        Fabric\n            \
                 State : In Progress\n";
        let gpus = parse_smi_query(q).unwrap();
        assert_eq!(gpus.len(), 1);
        assert_eq!((&gpus[0].state, gpus[0].clique_id), (&FabricState::Completed, 32766));
    }

    #[test]
    fn huge_input_is_refused() {
        let huge = format!("{}\n{}", SMI_QUERY, "x".repeat(MAX_SMI_CSV));
        assert_eq!(
            parse_smi_csv(&huge).unwrap_err().to_string(),
            "nvidia-smi --query-gpu output is larger than the limit of 1 MiB; expected the output of one machine"
        );
        assert!(matches!(
            parse_smi_query(&"x".repeat(MAX_SMI_QUERY + 1)),
            Err(FabricParseError::TooLarge { .. })
        ));
        let row = format!("0, 00000008:01:00.0, {RACK}, 1, Completed, Success\n");
        let many = format!("{SMI_QUERY}\n{}", row.repeat(MAX_GPUS + 1));
        assert_eq!(
            parse_smi_csv(&many).unwrap_err(),
            FabricParseError::TooManyGpus { what: CSV_WHAT }
        );
        assert_eq!(
            parse_smi_csv(&format!("{SMI_QUERY}\n{}", row.repeat(MAX_GPUS)))
                .unwrap()
                .len(),
            MAX_GPUS
        );
        let gpu = "GPU 00000008:01:00.0\n";
        assert!(matches!(
            parse_smi_query(&gpu.repeat(MAX_GPUS + 1)),
            Err(FabricParseError::TooManyGpus { .. })
        ));
    }

    #[test]
    fn garbage_never_panics() {
        let samples = [
            "\u{0}\u{1}\u{2}",
            ",,,,,,",
            "GPU \nGPU :\nGPU 0:0.0\n    Fabric\n        State",
            "GPU 00000008:01:00.0\n\tFabric\n\t\tState : Completed",
            "index\n\u{feff}",
            "é, ü, ∞, 😀",
            "GPU 00000008:01:00.0\n    Fabric\n        ClusterUUID : ::::\n",
        ];
        for s in samples {
            let _ = parse_smi_csv(s);
            let _ = parse_smi_csv_noheader(s, SMI_QUERY);
            let _ = parse_smi_query(s);
            let _ = normalize_pci_bus_id(s);
            let _ = parse_uuid(s);
            let _ = domain_name(s);
        }
        // Every prefix of the fixtures, cut anywhere (at character boundaries).
        for text in [TRAY_CSV, TRAY_Q] {
            for (i, _) in text.char_indices().step_by(7) {
                let _ = parse_smi_csv(&text[..i]);
                let _ = parse_smi_query(&text[..i]);
            }
        }
    }

    #[test]
    fn nvml_conversion() {
        let bytes = [
            0x6b, 0x8d, 0x7c, 0x1e, 0x2f, 0x4a, 0x4c, 0x9b, 0x8e, 0x3d, 0x5a, 0x1f, 0x0b, 0x9c, 0x7d, 0x24,
        ];
        // Bandwidth degraded (1 at bits 1:0), route recovery false (2 at 3:2), the rest
        // not supported; summary limited capacity.
        let raw = NvmlFabricInfo {
            cluster_uuid: bytes,
            status: 0,
            clique_id: 32766,
            state: 3,
            health_mask: Some(0b1001),
            health_summary: Some(3),
        };
        let g = from_nvml(raw);
        assert_eq!(g.cluster_uuid, RACK);
        assert_eq!(
            (g.clique_id, &g.state, &g.status),
            (32766, &FabricState::Completed, &FabricStatus::Success)
        );
        assert_eq!(g.health_mask, Some(0b1001));
        assert_eq!(
            g.health,
            FabricHealth {
                degraded_bandwidth: Some(true),
                route_recovery: Some(false),
                summary: Some(FabricHealthSummary::LimitedCapacity),
                ..FabricHealth::default()
            }
        );
        assert!(g.health.degraded());
        // The same tray over NVML and over nvidia-smi agree.
        let csv = parse_smi_csv(TRAY_CSV).unwrap();
        let nvml: Vec<GpuFabric> = csv
            .iter()
            .map(|c| GpuFabric {
                pci_bus_id: c.pci_bus_id.clone(),
                index: c.index,
                ..from_nvml(NvmlFabricInfo {
                    health_mask: None,
                    health_summary: None,
                    ..raw
                })
            })
            .collect();
        assert_eq!(nvml, csv);
        // Errors keep NVML's name; unknown codes and states their number.
        let g = from_nvml(NvmlFabricInfo { status: 10, ..raw });
        assert_eq!(g.status, FabricStatus::Error("NVML_ERROR_TIMEOUT".into()));
        let g = from_nvml(NvmlFabricInfo { status: 4242, ..raw });
        assert_eq!(g.status, FabricStatus::Error("NVML error 4242".into()));
        let g = from_nvml(NvmlFabricInfo { state: 9, ..raw });
        assert_eq!(g.state, FabricState::Unknown("NVML fabric state 9".into()));
        assert_eq!(
            from_nvml(NvmlFabricInfo { state: 2, ..raw }).state,
            FabricState::InProgress
        );
        assert_eq!(
            from_nvml(NvmlFabricInfo { state: 1, ..raw }).state,
            FabricState::NotStarted
        );
        // Not supported reads as nvidia-smi prints it.
        assert_eq!(from_nvml(NvmlFabricInfo::default()), GpuFabric::not_supported());
        // A plain HGX: completed, success, zero UUID.
        let hgx = from_nvml(NvmlFabricInfo {
            state: 3,
            ..NvmlFabricInfo::default()
        });
        assert_eq!(hgx.cluster_uuid, ZERO_UUID);
        assert!(matches!(node_domain(&[hgx]), NodeDomain::None { .. }));
    }

    #[test]
    fn health_mask_layout() {
        let all_true = 1 | (1 << 2) | (1 << 4) | (1 << 6) | (5 << 8);
        let h = FabricHealth::from_mask(all_true);
        assert_eq!(
            h,
            FabricHealth {
                degraded_bandwidth: Some(true),
                route_recovery: Some(true),
                route_unhealthy: Some(true),
                access_timeout_recovery: Some(true),
                incorrect_configuration: Some("insufficient NVLinks".into()),
                summary: None,
            }
        );
        let all_false = 2 | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8);
        let h = FabricHealth::from_mask(all_false);
        assert!(!h.degraded());
        assert_eq!(h.route_unhealthy, Some(false));
        assert_eq!(h.incorrect_configuration, None);
        assert!(FabricHealth::from_mask(0).is_unreported());
        // Only route unhealthy (bits 5:4 = 1).
        assert_eq!(FabricHealth::from_mask(1 << 4).problems(), ["route unhealthy"]);
        assert_eq!(
            FabricHealth::from_mask(0xf << 8).incorrect_configuration.as_deref(),
            Some("code 15")
        );
    }

    #[test]
    fn names_are_valid_hypernode_names() {
        assert_eq!(domain_name(RACK), "nvl-6b8d7c1e");
        assert_eq!(partition_name(RACK, 32766), "nvl-6b8d7c1e-c32766");
        assert_eq!(domain_name("6B8D7C1E-2F4A-4C9B-8E3D-5A1F0B9C7D24"), "nvl-6b8d7c1e");
        for name in [
            domain_name(RACK),
            partition_name(RACK, u32::MAX),
            domain_name("\u{1b}[2J../../etc"),
            partition_name("", 0),
            partition_name_under(&name_with("ffffffff-ffff-ffff-ffff-ffffffffffff", 32), u32::MAX),
        ] {
            check_name(NameKind::HyperNode, &name).unwrap();
        }
    }

    #[test]
    fn colliding_prefixes_get_longer_names() {
        let a = "6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d24";
        let b = "6b8d7c1e-2f4b-0000-0000-000000000000";
        let c = "0123abcd-0000-0000-0000-000000000000";
        let d = "6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d25";
        let names = domain_names([a, b, c, a, "not a uuid"]);
        assert_eq!(names.len(), 3);
        assert_eq!(names[a], "nvl-6b8d7c1e2f4a");
        assert_eq!(names[b], "nvl-6b8d7c1e2f4b");
        assert_eq!(names[c], "nvl-0123abcd");
        let names = domain_names([a, d]);
        assert_eq!(names[a], "nvl-6b8d7c1e2f4a4c9b8e3d5a1f0b9c7d24");
        assert_eq!(names[d], "nvl-6b8d7c1e2f4a4c9b8e3d5a1f0b9c7d25");
        // Without a collision, the set's names are the one-by-one names.
        let names = domain_names([a, c]);
        assert_eq!(names[a], domain_name(a));
        assert_eq!(partition_name_under(&names[a], 1), partition_name(a, 1));
        for name in names.values() {
            check_name(NameKind::HyperNode, name).unwrap();
        }
    }

    #[test]
    fn pci_and_uuid_forms() {
        assert_eq!(
            normalize_pci_bus_id("00000008:01:00.0").as_deref(),
            Some("0008:01:00.0")
        );
        assert_eq!(normalize_pci_bus_id("0000:3B:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(normalize_pci_bus_id("3b:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(
            normalize_pci_bus_id("00010000:01:00.0").as_deref(),
            Some("00010000:01:00.0")
        );
        for bad in [
            "",
            "3b:00",
            "0:0:0:0.0",
            "zz:00.0",
            "00:20.0",
            "00:00.8",
            "000000000:00:00.0",
        ] {
            assert_eq!(normalize_pci_bus_id(bad), None, "{bad}");
        }
        assert_eq!(parse_uuid("6B8D7C1E2F4A4C9B8E3D5A1F0B9C7D24").as_deref(), Some(RACK));
        for bad in [
            "",
            "6b8d7c1e-2f4a-4c9b-8e3d5a1f0b9c7d24-",
            "6b8d7c1e-2f4a-4c9b-8e3d-5a1f0b9c7d2g",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
        assert!(is_canonical_uuid(RACK));
        assert!(!is_canonical_uuid(&RACK.to_uppercase()));
    }

    #[test]
    fn json_field_names() {
        let g = &parse_smi_query(DEGRADED_Q).unwrap()[2];
        let json = serde_json::to_value(g).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "pciBusId": "0018:01:00.0",
                "clusterUuid": RACK,
                "cliqueId": 32766,
                "state": "completed",
                "status": "success",
                "health": {
                    "degradedBandwidth": true,
                    "routeRecovery": false,
                    "routeUnhealthy": false,
                    "accessTimeoutRecovery": false,
                    "summary": "limitedCapacity"
                }
            })
        );
        let back: GpuFabric = serde_json::from_value(json).unwrap();
        assert_eq!(&back, g);
        let d = NodeDomain::Domain {
            cluster_uuid: RACK.into(),
            clique_id: 1,
            degraded: false,
        };
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            serde_json::json!({"domain": {"clusterUuid": RACK, "cliqueId": 1, "degraded": false}})
        );
        let s = serde_json::to_value(FabricStatus::Error("NVML_ERROR_TIMEOUT".into())).unwrap();
        assert_eq!(s, serde_json::json!({"error": "NVML_ERROR_TIMEOUT"}));
    }

    /// The body of one section of an nvidia_gpu_exporter capture: the lines after the
    /// `####` rule that closes the header naming `title`, up to the next rule.
    fn capture_section<'a>(capture: &'a str, title: &str) -> &'a str {
        let header = capture.find(&format!("# {title}")).expect("section");
        let rest = &capture[header..];
        let rule = "################################################################################\n";
        let start = rest.find(rule).expect("rule") + rule.len();
        let body = &rest[start..];
        &body[..body.find(rule).unwrap_or(body.len())]
    }

    /// Each `<gpu id="…">`'s id and the elements of its `<fabric>` block (those of
    /// `<health>` included), from `nvidia-smi -q -x` output.
    fn xml_fabric(xml: &str) -> Vec<(String, Vec<(String, String)>)> {
        xml.split("<gpu id=\"")
            .skip(1)
            .map(|gpu| {
                let (id, rest) = gpu.split_once('"').unwrap();
                let fabric = rest
                    .split("<fabric>")
                    .nth(1)
                    .unwrap()
                    .split("</fabric>")
                    .next()
                    .unwrap();
                let elements = fabric
                    .split('<')
                    .filter_map(|tag| {
                        let (name, value) = tag.split_once('>')?;
                        (!name.starts_with('/') && name != "health")
                            .then(|| (name.to_string(), value.trim().to_string()))
                    })
                    .collect();
                (id.to_string(), elements)
            })
            .collect()
    }

    /// The `-q` text nvidia-smi prints for the same values (keys as in H100_590_CAPTURE).
    fn q_from_xml(xml: &str) -> String {
        let key = |element: &str| match element {
            "state" => "State",
            "status" => "Status",
            "cliqueId" => "CliqueId",
            "clusterUuid" => "ClusterUUID",
            "summary" => "Summary",
            "bandwidth" => "Bandwidth",
            "route_recovery_in_progress" => "Route Recovery in progress",
            "route_unhealthy" => "Route Unhealthy",
            "access_timeout_recovery" => "Access Timeout Recovery",
            "incorrect_configuration" => "Incorrect Configuration",
            "partition_assigned" => "Partition Assigned",
            other => panic!("unexpected fabric element {other}"),
        };
        let mut q = String::new();
        for (id, elements) in xml_fabric(xml) {
            q += &format!("GPU {id}\n    Fabric\n");
            for (i, (element, value)) in elements.iter().enumerate() {
                if i == 4 {
                    q += "        Health\n";
                }
                let indent = if i < 4 { 8 } else { 12 };
                q += &format!("{:<55}: {value}\n", format!("{}{}", " ".repeat(indent), key(element)));
            }
        }
        q
    }

    /// The `--query-gpu=pci.bus_id,<SMI_QUERY_HEALTH's fabric fields>` CSV for the same
    /// values: each field's last part is the XML element's name.
    fn csv_from_xml(xml: &str) -> String {
        let fields: Vec<&str> = SMI_QUERY_HEALTH.split(',').skip(1).collect();
        let mut csv = fields.join(", ") + "\n";
        for (id, elements) in xml_fabric(xml) {
            let values: Vec<&str> = fields[1..]
                .iter()
                .map(|f| {
                    let element = f.rsplit('.').next().unwrap();
                    elements
                        .iter()
                        .find(|(e, _)| e == element)
                        .map_or("N/A", |(_, v)| v.as_str())
                })
                .collect();
            csv += &format!("{id}, {}\n", values.join(", "));
        }
        csv
    }

    fn without_index(gpus: Vec<GpuFabric>) -> Vec<GpuFabric> {
        gpus.into_iter().map(|g| GpuFabric { index: None, ..g }).collect()
    }

    const ALL_CLEAR: FabricHealth = FabricHealth {
        degraded_bandwidth: Some(false),
        route_recovery: Some(false),
        route_unhealthy: Some(false),
        access_timeout_recovery: Some(false),
        incorrect_configuration: None,
        summary: Some(FabricHealthSummary::Healthy),
    };

    #[test]
    fn health_fields_are_the_ones_real_nvidia_smi_lists() {
        assert_eq!(SMI_QUERY_HEALTH, format!("{SMI_QUERY},{}", SMI_HEALTH_FIELDS.join(",")));
        let help = capture_section(H100_590_CAPTURE, "capabilities :: help-query-gpu");
        for field in SMI_QUERY_HEALTH.split(',') {
            assert!(
                help.contains(&format!("\"{field}\"")),
                "{field} is not in --help-query-gpu"
            );
        }
        for f in HealthField::ALL {
            assert_eq!(Column::from_name(f.query_name()), Column::Health(f));
            assert_eq!(Column::from_name(&f.query_name().to_uppercase()), Column::Health(f));
        }
        // Listed by 595 but not asked for: 590 would refuse it.
        assert!(!help.contains("\"fabric.health.partition_assigned\""));
        assert_eq!(Column::from_name("fabric.health.partition_assigned"), Column::Other);
    }

    #[test]
    fn real_590_h100_capture_reads_as_no_domain_both_ways() {
        // 212 columns, health among them (all N/A on an H100), header cells as the names.
        let csv = capture_section(H100_590_CAPTURE, "idle :: query-gpu (csv");
        assert!(csv.contains("fabric.health.incorrect_configuration, platform.chassis_serial_number"));
        let gpus = parse_smi_csv(csv).unwrap();
        assert_eq!(gpus.len(), 1);
        let g = &gpus[0];
        assert_eq!((g.index, g.pci_bus_id.as_str()), (Some(0), "0000:00:09.0"));
        assert_eq!((&g.state, &g.status), (&FabricState::Completed, &FabricStatus::Success));
        assert_eq!((g.cluster_uuid.as_str(), g.clique_id), (ZERO_UUID, 0));
        assert!(g.health.is_unreported(), "{:?}", g.health);
        let q = parse_smi_query(capture_section(H100_590_CAPTURE, "idle :: query (-q)")).unwrap();
        assert_eq!(q, without_index(gpus.clone()));
        let NodeDomain::None { why } = node_domain(&gpus) else {
            panic!("{:?}", node_domain(&gpus))
        };
        assert!(why.contains("all-zero cluster UUID"), "{why}");
        // Under load, the same.
        let load = parse_smi_csv(capture_section(H100_590_CAPTURE, "load :: query-gpu (csv")).unwrap();
        assert_eq!(load, gpus);
        assert_eq!(
            parse_smi_query(capture_section(H100_590_CAPTURE, "load :: query (-q)")).unwrap(),
            q
        );
    }

    #[test]
    fn driver_535_fabric_block_has_state_and_status_only() {
        let gpus = parse_smi_query(H100_535_Q).unwrap();
        assert_eq!(
            buses(&gpus),
            [
                "0000:19:00.0",
                "0000:3b:00.0",
                "0000:4c:00.0",
                "0000:5d:00.0",
                "0000:9b:00.0",
                "0000:bb:00.0",
                "0000:cb:00.0",
                "0000:db:00.0"
            ]
        );
        for g in &gpus {
            assert_eq!((&g.state, &g.status), (&FabricState::Completed, &FabricStatus::Success));
            assert_eq!((g.cluster_uuid.as_str(), g.clique_id), ("", 0));
            assert!(g.health.is_unreported());
        }
        // Completed without a cluster UUID: no NVLink domain, not a failure.
        let NodeDomain::None { why } = node_domain(&gpus) else {
            panic!("{:?}", node_domain(&gpus))
        };
        assert_eq!(
            why,
            "every GPU completed NVLink fabric registration without reporting a cluster UUID \
             (535-series drivers report none; clique 0): no multi-node domain"
        );
        // Beside GPUs that report the all-zero UUID: still none. Beside a real one: disagree.
        let mut mixed = gpus.clone();
        mixed[0].cluster_uuid = ZERO_UUID.into();
        let NodeDomain::None { why } = node_domain(&mixed) else {
            panic!("{:?}", node_domain(&mixed))
        };
        assert!(why.contains("7 of 8 GPUs report none"), "{why}");
        mixed[0].cluster_uuid = RACK.into();
        assert!(matches!(node_domain(&mixed), NodeDomain::Disagree { .. }));
        // The rule for errors and registration under way is unchanged.
        let failed = H100_535_Q.replacen(
            "Status                            : Success",
            "Status                            : Timeout",
            1,
        );
        let NodeDomain::Failed { why } = node_domain(&parse_smi_query(&failed).unwrap()) else {
            panic!()
        };
        assert_eq!(
            why,
            "GPU 0000:19:00.0: fabric registration completed with status Timeout"
        );
        let pending = H100_535_Q.replacen(
            "State                             : Completed",
            "State                             : In Progress",
            1,
        );
        assert!(matches!(
            node_domain(&parse_smi_query(&pending).unwrap()),
            NodeDomain::Pending { .. }
        ));
        // A 535 GPU without a fabric (an L20: `N/A`, `N/A`).
        let q = "GPU 00000000:12:00.0\n    Fabric\n        State : N/A\n        Status : N/A\n    Processes : None\n";
        let gpus = parse_smi_query(q).unwrap();
        assert_eq!(gpus[0].state, FabricState::NotSupported);
        assert!(matches!(node_domain(&gpus), NodeDomain::None { .. }));
        // One of CliqueId and ClusterUUID without the other is a block cut short.
        let q = "GPU 00000000:19:00.0\n    Fabric\n        State : Completed\n        Status : Success\n        \
                 ClusterUUID : 00000000-0000-0000-0000-000000000000\n";
        let e = parse_smi_query(q).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 2: GPU 00000000:19:00.0 Fabric.CliqueId: expected a CliqueId line"),
            "{e}"
        );
    }

    #[test]
    fn gb300_580_fixtures_match_the_real_capture() {
        let q = parse_smi_query(GB300_Q).unwrap();
        let csv = parse_smi_csv(GB300_CSV).unwrap();
        assert_eq!(parse_smi_query(&q_from_xml(GB300_XML)).unwrap(), q);
        assert_eq!(
            parse_smi_csv(&csv_from_xml(GB300_XML)).unwrap(),
            without_index(csv.clone())
        );
        assert_eq!(q, without_index(csv.clone()));
        assert_eq!(
            buses(&csv),
            ["0008:06:00.0", "0009:06:00.0", "0018:06:00.0", "0019:06:00.0"]
        );
        for g in &csv {
            assert_eq!(g.health, ALL_CLEAR);
            assert!(!g.health.degraded());
        }
        assert_eq!(
            node_domain(&csv),
            NodeDomain::Domain {
                cluster_uuid: GB300_RACK.into(),
                clique_id: 32766,
                degraded: false
            }
        );
        // The same CSV as an older driver prints it (the fabric fields only) reads the same,
        // less the health.
        let old: String = GB300_CSV
            .lines()
            .map(|l| l.split(", ").take(6).collect::<Vec<_>>().join(", ") + "\n")
            .collect();
        let old = parse_smi_csv(&old).unwrap();
        assert!(old.iter().all(|g| g.health.is_unreported()));
        let cleared: Vec<GpuFabric> = csv
            .iter()
            .map(|g| GpuFabric {
                health: FabricHealth::default(),
                ..g.clone()
            })
            .collect();
        assert_eq!(old, cleared);
        // Headerless, with the query the agent runs.
        let body: String = GB300_CSV.lines().skip(1).map(|l| format!("{l}\n")).collect();
        assert_eq!(parse_smi_csv_noheader(&body, SMI_QUERY_HEALTH).unwrap(), csv);
    }

    #[test]
    fn an_unhealthy_tray_in_csv_is_degraded_and_says_why() {
        let gpus = parse_smi_csv(GB300_UNHEALTHY_CSV).unwrap();
        let unhealthy = FabricHealth {
            route_unhealthy: Some(true),
            summary: Some(FabricHealthSummary::Unhealthy),
            ..ALL_CLEAR
        };
        assert_eq!(gpus[2].health, unhealthy);
        assert!(gpus[2].health.degraded());
        assert_eq!(gpus[2].health.problems(), ["route unhealthy", "summary unhealthy"]);
        assert_eq!(gpus[1].health, ALL_CLEAR);
        assert_eq!(
            node_domain(&gpus),
            NodeDomain::Domain {
                cluster_uuid: GB300_RACK.into(),
                clique_id: 32766,
                degraded: true
            }
        );
        // What nvidia-smi printed for a GPU with a route unhealthy reads the same from -q
        // and from CSV, and as NVML's mask and summary for that GPU decode.
        let q = parse_smi_query(&q_from_xml(DEGRADED_XML)).unwrap();
        assert_eq!((&q[0].health, &q[1].health), (&ALL_CLEAR, &unhealthy));
        let csv = parse_smi_csv(&csv_from_xml(DEGRADED_XML)).unwrap();
        assert_eq!(csv, q);
        // Bandwidth, route recovery and timeout recovery false (2), route unhealthy true
        // (1), configuration correct (1); summary unhealthy (2).
        let mask = 2 | (2 << 2) | (1 << 4) | (2 << 6) | (1 << 8);
        let nvml = from_nvml(NvmlFabricInfo {
            state: 3,
            health_mask: Some(mask),
            health_summary: Some(2),
            ..NvmlFabricInfo::default()
        });
        assert_eq!(nvml.health, unhealthy);
        // A summary alone is enough: a tray that says Unhealthy is not taken as healthy.
        let text = GB300_CSV.replacen("Success, Healthy", "Success, Unhealthy", 1);
        let gpus = parse_smi_csv(&text).unwrap();
        assert_eq!(gpus[0].health.problems(), ["summary unhealthy"]);
        assert!(matches!(node_domain(&gpus), NodeDomain::Domain { degraded: true, .. }));
        // Bandwidth degraded: limited capacity, as NVML's mask and summary say it.
        let text = GB300_CSV.replacen("Healthy, Full", "Limited Capacity, Degraded", 1);
        let gpus = parse_smi_csv(&text).unwrap();
        assert_eq!(
            gpus[0].health.problems(),
            ["bandwidth degraded", "summary limited capacity"]
        );
        // Route recovery and access timeout recovery, in -q as in CSV.
        let text = GB300_Q
            .replacen(
                "Route Recovery in progress                 : False",
                "Route Recovery in progress                 : True",
                1,
            )
            .replacen(
                "Access Timeout Recovery                    : False",
                "Access Timeout Recovery                    : True",
                1,
            );
        let gpus = parse_smi_query(&text).unwrap();
        assert_eq!(
            gpus[0].health.problems(),
            ["route recovery in progress", "access timeout recovery in progress"]
        );
        let text = GB300_CSV.replacen("Full, False, False, False", "Full, True, False, True", 1);
        assert_eq!(parse_smi_csv(&text).unwrap()[0].health, gpus[0].health);
    }

    #[test]
    fn incorrect_configuration_is_named_as_nvml_names_it() {
        let read = |value: &str| {
            let text = GB300_CSV.replacen("False, None", &format!("False, {value}"), 1);
            parse_smi_csv(&text).unwrap()[0].health.incorrect_configuration.clone()
        };
        for (text, code) in [
            ("Incorrect SysGUID", 2),
            ("Incorrect Chassis Serial Number", 3),
            ("incorrect_chassis_sn", 3),
            ("No Partition", 4),
            ("no_partition", 4),
            ("Insufficient NVLinks", 5),
            ("Incompatible GPU Firmware", 6),
            ("incompatible_gpu_fw", 6),
            ("Invalid Location", 7),
            ("GPU State Invalid", 8),
        ] {
            assert_eq!(
                read(text),
                FabricHealth::from_mask(code << 8).incorrect_configuration,
                "{text}"
            );
        }
        assert_eq!(read("Cable \u{1b}[2J loose").as_deref(), Some("Cable \\u{1b}[2J loose"));
        for none in ["None", "N/A", "[N/A]", "[Not Supported]", "[Unknown Error]", ""] {
            assert_eq!(read(none), None, "{none:?}");
        }
        let text = GB300_CSV.replacen("False, None", "False, Insufficient NVLinks", 1);
        let gpus = parse_smi_csv(&text).unwrap();
        assert_eq!(
            gpus[0].health.problems(),
            ["incorrect configuration: insufficient NVLinks"]
        );
        assert!(matches!(node_domain(&gpus), NodeDomain::Domain { degraded: true, .. }));
        // Values this code does not know are not reported, never errors.
        let text = GB300_CSV.replacen(
            "Healthy, Full, False, False, False",
            "Sparkling, 7 GB/s, maybe, [GPU is lost], Unknown",
            1,
        );
        let gpus = parse_smi_csv(&text).unwrap();
        assert!(gpus[0].health.is_unreported(), "{:?}", gpus[0].health);
    }

    #[test]
    fn fuzzed_real_captures_never_panic() {
        let texts = [
            H100_535_Q,
            GB300_Q,
            GB300_CSV,
            GB300_UNHEALTHY_CSV,
            capture_section(H100_590_CAPTURE, "idle :: query-gpu (csv"),
            capture_section(H100_590_CAPTURE, "idle :: query (-q)"),
        ];
        // Every prefix (cut at a character boundary), at a prime stride.
        for text in texts {
            for (i, _) in text.char_indices().step_by(97) {
                for gpus in [parse_smi_csv(&text[..i]), parse_smi_query(&text[..i])]
                    .into_iter()
                    .flatten()
                {
                    let _ = node_domain(&gpus);
                }
            }
        }
        // Random edits: characters that matter to the parsers put anywhere, lines dropped
        // or repeated.
        let mut rng = fastrand::Rng::with_seed(37);
        let noise = [
            ",",
            ":",
            " : ",
            "[",
            "]",
            "\n",
            "\n    ",
            "\t",
            "é",
            "\u{0}",
            "N/A",
            "GPU ",
            "    Fabric\n",
        ];
        for round in 0..600 {
            let text = texts[round % texts.len()];
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            for _ in 0..rng.usize(1..8) {
                let at = rng.usize(..lines.len().max(1));
                match rng.u8(..4) {
                    0 if !lines.is_empty() => {
                        lines.remove(at);
                    }
                    1 if !lines.is_empty() => {
                        let line = lines[at].clone();
                        lines.insert(at, line);
                    }
                    _ if !lines.is_empty() => {
                        let line = &mut lines[at];
                        let cut = line
                            .char_indices()
                            .map(|(i, _)| i)
                            .nth(rng.usize(..line.chars().count().max(1)))
                            .unwrap_or(0);
                        line.insert_str(cut, noise[rng.usize(..noise.len())]);
                    }
                    _ => {}
                }
            }
            let edited = lines.join("\n");
            for gpus in [parse_smi_csv(&edited), parse_smi_query(&edited)].into_iter().flatten() {
                let _ = node_domain(&gpus);
            }
            let _ = parse_smi_csv_noheader(&edited, SMI_QUERY_HEALTH);
        }
    }
}
