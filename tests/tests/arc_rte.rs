//! The ENV/GPGPU runtime environment (deploy/arc/ENV/GPGPU) run by ARC's own
//! stage-0 code: `RTE_stage0` from nordugrid-arc-arex's submit_common.sh,
//! which A-REX's submit-SLURM-job calls before writing the batch script. The
//! RTE is enabled the way `arcctl rte enable` does it (a link in
//! `<controldir>/rte/enabled/`), the count arrives as A-REX passes xRSL
//! arguments (in double quotes), and what it accepts must be exactly what
//! cder-request's `parse_count` accepts, written as the next free
//! `joboption_nodeproperty_N` in the GRES form job_submit_cder counts.
//!
//! ENV/VGPGPU, its vGPGPU twin, is held to cder-request's
//! `VgpgpuRequest::read` the same way. No daemon runs here: the end-to-end
//! arcsub → A-REX → SLURM path is tests/tests/arc_ce.rs.

use std::path::Path;
use std::process::Command;

use cder_testkit::require_programs;

const SUBMIT_COMMON: &str = "/usr/share/arc/submit_common.sh";
/// ARC's Python binding (python3-nordugrid-arc), used for its xRSL parser.
const ARC_PYTHON: &str = "/usr/lib/python3/dist-packages/arc/compute.py";
const ARC_PARSE: &str = r#"
import sys, arc
jobs = arc.JobDescriptionList()
if not arc.JobDescription.Parse(open(sys.argv[1]).read(), jobs, "nordugrid:xrsl") or len(jobs) != 1:
    sys.exit("not one xRSL job")
j = jobs[0]
print("exe", j.Application.Executable.Path)
for a in j.Application.Executable.Argument: print("arg", a)
print("stdout", j.Application.Output)
for r in j.Resources.RunTimeEnvironment.getSoftwareList(): print("rte", r.getName(), *r.getOptions())
for e in j.Application.Environment: print("env", e[0], e[1])
"#;

fn rte_file(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/arc/ENV").join(name)
}

/// Runs ARC's RTE_stage0 for `ENV/GPGPU` with `arg` (as the xRSL wrote
/// it), after `before` node properties; returns (success, properties, stderr).
fn stage0(controldir: &Path, arg: &str, before: usize) -> (bool, Vec<String>, String) {
    stage0_rte(controldir, "ENV/GPGPU", &[arg], before)
}

/// Runs ARC's RTE_stage0 for `rte` with `args` (as the xRSL wrote them).
fn stage0_rte(controldir: &Path, rte: &str, args: &[&str], before: usize) -> (bool, Vec<String>, String) {
    let mut set_args = String::new();
    for k in 0..args.len() {
        set_args.push_str(&format!("joboption_runtime_0_{}=\"${}\"\n", k + 1, k + 3));
    }
    let script = format!(
        ". {SUBMIT_COMMON}\nCONFIG_controldir=\"$1\"\njoboption_runtime_0=\"$2\"\n{set_args}\
         i=0; while [ $i -lt {before} ]; do eval \"joboption_nodeproperty_$i=--constraint=site$i\"; i=$((i+1)); done\n\
         RTE_stage0\n\
         i=0; while eval \"[ -n \\\"\\${{joboption_nodeproperty_$i+set}}\\\" ]\"; do eval \"echo \\\"\\$joboption_nodeproperty_$i\\\"\"; i=$((i+1)); done\n"
    );
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(&script)
        .arg("sh")
        .arg(controldir)
        .arg(rte)
        .args(args)
        .output()
        .expect("running /bin/sh");
    let props = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    (out.status.success(), props, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn arc_stage0_turns_the_count_into_the_gres_job_submit_counts() {
    if !require_programs(&[SUBMIT_COMMON, "/bin/sh"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let enabled = dir.path().join("rte/enabled/ENV");
    std::fs::create_dir_all(&enabled).unwrap();
    std::os::unix::fs::symlink(rte_file("GPGPU").canonicalize().unwrap(), enabled.join("GPGPU")).unwrap();

    let inputs = [
        "1",
        "2",
        "007",
        " 3 ",
        "4096",
        "+5",
        "4097",
        "0",
        "000",
        "-1",
        "-0",
        "abc",
        "",
        "2.5",
        "1e3",
        "2 3",
        "99999999999999999999",
        "0004096",
        "00004097",
        "\"2\"",
        "$(id)",
        "`id`",
        "2;id",
        "9\n1",
    ];
    for (k, raw) in inputs.iter().enumerate() {
        let before = k % 3;
        let (ok, props, err) = stage0(dir.path(), raw, before);
        // ARC quotes each argument, escapes inner quotes and expands the list
        // unquoted: blanks split it and quotes arrive escaped, so such values
        // reach the RTE mangled and must be refused (stricter than the rule).
        let mangled = raw.contains(|c: char| c.is_whitespace() || c == '"');
        let expected = if mangled { Err(cder_request::CountError::NotANumber) } else { cder_request::parse_count(raw) };
        let existing: Vec<String> = (0..before).map(|i| format!("--constraint=site{i}")).collect();
        match expected {
            Ok(n) => {
                assert!(ok, "{raw:?}: cder-request accepts {n}, ARC stage 0 failed: {err}");
                let mut want = existing.clone();
                want.push(format!("--gres={}", cder_request::lrms::slurm_gres(cder_request::GPGPU, n)));
                assert_eq!(props, want, "{raw:?}");
            }
            Err(e) => {
                assert!(!ok, "{raw:?}: cder-request refuses it ({e}), ARC stage 0 accepted it: {props:?}");
                assert!(err.contains("cder: RTE ENV/GPGPU: argument"), "{raw:?}: no readable reason: {err}");
                assert!(err.contains("stage 0 execution failed"), "{raw:?}: ARC did not fail the job: {err}");
                // ARC exits the submit script: no batch script is written.
                assert!(props.is_empty(), "{raw:?}: submission went on after a refused count: {props:?}");
            }
        }
    }

    // A disabled RTE (no link in rte/enabled) is refused by ARC itself.
    std::fs::remove_file(enabled.join("GPGPU")).unwrap();
    let (ok, _, err) = stage0(dir.path(), "2", 0);
    assert!(!ok && err.contains("missing, broken or not enabled"), "{err}");
}

/// ENV/VGPGPU at stage 0 reads (count, method) exactly as cder-request's
/// `VgpgpuRequest::read` does, and writes cder's SPANK options, which
/// job_submit_cder.so turns into `licenses=vgpgpu:N×nodes`.
#[test]
fn arc_stage0_turns_a_vgpgpu_request_into_the_spank_options() {
    if !require_programs(&[SUBMIT_COMMON, "/bin/sh"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let enabled = dir.path().join("rte/enabled/ENV");
    std::fs::create_dir_all(&enabled).unwrap();
    std::os::unix::fs::symlink(rte_file("VGPGPU").canonicalize().unwrap(), enabled.join("VGPGPU")).unwrap();
    let counts = ["2", "007", " 3 ", "4096", "+5", "0", "-1", "abc", "", "4097", "2 3", "\"2\"", "$(id)"];
    let methods = [
        None,
        Some("rCUDA"),
        Some("rcuda"),
        Some("VCL"),
        Some("vcl"),
        Some(""),
        Some("cuda"),
        Some("\"VCL\""),
        Some(" VCL "),
        Some("V CL"),
        Some("$(id)"),
        Some("VCL;id"),
    ];
    let mut k = 0;
    for count in counts {
        for method in methods {
            k += 1;
            let before = k % 3;
            let args: Vec<&str> = std::iter::once(count).chain(method).collect();
            let (ok, props, err) = stage0_rte(dir.path(), "ENV/VGPGPU", &args, before);
            // As for ENV/GPGPU: blanks and quotes reach the RTE mangled by ARC.
            let mangled = args.iter().any(|a| a.contains(|c: char| c.is_whitespace() || c == '"'));
            let expected =
                if mangled { None } else { cder_request::VgpgpuRequest::read(Some(count), method).ok().flatten() };
            let existing: Vec<String> = (0..before).map(|i| format!("--constraint=site{i}")).collect();
            match expected {
                Some(r) => {
                    assert!(ok, "{args:?}: cder-request accepts {r:?}, ARC stage 0 failed: {err}");
                    let mut want = existing.clone();
                    want.push(format!("--vgpgpu-per-node={}", r.per_node));
                    want.push(format!("--vgpgpu-method={}", r.method.name()));
                    assert_eq!(props, want, "{args:?}");
                }
                None => {
                    assert!(!ok, "{args:?}: cder-request refuses it, ARC stage 0 accepted it: {props:?}");
                    assert!(err.contains("cder: RTE ENV/VGPGPU:"), "{args:?}: no readable reason: {err}");
                    assert!(err.contains("stage 0 execution failed"), "{args:?}: ARC did not fail the job: {err}");
                    assert!(props.is_empty(), "{args:?}: submission went on: {props:?}");
                }
            }
        }
    }
    // The option names must stay the SPANK plugin's own (a tripwire for a rename).
    let plugin =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../slurm-plugin/src/vgpgpu.rs")).unwrap();
    for decl in ["OPT_VGPGPU_PER_NODE: &str = \"vgpgpu-per-node\"", "OPT_VGPGPU_METHOD: &str = \"vgpgpu-method\""] {
        assert!(
            plugin.contains(decl),
            "slurm-plugin/src/vgpgpu.rs no longer declares {decl}: update deploy/arc/ENV/VGPGPU"
        );
    }
}

/// `cder-jdl submit --via arc` against a real BDII: the xRSL carries the
/// count as ENV/GPGPU's argument, and arcsub gets the REST interface and one
/// `-C` per CE phase 1 matched, best first. The arcsub here is a shell script
/// given as `--submit-command` that records its arguments and the xRSL (the
/// real arcsub needs a running A-REX, which this test does not start).
#[test]
fn submit_via_arc_writes_xrsl_with_the_runtime_environment() {
    use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
    use cder_tests::twophase::{cder_jdl, ce, gpu_sites, grid_ldif, index_env, provider, VO};
    if !require_slapd() || !require_programs(&[ARC_PYTHON]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ldif = grid_ldif(&provider(), &gpu_sites(), &["attribute-extension"], 1, d).unwrap();
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    let arcsub = d.join("arcsub");
    std::fs::write(&arcsub, format!("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > {0}/argv\neval \"last=\\${{$#}}\"\ncp \"$last\" {0}/job.xrsl\necho 'Job submitted with jobid: https://ce.example.org:443/arex/rest/1.0/jobs/abc123'\n", d.display())).unwrap();
    std::fs::set_permissions(&arcsub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(d.join("run.sh"), "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES\"\n").unwrap();
    let jdl = d.join("job.jdl");
    let write_job = |n: &str| {
        std::fs::write(&jdl, format!("[ Executable = \"run.sh\"; Arguments = \"-n 4\"; StdOutput = \"out.txt\"; Environment = {{ \"GREETING=say \\\"hi\\\"\" }}; VirtualOrganisation = \"{VO}\"; GPGPUPerNode = {n}; Requirements = GPGPUVendor == \"Nvidia\" ]")).unwrap();
    };
    let submit = |extra: &[&str]| {
        Command::new(cder_jdl())
            .envs(index_env(dir.path()))
            .args(["submit", "--bdii", &slapd.url(), "--via", "arc"])
            .args(extra)
            .arg(&jdl)
            .output()
            .unwrap()
    };

    write_job("2");
    let out = submit(&["--submit-command", arcsub.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "https://ce.example.org:443/arex/rest/1.0/jobs/abc123");
    let argv: Vec<String> = std::fs::read_to_string(d.join("argv")).unwrap().lines().map(str::to_string).collect();
    let (ce_b, ce_a) = (ce(1, "gpgpu"), ce(0, "gpu"));
    assert_eq!(argv[..argv.len() - 1], ["-T", "arcrest", "-C", ce_b.as_str(), "-C", ce_a.as_str()], "{argv:?}");
    let xrsl = std::fs::read_to_string(d.join("job.xrsl")).unwrap();
    for part in [
        "(runtimeenvironment=\"ENV/GPGPU\" \"2\")",
        "(executable=\"run.sh\")",
        "(arguments=\"-n\" \"4\")",
        "(stdout=\"out.txt\")",
    ] {
        assert!(xrsl.contains(part), "{part} missing from\n{xrsl}");
    }
    assert!(
        xrsl.contains(&format!("(\"run.sh\" \"{}\")", d.canonicalize().unwrap().join("run.sh").display())),
        "{xrsl}"
    );

    // ARC's own xRSL parser (libarccompute through its Python binding) reads
    // what cder-jdl wrote: the RTE and its option, the words, the quoting.
    let parsed = Command::new("/usr/bin/python3").arg("-c").arg(ARC_PARSE).arg(d.join("job.xrsl")).output().unwrap();
    assert!(parsed.status.success(), "ARC's parser: {}", String::from_utf8_lossy(&parsed.stderr));
    let parsed = String::from_utf8_lossy(&parsed.stdout);
    let want = "exe run.sh\narg -n\narg 4\nstdout out.txt\nrte ENV/GPGPU 2\nenv GREETING say \"hi\"\n";
    assert_eq!(parsed, want, "xRSL:\n{xrsl}");

    // --dry-run prints the same xRSL and runs nothing.
    std::fs::remove_file(d.join("job.xrsl")).unwrap();
    let out = submit(&["--dry-run", "--submit-command", arcsub.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), xrsl);
    assert!(!d.join("job.xrsl").exists());

    // A bad value is bad input (exit 2) naming the key; arcsub is not run.
    std::fs::write(
        &jdl,
        format!("[ Executable = \"run.sh\"; StdOutput = \"a\\tb\"; VirtualOrganisation = \"{VO}\"; GPGPUPerNode = 2 ]"),
    )
    .unwrap();
    let out = submit(&["--submit-command", arcsub.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("StdOutput"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!d.join("job.xrsl").exists());
}

/// A vGPGPU job's xRSL (cder-jdl's writer) read back by ARC's own parser:
/// both runtime environments with their arguments.
#[test]
fn arcs_parser_reads_the_vgpgpu_runtime_environment() {
    if !require_programs(&[ARC_PYTHON]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let job = cder_classad::ast::ClassAd::parse(
        "[ Executable = \"/bin/hostname\"; GPGPUPerNode = 1; VirtualGPGPUPerNode = 3; VirtualGPGPUMethod = \"vcl\" ]",
    )
    .unwrap();
    let xrsl = cder_jdl::arc::xrsl(&job, dir.path()).unwrap();
    std::fs::write(dir.path().join("job.xrsl"), &xrsl).unwrap();
    let parsed =
        Command::new("/usr/bin/python3").arg("-c").arg(ARC_PARSE).arg(dir.path().join("job.xrsl")).output().unwrap();
    assert!(parsed.status.success(), "ARC's parser: {}", String::from_utf8_lossy(&parsed.stderr));
    let parsed = String::from_utf8_lossy(&parsed.stdout);
    let rtes: Vec<&str> = parsed.lines().filter(|l| l.starts_with("rte ")).collect();
    assert_eq!(rtes, ["rte ENV/GPGPU 1", "rte ENV/VGPGPU 3 VCL"], "xRSL:\n{xrsl}");
}
