//! A submitter's Unix groups on the planner's host, for queues that take `groups`: asked
//! of NSS through `id -Gn` (so LDAP and SSSD groups count, and no lookup code runs in the
//! planner), at most once a minute per user, bounded in time. A user the host does not
//! know has no groups: such a queue then takes them only by name.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an answer is reused.
const TTL: Duration = Duration::from_secs(60);
/// How long `id` may take.
const PATIENCE: Duration = Duration::from_secs(2);
/// Users remembered at most (the cache is cleared when full).
const MAX_USERS: usize = 4096;

/// Per user: when their groups were asked, and the answer.
type Answers = HashMap<String, (Instant, Vec<String>)>;

static CACHE: Mutex<Option<Answers>> = Mutex::new(None);

/// The groups of `user`, by name, sorted.
pub async fn of(user: &str) -> Vec<String> {
    if let Ok(cache) = CACHE.lock()
        && let Some((at, groups)) = cache.as_ref().and_then(|c| c.get(user))
        && at.elapsed() < TTL
    {
        return groups.clone();
    }
    let groups = ask(user).await;
    if let Ok(mut cache) = CACHE.lock() {
        let c = cache.get_or_insert_with(HashMap::new);
        if c.len() >= MAX_USERS {
            c.clear();
        }
        c.insert(user.to_string(), (Instant::now(), groups.clone()));
    }
    groups
}

async fn ask(user: &str) -> Vec<String> {
    let mut cmd = tokio::process::Command::new("id");
    cmd.arg("-Gn").arg("--").arg(user).kill_on_drop(true);
    cmd.stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    match tokio::time::timeout(PATIENCE, cmd.output()).await {
        Ok(Ok(out)) if out.status.success() => {
            let mut g: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_string)
                .collect();
            g.sort();
            g.dedup();
            g
        }
        Ok(Ok(_)) => Vec::new(),
        Ok(Err(e)) => {
            tracing::warn!(user, "cannot ask for the groups of a submitter (`id -Gn`): {e}");
            Vec::new()
        }
        Err(_) => {
            tracing::warn!(user, "`id -Gn` took more than {PATIENCE:?}; no groups");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn root_is_in_its_group_and_an_unknown_user_in_none() {
        assert!(of("root").await.iter().any(|g| g == "root"));
        assert!(of("no-such-user-hyperplan").await.is_empty());
    }
}
