//! The job description slurmctld hands a job_submit plugin, and the
//! dispatcher that the export macro beside the controller logic calls.

use std::ffi::{c_char, c_int, c_void};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use super::cstr::{log, panic_text, read_array, read_cstr, xstrdup, Level};
use crate::ffi;

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

    /// Replaces the job-control environment (strings and array from
    /// SLURM's allocator, the old ones freed with it), as slurmctld keeps it
    /// for the prolog and epilog.
    pub fn set_spank_job_env(&mut self, entries: &[String]) {
        let file = c"cder-slurm";
        // SAFETY: slurm_xcalloc with try=false never returns null (it
        // aborts as SLURM's xmalloc does); the array has room for the
        // entries and the NULL that slurmctld's own arrays end with.
        let array = unsafe {
            ffi::slurm_xcalloc(
                entries.len() + 1,
                std::mem::size_of::<*mut c_char>(),
                true,
                false,
                file.as_ptr(),
                0,
                file.as_ptr(),
            )
        }
        .cast::<*mut c_char>();
        for (i, e) in entries.iter().enumerate() {
            // SAFETY: i < entries.len(), within the array just allocated.
            unsafe { *array.add(i) = xstrdup(e) };
        }
        let old = std::mem::replace(&mut self.raw.spank_job_env, array);
        let old_len = std::mem::replace(&mut self.raw.spank_job_env_size, entries.len() as u32);
        if !old.is_null() {
            for i in 0..old_len as usize {
                // SAFETY: SLURM keeps `old_len` xmalloc'd strings (or nulls,
                // which xfree accepts) in the old array, which nothing else
                // refers to any more.
                unsafe { ffi::slurm_xfree(old.add(i).cast::<*mut c_void>()) };
            }
            let mut old = old;
            // SAFETY: the array itself came from SLURM's allocator.
            unsafe { ffi::slurm_xfree((&mut old as *mut *mut *mut c_char).cast::<*mut c_void>()) };
        }
    }

    /// `tres_per_job` (`--gpus`), e.g. `gres/gpu:2`.
    pub fn tres_per_job(&self) -> Option<String> {
        // SAFETY: null or an xstrdup'd C string.
        unsafe { read_cstr(self.raw.tres_per_job) }
    }

    /// `tres_per_task` (`--gpus-per-task`).
    pub fn tres_per_task(&self) -> Option<String> {
        // SAFETY: null or an xstrdup'd C string.
        unsafe { read_cstr(self.raw.tres_per_task) }
    }

    /// `tres_per_socket` (`--gpus-per-socket`).
    pub fn tres_per_socket(&self) -> Option<String> {
        // SAFETY: null or an xstrdup'd C string.
        unsafe { read_cstr(self.raw.tres_per_socket) }
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

    /// `exc_nodes`: the nodes the job must not run on (`wn[01-04]`).
    pub fn exc_nodes(&self) -> Option<String> {
        // SAFETY: null or an xstrdup'd C string.
        unsafe { read_cstr(self.raw.exc_nodes) }
    }

    /// Replaces `exc_nodes`, freeing the old value with SLURM's allocator.
    pub fn set_exc_nodes(&mut self, value: &str) {
        let new = xstrdup(value);
        let mut old = std::mem::replace(&mut self.raw.exc_nodes, new);
        // SAFETY: as in `set_tres_per_node`: the old value is SLURM's (or null).
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

    /// `ntasks_per_tres` (`--ntasks-per-gpu`), when set: with a task count
    /// and no GPU asked otherwise, slurmctld derives the job's GPUs from it.
    pub fn ntasks_per_tres(&self) -> Option<u16> {
        // 0 and NO_VAL16 (0xfffe): unset (slurm_init_job_desc_msg, an update).
        Some(self.raw.ntasks_per_tres).filter(|&n| n != 0 && n != 0xfffe)
    }

    /// `min_nodes` as submitted (NO_VAL when unset).
    pub fn min_nodes(&self) -> u32 {
        self.raw.min_nodes
    }

    /// The id the job will get, if the user asked for one (0 otherwise).
    pub fn job_id(&self) -> u32 {
        #[cfg(slurm_job_desc_step_id)]
        return self.raw.step_id.job_id;
        #[cfg(not(slurm_job_desc_step_id))]
        return self.raw.job_id;
    }
}

/// The controller's record of a job that an update is for (slurmctld's
/// `job_record_t`, which no public header declares: never read here
/// field by field, only handed back to slurmctld).
pub struct JobRecord<'a> {
    raw: *mut c_void,
    /// Valid for the one job_modify call that received it.
    _call: PhantomData<&'a mut c_void>,
}

/// A job as its record describes it, in a job description of its own
/// (freed with SLURM's allocator when dropped).
pub struct RecordedJob {
    raw: NonNull<ffi::job_desc_msg_t>,
}

impl JobRecord<'_> {
    /// The job as slurmctld itself would describe it anew (its
    /// `copy_job_record_to_job_desc`, the same in 22.05 to 26.05, which
    /// federation uses): what an update only changes. Looked up in the
    /// running process, so a slurmctld without it gives an error here,
    /// never a plugin SLURM cannot load; outside slurmctld, always an error.
    pub fn describe(&self) -> Result<RecordedJob, String> {
        if self.raw.is_null() {
            return Err("slurmctld passed no job record".into());
        }
        let this = libloading::os::unix::Library::this();
        // SAFETY: the symbol, where the process has it, is slurmctld's
        // `job_desc_msg_t *copy_job_record_to_job_desc(job_record_t *)`.
        let copy = unsafe {
            this.get::<unsafe extern "C" fn(*mut c_void) -> *mut ffi::job_desc_msg_t>(b"copy_job_record_to_job_desc")
        }
        .map_err(|e| format!("slurmctld has no copy_job_record_to_job_desc: {e}"))?;
        // SAFETY: `raw` is the live record slurmctld handed job_modify, under
        // the job write lock it holds for the update; the copy is xmalloc'd
        // and ours alone.
        let raw = unsafe { copy(self.raw) };
        NonNull::new(raw)
            .map(|raw| RecordedJob { raw })
            .ok_or_else(|| "slurmctld could not copy the job's record".into())
    }
}

impl RecordedJob {
    /// The copy, read (and written) like any job description.
    pub fn desc(&mut self) -> JobDesc<'_> {
        // SAFETY: the copy lives as long as `self` and nothing else refers to it.
        JobDesc { raw: unsafe { self.raw.as_mut() } }
    }
}

impl Drop for RecordedJob {
    fn drop(&mut self) {
        // SAFETY: the description came from SLURM's allocator and is freed
        // once, as slurmctld frees its own copies (fed_mgr.c, 22.05 to
        // 26.05): the environment's strings lie in one buffer (the first
        // entry's), not one allocation each as slurm_free_job_desc_msg
        // would free them.
        unsafe {
            let raw = self.raw.as_mut();
            if !raw.environment.is_null() {
                ffi::slurm_xfree(raw.environment.cast::<*mut c_void>());
                ffi::slurm_xfree((&mut raw.environment as *mut *mut *mut c_char).cast::<*mut c_void>());
                raw.env_size = 0;
            }
            ffi::slurm_free_job_desc_msg(self.raw.as_ptr());
        }
    }
}

/// Runs a job_submit function: no unwind leaves it; a refusal becomes
/// `err_msg` (which sbatch prints) and `ESLURM_INVALID_GRES`.
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
    // SAFETY: the caller's.
    unsafe { dispatch(name, |job| f(job, submit_uid), job_desc, submit_uid, err_msg) }
}

/// Runs a job_modify function, as [`dispatch_job_submit`] does, with the
/// controller's record of the job the update is for.
///
/// SAFETY (callers): `job_desc`, `job_ptr` and `err_msg` are what slurmctld passed.
#[doc(hidden)]
pub unsafe fn dispatch_job_modify(
    name: &str,
    f: fn(&mut JobDesc<'_>, &JobRecord<'_>, u32) -> Result<(), String>,
    job_desc: *mut ffi::job_desc_msg_t,
    job_ptr: *mut c_void,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    let record = JobRecord { raw: job_ptr, _call: PhantomData };
    // SAFETY: the caller's.
    unsafe { dispatch(name, |job| f(job, &record, submit_uid), job_desc, submit_uid, err_msg) }
}

/// SAFETY (callers): `job_desc` and `err_msg` are what slurmctld passed.
unsafe fn dispatch(
    name: &str,
    f: impl FnOnce(&mut JobDesc<'_>) -> Result<(), String>,
    job_desc: *mut ffi::job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: slurmctld passes a valid, exclusively held job description.
        let Some(raw) = (unsafe { job_desc.as_mut() }) else { return Ok(()) };
        f(&mut JobDesc { raw })
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

    #[test]
    fn the_job_control_environment_is_replaced_with_slurms_allocator() {
        // As slurmctld unpacks it: xmalloc'd strings in an xmalloc'd array.
        let mut raw = job_desc(&mut [], &mut [], None);
        raw.spank_job_env = std::ptr::null_mut();
        let mut job = JobDesc { raw: &mut raw };
        job.set_spank_job_env(&["A=1".to_string(), "CDER_NODE_GRES=gres/gpu:1".to_string()]);
        assert_eq!(job.spank_job_env(), vec!["A=1", "CDER_NODE_GRES=gres/gpu:1"]);
        // A second replacement frees the first (its array and strings).
        job.set_spank_job_env(&["B=2".to_string()]);
        assert_eq!(job.spank_job_env(), vec!["B=2"]);
        // SAFETY: the array holds one entry and its NULL terminator.
        assert!(unsafe { (*raw.spank_job_env.add(1)).is_null() });
        let mut job = JobDesc { raw: &mut raw };
        job.set_spank_job_env(&[]);
        assert!(job.spank_job_env().is_empty());
    }

    #[test]
    fn tasks_per_gpu_is_read_only_when_set() {
        let mut raw = job_desc(&mut [], &mut [], None);
        for (value, read) in [(0, None), (0xfffe, None), (2, Some(2))] {
            raw.ntasks_per_tres = value;
            assert_eq!(JobDesc { raw: &mut raw }.ntasks_per_tres(), read, "{value:#x}");
        }
    }

    /// Outside slurmctld (or in one without the symbol) a record cannot be
    /// read: an error for job_modify to refuse on, never a crash.
    #[test]
    fn a_record_without_slurmctld_is_an_error() {
        let none = JobRecord { raw: std::ptr::null_mut(), _call: PhantomData };
        assert!(none.describe().err().unwrap().contains("no job record"));
        let mut not_a_record = 0u64;
        let record = JobRecord { raw: (&mut not_a_record as *mut u64).cast(), _call: PhantomData };
        let e = record.describe().err().unwrap();
        assert!(e.contains("no copy_job_record_to_job_desc"), "{e}");
    }

    fn refuses_on_record(_: &mut JobDesc<'_>, record: &JobRecord<'_>, _: u32) -> Result<(), String> {
        record.describe().map(drop).map_err(|e| format!("cder: {e}"))
    }

    #[test]
    fn modify_refusals_reach_err_msg() {
        let mut raw = job_desc(&mut [], &mut [], None);
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid job description and message slot; a null record, as
        // slurmctld never passes, is handled by `describe`.
        let rc = unsafe {
            dispatch_job_modify("job_submit/test", refuses_on_record, &mut raw, std::ptr::null_mut(), 0, &mut err)
        };
        assert_eq!(rc, ffi::slurm_err_t_ESLURM_INVALID_GRES as c_int);
        // SAFETY: dispatch put an xstrdup'd string there.
        assert_eq!(unsafe { read_cstr(err) }.as_deref(), Some("cder: slurmctld passed no job record"));
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
