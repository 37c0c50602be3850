//! `cder-registry`: the cluster's vGPGPU registry (chapter 4 of the seed
//! thesis). GPUs on many nodes are pooled as *backends* (one API-interception
//! server — rCUDA or VCL — pinned to one GPU); a job on any node asks the
//! registry for backends and reaches them over the network, so it may use
//! more GPUs than its node holds.
//!
//! The API types, the client, MUNGE and the job environment live in the
//! light crate `cder-registry-client` (re-exported here), so that the SLURM
//! plugin and the TORQUE monitor never link SQLite. This crate adds
//! [`store`] (durable SQLite state),
//! [`policy`] (random, local-first, spread), [`service`] (request handling of
//! `cder-registryd`), [`http`] (its HTTP/1.1 front end) and [`factory`] (what `cder-vgpgpu-factory` does on
//! a GPU node).
#![deny(missing_docs)]

pub use cder_registry_client::{api, client, env, munge};

pub mod factory;
pub mod head;
pub mod http;
pub mod policy;
pub mod service;
pub mod startup;
pub mod store;

pub use api::{
    ApiError, ApiErrorCode, Backend, BackendAllocation, BackendCounts, BackendState, QueryName, RegistryStatus,
};
pub use client::{RegistryClient, RegistryClientError};
pub use munge::Munge;
