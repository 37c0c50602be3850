//! The CE side: deploy/blah's drop-ins run as BLAH runs them (JDL CE
//! requirements in the environment, stdout inserted into the batch
//! script), and `cder-jdl lrms-attrs --jdl`. BLAH itself is not packaged
//! for Debian; the scripts are invoked the way its `*_submit.sh` does.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use cder_tests::slurm::workspace_root;
use cder_tests::twophase::cder_jdl;

fn drop_in(name: &str, env: &[(&str, &str)]) -> Output {
    let script: PathBuf = workspace_root().join("deploy/blah").join(name);
    let mut cmd = Command::new("/bin/sh");
    cmd.arg(&script).env_clear().env("PATH", "/usr/bin:/bin").env("CDER_JDL", cder_jdl()).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("running the drop-in")
}

fn lines(out: &Output) -> Vec<String> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn slurm_drop_in_translates_the_jdl_keys() {
    let out = drop_in("slurm_local_submit_attributes.sh", &[("GPGPUPerNode", "2"), ("CPUNumber", "4"), ("SMPGranularity", "4"), ("WholeNodes", "true")]);
    assert_eq!(
        lines(&out),
        ["#SBATCH --ntasks=4", "#SBATCH --ntasks-per-node=4", "#SBATCH --nodes=1", "#SBATCH --exclusive", "#SBATCH --gres=gpu:2", "export GPGPUPerNode=2"]
    );
    let out = drop_in("slurm_local_submit_attributes.sh", &[("VirtualGPGPUPerNode", "2"), ("VirtualGPGPUMethod", "\"rCUDA\""), ("CPUNumber", "3")]);
    assert_eq!(lines(&out), ["#SBATCH --ntasks=3", "#SBATCH --licenses=vgpgpu:6", "export VirtualGPGPUPerNode=2", "export VirtualGPGPUMethod=rCUDA"]);
    // No CDER keys: nothing to add.
    assert!(lines(&drop_in("slurm_local_submit_attributes.sh", &[])).is_empty());
}

#[test]
fn pbs_drop_in_native_and_maui() {
    let out = drop_in("pbs_local_submit_attributes.sh", &[("GPGPUPerNode", "2"), ("CPUNumber", "2")]);
    assert_eq!(lines(&out), ["#PBS -l nodes=1:ppn=2:gpus=2", "export GPGPUPerNode=2"]);
    let out = drop_in("pbs_local_submit_attributes.sh", &[("GPGPUPerNode", "2"), ("CDER_PBS_GPUS", "maui")]);
    assert_eq!(lines(&out), ["#PBS -l nodes=1", "#PBS -W x=GRES:gpus@2", "export GPGPUPerNode=2"]);
}

#[test]
fn bad_values_are_rejected_with_a_message() {
    for (key, value) in [("GPGPUPerNode", "0"), ("GPGPUPerNode", "two"), ("GPGPUPerNode", "1;rm -rf /"), ("WholeNodes", "maybe"), ("VirtualGPGPUMethod", "CUDA")] {
        let out = drop_in("slurm_local_submit_attributes.sh", &[(key, value), ("VirtualGPGPUPerNode", if key == "VirtualGPGPUMethod" { "1" } else { "" })]);
        assert_eq!(out.status.code(), Some(2), "{key}={value}");
        assert!(out.stdout.is_empty(), "{key}={value} printed directives: {}", String::from_utf8_lossy(&out.stdout));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key) && err.lines().count() == 1, "{key}={value}: {err}");
    }
}

#[test]
fn lrms_attrs_from_a_jdl_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let jdl = dir.path().join("job.jdl");
    std::fs::write(&jdl, "[\n  Executable = \"x\";\n  GPGPUPerNode = 2;\n  VirtualGPGPUPerNode = 1;\n  VirtualGPGPUType = \"VCL\";\n]\n").unwrap();
    let out = Command::new(cder_jdl()).args(["lrms-attrs", "--lrms", "pbs", "--pbs-gpus", "maui", "--jdl"]).arg(&jdl).output().unwrap();
    assert_eq!(lines(&out), ["#PBS -l nodes=1", "#PBS -W x=GRES:gpus@2", "#PBS -v VirtualGPGPUPerNode=1,VirtualGPGPUMethod=VCL", "export GPGPUPerNode=2", "export VirtualGPGPUPerNode=1", "export VirtualGPGPUMethod=VCL"]);
    std::fs::write(&jdl, "[\n  Executable = \"x\";\n  GPGPUPerNode = -1;\n]\n").unwrap();
    let out = Command::new(cder_jdl()).args(["lrms-attrs", "--lrms", "slurm", "--jdl"]).arg(&jdl).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:3:3: GPGPUPerNode", jdl.display())), "{err}");
}
