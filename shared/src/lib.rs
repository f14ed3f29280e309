//! hyperplan-shared: the model every side of hyperplan speaks.
//!
//! Resources and quantities, the cluster file, job files, Volcano HyperNode and Job
//! manifests, the placement report `hyperplan simulate` prints, and the generators
//! and helpers (fat-tree clusters, hostlists, text columns) that users and tests share.
//! `gpufabric` reads the NVLink fabric (GB200/GB300 NVL72 domains) GPUs report.

pub mod array;
pub mod begin;
pub mod civil;
pub mod cluster;
pub mod columns;
pub mod cpulist;
pub mod dependency;
pub mod error;
pub mod fattree;
pub mod gpufabric;
pub mod health;
pub mod history;
pub mod hostlist;
pub mod hypernode;
pub mod ibrate;
pub mod ids;
pub mod job;
pub mod limits;
pub mod names;
pub mod outpattern;
pub mod quantity;
pub mod report;
pub mod resources;
pub mod sbatch;
pub mod slurmtime;
pub mod status;
pub mod swf;
pub mod taskend;
pub mod taskenv;
pub mod timelimit;
pub mod topology;
mod yaml;

pub use cluster::{ClusterSpec, NodeSpec, TopologyRef, load_cluster_file, parse_cluster};
pub use error::FileError;
pub use hypernode::{HyperNodeSpec, LabelExpression, Member, MemberType, Selector};
pub use job::{
    JobRun, JobSpec, NetworkTopology, OnTaskFailure, PartitionPolicy, TaskExec, TaskSpec, TopologyMode, load_job_file,
    parse_jobs,
};
pub use resources::{CPU, MEMORY, Resources};
