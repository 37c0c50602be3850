//! What a site has: its node groups and the identical devices on each node
//! of a group, from the config or from this node's inventory.

use std::collections::BTreeMap;

use cder_model::{Config, Device, Health};

use crate::config::{GroupConfig, GroupDevice, ProviderConfig};
use crate::hostlist;
use crate::ProviderError;

/// `count` identical devices of one CDER type on every node of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceClass {
    pub cder_type: String,
    /// The published prefix (`GPGPU`).
    pub prefix: String,
    pub per_node: u32,
    /// Static attributes without the prefix, in design.md's order
    /// (`CUDAComputeCapability`, `MainMemorySize`, …, `Vendor`, `Model`).
    pub attributes: Vec<(String, String)>,
}

impl DeviceClass {
    /// The published value of a static attribute (`"Model"`, `"Vendor"` …).
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// One group of identical worker nodes: one GLUE2ExecutionEnvironment.
#[derive(Debug, Clone)]
pub struct NodeGroup {
    pub config: GroupConfig,
    /// The expanded host names.
    pub nodes: Vec<String>,
    /// One class per CDER type, in config (or discovery) order.
    pub classes: Vec<DeviceClass>,
}

impl NodeGroup {
    pub fn id(&self) -> &str {
        self.config.id.get_ref()
    }
}

/// The order design.md lists the static attributes in.
const STATIC_ORDER: [&str; 9] = ["CUDAComputeCapability", "MainMemorySize", "MP", "CoresPerMP", "Cores", "ClockSpeed", "ECCSupport", "Vendor", "Model"];

/// The static attributes of `device` without the prefix, in design.md's order.
pub fn static_attributes(device: &Device) -> Vec<(String, String)> {
    // published_attributes is the single source of the names; the prefix is
    // a marker stripped again here.
    const MARK: &str = "\u{1}";
    let mut attrs: Vec<(String, String)> = device
        .published_attributes(MARK)
        .into_iter()
        .map(|(k, v)| (k.trim_start_matches(MARK).to_string(), v))
        .collect();
    attrs.sort_by_key(|(k, _)| STATIC_ORDER.iter().position(|o| o == k).unwrap_or(STATIC_ORDER.len()));
    attrs
}

/// Builds the node groups from the config, discovering the devices of
/// `inventory = true` groups through `cder_inventory`.
pub fn node_groups(config: &ProviderConfig) -> Result<Vec<NodeGroup>, ProviderError> {
    let mut inventory: Option<(Vec<Device>, Config)> = None;
    let mut groups = Vec::with_capacity(config.groups.len());
    for group in &config.groups {
        let nodes = hostlist::expand_all(group.nodes.get_ref()).map_err(ProviderError::Input)?;
        let classes = if group.inventory {
            if inventory.is_none() {
                let node_config = Config::load(config.site.cder_config.as_deref())?;
                let devices = cder_inventory::discover(&node_config).map_err(|e| ProviderError::Runtime(format!("device inventory: {e}")))?;
                inventory = Some((devices, node_config));
            }
            let (devices, node_config) = inventory.as_ref().expect("filled above");
            classes_from_inventory(group.id.get_ref(), devices, node_config)?
        } else {
            group.devices.iter().map(class_from_config).collect()
        };
        let mut prefixes = std::collections::BTreeSet::new();
        if let Some(dup) = classes.iter().find(|c| !prefixes.insert(c.prefix.clone())) {
            return Err(ProviderError::Input(format!("group {:?}: two device types publish under the prefix {:?}; give each type its own prefix", group.id.get_ref(), dup.prefix)));
        }
        groups.push(NodeGroup { config: group.clone(), nodes, classes });
    }
    Ok(groups)
}

fn class_from_config(dev: &GroupDevice) -> DeviceClass {
    // Only the published fields matter; the rest are a node's business.
    let device = Device {
        cder_type: dev.cder_type.clone(),
        vendor: dev.vendor.clone(),
        index: 0,
        uuid: String::new(),
        pci_bus_id: String::new(),
        model: dev.model.get_ref().clone(),
        memory_mb: dev.memory_mb,
        compute_capability: dev.compute_capability,
        multiprocessors: dev.multiprocessors,
        cores_per_mp: dev.cores_per_mp,
        cores: dev.cores.or_else(|| Some(dev.multiprocessors? * dev.cores_per_mp?)),
        clock_mhz: dev.clock_mhz,
        ecc: dev.ecc,
        path: Default::default(),
        numa_node: 0,
        health: Health::Healthy,
    };
    DeviceClass {
        cder_type: dev.cder_type.clone(),
        prefix: dev.prefix.clone().unwrap_or_else(|| dev.cder_type.to_ascii_uppercase()),
        per_node: dev.count,
        attributes: static_attributes(&device),
    }
}

/// Groups this node's devices by type; every device of a type must publish
/// the same attributes, since an ExecutionEnvironment describes identical
/// hardware.
pub fn classes_from_inventory(group: &str, devices: &[Device], node_config: &Config) -> Result<Vec<DeviceClass>, ProviderError> {
    let mut by_type: BTreeMap<&str, Vec<&Device>> = BTreeMap::new();
    for d in devices {
        by_type.entry(&d.cder_type).or_default().push(d);
    }
    let mut classes = Vec::new();
    // Config order, so the output does not depend on map order.
    for cder in &node_config.cders {
        let Some(devs) = by_type.get(cder.name()) else { continue };
        let attributes = static_attributes(devs[0]);
        if let Some(other) = devs.iter().find(|d| static_attributes(d) != attributes) {
            return Err(ProviderError::Input(format!(
                "group {group:?}: the {} devices of this node differ ({} {:?} vs {} {:?}); one ExecutionEnvironment describes identical hardware, so publish this node's types separately or make the devices alike",
                cder.name(),
                devs[0].index,
                devs[0].model,
                other.index,
                other.model
            )));
        }
        classes.push(DeviceClass { cder_type: cder.name().to_string(), prefix: cder.prefix(), per_node: devs.len() as u32, attributes });
    }
    if classes.is_empty() {
        return Err(ProviderError::Input(format!("group {group:?}: the node's inventory has no devices to publish")));
    }
    Ok(classes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn static_attributes_follow_design_order() {
        let cfg = ProviderConfig::parse(crate::config::tests::SAMPLE, Path::new("t.toml")).unwrap();
        let class = class_from_config(&cfg.groups[0].devices[0]);
        let names: Vec<&str> = class.attributes.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["CUDAComputeCapability", "MainMemorySize", "MP", "CoresPerMP", "Cores", "ClockSpeed", "ECCSupport", "Vendor", "Model"]);
        assert_eq!(class.attribute("Cores"), Some("192"));
        assert_eq!(class.prefix, "GPGPU");
        assert_eq!(class.per_node, 2);
    }

    #[test]
    fn inventory_groups_by_type_and_rejects_mixed_models() {
        let node = Config::parse(
            "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n\
             [[cder.device]]\nindex = 0\nmodel = \"Tesla K20m\"\nmemory_mb = 4800\npath = \"/dev/nvidia0\"\n\
             [[cder.device]]\nindex = 1\nmodel = \"Tesla K20m\"\nmemory_mb = 4800\npath = \"/dev/nvidia1\"\n",
            Path::new("cder.toml"),
        )
        .unwrap();
        let mut devices = cder_inventory::discover(&node).unwrap();
        let classes = classes_from_inventory("g", &devices, &node).unwrap();
        assert_eq!(classes.len(), 1);
        assert_eq!(classes[0].per_node, 2);
        assert_eq!(classes[0].attribute("Model"), Some("Tesla K20m"));
        devices[1].model = "Tesla K40m".into();
        let e = classes_from_inventory("g", &devices, &node).unwrap_err();
        assert!(e.to_string().contains("Tesla K40m"), "{e}");
    }
}
