//! Where a job goes, asked of cder's own policies: which cores or devices
//! (cderd's [`SelectionPolicy`](cder_ledger::policy::SelectionPolicy)),
//! which backends (the registry's
//! [`BackendPolicy`](cder_registry::policy::BackendPolicy)), which nodes
//! (the batch system's choice, a model here, or phase 1's Rank).

use cder_ledger::policy::Candidate;
use cder_registry::policy::BackendCandidate;

use crate::cluster::Cluster;
use crate::policy::{offer_ad, rank_request, Answerers, NodeChoice, NodeOffer, Policy, ShareChoice};
use crate::rng::Rng;
use crate::state::{Backend, Part, Placement, State, WHOLE};
use crate::workload::Request;

/// Places jobs on one cluster under one policy.
pub struct Placer<'a> {
    cluster: &'a Cluster,
    policy: &'a Policy,
    answer: Answerers,
    rng: Rng,
    /// The global index of each node's first core.
    core_base: Vec<u32>,
    /// Cores of the k largest nodes together, k = 1, 2, …
    largest: Vec<u64>,
}

/// Does `model` (a GPU's) satisfy `wanted` (a job's `A|B` list)?
pub fn model_ok(wanted: Option<&str>, model: &str) -> bool {
    match wanted {
        None => true,
        Some(w) => w.split('|').any(|m| m.trim().eq_ignore_ascii_case(model)),
    }
}

impl<'a> Placer<'a> {
    /// A placer; `seed` seeds every random choice it makes (the registry's
    /// `random`, `random-fit`, `share=random`).
    pub fn new(cluster: &'a Cluster, policy: &'a Policy, seed: u64) -> Placer<'a> {
        let mut core_base = Vec::with_capacity(cluster.nodes.len());
        let mut at = 0u32;
        for n in &cluster.nodes {
            core_base.push(at);
            at = at.saturating_add(n.cores);
        }
        let mut sizes: Vec<u64> = cluster.nodes.iter().map(|n| n.cores as u64).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let largest = sizes
            .iter()
            .scan(0u64, |acc, s| {
                *acc += s;
                Some(*acc)
            })
            .collect();
        Placer {
            cluster,
            policy,
            answer: Answerers::new(policy, seed),
            rng: Rng::new(seed).fork(0x5eed),
            core_base,
            largest,
        }
    }

    /// The policy it places under.
    pub fn policy(&self) -> &Policy {
        self.policy
    }

    /// True for a job of processors anywhere (no nodes, no GPUs): whether it
    /// fits depends on the free cores in all, nothing else.
    pub fn spread_cores(req: &Request) -> bool {
        req.nodes == 0 && !req.wants_gpu()
    }

    fn vgpus(&self, req: &Request) -> u32 {
        if self.policy.vgpgpu {
            req.gpus
        } else {
            0
        }
    }

    fn node_fits(&self, req: &Request, state: &State, n: usize) -> bool {
        let node = &self.cluster.nodes[n];
        if state.free_cores[n] < req.cores || (node.mem_mib > 0 && state.free_mem[n] < req.mem_mib) {
            return false;
        }
        if self.vgpus(req) > 0 {
            return true;
        }
        let model = req.model.as_deref();
        if req.gpus > 0 {
            let free = (0..node.gpus.len())
                .filter(|&g| state.gpus(n)[g] == WHOLE && model_ok(model, &node.gpus[g].model))
                .count();
            if free < req.gpus as usize {
                return false;
            }
        }
        if req.gpu_milli > 0 {
            return (0..node.gpus.len())
                .any(|g| state.gpus(n)[g] >= req.gpu_milli && model_ok(model, &node.gpus[g].model));
        }
        true
    }

    fn free_backends(state: &State) -> usize {
        state.all_gpus().iter().filter(|&&f| f == WHOLE).count()
    }

    /// True when `req` could start now.
    pub fn fits(&self, req: &Request, state: &State) -> bool {
        if Self::spread_cores(req) {
            return state.free_cores_total >= req.cores as u64;
        }
        let nodes = req.nodes.max(1) as usize;
        let v = self.vgpus(req) as usize * nodes;
        if v > 0 && Self::free_backends(state) < v {
            return false;
        }
        let mut found = 0;
        for n in 0..self.cluster.nodes.len() {
            if self.node_fits(req, state, n) {
                found += 1;
                if found == nodes {
                    return true;
                }
            }
        }
        false
    }

    /// Places `req` now, asking cder's policies, or None when it does not fit.
    pub fn place(&mut self, req: &Request, state: &State) -> Option<Placement> {
        if Self::spread_cores(req) {
            return self.place_cores(req, state);
        }
        let count = req.nodes.max(1) as usize;
        let fitting = (0..self.cluster.nodes.len()).filter(|&n| self.node_fits(req, state, n));
        // First fit needs only the first `count` nodes that fit.
        let eligible: Vec<usize> =
            if self.policy.node == NodeChoice::FirstFit { fitting.take(count).collect() } else { fitting.collect() };
        if eligible.len() < count {
            return None;
        }
        let chosen = self.choose_nodes(req, state, eligible, count)?;
        let mut placement = Placement::default();
        // Backends taken so far, this job's included (vGPGPU jobs only).
        let mut taken: Vec<Vec<bool>> = if self.vgpus(req) > 0 {
            (0..self.cluster.nodes.len()).map(|n| state.gpus(n).iter().map(|&f| f < WHOLE).collect()).collect()
        } else {
            Vec::new()
        };
        for n in chosen {
            let node = &self.cluster.nodes[n];
            let mut part = Part { node: n as u32, cores: req.cores, mem_mib: req.mem_mib, ..Part::default() };
            let v = self.vgpus(req);
            if v > 0 {
                let backends = self.choose_backends(state, &taken, n, v)?;
                for b in &backends {
                    taken[b.node as usize][b.gpu as usize] = true;
                }
                placement.backends.extend(backends);
            } else {
                let model = req.model.as_deref();
                if req.gpus > 0 {
                    let candidates: Vec<Candidate> = (0..node.gpus.len())
                        .filter(|&g| state.gpus(n)[g] == WHOLE && model_ok(model, &node.gpus[g].model))
                        .map(|g| Candidate { index: g as u32, domain: node.gpus[g].numa })
                        .collect();
                    part.gpus = self.answer.devices.select(&candidates, req.gpus as usize)?;
                }
                if req.gpu_milli > 0 {
                    let g = self.choose_share(state, n, req.gpu_milli, model)?;
                    part.share = Some((g as u32, req.gpu_milli));
                }
            }
            placement.parts.push(part);
        }
        Some(placement)
    }

    /// Processors anywhere. With `node=locality`, cderd's selection policy
    /// chooses among every free core, each node a domain (as seed 002's
    /// allocation step does); otherwise the batch system fills nodes in its
    /// order: first-fit the lowest-numbered, least-loaded the most free
    /// cores first, best-fit the fewest free cores first (packing),
    /// random-fit a random order, rank:EXPR the highest Rank first.
    fn place_cores(&mut self, req: &Request, state: &State) -> Option<Placement> {
        if state.free_cores_total < req.cores as u64 {
            return None;
        }
        let mut placement = Placement::default();
        if self.policy.node == NodeChoice::Locality {
            let mut candidates = Vec::with_capacity(state.free_cores_total as usize);
            for (n, &free) in state.free_cores.iter().enumerate() {
                let base = self.core_base[n];
                candidates.extend((0..free).map(|k| Candidate { index: base + k, domain: n as u32 }));
            }
            let chosen = self.answer.devices.select(&candidates, req.cores as usize)?;
            for index in chosen {
                let n = self.core_base.partition_point(|&b| b <= index) - 1;
                match placement.parts.last_mut() {
                    Some(p) if p.node as usize == n => p.cores += 1,
                    _ => placement.parts.push(Part { node: n as u32, cores: 1, ..Part::default() }),
                }
            }
            return Some(placement);
        }
        let mut left = req.cores;
        if self.policy.node == NodeChoice::FirstFit {
            for (n, &free) in state.free_cores.iter().enumerate() {
                if free == 0 {
                    continue;
                }
                let take = free.min(left);
                placement.parts.push(Part { node: n as u32, cores: take, ..Part::default() });
                left -= take;
                if left == 0 {
                    return Some(placement);
                }
            }
            return None;
        }
        let mut order: Vec<usize> = (0..self.cluster.nodes.len()).filter(|&n| state.free_cores[n] > 0).collect();
        match &self.policy.node {
            NodeChoice::FirstFit | NodeChoice::Locality => {}
            NodeChoice::LeastLoaded => order.sort_by_key(|&n| (std::cmp::Reverse(state.free_cores[n]), n)),
            NodeChoice::BestFit => order.sort_by_key(|&n| (state.free_cores[n], n)),
            NodeChoice::RandomFit => self.rng.shuffle(&mut order),
            NodeChoice::Rank(_) => order = self.ranked(req, state, order)?,
        }
        for n in order {
            let take = state.free_cores[n].min(left);
            placement.parts.push(Part { node: n as u32, cores: take, ..Part::default() });
            left -= take;
            if left == 0 {
                break;
            }
        }
        placement.parts.sort_by_key(|p| p.node);
        (left == 0).then_some(placement)
    }

    /// `eligible` by phase 1's Rank of each node's offer, highest first
    /// (ties: the lowest-numbered).
    fn ranked(&self, req: &Request, state: &State, eligible: Vec<usize>) -> Option<Vec<usize>> {
        let nodes = &self.cluster.nodes;
        let rank = self.answer.rank.as_ref()?;
        let request = rank_request(rank, req.cores, req.gpus, req.gpu_milli);
        let mut ranked: Vec<(f64, usize)> = eligible
            .iter()
            .map(|&n| {
                let node = &nodes[n];
                let offer = offer_ad(&NodeOffer {
                    name: &node.name,
                    group: node.group,
                    cores: node.cores,
                    free_cores: state.free_cores[n],
                    running_jobs: state.jobs_on[n],
                    gpus: node.gpus.len() as u32,
                    free_gpus: state.gpus(n).iter().filter(|&&f| f == WHOLE).count() as u32,
                    free_gpu_milli: state.gpus(n).iter().sum(),
                    free_mem_mib: state.free_mem[n],
                    model: node.gpus.first().map_or("", |g| g.model.as_str()),
                });
                (request.rank(&offer), n)
            })
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        Some(ranked.into_iter().map(|(_, n)| n).collect())
    }

    fn choose_nodes(
        &mut self,
        req: &Request,
        state: &State,
        mut eligible: Vec<usize>,
        count: usize,
    ) -> Option<Vec<usize>> {
        let nodes = &self.cluster.nodes;
        match &self.policy.node {
            NodeChoice::FirstFit => {}
            NodeChoice::LeastLoaded => eligible.sort_by_key(|&n| (std::cmp::Reverse(state.free_cores[n]), n)),
            NodeChoice::BestFit => {
                let gpu_left = |n: usize| -> u64 {
                    let held = if req.gpu_milli > 0 { req.gpu_milli } else { req.gpus * WHOLE };
                    (state.gpus(n).iter().map(|&f| f as u64).sum::<u64>()).saturating_sub(held as u64)
                };
                eligible.sort_by_cached_key(|&n| {
                    let cores_left = state.free_cores[n] - req.cores;
                    if req.wants_gpu() {
                        (gpu_left(n), cores_left as u64, n)
                    } else {
                        (cores_left as u64, gpu_left(n), n)
                    }
                });
            }
            NodeChoice::RandomFit => {
                let picks = self.rng.sample(eligible.len(), count);
                let mut chosen: Vec<usize> = picks.into_iter().map(|i| eligible[i]).collect();
                self.rng.shuffle(&mut chosen);
                return Some(chosen);
            }
            NodeChoice::Locality => {
                let candidates: Vec<Candidate> =
                    eligible.iter().map(|&n| Candidate { index: n as u32, domain: nodes[n].group }).collect();
                let chosen = self.answer.devices.select(&candidates, count)?;
                return Some(chosen.into_iter().map(|n| n as usize).collect());
            }
            NodeChoice::Rank(_) => eligible = self.ranked(req, state, eligible)?,
        }
        eligible.truncate(count);
        Some(eligible)
    }

    fn choose_backends(
        &mut self,
        state: &State,
        taken: &[Vec<bool>],
        frontend: usize,
        count: u32,
    ) -> Option<Vec<Backend>> {
        let nodes = &self.cluster.nodes;
        let mut candidates = Vec::new();
        let mut at = Vec::new();
        for (n, node) in nodes.iter().enumerate() {
            for (g, &held) in taken[n].iter().enumerate() {
                if !held {
                    candidates.push(BackendCandidate {
                        uuid: format!("{}:{g}", node.name),
                        host: node.name.clone(),
                        device: g as u32,
                        host_jobs: state.backend_jobs[n],
                    });
                    at.push((n, g));
                }
            }
        }
        let picks = self.answer.backends.select(&candidates, count as usize, &nodes[frontend].name)?;
        Some(
            picks
                .into_iter()
                .map(|i| Backend { node: at[i].0 as u32, gpu: at[i].1 as u32, frontend: frontend as u32 })
                .collect(),
        )
    }

    fn choose_share(&mut self, state: &State, n: usize, milli: u32, model: Option<&str>) -> Option<usize> {
        let node = &self.cluster.nodes[n];
        let room: Vec<usize> = (0..node.gpus.len())
            .filter(|&g| state.gpus(n)[g] >= milli && model_ok(model, &node.gpus[g].model))
            .collect();
        match self.policy.share {
            ShareChoice::First => room.first().copied(),
            ShareChoice::Best => room.iter().copied().min_by_key(|&g| (state.gpus(n)[g], g)),
            ShareChoice::Spread => room.iter().copied().max_by_key(|&g| (state.gpus(n)[g], std::cmp::Reverse(g))),
            ShareChoice::Random => {
                if room.is_empty() {
                    None
                } else {
                    Some(room[self.rng.below(room.len() as u64) as usize])
                }
            }
        }
    }

    /// Whether the placement is local, where the question applies: a job
    /// of processors on the fewest nodes that could hold it; a vGPGPU job
    /// with every backend on its own node; several GPUs of a node on the
    /// fewest NUMA nodes. None where it does not apply.
    pub fn local(&self, req: &Request, p: &Placement) -> Option<bool> {
        if Self::spread_cores(req) {
            let fewest = self.largest.partition_point(|&c| c < req.cores as u64) + 1;
            return Some(p.parts.len() <= fewest);
        }
        if !p.backends.is_empty() {
            return Some(p.backends.iter().all(|b| b.node == b.frontend));
        }
        if req.gpus >= 2 {
            let mut all = true;
            for part in &p.parts {
                let node = &self.cluster.nodes[part.node as usize];
                let mut per_domain = std::collections::BTreeMap::new();
                for g in &node.gpus {
                    *per_domain.entry(g.numa).or_insert(0usize) += 1;
                }
                let mut sizes: Vec<usize> = per_domain.into_values().collect();
                sizes.sort_unstable_by(|a, b| b.cmp(a));
                let mut fewest = 0;
                let mut acc = 0;
                while acc < part.gpus.len() && fewest < sizes.len() {
                    acc += sizes[fewest];
                    fewest += 1;
                }
                let mut used: Vec<u32> = part.gpus.iter().map(|&g| node.gpus[g as usize].numa).collect();
                used.sort_unstable();
                used.dedup();
                all &= used.len() <= fewest;
            }
            return Some(all);
        }
        None
    }
}
