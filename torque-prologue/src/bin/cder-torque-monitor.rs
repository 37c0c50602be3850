//! `cder-torque-monitor`: releases held vGPGPU jobs once the registry has
//! their backends, and returns the backends of finished jobs.

// The clap arguments' doc comments are the --help text, printed as written:
// `[registry]` or `<lrms>:<id>` there are words for the admin, not Markdown.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use cder_model::Config;
use cder_registry_client::RegistryClient;
use cder_torque::vgpgpu::Monitor;

#[derive(Parser, Debug)]
#[command(
    name = "cder-torque-monitor",
    version,
    about = "Releases held TORQUE vGPGPU jobs in submission order once the cder registry has enough free backends",
    long_about = "The TORQUE/MAUI vGPGPU monitor of the seed thesis (section 4.2.3). The submit filter puts every \
job that asks for VirtualGPGPUPerNode=N on user hold (#PBS -h) and records N and the method \
(VirtualGPGPUMethod) in its variable list. This monitor runs on the pbs_server host with operator \
rights and loops: it reads `qstat -x`; it releases the registry backends of torque jobs that are \
complete (state C) or gone; then it takes the held vGPGPU jobs oldest first and, while the registry \
has N x nodes free backends of the job's method for the first of them, requests them on the job's \
behalf (job key torque:<id>) and runs `qrls <id>`. One job at a time, so requests never race, and \
strictly in order, so a large job is not starved by smaller ones behind it. If qstat fails, nothing \
is collected or released in that pass.",
    after_help = "EXAMPLES:\n    cder-torque-monitor --config /etc/cder/cder.toml\n    cder-torque-monitor --once --qstat /opt/torque/bin/qstat --qrls /opt/torque/bin/qrls\n\n\
ENVIRONMENT:\n    CDER_QSTAT, CDER_QRLS   the qstat and qrls programs (default: from PATH)\n\n\
EXIT STATUS:\n    2  bad command line or configuration\n    1  a pass failed (with --once)"
)]
pub(crate) struct Args {
    /// Configuration file with [registry] [default: $CDER_CONFIG, else /etc/cder/cder.toml].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// One pass, then exit.
    #[arg(long)]
    once: bool,
    /// Seconds between passes.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,
    /// The qstat program [default: $CDER_QSTAT, else qstat].
    #[arg(long)]
    qstat: Option<String>,
    /// The qrls program [default: $CDER_QRLS, else qrls].
    #[arg(long)]
    qrls: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match Config::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cder-torque-monitor: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(rc) = config.registry else {
        eprintln!(
            "cder-torque-monitor: {}: registry: no [registry] section",
            Config::resolve_path(args.config.as_deref()).display()
        );
        return ExitCode::from(2);
    };
    let client = match RegistryClient::from_config(&rc) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cder-torque-monitor: registry.url: {e}");
            return ExitCode::from(2);
        }
    };
    let program = |given: Option<String>, var: &str, default: &str| {
        given.or_else(|| std::env::var(var).ok().filter(|v| !v.is_empty())).unwrap_or_else(|| default.to_string())
    };
    let monitor = Monitor {
        client,
        qstat: program(args.qstat, "CDER_QSTAT", "qstat"),
        qrls: program(args.qrls, "CDER_QRLS", "qrls"),
    };
    loop {
        match monitor.iterate() {
            Ok(it) => {
                if args.once {
                    println!("collected: {}", it.collected.join(" "));
                    println!("released: {}", it.released.join(" "));
                    println!("waiting: {}", it.waiting.unwrap_or_default());
                    return ExitCode::SUCCESS;
                }
            }
            Err(e) => {
                eprintln!("cder-torque-monitor: {e}");
                if args.once {
                    return ExitCode::from(1);
                }
            }
        }
        std::thread::sleep(Duration::from_secs(args.interval));
    }
}
