//! What the running SLURM daemon knows: its slurm.conf and the controller's
//! record of a job.

use std::path::PathBuf;

use super::cstr::read_cstr;
use crate::ffi;

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
        let records = if msg.job_array.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(msg.job_array, msg.record_count as usize)
        };
        let found = records.iter().find(|r| r.job_id == job_id).map(|r| {
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
