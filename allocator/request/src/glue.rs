//! The published side of the vocabulary: the GLUE key names a site's
//! `cder-glue-provider` writes and `cder-jdl list-match` reads back into
//! ClassAd offers. Both use these lists, so a key one side renames cannot
//! silently vanish from the other.
//!
//! A key is a CDER type's prefix (`GPGPU` for GPGPUs, design.md) followed by a
//! suffix: `GPGPUFreeInstances`, `GPGPUMainMemorySize`.

/// The prefix of GPGPU keys.
pub const GPGPU_PREFIX: &str = "GPGPU";

/// Devices installed.
pub const TOTAL_INSTANCES: &str = "TotalInstances";
/// Devices free now.
pub const FREE_INSTANCES: &str = "FreeInstances";
/// Devices in use now.
pub const USED_INSTANCES: &str = "UsedInstances";
/// Devices drained or unhealthy.
pub const OFFLINE_INSTANCES: &str = "OfflineInstances";

/// Live counts, in publication order (dynamic: they change with every job).
pub const COUNT_SUFFIXES: [&str; 4] = [TOTAL_INSTANCES, FREE_INSTANCES, USED_INSTANCES, OFFLINE_INSTANCES];

/// Shares of the GPUs offered as shares (SLURM `gres/shard`; none where no
/// GPU is shared): every share, those free now, those jobs hold.
pub const TOTAL_SHARES: &str = "TotalShares";
/// See [`TOTAL_SHARES`].
pub const FREE_SHARES: &str = "FreeShares";
/// See [`TOTAL_SHARES`].
pub const USED_SHARES: &str = "UsedShares";
/// The share counts, in publication order (dynamic), after [`COUNT_SUFFIXES`].
pub const SHARE_SUFFIXES: [&str; 3] = [TOTAL_SHARES, FREE_SHARES, USED_SHARES];

/// Devices per node of the ExecutionEnvironment (static).
pub const PER_NODE_SUFFIX: &str = "PerNode";

/// Device attributes, in publication order (design.md, "Contracts").
/// `Architecture` is the vendor's instruction-set name where it has no CUDA
/// compute capability (`gfx90a`, `Xe-HPC`); a string, absent when unknown.
pub const ATTRIBUTE_SUFFIXES: [&str; 10] = [
    "CUDAComputeCapability",
    "MainMemorySize",
    "MP",
    "CoresPerMP",
    "Cores",
    "ClockSpeed",
    "ECCSupport",
    "Vendor",
    "Model",
    ARCHITECTURE,
];

/// The device's architecture (see [`ATTRIBUTE_SUFFIXES`]).
pub const ARCHITECTURE: &str = "Architecture";
/// The device's vendor as published (`Nvidia`, `AMD`, `Intel`).
pub const VENDOR: &str = "Vendor";

/// Suffixes whose values are numbers (an offer refuses anything else).
pub const NUMERIC_SUFFIXES: [&str; 14] = [
    "TotalInstances",
    "FreeInstances",
    "UsedInstances",
    "OfflineInstances",
    "TotalShares",
    "FreeShares",
    "UsedShares",
    "PerNode",
    "CUDAComputeCapability",
    "MainMemorySize",
    "MP",
    "CoresPerMP",
    "Cores",
    "ClockSpeed",
];

/// Suffixes that count things: whole numbers, never negative.
pub const WHOLE_NUMBER_SUFFIXES: [&str; 11] = [
    "TotalInstances",
    "FreeInstances",
    "UsedInstances",
    "OfflineInstances",
    "TotalShares",
    "FreeShares",
    "UsedShares",
    "PerNode",
    "MP",
    "CoresPerMP",
    "Cores",
];

/// The vGPGPU counts of an ApplicationEnvironment (`rCUDA`, `VCL`; seed thesis Table 4.2).
pub const TOTAL_VGPGPU: &str = "TotalVGPGPU";
/// See [`TOTAL_VGPGPU`].
pub const FREE_VGPGPU: &str = "FreeVGPGPU";
/// Both vGPGPU keys, in publication order.
pub const VGPGPU_KEYS: [&str; 2] = [TOTAL_VGPGPU, FREE_VGPGPU];

/// A full key: `prefix` + `suffix`.
pub fn key(prefix: &str, suffix: &str) -> String {
    format!("{prefix}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_suffixes_are_the_counts_per_node_and_numeric_attributes() {
        let mut expected: Vec<&str> = COUNT_SUFFIXES.to_vec();
        expected.extend(SHARE_SUFFIXES);
        expected.push(PER_NODE_SUFFIX);
        expected.extend(
            ATTRIBUTE_SUFFIXES.iter().filter(|s| !matches!(**s, "ECCSupport" | "Vendor" | "Model" | "Architecture")),
        );
        assert_eq!(NUMERIC_SUFFIXES.to_vec(), expected);
        assert_eq!(key(GPGPU_PREFIX, COUNT_SUFFIXES[1]), "GPGPUFreeInstances");
        assert!(WHOLE_NUMBER_SUFFIXES.iter().all(|s| NUMERIC_SUFFIXES.contains(s)));
        assert!(COUNT_SUFFIXES.iter().chain(&SHARE_SUFFIXES).all(|s| WHOLE_NUMBER_SUFFIXES.contains(s)));
        assert_eq!(key(GPGPU_PREFIX, SHARE_SUFFIXES[1]), "GPGPUFreeShares");
    }
}
