//! `cder-exporter`: each node's OpenMetrics endpoint for Prometheus.
//!
//! It asks cderd over its socket (`status` and `usage`) at every scrape and
//! renders the answer ([`metrics`]) in the names of NVIDIA's dcgm-exporter
//! (`DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED`, labels `gpu`, `UUID`,
//! `device`, `modelName`, `Hostname`, `hpc_job`), so that Grafana boards
//! made for it read them, plus cder's own series. The HTTP side ([`http`])
//! holds a bounded number of connections, each with deadlines.

#![deny(missing_docs)]

pub mod http;
pub mod metrics;
