//! The cluster a workload is replayed on: nodes with cores, memory and
//! GPUs (model, NUMA node), grouped by nearness (a switch, a chassis), and
//! the batch system's defaults. Read from `cluster.toml`, from Alibaba's
//! node list, or built in code for the seeds' platforms.
//!
//! ```toml
//! [[nodes]]
//! names = "wn[1-5]"     # a SLURM hostlist
//! cores = 8
//! memory_mib = 32768    # optional; 0 or absent: memory is not counted
//! gpus = 2
//! gpu_model = "GTS450"
//! gpu_numa = [0, 1]     # optional: the NUMA node of each GPU
//! group = 0             # optional: nodes of one group are near each other
//!
//! [scheduler]           # optional: the defaults each --policy overrides
//! queue = "fcfs"        # fcfs | first-fit | easy | conservative
//! node = "least-loaded" # first-fit | least-loaded | best-fit | random-fit | rank:EXPR
//! devices = "locality"  # cderd's [node] selection: locality | first
//! gpus = "physical"     # physical | vgpgpu (every GPU a registry backend)
//! registry = "local-first" # [registry] policy: random | local-first | spread
//! dispatch = "17.41s"   # start cost of a job on physical GPUs
//! vgpgpu_dispatch = "7.72s" # … and on vGPGPUs
//! estimates = "runtime" # runtime | requested: what backfilling plans with
//! ```

use std::path::Path;

use cder_model::config::{from_toml, read_text};
use cder_request::hostlist::Hostlist;
use serde::Deserialize;

use crate::read::alibaba::read_table;
use crate::read::error::{LineErrors, OnBadLine, TraceError};

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its model (`V100M32`, `GTS450`).
    pub model: String,
    /// Its NUMA node on the node (cderd's locality domain).
    pub numa: u32,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its host name.
    pub name: String,
    /// Cores.
    pub cores: u32,
    /// Memory in MiB; 0: not counted.
    pub mem_mib: u64,
    /// Its GPUs, by index.
    pub gpus: Vec<Gpu>,
    /// Its group: nodes of one group are near each other (one switch).
    pub group: u32,
}

/// The batch system's settings: how the queue is served and who answers
/// each placement question. Each `--policy` overrides some of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scheduler {
    /// How the queue is served: `fcfs` (in order, the head blocks),
    /// `first-fit` (every job that fits, in order), `easy` (EASY
    /// backfilling), `conservative` (conservative backfilling).
    pub queue: String,
    /// Which nodes a job gets: `first-fit`, `least-loaded`, `best-fit`,
    /// `random-fit`, `locality` (cderd's policy over nodes, groups as
    /// domains), or `rank:EXPR` (phase 1's ClassAd Rank of each node).
    pub node: String,
    /// cderd's device selection (`[node] selection`): `locality`, `first`.
    pub devices: String,
    /// `physical` (a job's GPUs on its node) or `vgpgpu` (every GPU a
    /// backend of the registry; a job's GPUs from anywhere).
    pub gpus: String,
    /// The registry's policy (`[registry] policy`): `random`,
    /// `local-first`, `spread`.
    pub registry: String,
    /// What a job's start costs on physical GPUs (held like run time).
    pub dispatch: String,
    /// What a job's start costs on vGPGPUs.
    pub vgpgpu_dispatch: String,
    /// What backfilling plans with: `runtime` (the measured run time, as
    /// seed 002 does) or `requested` (the job's time limit, as SLURM does).
    pub estimates: String,
    /// How many queued jobs one backfilling pass looks at.
    pub backfill_depth: usize,
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler {
            queue: "easy".into(),
            node: "first-fit".into(),
            devices: "locality".into(),
            gpus: "physical".into(),
            registry: "local-first".into(),
            dispatch: "0s".into(),
            vgpgpu_dispatch: "0s".into(),
            estimates: "runtime".into(),
            backfill_depth: 1000,
        }
    }
}

/// A cluster and its batch system's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cluster {
    /// The nodes, in the batch system's order.
    pub nodes: Vec<Node>,
    /// The scheduler's defaults.
    pub scheduler: Scheduler,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    nodes: Vec<NodeTable>,
    #[serde(default)]
    scheduler: Scheduler,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeTable {
    names: String,
    cores: u32,
    #[serde(default)]
    memory_mib: u64,
    #[serde(default)]
    gpus: u32,
    #[serde(default)]
    gpu_model: String,
    #[serde(default)]
    gpu_numa: Option<Vec<u32>>,
    #[serde(default)]
    group: u32,
}

impl Cluster {
    /// `count` identical nodes `{prefix}{1..}` in one group.
    pub fn uniform(prefix: &str, count: u32, cores: u32, gpus: u32, model: &str) -> Cluster {
        let nodes = (1..=count)
            .map(|i| Node {
                name: format!("{prefix}{i}"),
                cores,
                mem_mib: 0,
                gpus: (0..gpus).map(|_| Gpu { model: model.into(), numa: 0 }).collect(),
                group: 0,
            })
            .collect();
        Cluster { nodes, scheduler: Scheduler::default() }
    }

    /// Reads `cluster.toml`; errors name the file, line and key.
    pub fn load(path: &Path) -> Result<Cluster, String> {
        let text = read_text(path).map_err(|e| e.to_string())?;
        let file: File = from_toml(&text, path).map_err(|e| e.to_string())?;
        let mut nodes = Vec::new();
        for (i, t) in file.nodes.iter().enumerate() {
            let at = |m: String| format!("{}: nodes[{i}] ({}): {m}", path.display(), t.names);
            let names = Hostlist::HOSTS.expand(&t.names).map_err(|e| at(e.to_string()))?;
            if t.cores == 0 {
                return Err(at("cores must be at least 1".into()));
            }
            if let Some(numa) = &t.gpu_numa {
                if numa.len() != t.gpus as usize {
                    return Err(at(format!("gpu_numa names {} NUMA nodes for {} GPUs", numa.len(), t.gpus)));
                }
            }
            for name in names {
                let gpus = (0..t.gpus)
                    .map(|g| Gpu { model: t.gpu_model.clone(), numa: t.gpu_numa.as_ref().map_or(0, |n| n[g as usize]) })
                    .collect();
                nodes.push(Node { name, cores: t.cores, mem_mib: t.memory_mib, gpus, group: t.group });
            }
        }
        if nodes.is_empty() {
            return Err(format!("{}: no nodes", path.display()));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = nodes.iter().find(|n| !seen.insert(n.name.as_str())) {
            return Err(format!("{}: node {} is listed twice", path.display(), dup.name));
        }
        Ok(Cluster { nodes, scheduler: file.scheduler })
    }

    /// Reads Alibaba's node list (`openb_node_list_*.csv`: `sn`,
    /// `cpu_milli`, `memory_mib`, `gpu`, `model`). Cores are whole
    /// (`cpu_milli` / 1000, rounded down); the trace names no NUMA nodes.
    pub fn from_alibaba(path: &Path, rule: OnBadLine) -> Result<Cluster, TraceError> {
        let mut errors = LineErrors::new(path, rule);
        let table = read_table(path, &mut errors, None)?;
        let (sn, cpu, mem, gpu) = (
            table.column(path, "sn")?,
            table.column(path, "cpu_milli")?,
            table.column(path, "memory_mib")?,
            table.column(path, "gpu")?,
        );
        let model = table.find("model");
        let mut nodes = Vec::new();
        for (line, f) in &table.rows {
            let mut values = [0u64; 3];
            let mut bad = false;
            for (slot, col) in [cpu, mem, gpu].into_iter().enumerate() {
                match f[col].parse::<u64>() {
                    Ok(v) => values[slot] = v,
                    Err(_) => {
                        errors.bad(*line, table.columns[col].clone(), format!("{:?} is not a whole number", f[col]))?;
                        bad = true;
                        break;
                    }
                }
            }
            if bad {
                continue;
            }
            let [cpu_milli, mem_mib, gpus] = values;
            let model = model.map(|c| f[c].clone()).unwrap_or_default();
            nodes.push(Node {
                name: f[sn].clone(),
                cores: u32::try_from(cpu_milli / 1000).unwrap_or(u32::MAX),
                mem_mib,
                gpus: (0..gpus).map(|_| Gpu { model: model.clone(), numa: 0 }).collect(),
                group: 0,
            });
        }
        if nodes.is_empty() {
            return Err(TraceError::format(path, "no nodes"));
        }
        Ok(Cluster { nodes, scheduler: Scheduler::default() })
    }

    /// GPUs in all.
    pub fn gpus(&self) -> usize {
        self.nodes.iter().map(|n| n.gpus.len()).sum()
    }

    /// Cores in all.
    pub fn cores(&self) -> u64 {
        self.nodes.iter().map(|n| n.cores as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_cluster_file_and_its_errors() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(
            f,
            "[[nodes]]\nnames = \"wn[1-2]\"\ncores = 8\ngpus = 2\ngpu_model = \"GTS450\"\ngpu_numa = [0, 1]\n\
             [[nodes]]\nnames = \"cpu1\"\ncores = 16\ngroup = 1\n[scheduler]\nqueue = \"fcfs\"\n"
        )
        .unwrap();
        let c = Cluster::load(f.path()).unwrap();
        assert_eq!(c.nodes.len(), 3);
        assert_eq!((c.gpus(), c.cores(), c.nodes[0].gpus[1].numa, c.nodes[2].group), (4, 32, 1, 1));
        assert_eq!((c.scheduler.queue.as_str(), c.scheduler.node.as_str()), ("fcfs", "first-fit"));
        let mut bad = tempfile::NamedTempFile::new().unwrap();
        write!(bad, "[[nodes]]\nnames = \"wn1\"\ncores = 8\ngpu = 2\n").unwrap();
        let e = Cluster::load(bad.path()).unwrap_err();
        assert!(e.contains(":4:") && e.contains("gpu"), "{e}");
    }
}
