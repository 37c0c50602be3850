//! The seeds' scheduling results, reproduced: each module builds the
//! seed's platform and workload, replays it through cder's own policies,
//! and returns the seed's figures beside the simulator's
//! (docs/simulation.md has the tables; `sim/tests/seeds.rs` checks them).
//!
//! * [`walsh`] — the seed thesis, §4.4.2, Table 4.5: physical GPUs vs
//!   vGPGPUs at random vs local first.

//! * [`mendonca`] — seed 002, §4.6: conservative backfilling with basic
//!   vs best-effort-local allocation on the Curie extract.

//! * [`ravi`] — seed 001, §IV-D: TORQUE-like, MCT and FMS on moldable
//!   CPU/GPU jobs (Fig. 2's times).

//! * [`becchi`] — seed 004, §3.7.1.4: GPUs shared 4 ways vs serialized
//!   under TORQUE, and inter-node offloading.

//! * [`weng`] — sharing on Alibaba's 2023 trace: the share of GPU
//!   requests left unplaced as the cluster fills, cder's placement against
//!   best fit and random fit.

pub mod becchi;
pub mod mendonca;
pub mod ravi;
pub mod walsh;
pub mod weng;
