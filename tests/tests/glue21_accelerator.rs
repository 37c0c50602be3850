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
manager_version = "22.05.8"

[counts]
source = "static"

[[group]]
id = "ce.example.org_k20"
nodes = ["gpu[1-4]"]
platform = "amd64"
main_memory_mib = 65536
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
used = 5
offline = 1

[[group.device]]
type = "fpga"
vendor = "Xilinx"
model = "Alveo U250"
count = 1
memory_mib = 65536
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
    let fk = gpu
        .lines()
        .find_map(|l| l.strip_prefix("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey: "))
        .expect("foreign key");
    let ee = search(&slapd, &format!("(&(objectClass=GLUE2ExecutionEnvironment)(GLUE2ResourceID={fk}))"));
    assert_eq!(ee.matches("dn:").count(), 1, "EE {fk}: {ee}");
    // Matching on an integer attribute works (ORDERING from the schema).
    let big = search(&slapd, "(&(objectClass=GLUE2AcceleratorEnvironment)(GLUE2AcceleratorEnvironmentMemory>=4096))");
    assert_eq!(big.matches("dn:").count(), 2, "{big}");

    let manager = search(
        &slapd,
        "(&(objectClass=GLUE2ComputingManagerAcceleratorInfo)(GLUE2ComputingManagerAcceleratorInfoType=GPU))",
    );
    for line in [
        "GLUE2ComputingManagerAcceleratorInfoTotalPhysicalAccelerators: 16",
        "GLUE2ComputingManagerAcceleratorInfoTotalAcceleratorSlots: 16",
        "GLUE2ComputingManagerAcceleratorInfoUsedAcceleratorSlots: 5",
        "GLUE2ComputingManagerAcceleratorInfoComputingManagerForeignKey: ce.example.org_ComputingElement_Manager",
    ] {
        assert!(manager.contains(line), "{line} missing:\n{manager}");
    }
    let share = search(
        &slapd,
        "(&(objectClass=GLUE2ComputingShareAcceleratorInfo)(GLUE2ComputingShareAcceleratorInfoType=GPU))",
    );
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
    use cder_tests::twophase::{cder_jdl, gpu_sites, grid_ldif, index_env, provider, VO};
    use std::process::{Command, Stdio};
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let matches = |slapd: &Slapd, jdl: &str| -> Vec<String> {
        let path = dir.path().join("job.jdl");
        std::fs::write(&path, jdl).unwrap();
        let out = Command::new(cder_jdl())
            .envs(index_env(dir.path()))
            .args(["list-match", "--bdii", &slapd.url(), "--json", "--timeout", "20", "--vo", VO])
            .arg(&path)
            .env_remove("LCG_GFAL_INFOSYS")
            .stdin(Stdio::null())
            .output()
            .expect("running cder-jdl");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "list-match printed no JSON ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let mut ces: Vec<String> =
            v["matches"].as_array().unwrap().iter().map(|m| m["ce"].as_str().unwrap().to_string()).collect();
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

/// Phase 1 reads the GLUE 2.1 counts: each GPU site publishes
/// `glue21-accelerator` only, with a ComputingShareAcceleratorInfo per
/// queue (`site.computing_share_ids`); `GPGPUFreeInstances`,
/// `GPGPUUsedInstances` (share) and `GPGPUTotalInstances` (manager) come
/// from them, follow a change of the published counts, and a hostile
/// service that publishes AcceleratorInfo naming another site's share (and
/// an AcceleratorEnvironment naming its EE) lends that site nothing.
#[test]
fn list_match_reads_glue21_counts_from_the_owning_service_only() {
    use cder_tests::ldap::{ROOT_PASSWORD, SUFFIXES};
    use cder_tests::twophase::{cder_jdl, ce, ce_glue2_ldif, gpu_sites, index_env, provider, GpuSite, VO};
    use std::process::{Command, Stdio};
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let matches = |slapd: &Slapd, requirements: &str| -> Vec<String> {
        let path = dir.path().join("job.jdl");
        std::fs::write(&path, format!("[ Requirements = {requirements} ]")).unwrap();
        let out = Command::new(cder_jdl())
            .envs(index_env(dir.path()))
            .args(["list-match", "--bdii", &slapd.url(), "--json", "--timeout", "20", "--vo", VO])
            .arg(&path)
            .env_remove("LCG_GFAL_INFOSYS")
            .stdin(Stdio::null())
            .output()
            .expect("running cder-jdl");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "list-match printed no JSON ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let mut ces: Vec<String> =
            v["matches"].as_array().unwrap().iter().map(|m| m["ce"].as_str().unwrap().to_string()).collect();
        ces.sort();
        ces
    };
    // The provider's glue21-accelerator output for a site, with AcceleratorInfo for `shares`.
    let publish21 = |site: &GpuSite, shares: &[String]| -> String {
        let list = shares.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
        let config = dir.path().join(format!("{}.toml", site.host));
        std::fs::write(
            &config,
            site.provider_config().replacen("[site]\n", &format!("[site]\ncomputing_share_ids = [{list}]\n"), 1),
        )
        .unwrap();
        let out = Command::new(provider())
            .arg("--config")
            .arg(&config)
            .args(["--strategy", "glue21-accelerator"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let sites = gpu_sites();
    let share_ids =
        |site: &GpuSite| -> Vec<String> { site.queues.iter().map(|q| format!("{}_{}", q.0, site.service())).collect() };
    let mut ldif = String::new();
    for site in &sites {
        ldif.push_str(&publish21(site, &share_ids(site)));
        ldif.push('\n');
        ldif.push_str(&ce_glue2_ldif(&site.host, &site.lrms, &site.service(), Some(&site.group), &site.queues));
    }
    let slapd = Slapd::start_with_schemas(&SlapdOptions::default(), &[schema()]).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !search(&slapd, "(|(objectClass=GLUE2Extension)(GLUE2EntityOtherInfo=GPGPU*))").contains("dn:"),
        "the grid carries CDER keys"
    );

    // ce-a: 5 free, 3 used of 8; ce-b: 8 free of 8; ce-c: 2 free, 6 used of 8 (gpu_sites()).
    let (a, b, c) = (ce(0, "gpu"), ce(1, "gpgpu"), ce(2, "gpu"));
    assert_eq!(matches(&slapd, "other.GPGPUFreeInstances >= 2"), [a.clone(), b.clone(), c.clone()]);
    assert_eq!(matches(&slapd, "other.GPGPUFreeInstances >= 6"), vec![b.clone()]);
    assert_eq!(
        matches(&slapd, "GPGPUTotalInstances == 8 && GPGPUUsedInstances == 3 && GPGPUPerNode == 2"),
        vec![a.clone()]
    );

    // ce-b's free slots drop to 1: it no longer matches.
    let share_info = format!(
        "GLUE2ComputingShareAcceleratorInfoID=gpgpu_{}_GPU,GLUE2ServiceID={},GLUE2GroupID=resource,o=glue",
        sites[1].service(),
        sites[1].service()
    );
    let change = |free: u32| {
        let modify = format!("dn: {share_info}\nchangetype: modify\nreplace: GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots\nGLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots: {free}\n");
        slapd
            .tool("ldapmodify", &["-D", SUFFIXES[1], "-w", ROOT_PASSWORD], Some(&modify))
            .unwrap_or_else(|e| panic!("{e}"));
    };
    change(1);
    assert_eq!(matches(&slapd, "other.GPGPUFreeInstances >= 6"), Vec::<String>::new());
    assert_eq!(matches(&slapd, "other.GPGPUFreeInstances >= 2"), [a.clone(), c.clone()]);
    change(7);
    assert_eq!(matches(&slapd, "other.GPGPUFreeInstances >= 6"), vec![b.clone()]);

    // A hostile service reuses ce-c's EE id and names ce-c's share in its
    // ShareAcceleratorInfo (64 free GPUs of 99999 MB): ce-c keeps its own numbers.
    let mut evil = sites[2].clone();
    evil.host = "evil.example.net".into();
    evil.device = evil.device.replace("memory_mib = 16384", "memory_mib = 99999").replace("count = 1", "count = 8");
    evil.free = 64;
    evil.used = 0;
    slapd.add(&publish21(&evil, &share_ids(&sites[2]))).unwrap_or_else(|e| panic!("{e}"));
    let lent = search(
        &slapd,
        &format!("(GLUE2ComputingShareAcceleratorInfoComputingShareForeignKey={})", share_ids(&sites[2])[0]),
    );
    assert_eq!(lent.matches("dn:").count(), 2, "the hostile AcceleratorInfo is published: {lent}");
    assert_eq!(matches(&slapd, "other.GPGPUFreeInstances >= 50"), Vec::<String>::new());
    assert_eq!(matches(&slapd, "other.GPGPUMainMemorySize >= 50000"), Vec::<String>::new());
    assert_eq!(matches(&slapd, "other.GPGPUFreeInstances == 2 && other.GPGPUMainMemorySize == 16384"), vec![c.clone()]);
    assert_eq!(matches(&slapd, "other.GPGPUFreeInstances >= 2"), [a, b, c]);
}
