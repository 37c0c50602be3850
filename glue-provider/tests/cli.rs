//! The binary's contract with bdii-update on bad input: one clear line on
//! stderr, nothing on stdout (never half an entry), and a non-zero exit
//! (2 bad config or input, 1 cderd / LRMS failure).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_cder-glue-provider");

const SITE: &str = r#"[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-slurm-gpgpu"

[counts]
source = "static"

[[group]]
id = "ce.example.org_gts450"
nodes = ["wn[01-16]"]
platform = "amd64"
main_memory_mib = 16384
virtual_memory_mib = 20480
os_name = "CentOS"
os_version = "7.9"

[[group.device]]
model = "GeForce GTS 450"
count = 2
memory_mib = 1024
"#;

fn run(dir: &Path, config: &[u8], args: &[&str]) -> Output {
    let path = dir.join("glue-provider.toml");
    std::fs::write(&path, config).unwrap();
    Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .args(args)
        .stdin(Stdio::null())
        .env_remove("CDER_GLUE_CONFIG")
        .output()
        .unwrap()
}

fn assert_failed(out: &Output, code: i32, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "printed on failure: {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line expected: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{n:?} not in {stderr}");
    }
    stderr
}

#[test]
fn good_config_prints_ldif() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), SITE.as_bytes(), &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().all(|l| l.len() <= 76), "lines must be folded at 76");
    assert!(text.replace("\n ", "").starts_with("dn: GLUE2ResourceID=ce.example.org_gts450,GLUE2ServiceID=ce.example.org_ComputingElement,GLUE2GroupID=resource,o=glue\n"));
    assert!(text.contains("GLUE2EntityOtherInfo: GPGPUFreeInstances=32\n"));
    assert!(text.ends_with("\n\n"));
}

#[test]
fn missing_key_names_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), SITE.replace("main_memory_mib = 16384\n", "").as_bytes(), &[]);
    assert_failed(&out, 2, &["glue-provider.toml:9:", "group.main_memory_mib", "missing field"]);
}

#[test]
fn values_egi_requires_are_refused_when_no_one_gives_them() {
    let dir = tempfile::tempdir().unwrap();
    // SLURM reports no swap: without virtual_memory_mib the EE would lack VirtualMemorySize.
    let out = run(dir.path(), SITE.replace("virtual_memory_mib = 20480\n", "").as_bytes(), &[]);
    assert_failed(&out, 2, &["GLUE2ExecutionEnvironmentVirtualMemorySize is mandatory", "group.virtual_memory_mib"]);
    let out = run(dir.path(), SITE.replace("os_version = \"7.9\"\n", "").as_bytes(), &[]);
    assert_failed(&out, 2, &["GLUE2ExecutionEnvironmentOSVersion", "group.os_version"]);
    // [service] publishes the Manager, whose CPU totals nobody gave.
    let service = SITE.replace(
        "[counts]",
        "[service]\ntype = \"org.glite.ce.CREAM\"\nadmin_domain = \"EXAMPLE\"\nmanager_product = \"SLURM\"\nmanager_version = \"22.05\"\n\n[counts]",
    );
    let out = run(dir.path(), service.as_bytes(), &[]);
    assert_failed(&out, 2, &["GLUE2ComputingManagerTotalPhysicalCPUs", "group.physical_cpus", "leave [service] out"]);
    let with_cpus = service.replace("os_name", "physical_cpus = 2\nlogical_cpus = 16\nos_name");
    assert!(run(dir.path(), with_cpus.as_bytes(), &[]).status.success());
    // The static source knows no LRMS version.
    let out = run(dir.path(), with_cpus.replace("manager_version = \"22.05\"\n", "").as_bytes(), &[]);
    assert_failed(&out, 2, &["GLUE2ManagerProductVersion", "service.manager_version"]);
    // GLUE 1.3 counts the SubCluster's CPUs.
    let tagged = SITE.replace("[counts]", "cluster_id = \"ce.example.org\"\n\n[counts]");
    let out = run(dir.path(), tagged.as_bytes(), &["--strategy", "tagged-environment"]);
    assert_failed(&out, 2, &["GlueSubClusterPhysicalCPUs", "group.physical_cpus"]);
    // A scaling factor must be one.
    let out = run(dir.path(), SITE.replace("os_name", "cpu_time_scaling_factor = 0.0\nos_name").as_bytes(), &[]);
    assert_failed(&out, 2, &["group.cpu_time_scaling_factor", "not a scaling factor"]);
}

#[test]
fn missing_config_file_is_named() {
    let out = Command::new(BIN).args(["--config", "/nonexistent/glue.toml"]).output().unwrap();
    assert_failed(&out, 2, &["/nonexistent/glue.toml: cannot read the config"]);
}

#[test]
fn non_utf8_model_name_is_located() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = SITE.as_bytes().to_vec();
    let at = SITE.find("GTS 450").unwrap() + 4;
    bytes[at] = 0xC3; // a lone UTF-8 lead byte where '4' was
    let out = run(dir.path(), &bytes, &[]);
    assert_failed(&out, 2, &["glue-provider.toml:19:22", "group.device.model", "UTF-8"]);
}

#[test]
fn unreachable_cderd_is_a_runtime_failure() {
    let dir = tempfile::tempdir().unwrap();
    let socket: PathBuf = dir.path().join("no-cderd.sock");
    let config = SITE
        .replace("source = \"static\"", &format!("source = \"cderd\"\nsocket = \"{}\"", socket.display()))
        .replace("wn[01-16]", "wn01");
    let out = run(dir.path(), config.as_bytes(), &[]);
    assert_failed(&out, 1, &["cderd status", "cannot connect to cderd", "no-cderd.sock"]);
}

#[test]
fn unreachable_lrms_is_a_runtime_failure() {
    let dir = tempfile::tempdir().unwrap();
    let config = SITE.replace("source = \"static\"", "source = \"slurm\"\nscontrol = \"/nonexistent/scontrol\"");
    let out = run(dir.path(), config.as_bytes(), &[]);
    assert_failed(&out, 1, &["cannot run /nonexistent/scontrol -d show node -o"]);

    // An LRMS command that answers but fails (as scontrol does when slurmctld is down).
    let script = dir.path().join("pbsnodes");
    std::fs::write(&script, "#!/bin/sh\necho 'pbsnodes: cannot connect to server ce.example.org, error=111 (Connection refused)' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config =
        SITE.replace("source = \"static\"", &format!("source = \"torque\"\npbsnodes = \"{}\"", script.display()));
    let out = run(dir.path(), config.as_bytes(), &[]);
    assert_failed(&out, 1, &["pbsnodes -x failed", "Connection refused"]);
}

#[test]
fn non_utf8_lrms_output_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A fake scontrol whose GRES type (the model) is not UTF-8.
    let script = dir.path().join("scontrol");
    std::fs::write(&script, b"#!/bin/sh\nprintf 'NodeName=wn01 Gres=gpu:gts\\37750:2 GresUsed=gpu:0 State=IDLE\\n'\n")
        .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = SITE
        .replace("source = \"static\"", &format!("source = \"slurm\"\nscontrol = \"{}\"", script.display()))
        .replace("wn[01-16]", "wn01");
    let out = run(dir.path(), config.as_bytes(), &[]);
    assert_failed(&out, 1, &["scontrol output line 1: not valid UTF-8"]);
}

#[test]
fn unknown_strategy_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), SITE.as_bytes(), &["--strategy", "named-queue"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("named-queue"));
}

#[test]
fn help_and_version() {
    let help = Command::new(BIN).arg("--help").output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("attribute-extension") && text.contains("/var/lib/bdii/gip/provider"), "{text}");
    let version = Command::new(BIN).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("cder-glue-provider "));
}

/// The provider writes no file of its own; its only output is stdout, which
/// bdii-update reads through a pipe. Redirected to a file on a full disk
/// (a real tmpfs), it exits 1 naming the error, and leaves no half document
/// behind: what it wrote is cut off again, an appended-to file keeps what
/// it held before.
#[test]
fn output_on_a_full_disk_is_a_runtime_failure_and_leaves_no_half_document() {
    if !cder_testkit::require_tmpfs() {
        return;
    }
    // Forty groups: an LDIF several pages long.
    let mut site = SITE.to_string();
    for i in 0..40 {
        let group = &SITE[SITE.find("[[group]]").unwrap()..];
        site += &group
            .replace("ce.example.org_gts450", &format!("ce.example.org_g{i}"))
            .replace("wn[01-16]", &format!("g{i}wn[01-16]"));
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("glue-provider.toml");
    let whole = run(dir.path(), site.as_bytes(), &[]);
    assert!(whole.status.success());
    assert!(whole.stdout.len() > 8192, "the LDIF must be longer than the room left: {} bytes", whole.stdout.len());

    let disk = cder_testkit::Tmpfs::mount(1 << 20).unwrap();
    let out_path = disk.path().join("provider.ldif");
    std::fs::write(&out_path, b"# kept\n").unwrap();
    disk.fill().unwrap();
    // Room for one page of output only: the write stops part-way.
    let filler = std::fs::OpenOptions::new().write(true).open(disk.filler()).unwrap();
    let len = filler.metadata().unwrap().len();
    filler.set_len(len - 4096).unwrap();
    drop(filler);
    for (append, kept) in [(true, &b"# kept\n"[..]), (false, &b""[..])] {
        let file = std::fs::OpenOptions::new().write(true).append(append).truncate(!append).open(&out_path).unwrap();
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(file)
            .env_remove("CDER_GLUE_CONFIG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "append={append}: {stderr}");
        assert!(
            stderr.contains("writing the output: No space left on device") && stderr.contains("nothing was published"),
            "{stderr}"
        );
        let left = std::fs::read(&out_path).unwrap();
        assert!(left == kept, "append={append}: a partial document of {} bytes was left", left.len());
    }
    // Room again: the same command writes the whole document.
    disk.unfill().unwrap();
    let file = std::fs::File::create(&out_path).unwrap();
    let out = Command::new(BIN).arg("--config").arg(&config).stdout(file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // (The creation times may differ by a second; the entries may not.)
    let dns = |b: &[u8]| {
        String::from_utf8_lossy(b).lines().filter(|l| l.starts_with("dn: ")).map(String::from).collect::<Vec<_>>()
    };
    let written = std::fs::read(&out_path).unwrap();
    assert_eq!((written.len(), dns(&written)), (whole.stdout.len(), dns(&whole.stdout)));
}
