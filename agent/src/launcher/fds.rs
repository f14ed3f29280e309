//! Descriptors across a Unix socket (`SCM_RIGHTS`) and who is on its other end
//! (`SO_PEERCRED`): how the agent hands the launcher a task's log file and PMI socket, and
//! how the launcher knows it is root asking. std has neither on stable Rust.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// The most descriptors one message carries (a step's standard input, output and error).
pub const MAX_FDS: usize = 3;

/// Control buffer for [`MAX_FDS`] descriptors, aligned for `cmsghdr` (u64 words).
fn control_buffer() -> Vec<u64> {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    vec![0u64; space.div_ceil(8)]
}

/// Sends `bytes` with `fds` attached, in one `sendmsg`; how many bytes went.
pub fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors"));
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut control = control_buffer();
    // SAFETY: an all-zero msghdr is valid (no buffers); fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_len = std::mem::size_of_val(fds) as u32;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size (within `control`, see control_buffer).
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as _;
        // SAFETY: msg_control points at a zeroed, aligned buffer of msg_controllen bytes,
        // large enough for one header and `fds`; CMSG_FIRSTHDR/CMSG_DATA stay inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast::<RawFd>(), fds.len());
        }
    }
    // SAFETY: `msg` points at `iov` and `control`, both alive for the call; no SIGPIPE.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// Receives into `buf`, with the descriptors that came with it (close-on-exec). More
/// descriptors than [`MAX_FDS`] (the kernel truncates them) is an error, and those that
/// came are closed.
pub fn recv_with_fds(stream: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = control_buffer();
    // SAFETY: an all-zero msghdr is valid; fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = (control.len() * 8) as _;
    // SAFETY: `msg` points at `buf` and `control`, both alive and writable for the call.
    let got = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control up to msg_controllen; CMSG_FIRSTHDR/NXTHDR
    // walk only within it, and each SCM_RIGHTS payload holds whole descriptors it gave us.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let payload = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..payload / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than {MAX_FDS} descriptors sent"),
        ));
    }
    Ok((got as usize, fds))
}

/// The uid and pid of the process on the other end of `stream`, as the kernel saw it
/// connect.
pub fn peer(stream: &UnixStream) -> io::Result<(u32, i32)> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a ucred of `len` bytes, written by the kernel.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.uid, cred.pid))
}

/// Clears close-on-exec on `fd` (in a child between fork and exec: async-signal-safe).
pub fn keep_on_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an integer descriptor touches no memory.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn descriptors_cross_a_socket_and_work_on_the_other_side() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut mine, theirs) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        send_with_fds(&a, b"hello\n", &[file.as_raw_fd(), theirs.as_raw_fd()]).unwrap();
        drop((file, theirs));
        let mut buf = [0u8; 64];
        let (n, fds) = recv_with_fds(&b, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello\n");
        assert_eq!(fds.len(), 2);
        // Close-on-exec, as every descriptor the launcher holds.
        // SAFETY: a plain query on a descriptor we own.
        let flags = unsafe { libc::fcntl(fds[0].as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        let mut fds = fds.into_iter();
        let mut file = std::fs::File::from(fds.next().unwrap());
        file.write_all(b"log line").unwrap();
        let mut passed = UnixStream::from(fds.next().unwrap());
        passed.write_all(b"pmi").unwrap();
        let mut got = [0u8; 3];
        mine.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pmi");
        // No descriptors: none come.
        send_with_fds(&a, b"x", &[]).unwrap();
        let (n, fds) = recv_with_fds(&b, &mut buf).unwrap();
        assert_eq!((n, fds.len()), (1, 0));
        assert!(send_with_fds(&a, b"x", &[0, 1, 2, 0]).is_err());
    }

    #[test]
    fn the_peer_is_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let (uid, pid) = peer(&a).unwrap();
        // SAFETY: getuid cannot fail.
        assert_eq!(uid, unsafe { libc::getuid() });
        assert_eq!(pid as u32, std::process::id());
    }
}
