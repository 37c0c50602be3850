//! The harness's slapd can hold a real grid's worth of GLUE entries when
//! asked: Debian's BDII config leaves each mdb database at the 10 MiB
//! default map size, and `ldapadd` then fails ("txn_commit failed" / "MDB_MAP_FULL");
//! `SlapdOptions::maxsize` raises it, so list-match can be measured on 10^5
//! entities.

use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};

/// `n` GLUE2Extension entries under one ComputingService, ~300 bytes each.
fn extensions(n: usize) -> String {
    let mut ldif = String::from(
        "dn: GLUE2ServiceID=ce.example.org_ComputingElement,GLUE2GroupID=resource,o=glue\nobjectClass: GLUE2Service\nobjectClass: GLUE2ComputingService\n\
         GLUE2ServiceID: ce.example.org_ComputingElement\nGLUE2ServiceType: org.glite.ce.CREAM\nGLUE2ServiceQualityLevel: production\nGLUE2ServiceAdminDomainForeignKey: EXAMPLE\n\n",
    );
    for i in 0..n {
        ldif.push_str(&format!(
            "dn: GLUE2ExtensionLocalID=GPGPUFreeInstances-{i:06},GLUE2ServiceID=ce.example.org_ComputingElement,GLUE2GroupID=resource,o=glue\n\
             objectClass: GLUE2Extension\nGLUE2ExtensionLocalID: GPGPUFreeInstances-{i:06}\nGLUE2ExtensionKey: GPGPUFreeInstances\n\
             GLUE2ExtensionValue: {}\nGLUE2ExtensionEntityForeignKey: ce.example.org_ee{:05}\n\n",
            i % 97,
            i / 14
        ));
    }
    ldif
}

#[test]
fn default_map_size_fills_and_raised_maxsize_holds() {
    if !require_slapd() {
        return;
    }
    let ldif = extensions(40_000);

    let small = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    small.add_base_entries().unwrap();
    let err = small.add(&ldif).expect_err("40,000 entries should not fit Debian's default 10 MiB map");
    assert!(
        err.contains("txn_commit failed")
            || err.contains("MDB_MAP_FULL")
            || err.contains("Other (e.g., implementation specific) error"),
        "{err}"
    );
    drop(small);

    let big =
        Slapd::start(&SlapdOptions { maxsize: Some(1 << 30), ..Default::default() }).unwrap_or_else(|e| panic!("{e}"));
    big.add_base_entries().unwrap();
    big.add(&ldif).unwrap_or_else(|e| panic!("{}", &e[..e.len().min(2000)]));
    let count =
        big.search("o=glue", "(GLUE2ExtensionKey=GPGPUFreeInstances)", &["1.1"]).unwrap().matches("dn:").count();
    assert_eq!(count, 40_000);
}
