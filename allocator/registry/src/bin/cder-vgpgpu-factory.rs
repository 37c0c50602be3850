//! `cder-vgpgpu-factory`: makes and registers this GPU node's vGPGPU backends.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use cder_model::Config;
use cder_registry::factory::Factory;
use cder_registry::RegistryClient;

/// The vGPGPU factory of one GPU node.
#[derive(Parser, Debug)]
#[command(
    name = "cder-vgpgpu-factory",
    version,
    about = "Starts one vGPGPU backend (rCUDA / VCL server) per GPU of this node and registers it with the cder registry",
    long_about = "cder-vgpgpu-factory walks this node's GPUs (the same discovery as cderd: NVML or the \
static config) and, for each NVIDIA or AMD GPU, derives the backend's UUID (the GPU's own UUID on \
NVIDIA; <host>:<type><index> otherwise), registers it with the registry ([registry] url, MUNGE \
authenticated) and gets its endpoint (host:port). If something already answers there — a backend \
from an earlier run or from before a reboot — it is reused; otherwise the [registry.factory] \
launcher command is run with the device pinned ({visible_env}={index}: CUDA_VISIBLE_DEVICES on \
NVIDIA, GPU_DEVICE_ORDINAL otherwise) and must return once the backend runs (docker run -d, \
podman run -d, a daemonising script). Backends of this host whose GPU has disappeared are \
unregistered and, if [registry.factory] stop is set, stopped.\n\n\
By default it repeats every [registry.factory] interval_s seconds; --once makes one pass.",
    after_help = "EXAMPLES:\n    cder-vgpgpu-factory --config /etc/cder/cder.toml --once\n    cder-vgpgpu-factory --host gpu01.example.org\n\n\
CONFIG:\n    [registry.factory]\n    launcher = [\"docker\", \"run\", \"-d\", \"--name=vgpgpu-{uuid}\", \"--gpus=device={index}\",\n                \"-e\", \"{visible_env}=0\", \"-p\", \"{port}:8308\", \"site/rcuda-server\"]\n\n\
EXIT STATUS:\n    2  bad command line or configuration\n    1  discovery or the registry failed (with --once), or a backend could not be started"
)]
pub(crate) struct Args {
    /// Configuration file [default: $CDER_CONFIG, else /etc/cder/cder.toml].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Register backends under this host name instead of [registry.factory] host / the FQDN.
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// One pass, then exit.
    #[arg(long)]
    once: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    cder_registry::startup::init_logging();
    let (config, rc) = match cder_registry::startup::load(args.config.as_deref(), true) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("cder-vgpgpu-factory: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(mut fc) = rc.factory.clone() else {
        eprintln!(
            "cder-vgpgpu-factory: {}: registry.factory: no [registry.factory] section (launcher is required)",
            Config::resolve_path(args.config.as_deref()).display()
        );
        return ExitCode::from(2);
    };
    if let Some(h) = args.host {
        if let Err(e) = cder_registry::api::check_id("--host", &h) {
            eprintln!("cder-vgpgpu-factory: {}", e.message);
            return ExitCode::from(2);
        }
        fc.host = Some(h);
    }
    let interval = Duration::from_secs(fc.interval_s);
    let client = match RegistryClient::from_config(&rc) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cder-vgpgpu-factory: registry.url: {e}");
            return ExitCode::from(2);
        }
    };
    let factory = Factory::new(client, fc);
    loop {
        let pass = cder_inventory::discover(&config)
            .map_err(|e| format!("discovery: {e}"))
            .and_then(|devices| factory.walk(&devices).map_err(|e| e.to_string()));
        match pass {
            Ok(r) => {
                tracing::info!(
                    host = factory.host(),
                    reused = r.reused.len(),
                    started = r.started.len(),
                    failed = r.failed.len(),
                    unregistered = r.unregistered.len(),
                    "walk done"
                );
                if args.once {
                    println!(
                        "host {}: {} reused, {} started, {} failed, {} unregistered",
                        factory.host(),
                        r.reused.len(),
                        r.started.len(),
                        r.failed.len(),
                        r.unregistered.len()
                    );
                    return if r.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
                }
            }
            Err(e) => {
                eprintln!("cder-vgpgpu-factory: {e}");
                if args.once {
                    return ExitCode::from(1);
                }
            }
        }
        std::thread::sleep(interval);
    }
}
