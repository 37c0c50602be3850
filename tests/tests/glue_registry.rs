//! vGPGPU counts from the real cluster registry: a `cder-registryd` (with
//! its own munged) holds 3 backends serving rCUDA and VCL; a job takes one.
//! The provider, told `counts.virtual_source = "registry"`, publishes the
//! rCUDA and VCL ApplicationEnvironments with TotalVGPGPU / FreeVGPGPU from
//! the registry's status, and slapd (GLUE 2.0 schema) holds them.

use std::collections::BTreeMap;

use cder_model::VgpgpuMethod;
use cder_tests::glue::{assert_reads_back, glue_validator, other_info, publish, require_glue_validator, run_provider};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::munge::require_munge;
use cder_tests::vgpgpu::Registryd;

fn config(cder_config: &std::path::Path) -> String {
    format!(
        r#"[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-slurm-gpgpu"
cder_config = "{}"

[service]
type = "org.glite.ce.CREAM"
admin_domain = "EXAMPLE"
manager_product = "SLURM"
manager_version = "22.05.8"

[counts]
source = "static"
virtual_source = "registry"

[[group]]
id = "ce.example.org_k20"
nodes = ["node[1-2]"]
platform = "amd64"
main_memory_mib = 65536
virtual_memory_mib = 81920
os_name = "CentOS"
os_version = "7.9"
physical_cpus = 2
logical_cpus = 32

[[group.device]]
model = "Tesla K20m"
count = 2
memory_mib = 4800

[[virtual]]
method = "rCUDA"
version = "16.11"
"#,
        cder_config.display()
    )
}

#[test]
fn registry_counts_become_application_environments() {
    if !require_munge() || !require_slapd() {
        return;
    }
    let registry = Registryd::start("").unwrap_or_else(|e| panic!("{e}"));
    registry.register_many("GPU-node1", "node1", 3).unwrap_or_else(|e| panic!("{e}"));
    registry
        .client()
        .request(&"slurm:7".parse().unwrap(), 1, "node2", VgpgpuMethod::Rcuda)
        .unwrap_or_else(|e| panic!("{e}"));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("glue-provider.toml");
    // A copy of the registry's [registry] config: it outlives the registry below.
    let node_config = dir.path().join("cder.toml");
    std::fs::copy(registry.config_path(), &node_config).unwrap();
    std::fs::write(&path, config(&node_config)).unwrap();
    let ldif = publish(&path, &["attribute-extension"]);
    // The registry's AppEnvs pass EGI's glue-validator like the rest.
    if require_glue_validator() {
        let verdict = glue_validator(&ldif, &[]);
        assert_eq!((verdict.errors, verdict.warnings), (0, 0), "{}\n{ldif}", verdict.output);
    }
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    assert_reads_back(&slapd, &ldif);

    let found = slapd.search("o=glue", "(objectClass=GLUE2ApplicationEnvironment)", &[]).unwrap();
    let apps: BTreeMap<String, _> = cder_glue_provider::ldif::parse(&found)
        .unwrap()
        .into_iter()
        .map(|e| {
            let name = e.values("GLUE2ApplicationEnvironmentAppName").next().unwrap().to_string();
            (name, e)
        })
        .collect();
    assert_eq!(apps.keys().map(String::as_str).collect::<Vec<_>>(), ["VCL", "rCUDA"], "{found}");
    let rcuda = other_info(&apps["rCUDA"]);
    assert_eq!((rcuda["TotalVGPGPU"].as_str(), rcuda["FreeVGPGPU"].as_str()), ("3", "2"), "{found}");
    assert_eq!(apps["rCUDA"].values("GLUE2ApplicationEnvironmentAppVersion").collect::<Vec<_>>(), ["16.11"]);
    let vcl = other_info(&apps["VCL"]);
    assert_eq!(vcl["TotalVGPGPU"], "3");
    assert_eq!(
        vcl["FreeVGPGPU"],
        registry.client().status().unwrap().counts_for(Some(VgpgpuMethod::Vcl)).free.to_string()
    );

    // The registry gone: a runtime failure, nothing printed.
    drop(registry);
    let out = run_provider(&path, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("vGPGPU registry"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
