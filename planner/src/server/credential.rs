//! A job's credential: 32 random bytes from the kernel, in hex, made at submit and kept
//! with the job (in its spec, so the store keeps it across restarts and failovers). Its
//! tasks get it as `HYPERPLAN_CREDENTIAL`; with it, and only while the job runs, they
//! run commands in the job (`hyperplan exec`, what `mpirun` in a batch script does).

use std::io::Read;

/// A new credential.
pub fn new() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn credentials_are_long_and_differ() {
        let (a, b) = (super::new().unwrap(), super::new().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
