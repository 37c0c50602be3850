//! The GLUE 1.3 attribute names an offer carries beside GLUE 2.0's, and the
//! GLUE 2.0 attribute each is made from: shared by the query (what to fetch)
//! and the offer builder (what to write).

/// GLUE 1.3 names of share counts (GLUE 2.0 source).
pub(crate) const SHARE_COUNTS: &[(&str, &str)] = &[
    ("GlueCEStateFreeCPUs", "GLUE2ComputingShareFreeSlots"),
    ("GlueCEStateFreeJobSlots", "GLUE2ComputingShareFreeSlots"),
    ("GlueCEStateRunningJobs", "GLUE2ComputingShareRunningJobs"),
    ("GlueCEStateWaitingJobs", "GLUE2ComputingShareWaitingJobs"),
    ("GlueCEStateTotalJobs", "GLUE2ComputingShareTotalJobs"),
    ("GlueCEStateEstimatedResponseTime", "GLUE2ComputingShareEstimatedAverageWaitingTime"),
    ("GlueCEStateWorstResponseTime", "GLUE2ComputingShareEstimatedWorstWaitingTime"),
    ("GlueCEPolicyMaxSlotsPerJob", "GLUE2ComputingShareMaxSlotsPerJob"),
];
/// GLUE 2.0 times are seconds, GLUE 1.3 policy times minutes.
pub(crate) const SHARE_MINUTES: &[(&str, &str)] = &[
    ("GlueCEPolicyMaxWallClockTime", "GLUE2ComputingShareMaxWallTime"),
    ("GlueCEPolicyMaxCPUTime", "GLUE2ComputingShareMaxCPUTime"),
];
pub(crate) const SHARE_STRINGS: &[(&str, &str)] =
    &[("GlueCEStateStatus", "GLUE2ComputingShareServingState"), ("GlueCEName", "GLUE2ComputingShareMappingQueue")];
pub(crate) const EE_COUNTS: &[(&str, &str)] = &[
    ("GlueHostMainMemoryRAMSize", "GLUE2ExecutionEnvironmentMainMemorySize"),
    ("GlueHostMainMemoryVirtualSize", "GLUE2ExecutionEnvironmentVirtualMemorySize"),
    ("GlueSubClusterLogicalCPUs", "GLUE2ExecutionEnvironmentLogicalCPUs"),
    ("GlueSubClusterPhysicalCPUs", "GLUE2ExecutionEnvironmentPhysicalCPUs"),
    ("GlueHostProcessorClockSpeed", "GLUE2ExecutionEnvironmentCPUClockSpeed"),
];
pub(crate) const EE_STRINGS: &[(&str, &str)] = &[
    ("GlueHostArchitecturePlatformType", "GLUE2ExecutionEnvironmentPlatform"),
    ("GlueHostOperatingSystemName", "GLUE2ExecutionEnvironmentOSName"),
    ("GlueHostOperatingSystemRelease", "GLUE2ExecutionEnvironmentOSVersion"),
    ("GlueHostProcessorModel", "GLUE2ExecutionEnvironmentCPUModel"),
    ("GlueHostProcessorVendor", "GLUE2ExecutionEnvironmentCPUVendor"),
    ("GlueSubClusterUniqueID", "GLUE2ResourceID"),
];

/// The GLUE 2.0 attributes an offer attribute is made from: itself for a
/// GLUE 2.0 name, the source of a GLUE 1.3 name, nothing for the rest.
pub fn glue2_sources(name: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = [SHARE_COUNTS, SHARE_MINUTES, SHARE_STRINGS, EE_COUNTS, EE_STRINGS]
        .iter()
        .flat_map(|t| t.iter())
        .filter(|(g13, _)| g13.eq_ignore_ascii_case(name))
        .map(|(_, g2)| *g2)
        .collect();
    if name.eq_ignore_ascii_case("GlueCEInfoLRMSType") {
        out.push("GLUE2ManagerProductName");
    }
    out
}
