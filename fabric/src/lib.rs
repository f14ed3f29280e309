//! hyperplan-fabric: the switch hierarchy of a cluster, discovered rather than written.
//!
//! Each source turns what a fabric tool reports into HyperNodes (Volcano's model, the
//! planner's `HyperNodeSpec`): `ibnetdiscover` dumps (every tier, from the switch graph),
//! UFM's REST port list (Volcano's leaf grouping, upper tiers when the ports show them)
//! and Slurm's `topology.conf` (import and export). No I/O here but the UFM client.

pub mod dot;
pub mod error;
pub mod guidmap;
pub mod ibnetdiscover;
pub mod json;
pub mod links;
pub mod names;
pub mod slurm;
pub mod synthetic;
pub mod tiers;
pub mod ufm;
mod unionfind;

pub use error::FabricError;
pub use guidmap::GuidMap;
pub use ibnetdiscover::{IbFabric, parse_ibnetdiscover};
pub use tiers::{Discovery, HostNames, discover, discover_text};
