//! A heterogeneous site: two node groups with different GPU models and
//! counts, one GPU drained, one node down. The provider must publish two
//! ExecutionEnvironments whose totals, free, used and offline counts are
//! right, and slapd (BDII config, GLUE 2.0 schema) must hold them.
//!
//! The counts come from TORQUE's `pbsnodes -x`. TORQUE is not packaged, so
//! `pbsnodes` here is a FAKE: a script printing the XML a TORQUE 6 server
//! gives for these nodes (design.md allows fakes for TORQUE only).

use std::collections::BTreeMap;

use cder_tests::glue::{assert_reads_back, other_info, publish};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};

/// wn01: 4 K20s, two held by job 17, one in compute mode Prohibited (drained).
/// wn02: 4 K20s idle. wn03: 2 GTS 450s, one held. wn04: idle. wn05: down,
/// without the `<status>` (CPUs, memory) and topology a running mom reports.
const PBSNODES_XML: &str = "<Data>\
<Node><name>wn01</name><state>free</state><np>16</np><ntype>cluster</ntype>\
<status>opsys=linux,uname=Linux wn01 3.10.0-1160.el7.x86_64 #1 SMP Mon Oct 19 16:18:59 UTC 2020 x86_64,nusers=0,idletime=1234,totmem=73400320kb,availmem=33554432kb,physmem=67108864kb,ncpus=16,loadave=0.00,gres=,state=free,varattr= ,cpuclock=Fixed,version=6.1.3,rectime=1795680000,jobs=17.ce.example.org</status><total_sockets>2</total_sockets><total_numa_nodes>2</total_numa_nodes><total_cores>8</total_cores><total_threads>16</total_threads><jobs>0-1/17.ce.example.org</jobs><gpus>4</gpus>\
<gpu_status>gpu[3]=gpu_id=0000:84:00.0;gpu_mode=Default;gpu_state=Unallocated,gpu[2]=gpu_id=0000:83:00.0;gpu_mode=Prohibited;gpu_state=Unallocated,\
gpu[1]=gpu_id=0000:04:00.0;gpu_mode=Exclusive_Thread;gpu_state=Exclusive,gpu[0]=gpu_id=0000:03:00.0;gpu_mode=Exclusive_Thread;gpu_state=Exclusive</gpu_status></Node>\
<Node><name>wn02</name><state>free</state><np>16</np><ntype>cluster</ntype>\
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
main_memory_mb = 65536
os_name = "CentOS"
os_version = "7.9"

[[group.device]]
model = "Tesla K20m"
count = 4
memory_mb = 4800
compute_capability = "3.5"
ecc = true

[[group]]
id = "ce.example.org_gts450"
nodes = ["wn[03-05]"]
platform = "amd64"
main_memory_mb = 16384
os_name = "CentOS"
os_version = "7.9"

[[group.device]]
model = "GeForce GTS 450"
count = 2
memory_mb = 1024
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
