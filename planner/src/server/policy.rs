//! SIGHUP reads planner.toml again for its policy: `[[queue]]`, `[fairshare]`,
//! `[priority]`, `[scheduler]` and `[[reservation]]` go to the core (which refuses a
//! reload that drops a queue still in use); a file that does not read keeps the old
//! policy, and the log says why, naming the file, line and key. Other sections take
//! effect at the next start.

use std::path::PathBuf;

use tokio::sync::{mpsc, watch};

use super::inbox::ToCore;
use crate::config::DaemonConfig;

/// Reads `path` again on every reload and hands the policy to the driver.
pub fn spawn_reloader(mut reload: watch::Receiver<u64>, path: PathBuf, to_core: mpsc::UnboundedSender<ToCore>) {
    tokio::spawn(async move {
        while reload.changed().await.is_ok() {
            let p = path.clone();
            match tokio::task::spawn_blocking(move || DaemonConfig::load(&p)).await {
                Ok(Ok(config)) => {
                    if to_core.send(ToCore::Policy(Box::new(config.planner))).is_err() {
                        return;
                    }
                }
                Ok(Err(e)) => tracing::error!("policy not reloaded, keeping the old queues: {e}"),
                Err(e) => tracing::error!("policy not reloaded, keeping the old queues: {e}"),
            }
        }
    });
}
