//! A node whose GPU is offered as MIG instances (`mig = "instances"`):
//! each MIG profile is its own kind of device, published as its own
//! ExecutionEnvironment whose counts are keyed by its own members. The
//! devices come from cder-inventory through nvml-wrapper, loading the fake
//! NVML library built in this workspace (no GPU or NVIDIA driver on CI).

use cder_fake_nvml::{FakeDevice, FakeMig, FakeMigInstance, FakeNvml};

fn gpu(i: u32) -> FakeDevice {
    FakeDevice { pci_bus_id: format!("0000:{:02x}:00.0", 0x1b + i * 0x20), ..FakeDevice::a100("0000000a", i, 81920) }
}

fn instance(n: u32, profile: &str, gi: u32, memory_mib: u64, multiprocessors: u32) -> FakeMigInstance {
    FakeMigInstance {
        uuid: format!("MIG-{n:08x}-1111-4222-8333-444444444444"),
        profile: profile.into(),
        gpu_instance: gi,
        compute_instance: 0,
        memory_mib,
        multiprocessors,
        slices: 1,
    }
}

#[test]
fn each_mig_profile_is_its_own_kind() {
    let _env = cder_testkit::env_lock();
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let machine = dir.path().join("machine.json");
    let instances = vec![
        instance(1, "3g.40gb", 2, 40192, 42),
        instance(2, "1g.10gb", 9, 9728, 14),
        instance(3, "1g.10gb", 10, 9728, 14),
    ];
    let mig = [FakeMig { device: 0, enabled: true, max_count: 7, instances: instances.clone() }];
    FakeNvml { devices: vec![gpu(0), gpu(1)], fail: vec![] }.write_with_mig(&mig, &machine).unwrap();
    std::env::set_var("CDER_FAKE_NVML", &machine);
    for (gi, cap) in [(2, 30), (9, 111), (10, 120)] {
        let at = dir.path().join(format!("caps/gpu0/mig/gi{gi}/ci0"));
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("access"), format!("DeviceFileMinor: {cap}\n")).unwrap();
    }
    let cder_toml = dir.path().join("cder.toml");
    std::fs::write(
        &cder_toml,
        format!(
            "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\nmig = \"instances\"\nmig_capabilities = {:?}\n",
            library.to_str().unwrap(),
            dir.path().join("caps").to_str().unwrap()
        ),
    )
    .unwrap();
    let provider = format!(
        "[site]\ncomputing_service_id = \"ce\"\ncomputing_manager_id = \"ce_m\"\nce_unique_id = \"ce:8443/cream-slurm-gpgpu\"\ncluster_id = \"ce\"\ncder_config = {:?}\n[counts]\nsource = \"cderd\"\n[[group]]\nid = \"a100\"\nnodes = [\"wn01\"]\ninventory = true\nplatform = \"amd64\"\nmain_memory_mib = 262144\nvirtual_memory_mib = 262144\nos_name = \"debian\"\nos_version = \"12\"\n",
        cder_toml.to_str().unwrap()
    );
    let config = cder_glue_provider::ProviderConfig::parse(&provider, &dir.path().join("glue-provider.toml")).unwrap();
    let groups = cder_glue_provider::site::node_groups(&config).unwrap();
    let classes = &groups[0].classes;
    let kinds: Vec<(&str, Option<&str>, u32, Vec<&str>)> = classes
        .iter()
        .map(|c| (c.key.as_str(), c.attribute("Model"), c.per_node, c.members.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (
                "gpgpu-NVIDIA-A100-SXM4-80GB-MIG-3g-40gb",
                Some("NVIDIA A100-SXM4-80GB MIG 3g.40gb"),
                1,
                vec![instances[0].uuid.as_str()]
            ),
            (
                "gpgpu-NVIDIA-A100-SXM4-80GB-MIG-1g-10gb",
                Some("NVIDIA A100-SXM4-80GB MIG 1g.10gb"),
                2,
                vec![instances[1].uuid.as_str(), instances[2].uuid.as_str()]
            ),
            ("gpgpu-NVIDIA-A100-SXM4-80GB", Some("NVIDIA A100-SXM4-80GB"), 1, vec![gpu(1).uuid.as_str()]),
        ],
        "{classes:#?}"
    );
    assert_eq!(classes[1].attribute("MainMemorySize"), Some("9728"));
    assert_eq!(classes[1].attribute("MP"), Some("14"));
    let ids: Vec<String> = groups[0].environments().into_iter().map(|e| e.id).collect();
    assert_eq!(
        ids,
        [
            "a100_gpgpu-NVIDIA-A100-SXM4-80GB-MIG-3g-40gb",
            "a100_gpgpu-NVIDIA-A100-SXM4-80GB-MIG-1g-10gb",
            "a100_gpgpu-NVIDIA-A100-SXM4-80GB"
        ]
    );

    // GLUE 2 in JSON: a MIG kind is logical accelerators only, which the
    // AcceleratorEnvironment schema allows (no counts: no cderd here).
    let snapshot = cder_glue_provider::sources::Snapshot {
        groups: groups.into_iter().map(|g| (g, Default::default())).collect(),
        virtual_environments: Vec::new(),
        shares: Vec::new(),
        created: 0,
    };
    let glue21 = [cder_glue_provider::strategy::Strategy::Glue21Accelerator];
    let entries = cder_glue_provider::strategy::render(&config, &snapshot, &glue21).unwrap();
    let doc = cder_glue_provider::json::render(&entries).unwrap();
    crate::json_schema::assert_valid(&doc, "MIG instances");
    let acc = doc["AcceleratorEnvironment"].as_array().unwrap();
    assert_eq!(acc.len(), 3, "{doc:#}");
    assert!(acc[1].get("PhysicalAccelerators").is_none(), "{doc:#}");
    assert_eq!(acc[1]["LogicalAccelerators"], 2);
    assert_eq!(acc[2]["PhysicalAccelerators"], 1);
}
