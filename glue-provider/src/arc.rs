//! ARC mode (`--arc-plugin`): cder's keys on a NorduGrid ARC CE's own
//! ExecutionEnvironments, as a BDII *plugin* of ARC's LDAP infosys.
//!
//! ARC's infosys (`nordugrid-arc-infosys-ldap`) publishes the CE's GLUE 2.0
//! tree itself (ComputingService, shares, endpoints, one EE per node type
//! under the manager). `bdii-update` runs each executable in its plugin
//! directory after the providers and applies `changetype: modify` records
//! to the providers' entries before loading them, so the plugin adds
//! `GLUE2EntityOtherInfo: GPGPU…=…` to ARC's EE in place: ARC's share
//! already names that EE, and phase 1 offers it with the CE's REST endpoint
//! as the CE ID (docs/arc.md). The keys are the attribute-extension
//! strategy's, the same rendering as every other site.

use crate::config::ProviderConfig;
use crate::error::ProviderError;
use crate::ldif::{self, Entry};
use crate::strategy::{self, Snapshot, Strategy};

/// Where ARC 6 roots its GLUE 2.0 tree (its slapd relays
/// `GLUE2GroupID=resource,o=glue` to it for readers).
pub const ARC_GLUE2_SUFFIX: &str = "GLUE2GroupID=services,o=glue";

/// The DN ARC's infosys gives the ExecutionEnvironment `ee_id` of the
/// manager and service in `config` (ARC puts EEs under the manager).
pub fn arc_ee_dn(config: &ProviderConfig, ee_id: &str) -> String {
    let site = &config.site;
    format!(
        "GLUE2ResourceID={ee_id},GLUE2GroupID=ExecutionEnvironments,GLUE2ManagerID={},GLUE2ServiceID={},{ARC_GLUE2_SUFFIX}",
        site.computing_manager_id.get_ref(),
        site.computing_service_id.get_ref()
    )
}

/// The plugin's LDIF: one modify record per group adding its CDER keys to
/// ARC's EE of the same ID. Each `[[group]] id` must be the ID ARC gives
/// the EE (`urn:ogf:ExecutionEnvironment:<host>:<name>`), and a group must
/// hold one kind of device (ARC has one EE for it, not one per kind).
pub fn plugin_ldif(config: &ProviderConfig, snapshot: &Snapshot) -> Result<String, ProviderError> {
    let entries = strategy::render_entries(config, snapshot, &[Strategy::AttributeExtension], false)?;
    let mut out = Vec::new();
    for e in &entries {
        if !e.values("objectClass").any(|c| c.eq_ignore_ascii_case("GLUE2ExecutionEnvironment")) {
            continue;
        }
        let id = e.values("GLUE2ResourceID").next().unwrap_or_default();
        if !config.groups.iter().any(|g| g.id.get_ref() == id) {
            return Err(ProviderError::Input(format!(
                "--arc-plugin: the EE {id:?} is not a [[group]] id: a group with several kinds of device becomes one EE per kind, which ARC's infosys does not have; split the group"
            )));
        }
        let mut m = Entry::new(arc_ee_dn(config, id));
        m.push("changetype", "modify").push("add", "GLUE2EntityOtherInfo");
        for v in e.values("GLUE2EntityOtherInfo") {
            m.push("GLUE2EntityOtherInfo", v);
        }
        out.push(m);
    }
    Ok(ldif::write(&out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::SAMPLE;
    use crate::sources::StaticVirtual;
    use std::path::Path;

    fn arc_text() -> String {
        SAMPLE
            .replace("ce.example.org_ComputingElement_Manager", "urn:ogf:ComputingManager:arc.example.org:slurm")
            .replace("ce.example.org_ComputingElement", "urn:ogf:ComputingService:arc.example.org:arex")
            .replace("ce.example.org_gts450", "urn:ogf:ExecutionEnvironment:arc.example.org:execenv0")
    }

    fn arc_config(extra: &str) -> ProviderConfig {
        ProviderConfig::parse(&format!("{}{extra}", arc_text()), Path::new("t.toml")).unwrap()
    }

    #[test]
    fn an_amd_ee_gets_its_vendor_and_architecture() {
        let text = arc_text()
            .replace(
                "model = \"GeForce GTS 450\"",
                "model = \"AMD Instinct MI210\"\nvendor = \"amd\"\narchitecture = \"gfx90a\"",
            )
            .replace("compute_capability = \"2.1\"\n", "");
        let config = ProviderConfig::parse(&text, Path::new("t.toml")).unwrap();
        let counts = crate::sources::from_config(&config);
        let snap = crate::snapshot(&config, counts.as_ref(), &StaticVirtual::from_config(&[]), 1_700_000_000).unwrap();
        let records = ldif::parse(&plugin_ldif(&config, &snap).unwrap()).unwrap();
        let info: Vec<&str> = records[0].values("GLUE2EntityOtherInfo").collect();
        for kv in
            ["GPGPUVendor=AMD", "GPGPUModel=AMD Instinct MI210", "GPGPUArchitecture=gfx90a", "GPGPUFreeInstances=30"]
        {
            assert!(info.contains(&kv), "{kv} missing: {info:?}");
        }
        assert!(!info.iter().any(|v| v.contains("CUDA")), "{info:?}");
    }

    #[test]
    fn keys_become_a_modify_of_arcs_own_ee() {
        let config = arc_config("");
        let counts = crate::sources::from_config(&config);
        let snap = crate::snapshot(&config, counts.as_ref(), &StaticVirtual::from_config(&[]), 1_700_000_000).unwrap();
        let text = plugin_ldif(&config, &snap).unwrap();
        let records = ldif::parse(&text).unwrap();
        assert_eq!(records.len(), 1, "{text}");
        let r = &records[0];
        assert_eq!(
            r.dn,
            "GLUE2ResourceID=urn:ogf:ExecutionEnvironment:arc.example.org:execenv0,GLUE2GroupID=ExecutionEnvironments,\
             GLUE2ManagerID=urn:ogf:ComputingManager:arc.example.org:slurm,GLUE2ServiceID=urn:ogf:ComputingService:arc.example.org:arex,GLUE2GroupID=services,o=glue"
        );
        assert_eq!(r.values("changetype").collect::<Vec<_>>(), ["modify"]);
        assert_eq!(r.values("add").collect::<Vec<_>>(), ["GLUE2EntityOtherInfo"]);
        let info: Vec<&str> = r.values("GLUE2EntityOtherInfo").collect();
        // 16 nodes × 2 devices, 2 used: the same keys the attribute-extension strategy writes.
        for kv in [
            "GPGPUTotalInstances=32",
            "GPGPUUsedInstances=2",
            "GPGPUFreeInstances=30",
            "GPGPUPerNode=2",
            "GPGPUModel=GeForce GTS 450",
        ] {
            assert!(info.contains(&kv), "{kv} missing: {info:?}");
        }
        // Nothing else: ARC's entry keeps its own attributes.
        assert_eq!(r.attributes.len(), 2 + info.len());
    }

    #[test]
    fn a_group_of_several_kinds_is_refused() {
        let config = arc_config("\n[[group.device]]\nmodel = \"Tesla T4\"\ncount = 1\nmemory_mib = 16000\nused = 0\n");
        let counts = crate::sources::from_config(&config);
        let snap = crate::snapshot(&config, counts.as_ref(), &StaticVirtual::from_config(&[]), 1_700_000_000).unwrap();
        let e = plugin_ldif(&config, &snap).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("split the group"), "{e}");
    }
}
