//! `/etc/cder/glue-provider.toml` through the whole provider with counts
//! written in the config (`counts.source = "static"`): parse, validate,
//! expand the host lists, count, render every strategy, write LDIF. A bad
//! file must be an error naming the key (no panic, no overflow); a good
//! one must publish LDIF that reads back with the entries it wrote.
#![no_main]

use cder_glue_provider::config::CountSourceKind;
use cder_glue_provider::sources::{ConfiguredCounts, StaticVirtual};
use cder_glue_provider::strategy::Strategy;
use cder_glue_provider::{ldif, publish, ProviderConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(config) = ProviderConfig::parse(text, std::path::Path::new("glue-provider.toml")) else { return };
    // Inventory groups read this machine's cder.toml and NVML: not input here.
    if *config.counts.source.get_ref() != CountSourceKind::Static || config.groups.iter().any(|g| g.inventory) {
        return;
    }
    let vgpus = StaticVirtual::from_config(&config.virtual_environments);
    let all = [Strategy::AttributeExtension, Strategy::ClassExtension, Strategy::Hybrid, Strategy::TaggedEnvironment];
    if let Ok(text) = publish(&config, &ConfiguredCounts, &vgpus, &all, 1_795_291_140) {
        let entries =
            ldif::parse(&text).unwrap_or_else(|e| panic!("the provider wrote LDIF it cannot read: {e}\n{text}"));
        assert!(!entries.is_empty(), "published nothing");
    }
});
