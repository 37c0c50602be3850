//! GLUE's spelling of the lower-cased attribute names that entries keep
//! ([`crate::bdii::entry`] folds them): offers and warnings show
//! `GLUE2ComputingShareFreeSlots`, not `glue2computingsharefreeslots`.

use foldhash::HashMap;

/// `glue2computingsharefreeslots` → `GLUE2ComputingShareFreeSlots` for the attributes offers commonly show.
pub fn glue2_spelling(lower: &str) -> String {
    const KNOWN: &[&str] = &[
        "GLUE2ShareID",
        "GLUE2ShareServiceForeignKey",
        "GLUE2ShareEndpointForeignKey",
        "GLUE2ShareResourceForeignKey",
        "GLUE2ComputingShareMappingQueue",
        "GLUE2ComputingShareServingState",
        "GLUE2ComputingShareFreeSlots",
        "GLUE2ComputingShareUsedSlots",
        "GLUE2ComputingShareRunningJobs",
        "GLUE2ComputingShareWaitingJobs",
        "GLUE2ComputingShareTotalJobs",
        "GLUE2ComputingShareEstimatedAverageWaitingTime",
        "GLUE2ComputingShareEstimatedWorstWaitingTime",
        "GLUE2ComputingShareMaxWallTime",
        "GLUE2ComputingShareMaxCPUTime",
        "GLUE2ComputingShareMaxMainMemory",
        "GLUE2ComputingShareMaxSlotsPerJob",
        "GLUE2ComputingShareExecutionEnvironmentForeignKey",
        "GLUE2ComputingShareComputingServiceForeignKey",
        "GLUE2ComputingShareComputingEndpointForeignKey",
        "GLUE2ResourceID",
        "GLUE2ResourceManagerForeignKey",
        "GLUE2ExecutionEnvironmentPlatform",
        "GLUE2ExecutionEnvironmentTotalInstances",
        "GLUE2ExecutionEnvironmentUsedInstances",
        "GLUE2ExecutionEnvironmentUnavailableInstances",
        "GLUE2ExecutionEnvironmentMainMemorySize",
        "GLUE2ExecutionEnvironmentVirtualMemorySize",
        "GLUE2ExecutionEnvironmentOSFamily",
        "GLUE2ExecutionEnvironmentOSName",
        "GLUE2ExecutionEnvironmentOSVersion",
        "GLUE2ExecutionEnvironmentLogicalCPUs",
        "GLUE2ExecutionEnvironmentPhysicalCPUs",
        "GLUE2ExecutionEnvironmentCPUModel",
        "GLUE2ExecutionEnvironmentCPUVendor",
        "GLUE2ExecutionEnvironmentCPUClockSpeed",
        "GLUE2ExecutionEnvironmentConnectivityIn",
        "GLUE2ExecutionEnvironmentConnectivityOut",
        "GLUE2ExecutionEnvironmentComputingManagerForeignKey",
        "GLUE2EntityName",
        "GLUE2EntityCreationTime",
        "GLUE2EntityValidity",
    ];
    spelling(KNOWN, lower, &GLUE2_SPELLINGS)
}

static GLUE2_SPELLINGS: std::sync::OnceLock<HashMap<String, &'static str>> = std::sync::OnceLock::new();
static GLUE13_SPELLINGS: std::sync::OnceLock<HashMap<String, &'static str>> = std::sync::OnceLock::new();

/// GLUE's spelling of a lower-cased attribute name (a map: offers have tens of attributes each, grids 10^4 offers).
fn spelling(
    known: &'static [&'static str],
    lower: &str,
    map: &std::sync::OnceLock<HashMap<String, &'static str>>,
) -> String {
    let map = map.get_or_init(|| known.iter().map(|k| (k.to_ascii_lowercase(), *k)).collect());
    map.get(lower).map(|k| k.to_string()).unwrap_or_else(|| lower.to_string())
}

/// `gluecestatefreecpus` → `GlueCEStateFreeCPUs` for the GLUE 1.3 names offers show.
pub fn glue13_spelling(lower: &str) -> String {
    const KNOWN: &[&str] = &[
        "GlueCEUniqueID",
        "GlueCEName",
        "GlueCEInfoHostName",
        "GlueCEInfoLRMSType",
        "GlueCEInfoTotalCPUs",
        "GlueCEStateFreeCPUs",
        "GlueCEStateFreeJobSlots",
        "GlueCEStateRunningJobs",
        "GlueCEStateWaitingJobs",
        "GlueCEStateTotalJobs",
        "GlueCEStateStatus",
        "GlueCEStateEstimatedResponseTime",
        "GlueCEStateWorstResponseTime",
        "GlueCEPolicyMaxWallClockTime",
        "GlueCEPolicyMaxCPUTime",
        "GlueCEAccessControlBaseRule",
        "GlueSubClusterUniqueID",
        "GlueHostMainMemoryRAMSize",
        "GlueHostArchitecturePlatformType",
    ];
    spelling(KNOWN, lower, &GLUE13_SPELLINGS)
}
