//! The cderd node protocol (version 1): request and reply types, the strict
//! request parser the daemon uses, and a blocking client.
//!
//! The wire format is specified in `docs/protocol.md`: newline-delimited JSON
//! over a Unix stream socket, every request carrying `"v": 1` and an `"op"`.
//! This crate is deliberately light (serde, serde_json, thiserror and
//! cder-model only) because the SLURM plugin, loaded into slurmd and
//! slurmstepd, and the TORQUE hooks link it.
//!
//! Typical use from a batch-system hook:
//!
//! ```no_run
//! use std::time::Duration;
//! use cder_protocol::{AllocRequest, Client, ErrorCode};
//!
//! let job = "torque:17.ce.example.org".parse()?;
//! let mut cderd = Client::connect(cder_model::DEFAULT_SOCKET, Duration::from_secs(10))?;
//! match cderd.alloc(&AllocRequest::new(job, 1000, 1)) {
//!     Ok(allocation) => print!("{}", allocation.env.to_lines()),
//!     Err(e) if e.code() == Some(ErrorCode::Insufficient) => eprintln!("{e}"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod client;
// A unit test module, not an integration test binary: each binary is a link
// (docs/testing.md, "Test binaries").
#[cfg(test)]
mod fuzz_requests;
pub mod reply;
pub mod request;

pub use client::{Client, ClientError, MAX_REPLY_BYTES};
pub use reply::{
    error_line, ok_line, parse_reply, Accounting, AccountingRecord, AllocatedDevice, Allocation, Confined, DeviceState,
    DeviceStatus, DeviceUsage, DrainRecord, ErrorCode, ErrorReply, IdleDevice, MonthUsage, Pong, ProcessUsage,
    Reconciled, Released, ShareStatus, Status, TypeCounts, Usage, UsageSample, Utilisation, REFUSED_TO_RECORD,
};
pub use request::{
    AccountingRequest, AllocRequest, DeviceRequest, DrainRequest, EnvRequest, JobRequest, ReconcileRequest, Request,
    UsageRequest, DEFAULT_TYPE, MAX_COUNT, MAX_RECENT_SAMPLES, MAX_TEXT_LEN, MAX_UNIX_TIME, MAX_WAIT_MS,
};

/// The protocol version this crate speaks (`"v": 1`).
pub const PROTOCOL_VERSION: u32 = 1;
