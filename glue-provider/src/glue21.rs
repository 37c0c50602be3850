//! The `glue21-accelerator` strategy: GLUE 2.1's accelerator entities.
//!
//! * one `GLUE2AcceleratorEnvironment` per kind of device of each published
//!   ExecutionEnvironment (foreign key to it), with its per-node counts
//!   (`PhysicalAccelerators`, `LogicalAccelerators`) and what it is (Type,
//!   Vendor, Model, ClockSpeed, Memory, ComputeCapability: CUDA's for
//!   NVIDIA, the architecture for AMD and Intel, [`compute_capability`]);
//! * one `GLUE2ComputingManagerAcceleratorInfo` per accelerator type
//!   (TotalPhysicalAccelerators, TotalAcceleratorSlots, UsedAcceleratorSlots);
//! * one `GLUE2ComputingShareAcceleratorInfo` per `site.computing_share_ids`
//!   entry and type (FreeAcceleratorSlots, UsedAcceleratorSlots,
//!   MaxAcceleratorSlotsPerJob).
//!
//! GPUs offered as shares (SLURM `gres/shard`) count as their shares: a
//! GPU of 4 shares is 4 accelerator slots, and a job's most is one GPU's.
//!
//! The LDAP rendering (names `GLUE2<Entity><Attribute>`, as GLUE 2.0's) is
//! defined by deploy/bdii/GLUE21-accelerator.schema. A MIG instance is a
//! logical accelerator, not a physical one: its class publishes
//! `LogicalAccelerators` only.

use std::collections::BTreeMap;

use crate::config::ProviderConfig;
use crate::ldif::Entry;
use crate::site::DeviceClass;
use crate::sources::Snapshot;

/// GLUE 2.1's accelerator type of a class: `GPU`, `MIC` or `FPGA`.
pub fn accelerator_type(class: &DeviceClass) -> &'static str {
    let t = class.cder_type.to_ascii_lowercase();
    if t.contains("fpga") {
        "FPGA"
    } else if t.contains("mic") || t.contains("phi") {
        "MIC"
    } else {
        "GPU"
    }
}

/// GLUE 2.1's ComputeCapability, "the feature set the accelerator supports,
/// as declared by the vendor": NVIDIA's CUDA compute capability (`8.0`),
/// else the architecture AMD and Intel declare instead (`gfx90a`, `Xe-HPC`).
pub fn compute_capability(class: &DeviceClass) -> Option<&str> {
    class.attribute("CUDAComputeCapability").or_else(|| class.attribute(cder_request::glue::ARCHITECTURE))
}

fn is_mig(class: &DeviceClass) -> bool {
    class.attribute("Model").is_some_and(|m| m.contains(" MIG "))
}

/// Totals of one accelerator type over the site.
#[derive(Default)]
struct TypeTotals {
    physical: u64,
    slots: u64,
    free: u64,
    used: u64,
    max_per_job: u64,
}

/// The entries, children of the ComputingService's DN.
pub fn entries(config: &ProviderConfig, snapshot: &Snapshot, service_dn: &str, created: &str) -> Vec<Entry> {
    let validity = config.site.validity.to_string();
    let manager_id = config.site.computing_manager_id.get_ref();
    let mut out = Vec::new();
    let mut totals: BTreeMap<&'static str, TypeTotals> = BTreeMap::new();
    for (group, counts) in &snapshot.groups {
        let nodes = group.nodes.len() as u64;
        for env in group.environments() {
            for class in &env.classes {
                let kind = accelerator_type(class);
                let c = counts.devices.get(&class.key).copied().unwrap_or_default();
                let per_node = u64::from(class.per_node);
                let t = totals.entry(kind).or_default();
                if !is_mig(class) {
                    t.physical += per_node * nodes;
                }
                // A GPU offered as shares is that many slots; a job holds
                // shares of one GPU at most.
                match counts.shares.get(&class.key) {
                    Some(s) => {
                        t.slots += u64::from(s.total);
                        t.free += u64::from(s.free);
                        t.used += u64::from(s.used);
                        t.max_per_job = t.max_per_job.max(u64::from(s.per_gpu));
                    }
                    None => {
                        t.slots += u64::from(c.total);
                        t.free += u64::from(c.free);
                        t.used += u64::from(c.used);
                        t.max_per_job = t.max_per_job.max(per_node);
                    }
                }

                let id = format!("{}_{}", env.id, class.key);
                let mut e = Entry::new(format!("GLUE2AcceleratorEnvironmentID={id},{service_dn}"));
                e.push("objectClass", "GLUE2AcceleratorEnvironment");
                e.push("GLUE2AcceleratorEnvironmentID", id.clone());
                e.push("GLUE2EntityCreationTime", created).push("GLUE2EntityValidity", validity.clone());
                e.push("GLUE2AcceleratorEnvironmentType", kind);
                if !is_mig(class) {
                    e.push("GLUE2AcceleratorEnvironmentPhysicalAccelerators", per_node.to_string());
                }
                e.push("GLUE2AcceleratorEnvironmentLogicalAccelerators", per_node.to_string());
                for (attribute, published) in [
                    ("Vendor", "Vendor"),
                    ("Model", "Model"),
                    ("ClockSpeed", "ClockSpeed"),
                    ("Memory", "MainMemorySize"),
                ] {
                    if let Some(value) = class.attribute(published) {
                        e.push(&format!("GLUE2AcceleratorEnvironment{attribute}"), value);
                    }
                }
                if let Some(value) = compute_capability(class) {
                    e.push("GLUE2AcceleratorEnvironmentComputeCapability", value);
                }
                e.push("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey", env.id.clone());
                out.push(e);
            }
        }
    }
    for (kind, t) in &totals {
        let id = format!("{manager_id}_{kind}");
        let mut m = Entry::new(format!("GLUE2ComputingManagerAcceleratorInfoID={id},{service_dn}"));
        m.push("objectClass", "GLUE2ComputingManagerAcceleratorInfo");
        m.push("GLUE2ComputingManagerAcceleratorInfoID", id.clone());
        m.push("GLUE2EntityCreationTime", created).push("GLUE2EntityValidity", validity.clone());
        m.push("GLUE2ComputingManagerAcceleratorInfoType", *kind);
        m.push("GLUE2ComputingManagerAcceleratorInfoTotalPhysicalAccelerators", t.physical.to_string());
        m.push("GLUE2ComputingManagerAcceleratorInfoTotalAcceleratorSlots", t.slots.to_string());
        m.push("GLUE2ComputingManagerAcceleratorInfoUsedAcceleratorSlots", t.used.to_string());
        m.push("GLUE2ComputingManagerAcceleratorInfoComputingManagerForeignKey", manager_id.clone());
        out.push(m);
        for share in &config.site.computing_share_ids {
            let id = format!("{share}_{kind}");
            let mut s = Entry::new(format!("GLUE2ComputingShareAcceleratorInfoID={id},{service_dn}"));
            s.push("objectClass", "GLUE2ComputingShareAcceleratorInfo");
            s.push("GLUE2ComputingShareAcceleratorInfoID", id.clone());
            s.push("GLUE2EntityCreationTime", created).push("GLUE2EntityValidity", validity.clone());
            s.push("GLUE2ComputingShareAcceleratorInfoType", *kind);
            s.push("GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots", t.free.to_string());
            s.push("GLUE2ComputingShareAcceleratorInfoUsedAcceleratorSlots", t.used.to_string());
            s.push("GLUE2ComputingShareAcceleratorInfoMaxAcceleratorSlotsPerJob", t.max_per_job.to_string());
            s.push("GLUE2ComputingShareAcceleratorInfoComputingShareForeignKey", share.clone());
            out.push(s);
        }
    }
    // Per-VO shares carry their own figures: the VO's room, not the site's.
    for share in &snapshot.shares {
        let mut kinds: BTreeMap<&'static str, (u64, u64, u64)> = BTreeMap::new();
        for (group, _) in &snapshot.groups {
            let in_share = group.environments().iter().any(|e| share.environments.contains(&e.id));
            for class in group.classes.iter().filter(|_| in_share) {
                if let Some(d) = share.devices.get(&class.prefix) {
                    kinds.entry(accelerator_type(class)).or_insert((
                        u64::from(d.free),
                        u64::from(d.used),
                        u64::from(d.max_per_job),
                    ));
                }
            }
        }
        for (kind, (free, used, max)) in kinds {
            let id = format!("{}_{kind}", share.id);
            let mut s = Entry::new(format!("GLUE2ComputingShareAcceleratorInfoID={id},{service_dn}"));
            s.push("objectClass", "GLUE2ComputingShareAcceleratorInfo");
            s.push("GLUE2ComputingShareAcceleratorInfoID", id.clone());
            s.push("GLUE2EntityCreationTime", created).push("GLUE2EntityValidity", validity.clone());
            s.push("GLUE2ComputingShareAcceleratorInfoType", kind);
            s.push("GLUE2ComputingShareAcceleratorInfoFreeAcceleratorSlots", free.to_string());
            s.push("GLUE2ComputingShareAcceleratorInfoUsedAcceleratorSlots", used.to_string());
            s.push("GLUE2ComputingShareAcceleratorInfoMaxAcceleratorSlotsPerJob", max.to_string());
            s.push("GLUE2ComputingShareAcceleratorInfoComputingShareForeignKey", share.id.clone());
            out.push(s);
        }
    }
    out
}
