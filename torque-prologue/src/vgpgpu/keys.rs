//! The vGPGPU job keys and the node name the monitor's requests go under:
//! what the submit filter, the monitor and the job starter share.

/// The job keys (thesis Table 4.1): backends per node.
pub const PER_NODE_KEY: &str = "VirtualGPGPUPerNode";
/// The method (rCUDA or VCL).
pub const METHOD_KEY: &str = "VirtualGPGPUMethod";
/// The method, by its older name.
pub const TYPE_KEY: &str = "VirtualGPGPUType";
/// Every vGPGPU key a `#CDER` line may carry.
pub const KEYS: [&str; 3] = [PER_NODE_KEY, METHOD_KEY, TYPE_KEY];
/// The node name the monitor's requests are recorded under; the job's own
/// hooks ask with the same key and get the same backends (requests are
/// idempotent per job and node).
pub const MONITOR_NODE: &str = "torque-monitor";
