//! TORQUE integration: pbs_mom hooks, the job starter, `cder-env` and the
//! qsub submit filter.
