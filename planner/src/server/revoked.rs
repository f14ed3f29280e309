//! Revoked certificates (`revoked.txt` beside `ca.pem`, see `hyperplan_net::revocation`):
//! the list is read when the planner starts and again on every reload (SIGHUP), shared
//! with the connections through a watch channel. The handshake refuses a revoked peer;
//! every open connection watches the channel and is closed when a new list revokes it.
//! A list that cannot be read on reload is an error in the log and the old list stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyperplan_net::identity::Identity;
use hyperplan_net::revocation::{RevocationError, RevocationList, Revoked};
use tokio::sync::watch;

/// The list as every connection sees it.
pub type Shared = watch::Receiver<Arc<RevocationList>>;

/// Reads the list at start: an error stops the planner.
pub fn load(path: &Path) -> Result<RevocationList, RevocationError> {
    let list = RevocationList::load(path)?;
    loaded(path, &list);
    Ok(list)
}

fn loaded(path: &Path, list: &RevocationList) {
    tracing::info!(path = %path.display(), entries = list.len(), "revocation list loaded");
}

/// Reads the list again on every reload and hands it to the connections; on an error
/// the previous list stays.
pub fn spawn_reloader(mut reload: watch::Receiver<u64>, path: PathBuf, list: watch::Sender<Arc<RevocationList>>) {
    tokio::spawn(async move {
        while reload.changed().await.is_ok() {
            let p = path.clone();
            match tokio::task::spawn_blocking(move || RevocationList::load(&p)).await {
                Ok(Ok(new)) => {
                    loaded(&path, &new);
                    list.send_replace(Arc::new(new));
                }
                Ok(Err(e)) => {
                    let kept = list.borrow().len();
                    tracing::error!("revocation list not reloaded, keeping the previous one ({kept} entries): {e}");
                }
                Err(e) => tracing::error!("revocation list not reloaded, keeping the previous one: {e}"),
            }
        }
    });
}

/// Whether the list as it is now revokes the peer (and marks this version seen).
pub fn check(list: &mut Shared, identity: &Identity, issued: Option<i64>) -> Option<Revoked> {
    list.borrow_and_update().check(identity, issued)
}

/// Completes when a newer list revokes the peer; never when the planner keeps none.
pub async fn until_revoked(list: &mut Shared, identity: &Identity, issued: Option<i64>) -> Revoked {
    loop {
        if list.changed().await.is_err() {
            return std::future::pending().await;
        }
        if let Some(revoked) = check(list, identity, issued) {
            return revoked;
        }
    }
}
