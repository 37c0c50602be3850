//! What is free on the cluster at one instant, and what a job holds.

use crate::cluster::Cluster;

/// Thousandths of a GPU in a whole one.
pub const WHOLE: u32 = 1000;

/// What a job holds on one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Part {
    /// The node.
    pub node: u32,
    /// Cores.
    pub cores: u32,
    /// Memory, MiB.
    pub mem_mib: u64,
    /// Whole GPUs, by index.
    pub gpus: Vec<u32>,
    /// A share: (GPU index, thousandths).
    pub share: Option<(u32, u32)>,
}

/// A vGPGPU backend a job holds: a whole GPU somewhere, used from `frontend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend {
    /// The GPU's node.
    pub node: u32,
    /// The GPU's index there.
    pub gpu: u32,
    /// The node of the job's part that uses it.
    pub frontend: u32,
}

/// Everything one job holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    /// Per node.
    pub parts: Vec<Part>,
    /// vGPGPU backends.
    pub backends: Vec<Backend>,
}

impl Placement {
    /// Thousandths of GPU held in all (whole GPUs, shares, backends).
    pub fn gpu_milli(&self) -> u64 {
        let on_nodes: u64 =
            self.parts.iter().map(|p| p.gpus.len() as u64 * WHOLE as u64 + p.share.map_or(0, |(_, m)| m as u64)).sum();
        on_nodes + self.backends.len() as u64 * WHOLE as u64
    }
}

/// Free resources, per node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// Free cores.
    pub free_cores: Vec<u32>,
    /// Free memory (MiB; nodes with 0 do not count memory).
    pub free_mem: Vec<u64>,
    /// Thousandths free of each GPU ([`WHOLE`]: free), node after node
    /// (flat, so that a copy of the state is a few `memcpy`s).
    gpu_free: Vec<u32>,
    /// Where each node's GPUs start in `gpu_free` (one more: the end).
    gpu_base: Vec<u32>,
    /// Jobs running on each node (parts there).
    pub jobs_on: Vec<u32>,
    /// Jobs holding backends on each node.
    pub backend_jobs: Vec<u32>,
    /// Free cores in all.
    pub free_cores_total: u64,
}

impl State {
    /// All of `cluster` free.
    pub fn new(cluster: &Cluster) -> State {
        State {
            free_cores: cluster.nodes.iter().map(|n| n.cores).collect(),
            free_mem: cluster.nodes.iter().map(|n| n.mem_mib).collect(),
            gpu_free: vec![WHOLE; cluster.gpus()],
            gpu_base: std::iter::once(0)
                .chain(cluster.nodes.iter().scan(0u32, |at, n| {
                    *at += n.gpus.len() as u32;
                    Some(*at)
                }))
                .collect(),
            jobs_on: vec![0; cluster.nodes.len()],
            backend_jobs: vec![0; cluster.nodes.len()],
            free_cores_total: cluster.cores(),
        }
    }

    /// Thousandths free of node `n`'s GPUs, by index.
    pub fn gpus(&self, n: usize) -> &[u32] {
        &self.gpu_free[self.gpu_base[n] as usize..self.gpu_base[n + 1] as usize]
    }

    /// Thousandths free of every GPU, node after node.
    pub fn all_gpus(&self) -> &[u32] {
        &self.gpu_free
    }

    fn gpu_mut(&mut self, n: usize, g: u32) -> &mut u32 {
        &mut self.gpu_free[self.gpu_base[n] as usize + g as usize]
    }

    /// Takes what `p` holds.
    pub fn take(&mut self, p: &Placement) {
        for part in &p.parts {
            let n = part.node as usize;
            self.free_cores[n] -= part.cores;
            self.free_cores_total -= part.cores as u64;
            self.free_mem[n] = self.free_mem[n].saturating_sub(part.mem_mib);
            for &g in &part.gpus {
                *self.gpu_mut(n, g) = 0;
            }
            if let Some((g, m)) = part.share {
                *self.gpu_mut(n, g) -= m;
            }
            self.jobs_on[n] += 1;
        }
        let mut hosts: Vec<u32> = p.backends.iter().map(|b| b.node).collect();
        hosts.sort_unstable();
        hosts.dedup();
        for b in &p.backends {
            *self.gpu_mut(b.node as usize, b.gpu) = 0;
        }
        for h in hosts {
            self.backend_jobs[h as usize] += 1;
        }
    }

    /// Undoes [`State::take`] of `p` (memory included, with no cluster to
    /// bound it: the inverse of a take, not a release).
    pub fn give_back(&mut self, p: &Placement) {
        self.release(p, None);
    }

    /// Gives back what `p` held.
    pub fn give(&mut self, p: &Placement, cluster: &Cluster) {
        self.release(p, Some(cluster));
    }

    fn release(&mut self, p: &Placement, cluster: Option<&Cluster>) {
        for part in &p.parts {
            let n = part.node as usize;
            self.free_cores[n] += part.cores;
            self.free_cores_total += part.cores as u64;
            self.free_mem[n] += part.mem_mib;
            if let Some(c) = cluster {
                self.free_mem[n] = self.free_mem[n].min(c.nodes[n].mem_mib);
            }
            for &g in &part.gpus {
                *self.gpu_mut(n, g) = WHOLE;
            }
            if let Some((g, m)) = part.share {
                *self.gpu_mut(n, g) += m;
            }
            self.jobs_on[n] -= 1;
        }
        let mut hosts: Vec<u32> = p.backends.iter().map(|b| b.node).collect();
        hosts.sort_unstable();
        hosts.dedup();
        for b in &p.backends {
            *self.gpu_mut(b.node as usize, b.gpu) = WHOLE;
        }
        for h in hosts {
            self.backend_jobs[h as usize] -= 1;
        }
    }
}
