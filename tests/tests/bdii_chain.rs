//! The information system as a grid runs it: three BDIIs from Debian's
//! `bdii` package, each its own slapd and `bdii-update` on its own loopback
//! port.
//!
//! * resource BDII: runs `cder-glue-provider` from its provider directory
//!   (static counts, rewritten by the test) and holds the CE's own share,
//!   MappingPolicy and endpoint as a static LDIF (as CREAM installs them);
//! * site BDII: `glite-info-provider-ldap -g SITE` (third-party/, EGI's
//!   script, unmodified) pulls the resource BDII's `GLUE2GroupID=resource,o=glue`
//!   through its URL list and re-roots every DN under
//!   `GLUE2DomainID=SITE,o=glue`, beside the site's AdminDomain entry;
//! * top BDII: the same script with `-g grid` pulls the site BDII's
//!   `GLUE2DomainID=SITE,o=glue` under `GLUE2GroupID=grid,o=glue`.
//!
//! Phase 1 (`cder-jdl list-match`) against the top finds the CE and its
//! GPUs. The test then changes the free GPUs at the source and measures
//! how long each level takes to show it (printed, not asserted): each
//! bdii-update cycle runs its providers, then sleeps `BDII_BREATHE_TIME`
//! (shortened here to [`BREATHE_S`]; 120 s in Debian's bdii.conf), so a
//! change waits up to a breathe time plus a cycle at every level.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cder_tests::bdii::{require_bdii, Bdii, BdiiOptions};
use cder_tests::twophase::{cder_jdl, ce_glue2_ldif, provider};

/// `BDII_BREATHE_TIME` of each level, seconds.
const BREATHE_S: f64 = 2.0;
const SITE: &str = "CDER-TEST-SITE";
const HOST: &str = "ce-chain.example.org";
const SERVICE: &str = "ce-chain.example.org_ComputingElement";
const EE: &str = "ce-chain_k20";
const VO: &str = "gputestvo";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../third-party/glite-info-provider-ldap/glite-info-provider-ldap")
}

/// The vendored script keeps its files under /var/lib/bdii/gip/{tmp,cache}/gip/<config name>-glue2:
/// config names of their own, removed at the end.
struct ScriptFiles(Vec<String>);

impl Drop for ScriptFiles {
    fn drop(&mut self) {
        for name in &self.0 {
            for sub in ["tmp/gip", "cache/gip", "tmp/gip/log"] {
                let _ = std::fs::remove_dir_all(Path::new("/var/lib/bdii/gip").join(sub).join(format!("{name}-glue2")));
            }
        }
    }
}

fn provider_config(free: u32) -> String {
    format!(
        "[site]\ncomputing_service_id = \"{SERVICE}\"\ncomputing_manager_id = \"{SERVICE}_Manager\"\n\
         ce_unique_id = \"{HOST}:8443/cream-slurm-gpu\"\n\n\
         [service]\ntype = \"org.glite.ce.CREAM\"\nadmin_domain = \"{SITE}\"\nmanager_product = \"SLURM\"\nmanager_version = \"22.05.8\"\n\n\
         [counts]\nsource = \"static\"\n\n\
         [[group]]\nid = \"{EE}\"\nnodes = [\"wn[01-02]\"]\nplatform = \"amd64\"\nmain_memory_mib = 65536\n\
         logical_cpus = 16\nphysical_cpus = 2\nvirtual_memory_mib = 65536\nos_name = \"Debian\"\nos_version = \"12\"\n\n\
         [[group.device]]\nmodel = \"Tesla K20m\"\ncount = 2\nmemory_mib = 4800\ncompute_capability = \"3.5\"\n\
         free = {free}\nused = {used}\noffline = 0\n",
        used = 4 - free
    )
}

fn executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The EE's `GPGPUFreeInstances` as a BDII serves it now, wherever in its tree.
fn free_at(bdii: &Bdii) -> Option<u32> {
    let text = bdii.slapd.search("o=glue", &format!("(GLUE2ResourceID={EE})"), &["GLUE2EntityOtherInfo"]).ok()?;
    text.lines().find_map(|l| l.strip_prefix("GLUE2EntityOtherInfo: GPGPUFreeInstances=")?.trim().parse().ok())
}

fn list_match(top: &Bdii, jdl: &Path) -> (bool, String) {
    let out = Command::new(cder_jdl())
        .args(["list-match", "--live", "--bdii", &top.slapd.url(), "--vo", VO, "--explain"])
        .arg(jdl)
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn start(name: &str) -> Bdii {
    Bdii::new(&BdiiOptions { breathe_time: BREATHE_S, read_timeout: 30, ..Default::default() })
        .unwrap_or_else(|e| panic!("{name} BDII: {e}"))
}

#[test]
fn a_change_reaches_the_top_bdii_through_the_site_bdii() {
    if !require_bdii() || !cder_testkit::require_programs(&["perl", script().to_str().unwrap()]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let tag = format!("cder-chain-{}-{}", std::process::id(), work.path().file_name().unwrap().to_string_lossy());
    let _files = ScriptFiles(vec![format!("{tag}-site.conf"), format!("{tag}-top.conf")]);

    // Resource BDII: the provider, and the CE's own share and endpoint.
    let mut resource = start("resource");
    let config = work.path().join("glue-provider.toml");
    std::fs::write(&config, provider_config(4)).unwrap();
    executable(
        &resource.provider_dir().join("cder-glue-provider"),
        &format!("#!/bin/sh\nexec '{}' --config '{}'\n", provider().display(), config.display()),
    );
    let queues = [("gpu".to_string(), vec![VO.to_string()], 60, 8)];
    std::fs::write(resource.ldif_dir().join("ce.ldif"), ce_glue2_ldif(HOST, "slurm", SERVICE, Some(EE), &queues))
        .unwrap();

    // Site BDII: its AdminDomain, and the resource BDII in its URL list.
    let mut site = start("site");
    std::fs::write(
        site.ldif_dir().join("site.ldif"),
        format!(
            "dn: GLUE2DomainID={SITE},o=glue\nobjectClass: GLUE2Domain\nobjectClass: GLUE2AdminDomain\n\
             GLUE2DomainID: {SITE}\nGLUE2EntityName: {SITE}\nGLUE2AdminDomainDistributed: FALSE\n"
        ),
    )
    .unwrap();
    let site_urls = work.path().join(format!("{tag}-site.conf"));
    std::fs::write(&site_urls, format!("CE ldap://127.0.0.1:{}/GLUE2GroupID=resource,o=glue\n", resource.slapd.port()))
        .unwrap();
    executable(
        &site.provider_dir().join("glite-info-provider-site"),
        &format!("#!/bin/sh\nexec '{}' -c '{}' -g {SITE} -t 10\n", script().display(), site_urls.display()),
    );

    // Top BDII: the site BDII in its URL list.
    let mut top = start("top");
    let top_urls = work.path().join(format!("{tag}-top.conf"));
    std::fs::write(&top_urls, format!("{SITE} ldap://127.0.0.1:{}/GLUE2DomainID={SITE},o=glue\n", site.slapd.port()))
        .unwrap();
    executable(
        &top.provider_dir().join("glite-info-provider-top"),
        &format!("#!/bin/sh\nexec '{}' -c '{}' -g grid -t 10\n", script().display(), top_urls.display()),
    );

    for b in [&mut resource, &mut site, &mut top] {
        b.run().unwrap_or_else(|e| panic!("{e}"));
    }
    let logs = |what: &str| {
        format!("{what}\n== resource ==\n{}\n== site ==\n{}\n== top ==\n{}", resource.log(), site.log(), top.log())
    };
    let reached = cder_testkit::wait_for_value(Duration::from_secs(120), Duration::from_millis(200), || {
        (free_at(&top) == Some(4)).then_some(())
    });
    assert!(reached.is_some(), "{}", logs("the EE never reached the top BDII"));
    let ee_dn = top.slapd.search("o=glue", &format!("(GLUE2ResourceID={EE})"), &["dn"]).unwrap();
    assert!(
        ee_dn.contains(&format!(
            "GLUE2ServiceID={SERVICE},GLUE2GroupID=resource,GLUE2DomainID={SITE},GLUE2GroupID=grid,o=glue"
        )),
        "re-rooted under the site and the grid: {ee_dn}"
    );

    // Phase 1 against the top: the CE and its GPUs.
    let jdl = work.path().join("job.jdl");
    std::fs::write(
        &jdl,
        "[\n  Executable = \"train.sh\";\n  GPGPUPerNode = 2;\n  Requirements = other.GPGPUFreeInstances >= 3 && GPGPUModel == \"Tesla K20m\";\n]\n",
    )
    .unwrap();
    let ce = format!("{HOST}:8443/cream-slurm-gpu");
    let (ok, out) = list_match(&top, &jdl);
    assert!(ok && out.contains(&ce), "phase 1 against the top BDII:\n{out}");

    // Changes at the source, timed at each level.
    let mut samples = Vec::new();
    for free in [1, 4, 2] {
        std::fs::write(&config, provider_config(free)).unwrap();
        let t0 = Instant::now();
        let mut seen: [Option<f64>; 3] = [None; 3];
        let reached = cder_testkit::wait_for_value(Duration::from_secs(120), Duration::from_millis(100), || {
            for (i, b) in [&resource, &site, &top].into_iter().enumerate() {
                if seen[i].is_none() && free_at(b) == Some(free) {
                    seen[i] = Some(t0.elapsed().as_secs_f64());
                }
            }
            seen[2].map(|_| ())
        });
        assert!(reached.is_some(), "{}", logs(&format!("free = {free} did not reach the top: {seen:?}")));
        let [r, s, t] = seen.map(|s| s.unwrap_or(f64::NAN));
        println!("free {free}: resource {r:.1} s, site {s:.1} s, top {t:.1} s (breathe {BREATHE_S} s per level)");
        samples.push(t);
        if free == 1 {
            let (ok, out) = list_match(&top, &jdl);
            assert!(!ok && out.contains("GPGPUFreeInstances >= 3 is false"), "1 free GPU at the top:\n{out}");
        }
    }
    let (min, max) = samples.iter().fold((f64::MAX, 0f64), |(a, b), &s| (a.min(s), b.max(s)));
    println!(
        "source → top BDII: {min:.1}–{max:.1} s over {} changes, breathe time {BREATHE_S} s at each of 3 levels",
        samples.len()
    );
}
