//! The probe: hwloc for the CPU tree and PCI I/O, sysfs for InfiniBand ports and NUMA
//! free memory, procfs for live figures.

mod error;
pub mod hwloc;
pub mod infiniband;
pub mod live;

pub use error::ProbeError;
