//! The light half of the cluster vGPGPU registry: what a *client* of
//! `cder-registryd` needs, and nothing that pulls SQLite or an HTTP server,
//! because the SLURM plugin links it into slurmstepd.
//!
//! * [`api`] — the HTTP/JSON types of the thesis's interface (register,
//!   unregister, request, release, query) plus offline/online and status;
//! * [`client`] — a blocking std-only client;
//! * [`munge`] — MUNGE credentials bound to each request;
//! * [`mod@env`] — the rCUDA / VCL environment of a job's frontend.
//!
//! The service itself, its store, policies and the factory are in
//! `cder-registry`.

#![deny(missing_docs)]

pub mod api;
pub mod client;
pub mod env;
pub mod munge;

pub use api::{
    ApiError, ApiErrorCode, Backend, BackendAllocation, BackendCounts, BackendState, QueryName, RegistryStatus,
};
pub use client::{RegistryClient, RegistryClientError};
pub use munge::Munge;
