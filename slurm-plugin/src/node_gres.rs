//! The GPU GRES a job holds on each node, as the controller validated them,
//! carried to the job prolog so that it need not ask slurmctld.
//!
//! SLURM gives the job prolog `SLURM_JOB_GPUS` built from the job's last
//! GRES record only (22.05 to 26.05: `gres_g_prep_set_env` lets each
//! record overwrite it), and no count of a shard job's shares. Where the
//! job's GPU and shard GRES are all per node (`tres_per_node`) and form at
//! most one record, that variable is the whole grant, and the shares are
//! the per-node count asked. `job_submit_cder.so` writes what it validated
//! into the job's SPANK job-control environment ([`NODE_GRES`]), which
//! slurmctld hands every prolog as `SPANK_CDER_NODE_GRES` and which no one
//! can change after submit (slurmctld copies it only when the job is
//! made); any value the submitter put there is removed first. Updates
//! that would make it stale are refused by [`check_stamped_update`]. A job
//! without the stamp (submitted before cder, or asking per job, task or
//! socket) is asked about as before.

use crate::gres::{gres_name, typed_tres_entries};
use crate::request::GPGPU;
use cder_request::lrms::SHARD_GRES;

/// The job-control variable: the job's GPU and shard entries of
/// `tres_per_node` (`gres/gpu:a100:1`, `gres/shard:2`, or empty for none).
pub const NODE_GRES: &str = "CDER_NODE_GRES";
/// How the prolog sees it (SLURM prefixes every job-control variable).
pub const PROLOG_NODE_GRES: &str = "SPANK_CDER_NODE_GRES";

/// Is `gres` one of the two the stamp describes?
fn counted(gres: &str) -> bool {
    gres == gres_name(GPGPU) || gres == SHARD_GRES
}

/// The stamp for a job's final GRES request: `None` when a GPU or shard
/// GRES is asked per job, task or socket (the scheduler then decides the
/// count per node, which only the controller's record says).
pub fn stamp(
    tres_per_node: Option<&str>,
    tres_per_job: Option<&str>,
    tres_per_task: Option<&str>,
    tres_per_socket: Option<&str>,
) -> Option<String> {
    let elsewhere = [tres_per_job, tres_per_task, tres_per_socket]
        .into_iter()
        .flatten()
        .any(|t| typed_tres_entries(t).iter().any(|(g, _, n)| counted(g) && *n > 0));
    if elsewhere {
        return None;
    }
    let entries: Vec<String> = typed_tres_entries(tres_per_node.unwrap_or(""))
        .into_iter()
        .filter(|(g, _, n)| counted(g) && *n > 0)
        .map(|(g, t, n)| match t {
            Some(t) => format!("gres/{g}:{t}:{n}"),
            None => format!("gres/{g}:{n}"),
        })
        .collect();
    Some(entries.join(","))
}

/// A job-control environment without any [`NODE_GRES`] the submitter set
/// (either spelling: slurmd prefixes only what lacks `SPANK_`).
pub fn without_stamp(spank_job_env: &[String]) -> Vec<String> {
    // MUTATION forged-stamp (test builds only): keep what the submitter wrote.
    if cder_model::mutation::on("forged-stamp") {
        return spank_job_env.to_vec();
    }
    spank_job_env
        .iter()
        .filter(|e| {
            let name = e.split('=').next().unwrap_or("");
            name != NODE_GRES && name != PROLOG_NODE_GRES
        })
        .cloned()
        .collect()
}

/// What the prolog reads from the stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeGres {
    /// GPU and shard records on the node: at most one makes the prolog's
    /// `SLURM_JOB_GPUS` the whole grant.
    pub records: usize,
    /// Shares per node (0: none).
    pub shards: u64,
}

impl NodeGres {
    /// Reads the stamp's value; `None` for one this module did not write.
    pub fn read(value: &str) -> Option<NodeGres> {
        let mut out = NodeGres { records: 0, shards: 0 };
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let entries = typed_tres_entries(item);
            let [(gres, gres_type, count)] = <[_; 1]>::try_from(entries).ok()?;
            let canonical = match &gres_type {
                Some(t) => format!("gres/{gres}:{t}:{count}"),
                None => format!("gres/{gres}:{count}"),
            };
            let plain_type =
                gres_type.as_deref().is_none_or(|t| t.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)));
            if !counted(&gres) || count == 0 || canonical != item || !plain_type {
                return None;
            }
            out.records += 1;
            if gres == SHARD_GRES {
                out.shards = out.shards.checked_add(count)?;
            }
        }
        Some(out)
    }

    /// `SLURM_JOB_GPUS` names every GPU the job has on the node.
    pub fn job_gpus_complete(&self) -> bool {
        self.records <= 1
    }
}

/// An update (`scontrol update job`) that would part a stamped job from
/// what its prolog will read: shares changed, several GPU records, or a
/// GPU or shard GRES moved to per job, task or socket. Refused for
/// everyone, operators too: the stamp is fixed when the job is made.
pub fn check_stamped_update(
    tres_per_node: Option<&str>,
    tres_per_job: Option<&str>,
    tres_per_task: Option<&str>,
    tres_per_socket: Option<&str>,
) -> Result<(), String> {
    let fixed = "a job's GPU shares and GRES records are fixed when it is submitted; cancel it and submit it again";
    for (field, value) in
        [("TresPerJob", tres_per_job), ("TresPerTask", tres_per_task), ("TresPerSocket", tres_per_socket)]
    {
        if let Some(v) = value.filter(|v| typed_tres_entries(v).iter().any(|(g, _, _)| counted(g))) {
            return Err(format!("cder: {field}={v}: {fixed}"));
        }
    }
    if let Some(update) = tres_per_node {
        let entries = typed_tres_entries(update);
        let records = entries.iter().filter(|(g, _, _)| counted(g)).count();
        if entries.iter().any(|(g, _, _)| g == SHARD_GRES) || records > 1 {
            return Err(format!("cder: TresPerNode={update}: {fixed}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_is_the_per_node_gpu_and_shard_entries() {
        assert_eq!(stamp(Some("gres/gpu:2,gres/fpga:1"), None, None, None).as_deref(), Some("gres/gpu:2"));
        assert_eq!(
            stamp(Some("gres:gpu:a100:1,gres:shard:3"), None, None, None).as_deref(),
            Some("gres/gpu:a100:1,gres/shard:3")
        );
        assert_eq!(stamp(None, None, None, None).as_deref(), Some(""));
        assert_eq!(stamp(Some("gres/gpu:1"), Some("gres/gpu:2"), None, None), None);
        assert_eq!(stamp(None, None, Some("gres/shard:1"), None), None);
        assert_eq!(stamp(None, None, None, Some("gres/gpu:1")), None);
        // Other GRES per job leave the GPUs per node.
        assert_eq!(stamp(Some("gres/gpu:1"), Some("gres/fpga:2,cpu=4"), None, None).as_deref(), Some("gres/gpu:1"));
    }

    #[test]
    fn the_prolog_reads_records_and_shares() {
        assert_eq!(NodeGres::read(""), Some(NodeGres { records: 0, shards: 0 }));
        assert_eq!(NodeGres::read("gres/gpu:a100:2"), Some(NodeGres { records: 1, shards: 0 }));
        assert_eq!(NodeGres::read("gres/shard:3"), Some(NodeGres { records: 1, shards: 3 }));
        let two = NodeGres::read("gres/gpu:1g.10gb:1,gres/gpu:2g.20gb:1").unwrap();
        assert_eq!(two.records, 2);
        assert!(!two.job_gpus_complete());
        // Only what `stamp` writes is read.
        for bad in ["gres/fpga:1", "gres/gpu:0", "gpu:1", "gres/gpu:1 gres/gpu:2", "gres/shard:99999999999999999999"] {
            assert_eq!(NodeGres::read(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_submitters_own_stamp_is_removed_in_either_spelling() {
        let env: Vec<String> =
            ["CDER_GPGPU_PER_NODE=2", "CDER_NODE_GRES=gres/shard:1", "SPANK_CDER_NODE_GRES=", "CDER_NODE_GRESX=1"]
                .map(String::from)
                .to_vec();
        assert_eq!(without_stamp(&env), vec!["CDER_GPGPU_PER_NODE=2".to_string(), "CDER_NODE_GRESX=1".to_string()]);
    }

    #[test]
    fn updates_that_would_stale_the_stamp_are_refused() {
        assert!(check_stamped_update(Some("gres/gpu:2"), None, None, None).is_ok());
        assert!(check_stamped_update(None, None, None, None).is_ok());
        assert!(check_stamped_update(Some("gres/fpga:1"), Some("cpu=2"), None, None).is_ok());
        let e = check_stamped_update(Some("gres/shard:4"), None, None, None).unwrap_err();
        assert!(e.contains("TresPerNode=gres/shard:4") && e.contains("fixed"), "{e}");
        assert!(check_stamped_update(Some("gres/gpu:a:1,gres/gpu:b:1"), None, None, None).is_err());
        let e = check_stamped_update(None, Some("gres/gpu:2"), None, None).unwrap_err();
        assert!(e.starts_with("cder: TresPerJob=gres/gpu:2"), "{e}");
        assert!(check_stamped_update(None, None, Some("gres/shard:1"), None).is_err());
        assert!(check_stamped_update(None, None, None, Some("gres/gpu:1")).is_err());
    }
}
