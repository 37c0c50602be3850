//! Static discovery: the `[[cder.device]]` entries of the config, as written.

use std::path::Path;

use cder_model::Config;

#[test]
fn static_devices_come_from_the_config_sorted_by_index() {
    let text = r#"
[[cder]]
name = "gpgpu"
vendor = "nvidia"
discovery = "static"

[[cder.device]]
index = 1
uuid = "GPU-b"
model = "GeForce GTS 450"
memory_mib = 1023
compute_capability = "2.1"
multiprocessors = 4
cores_per_mp = 48
clock_mhz = 1566
path = "/dev/nvidia1"
numa_node = 1

[[cder.device]]
index = 0
uuid = "GPU-a"
model = "GeForce GTS 450"
memory_mib = 1023
compute_capability = 2.1
multiprocessors = 4
cores_per_mp = 48
clock_mhz = 1566
path = "/dev/nvidia0"

[[cder]]
name = "fpga"
vendor = "xilinx"
discovery = "static"
visible_env = ["XILINX_VISIBLE_DEVICES"]
[[cder.device]]
index = 0
model = "Alveo U250"
memory_mib = 65536
path = "/dev/xclmgmt0"
health = "unhealthy"
"#;
    let config = Config::parse(text, Path::new("cder.toml")).unwrap();
    let devices = cder_inventory::discover(&config).unwrap();
    let summary: Vec<(String, u32, String, Option<u32>, u32)> = devices
        .iter()
        .map(|d| (d.cder_type.clone(), d.index, d.uuid.clone(), d.attributes.cores, d.numa_node))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("gpgpu".into(), 0, "GPU-a".into(), Some(192), 0),
            ("gpgpu".into(), 1, "GPU-b".into(), Some(192), 1),
            ("fpga".into(), 0, "fpga-0".into(), None, 0),
        ]
    );
    assert_eq!(devices[0].attributes.compute_capability.unwrap().to_string(), "2.1");
    assert_eq!(devices[2].vendor, "xilinx");
    assert_eq!(devices[2].health, cder_model::Health::Unhealthy);
}
