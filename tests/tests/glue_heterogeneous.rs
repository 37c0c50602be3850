//! A heterogeneous site: two node groups with different GPU models and
//! counts, one GPU drained, one node down. The provider must publish two
//! ExecutionEnvironments whose totals, free, used and offline counts are
//! right, and slapd (BDII config, GLUE 2.0 schema) must hold them.
//!
//! The counts come from TORQUE's `pbsnodes -x`. TORQUE is not packaged, so
//! `pbsnodes` here is a FAKE: a script printing the XML a TORQUE 6 server
//! gives for these nodes (design.md allows fakes for TORQUE only), and so is
//! `qstat` (`-Qf`, `-f -1`) for the per-VO shares.

use std::collections::BTreeMap;

use cder_tests::glue::{assert_reads_back, other_info, publish};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};

/// wn01: 4 K20s, two held by job 17, one in compute mode Prohibited (drained).
/// wn02: 4 K20s idle. wn03: 2 GTS 450s, one held. wn04: idle. wn05: down,
/// without the `<status>` (CPUs, memory) and topology a running mom reports.
const PBSNODES_XML: &str = "<Data>\
<Node><name>wn01</name><state>free</state><np>16</np><properties>k20</properties><ntype>cluster</ntype>\
<status>opsys=linux,uname=Linux wn01 3.10.0-1160.el7.x86_64 #1 SMP Mon Oct 19 16:18:59 UTC 2020 x86_64,nusers=0,idletime=1234,totmem=73400320kb,availmem=33554432kb,physmem=67108864kb,ncpus=16,loadave=0.00,gres=,state=free,varattr= ,cpuclock=Fixed,version=6.1.3,rectime=1795680000,jobs=17.ce.example.org</status><total_sockets>2</total_sockets><total_numa_nodes>2</total_numa_nodes><total_cores>8</total_cores><total_threads>16</total_threads><jobs>0-1/17.ce.example.org</jobs><gpus>4</gpus>\
<gpu_status>gpu[3]=gpu_id=0000:84:00.0;gpu_mode=Default;gpu_state=Unallocated,gpu[2]=gpu_id=0000:83:00.0;gpu_mode=Prohibited;gpu_state=Unallocated,\
gpu[1]=gpu_id=0000:04:00.0;gpu_mode=Exclusive_Thread;gpu_state=Exclusive,gpu[0]=gpu_id=0000:03:00.0;gpu_mode=Exclusive_Thread;gpu_state=Exclusive</gpu_status></Node>\
<Node><name>wn02</name><state>free</state><np>16</np><properties>k20</properties><ntype>cluster</ntype>\
<status>opsys=linux,uname=Linux wn02 3.10.0-1160.el7.x86_64 #1 SMP Mon Oct 19 16:18:59 UTC 2020 x86_64,nusers=0,idletime=1234,totmem=73400320kb,availmem=33554432kb,physmem=67108864kb,ncpus=16,loadave=0.00,gres=,state=free,varattr= ,cpuclock=Fixed,version=6.1.3,rectime=1795680000,jobs=</status><total_sockets>2</total_sockets><total_numa_nodes>2</total_numa_nodes><total_cores>8</total_cores><total_threads>16</total_threads><gpus>4</gpus>\
<gpu_status>gpu[3]=gpu_mode=Default;gpu_state=Unallocated,gpu[2]=gpu_mode=Default;gpu_state=Unallocated,gpu[1]=gpu_mode=Default;gpu_state=Unallocated,gpu[0]=gpu_mode=Default;gpu_state=Unallocated</gpu_status></Node>\
<Node><name>wn03</name><state>free</state><np>8</np><ntype>cluster</ntype>\
<status>opsys=linux,uname=Linux wn03 3.10.0-1160.el7.x86_64 #1 SMP Mon Oct 19 16:18:59 UTC 2020 x86_64,nusers=0,idletime=1234,totmem=20971520kb,availmem=8388608kb,physmem=16777216kb,ncpus=8,loadave=0.00,gres=,state=free,varattr= ,cpuclock=Fixed,version=6.1.3,rectime=1795680000,jobs=18.ce.example.org</status><total_sockets>1</total_sockets><total_numa_nodes>1</total_numa_nodes><total_cores>4</total_cores><total_threads>8</total_threads><jobs>0/18.ce.example.org</jobs><gpus>2</gpus>\
<gpu_status>gpu[1]=gpu_mode=Default;gpu_state=Unallocated,gpu[0]=gpu_mode=Exclusive_Thread;gpu_state=Exclusive</gpu_status></Node>\
<Node><name>wn04</name><state>free</state><np>8</np><ntype>cluster</ntype>\
<status>opsys=linux,uname=Linux wn04 3.10.0-1160.el7.x86_64 #1 SMP Mon Oct 19 16:18:59 UTC 2020 x86_64,nusers=0,idletime=1234,totmem=20971520kb,availmem=8388608kb,physmem=16777216kb,ncpus=8,loadave=0.00,gres=,state=free,varattr= ,cpuclock=Fixed,version=6.1.3,rectime=1795680000,jobs=</status><total_sockets>1</total_sockets><total_numa_nodes>1</total_numa_nodes><total_cores>4</total_cores><total_threads>8</total_threads><gpus>2</gpus>\
<gpu_status>gpu[1]=gpu_mode=Default;gpu_state=Unallocated,gpu[0]=gpu_mode=Default;gpu_state=Unallocated</gpu_status></Node>\
<Node><name>wn05</name><state>down</state><np>8</np><ntype>cluster</ntype><gpus>2</gpus></Node>\
<Node><name>login1</name><state>free</state><np>4</np><ntype>cluster</ntype></Node>\
</Data>";

fn site(pbsnodes: &std::path::Path) -> String {
    format!(
        r#"[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-pbs-gpgpu"

[service]
type = "org.glite.ce.CREAM"
admin_domain = "EXAMPLE-SITE"
manager_product = "TORQUE"

[counts]
source = "torque"
pbsnodes = "{}"

[[group]]
id = "ce.example.org_k20"
nodes = ["wn[01-02]"]
platform = "amd64"
main_memory_mib = 65536
os_name = "CentOS"
os_version = "7.9"

[[group.device]]
model = "Tesla K20m"
count = 4
memory_mib = 4800
compute_capability = "3.5"
ecc = true

[[group]]
id = "ce.example.org_gts450"
nodes = ["wn[03-05]"]
platform = "amd64"
main_memory_mib = 16384
os_name = "CentOS"
os_version = "7.9"

[[group.device]]
model = "GeForce GTS 450"
count = 2
memory_mib = 1024
compute_capability = "2.1"
"#,
        pbsnodes.display()
    )
}

#[test]
fn two_groups_publish_their_own_counts() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("pbsnodes");
    std::fs::write(&fake, format!("#!/bin/sh\n[ \"$1\" = -x ] || exit 2\ncat <<'XML'\n{PBSNODES_XML}\nXML\n")).unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.path().join("glue-provider.toml");
    std::fs::write(&config, site(&fake)).unwrap();

    let ldif = publish(&config, &["attribute-extension", "class-extension"]);
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    assert_reads_back(&slapd, &ldif);

    let found = slapd.search("o=glue", "(objectClass=GLUE2ExecutionEnvironment)", &[]).unwrap();
    let ees = cder_glue_provider::ldif::parse(&found).unwrap();
    assert_eq!(ees.len(), 2, "{found}");
    let by_id: BTreeMap<&str, _> = ees.iter().map(|e| (e.values("GLUE2ResourceID").next().unwrap(), e)).collect();

    let k20 = by_id["ce.example.org_k20"];
    let info = other_info(k20);
    assert_eq!(
        [
            &info["GPGPUTotalInstances"],
            &info["GPGPUFreeInstances"],
            &info["GPGPUUsedInstances"],
            &info["GPGPUOfflineInstances"]
        ],
        ["8", "5", "2", "1"],
        "K20 group: 8 GPUs, 2 used by job 17, 1 drained"
    );
    assert_eq!(info["GPGPUModel"], "Tesla K20m");
    assert_eq!(info["GPGPUPerNode"], "4");
    assert_eq!(k20.values("GLUE2ExecutionEnvironmentTotalInstances").collect::<Vec<_>>(), ["2"]);
    assert_eq!(k20.values("GLUE2ExecutionEnvironmentUsedInstances").collect::<Vec<_>>(), ["1"]);
    assert_eq!(k20.values("GLUE2ExecutionEnvironmentUnavailableInstances").collect::<Vec<_>>(), ["0"]);

    let gts = by_id["ce.example.org_gts450"];
    let info = other_info(gts);
    assert_eq!(
        [
            &info["GPGPUTotalInstances"],
            &info["GPGPUFreeInstances"],
            &info["GPGPUUsedInstances"],
            &info["GPGPUOfflineInstances"]
        ],
        ["6", "3", "1", "2"],
        "GTS 450 group: 6 GPUs, 1 used, wn05 down"
    );
    assert_eq!(info["GPGPUModel"], "GeForce GTS 450");
    assert_eq!(gts.values("GLUE2ExecutionEnvironmentUnavailableInstances").collect::<Vec<_>>(), ["1"]);

    // CPUs and slots from pbsnodes: wn05 (down, no <status>) counts as its group's other nodes.
    let manager = slapd.search("o=glue", "(objectClass=GLUE2ComputingManager)", &[]).unwrap();
    for (attribute, total) in [
        ("GLUE2ComputingManagerTotalPhysicalCPUs", "7"),
        ("GLUE2ComputingManagerTotalLogicalCPUs", "56"),
        ("GLUE2ComputingManagerTotalSlots", "56"),
    ] {
        assert!(manager.contains(&format!("{attribute}: {total}\n")), "{attribute} {total}: {manager}");
    }
    // totmem (RAM + swap) in MB: 73400320 kb / 1024.
    assert_eq!(k20.values("GLUE2ExecutionEnvironmentVirtualMemorySize").collect::<Vec<_>>(), ["71680"]);

    // The Class-Extension copy agrees, queried by key and foreign key.
    let offline = slapd
        .search(
            "o=glue",
            "(&(GLUE2ExtensionKey=GPGPUOfflineInstances)(GLUE2ExtensionEntityForeignKey=ce.example.org_gts450))",
            &["GLUE2ExtensionValue"],
        )
        .unwrap();
    assert!(offline.contains("GLUE2ExtensionValue: 2"), "{offline}");
}

/// `qstat -Qf`: `gpu` open to atlas and cms on every node, `k20` to atlas on
/// the nodes with property k20 (wn01, wn02).
const QSTAT_QF: &str = "Queue: gpu
    queue_type = Execution
    acl_group_enable = True
    acl_groups = atlas,cms
    enabled = True
    started = True

Queue: k20
    queue_type = Execution
    acl_group_enable = True
    acl_groups = atlas
    resources_default.neednodes = k20
    resources_max.walltime = 48:00:00
    resources_default.walltime = 02:00:00
    resources_max.cput = 48:00:00
    resources_max.mem = 32gb
    max_running = 10
    max_queuable = 100
    enabled = True
    started = True
";

/// `qstat -f -1`: job 17 (atlas, 2 GPUs on wn01), job 18 (cms, 1 GPU on wn03).
const QSTAT_F: &str = "Job Id: 17.ce.example.org
    job_state = R
    queue = k20
    euser = atlas001
    egroup = atlas
    exec_host = wn01/0-3
    exec_gpus = wn01-gpu/0+wn01-gpu/1
    Resource_List.walltime = 02:00:00
    resources_used.walltime = 00:30:00

Job Id: 18.ce.example.org
    job_state = R
    queue = gpu
    euser = cms001
    egroup = cms
    exec_gpus = wn03-gpu/0
";

#[test]
fn torque_queue_acls_give_each_vo_its_share() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fake = |name: &str, body: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        path
    };
    let pbsnodes =
        fake("pbsnodes", format!("#!/bin/sh\n[ \"$1\" = -x ] || exit 2\ncat <<'XML'\n{PBSNODES_XML}\nXML\n"));
    let qstat = fake(
        "qstat",
        format!(
            "#!/bin/sh\ncase \"$*\" in\n-Qf) cat <<'Q'\n{QSTAT_QF}Q\n;;\n'-f -1') cat <<'J'\n{QSTAT_F}J\n;;\n*) exit 2;;\nesac\n"
        ),
    );
    let config = dir.path().join("glue-provider.toml");
    let text = site(&pbsnodes)
        .replace("source = \"torque\"\n", &format!("source = \"torque\"\nqstat = \"{}\"\n", qstat.display()))
        + "\n[[vo]]\nname = \"atlas\"\ngroups = [\"atlas\"]\n\n[[vo]]\nname = \"cms\"\ngroups = [\"cms\"]\n";
    std::fs::write(&config, text).unwrap();

    let ldif = publish(&config, &["attribute-extension", "class-extension", "glue21-accelerator"]);
    let schema = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/bdii/GLUE21-accelerator.schema");
    let slapd = Slapd::start_with_schemas(&SlapdOptions::default(), &[schema]).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    assert_reads_back(&slapd, &ldif);

    let found = slapd.search("o=glue", "(objectClass=GLUE2ComputingShare)", &[]).unwrap();
    let shares: BTreeMap<String, [String; 4]> = cder_glue_provider::ldif::parse(&found)
        .unwrap()
        .iter()
        .map(|e| {
            let info = other_info(e);
            let k = |key: &str| info.get(key).cloned().unwrap_or_default();
            (
                e.values("GLUE2ShareID").next().unwrap().to_string(),
                [k("GPGPUTotalInstances"), k("GPGPUFreeInstances"), k("GPGPUUsedInstances"), k("GPGPUPerNode")],
            )
        })
        .collect();
    let s = |v: [&str; 4]| v.map(String::from);
    let expected: BTreeMap<String, [String; 4]> = [
        // Every node: 14 GPUs, 8 free (2 + 4 K20s, 1 + 0 + 0 GTS 450s), atlas's job is in k20.
        ("gpu_atlas_ce.example.org_ComputingElement".to_string(), s(["14", "8", "0", "4"])),
        ("gpu_cms_ce.example.org_ComputingElement".to_string(), s(["14", "8", "1", "4"])),
        // wn01 and wn02 only: 8 K20s, 5 free (2 held by atlas's job, 1 drained).
        ("k20_atlas_ce.example.org_ComputingElement".to_string(), s(["8", "5", "2", "4"])),
    ]
    .into();
    assert_eq!(shares, expected, "{found}");
    let policies = slapd
        .search(
            "o=glue",
            "(&(objectClass=GLUE2MappingPolicy)(GLUE2PolicyRule=VO:cms))",
            &["GLUE2MappingPolicyShareForeignKey"],
        )
        .unwrap();
    assert!(
        policies.contains("GLUE2MappingPolicyShareForeignKey: gpu_cms_ce.example.org_ComputingElement"),
        "{policies}"
    );
    assert!(!policies.contains("k20_"), "k20 is not open to cms: {policies}");
    let acc = slapd
        .search(
            "o=glue",
            "(GLUE2ComputingShareAcceleratorInfoComputingShareForeignKey=k20_atlas_ce.example.org_ComputingElement)",
            &["GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots"],
        )
        .unwrap();
    assert!(acc.contains("GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots: 5"), "{acc}");
    let ext = slapd
        .search(
            "o=glue",
            "(&(GLUE2ExtensionKey=GPGPUUsedInstances)(GLUE2ExtensionEntityForeignKey=gpu_cms_ce.example.org_ComputingElement))",
            &["GLUE2ExtensionValue"],
        )
        .unwrap();
    assert!(ext.contains("GLUE2ExtensionValue: 1"), "{ext}");

    // EGI's profile on the shares: the limits, slots and jobs come from qstat -Qf / -f -1.
    let text = publish(&config, &["attribute-extension", "class-extension", "hybrid"]);
    let v = cder_tests::glue::glue_validator(&text, &[]);
    assert_eq!((v.errors, v.warnings), (0, 0), "per-VO shares, EGI profile\n{}\n{text}", v.output);
    let entries = cder_glue_provider::ldif::parse(&text).unwrap();
    let k20 = entries.iter().find(|e| e.dn.starts_with("GLUE2ShareID=k20_atlas_")).unwrap();
    let get = |a: &str| k20.values(a).next().unwrap_or_else(|| panic!("no {a}")).to_string();
    assert_eq!(get("GLUE2ComputingShareMaxWallTime"), "172800");
    assert_eq!(get("GLUE2ComputingShareDefaultWallTime"), "7200");
    // No resources_default.cput: a job is held to the maximum.
    assert_eq!(get("GLUE2ComputingShareDefaultCPUTime"), "172800");
    assert_eq!(get("GLUE2ComputingShareMaxMainMemory"), "32768");
    assert_eq!(
        (get("GLUE2ComputingShareMaxRunningJobs"), get("GLUE2ComputingShareMaxTotalJobs")),
        ("10".into(), "100".into())
    );
    // wn01, wn02: 16 slots each, atlas's job holds 4 of wn01's.
    assert_eq!((get("GLUE2ComputingShareFreeSlots"), get("GLUE2ComputingShareUsedSlots")), ("28".into(), "4".into()));
    assert_eq!(
        (get("GLUE2ComputingShareRunningJobs"), get("GLUE2ComputingShareWaitingJobs")),
        ("1".into(), "0".into())
    );
    assert_eq!(get("GLUE2ComputingShareEstimatedWorstWaitingTime"), "0");
}
