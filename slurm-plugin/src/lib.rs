//! SLURM integration: the SPANK plugin `spank_cder.so` (node side) and the
//! job_submit plugin `job_submit_cder.so` (controller side).
