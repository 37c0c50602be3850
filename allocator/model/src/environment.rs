//! The environment that makes a job's devices, and only those, visible.

use std::collections::BTreeMap;

use crate::config::{CderType, VendorKind, VisibleIds};
use crate::device::{is_mig_uuid, ze_affinity, Device};

/// One device a job holds, by the names the environment needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldDevice<'a> {
    /// Its CDER type.
    pub cder_type: &'a str,
    /// The node's index (PCI bus order for NVIDIA).
    pub index: u32,
    /// Its UUID.
    pub uuid: &'a str,
}

impl<'a> From<&'a Device> for HeldDevice<'a> {
    fn from(d: &'a Device) -> Self {
        HeldDevice { cder_type: &d.cder_type, index: d.index, uuid: &d.uuid }
    }
}

/// The device cgroup a job's processes run in. The vendor runtimes number
/// only the devices a process can open, so this decides the numbering.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceCgroup {
    /// None: every device of the node opens, so indices are the node's.
    #[default]
    None,
    /// The job's (cder's `confine`): the job's devices open, numbered from 0.
    Job,
    /// The step's (SLURM's ConstrainDevices): the step's devices open,
    /// numbered from 0.
    Step,
}

/// Variables to set in a job, in a stable (sorted) order.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct JobEnvironment(pub BTreeMap<String, String>);

impl JobEnvironment {
    /// The environment for a job holding `devices`, for every configured
    /// type. A type the job holds nothing of still gets its variables, set
    /// to the empty list: an unset `CUDA_VISIBLE_DEVICES` means "all".
    /// Indices are the node's (absolute, PCI bus order): right for a job
    /// that can open every device file of the node.
    pub fn for_devices(types: &[CderType], devices: &[Device]) -> JobEnvironment {
        let held: Vec<HeldDevice<'_>> = devices.iter().map(HeldDevice::from).collect();
        Self::for_held(types, &held, false)
    }

    /// The environment for a job whose processes run inside a device cgroup
    /// (cder's own `confine`, or SLURM's ConstrainDevices): the vendor
    /// runtime enumerates only the devices the job can open, numbered from
    /// 0, so each type's list is `0..n-1` in the job's device order (by node
    /// index), or the UUIDs where the type is configured for UUIDs.
    pub fn for_devices_relative(types: &[CderType], devices: &[Device]) -> JobEnvironment {
        let held: Vec<HeldDevice<'_>> = devices.iter().map(HeldDevice::from).collect();
        Self::for_held(types, &held, true)
    }

    /// [`for_devices`](Self::for_devices) / [`for_devices_relative`](Self::for_devices_relative)
    /// from just type, index and UUID: what a client of cderd has in hand
    /// (the protocol's allocated devices) without the full [`Device`].
    pub fn for_held(types: &[CderType], held: &[HeldDevice<'_>], relative: bool) -> JobEnvironment {
        Self::build(types, held, held, if relative { DeviceCgroup::Job } else { DeviceCgroup::None })
    }

    /// The environment of a step that uses `step`, some of its job's
    /// devices `job`, with its processes in `cgroup`: the step's devices
    /// only, numbered among those the processes can open.
    pub fn for_step(
        types: &[CderType],
        job: &[HeldDevice<'_>],
        step: &[HeldDevice<'_>],
        cgroup: DeviceCgroup,
    ) -> JobEnvironment {
        Self::build(types, job, step, cgroup)
    }

    fn build(
        types: &[CderType],
        job: &[HeldDevice<'_>],
        visible: &[HeldDevice<'_>],
        cgroup: DeviceCgroup,
    ) -> JobEnvironment {
        let mut env = BTreeMap::new();
        for cder in types {
            fn of_type<'a>(list: &[HeldDevice<'a>], name: &str) -> Vec<HeldDevice<'a>> {
                let mut mine: Vec<HeldDevice<'a>> = list.iter().filter(|d| d.cder_type == name).copied().collect();
                mine.sort_by_key(|d| d.index);
                mine
            }
            let mine = of_type(visible, cder.name());
            // Relative positions count whole GPUs only: a MIG instance is
            // named by UUID and takes no runtime index of its own, and a
            // Level Zero tile counts as its GPU (the loader's number).
            let affinity = |uuid: &str| if cder.vendor == VendorKind::Intel { ze_affinity(uuid) } else { None };
            let runtime_gpu = |d: &HeldDevice<'_>| affinity(d.uuid).map_or(d.index, |(gpu, _)| gpu);
            let mut openable: Vec<u32> = match cgroup {
                DeviceCgroup::None => Vec::new(),
                DeviceCgroup::Job => {
                    of_type(job, cder.name()).iter().filter(|d| !is_mig_uuid(d.uuid)).map(runtime_gpu).collect()
                }
                DeviceCgroup::Step => mine.iter().filter(|d| !is_mig_uuid(d.uuid)).map(runtime_gpu).collect(),
            };
            openable.sort_unstable();
            openable.dedup();
            let list = mine
                .iter()
                .map(|d| match (cder.visible_ids, cgroup) {
                    // The CUDA runtime selects a MIG instance only by its
                    // UUID: an index names the whole parent GPU.
                    _ if is_mig_uuid(d.uuid) => d.uuid.to_string(),
                    // ZE_AFFINITY_MASK takes `GPU[.tile]`, never a UUID.
                    _ if affinity(d.uuid).is_some() => {
                        let (gpu, tile) = affinity(d.uuid).unwrap_or((d.index, None));
                        let gpu = match cgroup {
                            DeviceCgroup::None => gpu,
                            _ => openable.iter().position(|&g| g == gpu).unwrap_or(0) as u32,
                        };
                        tile.map_or(gpu.to_string(), |t| format!("{gpu}.{t}"))
                    }
                    (VisibleIds::Index, DeviceCgroup::None) => d.index.to_string(),
                    (VisibleIds::Index, _) => openable.iter().position(|&i| i == d.index).unwrap_or(0).to_string(),
                    (VisibleIds::Uuid, _) => d.uuid.to_string(),
                })
                .collect::<Vec<_>>()
                .join(",");
            for var in cder.visible_env() {
                env.insert(var, list.clone());
            }
            env.extend(cder.extra_env());
        }
        JobEnvironment(env)
    }

    /// The empty visible list for every type: what a job that asked for
    /// nothing, or that runs `fail=open` without cderd, gets.
    pub fn empty(types: &[CderType]) -> JobEnvironment {
        Self::for_devices(types, &[])
    }

    /// The value of one variable, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// `KEY=VALUE` lines, as `cderctl alloc` prints them.
    pub fn to_lines(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use std::path::Path;

    fn config() -> Config {
        Config::parse(
            r#"
[[cder]]
name = "gpgpu"
vendor = "nvidia"
discovery = "static"
[[cder.device]]
index = 0
model = "A"
memory_mib = 1
path = "/dev/nvidia0"
[[cder.device]]
index = 1
model = "A"
memory_mib = 1
path = "/dev/nvidia1"
[[cder.device]]
index = 3
uuid = "GPU-3"
model = "A"
memory_mib = 1
path = "/dev/nvidia3"
[[cder]]
name = "amdgpu"
vendor = "amd"
discovery = "static"
"#,
            Path::new("t.toml"),
        )
        .unwrap()
    }

    #[test]
    fn nvidia_indices_in_order_with_pci_order() {
        let c = config();
        let devs = c.cders[0].static_devices();
        let env = JobEnvironment::for_devices(&c.cders, &[devs[2].clone(), devs[1].clone()]);
        assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), Some("1,3"));
        assert_eq!(env.get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        // The AMD type is configured but not held: its twins are empty, not absent.
        assert_eq!(env.get("ROCR_VISIBLE_DEVICES"), Some(""));
        assert_eq!(env.get("HIP_VISIBLE_DEVICES"), Some(""));
        assert_eq!(env.get("GPU_DEVICE_ORDINAL"), Some(""));
        assert_eq!(env.to_lines().lines().next(), Some("CUDA_DEVICE_ORDER=PCI_BUS_ID"));
    }

    #[test]
    fn level_zero_tiles_are_named_as_ze_affinity_mask_writes_them() {
        let c = Config::parse(
            "[[cder]]\nname = \"xe\"\nvendor = \"intel\"\ndiscovery = \"level-zero\"\ntiles = \"tiles\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        // GPU 0 has two tiles (indices 0, 1), GPU 1 has none (index 2), GPU 2 two tiles (3, 4).
        let held = |index, uuid| HeldDevice { cder_type: "xe", index, uuid };
        let job = [held(1, "GPU-a1@0.1"), held(2, "GPU-b@1"), held(4, "GPU-c1@2.1")];
        let absolute = JobEnvironment::for_held(&c.cders, &job, false);
        assert_eq!(absolute.get("ZE_AFFINITY_MASK"), Some("0.1,1,2.1"));
        // In the job's device cgroup the loader numbers the GPUs it can open from 0.
        let relative = JobEnvironment::for_held(&c.cders, &job, true);
        assert_eq!(relative.get("ZE_AFFINITY_MASK"), Some("0.1,1,2.1"));
        let step = JobEnvironment::for_step(&c.cders, &job, &job[2..], DeviceCgroup::Step);
        assert_eq!(step.get("ZE_AFFINITY_MASK"), Some("0.1"));
        let two_tiles = [held(3, "GPU-c0@2.0"), held(4, "GPU-c1@2.1")];
        let env = JobEnvironment::for_held(&c.cders, &two_tiles, true);
        assert_eq!(env.get("ZE_AFFINITY_MASK"), Some("0.0,0.1"));
        assert_eq!(ze_affinity("GPU-8680@10.3"), Some((10, Some(3))));
        assert_eq!(ze_affinity("GPU-8680"), None);
        assert_eq!(ze_affinity("fpga-0"), None);
    }

    #[test]
    fn no_devices_means_empty_never_all() {
        let c = config();
        let env = JobEnvironment::empty(&c.cders);
        assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), Some(""));
    }

    #[test]
    fn relative_indices_count_from_zero_in_node_order() {
        let c = config();
        let devs = c.cders[0].static_devices();
        // Held: node indices 3 and 1 (given out of order).
        let env = JobEnvironment::for_devices_relative(&c.cders, &[devs[2].clone(), devs[1].clone()]);
        assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), Some("0,1"));
        assert_eq!(env.get("ROCR_VISIBLE_DEVICES"), Some(""));
        let one = JobEnvironment::for_devices_relative(&c.cders, &[devs[2].clone()]);
        assert_eq!(one.get("CUDA_VISIBLE_DEVICES"), Some("0"));
        assert_eq!(JobEnvironment::for_devices_relative(&c.cders, &[]).get("CUDA_VISIBLE_DEVICES"), Some(""));
        let held = [HeldDevice { cder_type: "gpgpu", index: 3, uuid: "GPU-3" }];
        assert_eq!(JobEnvironment::for_held(&c.cders, &held, false).get("CUDA_VISIBLE_DEVICES"), Some("3"));
        assert_eq!(JobEnvironment::for_held(&c.cders, &held, true).get("CUDA_VISIBLE_DEVICES"), Some("0"));
    }

    #[test]
    fn mig_instances_are_named_by_uuid_even_with_indices() {
        let c = config();
        let held = [
            HeldDevice { cder_type: "gpgpu", index: 3, uuid: "GPU-3" },
            HeldDevice { cder_type: "gpgpu", index: 5, uuid: "MIG-5c0b7a3e-0000-4000-8000-000000000005" },
        ];
        for relative in [false, true] {
            let env = JobEnvironment::for_held(&c.cders, &held, relative);
            let first = if relative { "0" } else { "3" };
            assert_eq!(env.0["CUDA_VISIBLE_DEVICES"], format!("{first},MIG-5c0b7a3e-0000-4000-8000-000000000005"));
        }
    }

    #[test]
    fn relative_with_uuids_keeps_uuids() {
        let mut c = config();
        c.cders[0].visible_ids = VisibleIds::Uuid;
        let devs = c.cders[0].static_devices();
        let env = JobEnvironment::for_devices_relative(&c.cders, &[devs[0].clone(), devs[2].clone()]);
        assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), Some("gpgpu-0,GPU-3"));
    }

    #[test]
    fn a_step_sees_its_devices_numbered_among_what_it_can_open() {
        let c = config();
        let job = [
            HeldDevice { cder_type: "gpgpu", index: 1, uuid: "GPU-1" },
            HeldDevice { cder_type: "gpgpu", index: 3, uuid: "GPU-3" },
        ];
        let cvd = |step: &[HeldDevice<'_>], cgroup| {
            JobEnvironment::for_step(&c.cders, &job, step, cgroup).0["CUDA_VISIBLE_DEVICES"].clone()
        };
        assert_eq!(cvd(&job, DeviceCgroup::None), "1,3");
        assert_eq!(cvd(&job, DeviceCgroup::Job), "0,1");
        assert_eq!(cvd(&job, DeviceCgroup::Step), "0,1");
        // A step of GPU 3 only: SLURM's step cgroup opens just that one;
        // cder's job cgroup opens both, where 3 is the second.
        let three = &job[1..];
        assert_eq!(cvd(three, DeviceCgroup::Step), "0");
        assert_eq!(cvd(three, DeviceCgroup::Job), "1");
        assert_eq!(cvd(three, DeviceCgroup::None), "3");
        assert_eq!(cvd(&[], DeviceCgroup::Job), "");
        let env = JobEnvironment::for_step(&c.cders, &job, three, DeviceCgroup::Job);
        assert_eq!(env.get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        let mut by_uuid = config();
        by_uuid.cders[0].visible_ids = VisibleIds::Uuid;
        assert_eq!(
            JobEnvironment::for_step(&by_uuid.cders, &job, three, DeviceCgroup::Step).get("CUDA_VISIBLE_DEVICES"),
            Some("GPU-3")
        );
    }

    #[test]
    fn device_cgroups_on_the_wire() {
        assert_eq!(serde_json::to_string(&DeviceCgroup::Step).unwrap(), "\"step\"");
        assert_eq!(serde_json::from_str::<DeviceCgroup>("\"none\"").unwrap(), DeviceCgroup::None);
        assert_eq!(DeviceCgroup::default(), DeviceCgroup::None);
    }

    #[test]
    fn uuids_by_option() {
        let mut c = config();
        c.cders[0].visible_ids = VisibleIds::Uuid;
        let devs = c.cders[0].static_devices();
        let env = JobEnvironment::for_devices(&c.cders, &[devs[0].clone(), devs[2].clone()]);
        assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), Some("gpgpu-0,GPU-3"));
    }
}
