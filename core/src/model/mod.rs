//! The core's vocabulary, below every system: typed ids and dense indices (`ids`), the
//! ECS components (`components`, `taskrun`), what drivers send in (`events`, with what
//! a discovery source found: `discovered`) and get back (`commands`), a tick's inputs,
//! outputs and invalidation flags (`tick`), and what the store keeps of a job
//! (`record`), of fair-share usage (`usage`) and of admins' drains (`drain`) and of a job's hold (`held`); why a job waits, was rejected or ended (`reason`); tasks the planner no longer counts still running on a node (`strays`); a node that cannot start tasks now (`strained`). Nothing here imports a system; every system imports from here. Besides
//! the crate's plain libraries (`numa`, `checksum`), it stands on `hyperplan-shared`
//! and `hyperplan-fabric` only.

pub mod arrays;
pub mod awaiting;
pub mod checks;
pub mod commands;
pub mod components;
pub mod discovered;
pub mod drain;
pub mod events;
pub mod gate;
pub mod health;
pub mod held;
pub mod ids;
pub mod jobstate;
pub mod kill;
pub mod ports;
pub mod reason;
pub mod record;
pub mod runtimes;
pub mod since;
pub mod strained;
pub mod strays;
pub mod taskrun;
pub mod tick;
pub mod usage;
