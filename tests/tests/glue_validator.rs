//! EGI's glue-validator (the vendored copy in third-party/glue-validator,
//! as EGI's monitoring runs it against site BDIIs) on the provider's output:
//! every strategy × every count source, EGI profile for GLUE 2.0 and the
//! glue1 tests for GLUE 1.3, 0 errors and 0 warnings. The values EGI
//! requires come from the source where it has them, and are checked here
//! against that source: SLURM `CPUTot=`/`Sockets=` (a fake `scontrol`
//! printing SLURM 22.05's format here; glue_slurm:: runs the real one),
//! TORQUE 6 `<np>`, `ncpus=`, `totmem=`, `<total_sockets>` (a fake
//! `pbsnodes`, TORQUE not being packaged), this node's /proc and
//! /etc/os-release for cderd (a real cderd), or the config.
//!
//! `glue21-accelerator` is the exception the validator makes: its object
//! classes list is GLUE 2.0's, so each GLUE 2.1 entity is one E021 ("The
//! object class is not valid") and nothing else; the test pins exactly that.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use cder_glue_provider::ldif::{self, Entry};
use cder_testkit::TestNode;
use cder_tests::bdii::built_binary;
use cder_tests::glue::{glue_validator, publish, require_glue_validator, ValidatorVerdict};

const GLUE2_STRATEGIES: [&str; 4] =
    ["attribute-extension", "class-extension", "hybrid", "attribute-extension,class-extension,hybrid"];
const GLUE21_CLASSES: [&str; 3] =
    ["GLUE2AcceleratorEnvironment", "GLUE2ComputingManagerAcceleratorInfo", "GLUE2ComputingShareAcceleratorInfo"];

/// `[site]` (with a share for glue21-accelerator), `[service]` (so the
/// ComputingManager is published and validated too) and `[counts]`.
fn head(counts: &str) -> String {
    format!(
        r#"[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-slurm-gpgpu"
cluster_id = "ce.example.org"
computing_share_ids = ["ce.example.org_gpu_ops"]

[service]
type = "org.glite.ce.CREAM"
admin_domain = "EXAMPLE-SITE"
manager_product = "SLURM"
manager_version = "22.05.8"

[counts]
{counts}

[[virtual]]
method = "rCUDA"
version = "16.11"
total = 8
free = 5
"#
    )
}

fn entry<'a>(entries: &'a [Entry], rdn: &str) -> &'a Entry {
    entries.iter().find(|e| e.dn.starts_with(rdn)).unwrap_or_else(|| panic!("no {rdn}"))
}

fn value<'a>(e: &'a Entry, attribute: &'a str) -> &'a str {
    e.values(attribute).next().unwrap_or_else(|| panic!("{} has no {attribute}", e.dn))
}

/// Runs the provider with every strategy on `config` and the validator on
/// each output; asserts 0 errors and 0 warnings (GLUE 2.1: exactly one E021
/// per GLUE 2.1 entity). Returns the GLUE 2.0 entries of the first
/// strategy (for the caller's value checks) and the table's rows.
fn validate_every_strategy(source: &str, config: &Path) -> (Vec<Entry>, Vec<String>) {
    let mut rows = Vec::new();
    let mut first = None;
    for strategy in GLUE2_STRATEGIES {
        let text = publish(config, &[strategy]);
        let v = glue_validator(&text, &[]);
        assert_eq!((v.errors, v.warnings), (0, 0), "{source} × {strategy}: EGI profile\n{}\n{text}", v.output);
        rows.push(row(source, strategy, "EGI profile", &v));
        first.get_or_insert_with(|| ldif::parse(&text).unwrap());
    }

    let text = publish(config, &["glue21-accelerator"]);
    let v = glue_validator(&text, &[]);
    let glue21: Vec<Entry> = ldif::parse(&text)
        .unwrap()
        .into_iter()
        .filter(|e| e.values("objectClass").any(|c| GLUE21_CLASSES.contains(&c)))
        .collect();
    assert!(!glue21.is_empty(), "{source}: no GLUE 2.1 entity in\n{text}");
    assert_eq!(v.warnings, 0, "{source} × glue21-accelerator\n{}", v.output);
    let errors: Vec<(&str, &str)> = v.of('E').iter().map(|m| (m.code.as_str(), m.value.as_str())).collect();
    let mut expected: Vec<(&str, &str)> = glue21
        .iter()
        .map(|e| ("E021", e.values("objectClass").find(|c| GLUE21_CLASSES.contains(c)).unwrap()))
        .collect();
    let mut got = errors.clone();
    got.sort();
    expected.sort();
    assert_eq!(got, expected, "{source} × glue21-accelerator: only the GLUE 2.1 classes are refused\n{}", v.output);
    rows.push(row(source, "glue21-accelerator", "EGI profile", &v));

    let text = publish(config, &["tagged-environment"]);
    let v = glue_validator(&text, &["-g", "glue1", "-s", "general"]);
    assert_eq!((v.errors, v.warnings, v.info), (0, 0, 0), "{source} × tagged-environment: glue1\n{}\n{text}", v.output);
    rows.push(row(source, "tagged-environment", "glue1 general", &v));
    (first.unwrap(), rows)
}

fn row(source: &str, strategy: &str, tests: &str, v: &ValidatorVerdict) -> String {
    format!("| {source} | {strategy} | {tests} | {} | {} | {} |", v.errors, v.warnings, v.info)
}

fn print_table(rows: &[String]) {
    eprintln!("| source | strategy | tests | errors | warnings | info |\n|---|---|---|---|---|---|");
    for r in rows {
        eprintln!("{r}");
    }
}

fn executable(dir: &Path, name: &str, script: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

#[test]
fn static_source_every_strategy_is_clean() {
    if !require_glue_validator() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("glue-provider.toml");
    // Everything from the config: the static source reads no hardware.
    std::fs::write(
        &config,
        head("source = \"static\"")
            + r#"
[[group]]
id = "ce.example.org_k20"
name = "K20 nodes"
nodes = ["gpu[01-12]"]
platform = "amd64"
main_memory_mib = 65536
virtual_memory_mib = 81920
os_name = "CentOS"
os_version = "7.9"
physical_cpus = 2
logical_cpus = 32
cpu_time_scaling_factor = 0.85
wall_time_scaling_factor = 1

[[group.device]]
model = "Tesla K20m"
count = 4
memory_mib = 4800
compute_capability = "3.5"
used = 5
offline = 1
"#,
    )
    .unwrap();
    let (entries, rows) = validate_every_strategy("static", &config);
    print_table(&rows);
    let manager = entry(&entries, "GLUE2ManagerID=");
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalPhysicalCPUs"), "24");
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalLogicalCPUs"), "384");
    // Slots are the LRMS's figure: a config alone has none.
    assert!(manager.values("GLUE2ComputingManagerTotalSlots").next().is_none());
    let ee = entry(&entries, "GLUE2ResourceID=ce.example.org_k20");
    assert_eq!(value(ee, "GLUE2ExecutionEnvironmentCPUTimeScalingFactor"), "0.85");
    assert_eq!(value(ee, "GLUE2ExecutionEnvironmentWallTimeScalingFactor"), "1");
    assert_eq!(value(ee, "GLUE2ExecutionEnvironmentVirtualMemorySize"), "81920");
}

/// `scontrol -d show node -o` as SLURM 22.05 prints it: wn01 runs a job on
/// 4 of its 32 CPUs and 2 of its GPUs, wn02 is idle, wn03 (the T4 group,
/// 1 socket × 16 CPUs) is down and not responding.
const SCONTROL: &str = "NodeName=wn01 Arch=x86_64 CoresPerSocket=8 CPUAlloc=4 CPUEfctv=32 CPUTot=32 CPULoad=3.98 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:k20m:4(S:0-1) GresDrain=N/A GresUsed=gpu:k20m:2(IDX:0-1) NodeAddr=wn01 NodeHostName=wn01 Version=22.05.8 OS=Linux 5.10.0-26-amd64 #1 SMP Debian 5.10.197-1 (2023-09-29)  RealMemory=64000 AllocMem=8000 FreeMem=51234 Sockets=2 Boards=1 State=MIXED ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-20T08:12:44 SlurmdStartTime=2026-11-20T08:13:02 LastBusyTime=2026-11-26T08:55:01 CfgTRES=cpu=32,mem=62.50G,billing=32,gres/gpu=4 AllocTRES=cpu=4,mem=8000M,gres/gpu=2 CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
NodeName=wn02 Arch=x86_64 CoresPerSocket=8 CPUAlloc=0 CPUEfctv=32 CPUTot=32 CPULoad=0.01 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:k20m:4(S:0-1) GresDrain=N/A GresUsed=gpu:k20m:0(IDX:N/A) NodeAddr=wn02 NodeHostName=wn02 Version=22.05.8 OS=Linux 5.10.0-26-amd64 #1 SMP Debian 5.10.197-1 (2023-09-29)  RealMemory=64000 AllocMem=0 FreeMem=60110 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-20T08:12:51 SlurmdStartTime=2026-11-20T08:13:09 LastBusyTime=2026-11-26T07:01:44 CfgTRES=cpu=32,mem=62.50G,billing=32,gres/gpu=4 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
NodeName=wn03 Arch=x86_64 CoresPerSocket=8 CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=N/A AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:t4:2(S:0) GresDrain=N/A GresUsed=gpu:t4:0(IDX:N/A) NodeAddr=wn03 NodeHostName=wn03 Version=22.05.8 OS=Linux 5.10.0-26-amd64 #1 SMP Debian 5.10.197-1 (2023-09-29)  RealMemory=32000 AllocMem=0 FreeMem=N/A Sockets=1 Boards=1 State=DOWN* ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=None SlurmdStartTime=None LastBusyTime=2026-11-25T22:10:03 CfgTRES=cpu=16,mem=31.25G,billing=16,gres/gpu=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=Not responding [slurm@2026-11-26T08:40:00]
";

#[test]
fn slurm_source_every_strategy_is_clean() {
    if !require_glue_validator() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let scontrol = executable(
        dir.path(),
        "scontrol",
        &format!("#!/bin/sh\n[ \"$*\" = \"-d show node -o\" ] || exit 2\ncat <<'EOF'\n{SCONTROL}EOF\n"),
    );
    let config = dir.path().join("glue-provider.toml");
    // SLURM reports CPUs and sockets, not swap or the distribution: those come from the config.
    std::fs::write(
        &config,
        head(&format!("source = \"slurm\"\nscontrol = \"{}\"", scontrol.display()))
            + r#"
[[group]]
id = "ce.example.org_k20"
nodes = ["wn[01-02]"]
platform = "amd64"
main_memory_mib = 64000
virtual_memory_mib = 72192
os_name = "Debian"
os_version = "11"

[[group.device]]
model = "Tesla K20m"
count = 4
memory_mib = 4800
gres_type = "k20m"

[[group]]
id = "ce.example.org_t4"
nodes = ["wn03"]
platform = "amd64"
main_memory_mib = 32000
virtual_memory_mib = 32000
os_name = "Debian"
os_version = "11"

[[group.device]]
model = "Tesla T4"
count = 2
memory_mib = 16384
gres_type = "t4"
"#,
    )
    .unwrap();
    let (entries, rows) = validate_every_strategy("slurm (scontrol)", &config);
    print_table(&rows);
    let manager = entry(&entries, "GLUE2ManagerID=");
    // Sockets= 2 + 2 + 1, CPUTot= 32 + 32 + 16: the down node is still the LRMS's.
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalPhysicalCPUs"), "5");
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalLogicalCPUs"), "80");
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalSlots"), "80");
    let k20 = entry(&entries, "GLUE2ResourceID=ce.example.org_k20");
    assert_eq!(value(k20, "GLUE2ExecutionEnvironmentPhysicalCPUs"), "2");
    assert_eq!(value(k20, "GLUE2ExecutionEnvironmentLogicalCPUs"), "32");
    assert_eq!(value(k20, "GLUE2ExecutionEnvironmentCPUTimeScalingFactor"), "1");
    let glue13 = ldif::parse(&publish(&config, &["tagged-environment"])).unwrap();
    let t4 = entry(&glue13, "GlueSubClusterUniqueID=ce.example.org_t4");
    assert_eq!((value(t4, "GlueSubClusterPhysicalCPUs"), value(t4, "GlueSubClusterLogicalCPUs")), ("1", "16"));
}

/// `scontrol --all show partition -o` (22.05): one partition over the three
/// nodes with wall time, node, CPU and memory limits.
const PARTITION: &str = "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A DefaultTime=04:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=1 MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=16 Nodes=wn[01-03] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=80 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerCPU=2000 MaxMemPerNode=48000
";

/// `squeue --all --noheader --states=PENDING,RUNNING --Format …` (the
/// provider's fields, `~` for the run's separator): an atlas and a cms job
/// fill wn01 and wn02, a second atlas job waits.
const JOBS: &str = "21~RUNNING~gpu~atlas~normal~atlas001~atlas~32~1~1~1-00:00:00~10:00:00~cpu=32,mem=64000M,node=1,billing=32,gres/gpu=2,gres/gpu:k20m=2~N/A~gres:gpu:k20m:2~N/A~
22~RUNNING~gpu~cms~normal~cms001~cms~32~1~1~4:00:00~1:00:00~cpu=32,mem=2000M,node=1,billing=32~N/A~N/A~N/A~
23~PENDING~gpu~atlas~normal~atlas001~atlas~16~1~1~4:00:00~0:00~cpu=16,node=1,billing=16~N/A~N/A~N/A~
";

/// A stand-in `squeue` that prints [`JOBS`] with the separator the provider
/// asked for (the suffix of its first `--Format` field).
fn fake_squeue(dir: &Path) -> PathBuf {
    executable(
        dir,
        "squeue",
        &format!(
            "#!/bin/sh\n[ \"$1 $2 $3 $4\" = '--all --noheader --states=PENDING,RUNNING --Format' ] || exit 2\n\
             sep=${{5%%,*}}; sep=${{sep#JobID:0}}\nsed \"s/~/$sep/g\" <<'EOF'\n{JOBS}EOF\n"
        ),
    )
}

#[test]
fn slurm_vo_shares_are_clean() {
    if !require_glue_validator() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let nodes =
        SCONTROL.replace("CPUAlloc=4 ", "CPUAlloc=32 ").replace("CPUAlloc=0 CPUEfctv=32", "CPUAlloc=32 CPUEfctv=32");
    let scontrol = executable(
        dir.path(),
        "scontrol",
        &format!(
            "#!/bin/sh\ncase \"$*\" in\n'-d show node -o') cat <<'EOF'\n{nodes}EOF\n;;\n'--all show partition -o') cat <<'EOF'\n{PARTITION}EOF\n;;\n*) exit 2;;\nesac\n"
        ),
    );
    let config = dir.path().join("glue-provider.toml");
    std::fs::write(
        &config,
        head(&format!(
            "source = \"slurm\"\nscontrol = \"{}\"\nsqueue = \"{}\"",
            scontrol.display(),
            fake_squeue(dir.path()).display()
        )) + r#"
[[group]]
id = "ce.example.org_k20"
nodes = ["wn[01-02]"]
platform = "amd64"
main_memory_mib = 64000
virtual_memory_mib = 72192
os_name = "Debian"
os_version = "11"

[[group.device]]
model = "Tesla K20m"
count = 4
memory_mib = 4800
gres_type = "k20m"

[[group]]
id = "ce.example.org_t4"
nodes = ["wn03"]
platform = "amd64"
main_memory_mib = 32000
virtual_memory_mib = 32000
os_name = "Debian"
os_version = "11"

[[group.device]]
model = "Tesla T4"
count = 2
memory_mib = 16384
gres_type = "t4"

[[vo]]
name = "atlas"
accounts = ["atlas"]

[[vo]]
name = "cms"
accounts = ["cms"]
"#,
    )
    .unwrap();
    let (entries, rows) = validate_every_strategy("slurm per-VO shares", &config);
    print_table(&rows);
    let atlas = entry(&entries, "GLUE2ShareID=gpu_atlas_");
    let v = |a: &'static str| value(atlas, a);
    // MaxTime=2-00:00:00, DefaultTime=04:00:00; SLURM limits no CPU time: the wall time bounds it.
    assert_eq!((v("GLUE2ComputingShareMaxWallTime"), v("GLUE2ComputingShareDefaultWallTime")), ("172800", "14400"));
    assert_eq!(v("GLUE2ComputingShareDefaultCPUTime"), "14400");
    // MaxNodes=1 × MaxCPUsPerNode=16.
    assert_eq!(v("GLUE2ComputingShareMaxSlotsPerJob"), "16");
    // MaxMemPerNode=48000 under the 64000 MB nodes; DefMemPerCPU=2000 is what a job gets unasked.
    assert_eq!(
        (v("GLUE2ComputingShareMaxMainMemory"), v("GLUE2ComputingShareGuaranteedMainMemory")),
        ("48000", "2000")
    );
    assert_eq!(
        (v("GLUE2ComputingShareMaxVirtualMemory"), v("GLUE2ComputingShareGuaranteedVirtualMemory")),
        ("72192", "32000")
    );
    assert_eq!((v("GLUE2ComputingShareRunningJobs"), v("GLUE2ComputingShareWaitingJobs")), ("1", "1"));
    assert_eq!((v("GLUE2ComputingShareFreeSlots"), v("GLUE2ComputingShareUsedSlots")), ("0", "32"));
    // No idle slot, one job ahead: the second running job to reach its limit (atlas's, 14 h left) makes room.
    assert_eq!(v("GLUE2ComputingShareEstimatedWorstWaitingTime"), "50400");
    assert_eq!(v("GLUE2ComputingShareEstimatedAverageWaitingTime"), "25200");
    let cms = entry(&entries, "GLUE2ShareID=gpu_cms_");
    assert_eq!(value(cms, "GLUE2ComputingShareUsedSlots"), "32");
    assert_eq!(value(cms, "GLUE2ComputingShareWaitingJobs"), "0");
}

/// `pbsnodes -x` as a TORQUE 6.1 server (built with hwloc) prints it:
/// `<np>`, `<status>` with `ncpus` and `totmem` (RAM + swap, kb), and the
/// `<total_sockets>` … topology; wn03 is down and has no `<status>`.
const PBSNODES: &str = "<Data>\
<Node><name>wn01</name><state>free</state><power_state>Running</power_state><np>32</np><ntype>cluster</ntype><jobs>0-3/17.ce.example.org</jobs>\
<status>opsys=linux,uname=Linux wn01 3.10.0-1160.el7.x86_64 #1 SMP Mon Oct 19 16:18:59 UTC 2020 x86_64,sessions=4242,nsessions=1,nusers=1,idletime=1234,totmem=82836452kb,availmem=70111020kb,physmem=65923888kb,ncpus=32,loadave=4.00,gres=,netload=1234567890,state=free,varattr= ,cpuclock=Fixed,macaddr=00:25:90:aa:bb:01,version=6.1.3,rectime=1795680000,jobs=17.ce.example.org</status>\
<mom_service_port>15002</mom_service_port><mom_manager_port>15003</mom_manager_port>\
<total_sockets>2</total_sockets><total_numa_nodes>2</total_numa_nodes><total_cores>16</total_cores><total_threads>32</total_threads>\
<dedicated_sockets>0</dedicated_sockets><dedicated_numa_nodes>0</dedicated_numa_nodes><dedicated_cores>0</dedicated_cores><dedicated_threads>4</dedicated_threads>\
<gpus>4</gpus><gpu_status>gpu[3]=gpu_id=0000:84:00.0;gpu_mode=Default;gpu_state=Unallocated,gpu[2]=gpu_id=0000:83:00.0;gpu_mode=Default;gpu_state=Unallocated,\
gpu[1]=gpu_id=0000:04:00.0;gpu_mode=Exclusive_Thread;gpu_state=Exclusive,gpu[0]=gpu_id=0000:03:00.0;gpu_mode=Exclusive_Thread;gpu_state=Exclusive</gpu_status></Node>\
<Node><name>wn02</name><state>free</state><power_state>Running</power_state><np>32</np><ntype>cluster</ntype>\
<status>opsys=linux,uname=Linux wn02 3.10.0-1160.el7.x86_64 #1 SMP Mon Oct 19 16:18:59 UTC 2020 x86_64,sessions=? 0,nsessions=? 0,nusers=0,idletime=81234,totmem=82836440kb,availmem=81234000kb,physmem=65923876kb,ncpus=32,loadave=0.00,gres=,netload=987654321,state=free,varattr= ,cpuclock=Fixed,macaddr=00:25:90:aa:bb:02,version=6.1.3,rectime=1795680003,jobs=</status>\
<mom_service_port>15002</mom_service_port><mom_manager_port>15003</mom_manager_port>\
<total_sockets>2</total_sockets><total_numa_nodes>2</total_numa_nodes><total_cores>16</total_cores><total_threads>32</total_threads>\
<dedicated_sockets>0</dedicated_sockets><dedicated_numa_nodes>0</dedicated_numa_nodes><dedicated_cores>0</dedicated_cores><dedicated_threads>0</dedicated_threads>\
<gpus>4</gpus><gpu_status>gpu[3]=gpu_mode=Default;gpu_state=Unallocated,gpu[2]=gpu_mode=Default;gpu_state=Unallocated,gpu[1]=gpu_mode=Default;gpu_state=Unallocated,gpu[0]=gpu_mode=Default;gpu_state=Unallocated</gpu_status></Node>\
<Node><name>wn03</name><state>down</state><power_state>Running</power_state><np>32</np><ntype>cluster</ntype>\
<mom_service_port>15002</mom_service_port><mom_manager_port>15003</mom_manager_port><gpus>4</gpus></Node>\
</Data>";

#[test]
fn torque_source_every_strategy_is_clean() {
    if !require_glue_validator() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pbsnodes = executable(
        dir.path(),
        "pbsnodes",
        &format!("#!/bin/sh\n[ \"$1\" = -x ] || exit 2\ncat <<'XML'\n{PBSNODES}\nXML\n"),
    );
    let config = dir.path().join("glue-provider.toml");
    // TORQUE reports CPUs, sockets and RAM + swap, not the distribution.
    std::fs::write(
        &config,
        head(&format!("source = \"torque\"\npbsnodes = \"{}\"", pbsnodes.display()))
            .replace("\"SLURM\"\nmanager_version = \"22.05.8\"", "\"TORQUE\"\nmanager_version = \"6.1.3\"")
            + r#"
[[group]]
id = "ce.example.org_k20"
nodes = ["wn[01-03]"]
platform = "x86_64"
main_memory_mib = 64378
os_name = "CentOS"
os_version = "7.9"

[[group.device]]
model = "Tesla K20m"
count = 4
memory_mib = 4800
"#,
    )
    .unwrap();
    let (entries, rows) = validate_every_strategy("torque (pbsnodes)", &config);
    print_table(&rows);
    let manager = entry(&entries, "GLUE2ManagerID=");
    // wn03 is down without <status>: identical nodes, so 3 × the 2 sockets and 32 CPUs the others report.
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalPhysicalCPUs"), "6");
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalLogicalCPUs"), "96");
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalSlots"), "96");
    let ee = entry(&entries, "GLUE2ResourceID=ce.example.org_k20");
    // The smaller totmem: 82836440 kb / 1024.
    assert_eq!(value(ee, "GLUE2ExecutionEnvironmentVirtualMemorySize"), "80894");
    assert_eq!(value(ee, "GLUE2ExecutionEnvironmentLogicalCPUs"), "32");
}

/// What another tool says of this machine: `lscpu -p=SOCKET`, `nproc --all`,
/// `free -k` and /etc/os-release, to check the provider's reading of /proc.
fn this_machine() -> BTreeMap<&'static str, String> {
    let run = |cmd: &str, args: &[&str]| {
        let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
        assert!(out.status.success(), "{cmd} {args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let sockets: std::collections::BTreeSet<String> =
        run("lscpu", &["-p=SOCKET"]).lines().filter(|l| !l.starts_with('#')).map(str::to_string).collect();
    let free = run("free", &["-k"]);
    let total_kb = |row: &str| -> u64 {
        let line = free.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("no {row} in {free}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let version = os.lines().find_map(|l| l.strip_prefix("VERSION_ID=")).unwrap_or_default().trim_matches('"');
    BTreeMap::from([
        ("sockets", sockets.len().to_string()),
        ("cpus", run("nproc", &["--all"]).trim().to_string()),
        ("vmem", ((total_kb("Mem:") + total_kb("Swap:")) / 1024).to_string()),
        ("os_version", version.to_string()),
    ])
}

#[test]
fn cderd_source_every_strategy_is_clean() {
    if !require_glue_validator() || !cder_testkit::require_programs(&["lscpu", "nproc", "free"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let socket = work.path().join("cderd.sock");
    let mut node = format!(
        "[node]\nsocket = \"{}\"\nstate_dir = \"{}\"\n\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        socket.display(),
        work.path().join("state").display()
    );
    for i in 0..2 {
        node.push_str(&format!(
            "\n[[cder.device]]\nindex = {i}\nuuid = \"GPU-validator-{i}\"\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\ncompute_capability = \"3.5\"\npath = \"/dev/nvidia{i}\"\n"
        ));
    }
    let (_cderd, config) = cderd_site(work.path(), &socket, &node, "wn01.example.org_gpgpu");
    let (entries, rows) = validate_every_strategy("cderd (this node)", &config);
    print_table(&rows);
    let machine = this_machine();
    let manager = entry(&entries, "GLUE2ManagerID=");
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalPhysicalCPUs"), machine["sockets"]);
    assert_eq!(value(manager, "GLUE2ComputingManagerTotalLogicalCPUs"), machine["cpus"]);
    let ee = entry(&entries, "GLUE2ResourceID=wn01.example.org_gpgpu");
    // free(1) sums its own kB rows; the provider reads the same /proc/meminfo fields.
    let vmem: i64 = value(ee, "GLUE2ExecutionEnvironmentVirtualMemorySize").parse().unwrap();
    assert!((vmem - machine["vmem"].parse::<i64>().unwrap()).abs() <= 1, "{vmem} vs free -k's {}", machine["vmem"]);
    assert_eq!(value(ee, "GLUE2ExecutionEnvironmentOSVersion"), machine["os_version"]);
}

/// An AMD group, an Intel group, and a group whose nodes carry an NVIDIA
/// type and an AMD type that publish under one prefix (issue 46): every
/// strategy is clean, each vendor keeps its own environment and counts, and
/// the architecture stands where NVIDIA's compute capability stands.
#[test]
fn amd_intel_and_mixed_vendor_groups_every_strategy_are_clean() {
    if !require_glue_validator() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("glue-provider.toml");
    let group = |id: &str, nodes: &str| {
        format!(
            "\n[[group]]\nid = \"{id}\"\nnodes = [\"{nodes}\"]\nplatform = \"amd64\"\nmain_memory_mib = 524288\nvirtual_memory_mib = 524288\nos_name = \"Debian\"\nos_version = \"12\"\nphysical_cpus = 2\nlogical_cpus = 128\n"
        )
    };
    let text = head("source = \"static\"")
        + &group("ce.example.org_mi250", "amd[01-04]")
        + r#"
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
"# + &group("ce.example.org_max1550", "xe[01-02]")
        + r#"
[[group.device]]
model = "Intel Data Center GPU Max 1550"
vendor = "intel"
count = 4
memory_mib = 131072
architecture = "Xe-HPC"
clock_mhz = 1600
used = 2
"# + &group("ce.example.org_mixed", "mix[01-03]")
        + r#"
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
"#;
    std::fs::write(&config, text).unwrap();
    let (entries, rows) = validate_every_strategy("static AMD, Intel, mixed", &config);
    print_table(&rows);
    let ees: Vec<&str> = entries.iter().flat_map(|e| e.values("GLUE2ResourceID")).collect();
    assert_eq!(
        ees,
        ["ce.example.org_mi250", "ce.example.org_max1550", "ce.example.org_mixed_gpgpu", "ce.example.org_mixed_amdgpu"]
    );
    let info = |id: &str| -> Vec<String> {
        entry(&entries, &format!("GLUE2ResourceID={id},")).values("GLUE2EntityOtherInfo").map(str::to_string).collect()
    };
    for (id, expected, absent) in [
        ("ce.example.org_mi250", ["GPGPUVendor=AMD", "GPGPUArchitecture=gfx90a", "GPGPUFreeInstances=26"], "CUDA"),
        ("ce.example.org_max1550", ["GPGPUVendor=Intel", "GPGPUArchitecture=Xe-HPC", "GPGPUFreeInstances=6"], "CUDA"),
        (
            "ce.example.org_mixed_gpgpu",
            ["GPGPUVendor=Nvidia", "GPGPUCUDAComputeCapability=8.0", "GPGPUFreeInstances=2"],
            "Architecture",
        ),
        (
            "ce.example.org_mixed_amdgpu",
            ["GPGPUVendor=AMD", "GPGPUArchitecture=gfx90a", "GPGPUFreeInstances=2"],
            "CUDA",
        ),
    ] {
        let got = info(id);
        for e in expected {
            assert!(got.contains(&e.to_string()), "{id}: {e} missing from {got:?}");
        }
        assert!(!got.iter().any(|v| v.contains(absent)), "{id}: {absent} in {got:?}");
    }
    let glue21 = ldif::parse(&publish(&config, &["glue21-accelerator"])).unwrap();
    let capability: Vec<(&str, &str)> = glue21
        .iter()
        .filter_map(|e| {
            Some((
                e.values("GLUE2AcceleratorEnvironmentVendor").next()?,
                value(e, "GLUE2AcceleratorEnvironmentComputeCapability"),
            ))
        })
        .collect();
    assert_eq!(capability, [("AMD", "gfx90a"), ("Intel", "Xe-HPC"), ("Nvidia", "8.0"), ("AMD", "gfx90a")]);
}

/// A real cderd on a node with NVIDIA, AMD and Intel types (static
/// discovery: no GPU here), all published under `GPGPU`: the inventory
/// source gives one clean environment per vendor, each counted by cderd.
#[test]
fn cderd_source_of_a_three_vendor_node_every_strategy_is_clean() {
    if !require_glue_validator() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let socket = work.path().join("cderd.sock");
    let mut node =
        format!("[node]\nsocket = \"{}\"\nstate_dir = \"{}\"\n", socket.display(), work.path().join("state").display());
    for (name, vendor, model, memory, key, value, paths) in [
        (
            "gpgpu",
            "nvidia",
            "NVIDIA A100-SXM4-40GB",
            40960,
            "compute_capability",
            "8.0",
            ["/dev/nvidia0", "/dev/nvidia1"],
        ),
        (
            "amdgpu",
            "amd",
            "AMD Instinct MI210",
            65536,
            "architecture",
            "gfx90a",
            ["/dev/dri/renderD128", "/dev/dri/renderD129"],
        ),
        (
            "xegpu",
            "intel",
            "Intel Data Center GPU Max 1100",
            49152,
            "architecture",
            "Xe-HPC",
            ["/dev/dri/renderD130", "/dev/dri/renderD131"],
        ),
    ] {
        node.push_str(&format!(
            "\n[[cder]]\nname = \"{name}\"\nvendor = \"{vendor}\"\nprefix = \"GPGPU\"\ndiscovery = \"static\"\n"
        ));
        for (i, path) in paths.iter().enumerate() {
            node.push_str(&format!(
                "\n[[cder.device]]\nindex = {i}\nuuid = \"{name}-validator-{i}\"\nmodel = \"{model}\"\nmemory_mib = {memory}\n{key} = \"{value}\"\npath = \"{path}\"\n"
            ));
        }
    }
    let (_cderd, config) = cderd_site(work.path(), &socket, &node, "wn01.example.org");
    let (entries, rows) = validate_every_strategy("cderd (NVIDIA, AMD, Intel)", &config);
    print_table(&rows);
    for (id, vendor, model) in [
        ("wn01.example.org_gpgpu", "Nvidia", "NVIDIA A100-SXM4-40GB"),
        ("wn01.example.org_amdgpu", "AMD", "AMD Instinct MI210"),
        ("wn01.example.org_xegpu", "Intel", "Intel Data Center GPU Max 1100"),
    ] {
        let info: Vec<&str> =
            entry(&entries, &format!("GLUE2ResourceID={id},")).values("GLUE2EntityOtherInfo").collect();
        for e in [
            format!("GPGPUVendor={vendor}"),
            format!("GPGPUModel={model}"),
            "GPGPUTotalInstances=2".into(),
            "GPGPUFreeInstances=2".into(),
            "GPGPUPerNode=2".into(),
        ] {
            assert!(info.contains(&e.as_str()), "{id}: {e} missing from {info:?}");
        }
        assert_eq!(info.iter().filter(|v| v.starts_with("GPGPUVendor=")).count(), 1, "{id}: {info:?}");
    }
}

/// A cderd on `node` (its config text, whose socket is `socket`) and a
/// provider config in `dir` reading it as one inventory group `group`: no
/// CPU, memory or OS keys, since a cderd site is this node, read from /proc
/// and /etc/os-release.
fn cderd_site(dir: &Path, socket: &Path, node: &str, group: &str) -> (TestNode, PathBuf) {
    let node_config = dir.join("cder.toml");
    std::fs::write(&node_config, node).unwrap();
    let cderd = TestNode::started(
        built_binary("cderd", "cderd").unwrap_or_else(|e| panic!("{e}")),
        &node_config,
        socket,
        dir.join("cderd.log"),
    );
    let config = dir.join("glue-provider.toml");
    std::fs::write(
        &config,
        head(&format!("source = \"cderd\"\nsocket = \"{}\"\ntimeout_s = 5", socket.display())).replace(
            "computing_share_ids",
            &format!("cder_config = \"{}\"\ncomputing_share_ids", node_config.display()),
        ) + &format!("\n[[group]]\nid = \"{group}\"\nnodes = [\"wn01\"]\nplatform = \"amd64\"\nmain_memory_mib = 16384\ninventory = true\n"),
    )
    .unwrap();
    (cderd, config)
}
