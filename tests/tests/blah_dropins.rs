//! deploy/blah's drop-ins, invoked exactly as BLAH (prelz/BLAH's
//! `*_submit.sh`, and the blahp HTCondor-CE ships) invokes them: a
//! throw-away `/bin/sh` script of the job's attributes as *unexported*
//! assignments in BLAH's quoting (`GPGPUPerNode='2'`, the double-quoted
//! strings CERequirements gives, `VirtualGPGPUMethod="rCUDA"`), then
//! `source <drop-in>`, run with stdout appended to the batch script,
//! stderr to /dev/null and its exit status ignored. BLAH itself is not
//! packaged for Debian. `/bin/sh` on the EL systems BLAH runs on is bash
//! (which, started as `sh`, knows `source`); Debian's dash has only `.`, so
//! the same script is also run by dash with `.` to show the drop-in is POSIX.
//! The SLURM batch scripts are then submitted to a real slurmctld.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cder_tests::slurm::{require_slurm, serial, workspace_root, SlurmCluster, SlurmConfig};
use cder_tests::twophase::cder_jdl;

/// The drop-ins installed by deploy/blah/install.sh into a temp libexec,
/// with this build's cder-jdl and a settings file in the temp dir.
struct Blah {
    dir: tempfile::TempDir,
}

impl Blah {
    fn install() -> Blah {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("blah.conf");
        let out = Command::new("/bin/sh")
            .arg(workspace_root().join("deploy/blah/install.sh"))
            .arg("--cder-jdl")
            .arg(cder_jdl())
            .arg("--config")
            .arg(&conf)
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "install.sh: {}", String::from_utf8_lossy(&out.stderr));
        Blah { dir }
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("blah.conf")
    }

    fn set_conf(&self, text: &str, mode: u32) {
        std::fs::write(self.conf(), text).unwrap();
        std::fs::set_permissions(self.conf(), std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// BLAH's throw-away script: the assignments, then `source` (or `.`).
    fn tmp_script(&self, lrms: &str, assignments: &[&str], dot: bool) -> PathBuf {
        let path = self.dir.path().join(format!("bls_tmp_{}_{}", lrms, if dot { "dot" } else { "source" }));
        let mut s = String::from("#!/bin/sh\n");
        for a in assignments {
            s.push_str(a);
            s.push('\n');
        }
        let drop_in = self.dir.path().join(format!("{lrms}_local_submit_attributes.sh"));
        s.push_str(&format!("{} {}\n", if dot { "." } else { "source" }, drop_in.display()));
        std::fs::write(&path, s).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// What BLAH appends to the batch script: the script's stdout only.
    /// The environment is BLAH's, not the job's: the attributes are shell
    /// variables of the script, never exported.
    fn run(&self, lrms: &str, assignments: &[&str]) -> Vec<String> {
        let script = self.tmp_script(lrms, assignments, false);
        // bash started as "sh": EL's /bin/sh.
        let mut cmd = Command::new("/bin/bash");
        std::os::unix::process::CommandExt::arg0(&mut cmd, "sh");
        let bash = appended(cmd.arg(&script));
        let dash = appended(Command::new("/bin/dash").arg(self.tmp_script(lrms, assignments, true)));
        assert_eq!(bash, dash, "bash-as-sh and dash disagree for {assignments:?}");
        bash
    }
}

fn appended(cmd: &mut Command) -> Vec<String> {
    let out = cmd.env_clear().env("PATH", "/usr/bin:/bin").stdin(Stdio::null()).stderr(Stdio::null()).output().unwrap();
    // The exit status is ignored, as BLAH ignores it.
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn unexported_assignments_in_blah_quoting_become_directives() {
    let blah = Blah::install();
    let lines = blah.run("slurm", &["GPGPUPerNode='2'", "CPUNumber='4'", "SMPGranularity='4'", "WholeNodes='true'"]);
    assert_eq!(
        lines,
        [
            "#SBATCH --ntasks=4",
            "#SBATCH --ntasks-per-node=4",
            "#SBATCH --nodes=1",
            "#SBATCH --exclusive",
            "#SBATCH --gres=gpu:2",
            "export GPGPUPerNode=2"
        ]
    );
    // CERequirements' strings arrive double-quoted.
    let lines = blah.run("slurm", &["VirtualGPGPUPerNode='2'", "VirtualGPGPUMethod=\"rCUDA\"", "CPUNumber='3'"]);
    assert_eq!(
        lines,
        [
            "#SBATCH --ntasks=3",
            "#SBATCH --licenses=vgpgpu:6",
            "export VirtualGPGPUPerNode=2",
            "export VirtualGPGPUMethod=rCUDA"
        ]
    );
    assert!(blah.run("slurm", &["Queue='short'"]).is_empty(), "no CDER keys, nothing to add");
    let lines = blah.run("pbs", &["GPGPUPerNode='2'", "CPUNumber='2'"]);
    assert_eq!(lines, ["#PBS -l nodes=1:ppn=2:gpus=2", "export GPGPUPerNode=2"]);
}

#[test]
fn the_jobs_own_variables_cannot_steer_the_drop_in() {
    let blah = Blah::install();
    let evil = blah.dir.path().join("evil.sh");
    std::fs::write(&evil, "#!/bin/sh\necho '#SBATCH --partition=prio'\n").unwrap();
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    let evil_assign = format!("CDER_JDL='{}'", evil.display());
    let lines = blah.run(
        "slurm",
        &[
            &evil_assign,
            "CDER_SLURM_GRES='gpu:8 --exclusive\n#SBATCH --partition=prio'",
            "CDER_PBS_GPUS='maui'",
            "PATH='/nonexistent'",
            "IFS='1'",
            "cder_jdl='/bin/echo'",
            "GPGPUPerNode='1'",
        ],
    );
    assert_eq!(lines, ["#SBATCH --gres=gpu:1", "export GPGPUPerNode=1"]);
    // A value with a newline stays one argument and is refused, visibly.
    let lines = blah.run("slurm", &["GPGPUPerNode='1\n#SBATCH --partition=prio'"]);
    assert_eq!(lines, ["#SBATCH --cder-bad-attribute=GPGPUPerNode"]);
}

#[test]
fn bad_values_come_out_as_a_refused_directive_naming_the_attribute() {
    let blah = Blah::install();
    for (assignments, key) in [
        (&["GPGPUPerNode='0'"][..], "GPGPUPerNode"),
        (&["GPGPUPerNode='two'"][..], "GPGPUPerNode"),
        (&["GPGPUPerNode='1;rm -rf /'"][..], "GPGPUPerNode"),
        (&["WholeNodes='maybe'"][..], "WholeNodes"),
        (&["VirtualGPGPUPerNode='1'", "VirtualGPGPUMethod=\"CUDA\""][..], "VirtualGPGPUMethod"),
        (&["VirtualGPGPUPerNode='4096'", "CPUNumber='1048576'"][..], "VirtualGPGPUPerNode"),
        (&["gpus_minimum_capability=\"seven\""][..], "gpus_minimum_capability"),
        (&["RequestGPUs='2'", "GPGPUPerNode='3'"][..], "RequestGPUs"),
    ] {
        assert_eq!(blah.run("slurm", assignments), [format!("#SBATCH --cder-bad-attribute={key}")], "{assignments:?}");
        assert_eq!(blah.run("pbs", assignments), [format!("#PBS -l cder_bad_attribute_{key}=1")], "{assignments:?}");
    }
}

#[test]
fn htcondor_ce_gpu_vocabulary_gives_exactly_one_gpu_directive() {
    let blah = Blah::install();
    // The attribute names HTCondor-CE's route hands on (docs/htcondor-ce.md).
    let job = [
        "RequestGPUs='2'",
        "gpus_minimum_capability=\"7.5\"",
        "gpus_minimum_memory='16000'",
        "require_gpus=\"Capability >= 7.0 && GlobalMemoryMb >= 16000\"",
    ];
    let lines = blah.run("slurm", &job);
    assert_eq!(
        lines,
        [
            "#SBATCH --gres=gpu:2",
            "export GPGPUPerNode=2",
            "export CDER_GPUS_MINIMUM_CAPABILITY=7.5",
            "export CDER_GPUS_MINIMUM_MEMORY=16000"
        ]
    );
    // blahp writes its own --gres=gpu:N for RequestGPUs: cder adds none.
    blah.set_conf("# HTCondor-CE's blahp\nblahp_writes_gpus = yes\n", 0o644);
    let lines = blah.run("slurm", &job);
    assert!(!lines.iter().any(|l| l.contains("--gres")), "{lines:?}");
    assert!(lines.contains(&"export GPGPUPerNode=2".to_string()), "{lines:?}");
    // The same count under both names is one request; a JDL-only job still gets cder's.
    assert!(blah.run("slurm", &["RequestGPUs='2'", "GPGPUPerNode='2'"]).iter().all(|l| !l.contains("--gres")));
    assert_eq!(blah.run("slurm", &["GPGPUPerNode='2'"])[0], "#SBATCH --gres=gpu:2");
    blah.set_conf("blahp_writes_gpus = no\n", 0o644);
    let lines = blah.run("pbs", &["RequestGPUs='1'"]);
    assert_eq!(lines[0], "#PBS -l nodes=1:gpus=1");
    assert_eq!(lines.iter().filter(|l| l.contains("gpus")).count(), 1, "{lines:?}");
    let bad = blah.run("slurm", &["require_gpus=\"Capability >= \""]);
    assert_eq!(bad, ["#SBATCH --cder-bad-attribute=require_gpus"]);
}

#[test]
fn maui_mode_writes_the_mark_the_prologue_reads() {
    let blah = Blah::install();
    blah.set_conf("pbs_gpus = maui\n", 0o644);
    let lines = blah.run("pbs", &["GPGPUPerNode='2'"]);
    assert_eq!(
        lines,
        ["#PBS -l nodes=1", "#PBS -W x=GRES:gpus@2", "#PBS -l other=cder:gpgpu:2", "export GPGPUPerNode=2"]
    );
}

#[test]
fn settings_only_from_a_root_owned_file_no_one_else_may_write() {
    if !nix_is_root() {
        // The file must be root's: a non-root test run cannot make one.
        let why = "blah settings file ownership: the test needs root (deploy/test.sh runs as root)";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and {why}");
        }
        cder_testkit::skipped(why);
        return;
    }
    let blah = Blah::install();
    blah.set_conf("slurm_gres = gpgpu\n", 0o644);
    assert_eq!(blah.run("slurm", &["GPGPUPerNode='1'"])[0], "#SBATCH --gres=gpgpu:1");
    blah.set_conf("slurm_gres = gpgpu\n", 0o666);
    assert_eq!(blah.run("slurm", &["GPGPUPerNode='1'"]), ["#SBATCH --cder-bad-attribute=config"]);
    blah.set_conf("slurm_gres = gpgpu\n", 0o644);
    std::os::unix::fs::chown(blah.conf(), Some(65534), None).unwrap();
    assert_eq!(blah.run("slurm", &["GPGPUPerNode='1'"]), ["#SBATCH --cder-bad-attribute=config"]);
    std::os::unix::fs::chown(blah.conf(), Some(0), None).unwrap();
    blah.set_conf("slurm_gres = gpu:8 --exclusive\n", 0o644);
    assert_eq!(blah.run("slurm", &["GPGPUPerNode='1'"]), ["#SBATCH --cder-bad-attribute=config"]);
}

fn nix_is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap_or(false)
}

/// A batch script as BLAH's slurm_submit.sh writes it, with the drop-in's
/// output where BLAH puts it.
fn batch_script(appended: &[String], marker: &Path) -> String {
    let mut s = String::from("#!/bin/bash\n#SBATCH --ntasks=1\n");
    for l in appended {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&format!("echo \"gpus=$GPGPUPerNode\" > {}\n", marker.display()));
    s
}

#[test]
fn the_real_slurm_counts_the_directives_and_refuses_a_bad_value() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    let blah = Blah::install();
    let cluster = SlurmCluster::start(&SlurmConfig::default()).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    let good = blah.run("slurm", &["GPGPUPerNode='1'"]);
    let marker = blah.dir.path().join("ran");
    let id = cluster.sbatch(&[], &batch_script(&good, &marker)).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    let info = cluster.job(id).unwrap();
    let tres = info.fields.get("TresPerNode").cloned().unwrap_or_default();
    assert!(tres.contains("gpu:1"), "slurmctld did not count the drop-in's GRES: {:?}", info.fields);
    let done = cluster.wait_job(id, Duration::from_secs(180)).unwrap();
    assert_eq!(done.state, "COMPLETED", "{}", cluster.logs());
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "gpus=1");

    let bad = blah.run("slurm", &["GPGPUPerNode='0'"]);
    let err =
        cluster.sbatch(&[], &batch_script(&bad, &marker)).expect_err("a job with a refused attribute was accepted");
    assert!(err.contains("GPGPUPerNode"), "the refusal does not name the attribute: {err}");
}

/// cder's TORQUE submit filter run as qsub runs its SUBMITFILTER (the
/// script on stdin, qsub's arguments; TORQUE itself is not in Debian 12).
fn qsub_filter(script: &str, directive: &str) -> std::process::Output {
    let filter =
        cder_tests::bdii::built_binary("cder-torque", "cder-torque-submit-filter").unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("torque.toml");
    std::fs::write(&conf, format!("[torque]\ndirective = \"{directive}\"\n")).unwrap();
    let mut child = Command::new(filter)
        .env("CDER_TORQUE_CONFIG", &conf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_torque_submit_filter_takes_the_pbs_drop_in_output_and_refuses_a_bad_value() {
    let blah = Blah::install();
    blah.set_conf("pbs_gpus = maui\n", 0o644);
    let script = |lines: &[String]| format!("#!/bin/sh\n#PBS -q grid\n{}\n./run\n", lines.join("\n"));
    let good = script(&blah.run("pbs", &["GPGPUPerNode='2'"]));
    let out = qsub_filter(&good, "maui");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), good, "the drop-in's MAUI request and mark pass unchanged");
    let bad = script(&blah.run("pbs", &["RequestGPUs='0'"]));
    for directive in ["maui", "native"] {
        let out = qsub_filter(&bad, directive);
        assert_eq!(out.status.code(), Some(2), "{directive}: {}", String::from_utf8_lossy(&out.stdout));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("RequestGPUs"), "{directive}: the refusal does not name the attribute: {err}");
    }
}
