//! `cder-torque-reconcile`: frees the devices of TORQUE jobs this pbs_mom no
//! longer holds (cron, as root, on every worker node).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

use cder_model::Config;
use cder_protocol::Client;
use cder_torque::mom::PbsHome;
use cder_torque::reconcile::{generation, release_stale, snapshot};
use cder_torque::settings::TorqueSettings;

/// Frees the devices of TORQUE jobs that pbs_mom no longer holds.
///
/// It reads cderd's allocation generation, then lists pbs_mom's job files
/// ($PBS_HOME/mom_priv/jobs/*.JB: every job pbs_mom holds, in any state),
/// then asks cderd to release the TORQUE allocations of jobs not in the
/// list that are not newer than that generation. A job whose prologue
/// allocates meanwhile keeps its devices. When the job directory cannot be
/// read, nothing is released.
#[derive(Parser)]
#[command(
    name = "cder-torque-reconcile",
    version,
    after_help = "EXIT STATUS:\n    0 done, 1 cderd or the job directory could not be read, 2 usage or configuration\n\nEXAMPLE (/etc/cron.d/cder-torque-reconcile):\n    */10 * * * * root /usr/libexec/cder/cder-torque-reconcile"
)]
pub(crate) struct Args {
    /// TORQUE's home [default: torque.toml pbs_home, else $PBS_HOME, else /var/spool/torque].
    #[arg(long, value_name = "DIR")]
    pbs_home: Option<PathBuf>,
    /// cder.toml [default: $CDER_CONFIG, else /etc/cder/cder.toml].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (config, settings) =
        match (Config::load(args.config.as_deref()), TorqueSettings::load(&TorqueSettings::resolve_path())) {
            (Ok(c), Ok(s)) => {
                s.print_warnings("cder-torque-reconcile");
                (c, s)
            }
            (Err(e), _) => {
                eprintln!("cder-torque-reconcile: {e}");
                return ExitCode::from(2);
            }
            (_, Err(e)) => {
                eprintln!("cder-torque-reconcile: {e}");
                return ExitCode::from(2);
            }
        };
    let home = args
        .pbs_home
        .or(settings.pbs_home.clone())
        .or_else(|| std::env::var_os("PBS_HOME").filter(|h| !h.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| "/var/spool/torque".into());
    match run(&config, &PbsHome(home), Duration::from_secs(settings.cderd_timeout_s)) {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cder-torque-reconcile: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(config: &Config, home: &PbsHome, timeout: Duration) -> anyhow::Result<Vec<String>> {
    let mut client = Client::connect(&config.node.socket, timeout)?;
    let as_of = generation(&mut client).context("reading cderd's generation")?;
    let live = snapshot(home).with_context(|| {
        format!("listing the jobs pbs_mom holds in {}; nothing released", home.jobs_dir().display())
    })?;
    let done = release_stale(&mut client, live, as_of)?;
    Ok(done.released.iter().map(|j| format!("released {j}")).collect())
}
