//! The crate's only unsafe code: looking a user up in the system's user
//! database (files, LDAP, sssd … through NSS), as pbs_mom itself does, and
//! the process's own ids (and giving up the job starter's installed group)
//! and host name.

use std::ffi::{CStr, CString};

/// Why a user could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserError {
    /// The database answered: there is no such user.
    #[error("no user {0:?} in the user database")]
    NotFound(String),
    /// The lookup itself failed (an LDAP server down …): worth a retry.
    #[error("looking up user {name:?} failed: {message}")]
    Lookup {
        /// The user name looked up.
        name: String,
        /// What the lookup reported.
        message: String,
    },
}

/// A user's uid and primary gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    /// The user id.
    pub uid: u32,
    /// The primary group id.
    pub gid: u32,
}

/// `getpwnam_r(3)`: the uid and gid of `name`.
pub fn user_by_name(name: &str) -> Result<UserIds, UserError> {
    let c_name = CString::new(name).map_err(|_| UserError::NotFound(name.to_string()))?;
    let mut buf_len = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; buf_len];
        // SAFETY: `passwd` is plain old data that getpwnam_r fills in; a
        // zeroed value is a valid (if meaningless) instance of it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `c_name` is a
        // NUL-terminated string, `pwd` and `result` are live locals, and
        // `buf` has exactly `buf_len` writable bytes. getpwnam_r is the
        // reentrant variant, safe to call from any thread.
        let rc = unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf_len, &mut result) };
        if rc == libc::ERANGE && buf_len < 1 << 20 {
            buf_len *= 4;
            continue;
        }
        if rc != 0 {
            // SAFETY: strerror returns a pointer to a NUL-terminated static
            // (or thread-local) message, read at once and copied.
            let message = unsafe { CStr::from_ptr(libc::strerror(rc)) }.to_string_lossy().into_owned();
            return Err(UserError::Lookup { name: name.to_string(), message });
        }
        if result.is_null() {
            return Err(UserError::NotFound(name.to_string()));
        }
        return Ok(UserIds { uid: pwd.pw_uid, gid: pwd.pw_gid });
    }
}

/// The real uid of this process.
pub fn current_uid() -> u32 {
    // SAFETY: getuid takes no arguments, cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

/// The effective uid of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Gives up the group the job starter is installed set-group-ID to (that
/// mode only buys the loader's secure-execution mode): real, effective and
/// saved gid all become the real gid, and are checked to be so.
pub fn drop_borrowed_group() -> Result<(), String> {
    // SAFETY: getgid takes no arguments, cannot fail and touches no memory.
    let gid = unsafe { libc::getgid() };
    // SAFETY: setresgid takes plain integers and touches no memory; an
    // unprivileged process may set each of its gids to its real gid.
    if unsafe { libc::setresgid(gid, gid, gid) } != 0 {
        return Err(format!(
            "cannot drop the installed group (setresgid to gid {gid}): {}",
            std::io::Error::last_os_error()
        ));
    }
    let (mut real, mut effective, mut saved) = (0, 0, 0);
    // SAFETY: the three pointers are live, writable locals of type gid_t.
    if unsafe { libc::getresgid(&mut real, &mut effective, &mut saved) } != 0 {
        return Err(format!("cannot read back its gids (getresgid): {}", std::io::Error::last_os_error()));
    }
    if (real, effective, saved) != (gid, gid, gid) {
        return Err(format!(
            "the installed group was not dropped: gids real {real}, effective {effective}, saved {saved}"
        ));
    }
    Ok(())
}

/// Whether the loader ran this process in secure-execution mode
/// (`AT_SECURE`: set-ID, so `LD_PRELOAD` and the like were not honoured).
pub fn secure_execution() -> bool {
    // SAFETY: getauxval reads the process's auxiliary vector; it takes an
    // integer, touches no caller memory and returns 0 for a missing entry.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Lets this process's `/proc/self` files be read by its own user again
/// (`PR_SET_DUMPABLE`), which a set-group-ID start turns off until exec.
pub fn make_dumpable() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_DUMPABLE takes integers only and touches no memory.
    if unsafe {
        libc::prctl(
            libc::PR_SET_DUMPABLE,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// This host's name (`gethostname(2)`), as pbs_mom names its node by default.
pub fn hostname() -> std::io::Result<String> {
    let mut buf = vec![0u8; 256];
    // SAFETY: `buf` has `buf.len()` writable bytes; gethostname writes at
    // most that many and NUL-terminates when the name fits.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_missing_users() {
        assert_eq!(user_by_name("root").unwrap().uid, 0);
        assert!(matches!(user_by_name("no-such-user-cder-test"), Err(UserError::NotFound(_))));
        assert!(matches!(user_by_name("nul\0byte"), Err(UserError::NotFound(_))));
        assert!(!hostname().unwrap().is_empty());
    }
}
