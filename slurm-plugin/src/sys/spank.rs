//! The SPANK handle SLURM passes to every callback, its safe methods, and the
//! entry points the export macro beside the plugin trait calls (each
//! catches unwinds and logs errors through SLURM). This module knows
//! nothing of the trait.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::cstr::{cstring, log, panic_text, read_array, read_cstr, spank_log, Level};
use crate::ffi;

/// Where the plugin runs (`spank_context()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// srun, on the submit host.
    Local,
    /// slurmstepd, on the node, around the job's tasks.
    Remote,
    /// sbatch or salloc, on the submit host.
    Allocator,
    /// slurmd itself.
    Slurmd,
    /// The job prolog/epilog on the node.
    JobScript,
    /// SLURM could not tell.
    Error,
}

/// A callback's failure; logged through SLURM by the dispatcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpankError(String);

impl SpankError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> SpankError {
        SpankError(message.into())
    }
    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SpankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpankError {}

impl From<String> for SpankError {
    fn from(s: String) -> Self {
        SpankError(s)
    }
}

/// One command-line option of srun/sbatch/salloc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpankOption {
    /// Long option name, without `--`.
    pub name: &'static str,
    /// One word naming the argument; `None` for a flag.
    pub arginfo: Option<&'static str>,
    /// The `--help` text.
    pub usage: &'static str,
}

/// A SPANK handle, valid for the duration of one callback.
pub struct Spank {
    raw: ffi::spank_t,
}

fn check(rc: ffi::spank_err_t, what: &str) -> Result<(), SpankError> {
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: spank_strerror returns a static string for any code.
    let text = unsafe { read_cstr(ffi::spank_strerror(rc)) }.unwrap_or_default();
    Err(SpankError::new(format!("{what}: {text}")))
}

impl Spank {
    /// The context this process runs the plugin in.
    pub fn context(&self) -> Context {
        // SAFETY: spank_context takes no arguments and reads process state.
        match unsafe { ffi::spank_context() } {
            ffi::spank_context::S_CTX_LOCAL => Context::Local,
            ffi::spank_context::S_CTX_REMOTE => Context::Remote,
            ffi::spank_context::S_CTX_ALLOCATOR => Context::Allocator,
            ffi::spank_context::S_CTX_SLURMD => Context::Slurmd,
            ffi::spank_context::S_CTX_JOB_SCRIPT => Context::JobScript,
            ffi::spank_context::S_CTX_ERROR => Context::Error,
        }
    }

    fn get_u32(&self, item: ffi::spank_item, what: &str) -> Result<u32, SpankError> {
        let mut v: u32 = 0;
        // SAFETY: for S_JOB_ID, S_JOB_STEPID and S_JOB_UID spank_get_item
        // writes one uint32_t (uid_t is 32 bits on Linux) through the pointer.
        let rc = unsafe { ffi::spank_get_item(self.raw, item, &mut v as *mut u32) };
        check(rc, what)?;
        Ok(v)
    }

    /// The job id.
    pub fn job_id(&self) -> Result<u32, SpankError> {
        self.get_u32(ffi::spank_item::S_JOB_ID, "job id")
    }

    /// The step id (`SLURM_BATCH_SCRIPT` for the batch step).
    pub fn step_id(&self) -> Result<u32, SpankError> {
        self.get_u32(ffi::spank_item::S_JOB_STEPID, "step id")
    }

    /// The uid the job runs as.
    pub fn job_uid(&self) -> Result<u32, SpankError> {
        self.get_u32(ffi::spank_item::S_JOB_UID, "job uid")
    }

    /// A variable of the job's environment (remote context).
    pub fn getenv(&self, name: &str) -> Option<String> {
        let name = cstring(name);
        let mut buf = vec![0u8; 4096];
        // SAFETY: buf is writable for its length, which is passed; the
        // function NUL-terminates within it or reports ESPANK_NOSPACE.
        let rc = unsafe { ffi::spank_getenv(self.raw, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len() as c_int) };
        if rc != 0 {
            return None;
        }
        CStr::from_bytes_until_nul(&buf).ok().map(|c| c.to_string_lossy().into_owned())
    }

    /// Sets a variable in the job's environment (remote context).
    pub fn setenv(&self, name: &str, value: &str) -> Result<(), SpankError> {
        let (n, v) = (cstring(name), cstring(value));
        // SAFETY: both are valid C strings; SLURM copies them.
        let rc = unsafe { ffi::spank_setenv(self.raw, n.as_ptr(), v.as_ptr(), 1) };
        check(rc, &format!("setting {name}"))
    }

    /// Sets a job-control variable (local and allocator contexts); the
    /// controller and the prolog/epilog see it as `SPANK_<name>`.
    pub fn job_control_setenv(&self, name: &str, value: &str) -> Result<(), SpankError> {
        let (n, v) = (cstring(name), cstring(value));
        // SAFETY: both are valid C strings; SLURM copies them.
        let rc = unsafe { ffi::spank_job_control_setenv(self.raw, n.as_ptr(), v.as_ptr(), 1) };
        check(rc, &format!("setting job control variable {name}"))
    }

    /// Registers option number `val` of the plugin (from `slurm_spank_init`).
    /// SLURM keeps the pointer to the option table for the life of the
    /// process, so the table and its strings are leaked on purpose.
    pub fn register_option(&self, option: &SpankOption, val: c_int, cb: ffi::spank_opt_cb_f) -> Result<(), SpankError> {
        let leak = |s: &str| cstring(s).into_raw();
        let raw = Box::leak(Box::new(ffi::spank_option {
            name: leak(option.name),
            arginfo: option.arginfo.map(leak).unwrap_or(std::ptr::null_mut()),
            usage: leak(option.usage),
            has_arg: c_int::from(option.arginfo.is_some()),
            val,
            cb,
        }));
        // SAFETY: `raw` and its strings live for the rest of the process.
        let rc = unsafe { ffi::spank_option_register(self.raw, raw) };
        check(rc, &format!("registering --{}", option.name))
    }
}

/// Runs one SPANK callback: `run` gets the handle and the plugstack
/// arguments; no unwind leaves it, and an error is logged through SLURM
/// (as `plugin: symbol: error`) and returned as -1.
///
/// SAFETY (callers): `sp`, `ac` and `av` are what SLURM passed to the
/// exported `slurm_spank_*` function `symbol`.
#[doc(hidden)]
pub unsafe fn enter(
    plugin: &str,
    symbol: &str,
    sp: ffi::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
    run: impl FnOnce(&Spank, &[String]) -> Result<(), SpankError>,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let spank = Spank { raw: sp };
        // SAFETY: `av` holds `ac` valid C strings (SLURM's plugstack args).
        let args = unsafe { read_array(av, usize::try_from(ac).unwrap_or(0)) };
        run(&spank, &args)
    }));
    match outcome {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            log(Level::Error, &format!("{plugin}: {symbol}: {e}"));
            -1
        }
        Err(p) => {
            log(Level::Error, &format!("{plugin}: {symbol}: internal error: {}", panic_text(&*p)));
            -1
        }
    }
}

/// Runs an option callback: `run` gets the option's value; no unwind
/// leaves it, and an error goes to the user (`slurm_spank_log`) and is
/// returned as -1.
///
/// SAFETY (callers): `optarg` is null or a valid C string.
#[doc(hidden)]
pub unsafe fn enter_option(
    plugin: &str,
    optarg: *const c_char,
    run: impl FnOnce(Option<&str>) -> Result<(), SpankError>,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded contract.
        let value = unsafe { read_cstr(optarg) };
        run(value.as_deref())
    }));
    match outcome {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            spank_log(&format!("{plugin}: {e}"));
            -1
        }
        Err(p) => {
            log(Level::Error, &format!("{plugin}: option callback: internal error: {}", panic_text(&*p)));
            -1
        }
    }
}
