//! `cder-torque-submit-filter`: qsub's SUBMITFILTER. Translates
//! `GPGPUPerNode=N` into the site's TORQUE or MAUI directive.

use std::io::{Read, Write};
use std::process::ExitCode;

use cder_torque::filter::filter;
use cder_torque::settings::TorqueSettings;

// argv is qsub's own command line, so it is read by hand, not by clap.
pub(crate) const HELP: &str = "\
cder-torque-submit-filter — translate GPGPUPerNode=N for TORQUE/MAUI

USAGE (by qsub):
    cder-torque-submit-filter [QSUB ARGUMENTS...] < job-script > filtered-script

Set in torque.cfg (on every submit host):

    SUBMITFILTER /usr/libexec/cder/cder-torque-submit-filter

qsub pipes the job script to it, passes its own arguments, and submits
what it prints. It finds the grid's device request GPGPUPerNode=N in
`qsub -v`, in `#PBS -v` directives, or in a `#CDER GPGPUPerNode=N` line
(only before the script's first command, as qsub reads directives), and
writes the site's directive into the script:

    directive = \"native\"   #PBS -l nodes=1:ppn=P:gpus=N, or :gpus=N added
                           to each part of the job's own nodes= request
    directive = \"maui\"     #PBS -W x=GRES:gpus@N (MAUI consumable-resource
                           patch) and #PBS -l other=cder:gpgpu:N for the prologue

A script without a request passes through unchanged. A bad or
contradictory request is refused with a message on stderr, which qsub
shows the user.

FILES:
    /etc/cder/torque.toml   [torque] directive, default_ppn, maui_gres,
                            max_per_node ($CDER_TORQUE_CONFIG if set)

EXIT STATUS:
    0  the (filtered) script is on stdout
    1  the settings file cannot be read, or stdin/stdout failed
    2  the request is bad: qsub refuses the job";

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    match argv.first().map(String::as_str) {
        Some("--help") => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Some("--version") => {
            println!("cder-torque-submit-filter {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    // Read the whole script first, whatever happens next: qsub writes it
    // into a pipe and must not meet a closed one.
    let mut script = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut script) {
        eprintln!("cder: reading the job script: {e}");
        return ExitCode::from(1);
    }
    let settings = match TorqueSettings::load(&TorqueSettings::resolve_path()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cder: {e}");
            return ExitCode::from(1);
        }
    };
    let env = |name: &str| std::env::var(name).ok();
    match filter(&script, &argv, &env, &settings) {
        Ok(out) => {
            for n in &out.notes {
                eprintln!("cder: {n}");
            }
            // vGPGPU jobs wait on hold for cder-torque-monitor.
            let script = match cder_torque::hold::hold_script(&out.script, &out.variables, &out.prefix) {
                Ok(held) => held.unwrap_or(out.script),
                Err(e) => {
                    eprintln!("cder: job refused: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = stdout.write_all(&script).and_then(|_| stdout.flush()) {
                eprintln!("cder: writing the job script: {e}");
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(r) => {
            eprintln!("cder: job refused: {r}");
            ExitCode::from(2)
        }
    }
}
