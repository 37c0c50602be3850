//! The admin- and user-facing commands of the vGPGPU flows, run as
//! programs against a real cder-registryd + munged: `cderctl registry …`
//! (including the SLURM licence check) and the TORQUE submit filter's hold.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use cder_tests::munge::require_munge;
use cder_tests::vgpgpu::{binary, Registryd};

fn cderctl(config: &Path, args: &[&str]) -> Output {
    Command::new(binary("cderctl", "cderctl").unwrap())
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn cderctl_registry_commands() {
    if !require_munge() {
        return;
    }
    let r = Registryd::start("").unwrap();
    r.register_many("GPU-a", "wn1", 3).unwrap();
    let cfg = r.config_path();
    let out = cderctl(&cfg, &["registry", "query", "total", "--method", "rCUDA"]);
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).trim()), (Some(0), "3"), "{}", text(&out));

    let out = cderctl(&cfg, &["registry", "offline", "--uuid", "GPU-a-2", "--reason", "fan"]);
    assert!(out.status.success() && text(&out).contains("(fan)"), "{}", text(&out));
    // The licence count is what can be handed out: 3 registered, 1 offline.
    let conf = r.dir().join("slurm.conf");
    std::fs::write(&conf, "ClusterName=x\nLicenses=matlab:1,vgpgpu:3\n").unwrap();
    let out = cderctl(&cfg, &["registry", "slurm-licenses", "--slurm-conf", &conf.display().to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Licenses=vgpgpu:2");
    assert!(String::from_utf8_lossy(&out.stderr).contains("slurm.conf:2: Licenses has vgpgpu:3"), "{}", text(&out));
    cderctl(&cfg, &["registry", "online", "--host", "wn1"]);
    let out = cderctl(&cfg, &["registry", "slurm-licenses", "--slurm-conf", &conf.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    std::fs::write(&conf, "ClusterName=x\n").unwrap();
    let out = cderctl(&cfg, &["registry", "slurm-licenses", "--slurm-conf", &conf.display().to_string()]);
    assert!(out.status.code() == Some(1) && text(&out).contains("no Licenses line"), "{}", text(&out));

    r.client().request(&"slurm:77".parse().unwrap(), 2, "wn1", cder_model::VgpgpuMethod::Vcl).unwrap();
    let out = cderctl(&cfg, &["registry", "status"]);
    assert!(
        text(&out).contains("slurm:77 on wn1") && text(&out).contains("all: 3 total, 1 free, 2 in use"),
        "{}",
        text(&out)
    );
    let out = cderctl(&cfg, &["registry", "release", "--job", "slurm:77"]);
    assert!(out.status.success() && text(&out).contains("released 2"), "{}", text(&out));

    // Bad input: exit 2 naming what is wrong.
    for (args, what) in [
        (&["registry", "query", "everything"][..], "everything"),
        (&["registry", "query", "free", "--method", "OpenGL"][..], "OpenGL"),
        (&["registry", "release", "--job", "nojob"][..], "--job"),
        (&["registry", "offline", "--host", "wn 1"][..], "host"),
    ] {
        let out = cderctl(&cfg, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(what), "{args:?}: {}", text(&out));
    }
    let plain = r.dir().join("plain.toml");
    std::fs::write(&plain, "[node]\n").unwrap();
    let out = cderctl(&plain, &["registry", "status"]);
    assert!(out.status.code() == Some(2) && text(&out).contains("no [registry] section"), "{}", text(&out));
    // The registry down: exit 1.
    let mut r = r;
    r.kill9();
    let out = cderctl(&cfg, &["registry", "status"]);
    assert!(out.status.code() == Some(1) && text(&out).contains("unreachable"), "{}", text(&out));
}

#[test]
fn the_torque_submit_filter_holds_vgpgpu_jobs() {
    let filter = binary("cder-torque", "cder-torque-submit-filter").unwrap();
    let run = |script: &str, args: &[&str]| {
        use std::io::Write;
        let mut child = Command::new(&filter)
            .args(args)
            .env("CDER_TORQUE_CONFIG", "/nonexistent/torque.toml")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let held = run("#!/bin/sh\n#CDER VirtualGPGPUPerNode=2\n#CDER VirtualGPGPUMethod=VCL\nhostname\n", &[]);
    assert!(held.starts_with("#!/bin/sh\n#PBS -h\n#PBS -v VirtualGPGPUPerNode=2,VirtualGPGPUMethod=VCL\n"), "{held}");
    let held = run("#!/bin/sh\nhostname\n", &["-v", "VirtualGPGPUPerNode=1"]);
    assert!(held.contains("#PBS -h\n"), "{held}");
    // A malformed request is refused (exit 2) with the reason.
    let out = Command::new(&filter)
        .env("CDER_TORQUE_CONFIG", "/nonexistent/torque.toml")
        .args(["-v", "VirtualGPGPUPerNode=lots"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.code() == Some(2) && text(&out).contains("lots"), "{}", text(&out));
    let plain = "#!/bin/sh\n#PBS -l nodes=1\nhostname\n";
    assert_eq!(run(plain, &[]), plain, "no vGPGPU request: unchanged");
}
