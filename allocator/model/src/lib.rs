//! The CDER model shared by every part of cder.
//!
//! A *CDER* (CPU-Dependent Execution Resource) is any accelerator a job can be
//! given exclusively: GPUs first, FPGAs or other cards by configuration. This
//! crate holds the light types that the node daemon, the batch-system plugins,
//! the information provider and the grid tools all agree on, and nothing that
//! pulls in SQLite, LDAP or a driver:
//!
//! * [`CderType`] — a configured device type: vendor, discovery, published
//!   prefix, visibility variables, guarding device files;
//! * [`Device`] — one device with its [`DeviceAttributes`], the set static
//!   config ([`device_table!`]), provider groups and discovery share;
//! * [`Confine`] — the confinement policy, in the batch systems' one vocabulary;
//! * [`JobKey`] — the `<lrms>:<job id>` identity of a job;
//! * [`Config`] — `/etc/cder/cder.toml`, with errors that name key and line;
//! * [`JobEnvironment`] — the variables that make a job's devices visible.

#![deny(missing_docs)]

pub mod config;
pub mod confine;
pub mod device;
pub mod environment;
pub mod job;
pub mod mutation;
pub mod registry;
pub mod shared;

pub use config::{Config, ConfigError, NodeConfig, DEFAULT_CONFIG_PATH, DEFAULT_SOCKET};
pub use confine::{Confine, DeprecatedConfine, UnknownConfine, CONFINE_WORDS};
pub use device::{is_mig_uuid, ze_affinity};
pub use device::{ComputeCapability, Device, DeviceAttributes, DeviceNumber, Health};
pub use environment::{DeviceCgroup, HeldDevice, JobEnvironment};
pub use job::{JobKey, JobKeyError, Lrms};

pub use config::{
    CderType, CgroupMode, Discovery, HealthWatch, HeldOpen, MigOffer, Mps, Selection, Sharing, TileOffer,
    UsageSampling, VendorKind, VisibleIds,
};
pub use registry::{FactoryConfig, RegistryConfig, RegistryPolicy, VgpgpuMethod};
pub use shared::SharedFile;
