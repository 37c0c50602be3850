//! The gLite JDL / ClassAd parser, the checker behind `cder-jdl check`, and
//! the CE-side translation into LRMS directives (`cder-jdl lrms-attrs`):
//! all of it reads a user's job description. A parse error must be an
//! error, never a panic; an ad that parses must print as text that parses
//! again to the same printed form.
#![no_main]

use cder_jdl::resources::{directives, DirectiveDialect, JobResources, PbsGpus, Settings};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let _ = cder_jdl::jdl::check(src);
    let _ = cder_classad::parse_classads(src);
    let Ok(ad) = cder_classad::parse_classad(src) else { return };
    let printed = ad.to_string();
    let reparsed =
        cder_classad::parse_classad(&printed).unwrap_or_else(|e| panic!("printed ad {printed:?} does not parse: {e}"));
    assert_eq!(reparsed.to_string(), printed, "printing is not stable");
    if let Ok(resources) = JobResources::read(&ad) {
        for (lrms, pbs_gpus) in [
            (DirectiveDialect::Slurm, PbsGpus::Native),
            (DirectiveDialect::Pbs, PbsGpus::Native),
            (DirectiveDialect::Pbs, PbsGpus::Maui),
        ] {
            let settings = Settings { pbs_gpus, ..Settings::new(lrms) };
            let _ = directives(&resources, &settings);
        }
    }
});
