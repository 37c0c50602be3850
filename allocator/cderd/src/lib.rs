//! `cderd`, the cder node daemon: it owns the node's CDERs and gives each to
//! one job at a time.
//!
//! * [`durable`] — opening SQLite the durable way (from `cder-ledger`, shared
//!   with the vGPGPU registry).
//! * [`store`] — durable state in SQLite (WAL, `synchronous=NORMAL`); the
//!   database itself forbids two live owners of a device.
//! * [`policy`] — (from `cder-ledger`) which free devices a job gets ([`policy::SelectionPolicy`],
//!   default [`policy::LocalityPolicy`], Mendonca's best-effort locality).
//! * [`enforce`] — device-file ownership and NVML compute mode, as root.
//! * [`file_watch`] — sets a device file cder manages again when its owner,
//!   mode or ACL changed behind cder's back (nvidia-modprobe, udev).
//! * [`acl`] — POSIX ACLs that open a shared GPU (and its MPS directories)
//!   to exactly its sharers.
//! * [`sharing`] — GPUs offered as shares (`[node.sharing]`, SLURM
//!   `gres/shard`) and the check of gres.conf against them at start.
//! * [`gres_count`] — the check at start that gres.conf counts each type's
//!   devices as discovery found them.
//! * [`cgroup`] — per-job device cgroups (v1 `devices`, v2 BPF) for `confine`.
//! * [`warmup`] — keeps the kernel's cgroup migration lock warm while tasks
//!   are about to be confined (no RCU grace period on the job's start path).
//! * [`health`] — drains an NVML device that fails (Xid, double-bit ECC, lost).
//! * [`vendor_watch`] — the same drains, and the usage samples, for the
//!   devices of the other vendors' libraries (ROCm SMI, Level Zero), read
//!   through `cder_inventory::read_devices` with a deadline.
//! * [`held`] — which processes hold a device open (never handed out then),
//!   found without following a descriptor into a user's file system.
//! * [`ending`] — ending a released job's leftover processes off the ledger
//!   lock, each request waiting a bounded time (the ledger lock covers only
//!   the ledger).
//! * [`node_drain`] — drains the node in the batch system (SLURM, TORQUE)
//!   while a device is kept out of the pool, off the ledger lock, each call
//!   with a deadline; returns only a drain of its own.
//! * [`intake`] — `alloc`s on their way in (the SLURM job prolog does not
//!   wait for its answer): what the job's first `env` waits for.
//! * [`peer`] — the calling process: SO_PEERCRED, and its pidfd or start time
//!   (what `confine` moves is the process that connected, never a later one).
//! * [`usage`] — samples NVML for what each job does with its devices
//!   (utilisation, memory, processes), rolled up in the ledger; idle devices.
//! * [`daemon`] — authorization by SO_PEERCRED and the operations.
//! * [`server`] — the Unix socket speaking the protocol of `docs/protocol.md`
//!   (types in the `cder-protocol` crate).

#![deny(missing_docs)]

pub mod acl;
pub mod cgroup;
pub mod daemon;
pub mod ending;
pub mod enforce;
pub mod file_watch;
pub mod gres_count;
pub mod health;
pub mod held;
pub mod intake;
pub mod mps;
pub mod node_drain;
pub mod peer;
pub mod server;
pub mod sharing;
pub mod store;
pub mod sys;
pub mod usage;
pub mod vendor_watch;
pub mod warmup;

pub use cder_ledger::{durable, policy};
pub use daemon::{Caller, Daemon, StartError};
pub use policy::{Candidate, LocalityPolicy, SelectionPolicy};
