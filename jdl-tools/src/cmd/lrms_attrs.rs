//! `cder-jdl lrms-attrs`: the CE-side drop-in BLAH's
//! `*_local_submit_attributes.sh` runs; it prints batch directives.

use crate::cmd::{read_job, Failure};
use crate::lrms::{directives, EnvSource, JobResources, Lrms, PbsGpus, Settings};

/// Arguments of `lrms-attrs`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The batch system: slurm or pbs (TORQUE).
    #[arg(long, value_parser = ["slurm", "pbs"])]
    pub lrms: String,
    /// Read the attributes from a JDL file (`-` for standard input).
    #[arg(long, value_name = "FILE", conflicts_with = "from_env", required_unless_present = "from_env")]
    pub jdl: Option<String>,
    /// Read the attributes from the environment, as BLAH exports them (GPGPUPerNode=2, …).
    #[arg(long)]
    pub from_env: bool,
    /// TORQUE GPU request style: native (nodes=…:gpus=N) or maui (-W x=GRES:gpus@N).
    #[arg(long, env = "CDER_PBS_GPUS", default_value = "native", value_parser = ["native", "maui"])]
    pub pbs_gpus: String,
    /// SLURM GRES name of GPGPUs.
    #[arg(long, default_value = "gpu", value_name = "NAME")]
    pub gres: String,
    /// MAUI generic-resource name of GPGPUs (--pbs-gpus maui).
    #[arg(long, default_value = "gpus", value_name = "NAME")]
    pub maui_gres: String,
    /// SLURM licence that counts vGPGPU backends (default: vgpgpu, the licence job_submit_cder.so counts).
    #[arg(long, value_name = "NAME")]
    pub licence: Option<String>,
}

/// Runs `lrms-attrs`.
pub fn run(args: &Args) -> Result<(), Failure> {
    let settings = Settings {
        lrms: if args.lrms == "slurm" { Lrms::Slurm } else { Lrms::Pbs },
        pbs_gpus: if args.pbs_gpus == "maui" { PbsGpus::Maui } else { PbsGpus::Native },
        gres: args.gres.clone(),
        maui_gres: args.maui_gres.clone(),
        licence: args.licence.clone(),
    };
    // These names are written into the batch script: nothing but a name may get in.
    for (option, name) in [("--gres", Some(&settings.gres)), ("--maui-gres", Some(&settings.maui_gres)), ("--licence", settings.licence.as_ref())] {
        if let Some(l) = name {
            if l.is_empty() || !l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(Failure::input(format!("{option} {l:?}: letters, digits and _ only")));
            }
        }
    }
    let resources = match &args.jdl {
        Some(path) => {
            let ad = read_job(path)?;
            JobResources::read(&ad).map_err(|e| Failure::input(format!("{path}:{e}")))?
        }
        None => JobResources::read(&EnvSource(|k: &str| std::env::var(k).ok())).map_err(|e| Failure::input(format!("environment: {e}")))?,
    };
    for line in directives(&resources, &settings) {
        println!("{line}");
    }
    Ok(())
}
