//! The integration-test harness: starts real components on loopback in a
//! temp dir and stops them when dropped. Skip reporting and the checks for
//! installed programs are cder-testkit's, shared with every crate's tests.

#![deny(missing_docs)]

pub mod adversary;
pub mod arc;
pub mod bdii;
pub mod campaign;
pub mod cluster;
pub mod egi_snapshot;
pub mod glue;
pub mod ldap;
pub mod munge;
pub mod slurm;
pub mod twophase;
pub mod vgpgpu;
