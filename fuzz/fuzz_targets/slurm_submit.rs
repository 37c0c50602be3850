//! job_submit_cder.so's translation (`cder_slurm::job_submit::translate`):
//! a job's `--cder`, `--gpgpu-per-node`, `--gpgpu-min-memory` options (in
//! `spank_job_env`), the JDL keys a CE put into its environment, and its
//! `tres_per_node`, all written by the user; and `slurm.conf`'s GRES lines
//! (`NodeGres::parse`). Input lines: `tres=VALUE` sets tres_per_node,
//! `env:K=V` is an environment entry, `conf:LINE` a slurm.conf line, any
//! other line a spank_job_env entry. A request must become GRES or a
//! refusal, never a panic; the GRES written must be a fixed point
//! (translating the job again, as `job_modify` does, changes nothing).
#![no_main]

use cder_slurm::gres::NodeGres;
use cder_slurm::job_submit::{translate, Submission};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut sub = Submission::default();
    let mut conf = String::from("NodeName=DEFAULT Gres=gpu:2\nNodeName=n[1-4] Gres=gpu:4,fpga:1\n");
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("tres=") {
            sub.tres_per_node = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("env:") {
            sub.environment.push(v.to_string());
        } else if let Some(v) = line.strip_prefix("conf:") {
            // No Include: the parser would read files named by the input.
            if !v.trim_start().to_ascii_lowercase().starts_with("include") {
                conf.push_str(v);
                conf.push('\n');
            }
        } else {
            sub.spank_job_env.push(line.to_string());
        }
    }
    let Ok(nodes) = NodeGres::parse(&conf, std::path::Path::new("/nonexistent")) else { return };
    if let Ok(Some(tres)) = translate(&sub, &nodes) {
        let again = Submission { tres_per_node: Some(tres.clone()), ..sub.clone() };
        assert_eq!(translate(&again, &nodes), Ok(Some(tres.clone())), "translating {tres:?} again changed it");
    }
});
