//! The integration-test harness: starts real components on loopback in a
//! temp dir and stops them when dropped.

pub mod bdii;
pub mod ldap;
pub mod slurm;
pub mod glue;
