//! `[store]` in planner.toml: where the state lives and how long ended jobs are kept.

use std::path::PathBuf;
use std::time::Duration;

use hyperplan_core::config::ConfigError;
use serde::Deserialize;

/// The default store file (the unit's `StateDirectory=hyperplan`).
pub const DEFAULT_PATH: &str = "/var/lib/hyperplan/state.redb";

/// How long ended jobs are kept by default: 7 days.
pub const DEFAULT_KEEP_FINISHED: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Clone, Debug, PartialEq)]
pub struct StoreConfig {
    /// `path`: the embedded store's file (redb).
    pub path: PathBuf,
    /// `keepFinished` (seconds): ended jobs older than this are deleted.
    pub keep_finished: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            path: PathBuf::from(DEFAULT_PATH),
            keep_finished: DEFAULT_KEEP_FINISHED,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawStore {
    backend: Option<toml::Spanned<String>>,
    path: Option<String>,
    keep_finished: Option<toml::Spanned<f64>>,
}

/// Checks `[store]`; `at` turns an offset and a message into an error naming the line.
pub fn store_config(
    raw: Option<RawStore>,
    at: &dyn Fn(usize, String) -> ConfigError,
) -> Result<StoreConfig, ConfigError> {
    let mut store = StoreConfig::default();
    let Some(s) = raw else { return Ok(store) };
    if let Some(b) = s.backend
        && b.get_ref() != "embedded"
    {
        return Err(at(
            b.span().start,
            format!(
                "store.backend: expected \"embedded\" (the etcd backend is not built yet), got {:?}",
                b.get_ref()
            ),
        ));
    }
    if let Some(p) = s.path {
        if p.is_empty() {
            return Err(at(0, "store.path: expected a file path, got an empty string".into()));
        }
        store.path = p.into();
    }
    if let Some(k) = s.keep_finished {
        let v = *k.get_ref();
        store.keep_finished = crate::config::seconds(v).ok_or_else(|| {
            at(
                k.span().start,
                format!("store.keepFinished: expected seconds > 0 (604800 is 7 days), got {v}"),
            )
        })?;
    }
    Ok(store)
}
