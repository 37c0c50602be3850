//! Start-up shared by `cder-registryd` and `cder-vgpgpu-factory`: logging
//! to stderr (journald under systemd) and the config with its `[registry]`.

use std::path::Path;

use cder_model::{Config, RegistryConfig};

/// Logs to stderr at `RUST_LOG` (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();
}

/// The config (`--config`, `$CDER_CONFIG`, `/etc/cder/cder.toml`) and its
/// `[registry]`: the defaults when absent, unless `required`. The error is
/// one line naming file, place and key.
pub fn load(explicit: Option<&Path>, required: bool) -> Result<(Config, RegistryConfig), String> {
    let config = Config::load(explicit).map_err(|e| e.to_string())?;
    let registry = match (&config.registry, required) {
        (Some(r), _) => r.clone(),
        (None, false) => RegistryConfig::default(),
        (None, true) => {
            return Err(format!("{}: registry: no [registry] section", Config::resolve_path(explicit).display()))
        }
    };
    Ok((config, registry))
}
