//! Inputs the `slurm_submit` fuzz target (fuzz/, docs/fuzzing.md) found,
//! through the public API job_submit_cder.so uses: each must give an
//! answer, never an overflow panic (which slurmctld's plugin would turn
//! into a refused job) or a wrapped count (in release builds).

use std::path::Path;

use crate::gres::NodeGres;
use crate::job_submit::{translate, Submission};

/// `Gres=gpu:17777777777777777777g`: the G suffix multiplied past u64.
#[test]
fn gres_count_with_suffix_past_u64_is_not_a_count() {
    let nodes =
        NodeGres::parse("NodeName=big Gres=gpu:17777777777777777777g\nNodeName=n1 Gres=gpu:4\n", Path::new("/"))
            .unwrap();
    // Unreadable like any count past u64: the node's other lines decide.
    assert_eq!(nodes.max_per_node.get("gpu"), Some(&4));
    let sub = Submission { spank_job_env: vec!["CDER_GPGPU_PER_NODE=1".into()], ..Submission::default() };
    assert!(translate(&sub, &nodes).unwrap().is_some());
    let too_many = Submission { spank_job_env: vec!["CDER_GPGPU_PER_NODE=5".into()], ..Submission::default() };
    assert!(translate(&too_many, &nodes).unwrap_err().contains("at most 4"), "{:?}", translate(&too_many, &nodes));
}

/// Items of one node line that add up past u64 saturate: no request is
/// refused as too many for that node (SLURM itself decides). One item of
/// 2^64 - 1 is SLURM's NO_VAL64, no count at all (`cder_request::gres`),
/// so the largest count SLURM takes is the one that overflows here.
#[test]
fn gres_items_past_u64_saturate() {
    let nodes = NodeGres::parse("NodeName=n1 Gres=gpu:a:18446744073709551614,gpu:b:2\n", Path::new("/")).unwrap();
    assert_eq!(nodes.max_per_node.get("gpu"), Some(&u64::MAX));
    let sub = Submission { spank_job_env: vec!["CDER_GPGPU_PER_NODE=4096".into()], ..Submission::default() };
    assert!(translate(&sub, &nodes).unwrap().is_some());
}

/// `Gres=gpu:a:18446744073709551615` is SLURM's NO_VAL64: refused as a
/// count, as slurmctld refuses it, so the node's other items decide.
#[test]
fn no_val64_is_no_count() {
    let nodes = NodeGres::parse("NodeName=n1 Gres=gpu:a:18446744073709551615,gpu:b:2\n", Path::new("/")).unwrap();
    assert_eq!(nodes.max_per_node.get("gpu"), Some(&2));
}
