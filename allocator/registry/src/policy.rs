//! Which free backends a request gets.
//!
//! [`BackendPolicy`] is a sibling of cderd's `SelectionPolicy`, not that
//! trait itself: cderd's candidates are a node's devices with a NUMA domain,
//! and its choice needs nothing else, while the registry's choice depends
//! on the requesting node (local-first) and on how busy each backend host
//! is (spread) — notions the node daemon has no business knowing. The
//! shapes match (candidates in, distinct choices out, `None` when too few),
//! and local-first reuses cderd's `LocalityPolicy` for the part of a request
//! that must go remote, so that part spans the fewest hosts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use cder_ledger::policy::{Candidate, LocalityPolicy, SelectionPolicy};
use cder_model::RegistryPolicy;

/// A free backend that serves the requested method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendCandidate {
    /// The backend's UUID.
    pub uuid: String,
    /// The node it runs on.
    pub host: String,
    /// The GPU index on that node.
    pub device: u32,
    /// Jobs currently holding backends on this host.
    pub host_jobs: u32,
}

/// Chooses `count` backends among candidates for a frontend on `node`.
pub trait BackendPolicy: Send + Sync {
    /// A short name for logs.
    fn name(&self) -> &'static str;

    /// Positions in `candidates` of the chosen backends, distinct, or
    /// `None` when fewer than `count` exist. The store checks both.
    fn select(&self, candidates: &[BackendCandidate], count: usize, node: &str) -> Option<Vec<usize>>;
}

/// The policy `[registry] policy` names.
pub fn from_config(p: RegistryPolicy) -> Box<dyn BackendPolicy> {
    match p {
        RegistryPolicy::Random => Box::new(RandomPolicy::default()),
        RegistryPolicy::LocalFirst => Box::new(LocalFirstPolicy),
        RegistryPolicy::Spread => Box::new(SpreadPolicy),
    }
}

/// As [`from_config`], with `random` drawing from `seed` instead of the
/// kernel, so that a replay (`cder-sim`) or a test is repeatable.
pub fn seeded(p: RegistryPolicy, seed: u64) -> Box<dyn BackendPolicy> {
    match p {
        RegistryPolicy::Random => Box::new(RandomPolicy::seeded(seed)),
        other => from_config(other),
    }
}

/// Uniformly random (the thesis's "random" allocation). The default draws
/// a fresh seed from the kernel for each request; [`RandomPolicy::seeded`]
/// draws every request from one repeatable stream.
#[derive(Debug, Default)]
pub struct RandomPolicy {
    /// The xorshift64* state of a seeded policy; None: the kernel's.
    state: Option<Mutex<u64>>,
}

impl RandomPolicy {
    /// A policy whose choices follow from `seed` alone.
    pub fn seeded(seed: u64) -> RandomPolicy {
        // splitmix64 of the seed: neighbouring seeds give unrelated streams,
        // and the state is never 0 (xorshift's fixed point).
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        RandomPolicy { state: Some(Mutex::new((z ^ (z >> 31)) | 1)) }
    }
}

/// 64 random bits from the kernel; a fixed odd constant if that fails
/// (randomness here only spreads load, it protects nothing).
fn random_seed() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)) {
        Ok(()) => u64::from_le_bytes(b) | 1,
        Err(_) => 0x9E37_79B9_7F4A_7C15,
    }
}

impl BackendPolicy for RandomPolicy {
    fn name(&self) -> &'static str {
        "random"
    }

    fn select(&self, candidates: &[BackendCandidate], count: usize, _node: &str) -> Option<Vec<usize>> {
        if candidates.len() < count {
            return None;
        }
        // Partial Fisher-Yates with xorshift64*.
        let mut seeded = self.state.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        let mut state = match &seeded {
            Some(s) => **s,
            None => random_seed(),
        };
        let mut next = || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        for i in 0..count {
            let j = i + (next() % (order.len() - i) as u64) as usize;
            order.swap(i, j);
        }
        order.truncate(count);
        if let Some(s) = seeded.as_mut() {
            **s = state;
        }
        Some(order)
    }
}

/// Local first (the thesis's "prioritised"): the job's own node's backends,
/// lowest device first; the rest from the fewest other hosts (cderd's
/// best-effort locality with hosts as the domains).
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalFirstPolicy;

impl BackendPolicy for LocalFirstPolicy {
    fn name(&self) -> &'static str {
        "local-first"
    }

    fn select(&self, candidates: &[BackendCandidate], count: usize, node: &str) -> Option<Vec<usize>> {
        if candidates.len() < count {
            return None;
        }
        let mut local: Vec<usize> = (0..candidates.len()).filter(|&i| same_host(&candidates[i].host, node)).collect();
        local.sort_by_key(|&i| candidates[i].device);
        local.truncate(count);
        let need = count - local.len();
        if need == 0 {
            return Some(local);
        }
        // Hosts as locality domains, numbered in name order so ties go to
        // the lowest name.
        let remote: Vec<usize> =
            (0..candidates.len()).filter(|i| !local.contains(i) && !same_host(&candidates[*i].host, node)).collect();
        let names: BTreeSet<&str> = remote.iter().map(|&i| candidates[i].host.as_str()).collect();
        let hosts: BTreeMap<&str, u32> = names.into_iter().zip(0..).collect();
        let mut by_key: Vec<usize> = remote.clone();
        by_key.sort_by(|&a, &b| {
            (&candidates[a].host, candidates[a].device).cmp(&(&candidates[b].host, candidates[b].device))
        });
        let as_devices: Vec<Candidate> = by_key
            .iter()
            .enumerate()
            .map(|(k, &i)| Candidate { index: k as u32, domain: hosts[candidates[i].host.as_str()] })
            .collect();
        let chosen = LocalityPolicy.select(&as_devices, need)?;
        local.extend(chosen.into_iter().map(|k| by_key[k as usize]));
        Some(local)
    }
}

/// Spread: each backend from the host that serves the fewest jobs (this
/// request's earlier picks count), ties to the lowest host name and device.
#[derive(Debug, Default, Clone, Copy)]
pub struct SpreadPolicy;

impl BackendPolicy for SpreadPolicy {
    fn name(&self) -> &'static str {
        "spread"
    }

    fn select(&self, candidates: &[BackendCandidate], count: usize, _node: &str) -> Option<Vec<usize>> {
        if candidates.len() < count {
            return None;
        }
        let mut load: BTreeMap<&str, u32> = candidates.iter().map(|c| (c.host.as_str(), c.host_jobs)).collect();
        let mut taken = vec![false; candidates.len()];
        let mut chosen = Vec::with_capacity(count);
        for _ in 0..count {
            let best = (0..candidates.len()).filter(|&i| !taken[i]).min_by(|&a, &b| {
                let (ca, cb) = (&candidates[a], &candidates[b]);
                (load[ca.host.as_str()], &ca.host, ca.device).cmp(&(load[cb.host.as_str()], &cb.host, cb.device))
            })?;
            taken[best] = true;
            *load.get_mut(candidates[best].host.as_str())? += 1;
            chosen.push(best);
        }
        Some(chosen)
    }
}

/// `gpu01` and `gpu01.example.org` name one host.
fn same_host(a: &str, b: &str) -> bool {
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_ascii_lowercase();
    a.eq_ignore_ascii_case(b) || (!a.is_empty() && short(a) == short(b) && (!a.contains('.') || !b.contains('.')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(host: &str, device: u32, host_jobs: u32) -> BackendCandidate {
        BackendCandidate { uuid: format!("{host}:{device}"), host: host.into(), device, host_jobs }
    }

    fn pool() -> Vec<BackendCandidate> {
        vec![c("n3", 0, 0), c("n1", 1, 2), c("n2", 0, 1), c("n1", 0, 2), c("n2", 1, 1), c("n3", 1, 0), c("n3", 2, 0)]
    }

    fn names(p: &[BackendCandidate], got: &[usize]) -> Vec<String> {
        got.iter().map(|&i| p[i].uuid.clone()).collect()
    }

    fn valid(p: &dyn BackendPolicy, pool: &[BackendCandidate]) {
        for count in 0..=pool.len() {
            for node in ["n1", "n2", "n9"] {
                let got = p.select(pool, count, node).unwrap();
                let mut d = got.clone();
                d.sort_unstable();
                d.dedup();
                assert_eq!(d.len(), count, "{} {count} {node}", p.name());
                assert!(got.iter().all(|&i| i < pool.len()));
            }
        }
        assert_eq!(p.select(pool, pool.len() + 1, "n1"), None);
    }

    #[test]
    fn every_policy_returns_distinct_candidates() {
        let pool = pool();
        for p in [RegistryPolicy::Random, RegistryPolicy::LocalFirst, RegistryPolicy::Spread] {
            valid(from_config(p).as_ref(), &pool);
        }
    }

    #[test]
    fn local_first_takes_own_node_then_fewest_hosts() {
        let p = pool();
        assert_eq!(names(&p, &LocalFirstPolicy.select(&p, 2, "n1").unwrap()), ["n1:0", "n1:1"]);
        // Two local, then one remote host that can hold the other three: n3.
        assert_eq!(
            names(&p, &LocalFirstPolicy.select(&p, 5, "n1.example.org").unwrap()),
            ["n1:0", "n1:1", "n3:0", "n3:1", "n3:2"]
        );
        // No local backend: n3 (three free) before n2.
        assert_eq!(names(&p, &LocalFirstPolicy.select(&p, 2, "n9").unwrap()), ["n3:0", "n3:1"]);
    }

    #[test]
    fn spread_prefers_idle_hosts_and_spreads_within_a_request() {
        let p = pool();
        // n3 has 0 jobs, so its first backend; then n3 has 1 like n2: n2 < n3 by name.
        assert_eq!(names(&p, &SpreadPolicy.select(&p, 2, "n1").unwrap()), ["n3:0", "n2:0"]);
        assert_eq!(names(&p, &SpreadPolicy.select(&p, 3, "n1").unwrap()), ["n3:0", "n2:0", "n3:1"]);
    }

    #[test]
    fn random_covers_more_than_one_choice() {
        let p = pool();
        let seen: std::collections::BTreeSet<Vec<usize>> =
            (0..64).map(|_| RandomPolicy::default().select(&p, 1, "n1").unwrap()).collect();
        assert!(seen.len() > 1, "64 random draws all gave {seen:?}");
    }

    #[test]
    fn a_seeded_random_policy_repeats_itself_and_still_varies() {
        let p = pool();
        let draws = |seed| {
            let policy = seeded(RegistryPolicy::Random, seed);
            (0..32).map(|_| policy.select(&p, 2, "n1").unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
        let seen: std::collections::BTreeSet<Vec<usize>> = draws(7).into_iter().collect();
        assert!(seen.len() > 4, "one seeded stream gave only {seen:?}");
    }

    #[test]
    fn host_names() {
        assert!(same_host("n1", "n1.example.org"));
        assert!(same_host("N1", "n1"));
        assert!(!same_host("n1.a.org", "n1.b.org"));
        assert!(!same_host("n1", "n10"));
    }
}
