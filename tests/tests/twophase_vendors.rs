//! Phase 1 over a grid of several vendors (issue 46): one real slapd with
//! the GLUE schemas, loaded with the real `cder-glue-provider`'s output for
//! an NVIDIA site, an AMD site, an Intel site, a site whose nodes carry
//! NVIDIA and AMD GPUs, and an AMD site that publishes only GLUE 2.1's
//! AcceleratorEnvironment. `cder-jdl list-match` must pick exactly the CEs
//! of the vendor (and architecture) a JDL asks for, and give the same answer
//! from the local index as `--live`.
//!
//! | CE | strategy | GPUs per node | vendor | architecture / CC |
//! |---|---|---|---|---|
//! | ce-a | attribute-extension | Tesla K20m × 2 | Nvidia | CC 3.5 |
//! | ce-amd | class-extension | Instinct MI250X × 8 | AMD | gfx90a |
//! | ce-intel | hybrid | Data Center GPU Max 1550 × 4 | Intel | Xe-HPC |
//! | ce-mix | attribute-extension | A100 × 2 and Instinct MI210 × 2 | Nvidia, AMD | CC 8.0, gfx90a |
//! | ce-amd21 | glue21-accelerator | Instinct MI300X × 8 | AMD | gfx942 |

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{
    cder_jdl, ce_glue2_ldif, gpu_sites, index_env, plain_site_ldif, provider, provider_ldif, GpuSite, VO,
};

fn site(host: &str, group: &str, nodes: u32, device: &str, free: u32, used: u32) -> GpuSite {
    GpuSite {
        host: host.into(),
        lrms: "SLURM".into(),
        group: group.into(),
        nodes,
        device: device.into(),
        free,
        used,
        virtual_gpgpu: None,
        queues: vec![("gpu".into(), vec![VO.into()], 60, 8)],
    }
}

fn amd() -> GpuSite {
    let device = "model = \"AMD Instinct MI250X\"\nvendor = \"AMD\"\ncount = 8\nmemory_mib = 65536\narchitecture = \"gfx90a\"\nclock_mhz = 1700\necc = true";
    site("ce-amd.example.org", "ce-amd_mi250x", 4, device, 20, 12)
}

fn intel() -> GpuSite {
    let device = "model = \"Intel Data Center GPU Max 1550\"\nvendor = \"intel\"\ncount = 4\nmemory_mib = 131072\narchitecture = \"Xe-HPC\"";
    site("ce-intel.example.org", "ce-intel_max1550", 2, device, 8, 0)
}

/// An NVIDIA type and an AMD type under one prefix: free/used below count the AMD GPUs.
fn mixed() -> GpuSite {
    let device = "model = \"NVIDIA A100-SXM4-40GB\"\ncount = 2\nmemory_mib = 40960\ncompute_capability = \"8.0\"\nused = 1\n\n\
                  [[group.device]]\ntype = \"amdgpu\"\nprefix = \"GPGPU\"\nvendor = \"AMD\"\nmodel = \"AMD Instinct MI210\"\ncount = 2\nmemory_mib = 65536\narchitecture = \"gfx90a\"";
    site("ce-mix.example.org", "ce-mix_wn", 2, device, 3, 1)
}

fn amd_glue21() -> GpuSite {
    let device =
        "model = \"AMD Instinct MI300X\"\nvendor = \"AMD\"\ncount = 8\nmemory_mib = 196608\narchitecture = \"gfx942\"";
    site("ce-amd21.example.org", "ce-amd21_mi300x", 2, device, 16, 0)
}

/// The GLUE 2.1 schema cder ships for the accelerator entities.
fn glue21_schema() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/bdii/GLUE21-accelerator.schema")
}

/// The provider's GLUE 2.1 output for `site`, with a ComputingShareAcceleratorInfo per queue.
fn glue21_ldif(site: &GpuSite, dir: &Path) -> String {
    let ids: Vec<String> = site.queues.iter().map(|q| format!("\"{}_{}\"", q.0, site.service())).collect();
    let config = dir.join(format!("{}.toml", site.host));
    let text = site.provider_config().replacen(
        "[site]\n",
        &format!("[site]\ncomputing_share_ids = [{}]\n", ids.join(", ")),
        1,
    );
    std::fs::write(&config, text).unwrap();
    let out = Command::new(provider())
        .arg("--config")
        .arg(&config)
        .args(["--strategy", "glue21-accelerator"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The grid: each site's provider output and its CE's shares and endpoint.
fn grid(dir: &Path) -> String {
    let mut ldif = String::new();
    let nvidia = gpu_sites().remove(0);
    for (site, strategy) in [(&nvidia, "attribute-extension"), (&amd(), "class-extension"), (&intel(), "hybrid")] {
        ldif.push_str(&provider_ldif(&provider(), site, &[strategy], dir).unwrap_or_else(|e| panic!("{e}")));
        ldif.push('\n');
        ldif.push_str(&ce_glue2_ldif(&site.host, &site.lrms, &site.service(), Some(&site.group), &site.queues));
    }
    // The mixed node group is two ExecutionEnvironments; the CE's share runs on both.
    let mix = mixed();
    let published = provider_ldif(&provider(), &mix, &["attribute-extension"], dir).unwrap_or_else(|e| panic!("{e}"));
    let ees = [format!("{}_gpgpu", mix.group), format!("{}_amdgpu", mix.group)];
    for ee in &ees {
        assert!(published.contains(&format!("GLUE2ResourceID: {ee}\n")), "no EE {ee} in\n{published}");
    }
    ldif.push_str(&published);
    ldif.push('\n');
    let one = |ee: &str| {
        format!("GLUE2ComputingShareExecutionEnvironmentForeignKey: {ee}\nGLUE2ShareResourceForeignKey: {ee}\n")
    };
    let shares = ce_glue2_ldif(&mix.host, &mix.lrms, &mix.service(), Some(&mix.group), &mix.queues);
    assert!(shares.contains(&one(&mix.group)), "the generator's share foreign keys changed");
    ldif.push_str(&shares.replace(&one(&mix.group), &(one(&ees[0]) + &one(&ees[1]))));
    let amd21 = amd_glue21();
    ldif.push_str(&glue21_ldif(&amd21, dir));
    ldif.push('\n');
    ldif.push_str(&ce_glue2_ldif(&amd21.host, &amd21.lrms, &amd21.service(), Some(&amd21.group), &amd21.queues));
    ldif.push_str(&plain_site_ldif("ce-plain0.example.org"));
    ldif
}

fn list_match(url: &str, jdl: &str, live: bool, dir: &Path) -> Output {
    let path = dir.join("job.jdl");
    std::fs::write(&path, jdl).unwrap();
    let mut c = Command::new(cder_jdl());
    c.envs(index_env(dir)).env_remove("LCG_GFAL_INFOSYS").stdin(Stdio::null());
    c.args(["list-match", "--bdii", url, "--json", "--timeout", "20", "--vo", VO]);
    if live {
        c.arg("--live");
    }
    c.arg(&path).output().expect("running cder-jdl")
}

/// The matches (CE, rank), best first.
fn matches(out: &Output) -> Vec<(String, f64)> {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "list-match printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let list = v["matches"].as_array().unwrap_or_else(|| panic!("no matches in {v}"));
    list.iter().map(|m| (m["ce"].as_str().unwrap().to_string(), m["rank"].as_f64().unwrap_or(0.0))).collect()
}

/// The CE of `site`'s queue `gpu`.
fn ce(site: &GpuSite) -> String {
    site.ce_id("gpu")
}

#[test]
fn a_vendor_requirement_picks_exactly_that_vendors_ces_from_the_index_and_live() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ldif = grid(d);
    let slapd =
        Slapd::start_with_schemas(&SlapdOptions::default(), &[glue21_schema()]).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    let url = slapd.url();

    let nvidia = gpu_sites()[0].ce_id("gpu");
    let (amd, intel, mix, amd21) = (ce(&amd()), ce(&intel()), ce(&mixed()), ce(&amd_glue21()));
    let set = |v: &[&String]| -> BTreeSet<String> { v.iter().map(|s| s.to_string()).collect() };
    let cases: [(&str, &str, BTreeSet<String>); 7] = [
        ("AMD", "[ Requirements = other.GPGPUVendor == \"AMD\" ]", set(&[&amd, &mix, &amd21])),
        // The thesis's unqualified form.
        ("Intel", "[ Requirements = GPGPUVendor == \"Intel\" ]", set(&[&intel])),
        ("Nvidia", "[ Requirements = other.GPGPUVendor == \"Nvidia\" ]", set(&[&nvidia, &mix])),
        ("gfx90a", "[ Requirements = other.GPGPUArchitecture == \"gfx90a\" ]", set(&[&amd, &mix])),
        // AMD and Intel publish no CUDA compute capability: undefined, never a match.
        ("CC >= 3.5", "[ Requirements = other.GPGPUCUDAComputeCapability >= 3.5 ]", set(&[&nvidia, &mix])),
        (
            "AMDGPGPU tag",
            "[ Requirements = Member(\"AMDGPGPU\", other.GlueHostApplicationSoftwareRunTimeEnvironment) ]",
            set(&[&amd, &mix, &amd21]),
        ),
        (
            "AMD or Intel, ranked by architecture",
            "[ Requirements = other.GPGPUVendor == \"AMD\" || other.GPGPUVendor == \"Intel\";\n  \
             Rank = other.GPGPUArchitecture == \"Xe-HPC\" ? 2 : (other.GPGPUArchitecture == \"gfx942\" ? 1 : 0) ]",
            set(&[&amd, &intel, &mix, &amd21]),
        ),
    ];
    for (what, jdl, expected) in cases {
        let from_index = list_match(&url, jdl, false, d);
        let live = list_match(&url, jdl, true, d);
        assert!(from_index.status.success(), "{what}: {}", String::from_utf8_lossy(&from_index.stderr));
        let (a, b) = (matches(&from_index), matches(&live));
        assert_eq!(a, b, "{what}: the index and --live differ");
        let got: BTreeSet<String> = a.iter().map(|(ce, _)| ce.clone()).collect();
        assert_eq!(got, expected, "{what}: {a:?}");
        if what.ends_with("by architecture") {
            let best: Vec<(&str, f64)> = a.iter().take(2).map(|(ce, r)| (ce.as_str(), *r)).collect();
            assert_eq!(best, [(intel.as_str(), 2.0), (amd21.as_str(), 1.0)], "{a:?}");
        }
    }
}
