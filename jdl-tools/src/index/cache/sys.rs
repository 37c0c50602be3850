//! The libc calls the snapshot cache needs that std (at this crate's
//! minimum Rust) does not offer: an open-file-description write lock
//! (`fcntl(F_OFD_SETLK)`), which serialises refreshes across processes, is
//! released by the kernel when its holder dies, and (unlike `flock`) can be
//! taken only through a descriptor open for writing; and `geteuid`.

use std::os::fd::AsRawFd;

/// Takes the write lock on the whole of `file` (open for writing) without
/// waiting: Ok(false) when another open file description holds a lock on it.
pub fn try_lock_exclusive(file: &std::fs::File) -> std::io::Result<bool> {
    // SAFETY: a plain C struct; all-zero is a valid value (l_pid must be 0
    // for an OFD lock).
    let mut whole: libc::flock = unsafe { std::mem::zeroed() };
    whole.l_type = libc::F_WRLCK as libc::c_short;
    whole.l_whence = libc::SEEK_SET as libc::c_short;
    loop {
        // SAFETY: the descriptor is open for the call's duration (borrowed
        // from `file`); `whole` outlives the call.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &whole) };
        if rc == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN | libc::EACCES) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

/// This process's effective uid.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_open_file_cannot_take_the_lock_until_the_first_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let a = std::fs::File::create(&path).unwrap();
        let b = std::fs::File::options().write(true).open(&path).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap());
        drop(a);
        assert!(try_lock_exclusive(&b).unwrap());
    }

    #[test]
    fn a_read_only_descriptor_cannot_take_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        std::fs::write(&path, b"").unwrap();
        let reader = std::fs::File::open(&path).unwrap();
        assert_eq!(try_lock_exclusive(&reader).unwrap_err().raw_os_error(), Some(libc::EBADF));
    }
}
