//! The GLUE 2.0 information provider: publishes a site's CDERs to the BDII.
//!
//! `cder-glue-provider` is a GIP provider: `bdii-update` runs it from its
//! provider directory and loads the LDIF it prints. It publishes what the
//! site's CDERs are (static: model, memory, compute capability …) and how
//! many are free right now (dynamic: from cderd, SLURM or TORQUE), by the
//! strategies of the seed thesis (chapter 3) — see [`strategy`].
//!
//! The pipeline is: [`config::ProviderConfig`] → [`site::node_groups`]
//! (static config or this node's inventory) → a [`sources::CountSource`]
//! and a [`sources::VirtualGpgpuSource`] → [`strategy::render`] →
//! [`ldif::write`] (or [`json::write`], GLUE 2 in JSON, from the same
//! entries). All output is built in memory; the binary writes it in
//! one go only when everything succeeded, so `bdii-update` never reads half
//! an entry.
//!
//! ```no_run
//! use cder_glue_provider::{config::ProviderConfig, publish, sources, strategy::Strategy};
//! let config = ProviderConfig::load(None)?;
//! let counts = sources::from_config(&config);
//! let vgpus = sources::StaticVirtual::from_config(&config.virtual_environments);
//! let ldif = publish(&config, counts.as_ref(), &vgpus, &[Strategy::AttributeExtension], 1_700_000_000)?;
//! print!("{ldif}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod arc;
pub mod config;
pub mod error;
pub mod glue21;
pub mod json;
pub mod ldif;
pub mod shares;
pub mod site;
pub mod sources;
pub mod strategy;

pub use config::ProviderConfig;
pub use error::ProviderError;

/// Gathers everything and renders the LDIF for `strategies`, with
/// `GLUE2EntityCreationTime` set from `now` (unix seconds).
pub fn publish(
    config: &ProviderConfig,
    counts: &dyn sources::CountSource,
    virtual_gpgpus: &dyn sources::VirtualGpgpuSource,
    strategies: &[strategy::Strategy],
    now: u64,
) -> Result<String, ProviderError> {
    let snapshot = snapshot(config, counts, virtual_gpgpus, now)?;
    Ok(ldif::write(&strategy::render(config, &snapshot, strategies)?))
}

/// Like [`publish`], but the GLUE 2 entities in the OGF JSON rendering
/// ([`json`]) instead of LDIF; GLUE 1.3 (tagged-environment) has none.
pub fn publish_json(
    config: &ProviderConfig,
    counts: &dyn sources::CountSource,
    virtual_gpgpus: &dyn sources::VirtualGpgpuSource,
    strategies: &[strategy::Strategy],
    now: u64,
) -> Result<String, ProviderError> {
    let snapshot = snapshot(config, counts, virtual_gpgpus, now)?;
    json::write(&strategy::render(config, &snapshot, strategies)?)
}

/// The groups with their live counts and the vGPGPU environments.
pub fn snapshot(
    config: &ProviderConfig,
    counts: &dyn sources::CountSource,
    virtual_gpgpus: &dyn sources::VirtualGpgpuSource,
    now: u64,
) -> Result<strategy::Snapshot, ProviderError> {
    let groups = site::node_groups(config)?;
    let group_counts = counts.counts(&groups)?;
    let virtual_environments = virtual_gpgpus.environments()?;
    let shares = match sources::share_facts(config, &groups)? {
        Some(facts) => shares::from_facts(config, &groups, &facts)?,
        None => Vec::new(),
    };
    Ok(strategy::Snapshot {
        groups: groups.into_iter().zip(group_counts).collect(),
        virtual_environments,
        shares,
        created: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::SAMPLE;
    use crate::strategy::Strategy;
    use std::path::Path;

    fn sample(extra: &str) -> config::ProviderConfig {
        config::ProviderConfig::parse(&format!("{SAMPLE}{extra}"), Path::new("t.toml")).unwrap()
    }

    fn run(config: &config::ProviderConfig, strategies: &[Strategy]) -> Vec<ldif::Entry> {
        let counts = sources::from_config(config);
        let v = sources::StaticVirtual::from_config(&config.virtual_environments);
        let text = publish(config, counts.as_ref(), &v, strategies, 1_795_291_140).unwrap();
        ldif::parse(&text).unwrap()
    }

    #[test]
    fn attribute_extension_carries_table_3_2() {
        let entries = run(&sample(""), &[Strategy::AttributeExtension]);
        assert_eq!(entries.len(), 1);
        let ee = &entries[0];
        assert_eq!(ee.dn, "GLUE2ResourceID=ce.example.org_gts450,GLUE2ServiceID=ce.example.org_ComputingElement,GLUE2GroupID=resource,o=glue");
        let info: Vec<&str> = ee.values("GLUE2EntityOtherInfo").collect();
        for expected in [
            "GPGPUTotalInstances=32",
            "GPGPUFreeInstances=30",
            "GPGPUUsedInstances=2",
            "GPGPUOfflineInstances=0",
            "GPGPUPerNode=2",
            "GPGPUCUDAComputeCapability=2.1",
            "GPGPUMainMemorySize=1024",
            "GPGPUMP=4",
            "GPGPUCoresPerMP=48",
            "GPGPUCores=192",
            "GPGPUClockSpeed=1660",
            "GPGPUECCSupport=false",
            "GPGPUVendor=Nvidia",
            "GPGPUModel=GeForce GTS 450",
        ] {
            assert!(info.contains(&expected), "{expected} missing from {info:?}");
        }
        assert_eq!(ee.values("GLUE2ExecutionEnvironmentTotalInstances").collect::<Vec<_>>(), ["16"]);
        assert_eq!(
            ee.values("GLUE2ExecutionEnvironmentComputingManagerForeignKey").collect::<Vec<_>>(),
            ["ce.example.org_ComputingElement_Manager"]
        );
        assert_eq!(ee.values("GLUE2EntityCreationTime").collect::<Vec<_>>(), ["2026-11-21T19:59:00Z"]);
    }

    #[test]
    fn class_extension_makes_one_object_per_key() {
        let entries = run(&sample(""), &[Strategy::ClassExtension]);
        assert!(entries[0].values("GLUE2EntityOtherInfo").next().is_none());
        let ext: Vec<_> = entries[1..].iter().collect();
        assert_eq!(ext.len(), 14);
        let free = ext.iter().find(|e| e.values("GLUE2ExtensionKey").any(|k| k == "GPGPUFreeInstances")).unwrap();
        assert_eq!(free.values("GLUE2ExtensionValue").collect::<Vec<_>>(), ["30"]);
        assert_eq!(free.values("GLUE2ExtensionEntityForeignKey").collect::<Vec<_>>(), ["ce.example.org_gts450"]);
        assert!(
            free.dn.starts_with("GLUE2ExtensionLocalID=GPGPUFreeInstances,GLUE2ResourceID=ce.example.org_gts450,"),
            "{}",
            free.dn
        );
    }

    #[test]
    fn hybrid_splits_static_and_dynamic() {
        let entries = run(&sample(""), &[Strategy::Hybrid]);
        let info: Vec<&str> = entries[0].values("GLUE2EntityOtherInfo").collect();
        assert!(info.contains(&"GPGPUModel=GeForce GTS 450"));
        assert!(!info.iter().any(|i| i.starts_with("GPGPUFreeInstances")));
        let keys: Vec<&str> = entries[1..].iter().flat_map(|e| e.values("GLUE2ExtensionKey")).collect();
        assert_eq!(keys, ["GPGPUTotalInstances", "GPGPUFreeInstances", "GPGPUUsedInstances", "GPGPUOfflineInstances"]);
    }

    #[test]
    fn tagged_environment_writes_glue13_tags() {
        let entries = run(&sample(""), &[Strategy::TaggedEnvironment]);
        assert_eq!(entries.len(), 1);
        let sub = &entries[0];
        assert_eq!(sub.dn, "GlueSubClusterUniqueID=ce.example.org_gts450,GlueClusterUniqueID=ce.example.org,mds-vo-name=resource,o=grid");
        let tags: Vec<&str> = sub.values("GlueHostApplicationSoftwareRunTimeEnvironment").collect();
        assert!(tags.contains(&"NvidiaGPGPU") && tags.contains(&"GPGPUFreeInstances=30"), "{tags:?}");

        let no_cluster = sample("").clone();
        let mut no_cluster = no_cluster;
        no_cluster.site.cluster_id = None;
        let counts = sources::from_config(&no_cluster);
        let e = publish(
            &no_cluster,
            counts.as_ref(),
            &sources::StaticVirtual::default(),
            &[Strategy::TaggedEnvironment],
            0,
        )
        .unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("site.cluster_id"), "{e}");
    }

    #[test]
    fn non_ascii_model_is_base64_in_glue2_and_refused_in_glue13() {
        let cfg =
            config::ProviderConfig::parse(&SAMPLE.replace("GeForce GTS 450", "GeForce GTS 450™"), Path::new("t.toml"))
                .unwrap();
        let counts = sources::from_config(&cfg);
        let text =
            publish(&cfg, counts.as_ref(), &sources::StaticVirtual::default(), &[Strategy::AttributeExtension], 0)
                .unwrap();
        assert!(text.contains("GLUE2EntityOtherInfo:: "), "{text}");
        assert!(ldif::parse(&text).unwrap()[0]
            .values("GLUE2EntityOtherInfo")
            .any(|v| v == "GPGPUModel=GeForce GTS 450™"));
        let e = publish(&cfg, counts.as_ref(), &sources::StaticVirtual::default(), &[Strategy::TaggedEnvironment], 0)
            .unwrap_err();
        assert!(e.to_string().contains("not ASCII"), "{e}");
    }

    /// deploy/bdii/glue-provider.example.toml's commented `[service]` block,
    /// uncommented as its comment says, has every key EGI's profile needs:
    /// the config loads and, with counts that report no LRMS release (the
    /// config's own), the Manager still gets its product version.
    #[test]
    fn the_examples_service_block_uncommented_loads_and_publishes() {
        let text = include_str!("../../deploy/bdii/glue-provider.example.toml");
        let start = text.find("\n#[service]\n").expect("the example's commented [service] block") + 1;
        let end = start + text[start..].find("\n\n").expect("a blank line after the [service] block");
        let block: Vec<&str> = text[start..end].lines().map(|l| l.strip_prefix('#').unwrap_or(l)).collect();
        let uncommented = format!("{}{}{}", &text[..start], block.join("\n"), &text[end..]);
        let path = Path::new("glue-provider.example.toml");
        let cfg = config::ProviderConfig::parse(&uncommented, path).unwrap();
        let service = cfg.service.as_ref().expect("[service] is read");
        assert_eq!(service.quality_level, "production");
        assert_eq!(service.manager_version.as_deref(), Some("22.05.8"));
        let with_static_counts = uncommented.replace("source = \"slurm\"", "source = \"static\"");
        assert_ne!(with_static_counts, uncommented, "the example's count source moved");
        let entries =
            run(&config::ProviderConfig::parse(&with_static_counts, path).unwrap(), &[Strategy::AttributeExtension]);
        let manager = entries.iter().find(|e| e.dn.starts_with("GLUE2ManagerID=")).expect("a Manager entry");
        assert_eq!(manager.values("GLUE2ManagerProductVersion").collect::<Vec<_>>(), ["22.05.8"]);
    }

    #[test]
    fn service_and_virtual_environments() {
        let extra = "\n[service]\ntype = \"org.glite.ce.CREAM\"\nadmin_domain = \"EXAMPLE\"\nmanager_product = \"SLURM\"\nmanager_version = \"22.05.8\"\n\n[[virtual]]\nmethod = \"rCUDA\"\ntotal = 8\nfree = 5\n";
        // [service] and [[virtual]] must come before [[group]] entries' sub-tables in TOML
        // only by table rules; appended tables are fine.
        let entries = run(&sample(extra), &[Strategy::AttributeExtension, Strategy::TaggedEnvironment]);
        let dns: Vec<&str> = entries.iter().map(|e| e.dn.split(',').next().unwrap()).collect();
        assert_eq!(
            dns,
            [
                "GLUE2ServiceID=ce.example.org_ComputingElement",
                "GLUE2ManagerID=ce.example.org_ComputingElement_Manager",
                "GLUE2ResourceID=ce.example.org_gts450",
                "GLUE2ApplicationEnvironmentID=ce.example.org_ComputingElement_Manager_rCUDA",
                "GlueClusterUniqueID=ce.example.org",
                "GlueSubClusterUniqueID=ce.example.org_gts450",
            ]
        );
        let app = &entries[3];
        assert_eq!(app.values("GLUE2ApplicationEnvironmentAppName").collect::<Vec<_>>(), ["rCUDA"]);
        assert!(app.values("GLUE2EntityOtherInfo").any(|v| v == "FreeVGPGPU=5"));
        assert!(entries[5].values("GlueHostApplicationSoftwareRunTimeEnvironment").any(|v| v == "rCUDAFreeVGPGPU=5"));
        // 16 nodes × 2 sockets × 16 threads, from the group's keys: EGI requires the Manager's totals.
        let one = |e: &ldif::Entry, a: &str| e.values(a).next().map(str::to_string);
        assert_eq!(one(&entries[1], "GLUE2ComputingManagerTotalPhysicalCPUs").as_deref(), Some("32"));
        assert_eq!(one(&entries[1], "GLUE2ComputingManagerTotalLogicalCPUs").as_deref(), Some("256"));
        assert_eq!(one(&entries[1], "GLUE2ManagerProductVersion").as_deref(), Some("22.05.8"));
        assert_eq!(one(&entries[5], "GlueSubClusterLogicalCPUs").as_deref(), Some("256"));
        assert_eq!(one(&entries[2], "GLUE2ExecutionEnvironmentVirtualMemorySize").as_deref(), Some("20480"));
    }

    #[test]
    fn mixed_node_publishes_one_environment_per_kind() {
        let extra = "\n[[group.device]]\nmodel = \"Tesla K20m\"\ncount = 1\nmemory_mib = 4800\noffline = 1\n";
        let entries = run(&sample(extra), &[Strategy::AttributeExtension]);
        let ids: Vec<&str> = entries.iter().flat_map(|e| e.values("GLUE2ResourceID")).collect();
        assert_eq!(ids, ["ce.example.org_gts450_gpgpu-GeForce-GTS-450", "ce.example.org_gts450_gpgpu-Tesla-K20m"]);
        let k20: Vec<&str> = entries[1].values("GLUE2EntityOtherInfo").collect();
        assert!(
            k20.contains(&"GPGPUTotalInstances=16")
                && k20.contains(&"GPGPUOfflineInstances=1")
                && k20.contains(&"GPGPUFreeInstances=15"),
            "{k20:?}"
        );
        assert!(!k20.iter().any(|v| v.contains("GTS")), "{k20:?}");
        let gts: Vec<&str> = entries[0].values("GLUE2EntityOtherInfo").collect();
        assert!(gts.contains(&"GPGPUTotalInstances=32") && gts.contains(&"GPGPUFreeInstances=30"), "{gts:?}");
        // SLURM must be told which GRES type counts which kind.
        let slurm = format!("{SAMPLE}{extra}")
            .replace("source = \"static\"", "source = \"slurm\"")
            .replace("used = 2\n", "")
            .replace("offline = 1\n", "");
        let e = config::ProviderConfig::parse(&slurm, Path::new("t.toml")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("group.device.gres_type"), "{e}");
    }

    /// An AMD group and an Intel group, vendors written as an admin might.
    const VENDORS: &str = r#"
[[group]]
id = "ce.example.org_mi250"
nodes = ["amd[01-04]"]
platform = "amd64"
main_memory_mib = 524288
virtual_memory_mib = 524288
os_name = "Debian"
os_version = "12"
physical_cpus = 2
logical_cpus = 128

[[group.device]]
model = "AMD Instinct MI250X"
vendor = "amd"
count = 8
memory_mib = 65536
architecture = "gfx90a"
clock_mhz = 1700
ecc = true
used = 5
offline = 1

[[group]]
id = "ce.example.org_max1550"
nodes = ["xe[01-02]"]
platform = "amd64"
main_memory_mib = 262144
virtual_memory_mib = 262144
os_name = "Debian"
os_version = "12"
physical_cpus = 2
logical_cpus = 112

[[group.device]]
model = "Intel Data Center GPU Max 1550"
vendor = "Intel"
count = 4
memory_mib = 131072
architecture = "Xe-HPC"
used = 0
"#;

    /// Every CDER `Key=Value` an entity carries, as OtherInfo or as its Extensions.
    fn published(entries: &[ldif::Entry], id: &str) -> Vec<String> {
        let entity = entries.iter().find(|e| e.values("GLUE2ResourceID").any(|v| v == id)).unwrap();
        let mut out: Vec<String> = entity.values("GLUE2EntityOtherInfo").map(str::to_string).collect();
        for x in entries.iter().filter(|e| e.values("GLUE2ExtensionEntityForeignKey").any(|v| v == id)) {
            let key = x.values("GLUE2ExtensionKey").next().unwrap();
            out.push(format!("{key}={}", x.values("GLUE2ExtensionValue").next().unwrap()));
        }
        out
    }

    #[test]
    fn amd_and_intel_publish_vendor_architecture_and_no_cuda_in_every_glue2_strategy() {
        let cfg = sample(VENDORS);
        for strategy in [Strategy::AttributeExtension, Strategy::ClassExtension, Strategy::Hybrid] {
            let entries = run(&cfg, &[strategy]);
            let nvidia = published(&entries, "ce.example.org_gts450");
            assert!(nvidia.contains(&"GPGPUVendor=Nvidia".into()), "{strategy:?}: {nvidia:?}");
            assert!(!nvidia.iter().any(|v| v.starts_with("GPGPUArchitecture=")), "{strategy:?}: {nvidia:?}");
            for (id, expected) in [
                (
                    "ce.example.org_mi250",
                    [
                        "GPGPUVendor=AMD",
                        "GPGPUModel=AMD Instinct MI250X",
                        "GPGPUMainMemorySize=65536",
                        "GPGPUArchitecture=gfx90a",
                        "GPGPUTotalInstances=32",
                        "GPGPUFreeInstances=26",
                    ],
                ),
                (
                    "ce.example.org_max1550",
                    [
                        "GPGPUVendor=Intel",
                        "GPGPUModel=Intel Data Center GPU Max 1550",
                        "GPGPUMainMemorySize=131072",
                        "GPGPUArchitecture=Xe-HPC",
                        "GPGPUTotalInstances=8",
                        "GPGPUFreeInstances=8",
                    ],
                ),
            ] {
                let got = published(&entries, id);
                for e in expected {
                    assert!(got.contains(&e.to_string()), "{strategy:?} {id}: {e} missing from {got:?}");
                }
                assert!(!got.iter().any(|v| v.starts_with("GPGPUCUDAComputeCapability")), "{strategy:?}: {got:?}");
                assert_eq!(got.iter().filter(|v| v.starts_with("GPGPUVendor=")).count(), 1, "{got:?}");
            }
        }
    }

    #[test]
    fn amd_and_intel_are_tagged_by_vendor_in_glue13() {
        let entries = run(&sample(VENDORS), &[Strategy::TaggedEnvironment]);
        let tags = |id: &str| -> Vec<String> {
            let sub = entries.iter().find(|e| e.values("GlueSubClusterUniqueID").any(|v| v == id)).unwrap();
            sub.values("GlueHostApplicationSoftwareRunTimeEnvironment").map(str::to_string).collect()
        };
        let amd = tags("ce.example.org_mi250");
        for t in ["AMDGPGPU", "GPGPUVendor=AMD", "GPGPUArchitecture=gfx90a", "GPGPUFreeInstances=26"] {
            assert!(amd.contains(&t.to_string()), "{t} missing from {amd:?}");
        }
        assert!(!amd.iter().any(|t| t.starts_with("NvidiaGPGPU") || t.contains("CUDA")), "{amd:?}");
        let intel = tags("ce.example.org_max1550");
        for t in ["IntelGPGPU", "GPGPUVendor=Intel", "GPGPUArchitecture=Xe-HPC"] {
            assert!(intel.contains(&t.to_string()), "{t} missing from {intel:?}");
        }
    }

    #[test]
    fn amd_and_intel_accelerator_environments_declare_their_architecture() {
        let entries = run(&sample(VENDORS), &[Strategy::Glue21Accelerator]);
        let ae = |ee: &str| {
            entries
                .iter()
                .find(|e| e.values("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey").any(|v| v == ee))
                .unwrap_or_else(|| panic!("no AcceleratorEnvironment of {ee}"))
        };
        let one = |e: &ldif::Entry, a: &str| e.values(a).collect::<Vec<_>>().join("|");
        for (ee, vendor, model, memory, capability) in [
            ("ce.example.org_gts450", "Nvidia", "GeForce GTS 450", "1024", "2.1"),
            ("ce.example.org_mi250", "AMD", "AMD Instinct MI250X", "65536", "gfx90a"),
            ("ce.example.org_max1550", "Intel", "Intel Data Center GPU Max 1550", "131072", "Xe-HPC"),
        ] {
            let e = ae(ee);
            assert_eq!(one(e, "GLUE2AcceleratorEnvironmentType"), "GPU", "{ee}");
            assert_eq!(one(e, "GLUE2AcceleratorEnvironmentVendor"), vendor, "{ee}");
            assert_eq!(one(e, "GLUE2AcceleratorEnvironmentModel"), model, "{ee}");
            assert_eq!(one(e, "GLUE2AcceleratorEnvironmentMemory"), memory, "{ee}");
            assert_eq!(one(e, "GLUE2AcceleratorEnvironmentComputeCapability"), capability, "{ee}");
        }
        // One GPU type site-wide: 32 GTS 450 + 32 MI250X + 8 Max 1550.
        let m = entries.iter().find(|e| e.dn.starts_with("GLUE2ComputingManagerAcceleratorInfoID=")).unwrap();
        assert_eq!(one(m, "GLUE2ComputingManagerAcceleratorInfoTotalPhysicalAccelerators"), "72");
    }

    /// One node group with an NVIDIA type and an AMD type that shares its
    /// prefix: two ExecutionEnvironments, each with its own vendor and counts.
    const MIXED: &str = r#"[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-slurm-gpgpu"
cluster_id = "ce.example.org"

[counts]
source = "static"

[[group]]
id = "ce.example.org_mixed"
name = "mixed nodes"
nodes = ["wn[01-03]"]
platform = "amd64"
main_memory_mib = 262144
virtual_memory_mib = 262144
os_name = "Debian"
os_version = "12"
physical_cpus = 2
logical_cpus = 64

[[group.device]]
model = "NVIDIA A100-SXM4-40GB"
count = 2
memory_mib = 40960
compute_capability = "8.0"
used = 4

[[group.device]]
type = "amdgpu"
prefix = "GPGPU"
vendor = "AMD"
model = "AMD Instinct MI210"
count = 1
memory_mib = 65536
architecture = "gfx90a"
used = 1
offline = 1
"#;

    #[test]
    fn a_mixed_vendor_node_is_two_environments_not_merged() {
        let cfg = config::ProviderConfig::parse(MIXED, Path::new("t.toml")).unwrap();
        for strategy in [Strategy::AttributeExtension, Strategy::ClassExtension, Strategy::Hybrid] {
            let entries = run(&cfg, &[strategy]);
            let ees: Vec<&str> = entries.iter().flat_map(|e| e.values("GLUE2ResourceID")).collect();
            assert_eq!(ees, ["ce.example.org_mixed_gpgpu", "ce.example.org_mixed_amdgpu"], "{strategy:?}");
            let nvidia = published(&entries, "ce.example.org_mixed_gpgpu");
            let amd = published(&entries, "ce.example.org_mixed_amdgpu");
            for e in ["GPGPUVendor=Nvidia", "GPGPUTotalInstances=6", "GPGPUFreeInstances=2", "GPGPUPerNode=2"] {
                assert!(nvidia.contains(&e.to_string()), "{strategy:?}: {e} missing from {nvidia:?}");
            }
            for e in [
                "GPGPUVendor=AMD",
                "GPGPUArchitecture=gfx90a",
                "GPGPUTotalInstances=3",
                "GPGPUFreeInstances=1",
                "GPGPUOfflineInstances=1",
                "GPGPUPerNode=1",
            ] {
                assert!(amd.contains(&e.to_string()), "{strategy:?}: {e} missing from {amd:?}");
            }
            assert!(!amd.iter().any(|v| v.contains("A100") || v.contains("CUDA")), "{amd:?}");
            assert!(!nvidia.iter().any(|v| v.contains("MI210") || v.contains("Architecture")), "{nvidia:?}");
        }
        let entries = run(&cfg, &[Strategy::TaggedEnvironment]);
        let subs: Vec<&str> = entries.iter().flat_map(|e| e.values("GlueSubClusterUniqueID")).collect();
        assert_eq!(subs, ["ce.example.org_mixed_gpgpu", "ce.example.org_mixed_amdgpu"]);
        assert!(entries[1].values("GlueHostApplicationSoftwareRunTimeEnvironment").any(|t| t == "AMDGPGPU"));
        assert!(!entries[1].values("GlueHostApplicationSoftwareRunTimeEnvironment").any(|t| t == "NvidiaGPGPU"));
        let entries = run(&cfg, &[Strategy::Glue21Accelerator]);
        let vendors: Vec<&str> = entries.iter().flat_map(|e| e.values("GLUE2AcceleratorEnvironmentVendor")).collect();
        assert_eq!(vendors, ["Nvidia", "AMD"]);
    }

    #[test]
    fn slurm_must_tell_apart_vendors_counted_by_one_gres() {
        let slurm =
            MIXED.replace("source = \"static\"", "source = \"slurm\"\ngres = { gpgpu = \"gpu\", amdgpu = \"gpu\" }");
        let slurm = slurm.replace("used = 4\n", "").replace("used = 1\n", "").replace("offline = 1\n", "");
        let e = config::ProviderConfig::parse(&slurm, Path::new("t.toml")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("group.device.gres_type"), "{e}");
        assert!(e.message.contains("GRES \"gpu\""), "{e}");
        // With a GRES type each, SLURM's gpu:a100:2,gpu:mi210:1 counts each vendor apart.
        let typed = slurm
            .replace("compute_capability = \"8.0\"\n", "compute_capability = \"8.0\"\ngres_type = \"a100\"\n")
            .replace("architecture = \"gfx90a\"\n", "architecture = \"gfx90a\"\ngres_type = \"mi210\"\n");
        let cfg = config::ProviderConfig::parse(&typed, Path::new("t.toml")).unwrap();
        let groups = site::node_groups(&cfg).unwrap();
        let counts = sources::SlurmCounts {
            scontrol: "scontrol".into(),
            gres: cfg.counts.gres.clone(),
            timeout: std::time::Duration::from_secs(1),
        };
        let listing: String = (1..=3)
            .map(|n| {
                format!(
                    "NodeName=wn0{n} Gres=gpu:a100:2,gpu:mi210:1 GresUsed=gpu:a100:1(IDX:0),gpu:mi210:0 State=MIXED\n"
                )
            })
            .collect();
        let c = counts.counts_from_output(&groups, listing.as_bytes()).unwrap();
        assert_eq!((c[0].devices["gpgpu"].total, c[0].devices["gpgpu"].used), (6, 3));
        assert_eq!((c[0].devices["amdgpu"].total, c[0].devices["amdgpu"].used), (3, 0));
        // Without GRES types (an inventory group, say) the counts would be each other's: refused.
        let mut untyped = groups.clone();
        for class in &mut untyped[0].classes {
            class.gres_type = None;
        }
        let e = counts.counts_from_output(&untyped, listing.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("both counted by SLURM's GRES \"gpu\""), "{e}");
    }

    #[test]
    fn static_counts_must_add_up() {
        let cfg =
            config::ProviderConfig::parse(&SAMPLE.replace("used = 2", "used = 2\nfree = 31"), Path::new("t.toml"))
                .unwrap();
        let counts = sources::from_config(&cfg);
        let e = publish(&cfg, counts.as_ref(), &sources::StaticVirtual::default(), &[Strategy::AttributeExtension], 0)
            .unwrap_err();
        assert!(e.to_string().contains("free 31 + used 2 + offline 0 is not the 32 devices"), "{e}");
    }

    #[test]
    fn vo_shares_carry_their_figures_and_mapping_policy() {
        let cfg = sample("");
        let groups = site::node_groups(&cfg).unwrap();
        let counts = sources::from_config(&cfg).counts(&groups).unwrap();
        let share = shares::VoShare {
            id: shares::share_id("gpu", "atlas", "ce.example.org_ComputingElement"),
            queue: "gpu".into(),
            vo: "atlas".into(),
            serving_state: "production",
            environments: vec!["ce.example.org_gts450".into()],
            devices: [("GPGPU".to_string(), shares::ShareDevices { total: 4, free: 1, used: 3, max_per_job: 2 })]
                .into(),
            policy: shares::SharePolicy::default(),
        };
        let snapshot = strategy::Snapshot {
            groups: groups.into_iter().zip(counts).collect(),
            virtual_environments: vec![],
            shares: vec![share],
            created: 0,
        };
        let all = [Strategy::AttributeExtension, Strategy::ClassExtension, Strategy::Glue21Accelerator];
        let entries = ldif::parse(&ldif::write(&strategy::render(&cfg, &snapshot, &all).unwrap())).unwrap();
        let share = entries.iter().find(|e| e.dn.starts_with("GLUE2ShareID=gpu_atlas_")).unwrap();
        let info: Vec<&str> = share.values("GLUE2EntityOtherInfo").collect();
        assert_eq!(info, ["GPGPUTotalInstances=4", "GPGPUFreeInstances=1", "GPGPUUsedInstances=3", "GPGPUPerNode=2"]);
        assert_eq!(share.values("GLUE2ComputingShareMappingQueue").collect::<Vec<_>>(), ["gpu"]);
        assert_eq!(
            share.values("GLUE2ComputingShareExecutionEnvironmentForeignKey").collect::<Vec<_>>(),
            ["ce.example.org_gts450"]
        );
        let policy = entries.iter().find(|e| e.values("objectClass").any(|c| c == "GLUE2MappingPolicy")).unwrap();
        assert_eq!(policy.dn, format!("GLUE2PolicyID=gpu_atlas_ce.example.org_ComputingElement_policy,{}", share.dn));
        assert_eq!(policy.values("GLUE2PolicyRule").collect::<Vec<_>>(), ["VO:atlas"]);
        assert_eq!(
            policy.values("GLUE2MappingPolicyShareForeignKey").collect::<Vec<_>>(),
            ["gpu_atlas_ce.example.org_ComputingElement"]
        );
        let free_ext = entries
            .iter()
            .find(|e| e.dn.starts_with("GLUE2ExtensionLocalID=GPGPUFreeInstances,GLUE2ShareID="))
            .unwrap();
        assert_eq!(free_ext.values("GLUE2ExtensionValue").collect::<Vec<_>>(), ["1"]);
        let acc = entries
            .iter()
            .find(|e| {
                e.dn.starts_with("GLUE2ComputingShareAcceleratorInfoID=gpu_atlas_ce.example.org_ComputingElement_GPU,")
            })
            .unwrap();
        assert_eq!(acc.values("GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots").collect::<Vec<_>>(), ["1"]);
        assert_eq!(
            acc.values("GLUE2ComputingShareAcceleratorInfoMaxAcceleratorSlotsPerJob").collect::<Vec<_>>(),
            ["2"]
        );
    }

    #[test]
    fn vo_tables_are_checked() {
        let bad = |vo: &str| {
            config::ProviderConfig::parse(
                &format!(
                    "{}\n[[vo]]\n{vo}",
                    SAMPLE.replace("source = \"static\"", "source = \"slurm\"").replace("used = 2\n", "")
                ),
                Path::new("t.toml"),
            )
            .unwrap_err()
        };
        assert_eq!(bad("name = \"atlas\"\n").key.as_deref(), Some("vo.accounts"));
        assert_eq!(bad("name = \"at las\"\naccounts = [\"a\"]\n").key.as_deref(), Some("vo.name"));
        assert_eq!(bad("name = \"atlas\"\naccounts = [\"a,b\"]\n").key.as_deref(), Some("vo.accounts"));
        let e = config::ProviderConfig::parse(
            &format!("{SAMPLE}\n[[vo]]\nname = \"atlas\"\naccounts = [\"atlas\"]\n"),
            Path::new("t.toml"),
        )
        .unwrap_err();
        assert!(e.message.contains("need counts.source = \"slurm\" or \"torque\""), "{e}");
    }
}
