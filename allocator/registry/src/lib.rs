//! `cder-registry`: the cluster's vGPGPU registry (chapter 4 of the seed
//! thesis). GPUs on many nodes are pooled as *backends* (one API-interception
//! server — rCUDA or VCL — pinned to one GPU); a job on any node asks the
//! registry for backends and reaches them over the network, so it may use
//! more GPUs than its node holds.
//!
//! Always built (light enough for the SLURM plugin and the TORQUE monitor):
//! * [`api`] — the HTTP/JSON types of the thesis's interface (register,
//!   unregister, request, release, query) plus offline/online and status;
//! * [`client`] — a blocking std-only client;
//! * [`munge`] — MUNGE credentials bound to each request;
//! * [`mod@env`] — the rCUDA / VCL environment of a job's frontend.
//!
//! With the `server` feature (default): [`store`] (durable SQLite state),
//! [`policy`] (random, local-first, spread), [`service`] (the HTTP service
//! of `cder-registryd`) and [`factory`] (what `cder-vgpgpu-factory` does on
//! a GPU node).

pub mod api;
pub mod client;
pub mod env;
pub mod munge;

#[cfg(feature = "server")]
pub mod factory;
#[cfg(feature = "server")]
pub mod policy;
#[cfg(feature = "server")]
pub mod service;
#[cfg(feature = "server")]
pub mod startup;
#[cfg(feature = "server")]
pub mod store;

pub use api::{Allocation, ApiError, Backend, BackendState, Counts, ErrorCode, QueryName, Status};
pub use client::{Client, ClientError};
pub use munge::Munge;
