//! The integration-test harness: starts real components on loopback in a
//! temp dir and stops them when dropped.

pub mod bdii;
pub mod ldap;
pub mod munge;
pub mod vgpgpu;
pub mod slurm;
pub mod glue;
pub mod twophase;
pub mod egi_snapshot;
