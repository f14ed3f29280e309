//! Who the task runs as: the user's uid, primary gid and every group it belongs to, looked
//! up on this node (`getpwnam_r`, `getgrouplist`: NSS, so LDAP/SSSD users count) before the
//! shepherd forks, because nothing after the fork may read `/etc/group`.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};

/// A user as this node knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one included), for `setgroups`.
    pub groups: Vec<u32>,
    /// The passwd entry's home directory and login shell (the task's `HOME`, `SHELL`).
    pub home: String,
    pub shell: String,
}

/// Why a user cannot be looked up. The messages go into the exit record.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("user {0:?} is unknown on this node")]
    Unknown(String),
    #[error("looking up user {name:?} failed: {source}")]
    Lookup {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// Looks `name` up with `getpwnam_r` and its groups with `getgrouplist`.
pub fn lookup(name: &str) -> Result<Identity, UserError> {
    let cname = CString::new(name).map_err(|_| UserError::Unknown(name.to_string()))?;
    let lookup_err = |source| UserError::Lookup {
        name: name.to_string(),
        source,
    };
    let mut buf: Vec<libc::c_char> = vec![0; 16 * 1024];
    let (uid, gid, home, shell) = loop {
        // SAFETY: an all-zero `passwd` is a valid value (null pointers, zero ids); it is
        // only read after getpwnam_r filled it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `cname` is NUL-terminated, `pwd`
        // and `result` are live locals, `buf` is writable for `buf.len()` bytes.
        let rc = unsafe { libc::getpwnam_r(cname.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 {
            return Err(lookup_err(std::io::Error::from_raw_os_error(rc)));
        }
        if result.is_null() {
            return Err(UserError::Unknown(name.to_string()));
        }
        // SAFETY: getpwnam_r succeeded, so the non-null string fields point into `buf`,
        // NUL-terminated, and `buf` outlives these reads.
        let text = |p: *const libc::c_char| {
            if p.is_null() {
                String::new()
            } else {
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        break (pwd.pw_uid, pwd.pw_gid, text(pwd.pw_dir), text(pwd.pw_shell));
    };
    let groups = group_list(&cname, gid).map_err(lookup_err)?;
    Ok(Identity {
        name: name.to_string(),
        uid,
        gid,
        groups,
        home,
        shell,
    })
}

/// The name of group `gid` (`getgrgid_r`), None when it has none here.
pub fn group_name(gid: u32) -> Option<String> {
    let mut buf: Vec<libc::c_char> = vec![0; 16 * 1024];
    loop {
        // SAFETY: an all-zero `group` is a valid value; it is only read after
        // getgrgid_r filled it.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `grp` and `result` are live locals, `buf` is writable for its length.
        let rc = unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut result) };
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || result.is_null() || grp.gr_name.is_null() {
            return None;
        }
        // SAFETY: getgrgid_r succeeded: `gr_name` points into `buf`, NUL-terminated.
        return Some(unsafe { CStr::from_ptr(grp.gr_name) }.to_string_lossy().into_owned());
    }
}

fn group_list(name: &CStr, gid: libc::gid_t) -> std::io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = libc::c_int::try_from(groups.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `name` is NUL-terminated; `groups` has room for `n` entries and `n`
        // is a live local getgrouplist updates.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        let n = usize::try_from(n).unwrap_or(0);
        if rc >= 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        if n <= groups.len() || n > 1 << 20 {
            return Err(std::io::Error::other("getgrouplist failed"));
        }
        groups.resize(n, 0);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn root_is_uid_0_and_strangers_are_unknown() {
        let root = lookup("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
        assert!(root.home.starts_with('/'), "{root:?}");
        assert_eq!(group_name(0).as_deref(), Some("root"));
        let e = lookup("no-such-user-hp").unwrap_err();
        assert_eq!(e.to_string(), "user \"no-such-user-hp\" is unknown on this node");
    }
}
