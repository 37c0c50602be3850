//! cder-torque-monitor against a real cder-registryd + munged, with
//! stand-ins for TORQUE's `qstat -x` and `qrls` (TORQUE is not packaged):
//! shell scripts over a jobs directory that print TORQUE's XML
//! (`<Data><Job><Job_Id>…`) and use its exit codes (qrls of an unknown job:
//! "Unknown Job Id", exit 153).

use std::path::Path;

use cder_model::VgpgpuMethod;
use cder_registry::api::QueryName;
use cder_tests::munge::require_munge;
use cder_tests::vgpgpu::{binary, Registryd};

/// qstat -x: every job file (one <Job> element each), in name order.
const QSTAT: &str = r#"#!/bin/sh
[ "$1" = "-x" ] || { echo "stand-in qstat only does -x" >&2; exit 2; }
[ -e "$JOBS/down" ] && { echo "qstat: cannot connect to server (errno=111) Connection refused" >&2; exit 1; }
printf '<?xml version="1.0"?>\n'
ls "$JOBS"/*.job >/dev/null 2>&1 || exit 0
printf '<Data>'
for f in "$JOBS"/*.job; do cat "$f"; done
printf '</Data>\n'
"#;

/// qrls ID: clears the user hold (H -> Q), as pbs_server does.
const QRLS: &str = r#"#!/bin/sh
f="$JOBS/$1.job"
[ -e "$f" ] || { echo "qrls: Unknown Job Id $1" >&2; exit 153; }
sed -i 's|<job_state>H</job_state>|<job_state>Q</job_state>|; s|<Hold_Types>u</Hold_Types>|<Hold_Types>n</Hold_Types>|' "$f"
echo "$1" >> "$JOBS/qrls.log"
"#;

fn job(dir: &Path, seq: u32, qtime: u64, state: &str, vars: &str, nodes: &str) {
    let id = format!("{seq}.ce.example.org");
    let hold = if state == "H" { "u" } else { "n" };
    let xml = format!(
        "<Job><Job_Id>{id}</Job_Id><Job_Name>j{seq}</Job_Name><job_state>{state}</job_state><Hold_Types>{hold}</Hold_Types>\
<qtime>{qtime}</qtime><euser>nobody</euser><Resource_List><nodes>{nodes}</nodes><walltime>01:00:00</walltime></Resource_List>\
<Variable_List>PBS_O_HOME=/home/alice,PBS_O_LANG=C,{vars}</Variable_List></Job>"
    );
    std::fs::write(dir.join(format!("{id}.job")), xml).unwrap();
}

fn set_state(dir: &Path, seq: u32, state: &str) {
    let p = dir.join(format!("{seq}.ce.example.org.job"));
    let text = std::fs::read_to_string(&p).unwrap();
    let start = text.find("<job_state>").unwrap() + 11;
    let end = text.find("</job_state>").unwrap();
    std::fs::write(&p, format!("{}{state}{}", &text[..start], &text[end..])).unwrap();
}

fn once(r: &Registryd, jobs: &Path, qstat: &Path, qrls: &Path) -> (i32, String, String) {
    let bin = binary("cder-torque", "cder-torque-monitor").unwrap();
    let out = std::process::Command::new(bin)
        .args(["--config", &r.config_path().display().to_string(), "--once", "--qstat"])
        .arg(qstat)
        .arg("--qrls")
        .arg(qrls)
        .env("JOBS", jobs)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines().find_map(|l| l.strip_prefix(key)).unwrap_or("").trim()
}

#[test]
fn held_jobs_are_released_in_order_only_when_capacity_exists() {
    if !require_munge() {
        return;
    }
    let r = Registryd::start("").unwrap();
    r.register_many("GPU-a", "wn1", 2).unwrap();
    r.register_many("GPU-b", "wn2", 2).unwrap();
    let jobs = r.dir().join("torque");
    std::fs::create_dir_all(&jobs).unwrap();
    let (qstat, qrls) = (r.dir().join("qstat"), r.dir().join("qrls"));
    for (p, text) in [(&qstat, QSTAT), (&qrls, QRLS)] {
        std::fs::write(p, text).unwrap();
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    // Submission order: 11 (3 backends), 12 (2), 13 (1); 10 is an ordinary job.
    job(&jobs, 12, 1002, "H", "VirtualGPGPUPerNode=2", "1");
    job(&jobs, 11, 1001, "H", "VirtualGPGPUPerNode=3,VirtualGPGPUMethod=VCL", "1:ppn=2");
    job(&jobs, 13, 1002, "H", "VirtualGPGPUPerNode=1,VirtualGPGPUType=rCUDA", "1");
    job(&jobs, 10, 1000, "R", "X=1", "1");
    let c = r.client();

    // 4 free: 11 (3) goes; 12 (2) does not fit, and 13 waits behind it.
    let (code, out, err) = once(&r, &jobs, &qstat, &qrls);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(line(&out, "released:"), "11.ce.example.org", "{out}{err}");
    assert_eq!(line(&out, "waiting:"), "12.ce.example.org");
    assert_eq!(c.query(QueryName::InUse, None).unwrap(), 3);
    assert_eq!(std::fs::read_to_string(jobs.join("qrls.log")).unwrap(), "11.ce.example.org\n");
    // The backends are the job's: its own hooks get the same ones back.
    let key = "torque:11.ce.example.org".parse().unwrap();
    assert_eq!(c.request(&key, 3, "torque-monitor", VgpgpuMethod::Vcl).unwrap().backends.len(), 3);

    // Inside the job, as its user, cder-job-starter gets the VCL set-up of
    // those backends; another user gets none.
    let starter = |user: &str| {
        // The starter reads /etc/cder only (its options are root's): here an
        // /etc of its own, the host's with cder/ laid over it, in a private
        // mount namespace.
        let etc = std::env::temp_dir().join(format!("cder-vgpgpu-torque-{}-etc", std::process::id()));
        std::fs::create_dir_all(etc.join("cder")).unwrap();
        let config = etc.join("cder/cder.toml");
        std::fs::copy(r.config_path(), &config).unwrap();
        std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        // No cderd here: only the vGPGPU part is under test, so no device cgroup.
        std::fs::write(etc.join("cder/torque.toml"), "[torque]\nconfine = \"off\"\n").unwrap();
        let out = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(format!("mount -t overlay cder-etc -o ro,lowerdir='{}':/etc /etc && exec \"$@\"", etc.display()))
            .args(["sh", "runuser", "-u", user, "--", "env", "PBS_JOBID=11.ce.example.org", "VirtualGPGPUPerNode=3"])
            .arg("TMPDIR=/tmp")
            .arg(binary("cder-torque", "cder-job-starter").unwrap())
            .args(["/bin/sh", "-c", "env | grep ^VCL_; cat \"$VCL_NODEFILE\" 2>/dev/null | sed 's/^/NODE /'"])
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&etc);
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (out, err) = starter("nobody");
    assert!(out.contains("VCL_DEVICE_COUNT=3"), "{out}{err}");
    assert_eq!(out.matches("NODE ").count(), 3, "{out}{err}");
    let (out, err) = starter("daemon");
    assert!(!out.contains("VCL_DEVICE_COUNT") && err.contains("not a job of uid"), "{out}{err}");

    // Nothing changes while 11 runs.
    set_state(&jobs, 11, "R");
    let (_, out, _) = once(&r, &jobs, &qstat, &qrls);
    assert_eq!((line(&out, "released:"), line(&out, "collected:")), ("", ""), "{out}");

    // qstat down: nothing collected, nothing released, exit 1.
    std::fs::write(jobs.join("down"), "").unwrap();
    set_state(&jobs, 11, "C");
    let (code, _, err) = once(&r, &jobs, &qstat, &qrls);
    assert_eq!(code, 1, "{err}");
    assert_eq!(c.query(QueryName::InUse, None).unwrap(), 3);
    std::fs::remove_file(jobs.join("down")).unwrap();

    // 11 completes: its backends are collected, then 12 and 13 go, in order.
    let (code, out, err) = once(&r, &jobs, &qstat, &qrls);
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "collected:"), "11.ce.example.org");
    assert_eq!(line(&out, "released:"), "12.ce.example.org 13.ce.example.org", "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(jobs.join("qrls.log")).unwrap(),
        "11.ce.example.org\n12.ce.example.org\n13.ce.example.org\n"
    );
    assert_eq!(c.query(QueryName::InUse, None).unwrap(), 3);

    // A held job deleted between qstat and qrls: qrls fails (153), its backends go back.
    job(&jobs, 14, 1003, "H", "VirtualGPGPUPerNode=1", "1");
    std::fs::write(&qrls, QRLS.replace("f=\"$JOBS/$1.job\"", "rm -f \"$JOBS/$1.job\"; f=\"$JOBS/$1.job\"")).unwrap();
    let (code, out, err) = once(&r, &jobs, &qstat, &qrls);
    assert_eq!((code, line(&out, "released:")), (0, ""), "{out}{err}");
    assert!(err.contains("qrls 14.ce.example.org failed"), "{err}");
    assert_eq!(c.query(QueryName::InUse, None).unwrap(), 3);

    // Jobs that vanish from qstat altogether are collected too.
    for seq in [12, 13] {
        std::fs::remove_file(jobs.join(format!("{seq}.ce.example.org.job"))).unwrap();
    }
    let (_, out, _) = once(&r, &jobs, &qstat, &qrls);
    assert_eq!(line(&out, "collected:"), "12.ce.example.org 13.ce.example.org");
    assert_eq!(c.query(QueryName::Free, None).unwrap(), 4);
}
