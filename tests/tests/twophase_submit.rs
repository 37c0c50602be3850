//! `cder-jdl submit` against a real BDII (slapd, BDII config, GLUE schemas,
//! the real provider's LDIF): the refined JDL handed to a submit command
//! keeps the user's attributes, restricts the job to the matching CEs and
//! reads back through `cder-jdl check`; no match is exit 1 with the reasons.
//! The submit command here is a shell script given with `--via command`
//! (gLite's and ARC's clients are not packaged for Debian).

use std::process::{Command, Stdio};

use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{cder_jdl, ce, gpu_sites, grid_ldif, index_env, provider, VO};

#[test]
fn submit_hands_a_refined_jdl_to_the_submit_command() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ldif = grid_ldif(&provider(), &gpu_sites(), &["attribute-extension"], 1, dir.path()).unwrap();
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    let d = dir.path();
    // The "broker": checks the JDL with cder-jdl, keeps a copy, reports a job id.
    let broker = d.join("submit.sh");
    std::fs::write(&broker, format!("#!/bin/sh\n{} check \"$1\" >/dev/null || exit 3\ncp \"$1\" {}/submitted.jdl\necho 'Your job identifier is:'\necho job-4242\n", cder_jdl().display(), d.display())).unwrap();
    std::fs::set_permissions(&broker, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let jdl = d.join("job.jdl");
    let job = format!(
        "[\n  Executable = \"run.sh\";\n  Arguments = \"-n 4\";\n  VirtualOrganisation = \"{VO}\";\n  GPGPUPerNode = 2;\n  \
         Requirements = GPGPUVendor == \"Nvidia\" && GPGPUCUDAComputeCapability >= 3.0;\n  Rank = -other.GlueCEStateEstimatedResponseTime;\n]\n"
    );
    std::fs::write(&jdl, &job).unwrap();
    let submit = |extra: &[&str]| {
        Command::new(cder_jdl())
            .envs(index_env(d))
            .args(["submit", "--bdii", &slapd.url()])
            .args(extra)
            .arg(&jdl)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = submit(&["--via", "command", "--submit-command", broker.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "job-4242");
    let refined = std::fs::read_to_string(d.join("submitted.jdl")).unwrap();
    let ad = cder_classad::ClassAd::parse(&refined).unwrap();
    let user = cder_classad::ClassAd::parse(&job).unwrap();
    for (name, expr) in user.iter().filter(|(n, _)| *n != "Requirements") {
        assert_eq!(ad.lookup(name).map(|e| e.to_string()), Some(expr.to_string()), "{name} changed:\n{refined}");
    }
    // ce-b (30 s) ranks before ce-a (120 s); ce-c (AMD) is not in the list.
    let req = ad.lookup("Requirements").unwrap().to_string();
    let expected = format!(
        "(TARGET.GlueCEUniqueID == \"{}\" || TARGET.GlueCEUniqueID == \"{}\") && ({})",
        ce(1, "gpgpu"),
        ce(0, "gpu"),
        user.lookup("Requirements").unwrap()
    );
    assert_eq!(req, expected);
    // The refined JDL restricts: an offer of ce-c with the same GPUs no longer matches.
    let like_a_but_c = cder_classad::ClassAd::parse(&format!(
        "[ GlueCEUniqueID = \"{}\"; GPGPUVendor = \"Nvidia\"; GPGPUCUDAComputeCapability = 3.5 ]",
        ce(2, "gpu")
    ))
    .unwrap();
    let like_a = cder_classad::ClassAd::parse(&format!(
        "[ GlueCEUniqueID = \"{}\"; GPGPUVendor = \"Nvidia\"; GPGPUCUDAComputeCapability = 3.5 ]",
        ce(0, "gpu")
    ))
    .unwrap();
    let compiled = cder_classad::CompiledRequest::new(&ad);
    assert!(compiled.matches(&like_a) && !compiled.matches(&like_a_but_c));

    // --dry-run prints the same refined JDL and submits nothing.
    std::fs::remove_file(d.join("submitted.jdl")).unwrap();
    let out = submit(&["--dry-run"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), refined);
    assert!(!d.join("submitted.jdl").exists());

    // No match: exit 1, the reason for each CE, nothing submitted.
    std::fs::write(&jdl, "[ Executable = \"run.sh\"; Requirements = GPGPUMainMemorySize >= 65536 ]").unwrap();
    let out = submit(&["--via", "command", "--submit-command", broker.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no CE matches")
            && err.contains("GPGPUMainMemorySize >= 65536 is false")
            && err.contains(&ce(2, "gpu")),
        "{err}"
    );
    assert!(!d.join("submitted.jdl").exists());
    // A failing submit command is a runtime error naming it.
    std::fs::write(&jdl, &job).unwrap();
    let out = submit(&["--via", "arc", "--submit-command", "/bin/false"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/bin/false"), "{}", String::from_utf8_lossy(&out.stderr));
}
