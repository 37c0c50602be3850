//! C strings both ways and SLURM's logger: what every other `sys` module
//! builds on.

use std::ffi::{c_char, CStr, CString};

use crate::ffi;

/// `s` as a C string.
pub(crate) fn cstring(s: &str) -> CString {
    // SLURM strings are C strings: an interior NUL would cut the text short.
    CString::new(s.replace('\0', "\u{fffd}")).expect("NULs were replaced")
}

/// Log levels of SLURM's own logger (the daemon's log file, or the user's
/// terminal for srun/sbatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `error()`.
    Error,
    /// `info()`.
    Info,
    /// `verbose()`.
    Verbose,
    /// `debug()`.
    Debug,
}

/// Logs one line through SLURM.
pub fn log(level: Level, msg: &str) {
    let msg = cstring(msg);
    // SAFETY: the format is a literal "%s" taking exactly one C string, and
    // `msg` is a valid NUL-terminated string that outlives the call.
    unsafe {
        match level {
            Level::Error => ffi::slurm_error(c"%s".as_ptr(), msg.as_ptr()),
            Level::Info => ffi::slurm_info(c"%s".as_ptr(), msg.as_ptr()),
            Level::Verbose => ffi::slurm_verbose(c"%s".as_ptr(), msg.as_ptr()),
            Level::Debug => ffi::slurm_debug(c"%s".as_ptr(), msg.as_ptr()),
        }
    }
}

/// `slurm_spank_log`: error level without the "error: " prefix, which srun
/// shows to the user.
pub fn spank_log(msg: &str) {
    let msg = cstring(msg);
    // SAFETY: as in `log`: literal "%s" and one valid C string.
    unsafe { ffi::slurm_spank_log(c"%s".as_ptr(), msg.as_ptr()) }
}

/// A copy of `s` in memory from SLURM's allocator (`xstrdup`), which SLURM
/// frees with `xfree` when it is done with it.
pub(crate) fn xstrdup(s: &str) -> *mut c_char {
    let s = cstring(s);
    // SAFETY: `s` is a valid C string; xstrdup copies it and returns memory
    // SLURM owns from then on.
    unsafe { ffi::slurm_xstrdup(s.as_ptr()) }
}

/// Reads a C string SLURM owns, lossily.
///
/// SAFETY (callers): `p` is null or a valid NUL-terminated string.
pub(crate) unsafe fn read_cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// Reads a C array of `n` strings.
///
/// SAFETY (callers): `array` is null or points to `n` valid string pointers.
pub(crate) unsafe fn read_array(array: *const *mut c_char, n: usize) -> Vec<String> {
    if array.is_null() {
        return Vec::new();
    }
    // SAFETY: `array` holds `n` pointers, each null or a C string.
    (0..n).filter_map(|i| unsafe { read_cstr(*array.add(i)) }).collect()
}

/// The text of a caught panic.
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}
