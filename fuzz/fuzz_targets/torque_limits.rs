//! What pbs_mom hands the prologue: the job's resource-limit argument
//! (`nodes=2:ppn=4:gpus=2,walltime=…`), which the job's owner wrote at
//! submit time, read by `cder_torque::limits`; and `/etc/cder/torque.toml`.
//! A count must be a count or a refusal that names the resource.
#![no_main]

use cder_torque::limits::{requested_devices, Role};
use cder_torque::settings::TorqueSettings;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let gres = ["gpus".to_string(), "gpgpu".to_string()];
    for role in [Role::MotherSuperior, Role::Sister] {
        let _ = requested_devices(text, role, "gpgpu", &gres);
    }
    let _ = TorqueSettings::parse(text, std::path::Path::new("torque.toml"));
});
