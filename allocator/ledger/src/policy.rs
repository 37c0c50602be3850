//! Which free devices a job gets.
//!
//! [`SelectionPolicy`] is the extension point; [`LocalityPolicy`] is the
//! default: Mendonca's "best-effort local" allocation (Algorithm 4 of the
//! locality paper) applied to devices, with NUMA nodes as the clusters.
//! [`FirstPolicy`] is that paper's "basic" allocation (Algorithm 2): the
//! lowest indices, wherever they are. [`by_name`] maps `[node] selection`
//! to a policy, for cderd and for `cder-sim` alike.

use std::collections::BTreeMap;

/// A free device that satisfies the request's constraints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The device's index within its type.
    pub index: u32,
    /// Its locality domain (NUMA node / PCIe root).
    pub domain: u32,
}

/// Chooses `count` devices among candidates.
pub trait SelectionPolicy: Send + Sync {
    /// A short name for logs and `--help`.
    fn name(&self) -> &'static str;

    /// The indices of the chosen devices, ascending, or None when fewer than
    /// `count` candidates exist. Every returned index is a candidate's and
    /// none repeats: the daemon relies on it, and checks it.
    fn select(&self, candidates: &[Candidate], count: usize) -> Option<Vec<u32>>;
}

/// Best-effort local: group the candidates by domain, order the domains by
/// how many candidates they hold (most first; ties to the domain with the
/// lowest index), and take devices from the first k domains that together
/// hold enough. A job that fits in one domain therefore gets one domain;
/// otherwise it spans the fewest possible. Within the last domain used,
/// the lowest indices are taken.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalityPolicy;

impl SelectionPolicy for LocalityPolicy {
    fn name(&self) -> &'static str {
        "locality"
    }

    fn select(&self, candidates: &[Candidate], count: usize) -> Option<Vec<u32>> {
        if candidates.len() < count {
            return None;
        }
        let mut domains: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for c in candidates {
            domains.entry(c.domain).or_default().push(c.index);
        }
        let mut domains: Vec<Vec<u32>> = domains.into_values().collect();
        for d in &mut domains {
            d.sort_unstable();
            d.dedup();
        }
        domains.sort_by(|a, b| b.len().cmp(&a.len()).then(a[0].cmp(&b[0])));
        let mut chosen = Vec::with_capacity(count);
        for domain in domains {
            if chosen.len() == count {
                break;
            }
            let need = count - chosen.len();
            chosen.extend(domain.into_iter().take(need));
        }
        if chosen.len() < count {
            return None;
        }
        chosen.sort_unstable();
        Some(chosen)
    }
}

/// Basic: the `count` lowest-indexed candidates, whatever their domains
/// (Mendonca's Algorithm 2, the allocation step of plain backfilling, and
/// what a batch system that numbers its devices in order does).
#[derive(Debug, Clone, Copy, Default)]
pub struct FirstPolicy;

impl SelectionPolicy for FirstPolicy {
    fn name(&self) -> &'static str {
        "first"
    }

    fn select(&self, candidates: &[Candidate], count: usize) -> Option<Vec<u32>> {
        let mut indices: Vec<u32> = candidates.iter().map(|c| c.index).collect();
        indices.sort_unstable();
        indices.dedup();
        if indices.len() < count {
            return None;
        }
        indices.truncate(count);
        Some(indices)
    }
}

/// The names [`by_name`] knows, the default first.
pub const POLICY_NAMES: [&str; 2] = ["locality", "first"];

/// The policy `[node] selection` names (`locality`, `first`), or None for
/// a name no policy has.
pub fn by_name(name: &str) -> Option<Box<dyn SelectionPolicy>> {
    match name {
        "locality" => Some(Box::new(LocalityPolicy)),
        "first" => Some(Box::new(FirstPolicy)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(layout: &[(u32, u32)]) -> Vec<Candidate> {
        layout.iter().map(|&(index, domain)| Candidate { index, domain }).collect()
    }

    /// 8 devices, 0-3 on NUMA 0 and 4-7 on NUMA 1.
    fn eight() -> Vec<Candidate> {
        (0..8).map(|i| Candidate { index: i, domain: i / 4 }).collect()
    }

    #[test]
    fn fits_in_one_domain_when_possible() {
        let p = LocalityPolicy;
        assert_eq!(p.select(&eight(), 2), Some(vec![0, 1]));
        assert_eq!(p.select(&eight(), 4), Some(vec![0, 1, 2, 3]));
        // Domain 0 has only 0 and 3 free; domain 1 has three: a pair goes to domain 1.
        let c = node(&[(0, 0), (3, 0), (5, 1), (6, 1), (7, 1)]);
        assert_eq!(p.select(&c, 2), Some(vec![5, 6]));
        assert_eq!(p.select(&c, 3), Some(vec![5, 6, 7]));
    }

    #[test]
    fn spans_fewest_domains_filling_fullest_first() {
        let p = LocalityPolicy;
        // Domains: A {0} B {1,2,3} C {4,5}. Four devices: all of B, then the lowest of C.
        let c = node(&[(0, 0), (1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]);
        assert_eq!(p.select(&c, 4), Some(vec![1, 2, 3, 4]));
        assert_eq!(p.select(&c, 6), Some(vec![0, 1, 2, 3, 4, 5]));
        assert_eq!(p.select(&c, 7), None);
    }

    #[test]
    fn ties_go_to_lowest_index() {
        let p = LocalityPolicy;
        let c = node(&[(6, 1), (7, 1), (2, 0), (3, 0)]);
        assert_eq!(p.select(&c, 1), Some(vec![2]));
        assert_eq!(p.select(&c, 2), Some(vec![2, 3]));
        assert_eq!(p.select(&c, 3), Some(vec![2, 3, 6]));
        assert_eq!(p.select(&[], 0), Some(vec![]));
    }

    #[test]
    fn first_takes_the_lowest_indices_anywhere() {
        let c = node(&[(6, 1), (7, 1), (2, 0), (5, 1)]);
        assert_eq!(FirstPolicy.select(&c, 2), Some(vec![2, 5]));
        assert_eq!(FirstPolicy.select(&c, 4), Some(vec![2, 5, 6, 7]));
        assert_eq!(FirstPolicy.select(&c, 5), None);
        // Locality keeps a pair in domain 1 instead.
        assert_eq!(LocalityPolicy.select(&c, 2), Some(vec![5, 6]));
    }

    #[test]
    fn every_name_has_its_policy() {
        for name in POLICY_NAMES {
            assert_eq!(by_name(name).map(|p| p.name()), Some(name));
        }
        assert!(by_name("fastest").is_none());
    }

    #[test]
    fn result_is_always_a_subset_of_distinct_candidates() {
        // Exhaustive over small layouts: every answer is valid and minimal in domains.
        let p = LocalityPolicy;
        for mask in 0u32..256 {
            let c: Vec<Candidate> =
                (0..8).filter(|i| mask & (1 << i) != 0).map(|i| Candidate { index: i, domain: i % 3 }).collect();
            for count in 0..=c.len() {
                let got = p.select(&c, count).expect("enough candidates");
                assert_eq!(got.len(), count);
                let mut d = got.clone();
                d.dedup();
                assert_eq!(d.len(), count);
                assert!(got.iter().all(|i| c.iter().any(|x| x.index == *i)));
                let mut sizes: Vec<usize> = (0..3).map(|dom| c.iter().filter(|x| x.domain == dom).count()).collect();
                sizes.sort_unstable_by(|a, b| b.cmp(a));
                let mut minimal = 0;
                let mut acc = 0;
                while acc < count {
                    acc += sizes[minimal];
                    minimal += 1;
                }
                let mut used: Vec<u32> = got.iter().map(|i| i % 3).collect();
                used.sort_unstable();
                used.dedup();
                assert_eq!(used.len(), minimal, "mask {mask:b} count {count}: {got:?}");
            }
        }
    }
}
