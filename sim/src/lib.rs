//! `cder-sim`: replays real workloads through cder's own placement code,
//! to answer an admin's "what if" before production changes: what if we
//! turn on 4 shares per GPU, or local-first vGPGPU allocation?
//!
//! A seeded, single-threaded discrete-event loop with integer times
//! ([`engine`], [`time`]) drives a model of the batch system ([`batch`]:
//! FCFS, list, EASY backfilling; [`conservative`]: conservative
//! backfilling; [`moldable`]: the TORQUE-like, MCT and molding schedulers
//! of seed 001; [`sharing`]: time-shared GPUs of seed 004; [`fill`]: the
//! fill-the-cluster replay of Weng et al.). Every placement question is
//! asked of cder's own code, in-process ([`place`], [`policy`]): cderd's
//! device selection (`cder_ledger::policy`), the vGPGPU registry's backend
//! policies (`cder_registry::policy`) and phase 1's ClassAd Rank
//! (`cder_classad`). No policy is copied here.
//!
//! Workloads come from SWF, Alibaba's CSV or `sacct -P` output
//! ([`read`]); [`seeds`] reproduces the seeds' results; [`report`] prints
//! the side-by-side table, JSON and SVG plots.
//!
//! ```
//! use cder_sim::{batch, cluster::Cluster, policy::Policy, service::Recorded, time::seconds};
//! use cder_sim::workload::{Job, Request};
//!
//! let cluster = Cluster::uniform("wn", 2, 8, 2, "GTS450");
//! let job = |id: &str, gpus| Job {
//!     id: id.into(),
//!     submit: 0,
//!     run: seconds(60),
//!     limit: None,
//!     request: Request { nodes: 1, cores: 2, gpus, ..Request::default() },
//!     class: 0,
//! };
//! let jobs = vec![job("a", 1), job("b", 1), job("c", 2)];
//! let defaults = Policy::from_scheduler(&cluster.scheduler, "default").unwrap();
//! for words in ["least-loaded+physical", "least-loaded+local-first"] {
//!     let policy = Policy::parse(words, &defaults).unwrap();
//!     let outcome = batch::replay(&cluster, &jobs, &policy, &Recorded, 1, &mut |_, _| {}).unwrap();
//!     // a and b on one node each: physically, c waits for a node with two
//!     // free GPUs; with vGPGPUs it takes one on each node at once.
//!     let makespan = outcome.summary(cluster.gpus()).makespan_s;
//!     assert_eq!(makespan, if words.ends_with("physical") { 120.0 } else { 60.0 });
//! }
//! ```

#![deny(missing_docs)]

pub mod batch;
pub mod cluster;
pub mod conservative;
pub mod engine;
pub mod fill;
pub mod metrics;
pub mod moldable;
pub mod place;
pub mod policy;
pub mod read;
pub mod report;
pub mod rng;
pub mod seeds;
pub mod service;
pub mod sharing;
pub mod state;
pub mod time;
pub mod workload;
