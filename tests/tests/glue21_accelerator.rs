//! GLUE 2.1 accelerator entities, for real: the provider's
//! `glue21-accelerator` output loads with `ldapadd` into slapd running
//! Debian's BDII config with GLUE20.schema and cder's
//! deploy/bdii/GLUE21-accelerator.schema, reads back with the published
//! values, and is refused by a slapd without that schema. Counts come from
//! the provider's static config (no GPU on CI).

use std::path::PathBuf;

use cder_tests::glue::publish;
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};

const SITE: &str = r#"
[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-slurm-gpgpu"
computing_share_ids = ["ce.example.org_gpu_share"]

[service]
type = "org.glite.ce.CREAM"
admin_domain = "EXAMPLE-SITE"
manager_product = "SLURM"

[counts]
source = "static"

[[group]]
id = "ce.example.org_k20"
nodes = ["gpu[1-4]"]
platform = "amd64"
main_memory_mb = 65536

[[group.device]]
model = "Tesla K20m"
count = 4
memory_mb = 4800
compute_capability = "3.5"
multiprocessors = 13
cores_per_mp = 192
clock_mhz = 705
used = 5
offline = 1

[[group.device]]
type = "fpga"
vendor = "Xilinx"
model = "Alveo U250"
count = 1
memory_mb = 65536
used = 1
"#;

fn schema() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/bdii/GLUE21-accelerator.schema")
}

/// `attribute: value` lines of the entries `filter` finds.
fn search(slapd: &Slapd, filter: &str) -> String {
    slapd.search("o=glue", filter, &[]).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn glue21_accelerator_entities_load_with_the_schema() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("glue-provider.toml");
    std::fs::write(&config, SITE).unwrap();
    let ldif = publish(&config, &["glue21-accelerator"]);

    // Without the GLUE 2.1 schema slapd refuses the new classes.
    let plain = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    plain.add_base_entries().unwrap();
    let refused = plain.add(&ldif).unwrap_err();
    assert!(refused.contains("GLUE2AcceleratorEnvironment") || refused.contains("objectClass"), "{refused}");
    drop(plain);

    let slapd = Slapd::start_with_schemas(&SlapdOptions::default(), &[schema()]).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}\n{ldif}"));

    let gpu = search(&slapd, "(&(objectClass=GLUE2AcceleratorEnvironment)(GLUE2AcceleratorEnvironmentType=GPU))");
    assert_eq!(gpu.matches("dn:").count(), 1, "{gpu}");
    for line in [
        "GLUE2AcceleratorEnvironmentPhysicalAccelerators: 4",
        "GLUE2AcceleratorEnvironmentLogicalAccelerators: 4",
        "GLUE2AcceleratorEnvironmentVendor: Nvidia",
        "GLUE2AcceleratorEnvironmentModel: Tesla K20m",
        "GLUE2AcceleratorEnvironmentClockSpeed: 705",
        "GLUE2AcceleratorEnvironmentMemory: 4800",
        "GLUE2AcceleratorEnvironmentComputeCapability: 3.5",
    ] {
        assert!(gpu.contains(line), "{line} missing:\n{gpu}");
    }
    // Linked to the ExecutionEnvironment that exists in the same tree.
    let fk = gpu.lines().find_map(|l| l.strip_prefix("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey: ")).expect("foreign key");
    let ee = search(&slapd, &format!("(&(objectClass=GLUE2ExecutionEnvironment)(GLUE2ResourceID={fk}))"));
    assert_eq!(ee.matches("dn:").count(), 1, "EE {fk}: {ee}");
    // Matching on an integer attribute works (ORDERING from the schema).
    let big = search(&slapd, "(&(objectClass=GLUE2AcceleratorEnvironment)(GLUE2AcceleratorEnvironmentMemory>=4096))");
    assert_eq!(big.matches("dn:").count(), 2, "{big}");

    let manager = search(&slapd, "(&(objectClass=GLUE2ComputingManagerAcceleratorInfo)(GLUE2ComputingManagerAcceleratorInfoType=GPU))");
    for line in [
        "GLUE2ComputingManagerAcceleratorInfoTotalPhysicalAccelerators: 16",
        "GLUE2ComputingManagerAcceleratorInfoTotalAcceleratorSlots: 16",
        "GLUE2ComputingManagerAcceleratorInfoUsedAcceleratorSlots: 5",
        "GLUE2ComputingManagerAcceleratorInfoComputingManagerForeignKey: ce.example.org_ComputingElement_Manager",
    ] {
        assert!(manager.contains(line), "{line} missing:\n{manager}");
    }
    let share = search(&slapd, "(&(objectClass=GLUE2ComputingShareAcceleratorInfo)(GLUE2ComputingShareAcceleratorInfoType=GPU))");
    for line in [
        "GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots: 10",
        "GLUE2ComputingShareAcceleratorInfoUsedAcceleratorSlots: 5",
        "GLUE2ComputingShareAcceleratorInfoMaxAcceleratorSlotsPerJob: 4",
        "GLUE2ComputingShareAcceleratorInfoComputingShareForeignKey: ce.example.org_gpu_share",
    ] {
        assert!(share.contains(line), "{line} missing:\n{share}");
    }
    let fpga = search(&slapd, "(GLUE2ComputingShareAcceleratorInfoType=FPGA)");
    assert!(fpga.contains("GLUE2ComputingShareAcceleratorInfoUsedAcceleratorSlots: 1"), "{fpga}");
}

/// Phase 1 finds a CE through GLUE 2.1 AcceleratorEnvironments alone: the
/// same grid (three GPU sites with their shares and endpoints, two without
/// GPUs) published once with CDER keys (attribute-extension) and once with
/// `glue21-accelerator` only gives the same CEs for the thesis's requests.
#[test]
fn list_match_finds_the_ce_through_glue21_entities_alone() {
    use cder_tests::twophase::{cder_jdl, gpu_sites, grid_ldif, provider, VO};
    use std::process::{Command, Stdio};
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let matches = |slapd: &Slapd, jdl: &str| -> Vec<String> {
        let path = dir.path().join("job.jdl");
        std::fs::write(&path, jdl).unwrap();
        let out = Command::new(cder_jdl())
            .args(["list-match", "--bdii", &slapd.url(), "--json", "--timeout", "20", "--vo", VO])
            .arg(&path)
            .env_remove("LCG_GFAL_INFOSYS")
            .stdin(Stdio::null())
            .output()
            .expect("running cder-jdl");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("list-match printed no JSON ({e}): {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
        let mut ces: Vec<String> = v["matches"].as_array().unwrap().iter().map(|m| m["ce"].as_str().unwrap().to_string()).collect();
        ces.sort();
        ces
    };
    let load = |strategy: &str| {
        let ldif = grid_ldif(&provider(), &gpu_sites(), &[strategy], 2, dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let slapd = Slapd::start_with_schemas(&SlapdOptions::default(), &[schema()]).unwrap_or_else(|e| panic!("{e}"));
        slapd.add_base_entries().unwrap();
        slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
        slapd
    };
    let keys = load("attribute-extension");
    let glue21 = load("glue21-accelerator");
    assert!(!search(&glue21, "(GLUE2EntityOtherInfo=GPGPU*)").contains("dn:"), "the GLUE 2.1 grid carries CDER keys");
    for jdl in [
        "[ Requirements = other.GPGPUVendor == \"Nvidia\" && other.GPGPUMainMemorySize >= 4096 ]",
        "[ Requirements = GPGPUVendor == \"Nvidia\" && (GPGPUMainMemorySize >= 512); Rank = 1 ]",
        "[ Requirements = GPGPUCUDAComputeCapability >= 3.5 ]",
    ] {
        let expected = matches(&keys, jdl);
        assert!(!expected.is_empty(), "{jdl}: no CE with CDER keys either");
        assert_eq!(matches(&glue21, jdl), expected, "{jdl}");
    }
}
