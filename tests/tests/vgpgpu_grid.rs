//! The grid side of vGPGPUs, end to end with real components: two sites,
//! each with its own cder-registryd (and munged) holding a different number
//! of backends; the real GLUE provider publishes each site's rCUDA / VCL
//! ApplicationEnvironments with the registry's live TotalVGPGPU /
//! FreeVGPGPU; the LDIF loads into a real slapd (BDII config, GLUE schema);
//! `cder-jdl list-match` applies the thesis's rule
//! `VirtualGPGPUPerNode × CPUNumber <= TotalVGPGPU_<method>` and matches only
//! the CEs with enough vGPGPUs.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use cder_model::VgpgpuMethod;
use cder_registry::api::{OfflineRequest, RegisterRequest};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::munge::require_munge;
use cder_tests::twophase::{cder_jdl, ce_glue2_ldif, gpu_sites, index_env, provider, GpuSite, VO};
use cder_tests::vgpgpu::Registryd;

/// The site's provider config, with vGPGPU counts from `registry`.
fn provider_config(site: &GpuSite, registry: &Registryd) -> String {
    let text = site.provider_config();
    let text =
        text.replacen("[site]\n", &format!("[site]\ncder_config = \"{}\"\n", registry.config_path().display()), 1);
    text.replacen(
        "[counts]\nsource = \"static\"\n",
        "[counts]\nsource = \"static\"\nvirtual_source = \"registry\"\n",
        1,
    )
}

fn publish(site: &GpuSite, registry: &Registryd, dir: &Path) -> String {
    let config = dir.join(format!("{}.toml", site.host));
    std::fs::write(&config, provider_config(site, registry)).unwrap();
    let out = Command::new(provider()).arg("--config").arg(&config).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "provider for {}: {}", site.host, String::from_utf8_lossy(&out.stderr));
    let mut ldif = String::from_utf8(out.stdout).unwrap();
    ldif.push('\n');
    ldif.push_str(&ce_glue2_ldif(&site.host, &site.lrms, &site.service(), Some(&site.group), &site.queues));
    ldif
}

fn list_match(bdii: &str, jdl: &str, dir: &Path) -> Output {
    let path = dir.join("job.jdl");
    std::fs::write(&path, jdl).unwrap();
    Command::new(cder_jdl())
        .envs(index_env(dir))
        .args(["list-match", "--bdii", bdii, "--json", "--timeout", "20", "--vo", VO])
        .arg(&path)
        .env_remove("LCG_GFAL_INFOSYS")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn matched(out: &Output) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "list-match printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let mut ces: Vec<String> =
        v["matches"].as_array().unwrap().iter().map(|m| m["ce"].as_str().unwrap().to_string()).collect();
    ces.sort();
    ces
}

fn backends(r: &Registryd, prefix: &str, n: u32, methods: &[VgpgpuMethod]) {
    let c = r.client();
    for i in 0..n {
        let req = RegisterRequest {
            uuid: format!("{prefix}-{i}"),
            vendor: "Nvidia".into(),
            device: i % 2,
            host: format!("{prefix}-wn{}", i / 2),
            methods: methods.to_vec(),
        };
        c.register(&req).unwrap();
    }
}

#[test]
fn vgpgpu_jdl_matches_only_ces_with_enough_backends() {
    if !require_munge() || !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut sites = gpu_sites();
    sites.truncate(2);
    for s in &mut sites {
        s.virtual_gpgpu = None;
    }
    // Site A: 8 rCUDA+VCL backends, 2 of them busy. Site B: 3 VCL-only backends.
    let ra = Registryd::start("").unwrap();
    backends(&ra, "a", 8, &[VgpgpuMethod::Rcuda, VgpgpuMethod::Vcl]);
    ra.client().request(&"slurm:1".parse().unwrap(), 2, "a-wn0", VgpgpuMethod::Rcuda).unwrap();
    let rb = Registryd::start("").unwrap();
    backends(&rb, "b", 4, &[VgpgpuMethod::Vcl]);
    rb.client()
        .offline(&OfflineRequest { uuid: Some("b-3".into()), reason: Some("fan".into()), ..Default::default() })
        .unwrap();

    let ldif = format!("{}\n{}", publish(&sites[0], &ra, dir.path()), publish(&sites[1], &rb, dir.path()));
    assert!(
        ldif.contains("GLUE2EntityOtherInfo: TotalVGPGPU=8") && ldif.contains("GLUE2EntityOtherInfo: FreeVGPGPU=6"),
        "{ldif}"
    );
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    let apps = slapd
        .search(
            "o=glue",
            "(objectClass=GLUE2ApplicationEnvironment)",
            &["GLUE2ApplicationEnvironmentAppName", "GLUE2EntityOtherInfo"],
        )
        .unwrap();
    assert_eq!(apps.matches("GLUE2ApplicationEnvironmentAppName:").count(), 3, "A: rCUDA, VCL; B: VCL\n{apps}");

    let url = slapd.url();
    let (a, b) = (sites[0].ce_id("gpu"), sites[1].ce_id("gpgpu"));
    let d = dir.path();
    // 2 x 4 = 8 rCUDA: only A has that many (B has none).
    let out = list_match(&url, "[ VirtualGPGPUPerNode = 2; VirtualGPGPUMethod = \"rCUDA\"; CPUNumber = 4 ]", d);
    assert_eq!(matched(&out), std::slice::from_ref(&a));
    // 3 VCL: both (B's total counts its offline backend: TotalVGPGPU is installed capacity).
    let out = list_match(&url, "[ VirtualGPGPUPerNode = 1; VirtualGPGPUType = \"VCL\"; CPUNumber = 3 ]", d);
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(matched(&out), both);
    // 5 VCL: only A.
    let out = list_match(&url, "[ VirtualGPGPUPerNode = 5; VirtualGPGPUMethod = \"VCL\"; CPUNumber = 1 ]", d);
    assert_eq!(matched(&out), std::slice::from_ref(&a));
    // 9 rCUDA: nowhere; list-match exits 1.
    let out = list_match(&url, "[ VirtualGPGPUPerNode = 3; VirtualGPGPUMethod = \"rCUDA\"; CPUNumber = 3 ]", d);
    assert!(matched(&out).is_empty() && out.status.code() == Some(1), "{}", String::from_utf8_lossy(&out.stderr));
}
