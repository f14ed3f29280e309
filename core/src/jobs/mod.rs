//! Jobs and their tasks: how a job comes in ([`admit`]), whose it is and what it may ask
//! ([`ownership`]), how its tasks start and end and what that decides ([`lifecycle`]),
//! [`holds`] (held jobs and begin times), and the systems that tidy after the allocator's work: `recover` (a job's
//! AllocatedHyperNode), [`replace`] (tasks lost with their node started again, or the
//! job requeued or failed), [`shed`] (a rejected job keeps no entity per replica),
//! `retire` (a job that ended leaves the per-tick scans) and [`forget`] (ended jobs past
//! the limits leave memory).

pub mod admit;
pub mod arrays;
pub mod dependencies;
pub mod forget;
pub mod gates;
pub mod holds;
pub mod lifecycle;
pub mod ownership;
pub(crate) mod recover;
pub mod replace;
pub(crate) mod retire;
pub mod segments;
pub mod shed;
