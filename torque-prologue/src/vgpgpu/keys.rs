//! The vGPGPU job keys and the node name the monitor's requests go under:
//! what the submit filter, the monitor and the job starter share.

use cder_request::keys::{VIRTUAL_GPGPU_METHOD, VIRTUAL_GPGPU_PER_NODE, VIRTUAL_GPGPU_TYPE};

/// Every vGPGPU key a `#CDER` line may carry.
pub const KEYS: [&str; 3] = [VIRTUAL_GPGPU_PER_NODE, VIRTUAL_GPGPU_METHOD, VIRTUAL_GPGPU_TYPE];
/// The node name the monitor's requests are recorded under; the job's own
/// hooks ask with the same key and get the same backends (requests are
/// idempotent per job and node).
pub const MONITOR_NODE: &str = "torque-monitor";
