//! What the running SLURM daemon knows: its slurm.conf and the controller's
//! record of a job.

use std::path::PathBuf;

use super::cstr::read_cstr;
use crate::ffi;

/// The path in the running process's parsed `slurm.conf` (slurmctld's,
/// slurmd's), when running inside a SLURM daemon or command; slurmstepd
/// of 23.11 and later leaves it unset ([`crate::devices::daemon_slurm_conf`]
/// settles the daemon's config from it).
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
    /// Its node list (`node[1-4]`), in the order of `gres_detail`.
    pub nodes: Option<String>,
    /// Per node, the GRES the controller allocated with their indices
    /// (`gpu:1g.10gb:1(IDX:0),gpu:2g.20gb:1(IDX:3)`).
    pub gres_detail: Vec<String>,
    /// `AdminComment`, if set.
    pub admin_comment: Option<String>,
}

/// Asks slurmctld for job `job_id`'s record (`slurm_load_job`): the
/// controller's view, which the job cannot change.
pub fn load_job(job_id: u32) -> Result<GrantedJob, String> {
    init_rpc()?;
    let mut resp: *mut ffi::job_info_msg_t = std::ptr::null_mut();
    let show = ffi::cder_show_flags_CDER_SHOW_DETAIL as u16;
    // 26.05 names the job by a step id; its other fields are NO_VAL, as
    // SLURM_STEP_ID_INITIALIZER leaves them (slurm.h).
    #[cfg(slurm_load_job_step_id)]
    let id = ffi::slurm_step_id_t { sluid: 0, job_id, step_het_comp: NO_VAL, step_id: NO_VAL };
    #[cfg(not(slurm_load_job_step_id))]
    let id = job_id;
    // SAFETY: `resp` is a valid out-pointer; on success SLURM stores a
    // message it allocated, freed below with slurm_free_job_info_msg.
    let rc = unsafe { ffi::slurm_load_job(&mut resp, id, show) };
    if rc != 0 || resp.is_null() {
        return Err(format!("slurm_load_job({job_id}) failed (rc {rc})"));
    }
    // SAFETY: non-null reply; `job_array` holds `record_count` records.
    let out = unsafe {
        let msg = &*resp;
        let records = if msg.job_array.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(msg.job_array, msg.record_count as usize)
        };
        let found = records.iter().find(|r| record_job_id(r) == job_id).map(|r| {
            let details = if r.gres_detail_str.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(r.gres_detail_str, r.gres_detail_cnt as usize)
            };
            GrantedJob {
                licenses: read_cstr(r.licenses),
                num_nodes: r.num_nodes,
                nodes: read_cstr(r.nodes),
                // Each entry is null or an xstrdup'd string owned by `resp`.
                gres_detail: details.iter().map(|&p| read_cstr(p).unwrap_or_default()).collect(),
                admin_comment: read_cstr(r.admin_comment),
            }
        });
        ffi::slurm_free_job_info_msg(resp);
        found
    };
    out.ok_or_else(|| format!("slurmctld has no record of job {job_id}"))
}

/// SLURM's `NO_VAL`: a field left unset.
#[cfg(slurm_load_job_step_id)]
const NO_VAL: u32 = 0xfffffffe;

/// A job record's id: `step_id.job_id` since 25.11 (the old field is kept
/// only "for backwards compatibility").
fn record_job_id(r: &ffi::slurm_job_info_t) -> u32 {
    #[cfg(slurm_job_desc_step_id)]
    return r.step_id.job_id;
    #[cfg(not(slurm_job_desc_step_id))]
    return r.job_id;
}

/// Readies libslurmfull for an RPC from a process that never called
/// `slurm_init` (the spank prolog runs as `slurmstepd spank prolog`):
/// since 23.11 the request is signed through the auth plugin, which needs
/// the hash plugins (and the tls or conn plugin), and without them SLURM
/// dies in `fatal()`, which fails the prolog and drains the node. Each
/// init is idempotent and returns an error instead of dying. They are
/// libslurmfull's internal symbols (src/interfaces/*.h), declared by no
/// public header: looked up in the running process, so a release that
/// renames one gives an error here, never a plugin SLURM cannot load.
fn init_rpc() -> Result<(), String> {
    #[allow(unused_mut)]
    let mut inits: Vec<&str> = Vec::new();
    #[cfg(slurm_rpc_needs_init)]
    inits.extend(["auth_g_init", "hash_g_init"]);
    #[cfg(all(slurm_rpc_needs_tls, not(slurm_rpc_needs_conn)))]
    inits.push("tls_g_init");
    #[cfg(slurm_rpc_needs_conn)]
    inits.extend(["certgen_g_init", "conn_g_init"]);
    if inits.is_empty() {
        return Ok(());
    }
    let this = libloading::os::unix::Library::this();
    for name in inits {
        // SAFETY: each name is a libslurmfull function `int f(void)` of the
        // release these bindings are for (slurm_init calls them in this
        // order); they guard their state with their own mutex and read the
        // process's slurm_conf, which SLURM filled before loading plugins.
        let rc = unsafe {
            let init = this
                .get::<unsafe extern "C" fn() -> std::ffi::c_int>(name.as_bytes())
                .map_err(|e| format!("libslurmfull has no {name}: {e}"))?;
            init()
        };
        if rc != ffi::SLURM_SUCCESS as std::ffi::c_int {
            return Err(format!("SLURM's {name} failed (rc {rc})"));
        }
    }
    Ok(())
}
