//! The seed thesis's ClassAd examples (chapter 3) parse, evaluate and match
//! as the thesis describes.

use cder_classad::{
    eval_expr_matching, matches, parse_classad, rank, symmetric_match, ClassAd, CompiledRequest, Value,
};
use cder_jdl::jdl::check;

fn load(name: &str) -> ClassAd {
    let path = format!("{}/tests/data/thesis/{name}", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap();
    parse_classad(&src).unwrap_or_else(|e| panic!("{path}:{e}"))
}

fn ad(src: &str) -> ClassAd {
    parse_classad(src).unwrap()
}

#[test]
fn named_queue_regexp_selects_queues_ending_in_gpgpu() {
    let job = load("listing_3_1_named_queue.jdl");
    assert!(matches!(job.eval_attr("InputSandbox"), Value::List(l) if l.len() == 1));
    let gpu_ce = ad(r#"[ GlueCEUniqueID = "ce01.grid.cs.tcd.ie:8443/cream-pbs-gpgpu" ]"#);
    let cpu_ce = ad(r#"[ GlueCEUniqueID = "ce01.grid.cs.tcd.ie:8443/cream-pbs-long" ]"#);
    let infix = ad(r#"[ GlueCEUniqueID = "ce01.grid.cs.tcd.ie:8443/cream-pbs-gpgpu-test" ]"#);
    let none = ad(r#"[ Other = 1 ]"#);
    assert!(matches(&job, &gpu_ce));
    assert!(!matches(&job, &cpu_ce));
    assert!(!matches(&job, &infix));
    // A CE that publishes no queue id: RegExp of undefined is undefined, so no match.
    assert!(!matches(&job, &none));
    let req = job.lookup("Requirements").unwrap();
    assert!(matches!(eval_expr_matching(req, &job, &none), Value::Undefined));
}

#[test]
fn tagged_environment_member_finds_the_kepler_tag() {
    let job = load("listing_3_3_tagged_environment.jdl");
    let kepler = ad(r#"[ GlueHostApplicationSoftwareRunTimeEnvironment = { "CUDA", "NVIDIA-KEPLER" } ]"#);
    let fermi = ad(r#"[ GlueHostApplicationSoftwareRunTimeEnvironment = { "CUDA", "NVIDIA-FERMI" } ]"#);
    // Member compares with ==, which ignores case, as HTCondor's does.
    let lower = ad(r#"[ GlueHostApplicationSoftwareRunTimeEnvironment = { "nvidia-kepler" } ]"#);
    assert!(matches(&job, &kepler));
    assert!(!matches(&job, &fermi));
    assert!(matches(&job, &lower));
}

#[test]
fn gpgpu_request_of_listing_3_10_matches_the_offer_of_listing_3_9() {
    let offer = load("listing_3_9_offer.ad");
    assert_eq!(offer.len(), 16);
    assert!(matches!(offer.eval_attr("GPGPUCUDAComputeCapability"), Value::Real(r) if r == 2.1));
    assert!(matches!(offer.eval_attr("GPGPUECCSupport"), Value::Bool(false)));
    let request = load("listing_3_10_request.jdl");
    // The thesis writes the offer's attributes unqualified: found through the matchmaking fallback.
    assert!(matches(&request, &offer));
    assert_eq!(rank(&request, &offer), 1.0);
    assert!(symmetric_match(&request, &offer));
    // The explicit other. form agrees.
    let explicit =
        ad(r#"[ Requirements = other.GPGPUVendor == "Nvidia" && (other.GPGPUMainMemorySize >= 512); Rank = 1 ]"#);
    assert!(matches(&explicit, &offer));

    let compiled = CompiledRequest::new(&request);
    for (vendor, mem, expect) in
        [("Nvidia", 1024, true), ("NVIDIA", 512, true), ("Nvidia", 511, false), ("AMD", 4096, false)]
    {
        let o = ad(&format!("[ GPGPUVendor = \"{vendor}\"; GPGPUMainMemorySize = {mem} ]"));
        assert_eq!(compiled.matches(&o), expect, "{vendor} {mem}");
        assert_eq!(matches(&explicit, &o), expect, "explicit other.: {vendor} {mem}");
    }
    // An offer without the attributes: undefined, so no match.
    assert!(!compiled.matches(&ad("[ Machine = \"x\" ]")));
}

#[test]
fn phase_two_jdl_of_listing_3_11_checks_clean_and_matches() {
    let path = format!("{}/tests/data/thesis/listing_3_11_phase2.jdl", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(path).unwrap();
    assert_eq!(check(&src), vec![]);
    let job = parse_classad(&src).unwrap();
    let ce = ad(r#"[ GlueCEUniqueID = "wn140.grid.cs.tcd.ie:8443/cream-pbs-gpgpu";
                    GlueHostApplicationSoftwareRunTimeEnvironment = { "CUDA", "NvidiaGPGPU" } ]"#);
    let other_ce = ad(r#"[ GlueCEUniqueID = "wn99.example.org:8443/cream-pbs-gpgpu";
                          GlueHostApplicationSoftwareRunTimeEnvironment = { "NvidiaGPGPU" } ]"#);
    assert!(matches(&job, &ce));
    assert!(!matches(&job, &other_ce));
}
