//! What the store keeps of fair share: every (queue, user)'s decayed usage at one moment,
//! by name (indices change with a reload or a restart), and every (account, user)
//! association's for Fair Tree; with `[scheduler] estimates = "history"`, the last two
//! runtimes of each user who has usage. One record, rewritten whole.

use serde::{Deserialize, Serialize};

use super::record::{RecordError, decode_framed, encode_framed};

/// Decayed usage per queue and user, as of `at`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRecord {
    /// When (Unix seconds) the figures were worked out.
    pub at: u64,
    /// One row per (queue, user) with usage.
    pub rows: Vec<UsageRow>,
    /// One row per (account, user) association with usage (`[[account]]` configured;
    /// absent from records written before associations were kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub associations: Vec<AssociationRow>,
    /// Each user's last two runtimes, for backfill's estimates (written under `[scheduler]
    /// estimates = "history"` only; absent from records written before they were kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<RuntimeRow>,
}

/// One user's last two runtimes (seconds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRow {
    /// The user's name.
    pub user: String,
    /// The last.
    pub last: u64,
    /// The one before, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
}

/// One (queue, user)'s usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// The queue's name.
    pub queue: String,
    /// The user's name.
    pub user: String,
    /// Weighted resource-seconds, decayed to `at`.
    pub usage: f64,
}

/// One (account, user) association's usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssociationRow {
    /// The account's name.
    pub account: String,
    /// The user's name.
    pub user: String,
    /// Weighted resource-seconds, decayed to `at`.
    pub usage: f64,
}

impl UsageRecord {
    /// Framed and checksummed, as job records are.
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        encode_framed(self)
    }

    /// Read back; a damaged record is an error.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        decode_framed(bytes)
    }
}
