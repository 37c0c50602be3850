//! SLURM integration for cder: the framework and the logic of the two
//! plugins built from this workspace, the SPANK plugin `spank_cder.so`
//! (node side: allocate from cderd, set the job's environment, release) and
//! the job_submit plugin `job_submit_cder.so` (controller side: translate
//! cder requests into GRES the scheduler counts, reject bad ones).
//!
//! * [`spank`] — the [`spank::Plugin`] trait (one method per SPANK callback,
//!   no-op defaults) and [`spank_plugin!`], which exports the C symbols;
//! * [`job_submit`] — [`job_submit_plugin!`] and the translation;
//! * [`request`] — what a job asked for, parsed from SPANK options, their
//!   job-control environment twins, or the JDL keys (`GPGPUPerNode`);
//! * [`gres`] — `tres_per_node` editing and the per-node GRES counts of
//!   `slurm.conf`;
//! * [`devices`] — the job's devices as SLURM granted them, and their
//!   numbering inside and outside a device cgroup;
//! * [`gres_conf`] — slurmd's GPU list from gres.conf, and SLURM's GPU
//!   indices turned into cderd's devices by device file;
//! * [`node_gres`] — the job's GPU GRES per node as the controller
//!   validated them, stamped into its job-control environment for the prolog;
//! * [`node`] — the node side of `spank_cder.so` as plain functions: the
//!   prolog's record, the step's plan, the tasks' confinement, vGPGPU
//!   backends; SLURM and cderd behind traits;
//! * [`shared_fence`] — a shared device file (AMD's kfd) denied inside
//!   SLURM's own device cgroup to a job holding none of its devices;
//! * [`args`] — the plugstack.conf arguments (`socket=`, `fail=`, `mode=`);
//! * [`vgpgpu`] — vGPGPU requests (`--vgpgpu-per-node`, `VirtualGPGPUPerNode`) and the `vgpgpu` licence;
//! * [`sys`] — the only unsafe code: thin wrappers over the bindgen'd API.
//!
//! Every exported function catches unwinds: no panic crosses into SLURM.

#![deny(missing_docs)]

pub mod args;
pub mod devices;
// A unit test module, not an integration test binary: each binary is a link
// (docs/testing.md, "Test binaries").
#[cfg(test)]
mod fuzz_regressions;
pub mod gres;
pub mod gres_conf;
pub mod job_submit;
pub mod node;
pub mod node_gres;
pub mod request;
pub mod shared_fence;
pub mod spank;
pub mod sys;
pub mod vgpgpu;

pub use cder_slurm_sys as ffi;

/// `plugin_version` for both plugins: the SLURM release whose headers this
/// was built against (the loader refuses any other).
pub const SLURM_VERSION_NUMBER: u32 = cder_slurm_sys::VERSION_NUMBER;

/// The bytes of `s` followed by a NUL, as a fixed array: what SLURM's loader
/// reads through the `plugin_name` / `plugin_type` data symbols.
pub const fn nul_terminated<const N: usize>(s: &str) -> [u8; N] {
    let bytes = s.as_bytes();
    assert!(bytes.len() + 1 == N, "array length must be the string length plus one");
    let mut out = [0u8; N];
    let mut i = 0;
    while i < bytes.len() {
        assert!(bytes[i] != 0, "plugin strings cannot hold NUL");
        out[i] = bytes[i];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn nul_terminated_appends_one_nul() {
        const A: [u8; 5] = super::nul_terminated::<5>("cder");
        assert_eq!(&A, b"cder\0");
    }
}
