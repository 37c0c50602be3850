//! What pbs_mom hands the prologue: the job's resource-limit argument
//! (`nodes=2:ppn=4:gpus=2,walltime=…`), which the job's owner wrote at
//! submit time, read by `cder_torque::limits`; and `/etc/cder/torque.toml`.
//! A count must be a count or a refusal that names the resource.
#![no_main]

use cder_torque::limits::{requested_devices, Role};
use cder_torque::settings::{Directive, TorqueSettings};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Both directive forms: each honours a different part of the list.
    for directive in [Directive::Native, Directive::Maui] {
        let settings = TorqueSettings { directive, ..TorqueSettings::default() };
        for role in [Role::MotherSuperior, Role::Sister] {
            let _ = requested_devices(text, role, &settings);
        }
    }
    let _ = TorqueSettings::parse(text, std::path::Path::new("torque.toml"));
});
