//! Schema validity, for real: the provider's output for every strategy is
//! loaded with `ldapadd` into slapd running Debian's BDII config with the
//! GLUE 2.0 and GLUE 1.3 schemas, without a single error, and reads back
//! with `ldapsearch` exactly as published.

use std::path::Path;

use cder_tests::glue::{assert_reads_back, other_info, publish, run_provider};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};

/// A standalone site (publishes its own ComputingService/Manager and GLUE
/// 1.3 cluster) with two node groups and two vGPGPU services.
const SITE: &str = r#"
[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-slurm-gpgpu"
cluster_id = "ce.example.org"

[service]
type = "org.glite.ce.CREAM"
admin_domain = "EXAMPLE-SITE"
manager_product = "SLURM"
manager_version = "22.05"

[counts]
source = "static"

[[group]]
id = "ce.example.org_gts450"
name = "GTS 450 nodes"
nodes = ["wn[01-16]"]
platform = "amd64"
main_memory_mib = 16384
os_name = "Debian"
os_version = "12"
logical_cpus = 8
physical_cpus = 1
cpu_vendor = "Intel"
cpu_model = "Xeon E5620"
cpu_clock_mhz = 2400
virtual_memory_mib = 20480

[[group.device]]
model = "GeForce GTS 450"
count = 2
memory_mib = 1024
compute_capability = "2.1"
multiprocessors = 4
cores_per_mp = 48
clock_mhz = 1660
used = 2

[[group]]
id = "ce.example.org_k20"
nodes = ["gpu[1-4]"]
platform = "amd64"
main_memory_mib = 65536
connectivity_in = true
virtual_memory_mib = 81920
os_name = "CentOS"
os_version = "7.9"
physical_cpus = 2
logical_cpus = 32

[[group.device]]
model = "Tesla K20m"
count = 4
memory_mib = 4800
compute_capability = "3.5"
multiprocessors = 13
cores_per_mp = 192
clock_mhz = 705
ecc = true
used = 5
offline = 1

[[group.device]]
type = "fpga"
vendor = "Xilinx"
model = "Alveo U250"
count = 1
memory_mib = 65536

[[virtual]]
method = "rCUDA"
version = "16.11"
total = 8
free = 5

[[virtual]]
method = "VCL"
total = 4
free = 4
"#;

fn fresh_slapd() -> Slapd {
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap_or_else(|e| panic!("{e}"));
    slapd
}

fn write_config(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("glue-provider.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn every_strategy_loads_without_error_and_reads_back() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), SITE);
    for strategy in ["attribute-extension", "class-extension", "hybrid", "tagged-environment"] {
        let ldif = publish(&config, &[strategy]);
        let slapd = fresh_slapd();
        // ldapadd stops at the first error and fails: any schema violation fails here.
        slapd.add(&ldif).unwrap_or_else(|e| panic!("{strategy}: {e}\n{ldif}"));
        let entries = assert_reads_back(&slapd, &ldif);
        let ee = slapd.search("o=glue", "(objectClass=GLUE2ExecutionEnvironment)", &["GLUE2ResourceID"]).unwrap();
        match strategy {
            "tagged-environment" => {
                assert!(!ee.contains("dn:"), "GLUE 1.3 only, got {ee}");
                let subclusters = slapd
                    .search(
                        "o=grid",
                        "(GlueHostApplicationSoftwareRunTimeEnvironment=NvidiaGPGPU)",
                        &["GlueSubClusterUniqueID"],
                    )
                    .unwrap();
                assert_eq!(subclusters.matches("dn:").count(), 2, "{subclusters}");
                let xilinx = slapd
                    .search(
                        "o=grid",
                        "(GlueHostApplicationSoftwareRunTimeEnvironment=XilinxFPGA)",
                        &["GlueSubClusterUniqueID"],
                    )
                    .unwrap();
                assert!(xilinx.contains("GlueSubClusterUniqueID: ce.example.org_k20"), "{xilinx}");
            }
            _ => {
                assert_eq!(ee.matches("dn:").count(), 2, "{strategy}: {ee}");
                let extensions = entries.iter().filter(|e| e.dn.starts_with("GLUE2ExtensionLocalID=")).count();
                // Static: PerNode + 9 device keys per GPGPU group (×2), PerNode + Vendor,
                // Model, MainMemorySize, ECCSupport for the FPGA. Dynamic: 4 counts per
                // type per group (3), 2 per vGPGPU service (2).
                let (static_keys, dynamic_keys) = (10 + 10 + 5, 4 * 3 + 2 * 2);
                let expected = match strategy {
                    "attribute-extension" => 0,
                    "class-extension" => static_keys + dynamic_keys,
                    _ => dynamic_keys,
                };
                assert_eq!(extensions, expected, "{strategy}");
            }
        }
    }
}

#[test]
fn all_strategies_together_load_and_answer_the_thesis_query() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), SITE);
    let ldif = publish(&config, &["attribute-extension,class-extension,hybrid,tagged-environment"]);
    let slapd = fresh_slapd();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    assert_reads_back(&slapd, &ldif);
    // The thesis's phase-1 query (§3.3.5): GLUE2EntityOtherInfo=GPGPUVendor=Nvidia.
    let found = slapd.search("o=glue", "(GLUE2EntityOtherInfo=GPGPUVendor=Nvidia)", &[]).unwrap();
    let entries = cder_glue_provider::ldif::parse(&found).unwrap();
    let ids: Vec<&str> = entries.iter().flat_map(|e| e.values("GLUE2ResourceID")).collect();
    assert_eq!(ids, ["ce.example.org_gts450", "ce.example.org_k20"]);
    let k20 = other_info(&entries[1]);
    assert_eq!(k20["GPGPUTotalInstances"], "16");
    assert_eq!(k20["GPGPUUsedInstances"], "5");
    assert_eq!(k20["GPGPUOfflineInstances"], "1");
    assert_eq!(k20["GPGPUFreeInstances"], "10");
    assert_eq!(k20["FPGAModel"], "Alveo U250");
    // Class-Extension: the same value by key, no parsing.
    let free = slapd
        .search(
            "o=glue",
            "(&(GLUE2ExtensionKey=GPGPUFreeInstances)(GLUE2ExtensionEntityForeignKey=ce.example.org_gts450))",
            &["GLUE2ExtensionValue"],
        )
        .unwrap();
    assert!(free.contains("GLUE2ExtensionValue: 30"), "{free}");
    let rcuda =
        slapd.search("o=glue", "(GLUE2ApplicationEnvironmentAppName=rCUDA)", &["GLUE2EntityOtherInfo"]).unwrap();
    assert!(rcuda.contains("FreeVGPGPU=5") && rcuda.contains("TotalVGPGPU=8"), "{rcuda}");
}

#[test]
fn non_ascii_model_is_base64_and_loads() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &SITE.replace("Tesla K20m", "Tesla K20m – Kepler™"));
    let ldif = publish(&config, &["attribute-extension", "class-extension"]);
    assert!(ldif.contains("GLUE2EntityOtherInfo:: "), "the model line must be base64");
    let slapd = fresh_slapd();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    assert_reads_back(&slapd, &ldif);
    // GLUE 1.3 tags are IA5String: the provider refuses rather than print a bad entry.
    let out = run_provider(&config, &["tagged-environment"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not ASCII"));
}
