//! TORQUE integration: pbs_mom hooks, the job starter, `cder-env` and the
//! qsub submit filter.
//!
//! TORQUE cannot tell a job which of a node's GPUs are its own. cder closes
//! that gap with pbs_mom's own extension points, with cderd behind them:
//!
//! * [`hook`] — `mom_priv/prologue` allocates the job's devices from cderd
//!   and answers pbs_mom with its exit-code language (run, abort, requeue);
//!   `epilogue` releases them; `.parallel` variants do the same on sister
//!   nodes. One binary, `cder-torque-hook`, installed under each name.
//! * [`starter`] — `cder-job-starter` (mom config `$job_starter`) runs as
//!   the job's user, fetches the allocation (cderd checks the peer uid) and
//!   execs the job with the visible-device variables set.
//! * [`shell`] — `cder-env --shell` prints them as read-only shell
//!   variables for `eval`, for sites without a job starter.
//! * [`filter`] — `cder-torque-submit-filter` (torque.cfg `SUBMITFILTER`)
//!   translates `GPGPUPerNode=N` into the site's directive.
//! * [`hold`] — the filter's vGPGPU hold; [`vgpgpu`] — `cder-torque-monitor`,
//!   which releases held jobs once the cluster registry has their backends.
//! * [`limits`] — reads the device request out of pbs_mom's resource-limit
//!   argument, in the form the site's scheduler counts; [`mom`] — the GPUs
//!   TORQUE itself assigned (`exec_gpus`, `PBS_GPUFILE`) and the job files
//!   `cder-torque-reconcile` takes its snapshot from; [`settings`] —
//!   `/etc/cder/torque.toml`.
//!
//! The hooks find cder's config at `/etc/cder/cder.toml` (pbs_mom gives them
//! an empty environment; `CDER_CONFIG` is honoured when present).

#![deny(missing_docs)]

pub mod filter;
pub mod hold;
pub mod hook;
pub mod limits;
pub mod log;
pub mod mom;
pub mod reconcile;
pub mod settings;
pub mod shell;
pub mod starter;
pub mod sys;
pub mod vgpgpu;
