//! Read-only views of the world for people and scripts: the job reports `hyperplan
//! simulate` prints and `hyperplan status` shows, the node list, the HyperNode tree and
//! the explanation of a job's gradient search, the HyperNodes as manifests. Nothing here changes the world.

mod explain;
mod hypernodes;
mod jobs;
mod manifests;
mod nodes;
mod ranks;
mod stored;
mod unstarted;

pub use explain::explain;
pub use hypernodes::hyper_node_tree;
pub use jobs::{job_report, job_reports, newest_of_each_name};
pub use manifests::resolved_specs;
pub use nodes::node_statuses;
pub use ranks::{hyper_nodes_of, job_ranks};
pub use stored::stored_report;
pub use unstarted::unstarted_on;
