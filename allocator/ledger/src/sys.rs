//! The calls the ledger needs that std and rusqlite's safe API do not
//! offer: user-name lookup through NSS (`getpwnam_r`), for operator names
//! in a config, and the OS error behind SQLite's last I/O failure.

use std::ffi::{CStr, CString};

/// The uid of user `name` (files, LDAP, whatever NSS is configured with),
/// or None when there is no such user.
pub fn uid_of_user(name: &str) -> std::io::Result<Option<u32>> {
    let c_name = CString::new(name)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "user name contains NUL"))?;
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
        let rc =
            unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut result) };
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

/// The `errno` SQLite saw at the last I/O error on `conn`
/// (`sqlite3_system_errno`; 0 when none): SQLite reports ENOSPC as
/// `SQLITE_FULL` but every other write failure, EDQUOT included, only as
/// `SQLITE_IOERR`.
pub fn sqlite_system_errno(conn: &rusqlite::Connection) -> i32 {
    // SAFETY: `handle` is the live database handle owned by `conn`, which
    // outlives this call; sqlite3_system_errno only reads a field of it.
    unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_up_root() {
        assert_eq!(uid_of_user("root").unwrap(), Some(0));
        assert_eq!(uid_of_user("no-such-user-cder-test").unwrap(), None);
    }
}
