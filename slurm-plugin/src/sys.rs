//! The only unsafe code of the plugins: thin, safe wrappers over the
//! bindgen'd SLURM API, the dispatchers that the export macros call, and the
//! macros themselves. Everything above this module is safe Rust.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Mutex;

use crate::ffi;
use crate::spank::{Callback, Context, Plugin, SpankError};

fn cstring(s: &str) -> CString {
    // SLURM strings are C strings: an interior NUL would cut the text short.
    CString::new(s.replace('\0', "\u{fffd}")).expect("NULs were replaced")
}

/// Log levels of SLURM's own logger (the daemon's log file, or the user's
/// terminal for srun/sbatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Info,
    Verbose,
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
fn xstrdup(s: &str) -> *mut c_char {
    let s = cstring(s);
    // SAFETY: `s` is a valid C string; xstrdup copies it and returns memory
    // SLURM owns from then on.
    unsafe { ffi::slurm_xstrdup(s.as_ptr()) }
}

/// Reads a C string SLURM owns, lossily.
///
/// SAFETY (callers): `p` is null or a valid NUL-terminated string.
unsafe fn read_cstr(p: *const c_char) -> Option<String> {
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
unsafe fn read_array(array: *const *mut c_char, n: usize) -> Vec<String> {
    if array.is_null() {
        return Vec::new();
    }
    // SAFETY: `array` holds `n` pointers, each null or a C string.
    (0..n).filter_map(|i| unsafe { read_cstr(*array.add(i)) }).collect()
}

/// The path of the `slurm.conf` the running daemon read (slurmctld's own
/// configuration), when running inside a SLURM daemon or command.
pub fn slurm_conf_path() -> Option<PathBuf> {
    // SAFETY: `slurm_conf` is libslurmfull's global configuration, filled
    // when the daemon read its configuration, before any plugin is loaded;
    // reading the pointer field does not race with the controller, which
    // replaces it only under its config write lock during reconfigure.
    let p = unsafe { std::ptr::addr_of!(ffi::slurm_conf.slurm_conf).read() };
    // SAFETY: null or the xstrdup'd path.
    unsafe { read_cstr(p) }.map(PathBuf::from)
}

/// The `TaskPlugin` of the running daemon's slurm.conf (`task/cgroup`,
/// `task/affinity,task/cgroup`, `task/none`), when inside a SLURM daemon.
pub fn task_plugin() -> Option<String> {
    // SAFETY: as in `slurm_conf_path`: the global is filled before plugins
    // load, and the pointer field is only replaced under reconfigure.
    let p = unsafe { std::ptr::addr_of!(ffi::slurm_conf.task_plugin).read() };
    // SAFETY: null or an xstrdup'd string.
    unsafe { read_cstr(p) }
}

/// `SlurmUser`'s uid in the running daemon's slurm.conf.
pub fn slurm_user_id() -> u32 {
    // SAFETY: a plain integer field of the global filled before plugins load.
    unsafe { std::ptr::addr_of!(ffi::slurm_conf.slurm_user_id).read() }
}

/// What the controller granted a job, from its record in slurmctld.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantedJob {
    /// `licenses`, e.g. `vgpgpu:6`.
    pub licenses: Option<String>,
    /// The nodes allocated to the job.
    pub num_nodes: u32,
}

/// Asks slurmctld for job `job_id`'s record (`slurm_load_job`): the
/// controller's view, which the job cannot change.
pub fn load_job(job_id: u32) -> Result<GrantedJob, String> {
    let mut resp: *mut ffi::job_info_msg_t = std::ptr::null_mut();
    // SAFETY: `resp` is a valid out-pointer; on success SLURM stores a
    // message it allocated, freed below with slurm_free_job_info_msg.
    let rc = unsafe { ffi::slurm_load_job(&mut resp, job_id, ffi::SHOW_DETAIL as u16) };
    if rc != 0 || resp.is_null() {
        return Err(format!("slurm_load_job({job_id}) failed (rc {rc})"));
    }
    // SAFETY: non-null reply; `job_array` holds `record_count` records.
    let out = unsafe {
        let msg = &*resp;
        let records = if msg.job_array.is_null() { &[][..] } else { std::slice::from_raw_parts(msg.job_array, msg.record_count as usize) };
        let found = records.iter().find(|r| r.job_id == job_id).map(|r| GrantedJob { licenses: read_cstr(r.licenses), num_nodes: r.num_nodes });
        ffi::slurm_free_job_info_msg(resp);
        found
    };
    out.ok_or_else(|| format!("slurmctld has no record of job {job_id}"))
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
}

/// SAFETY (callers): `av` holds `ac` valid C strings (SLURM's plugstack args).
unsafe fn args(ac: c_int, av: *mut *mut c_char) -> Vec<String> {
    // SAFETY: forwarded contract.
    unsafe { read_array(av, usize::try_from(ac).unwrap_or(0)) }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "panic".into())
}

fn register_options<P: Plugin>(spank: &Spank, cb: ffi::spank_opt_cb_f) -> Result<(), SpankError> {
    for (i, opt) in P::options().iter().enumerate() {
        // SLURM keeps the pointer to the option table for the life of the
        // process, so the table and its strings are leaked on purpose.
        let leak = |s: &str| cstring(s).into_raw();
        let raw = Box::leak(Box::new(ffi::spank_option {
            name: leak(opt.name),
            arginfo: opt.arginfo.map(leak).unwrap_or(std::ptr::null_mut()),
            usage: leak(opt.usage),
            has_arg: c_int::from(opt.arginfo.is_some()),
            val: i as c_int,
            cb,
        }));
        // SAFETY: `raw` and its strings live for the rest of the process.
        let rc = unsafe { ffi::spank_option_register(spank.raw, raw) };
        check(rc, &format!("registering --{}", opt.name))?;
    }
    Ok(())
}

/// Runs one SPANK callback of `P`: no unwind leaves it, and an error is
/// logged through SLURM and returned as -1.
///
/// SAFETY (callers): `sp`, `ac` and `av` are what SLURM passed to the
/// exported `slurm_spank_*` function.
#[doc(hidden)]
pub unsafe fn dispatch<P: Plugin>(
    state: &Mutex<Option<P>>,
    name: &str,
    callback: Callback,
    option_cb: ffi::spank_opt_cb_f,
    sp: ffi::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let spank = Spank { raw: sp };
        // SAFETY: forwarded contract.
        let args = unsafe { args(ac, av) };
        let mut guard = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let plugin = guard.get_or_insert_with(P::default);
        if callback == Callback::Init {
            register_options::<P>(&spank, option_cb)?;
        }
        crate::spank::call(plugin, callback, &spank, &args)
    }));
    match outcome {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            log(Level::Error, &format!("{name}: {}: {e}", callback.symbol()));
            -1
        }
        Err(p) => {
            log(Level::Error, &format!("{name}: {}: internal error: {}", callback.symbol(), panic_text(&*p)));
            -1
        }
    }
}

/// Runs the option callback of `P` for option number `val`.
///
/// SAFETY (callers): `optarg` is null or a valid C string.
#[doc(hidden)]
pub unsafe fn dispatch_option<P: Plugin>(state: &Mutex<Option<P>>, name: &str, val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded contract.
        let value = unsafe { read_cstr(optarg) };
        let options = P::options();
        let opt = usize::try_from(val).ok().and_then(|i| options.get(i)).ok_or_else(|| SpankError::new(format!("unknown option number {val}")))?;
        let mut guard = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.get_or_insert_with(P::default).option(opt.name, value.as_deref(), remote != 0)
    }));
    match outcome {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            spank_log(&format!("{name}: {e}"));
            -1
        }
        Err(p) => {
            log(Level::Error, &format!("{name}: option callback: internal error: {}", panic_text(&*p)));
            -1
        }
    }
}

/// A job description as the controller's job_submit plugins see it.
pub struct JobDesc<'a> {
    raw: &'a mut ffi::job_desc_msg_t,
}

impl JobDesc<'_> {
    /// The job's environment (`KEY=VALUE`), as submitted.
    pub fn environment(&self) -> Vec<String> {
        // SAFETY: SLURM keeps `environment` with `env_size` entries.
        unsafe { read_array(self.raw.environment, self.raw.env_size as usize) }
    }

    /// The job-control environment (`SPANK_…=…`) set by SPANK plugins.
    pub fn spank_job_env(&self) -> Vec<String> {
        // SAFETY: SLURM keeps `spank_job_env` with `spank_job_env_size` entries.
        unsafe { read_array(self.raw.spank_job_env, self.raw.spank_job_env_size as usize) }
    }

    /// `tres_per_node`, e.g. `gres:gpu:2`.
    pub fn tres_per_node(&self) -> Option<String> {
        // SAFETY: null or an xstrdup'd C string.
        unsafe { read_cstr(self.raw.tres_per_node) }
    }

    /// Replaces `tres_per_node`, freeing the old value with SLURM's allocator.
    pub fn set_tres_per_node(&mut self, value: &str) {
        let new = xstrdup(value);
        let mut old = std::mem::replace(&mut self.raw.tres_per_node, new);
        // SAFETY: the old value came from SLURM's allocator (or is null, which
        // xfree accepts) and nothing else refers to it any more.
        unsafe { ffi::slurm_xfree((&mut old as *mut *mut c_char).cast::<*mut c_void>()) };
    }

    /// `licenses`, e.g. `matlab:1,vgpgpu:6`.
    pub fn licenses(&self) -> Option<String> {
        // SAFETY: null or an xstrdup'd C string.
        unsafe { read_cstr(self.raw.licenses) }
    }

    /// Replaces `licenses`, freeing the old value with SLURM's allocator.
    pub fn set_licenses(&mut self, value: &str) {
        let new = xstrdup(value);
        let mut old = std::mem::replace(&mut self.raw.licenses, new);
        // SAFETY: as in `set_tres_per_node`: the old value is SLURM's (or null).
        unsafe { ffi::slurm_xfree((&mut old as *mut *mut c_char).cast::<*mut c_void>()) };
    }

    /// `min_nodes` as submitted (NO_VAL when unset).
    pub fn min_nodes(&self) -> u32 {
        self.raw.min_nodes
    }

    /// The id the job will get, if the user asked for one (0 otherwise).
    pub fn job_id(&self) -> u32 {
        self.raw.job_id
    }
}

/// Runs a job_submit or job_modify function: no unwind leaves it; a refusal
/// becomes `err_msg` (which sbatch prints) and `ESLURM_INVALID_GRES`.
///
/// SAFETY (callers): `job_desc` and `err_msg` are what slurmctld passed.
#[doc(hidden)]
pub unsafe fn dispatch_job_submit(
    name: &str,
    f: fn(&mut JobDesc<'_>, u32) -> Result<(), String>,
    job_desc: *mut ffi::job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: slurmctld passes a valid, exclusively held job description.
        let Some(raw) = (unsafe { job_desc.as_mut() }) else { return Ok(()) };
        f(&mut JobDesc { raw }, submit_uid)
    }));
    let message = match outcome {
        Ok(Ok(())) => return ffi::SLURM_SUCCESS as c_int,
        Ok(Err(message)) => {
            log(Level::Info, &format!("{name}: refused a job of uid {submit_uid}: {message}"));
            message
        }
        Err(p) => {
            let m = format!("{name}: internal error: {}", panic_text(&*p));
            log(Level::Error, &m);
            m
        }
    };
    if !err_msg.is_null() {
        // SAFETY: `err_msg` points to slurmctld's message slot; it frees the
        // previous value with xfree, so ours must come from xstrdup too.
        unsafe {
            if !(*err_msg).is_null() {
                ffi::slurm_xfree(err_msg.cast::<*mut c_void>());
            }
            *err_msg = xstrdup(&message);
        }
    }
    ffi::slurm_err_t_ESLURM_INVALID_GRES as c_int
}

/// Exports a SPANK plugin: the `plugin_name`, `plugin_type`,
/// `plugin_version` and `spank_plugin_version` symbols and every
/// `slurm_spank_*` callback, each dispatching to the [`Plugin`] methods of
/// one process-wide value of `$ty` (created with `Default`).
///
/// ```ignore
/// cder_slurm::spank_plugin!("cder", MyPlugin);
/// ```
#[macro_export]
macro_rules! spank_plugin {
    ($name:literal, $ty:ty) => {
        #[no_mangle]
        #[used]
        pub static plugin_name: [u8; $name.len() + 1] = $crate::nul_terminated::<{ $name.len() + 1 }>($name);
        #[no_mangle]
        #[used]
        pub static plugin_type: [u8; 6] = *b"spank\0";
        #[no_mangle]
        #[used]
        pub static plugin_version: u32 = $crate::SLURM_VERSION_NUMBER;
        #[no_mangle]
        #[used]
        pub static spank_plugin_version: u32 = 0;

        static __CDER_SPANK_STATE: ::std::sync::Mutex<::std::option::Option<$ty>> = ::std::sync::Mutex::new(None);

        unsafe extern "C" fn __cder_spank_option(
            val: ::std::ffi::c_int,
            optarg: *const ::std::ffi::c_char,
            remote: ::std::ffi::c_int,
        ) -> ::std::ffi::c_int {
            // SAFETY: SLURM passes a valid (or null) option argument.
            unsafe { $crate::sys::dispatch_option::<$ty>(&__CDER_SPANK_STATE, $name, val, optarg, remote) }
        }

        $crate::spank_plugin!(@callbacks $name, $ty,
            slurm_spank_init => Init,
            slurm_spank_job_prolog => JobProlog,
            slurm_spank_init_post_opt => InitPostOpt,
            slurm_spank_local_user_init => LocalUserInit,
            slurm_spank_user_init => UserInit,
            slurm_spank_task_init_privileged => TaskInitPrivileged,
            slurm_spank_task_init => TaskInit,
            slurm_spank_task_post_fork => TaskPostFork,
            slurm_spank_task_exit => TaskExit,
            slurm_spank_job_epilog => JobEpilog,
            slurm_spank_slurmd_exit => SlurmdExit,
            slurm_spank_exit => Exit
        );
    };
    (@callbacks $name:literal, $ty:ty, $($sym:ident => $cb:ident),*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $sym(
                sp: $crate::ffi::spank_t,
                ac: ::std::ffi::c_int,
                av: *mut *mut ::std::ffi::c_char,
            ) -> ::std::ffi::c_int {
                // SAFETY: SLURM passes a valid handle and `ac` plugstack arguments.
                unsafe {
                    $crate::sys::dispatch::<$ty>(
                        &__CDER_SPANK_STATE,
                        $name,
                        $crate::spank::Callback::$cb,
                        Some(__cder_spank_option),
                        sp,
                        ac,
                        av,
                    )
                }
            }
        )*
    };
}

/// Exports a job_submit plugin: `plugin_name`, `plugin_type`
/// (`job_submit/<name>`), `plugin_version`, `init`, `fini`, `job_submit`
/// and `job_modify`, the last two calling `$submit` / `$modify`
/// (`fn(&mut JobDesc, submit_uid) -> Result<(), String>`; the error text
/// is what the user sees).
#[macro_export]
macro_rules! job_submit_plugin {
    ($name:literal, $submit:path, $modify:path) => {
        #[no_mangle]
        #[used]
        pub static plugin_name: [u8; concat!("job_submit/", $name).len() + 1] =
            $crate::nul_terminated::<{ concat!("job_submit/", $name).len() + 1 }>(concat!("job_submit/", $name));
        #[no_mangle]
        #[used]
        pub static plugin_type: [u8; concat!("job_submit/", $name).len() + 1] =
            $crate::nul_terminated::<{ concat!("job_submit/", $name).len() + 1 }>(concat!("job_submit/", $name));
        #[no_mangle]
        #[used]
        pub static plugin_version: u32 = $crate::SLURM_VERSION_NUMBER;

        #[no_mangle]
        pub extern "C" fn init() -> ::std::ffi::c_int {
            $crate::sys::log($crate::sys::Level::Verbose, concat!("job_submit/", $name, " loaded"));
            0
        }

        #[no_mangle]
        pub extern "C" fn fini() -> ::std::ffi::c_int {
            0
        }

        #[no_mangle]
        pub unsafe extern "C" fn job_submit(
            job_desc: *mut $crate::ffi::job_desc_msg_t,
            submit_uid: u32,
            err_msg: *mut *mut ::std::ffi::c_char,
        ) -> ::std::ffi::c_int {
            // SAFETY: slurmctld passes a valid job description and message slot.
            unsafe { $crate::sys::dispatch_job_submit(concat!("job_submit/", $name), $submit, job_desc, submit_uid, err_msg) }
        }

        #[no_mangle]
        pub unsafe extern "C" fn job_modify(
            job_desc: *mut $crate::ffi::job_desc_msg_t,
            _job_ptr: *mut ::std::ffi::c_void,
            submit_uid: u32,
            err_msg: *mut *mut ::std::ffi::c_char,
        ) -> ::std::ffi::c_int {
            // SAFETY: slurmctld passes a valid job description and message slot.
            unsafe { $crate::sys::dispatch_job_submit(concat!("job_submit/", $name), $modify, job_desc, submit_uid, err_msg) }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c_array(items: &[&str]) -> Vec<*mut c_char> {
        items.iter().map(|s| xstrdup(s)).collect()
    }

    /// A job description as slurmctld would hand it over, with SLURM-owned
    /// strings.
    fn job_desc(env: &mut [*mut c_char], spank: &mut [*mut c_char], tres: Option<&str>) -> ffi::job_desc_msg_t {
        // SAFETY: job_desc_msg_t is a plain C struct of integers and
        // pointers, for which all-zero is the "unset" value SLURM itself
        // starts from (slurm_init_job_desc_msg then sets defaults).
        let mut d: ffi::job_desc_msg_t = unsafe { std::mem::zeroed() };
        d.environment = env.as_mut_ptr();
        d.env_size = env.len() as u32;
        d.spank_job_env = spank.as_mut_ptr();
        d.spank_job_env_size = spank.len() as u32;
        d.tres_per_node = tres.map(xstrdup).unwrap_or(std::ptr::null_mut());
        d
    }

    #[test]
    fn job_desc_reads_and_replaces_with_slurms_allocator() {
        let mut env = c_array(&["PATH=/bin", "GPGPUPerNode=2"]);
        let mut spank = c_array(&["CDER_GPGPU_PER_NODE=3"]);
        let mut raw = job_desc(&mut env, &mut spank, Some("gres:fpga:1"));
        let mut job = JobDesc { raw: &mut raw };
        assert_eq!(job.environment(), vec!["PATH=/bin", "GPGPUPerNode=2"]);
        assert_eq!(job.spank_job_env(), vec!["CDER_GPGPU_PER_NODE=3"]);
        assert_eq!(job.tres_per_node().as_deref(), Some("gres:fpga:1"));
        job.set_tres_per_node("gres:fpga:1,gres:gpu:3");
        job.set_tres_per_node("gres:gpu:1");
        assert_eq!(job.tres_per_node().as_deref(), Some("gres:gpu:1"));
    }

    fn panics(_: &mut JobDesc<'_>, _: u32) -> Result<(), String> {
        panic!("boom")
    }

    fn refuses(_: &mut JobDesc<'_>, _: u32) -> Result<(), String> {
        Err("cder: no".into())
    }

    #[test]
    fn no_panic_crosses_and_refusals_reach_err_msg() {
        let mut raw = job_desc(&mut [], &mut [], None);
        let mut err: *mut c_char = xstrdup("previous message");
        // SAFETY: valid job description and message slot, as slurmctld passes.
        let rc = unsafe { dispatch_job_submit("job_submit/test", panics, &mut raw, 1000, &mut err) };
        assert_eq!(rc, ffi::slurm_err_t_ESLURM_INVALID_GRES as c_int);
        // SAFETY: dispatch put an xstrdup'd string there.
        let text = unsafe { read_cstr(err) }.unwrap();
        assert!(text.contains("internal error: boom"), "{text}");
        // SAFETY: as above.
        let rc = unsafe { dispatch_job_submit("job_submit/test", refuses, &mut raw, 1000, &mut err) };
        assert_ne!(rc, 0);
        // SAFETY: as above.
        assert_eq!(unsafe { read_cstr(err) }.as_deref(), Some("cder: no"));
        // A null job description (never sent by slurmctld) is not touched.
        // SAFETY: null is handled before any dereference.
        assert_eq!(unsafe { dispatch_job_submit("job_submit/test", panics, std::ptr::null_mut(), 0, &mut err) }, 0);
    }
}
