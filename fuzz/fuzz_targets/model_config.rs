//! `cder.toml`, the node config every cder binary reads (cderd, the hooks,
//! the SLURM plugin, the provider's inventory groups). A bad file must be
//! an error naming the key, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(config) = cder_model::Config::parse(text, std::path::Path::new("cder.toml")) {
        for device in config.cders.iter().flat_map(|c| c.static_devices()) {
            let _ = device.published_attributes("GPGPU");
        }
    }
});
