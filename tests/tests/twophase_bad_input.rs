//! Phase 1 with hostile or broken input, against a real slapd (BDII
//! config, GLUE schemas): LDAP filter metacharacters in a JDL cannot widen
//! the query; a BDII that is down or never answers gives an error naming
//! its URL; entries with malformed CDER data are skipped with a warning.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use cder_jdl::bdii::{build_offers, Bdii, QueryOptions, Wanted};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{cder_jdl, ce, gpu_sites, grid_ldif, index_env, plain_site_ldif, provider, VO};

fn list_match(bdii: &str, extra: &[&str], jdl: &str, dir: &Path) -> Output {
    let path = dir.join("job.jdl");
    std::fs::write(&path, jdl).unwrap();
    let mut child = Command::new(cder_jdl())
        .envs(index_env(dir))
        .args(["list-match", "--bdii", bdii, "--json"])
        .args(extra)
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running cder-jdl");
    // A guard against a hang, not a timing assertion: the tool's own timeouts are seconds.
    for _ in 0..1200 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

fn matched(out: &Output) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::json!({"matches": []}));
    v["matches"].as_array().unwrap().iter().map(|m| m["ce"].as_str().unwrap().to_string()).collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn ldap_metacharacters_in_the_jdl_cannot_widen_the_query() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ldif =
        grid_ldif(&provider(), &gpu_sites(), &["attribute-extension", "class-extension"], 1, dir.path()).unwrap();
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    let url = slapd.url();
    let d = dir.path();

    // The honest request matches ce-a and ce-b.
    let honest = list_match(&url, &[], &format!("[ VirtualOrganisation = \"{VO}\"; Requirements = GPGPUMainMemorySize >= 1024 && GPGPUVendor == \"Nvidia\" ]"), d);
    let honest_set: std::collections::BTreeSet<String> = matched(&honest).into_iter().collect();
    assert_eq!(honest_set, [ce(0, "gpu"), ce(1, "gpgpu")].into_iter().collect(), "{}", stderr(&honest));

    // A VO of "*", or one that closes the filter and opens another, would match every
    // share's policy if it reached the filter unescaped (--live) or were taken as a
    // pattern (the index); escaped and compared whole, it matches none.
    for (vo, path) in ["*", "gputest*", "*)(GLUE2PolicyRule=*", "gputestvo)(|(objectClass=*", "\\2a", "gputestvo\\"]
        .into_iter()
        .flat_map(|vo| [(vo, &[][..]), (vo, &["--live"][..])])
    {
        let jdl = format!(
            "[ VirtualOrganisation = \"{}\"; Requirements = GPGPUMainMemorySize >= 1024 ]",
            vo.replace('\\', "\\\\")
        );
        let out = list_match(&url, path, &jdl, d);
        assert_eq!(
            out.status.code(),
            Some(1),
            "VO {vo:?} {path:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
        assert!(matched(&out).is_empty(), "VO {vo:?} {path:?} widened the query: {:?}", matched(&out));
        assert!(!stderr(&out).contains("failed"), "VO {vo:?} {path:?} broke the filter: {}", stderr(&out));
    }
    // Attribute names taken from the job, with metacharacters, find nothing and break nothing.
    for (key, path) in ["GPGPU*", "GPGPU*)(objectClass=*", "GPGPU(x)\\\\"]
        .into_iter()
        .flat_map(|k| [(k, &[][..]), (k, &["--live"][..])])
    {
        let jdl = format!("[ VirtualOrganisation = \"{VO}\"; Requirements = other.'{key}' =!= undefined ]");
        let out = list_match(&url, path, &jdl, d);
        assert_eq!(out.status.code(), Some(1), "key {key:?}: {}", stderr(&out));
        assert!(
            matched(&out).is_empty() && !stderr(&out).contains("failed"),
            "key {key:?}: {:?} {}",
            matched(&out),
            stderr(&out)
        );
    }
    // NUL cannot be written in a JDL string at all (a bad-input error with its position) …
    let out = list_match(&url, &[], "[ VirtualOrganisation = \"gpu\\000testvo\" ]", d);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("job.jdl:1:"), "{}", stderr(&out));
    // … and through the library it is escaped like the rest.
    let mut bdii = Bdii::connect(&QueryOptions::new(&url)).unwrap();
    let wanted = Wanted {
        keys: ["GPGPUVendor".to_string()].into(),
        prefixes: ["GPGPU".to_string()].into(),
        vo: Some("gputestvo\0*".into()),
        vgpgpu: false,
        names: None,
    };
    let snap = bdii.fetch(&wanted).unwrap();
    assert_eq!(snap.policies.as_ref().map(Vec::len), Some(0));
    // What the server returns (before any filtering in memory): a wildcard VO gets no policy.
    for (vo, some) in [("*", false), ("gputest*", false), ("*)(GLUE2PolicyRule=*", false), (VO, true)] {
        let snap = bdii.fetch(&Wanted { vo: Some(vo.into()), ..wanted.clone() }).unwrap();
        let n = snap.policies.as_ref().map(Vec::len).unwrap_or(0);
        assert_eq!(n > 0, some, "VO {vo:?} fetched {n} policies");
    }
    assert!(build_offers(&snap, &["GPGPU".to_string()], wanted.vo.as_deref()).offers.is_empty());
}

#[test]
fn a_bdii_that_is_down_or_silent_gives_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let jdl = "[ Requirements = GPGPUVendor == \"Nvidia\" ]";
    // Down: a port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("ldap://127.0.0.1:{port}");
    let out = list_match(&url, &[], jdl, dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&url) && stderr(&out).contains("unreachable"), "{}", stderr(&out));
    // Slow: accepts the connection and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ldap://127.0.0.1:{}", silent.local_addr().unwrap().port());
    let out = list_match(&url, &["--timeout", "1"], jdl, dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&url) && stderr(&out).contains("timed out"), "{}", stderr(&out));
    drop(silent);
    // The default BDII comes from LCG_GFAL_INFOSYS, as in gLite (host:port form).
    let path = dir.path().join("j.jdl");
    std::fs::write(&path, jdl).unwrap();
    let out = Command::new(cder_jdl())
        .envs(index_env(dir.path()))
        .args(["list-match"])
        .arg(&path)
        .env("LCG_GFAL_INFOSYS", format!("127.0.0.1:{port},other:2170"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&format!("ldap://127.0.0.1:{port}")), "{}", stderr(&out));
    let out = Command::new(cder_jdl()).args(["list-match"]).arg(&path).env_remove("LCG_GFAL_INFOSYS").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "no BDII at all is a usage error");
    // A URL that cannot name a BDII is bad input too, and named.
    for bad in
        ["ldap://127.0.0.1:notaport", "ldap://127.0.0.1:99999", "ldaps://127.0.0.1:2170", "http://127.0.0.1:2170"]
    {
        let out = list_match(bad, &[], jdl, dir.path());
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains(bad) && stderr(&out).contains("not an LDAP URL"), "{}", stderr(&out));
    }
}

/// A site whose EE carries `other_info` in place of its plain OtherInfo.
fn site_with(host: &str, other_info: &[&str]) -> String {
    let lines: String = other_info.iter().map(|v| format!("GLUE2EntityOtherInfo: {v}\n")).collect();
    plain_site_ldif(host).replace("GLUE2EntityOtherInfo: SmpSize=8\n", &lines)
}

#[test]
fn malformed_other_info_is_skipped_with_a_warning() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    let good = ["GPGPUVendor=Nvidia", "GPGPUMainMemorySize=4096", "GPGPUPerNode=2"];
    let mut ldif = site_with("good.example.org", &good);
    ldif.push_str(&site_with("noequals.example.org", &["GPGPUVendor=Nvidia", "GPGPUMainMemorySize"]));
    ldif.push_str(&site_with(
        "dup.example.org",
        &["GPGPUVendor=Nvidia", "GPGPUMainMemorySize=4096", "GPGPUMainMemorySize=8192"],
    ));
    ldif.push_str(&site_with("nan.example.org", &["GPGPUVendor=Nvidia", "GPGPUMainMemorySize=lots"]));
    ldif.push_str(&site_with("inf.example.org", &["GPGPUVendor=Nvidia", "GPGPUMainMemorySize=1e999"]));
    // A Class-Extension value that is not a number.
    ldif.push_str(&site_with("ext.example.org", &["GPGPUVendor=Nvidia"]));
    ldif.push_str(
        "dn: GLUE2ExtensionLocalID=GPGPUMainMemorySize,GLUE2ResourceID=ext.example.org_wn,GLUE2ServiceID=ext.example.org_ComputingElement,GLUE2GroupID=resource,o=glue\n\
         objectClass: GLUE2Extension\nGLUE2ExtensionLocalID: GPGPUMainMemorySize\nGLUE2ExtensionKey: GPGPUMainMemorySize\nGLUE2ExtensionValue: 4GB\n\
         GLUE2ExtensionEntityForeignKey: ext.example.org_wn\n\n",
    );
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    let out = list_match(
        &slapd.url(),
        &["--vo", VO],
        "[ Requirements = GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 1024 ]",
        dir.path(),
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(matched(&out).len(), 2, "the good site's two queues: {:?}\n{err}", matched(&out));
    assert!(matched(&out).iter().all(|c| c.starts_with("good.example.org")), "{:?}", matched(&out));
    for (host, why) in [
        ("noequals", "has no '='"),
        ("dup", "given twice"),
        ("nan", "not a number"),
        ("inf", "not a number"),
        ("ext", "not a number"),
    ] {
        assert!(
            err.lines().any(|l| l.contains("WARN") && l.contains(&format!("{host}.example.org_wn")) && l.contains(why)),
            "no warning for {host} ({why}):\n{err}"
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["warnings"].as_array().unwrap().len(), 5, "{v}");
}
