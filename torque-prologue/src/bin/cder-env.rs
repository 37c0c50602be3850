//! `cder-env`: the visible-device variables of the current TORQUE job.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use cder_model::Config;
use cder_torque::shell::sh_exports;
use cder_torque::starter::{fallback_config, fetch};

/// Print the visible-device variables of a TORQUE job.
#[derive(Parser, Debug)]
#[command(
    name = "cder-env",
    version,
    about = "Print the visible-device variables (CUDA_VISIBLE_DEVICES …) of the current TORQUE job",
    long_about = "cder-env asks cderd for the devices of the TORQUE job torque:$PBS_JOBID (or --job) and \
prints the variables that make them, and only them, visible: CUDA_VISIBLE_DEVICES with \
CUDA_DEVICE_ORDER=PCI_BUS_ID for NVIDIA, ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / \
GPU_DEVICE_ORDINAL for AMD, and so on for every configured type. cderd answers only the job's \
own user.\n\n\
It is for sites that do not set pbs_mom's $job_starter to cder-job-starter, and for users who \
want to see their devices. With --shell the output is meant for eval: the variables are \
exported and made read-only, as the seed thesis did, so that a job cannot widen its own list.\n\n\
Whatever happens, the output is a complete, safe environment: a job without devices, another \
user's job, or an unreachable cderd yields the empty list for each type (never \"all devices\"), \
with the reason on stderr and a non-zero exit status.",
    after_help = "EXAMPLES:\n    eval \"$(cder-env --shell)\"          # in a job script\n    cder-env                              # KEY=VALUE lines\n    cder-env --job 17.ce.example.org      # another of your jobs\n\n\
EXIT STATUS:\n    0  cderd answered (the job's devices, or none)\n    1  cderd could not be asked, or the job is not yours (empty lists printed)\n    2  bad usage, job id or configuration (empty lists printed)"
)]
pub(crate) struct Args {
    /// Print `NAME='value'; export NAME; readonly NAME` lines for eval.
    #[arg(long)]
    shell: bool,
    /// With --shell: leave the variables writable.
    #[arg(long, requires = "shell")]
    writable: bool,
    /// The TORQUE job id [default: $PBS_JOBID].
    #[arg(long, value_name = "JOBID")]
    job: Option<String>,
    /// Configuration file [default: /etc/cder/cder.toml; $CDER_CONFIG is not read].
    #[arg(long, value_name = "FILE", default_value = cder_model::DEFAULT_CONFIG_PATH)]
    config: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut status = 0u8;
    // Never $CDER_CONFIG: the job sets its own environment (qsub -v).
    let config = Config::load(Some(&args.config)).unwrap_or_else(|e| {
        eprintln!("cder-env: {e}");
        status = 2;
        let mut fallback = fallback_config();
        fallback.node.socket = "/nonexistent".into();
        fallback
    });
    let job = args.job.or_else(|| std::env::var("PBS_JOBID").ok());
    // cder-env prints; it does not confine (its caller's shell would not be
    // in the cgroup anyway): for sites without the job starter.
    let fetched = fetch(&config, job.as_deref(), Duration::from_secs(20), cder_torque::settings::Confine::Off);
    if let Some(note) = &fetched.note {
        eprintln!("cder-env: {note}");
        if status == 0 {
            status = if fetched.job.is_none() { 2 } else { 1 };
        }
    }
    if args.shell {
        match sh_exports(&fetched.env, !args.writable) {
            Ok(text) => print!("{text}"),
            Err(e) => {
                eprintln!("cder-env: {e} (check visible_env in the config)");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", fetched.env.to_lines());
    }
    ExitCode::from(status)
}
