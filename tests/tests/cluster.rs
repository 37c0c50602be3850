//! The cross-crate integration tests in one binary, one module per area
//! (a binary per file made linking most of a test build):
//! `cargo test -p cder-tests --test cluster slurm_trust::` runs one area.
//! Tests that start a SLURM cluster take `cder_tests::slurm::serial()`, so
//! one cluster at a time runs on the machine.

mod adversary_campaign;
mod allocator_reconcile_slurm;
mod arc_ce;
mod arc_rte;
mod bdii_chain;
mod blah_dropins;
mod cluster_glue;
mod cluster_reconcile;
mod cluster_slurm;
mod cluster_vgpgpu;
mod cluster_vo_shares;
mod faults_campaign;
mod glue21_accelerator;
mod glue_bdii;
mod glue_faults;
mod glue_heterogeneous;
mod glue_registry;
mod glue_schema;
mod glue_slurm;
mod glue_validator;
mod ldap_capacity;
mod sharing_discovery;
mod slurm_admin_comment;
mod slurm_amd;
mod slurm_drain;
mod slurm_extern;
mod slurm_faults;
mod slurm_mig;
mod slurm_plugins;
mod slurm_request_forms;
mod slurm_shares;
mod slurm_stress;
mod slurm_trust;
mod twophase_bad_input;
mod twophase_bdii;
mod twophase_faults;
mod twophase_index;
mod twophase_index_oracle;
mod twophase_lrms;
mod twophase_ownership;
mod twophase_shapes;
mod twophase_slurm;
mod twophase_snapshot;
mod twophase_submit;
mod twophase_vendors;
mod vgpgpu_cli;
mod vgpgpu_factory;
mod vgpgpu_faults;
mod vgpgpu_grid;
mod vgpgpu_registry;
mod vgpgpu_registry_hardening;
mod vgpgpu_slurm;
mod vgpgpu_state_hardening;
mod vgpgpu_torque;
