//! GLUE 2.1 accelerator entities as phase-1 input.
//!
//! A site publishing with the provider's `glue21-accelerator` strategy
//! (deploy/bdii/GLUE21-accelerator.schema) describes its devices with GLUE
//! 2.1's own entities instead of CDER keys. Each is read here as the
//! `GLUE2Extension`s the class-extension strategy would have published,
//! under the same JDL names, so the rest of phase 1 treats both alike:
//!
//! * an `AcceleratorEnvironment` stands for Extensions of its
//!   ExecutionEnvironment: Vendor → `Vendor`, Model → `Model`, Memory →
//!   `MainMemorySize`, ClockSpeed → `ClockSpeed`, ComputeCapability →
//!   `CUDAComputeCapability` when it is a number (`8.0`), else
//!   `Architecture` (`gfx90a`, `Xe-HPC`), LogicalAccelerators → `PerNode`;
//! * a `ComputingShareAcceleratorInfo` stands for Extensions of its
//!   ComputingShare: FreeAcceleratorSlots → `FreeInstances`,
//!   UsedAcceleratorSlots → `UsedInstances`, MaxAcceleratorSlotsPerJob →
//!   `PerNode` (only where the service publishes no AcceleratorEnvironment
//!   of that type, whose per-EE count is the finer one);
//! * a `ComputingManagerAcceleratorInfo` lends its TotalAcceleratorSlots
//!   (else TotalPhysicalAccelerators) as `TotalInstances`, and its
//!   UsedAcceleratorSlots where a share gave none, to the shares of the
//!   same service that publish a ComputingShareAcceleratorInfo of that type
//!   (an offer is a share: GLUE 2.0 has no manager-level key).
//!
//! Type → prefix: `GPU` → `GPGPU` (cder's GPGPU prefix), any other type → its
//! upper-cased name (`FPGA`, `MIC`). An entity counts only inside a
//! ComputingService's DN and only for that service's own entities: the
//! Extensions are placed under the service the entity sits in, and phase 1
//! joins an Extension inside a service only to that service's entities, so
//! one service's AcceleratorInfo cannot lend counts to another's CE.

use std::collections::{BTreeMap, BTreeSet};

use cder_request::glue;

use crate::bdii::entry::{service_dn, Entry};

/// The discovery filter: every GLUE 2.1 accelerator entity of the grid. (A
/// BDII without the GLUE 2.1 schema answers it with nothing.)
pub const FILTER: &str =
    "(|(objectClass=GLUE2AcceleratorEnvironment)(objectClass=GLUE2ComputingShareAcceleratorInfo)(objectClass=GLUE2ComputingManagerAcceleratorInfo))";

/// The attributes [`FILTER`]'s search asks for.
pub const ATTRIBUTES: &[&str] = &[
    "GLUE2AcceleratorEnvironmentID",
    "GLUE2AcceleratorEnvironmentType",
    "GLUE2AcceleratorEnvironmentLogicalAccelerators",
    "GLUE2AcceleratorEnvironmentVendor",
    "GLUE2AcceleratorEnvironmentModel",
    "GLUE2AcceleratorEnvironmentClockSpeed",
    "GLUE2AcceleratorEnvironmentMemory",
    "GLUE2AcceleratorEnvironmentComputeCapability",
    "GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey",
    "GLUE2ComputingShareAcceleratorInfoID",
    "GLUE2ComputingShareAcceleratorInfoType",
    "GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots",
    "GLUE2ComputingShareAcceleratorInfoUsedAcceleratorSlots",
    "GLUE2ComputingShareAcceleratorInfoMaxAcceleratorSlotsPerJob",
    "GLUE2ComputingShareAcceleratorInfoComputingShareForeignKey",
    "GLUE2ComputingManagerAcceleratorInfoID",
    "GLUE2ComputingManagerAcceleratorInfoType",
    "GLUE2ComputingManagerAcceleratorInfoTotalPhysicalAccelerators",
    "GLUE2ComputingManagerAcceleratorInfoTotalAcceleratorSlots",
    "GLUE2ComputingManagerAcceleratorInfoUsedAcceleratorSlots",
    "GLUE2ComputingManagerAcceleratorInfoComputingManagerForeignKey",
];

/// GLUE 2.1 AcceleratorEnvironment attribute → CDER key suffix
/// (ComputeCapability: [`capability_suffix`]).
const KEYS: [(&str, &str); 6] = [
    ("GLUE2AcceleratorEnvironmentVendor", "Vendor"),
    ("GLUE2AcceleratorEnvironmentModel", "Model"),
    ("GLUE2AcceleratorEnvironmentMemory", "MainMemorySize"),
    ("GLUE2AcceleratorEnvironmentClockSpeed", "ClockSpeed"),
    ("GLUE2AcceleratorEnvironmentComputeCapability", "CUDAComputeCapability"),
    ("GLUE2AcceleratorEnvironmentLogicalAccelerators", glue::PER_NODE_SUFFIX),
];

/// The key a ComputeCapability is read as: a number (`8.0`) is CUDA's
/// compute capability; a name (`gfx90a`, `Xe-HPC`) is the architecture AMD
/// and Intel declare instead, as the provider publishes it.
fn capability_suffix(value: &str) -> &'static str {
    match crate::bdii::carrier::typed(value) {
        cder_classad::value::Value::Int(_) | cder_classad::value::Value::Real(_) => "CUDAComputeCapability",
        _ => glue::ARCHITECTURE,
    }
}

/// The GLUE 2.0 count suffixes the AcceleratorInfo counts are read as.
const TOTAL: &str = glue::COUNT_SUFFIXES[0];
const FREE: &str = glue::COUNT_SUFFIXES[1];
const USED: &str = glue::COUNT_SUFFIXES[2];

/// The CDER key prefix of a GLUE 2.1 accelerator type.
pub fn prefix(accelerator_type: &str) -> String {
    if accelerator_type.eq_ignore_ascii_case("GPU") {
        glue::GPGPU_PREFIX.to_string()
    } else {
        accelerator_type.to_ascii_uppercase()
    }
}

/// An RDN value with the characters RFC 4514 reserves escaped.
fn rdn_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, c) in v.chars().enumerate() {
        if matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=') || (i == 0 && matches!(c, '#' | ' ')) {
            out.push('\\');
        }
        out.push(c);
    }
    if out.ends_with(' ') {
        out.insert(out.len() - 1, '\\');
    }
    out
}

/// A synthesized Extension `key = value` of the entity `id` whose RDN
/// attribute is `rdn` (`GLUE2ResourceID`, `GLUE2ShareID`) in `service`.
fn extension(rdn: &str, id: &str, service: &str, key: &str, value: &str) -> Entry {
    let dn = format!("GLUE2ExtensionLocalID={key},{rdn}={},{service}", rdn_value(id));
    Entry::from_pairs(
        &dn,
        [
            ("objectClass", "GLUE2Extension"),
            ("GLUE2ExtensionKey", key),
            ("GLUE2ExtensionValue", value),
            ("GLUE2ExtensionEntityForeignKey", id),
        ],
    )
}

/// A manager's counts of one accelerator type.
#[derive(Default)]
struct ManagerCounts<'a> {
    total: Option<&'a str>,
    used: Option<&'a str>,
}

/// The Extensions the GLUE 2.1 entities of [`FILTER`] stand for, each
/// placed under its entity's DN in the same ComputingService (where the
/// provider puts EEs and shares) with that entity's ID as foreign key. An
/// entry without a type, a foreign key or a service above it stands for
/// nothing.
pub fn as_extensions(entries: Vec<Entry>) -> Vec<Entry> {
    let mut out = Vec::new();
    // (service, prefix) that describe devices per EE, and the managers' counts.
    let mut described: BTreeSet<(String, String)> = BTreeSet::new();
    let mut managers: BTreeMap<(String, String), ManagerCounts> = BTreeMap::new();
    let mut shares: Vec<(&Entry, &str, String, &str)> = Vec::new();
    for e in &entries {
        let Some(service) = service_dn(&e.dn) else {
            continue;
        };
        let owner = service.to_ascii_lowercase();
        if let Some(kind) = e.first("GLUE2AcceleratorEnvironmentType") {
            let Some(ee) = e.first("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey") else {
                continue;
            };
            let prefix = prefix(kind);
            described.insert((owner, prefix.clone()));
            for (attribute, suffix) in KEYS {
                if let Some(value) = e.first(attribute) {
                    let suffix = if suffix == "CUDAComputeCapability" { capability_suffix(value) } else { suffix };
                    out.push(extension("GLUE2ResourceID", ee, service, &glue::key(&prefix, suffix), value));
                }
            }
        } else if let Some(kind) = e.first("GLUE2ComputingManagerAcceleratorInfoType") {
            let counts = managers.entry((owner, prefix(kind))).or_default();
            counts.total = e
                .first("GLUE2ComputingManagerAcceleratorInfoTotalAcceleratorSlots")
                .or_else(|| e.first("GLUE2ComputingManagerAcceleratorInfoTotalPhysicalAccelerators"));
            counts.used = e.first("GLUE2ComputingManagerAcceleratorInfoUsedAcceleratorSlots");
        } else if let (Some(kind), Some(share)) = (
            e.first("GLUE2ComputingShareAcceleratorInfoType"),
            e.first("GLUE2ComputingShareAcceleratorInfoComputingShareForeignKey"),
        ) {
            shares.push((e, service, prefix(kind), share));
        }
    }
    for (e, service, prefix, share) in shares {
        let owner = (service.to_ascii_lowercase(), prefix);
        let manager = managers.get(&owner);
        let prefix = &owner.1;
        let used =
            e.first("GLUE2ComputingShareAcceleratorInfoUsedAcceleratorSlots").or_else(|| manager.and_then(|m| m.used));
        let per_job = e
            .first("GLUE2ComputingShareAcceleratorInfoMaxAcceleratorSlotsPerJob")
            .filter(|_| !described.contains(&owner));
        let counts = [
            (TOTAL, manager.and_then(|m| m.total)),
            (FREE, e.first("GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots")),
            (USED, used),
            (glue::PER_NODE_SUFFIX, per_job),
        ];
        for (suffix, value) in counts {
            if let Some(value) = value {
                out.push(extension("GLUE2ShareID", share, service, &glue::key(prefix, suffix), value));
            }
        }
    }
    out
}

/// Adds the Extensions [`as_extensions`] makes of `entries` to the
/// Extensions a BDII published, leaving out those a site publishing both
/// ways (class-extension and glue21-accelerator) already has with the same
/// value: the same key twice on one entity would make it malformed.
pub fn add_extensions(published: &mut Vec<Entry>, entries: Vec<Entry>) {
    let have: BTreeSet<(String, String)> = published
        .iter()
        .filter_map(|x| Some((x.dn.to_ascii_lowercase(), x.first("GLUE2ExtensionValue")?.to_string())))
        .collect();
    for x in as_extensions(entries) {
        let value = x.first("GLUE2ExtensionValue").unwrap_or_default().to_string();
        if !have.contains(&(x.dn.to_ascii_lowercase(), value)) {
            published.push(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accelerator_environment_reads_as_extensions_of_its_ee() {
        let ae = Entry::from_pairs(
            "GLUE2AcceleratorEnvironmentID=ee1_gpgpu,GLUE2ServiceID=ce1,GLUE2GroupID=resource,o=glue",
            [
                ("GLUE2AcceleratorEnvironmentID", "ee1_gpgpu"),
                ("GLUE2AcceleratorEnvironmentType", "GPU"),
                ("GLUE2AcceleratorEnvironmentLogicalAccelerators", "4"),
                ("GLUE2AcceleratorEnvironmentModel", "Tesla K20m"),
                ("GLUE2AcceleratorEnvironmentMemory", "4800"),
                ("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey", "ee1"),
            ],
        );
        let orphan =
            Entry::from_pairs("GLUE2AcceleratorEnvironmentID=x,o=glue", [("GLUE2AcceleratorEnvironmentType", "GPU")]);
        let x = as_extensions(vec![ae, orphan]);
        let pairs: Vec<(&str, &str, &str)> = x
            .iter()
            .map(|e| {
                (
                    e.first("GLUE2ExtensionKey").unwrap(),
                    e.first("GLUE2ExtensionValue").unwrap(),
                    e.first("GLUE2ExtensionEntityForeignKey").unwrap(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [("GPGPUModel", "Tesla K20m", "ee1"), ("GPGPUMainMemorySize", "4800", "ee1"), ("GPGPUPerNode", "4", "ee1")]
        );
        assert_eq!(
            x[0].dn,
            "GLUE2ExtensionLocalID=GPGPUModel,GLUE2ResourceID=ee1,GLUE2ServiceID=ce1,GLUE2GroupID=resource,o=glue"
        );
        assert_eq!(prefix("FPGA"), "FPGA");
    }

    #[test]
    fn a_compute_capability_reads_as_cuda_s_when_a_number_else_as_the_architecture() {
        let ae = |ee: &str, vendor: &str, capability: &str| {
            Entry::from_pairs(
                &format!("GLUE2AcceleratorEnvironmentID={ee}_gpu,GLUE2ServiceID=ce1,GLUE2GroupID=resource,o=glue"),
                [
                    ("GLUE2AcceleratorEnvironmentType", "GPU"),
                    ("GLUE2AcceleratorEnvironmentVendor", vendor),
                    ("GLUE2AcceleratorEnvironmentComputeCapability", capability),
                    ("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey", ee),
                ],
            )
        };
        let x = as_extensions(vec![ae("a", "Nvidia", "8.0"), ae("b", "AMD", "gfx90a"), ae("c", "Intel", "Xe-HPC")]);
        let pairs: Vec<(&str, &str, &str)> = x
            .iter()
            .map(|e| {
                (
                    e.first("GLUE2ExtensionEntityForeignKey").unwrap(),
                    e.first("GLUE2ExtensionKey").unwrap(),
                    e.first("GLUE2ExtensionValue").unwrap(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                ("a", "GPGPUVendor", "Nvidia"),
                ("a", "GPGPUCUDAComputeCapability", "8.0"),
                ("b", "GPGPUVendor", "AMD"),
                ("b", "GPGPUArchitecture", "gfx90a"),
                ("c", "GPGPUVendor", "Intel"),
                ("c", "GPGPUArchitecture", "Xe-HPC"),
            ]
        );
    }

    const S1: &str = "GLUE2ServiceID=ce1,GLUE2GroupID=resource,o=glue";
    const S2: &str = "GLUE2ServiceID=evil,GLUE2GroupID=resource,o=glue";

    fn share_info(service: &str, id: &str, kind: &str, share: &str, free: &str) -> Entry {
        Entry::from_pairs(
            &format!("GLUE2ComputingShareAcceleratorInfoID={id},{service}"),
            [
                ("GLUE2ComputingShareAcceleratorInfoID", id),
                ("GLUE2ComputingShareAcceleratorInfoType", kind),
                ("GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots", free),
                ("GLUE2ComputingShareAcceleratorInfoUsedAcceleratorSlots", "5"),
                ("GLUE2ComputingShareAcceleratorInfoMaxAcceleratorSlotsPerJob", "4"),
                ("GLUE2ComputingShareAcceleratorInfoComputingShareForeignKey", share),
            ],
        )
    }

    fn manager_info(service: &str, kind: &str, total: &str) -> Entry {
        Entry::from_pairs(
            &format!("GLUE2ComputingManagerAcceleratorInfoID=m_{kind},{service}"),
            [
                ("GLUE2ComputingManagerAcceleratorInfoID", format!("m_{kind}").as_str()),
                ("GLUE2ComputingManagerAcceleratorInfoType", kind),
                ("GLUE2ComputingManagerAcceleratorInfoTotalPhysicalAccelerators", "4"),
                ("GLUE2ComputingManagerAcceleratorInfoTotalAcceleratorSlots", total),
                ("GLUE2ComputingManagerAcceleratorInfoUsedAcceleratorSlots", "5"),
                ("GLUE2ComputingManagerAcceleratorInfoComputingManagerForeignKey", "m"),
            ],
        )
    }

    fn gpu_environment(service: &str, ee: &str) -> Entry {
        Entry::from_pairs(
            &format!("GLUE2AcceleratorEnvironmentID={ee}_gpgpu,{service}"),
            [
                ("GLUE2AcceleratorEnvironmentID", format!("{ee}_gpgpu").as_str()),
                ("GLUE2AcceleratorEnvironmentType", "GPU"),
                ("GLUE2AcceleratorEnvironmentLogicalAccelerators", "2"),
                ("GLUE2AcceleratorEnvironmentVendor", "Nvidia"),
                ("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey", ee),
            ],
        )
    }

    fn keys_of<'a>(x: &'a [Entry], dn_suffix: &str) -> Vec<(&'a str, &'a str)> {
        let mut v: Vec<(&str, &str)> = x
            .iter()
            .filter(|e| e.dn.ends_with(dn_suffix))
            .map(|e| (e.first("GLUE2ExtensionKey").unwrap(), e.first("GLUE2ExtensionValue").unwrap()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn accelerator_info_counts_read_as_extensions_of_the_services_own_shares() {
        let x = as_extensions(vec![
            gpu_environment(S1, "ee1"),
            manager_info(S1, "GPU", "16"),
            share_info(S1, "q1_GPU", "GPU", "q1", "10"),
            // Another service: an FPGA share without AcceleratorEnvironment or manager info.
            share_info(S2, "q9_FPGA", "FPGA", "q9", "3"),
        ]);
        // Share counts under the GLUE 2.0 names; the manager's total; PerNode stays the EE's.
        assert_eq!(
            keys_of(&x, &format!("GLUE2ShareID=q1,{S1}")),
            [("GPGPUFreeInstances", "10"), ("GPGPUTotalInstances", "16"), ("GPGPUUsedInstances", "5")]
        );
        assert_eq!(
            keys_of(&x, &format!("GLUE2ResourceID=ee1,{S1}")),
            [("GPGPUPerNode", "2"), ("GPGPUVendor", "Nvidia")]
        );
        // No AcceleratorEnvironment: MaxAcceleratorSlotsPerJob is the PerNode; S1's manager lends nothing to S2.
        assert_eq!(
            keys_of(&x, &format!("GLUE2ShareID=q9,{S2}")),
            [("FPGAFreeInstances", "3"), ("FPGAPerNode", "4"), ("FPGAUsedInstances", "5")]
        );
        assert!(x.iter().all(|e| e.first("GLUE2ExtensionEntityForeignKey").is_some()));
        // Outside any service, or without a share foreign key: nothing.
        let mut loose = share_info("o=glue", "q1_GPU", "GPU", "q1", "10");
        loose.dn = "GLUE2ComputingShareAcceleratorInfoID=q1_GPU,o=glue".into();
        assert!(as_extensions(vec![loose]).is_empty());
    }

    #[test]
    fn an_extension_published_both_ways_is_kept_once() {
        let mut published = vec![Entry::from_pairs(
            &format!("GLUE2ExtensionLocalID=GPGPUVendor,GLUE2ResourceID=ee1,{S1}"),
            [
                ("GLUE2ExtensionKey", "GPGPUVendor"),
                ("GLUE2ExtensionValue", "Nvidia"),
                ("GLUE2ExtensionEntityForeignKey", "ee1"),
            ],
        )];
        add_extensions(&mut published, vec![gpu_environment(S1, "ee1")]);
        let keys: Vec<&str> = published.iter().map(|e| e.first("GLUE2ExtensionKey").unwrap()).collect();
        assert_eq!(keys, ["GPGPUVendor", "GPGPUPerNode"]);
        assert_eq!(rdn_value("a,b=c "), "a\\,b\\=c\\ ");
    }

    /// Two services, each with its share; the hostile one publishes share
    /// AcceleratorInfo naming the other's share ID. The victim's offer keeps
    /// its own counts (no lent ones, no "given twice" that would drop it).
    #[test]
    fn a_hostile_services_accelerator_info_lends_nothing_to_another_ce() {
        use crate::bdii::{build_offers, Fetched};
        use cder_classad::ast::Expr;
        use cder_classad::value::Value;
        let share = |service: &str, id: &str, host: &str| {
            Entry::from_pairs(
                &format!("GLUE2ShareID={id},{service}"),
                [
                    ("objectClass", "GLUE2ComputingShare"),
                    ("GLUE2ShareID", id),
                    ("GLUE2ComputingShareMappingQueue", "gpu"),
                    ("GLUE2ComputingShareExecutionEnvironmentForeignKey", "ee1"),
                    ("GLUE2EntityOtherInfo", format!("CREAMCEId={host}:8443/cream-slurm-gpu").as_str()),
                ],
            )
        };
        let manager = |service: &str| {
            Entry::from_pairs(
                &format!("GLUE2ManagerID=m,{service}"),
                [("objectClass", "GLUE2ComputingManager"), ("GLUE2ManagerID", "m")],
            )
        };
        let endpoint = |service: &str, host: &str| {
            Entry::from_pairs(
                &format!("GLUE2EndpointID={host},{service}"),
                [
                    ("objectClass", "GLUE2ComputingEndpoint"),
                    ("GLUE2EndpointID", host),
                    ("GLUE2EndpointURL", format!("https://{host}:8443/ce-cream/services").as_str()),
                ],
            )
        };
        let fetched = |hostile: bool| {
            let mut entries = vec![gpu_environment(S1, "ee1"), share_info(S1, "q1_GPU", "GPU", "q1", "3")];
            if hostile {
                entries.extend([
                    share_info(S2, "q1_GPU", "GPU", "q1", "64"),
                    share_info(S2, "q1_FPGA", "FPGA", "q1", "8"),
                    gpu_environment(S2, "ee1"),
                ]);
            }
            let mut ee = Entry::from_pairs(
                &format!("GLUE2ResourceID=ee1,{S1}"),
                [("objectClass", "GLUE2ExecutionEnvironment"), ("GLUE2ResourceID", "ee1")],
            );
            ee.set("glue2executionenvironmentcomputingmanagerforeignkey", vec!["m".into()]);
            Fetched {
                carriers: vec![ee, share(S1, "q1", "ce1.example.org"), share(S2, "q2", "evil.example.net")],
                extensions: as_extensions(entries),
                managers: vec![manager(S1), manager(S2)],
                endpoints: vec![endpoint(S1, "ce1.example.org"), endpoint(S2, "evil.example.net")],
                ..Default::default()
            }
        };
        let prefixes = vec!["GPGPU".to_string(), "FPGA".to_string()];
        for hostile in [false, true] {
            let o = build_offers(&fetched(hostile), &prefixes, None);
            assert!(o.warnings.is_empty(), "{:?}", o.warnings);
            let ce1: Vec<_> = o.offers.iter().filter(|x| x.ce_id.starts_with("ce1.example.org")).collect();
            assert_eq!(ce1.len(), 1, "{:?}", o.offers);
            let ad = &ce1[0].ad;
            assert!(matches!(ad.lookup("GPGPUFreeInstances"), Some(Expr::Lit(Value::Int(3)))), "{ad:?}");
            assert!(ad.lookup("FPGAFreeInstances").is_none(), "lent: {ad:?}");
        }
    }
}
