//! How a preemption reads in a job's reason as it goes out (a `JobReport`'s text): read
//! back by `caller` to name no other user's job under `privateData` (a module of its own
//! so that `caller`, below `preempt`, needs nothing of it). The sentences are made by
//! `model::reason` ([`Reason::Preempting`](crate::model::reason::Reason::Preempting),
//! [`Reason::PreemptedBy`](crate::model::reason::Reason::PreemptedBy)).

use crate::model::reason::{preempted_by_text, preempting_text};

/// A preempting job's sentence (see [`Reason::Preempting`](crate::model::reason::Reason::Preempting)).
pub fn preempting(victims: &[String], hyper_node: Option<&str>) -> String {
    preempting_text(victims, hyper_node)
}

/// A [`preempting`] with each victim named as `name` says instead (`privateData`
/// hides other users' jobs); `None` for a reason of another kind. Names hold no space,
/// comma or parenthesis (`shared::names`), so the list reads back exactly.
pub fn rename_victims(reason: &str, name: impl Fn(&str) -> String) -> Option<String> {
    let body = reason
        .strip_prefix("preempting ")?
        .strip_suffix("; it starts when they have ended")?;
    let (head, list) = body.rsplit_once(" (")?;
    let (_, hyper_node) = head.split_once(" in ")?;
    let victims: Vec<String> = list.strip_suffix(')')?.split(", ").map(name).collect();
    let hyper_node = (hyper_node != "the cluster").then_some(hyper_node);
    Some(preempting(&victims, hyper_node))
}

/// How a victim's reason names the job that preempted it (`privateData` replaces it).
pub fn preempted_by(preemptor: &str) -> String {
    preempted_by_text(preemptor)
}
