//! `cderctl`: the admin's and the hooks' view of cder on one node.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod inventory;

/// Exit status for bad input or usage (clap uses it too).
const EXIT_USAGE: u8 = 2;
/// Exit status for a runtime failure: a service down, too few devices.
const EXIT_FAILURE: u8 = 1;

#[derive(Parser)]
#[command(
    name = "cderctl",
    version,
    about = "Inspect and control the CDERs (GPUs and other accelerators) of this node",
    long_about = "cderctl shows what devices this node has and, through the node daemon cderd, \
who holds them. It reads /etc/cder/cder.toml unless --config or CDER_CONFIG names another file.",
    after_help = "EXAMPLES:\n    cderctl inventory\n    cderctl inventory --json --config deploy/cder.example.toml\n\n\
EXIT STATUS:\n    0 success, 1 runtime failure (daemon down, too few devices), 2 bad input or usage."
)]
struct Cli {
    /// Config file [default: $CDER_CONFIG, else /etc/cder/cder.toml]
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Discover this node's devices (NVML or static config) and print them
    #[command(long_about = "Runs device discovery exactly as cderd does at start-up and prints what it \
found: a table for people, or with --json an array of device objects with the fields index, uuid, \
pci_bus_id, model, memory_mb, compute_capability, multiprocessors, cores_per_mp, cores, clock_mhz, ecc, \
path, numa_node, health, vendor and type. It does not need cderd to be running.")]
    Inventory(inventory::Args),
}

/// An error with the exit status it deserves.
pub struct Failure {
    pub status: u8,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        Failure { status: EXIT_USAGE, error: error.into() }
    }
    pub fn runtime(error: impl Into<anyhow::Error>) -> Self {
        Failure { status: EXIT_FAILURE, error: error.into() }
    }
}

/// Writes to stdout; a reader that went away (`cderctl … | head`) is not an error.
pub fn print(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::runtime(e)),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Inventory(args) => inventory::run(cli.config.as_deref(), &args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("cderctl: {:#}", failure.error);
            ExitCode::from(failure.status)
        }
    }
}
