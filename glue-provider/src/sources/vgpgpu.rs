//! vGPGPU counts: written in `[[virtual]]`, or live from the cluster
//! registry.

use crate::config::{ProviderConfig, VirtualConfig, VirtualSourceKind};
use crate::error::ProviderError;

/// One virtual-GPGPU service (an API-interception method such as rCUDA or
/// VCL) as published: a GLUE2ApplicationEnvironment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualEnvironment {
    /// `rCUDA`, `VCL`: the AppName.
    pub method: String,
    /// `GLUE2ApplicationEnvironmentID`; `None` means `<manager id>_<method>`.
    pub id: Option<String>,
    /// `GLUE2ApplicationEnvironmentAppVersion`, when known.
    pub version: Option<String>,
    /// vGPGPUs (backends) serving the method.
    pub total: u32,
    /// Of those, the ones a job could be given now.
    pub free: u32,
}

/// Where vGPGPU counts come from. Today the config ([`StaticVirtual`]); the
/// cluster registry implements this trait to publish live counts.
pub trait VirtualGpgpuSource {
    /// The services to publish; an error when the registry cannot be asked, so nothing stale is published.
    fn environments(&self) -> Result<Vec<VirtualEnvironment>, ProviderError>;
}

/// vGPGPU counts written in `[[virtual]]`.
#[derive(Debug, Clone, Default)]
pub struct StaticVirtual(pub Vec<VirtualEnvironment>);

impl StaticVirtual {
    /// The `[[virtual]]` entries with their `total` and `free` (0 when absent).
    pub fn from_config(entries: &[VirtualConfig]) -> StaticVirtual {
        StaticVirtual(
            entries
                .iter()
                .map(|v| VirtualEnvironment {
                    method: v.method.get_ref().clone(),
                    id: v.id.clone(),
                    version: v.version.clone(),
                    total: v.total.unwrap_or(0),
                    free: v.free.unwrap_or(0),
                })
                .collect(),
        )
    }
}

/// vGPGPU counts from the cluster registry (`cder-registryd`): one
/// environment per method the registry has backends for, or that
/// `[[virtual]]` names (which also gives its id and version).
#[derive(Debug, Clone)]
pub struct RegistryVirtual {
    /// Where `cder-registryd` listens and how to authenticate to it.
    pub registry: cder_model::RegistryConfig,
    /// The `[[virtual]]` entries: the ids and versions of known methods.
    pub described: Vec<VirtualConfig>,
}

impl VirtualGpgpuSource for RegistryVirtual {
    fn environments(&self) -> Result<Vec<VirtualEnvironment>, ProviderError> {
        let failed = |e: cder_registry_client::RegistryClientError| {
            ProviderError::Runtime(format!("vGPGPU registry {}: {e}", self.registry.url))
        };
        let status = cder_registry_client::RegistryClient::from_config(&self.registry)
            .and_then(|c| c.status())
            .map_err(failed)?;
        let mut out = Vec::new();
        for method in cder_model::VgpgpuMethod::ALL {
            let counts = status.counts_for(Some(method));
            let described = self.described.iter().find(|v| v.method.get_ref().eq_ignore_ascii_case(method.name()));
            if counts.total == 0 && described.is_none() {
                continue;
            }
            // A count past u32 is a registry gone wrong: refuse it rather than publish a capped number.
            let count = |field: &str, n: u64| {
                u32::try_from(n).map_err(|_| {
                    ProviderError::Runtime(format!(
                        "vGPGPU registry {}: {} {field} = {n} is out of range",
                        self.registry.url,
                        method.name()
                    ))
                })
            };
            out.push(VirtualEnvironment {
                method: method.name().to_string(),
                id: described.and_then(|v| v.id.clone()),
                version: described.and_then(|v| v.version.clone()),
                total: count("total", counts.total)?,
                free: count("free", counts.free)?,
            });
        }
        if let Some(unknown) = self
            .described
            .iter()
            .find(|v| !cder_model::VgpgpuMethod::ALL.iter().any(|m| v.method.get_ref().eq_ignore_ascii_case(m.name())))
        {
            return Err(ProviderError::Input(format!(
                "[[virtual]] method {:?} is not one the registry serves (rCUDA, VCL)",
                unknown.method.get_ref()
            )));
        }
        Ok(out)
    }
}

/// The vGPGPU source the config names.
pub fn virtual_from_config(config: &ProviderConfig) -> Result<Box<dyn VirtualGpgpuSource>, ProviderError> {
    match config.counts.virtual_source {
        VirtualSourceKind::Config => Ok(Box::new(StaticVirtual::from_config(&config.virtual_environments))),
        VirtualSourceKind::Registry => {
            let path = cder_model::Config::resolve_path(config.site.cder_config.as_deref());
            let node = cder_model::Config::load(Some(&path))?;
            let registry = node.registry.ok_or_else(|| {
                ProviderError::Input(format!(
                    "counts.virtual_source = \"registry\" needs a [registry] section in {}",
                    path.display()
                ))
            })?;
            Ok(Box::new(RegistryVirtual { registry, described: config.virtual_environments.clone() }))
        }
    }
}

impl VirtualGpgpuSource for StaticVirtual {
    fn environments(&self) -> Result<Vec<VirtualEnvironment>, ProviderError> {
        Ok(self.0.clone())
    }
}
