//! The few libc calls std does not offer: the peer's credentials of a Unix
//! socket (SO_PEERCRED), user-name lookup through NSS, and waiting for
//! SIGTERM synchronously.

use std::ffi::{CStr, CString};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// Who is on the other end of a Unix socket, as the kernel says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// The credentials of the process that connected `stream`.
pub fn peer_cred(stream: &UnixStream) -> std::io::Result<PeerCred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is a live socket owned by `stream`; `cred` and `len` are
    // valid for writes and `len` holds the size of `cred`, as getsockopt requires.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PeerCred { pid: cred.pid, uid: cred.uid, gid: cred.gid })
}

/// The uid of user `name` (files, LDAP, whatever NSS is configured with),
/// or None when there is no such user.
pub fn uid_of_user(name: &str) -> std::io::Result<Option<u32>> {
    let c_name = CString::new(name).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "user name contains NUL"))?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: an all-zero passwd is a valid value for a plain C struct of
        // integers and pointers; getpwnam_r fills it in.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: the NUL-terminated
        // name, the passwd to fill, the scratch buffer with its true length,
        // and the out-pointer. The strings in `pwd` point into `buf`, which
        // outlives their only use below.
        let rc = unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut result) };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        if result.is_null() {
            return Ok(None);
        }
        // SAFETY: result is non-null, so pw_name points at a NUL-terminated
        // string inside `buf`.
        let found = unsafe { CStr::from_ptr(pwd.pw_name) };
        debug_assert_eq!(found.to_bytes(), name.as_bytes());
        return Ok(Some(pwd.pw_uid));
    }
}

/// Blocks SIGTERM and SIGINT in the calling thread and every thread it
/// starts afterwards, so that [`wait_for_termination`] can take them
/// synchronously. Call it first thing in `main`.
pub fn block_termination_signals() -> std::io::Result<()> {
    let set = termination_set();
    // SAFETY: `set` is an initialised sigset_t; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits until SIGTERM or SIGINT arrives (they must be blocked, see
/// [`block_termination_signals`]) and returns its number.
pub fn wait_for_termination() -> std::io::Result<i32> {
    let set = termination_set();
    let mut signal: libc::c_int = 0;
    // SAFETY: `set` is initialised and `signal` is valid for a write.
    let rc = unsafe { libc::sigwait(&set, &mut signal) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(signal)
}

fn termination_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the zeroed set; sigaddset adds valid
    // signal numbers to it. Neither can fail with these arguments.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_cred_is_our_own() {
        let (a, _b) = UnixStream::pair().unwrap();
        let cred = peer_cred(&a).unwrap();
        assert_eq!(cred.pid as u32, std::process::id());
        assert_eq!(cred.uid, std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap());
    }

    #[test]
    fn looks_up_root() {
        assert_eq!(uid_of_user("root").unwrap(), Some(0));
        assert_eq!(uid_of_user("no-such-user-cder-test").unwrap(), None);
    }
}
