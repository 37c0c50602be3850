//! The one libc call the snapshot cache needs that std (at this crate's
//! minimum Rust) does not offer: `flock(2)`, which serialises refreshes
//! across processes and is released by the kernel when a holder dies.

use std::os::fd::AsRawFd;

/// Takes the exclusive lock on `file` without waiting: Ok(false) when
/// another open file description holds it.
pub fn try_lock_exclusive(file: &std::fs::File) -> std::io::Result<bool> {
    loop {
        // SAFETY: the descriptor is open for the call's duration (borrowed
        // from `file`); flock takes no pointers.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_open_file_cannot_take_the_lock_until_the_first_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let a = std::fs::File::create(&path).unwrap();
        let b = std::fs::File::open(&path).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap());
        drop(a);
        assert!(try_lock_exclusive(&b).unwrap());
    }
}
