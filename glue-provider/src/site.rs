//! What a site has: its node groups and the identical devices on each node
//! of a group, from the config or from this node's inventory.

use cder_model::{Config, Device, DeviceAttributes};

use crate::config::{GroupConfig, GroupDevice, ProviderConfig};
use crate::error::ProviderError;
use cder_request::hostlist::Hostlist;

/// `count` identical devices of one CDER type on every node of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceClass {
    /// Unique within the group: the type name, or `<type>-<model>` when the
    /// group has several kinds of device of that type. Counts are keyed by it.
    pub key: String,
    /// The CDER type (`gpgpu`), as in `cder.toml`.
    pub cder_type: String,
    /// The published prefix (`GPGPU`).
    pub prefix: String,
    /// Devices of the class on each node of the group.
    pub per_node: u32,
    /// Static attributes without the prefix, in design.md's order
    /// (`CUDAComputeCapability`, `MainMemorySize`, …, `Vendor`, `Model`).
    pub attributes: Vec<(String, String)>,
    /// The UUIDs of this node's devices of the class (inventory groups), by
    /// which cderd's per-device states are counted; empty for configured classes.
    pub members: Vec<String>,
    /// The SLURM GRES type (`gpu:<type>:N`) that counts this class.
    pub gres_type: Option<String>,
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
    /// The `[[group]]` the group comes from.
    pub config: GroupConfig,
    /// The expanded host names.
    pub nodes: Vec<String>,
    /// One class per CDER type, in config (or discovery) order.
    pub classes: Vec<DeviceClass>,
}

/// One published GLUE2ExecutionEnvironment: a group, or, when a node of
/// the group has several kinds of device of one type, one per kind.
#[derive(Debug, Clone)]
pub struct Environment<'a> {
    /// `GLUE2ResourceID`: the group's id, or `<group id>_<class key>` per kind when mixed.
    pub id: String,
    /// `GLUE2EntityName`, when the config names the group.
    pub name: Option<String>,
    /// The device classes published on this environment.
    pub classes: Vec<&'a DeviceClass>,
}

impl NodeGroup {
    /// The group's `GLUE2ResourceID`, as configured.
    pub fn id(&self) -> &str {
        self.config.id.get_ref()
    }

    /// True when some type has more than one class (mixed devices on each node).
    pub fn is_mixed(&self) -> bool {
        self.classes.iter().any(|c| c.key != c.cder_type)
    }

    /// True when two classes publish under one prefix: several kinds of one
    /// type, or types of different vendors that share a prefix (an NVIDIA
    /// `gpgpu` and an AMD `amdgpu` both published as `GPGPU…`).
    pub fn shares_a_prefix(&self) -> bool {
        let mut seen = std::collections::BTreeSet::new();
        self.classes.iter().any(|c| !seen.insert(c.prefix.as_str()))
    }

    /// The ExecutionEnvironments this group publishes. A homogeneous group
    /// is one EE with all its types. A group whose nodes carry several kinds
    /// of device under one prefix (kinds of one type, or types of several
    /// vendors) is published as one EE per class (`<group id>_<class key>`),
    /// so that every EE still describes identical devices, each with its own
    /// vendor and counts, and no key is published twice on one entity.
    pub fn environments(&self) -> Vec<Environment<'_>> {
        if !self.shares_a_prefix() {
            return vec![Environment {
                id: self.id().to_string(),
                name: self.config.name.clone(),
                classes: self.classes.iter().collect(),
            }];
        }
        self.classes
            .iter()
            .map(|c| Environment {
                id: format!("{}_{}", self.id(), c.key),
                name: Some(format!(
                    "{} ({})",
                    self.config.name.as_deref().unwrap_or(self.id()),
                    c.attribute("Model").unwrap_or(&c.cder_type)
                )),
                classes: vec![c],
            })
            .collect()
    }
}

/// Gives each class its key: the type name when the type has one class in
/// the group, else `<type>-<model slug>` (made unique with `-2`, `-3` …).
fn assign_keys(classes: &mut [DeviceClass]) {
    let mut used = std::collections::BTreeSet::new();
    for i in 0..classes.len() {
        let t = classes[i].cder_type.clone();
        let mixed = classes.iter().filter(|c| c.cder_type == t).count() > 1;
        let base = if mixed {
            let slug: String = classes[i]
                .attribute("Model")
                .unwrap_or("device")
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            let slug = slug.split('-').filter(|s| !s.is_empty()).collect::<Vec<_>>().join("-");
            format!("{t}-{slug}")
        } else {
            t
        };
        let mut key = base.clone();
        let mut n = 2;
        while !used.insert(key.clone()) {
            key = format!("{base}-{n}");
            n += 1;
        }
        classes[i].key = key;
    }
}

/// The order design.md lists the static attributes in.
const STATIC_ORDER: [&str; 10] = cder_request::glue::ATTRIBUTE_SUFFIXES;

/// A configured vendor as cderd's inventory publishes it (`VendorKind`'s
/// name): `amd` is `AMD`, `intel` is `Intel`, `nvidia` is `Nvidia`, so that
/// a JDL's `GPGPUVendor == "AMD"` finds a static group as it finds a
/// discovered one; any other vendor as written.
pub fn published_vendor(vendor: &str) -> String {
    use serde::de::IntoDeserializer;
    let d: serde::de::value::StrDeserializer<'_, serde::de::value::Error> = vendor.into_deserializer();
    match <cder_model::config::VendorKind as serde::Deserialize>::deserialize(d) {
        Ok(kind) => kind.published_name().to_string(),
        Err(_) => vendor.to_string(),
    }
}

/// The static attributes of `device` without the prefix, in design.md's order.
pub fn static_attributes(attributes: &DeviceAttributes, vendor: &str) -> Vec<(String, String)> {
    // `published` is the single source of the names; the prefix is a marker stripped again here.
    const MARK: &str = "\u{1}";
    let mut attrs: Vec<(String, String)> = attributes
        .published(MARK, vendor)
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
        let nodes = Hostlist::HOSTS.expand_all(group.nodes.get_ref()).map_err(|e| ProviderError::Input(e.into()))?;
        let classes = if group.inventory {
            if inventory.is_none() {
                let node_config = Config::load(config.site.cder_config.as_deref())?;
                let devices = cder_inventory::discover(&node_config)
                    .map_err(|e| ProviderError::Runtime(format!("device inventory: {e}")))?;
                inventory = Some((devices, node_config));
            }
            let (devices, node_config) = inventory.as_ref().expect("filled above");
            classes_from_inventory(group.id.get_ref(), devices, node_config)?
        } else {
            group.devices.iter().map(class_from_config).collect()
        };
        let mut classes = classes;
        assign_keys(&mut classes);
        groups.push(NodeGroup { config: group.clone(), nodes, classes });
    }
    Ok(groups)
}

fn class_from_config(dev: &GroupDevice) -> DeviceClass {
    DeviceClass {
        key: dev.cder_type.clone(),
        cder_type: dev.cder_type.clone(),
        prefix: dev.prefix.clone().unwrap_or_else(|| dev.cder_type.to_ascii_uppercase()),
        per_node: dev.count,
        attributes: static_attributes(&dev.attributes(), &published_vendor(&dev.vendor)),
        members: Vec::new(),
        gres_type: dev.gres_type.clone(),
    }
}

/// Groups this node's devices by type, and within a type by identical
/// published attributes: one class per kind of device.
pub fn classes_from_inventory(
    group: &str,
    devices: &[Device],
    node_config: &Config,
) -> Result<Vec<DeviceClass>, ProviderError> {
    let mut classes: Vec<DeviceClass> = Vec::new();
    // Config order, then discovery order, so the output does not depend on map order.
    for cder in &node_config.cders {
        for d in devices.iter().filter(|d| d.cder_type == cder.name()) {
            let attributes = static_attributes(&d.attributes, &d.vendor);
            match classes.iter_mut().find(|c| c.cder_type == d.cder_type && c.attributes == attributes) {
                Some(class) => {
                    class.per_node += 1;
                    class.members.push(d.uuid.clone());
                }
                None => classes.push(DeviceClass {
                    key: cder.name().to_string(),
                    cder_type: cder.name().to_string(),
                    prefix: cder.prefix(),
                    per_node: 1,
                    attributes,
                    members: vec![d.uuid.clone()],
                    gres_type: None,
                }),
            }
        }
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
        assert_eq!(
            names,
            [
                "CUDAComputeCapability",
                "MainMemorySize",
                "MP",
                "CoresPerMP",
                "Cores",
                "ClockSpeed",
                "ECCSupport",
                "Vendor",
                "Model"
            ]
        );
        assert_eq!(class.attribute("Cores"), Some("192"));
        assert_eq!(class.prefix, "GPGPU");
        assert_eq!(class.per_node, 2);
    }

    #[test]
    fn inventory_of_a_mixed_vendor_node_is_one_environment_per_vendor() {
        let node = Config::parse(
            "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n\
             [[cder.device]]\nindex = 0\nmodel = \"NVIDIA A100-SXM4-40GB\"\nmemory_mib = 40960\ncompute_capability = \"8.0\"\npath = \"/dev/nvidia0\"\n\
             [[cder]]\nname = \"amdgpu\"\nvendor = \"amd\"\nprefix = \"GPGPU\"\ndiscovery = \"static\"\n\
             [[cder.device]]\nindex = 0\nmodel = \"AMD Instinct MI210\"\nmemory_mib = 65536\narchitecture = \"gfx90a\"\npath = \"/dev/dri/renderD128\"\n\
             [[cder.device]]\nindex = 1\nmodel = \"AMD Instinct MI210\"\nmemory_mib = 65536\narchitecture = \"gfx90a\"\npath = \"/dev/dri/renderD129\"\n",
            Path::new("cder.toml"),
        )
        .unwrap();
        let devices = cder_inventory::discover(&node).unwrap();
        let mut classes = classes_from_inventory("g", &devices, &node).unwrap();
        assign_keys(&mut classes);
        assert_eq!(
            classes.iter().map(|c| (c.key.as_str(), c.per_node)).collect::<Vec<_>>(),
            [("gpgpu", 1), ("amdgpu", 2)]
        );
        assert_eq!(classes[1].attribute("Vendor"), Some("AMD"));
        assert_eq!(classes[1].attribute("Architecture"), Some("gfx90a"));
        assert_eq!(classes[1].attribute("CUDAComputeCapability"), None);
        assert_eq!(classes[1].members, ["amdgpu-0", "amdgpu-1"]);
        let cfg = ProviderConfig::parse(crate::config::tests::SAMPLE, Path::new("t.toml")).unwrap();
        let group = NodeGroup { config: cfg.groups[0].clone(), nodes: vec!["wn01".into()], classes };
        assert!(group.shares_a_prefix() && !group.is_mixed());
        let envs = group.environments();
        assert_eq!(
            envs.iter().map(|e| (e.id.as_str(), e.classes[0].attribute("Vendor"))).collect::<Vec<_>>(),
            [("ce.example.org_gts450_gpgpu", Some("Nvidia")), ("ce.example.org_gts450_amdgpu", Some("AMD"))]
        );
    }

    #[test]
    fn configured_vendors_are_published_as_discovery_names_them() {
        for (written, published) in
            [("amd", "AMD"), ("AMD", "AMD"), ("intel", "Intel"), ("NVIDIA", "Nvidia"), ("Xilinx", "Xilinx")]
        {
            assert_eq!(published_vendor(written), published, "{written}");
        }
    }

    #[test]
    fn inventory_groups_by_type_and_splits_mixed_models() {
        let node = Config::parse(
            "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n\
             [[cder.device]]\nindex = 0\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\npath = \"/dev/nvidia0\"\n\
             [[cder.device]]\nindex = 1\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\npath = \"/dev/nvidia1\"\n",
            Path::new("cder.toml"),
        )
        .unwrap();
        let mut devices = cder_inventory::discover(&node).unwrap();
        let classes = classes_from_inventory("g", &devices, &node).unwrap();
        assert_eq!(classes.len(), 1);
        assert_eq!(classes[0].per_node, 2);
        assert_eq!(classes[0].attribute("Model"), Some("Tesla K20m"));
        assert_eq!(classes[0].members, ["gpgpu-0", "gpgpu-1"]);
        devices[1].attributes.model = "Tesla K40m".into();
        let mut classes = classes_from_inventory("g", &devices, &node).unwrap();
        assert_eq!(classes.len(), 2);
        assign_keys(&mut classes);
        assert_eq!(classes[0].key, "gpgpu-Tesla-K20m");
        assert_eq!(classes[1].key, "gpgpu-Tesla-K40m");
        assert_eq!(classes[1].members, ["gpgpu-1"]);
        let cfg = ProviderConfig::parse(crate::config::tests::SAMPLE, Path::new("t.toml")).unwrap();
        let group = NodeGroup { config: cfg.groups[0].clone(), nodes: vec!["wn01".into()], classes };
        let envs = group.environments();
        assert_eq!(
            envs.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["ce.example.org_gts450_gpgpu-Tesla-K20m", "ce.example.org_gts450_gpgpu-Tesla-K40m"]
        );
        assert_eq!(envs[1].name.as_deref(), Some("ce.example.org_gts450 (Tesla K40m)"));
    }
}
