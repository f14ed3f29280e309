//! The planner epoch this node has seen. Every planner start (and, with standbys, every
//! new leader) raises the epoch, and every `Registered`, `Launch` and `Kill` carries it:
//! orders from an older epoch come from a planner that has been replaced since (a
//! restarted one, or a deposed leader still talking) and are refused. Kept in
//! `STATE/epoch` (written atomically), so a restarted agent does not forget it.

use std::path::{Path, PathBuf};

use crate::shepherd::layout::write_atomic;

#[derive(Debug)]
pub struct Epoch {
    path: PathBuf,
    highest: u64,
}

impl Epoch {
    /// The epoch kept in `state_dir`; 0 when there is none (or it cannot be read: then
    /// the next planner's epoch is taken as it comes).
    pub fn load(state_dir: &Path) -> Self {
        let path = state_dir.join("epoch");
        // At most 32 bytes read: a number, whatever the file holds.
        let read = std::fs::File::open(&path).and_then(|f| {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(f, 32), &mut bytes).map(|_| bytes)
        });
        let highest = match read {
            Ok(bytes) => String::from_utf8_lossy(&bytes).trim().parse().unwrap_or_else(|_| {
                tracing::warn!(path = %path.display(), "the planner epoch file is not a number; starting from 0");
                0
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot read the planner epoch: {e}; starting from 0");
                0
            }
        };
        Self { path, highest }
    }

    pub fn highest(&self) -> u64 {
        self.highest
    }

    /// Whether orders of `epoch` may be carried out; a newer epoch is remembered (on disk
    /// before this returns, so no restart takes an older planner's orders again).
    pub fn admit(&mut self, epoch: u64) -> bool {
        if epoch < self.highest {
            return false;
        }
        if epoch > self.highest {
            self.highest = epoch;
            if let Err(e) = write_atomic(&self.path, format!("{epoch}\n").as_bytes()) {
                tracing::warn!(path = %self.path.display(), "cannot keep the planner epoch: {e}");
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn older_epochs_are_refused_and_the_highest_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = Epoch::load(dir.path());
        assert_eq!(e.highest(), 0);
        assert!(e.admit(3));
        assert!(e.admit(3));
        assert!(!e.admit(2));
        let mut again = Epoch::load(dir.path());
        assert_eq!(again.highest(), 3);
        assert!(!again.admit(1));
        assert!(again.admit(4));
        std::fs::write(dir.path().join("epoch"), "garbage").unwrap();
        assert_eq!(Epoch::load(dir.path()).highest(), 0);
        std::fs::write(dir.path().join("epoch"), "7".repeat(1 << 20)).unwrap();
        assert_eq!(Epoch::load(dir.path()).highest(), 0, "a huge file is read 32 bytes far");
    }
}
