//! The vGPGPU factory (thesis §4.2.1, Algorithm 1), run on every GPU node:
//! for each GPU found by discovery, derive the backend's UUID, ask the
//! registry for its endpoint, and make sure a backend serves it — reusing
//! one that already answers (across factory restarts and reboots), else
//! starting one through the configured launcher with the device pinned.
//! Backends of this host whose GPU is gone are unregistered (and stopped,
//! when a stop command is configured).

use std::collections::BTreeSet;
use std::net::{TcpStream, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cder_model::{Device, FactoryConfig, VgpgpuMethod};

use crate::api::RegisterRequest;
use crate::client::{RegistryClient, RegistryClientError};

/// The GPU vendors the factory makes backends for (Algorithm 1's
/// `GPGPUVendors = {Nvidia, ATI}`).
pub const GPU_VENDORS: [&str; 2] = ["Nvidia", "AMD"];

/// How long a launched backend has to start answering.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A factory failure.
#[derive(Debug, thiserror::Error)]
pub enum FactoryError {
    /// The registry refused or could not be reached.
    #[error("registry: {0}")]
    Registry(#[from] RegistryClientError),
    /// The backend launcher failed.
    #[error("launcher {program}: {message}")]
    Launch {
        /// The launcher command.
        program: String,
        /// What went wrong.
        message: String,
    },
}

/// What one walk did, backend by backend (UUIDs).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WalkReport {
    /// Already answering: reused.
    pub reused: Vec<String>,
    /// Started by the launcher.
    pub started: Vec<String>,
    /// Could not be started (their error is logged); still registered.
    pub failed: Vec<String>,
    /// Unregistered because the device is gone.
    pub unregistered: Vec<String>,
}

/// One node's factory.
pub struct Factory {
    client: RegistryClient,
    config: FactoryConfig,
    host: String,
}

/// The backend UUID of `device`: the device's own UUID on NVIDIA (from the
/// hardware), `<host>:<type><index>` on others (the thesis's FQDN plus OS
/// device).
pub fn backend_uuid(device: &Device, host: &str) -> String {
    if device.vendor.eq_ignore_ascii_case("nvidia") && !device.uuid.is_empty() {
        device.uuid.clone()
    } else {
        format!("{host}:{}{}", device.cder_type, device.index)
    }
}

/// The variable that pins a backend to its device.
pub fn visible_env(vendor: &str) -> &'static str {
    if vendor.eq_ignore_ascii_case("nvidia") {
        "CUDA_VISIBLE_DEVICES"
    } else {
        "GPU_DEVICE_ORDINAL"
    }
}

/// This machine's fully qualified name (`hostname -f`, else the kernel's).
pub fn fqdn() -> String {
    let from_cmd = Command::new("hostname")
        .arg("-f")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty());
    from_cmd.unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "localhost".into())
    })
}

/// `template` with `{name}` replaced from `values`.
pub fn expand(template: &[String], values: &[(&str, String)]) -> Vec<String> {
    template
        .iter()
        .map(|arg| values.iter().fold(arg.clone(), |acc, (k, v)| acc.replace(&format!("{{{k}}}"), v)))
        .collect()
}

/// True when something accepts connections at `host:port`.
pub fn answers(host: &str, port: u16) -> bool {
    let Ok(mut addrs) = (host, port).to_socket_addrs() else { return false };
    addrs.any(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok())
}

impl Factory {
    /// A factory for this node; `host` overrides `[registry.factory] host`
    /// and the FQDN.
    pub fn new(client: RegistryClient, config: FactoryConfig) -> Factory {
        let host = config.host.clone().unwrap_or_else(fqdn);
        Factory { client, config, host }
    }

    /// The host name backends are registered under.
    pub fn host(&self) -> &str {
        &self.host
    }

    fn methods(&self, vendor: &str) -> Vec<VgpgpuMethod> {
        self.config.methods.clone().unwrap_or_else(|| VgpgpuMethod::defaults_for_vendor(vendor))
    }

    fn run(&self, argv: &[String]) -> Result<(), FactoryError> {
        let program = argv.first().cloned().unwrap_or_default();
        let fail = |message: String| FactoryError::Launch { program: program.clone(), message };
        // The launcher must return once the backend runs (docker run -d,
        // or a script that daemonises); its output goes to our log.
        let out =
            Command::new(&program).args(&argv[1..]).stdin(Stdio::null()).output().map_err(|e| fail(e.to_string()))?;
        if !out.status.success() {
            return Err(fail(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(())
    }

    /// One pass of Algorithm 1 over `devices`, then the clean-up of
    /// vanished devices.
    pub fn walk(&self, devices: &[Device]) -> Result<WalkReport, FactoryError> {
        let mut report = WalkReport::default();
        let mut present = BTreeSet::new();
        for d in devices.iter().filter(|d| GPU_VENDORS.iter().any(|v| v.eq_ignore_ascii_case(&d.vendor))) {
            let uuid = backend_uuid(d, &self.host);
            let methods = self.methods(&d.vendor);
            let reg = RegisterRequest {
                uuid: uuid.clone(),
                vendor: d.vendor.clone(),
                device: d.index,
                host: self.host.clone(),
                methods: methods.clone(),
            };
            let got = self.client.register(&reg)?;
            present.insert(uuid.clone());
            if answers(&got.host, got.port) {
                tracing::info!("{uuid}: backend already serves {}; reused", got.endpoint);
                report.reused.push(uuid);
                continue;
            }
            let values = [
                ("uuid", uuid.clone()),
                ("index", d.index.to_string()),
                ("port", got.port.to_string()),
                ("host", got.host.clone()),
                ("vendor", d.vendor.clone()),
                ("methods", methods.iter().map(|m| m.name()).collect::<Vec<_>>().join(",")),
                ("visible_env", visible_env(&d.vendor).to_string()),
                ("path", d.path.display().to_string()),
            ];
            let argv = expand(&self.config.launcher, &values);
            let started = self.run(&argv).and_then(|()| {
                let deadline = Instant::now() + START_TIMEOUT;
                while Instant::now() < deadline {
                    if answers(&got.host, got.port) {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(FactoryError::Launch {
                    program: argv[0].clone(),
                    message: format!("backend not answering at {} after {START_TIMEOUT:?}", got.endpoint),
                })
            });
            match started {
                Ok(()) => {
                    tracing::info!("{uuid}: started a backend for device {} at {}", d.index, got.endpoint);
                    report.started.push(uuid);
                }
                Err(e) => {
                    tracing::error!("{uuid}: {e}");
                    report.failed.push(uuid);
                }
            }
        }
        let status = self.client.status()?;
        for b in status.backends.iter().filter(|b| b.host == self.host && !present.contains(&b.uuid)) {
            let r = self.client.unregister(&b.uuid)?;
            if let Some(stop) = &self.config.stop {
                let values = [
                    ("uuid", b.uuid.clone()),
                    ("index", b.device.to_string()),
                    ("port", b.port.to_string()),
                    ("host", b.host.clone()),
                ];
                if let Err(e) = self.run(&expand(stop, &values)) {
                    tracing::warn!("{}: stopping its backend: {e}", b.uuid);
                }
            }
            if r.removed {
                tracing::info!("{}: device gone; unregistered", b.uuid);
                report.unregistered.push(b.uuid.clone());
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(vendor: &str, index: u32, uuid: &str) -> Device {
        Device {
            cder_type: "gpgpu".into(),
            vendor: vendor.into(),
            index,
            uuid: uuid.into(),
            pci_bus_id: String::new(),
            attributes: cder_model::DeviceAttributes::new("m", 1),
            path: "/dev/null".into(),
            dev: None,
            numa_node: 0,
            health: cder_model::Health::Healthy,
        }
    }

    #[test]
    fn uuids_come_from_hardware_on_nvidia_and_from_host_elsewhere() {
        assert_eq!(backend_uuid(&device("Nvidia", 1, "GPU-abc"), "n1.x.org"), "GPU-abc");
        assert_eq!(backend_uuid(&device("AMD", 1, "ignored"), "n1.x.org"), "n1.x.org:gpgpu1");
        assert_eq!(visible_env("AMD"), "GPU_DEVICE_ORDINAL");
    }

    #[test]
    fn templates_expand_every_placeholder() {
        let t = vec![
            "docker".to_string(),
            "-e".into(),
            "{visible_env}={index}".into(),
            "--name=vg-{uuid}".into(),
            "{port}".into(),
        ];
        let got = expand(
            &t,
            &[
                ("visible_env", "CUDA_VISIBLE_DEVICES".into()),
                ("index", "2".into()),
                ("uuid", "GPU-1".into()),
                ("port", "8309".into()),
            ],
        );
        assert_eq!(got, ["docker", "-e", "CUDA_VISIBLE_DEVICES=2", "--name=vg-GPU-1", "8309"]);
    }
}
