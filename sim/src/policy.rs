//! Who answers each placement question of a replay, by name.
//!
//! A `--policy` item is `+`-joined words, each setting one question's
//! answer; what it does not set comes from the cluster's `[scheduler]`:
//!
//! | question | words | answered by |
//! |---|---|---|
//! | which devices on a node (and which cores, for jobs of processors) | `locality`, `first` (or `devices=NAME`) | cderd's own [`SelectionPolicy`], by `cder_ledger::policy::by_name` — `[node] selection` |
//! | which vGPGPU backends | `random`, `local-first`, `spread` (or `registry=NAME`); implies `vgpgpu` | the registry's own [`BackendPolicy`], by `cder_registry::policy::seeded` — `[registry] policy` |
//! | physical GPUs or vGPGPUs | `physical`, `vgpgpu` | the cluster's configuration |
//! | which nodes | `first-fit`, `least-loaded`, `best-fit`, `random-fit`, `node=locality`, `rank:EXPR` | the batch system (a model of it); `node=locality` is cderd's policy over nodes with groups as domains; `rank:EXPR` is phase 1's ClassAd Rank (cder-classad) of each node |
//! | which part of which GPU a share takes | `share=first`, `share=best`, `share=random`, `share=spread` | the batch system's GRES shard choice (a model) |
//! | how the queue is served | `fcfs`, `list`, `easy`, `conservative` (or `queue=NAME`) | the batch system (a model) |
//!
//! Nothing here decides a device or a backend itself: the names select
//! cder's own policy objects, which the replay calls in-process.

use cder_classad::{parse_expr, ClassAd, CompiledRequest, Expr, Value};
use cder_ledger::policy::{by_name, SelectionPolicy, POLICY_NAMES};
use cder_model::RegistryPolicy;
use cder_registry::policy::{seeded, BackendPolicy};

use crate::cluster::Scheduler;
use crate::time::{parse_duration, Time};

/// How the queue is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// In order; the first job that does not fit blocks the rest.
    Fcfs,
    /// In order, every job that fits starts (list scheduling).
    List,
    /// EASY backfilling: the head gets a reservation, later jobs start if
    /// they do not delay it.
    Easy,
    /// Conservative backfilling: every job gets a reservation when it
    /// arrives, on the processors the allocation step chooses (seed 002).
    Conservative,
}

/// Which nodes a job gets (the batch system's choice).
#[derive(Debug, Clone, PartialEq)]
pub enum NodeChoice {
    /// The lowest-numbered nodes that fit.
    FirstFit,
    /// The nodes with the most free cores (ties: the lowest-numbered).
    LeastLoaded,
    /// The nodes left with the least free after the job: GPUs first, then
    /// cores (the best-fit baseline of Weng et al.).
    BestFit,
    /// Nodes drawn at random among those that fit (seeded).
    RandomFit,
    /// cderd's selection policy over the nodes that fit, each node's group
    /// as its domain: a multi-node job spans the fewest groups.
    Locality,
    /// The highest phase-1 Rank of each node's offer ad (ties: the
    /// lowest-numbered): the expression as written, compiled by cder-classad.
    Rank(String),
}

/// Which GPU a share (a fraction of one GPU) takes, on the node chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareChoice {
    /// The lowest-numbered GPU with room (SLURM's shard order).
    First,
    /// The GPU left with the least room (best fit).
    Best,
    /// A GPU drawn at random among those with room.
    Random,
    /// The GPU with the most room (spread).
    Spread,
}

/// What a backfilling scheduler plans with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimates {
    /// The measured run time (seed 002's choice: "only real execution times").
    Runtime,
    /// The job's time limit where it has one (SLURM's), else its run time.
    Requested,
}

/// Every answer of one replay, with the label it is reported under.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// As written on the command line.
    pub label: String,
    /// How the queue is served.
    pub queue: Queue,
    /// Which nodes.
    pub node: NodeChoice,
    /// cderd's selection policy, by its `[node] selection` name.
    pub devices: String,
    /// vGPGPUs instead of GPUs on the node.
    pub vgpgpu: bool,
    /// The registry's policy.
    pub registry: RegistryPolicy,
    /// Which GPU a share takes.
    pub share: ShareChoice,
    /// Start cost on physical GPUs.
    pub dispatch: Time,
    /// Start cost on vGPGPUs.
    pub vgpgpu_dispatch: Time,
    /// What backfilling plans with.
    pub estimates: Estimates,
    /// Queued jobs a backfilling pass looks at.
    pub backfill_depth: usize,
}

fn registry_policy(name: &str) -> Option<RegistryPolicy> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
}

fn queue(name: &str) -> Option<Queue> {
    Some(match name {
        "fcfs" => Queue::Fcfs,
        "list" => Queue::List,
        "easy" => Queue::Easy,
        "conservative" => Queue::Conservative,
        _ => return None,
    })
}

fn node_choice(name: &str) -> Option<NodeChoice> {
    if let Some(expr) = name.strip_prefix("rank:") {
        return Some(NodeChoice::Rank(expr.to_string()));
    }
    Some(match name {
        "first-fit" => NodeChoice::FirstFit,
        "least-loaded" => NodeChoice::LeastLoaded,
        "best-fit" => NodeChoice::BestFit,
        "random-fit" => NodeChoice::RandomFit,
        "locality" => NodeChoice::Locality,
        _ => return None,
    })
}

fn share_choice(name: &str) -> Option<ShareChoice> {
    Some(match name {
        "first" => ShareChoice::First,
        "best" => ShareChoice::Best,
        "random" => ShareChoice::Random,
        "spread" => ShareChoice::Spread,
        _ => return None,
    })
}

impl Policy {
    /// The cluster's defaults, under `label`.
    pub fn from_scheduler(s: &Scheduler, label: &str) -> Result<Policy, String> {
        let bad = |key: &str, value: &str| format!("[scheduler] {key} = {value:?} is not one this simulator knows");
        let mut p = Policy {
            label: label.to_string(),
            queue: queue(&s.queue).ok_or_else(|| bad("queue", &s.queue))?,
            node: node_choice(&s.node).ok_or_else(|| bad("node", &s.node))?,
            devices: String::new(),
            vgpgpu: match s.gpus.as_str() {
                "physical" => false,
                "vgpgpu" => true,
                other => return Err(bad("gpus", other)),
            },
            registry: registry_policy(&s.registry).ok_or_else(|| bad("registry", &s.registry))?,
            share: ShareChoice::First,
            dispatch: parse_duration(&s.dispatch).map_err(|e| format!("[scheduler] dispatch: {e}"))?,
            vgpgpu_dispatch: parse_duration(&s.vgpgpu_dispatch)
                .map_err(|e| format!("[scheduler] vgpgpu_dispatch: {e}"))?,
            estimates: match s.estimates.as_str() {
                "runtime" => Estimates::Runtime,
                "requested" => Estimates::Requested,
                other => return Err(bad("estimates", other)),
            },
            backfill_depth: s.backfill_depth.max(1),
        };
        p.set_devices(&s.devices).map_err(|_| bad("devices", &s.devices))?;
        Ok(p)
    }

    fn set_devices(&mut self, name: &str) -> Result<(), ()> {
        if by_name(name).is_some() {
            self.devices = name.to_string();
            Ok(())
        } else {
            Err(())
        }
    }

    /// The defaults with one `--policy` item's words applied.
    pub fn parse(item: &str, defaults: &Policy) -> Result<Policy, String> {
        let mut p = defaults.clone();
        p.label = item.to_string();
        // `rank:EXPR` comes last and takes the rest: the expression may hold `+`.
        let (words, rank) = match item.find("rank:") {
            Some(at) => (item[..at].trim_end_matches('+'), Some(&item[at + 5..])),
            None => (item, None),
        };
        if let Some(expr) = rank {
            p.node = NodeChoice::Rank(expr.trim().to_string());
        }
        for word in words.split('+').map(str::trim).filter(|w| !w.is_empty() || words.is_empty()) {
            if word.is_empty() {
                continue;
            }
            let unknown = || {
                format!(
                    "policy {item:?}: {word:?} is no answer this simulator knows (devices: {}; registry: random, \
                     local-first, spread; gpus: physical, vgpgpu; nodes: first-fit, least-loaded, best-fit, \
                     random-fit, node=locality, rank:EXPR; shares: share=first|best|random|spread; queue: fcfs, \
                     list, easy, conservative; dispatch=TIME, vgpgpu_dispatch=TIME, estimates=runtime|requested)",
                    POLICY_NAMES.join(", ")
                )
            };
            if let Some((key, value)) = word.split_once('=') {
                match key {
                    "devices" => p.set_devices(value).map_err(|_| unknown())?,
                    "registry" => {
                        p.registry = registry_policy(value).ok_or_else(unknown)?;
                        p.vgpgpu = true;
                    }
                    "node" => p.node = node_choice(value).ok_or_else(unknown)?,
                    "share" => p.share = share_choice(value).ok_or_else(unknown)?,
                    "queue" => p.queue = queue(value).ok_or_else(unknown)?,
                    "dispatch" => p.dispatch = parse_duration(value).map_err(|e| format!("policy {item:?}: {e}"))?,
                    "vgpgpu_dispatch" => {
                        p.vgpgpu_dispatch = parse_duration(value).map_err(|e| format!("policy {item:?}: {e}"))?
                    }
                    "estimates" => {
                        p.estimates = match value {
                            "runtime" => Estimates::Runtime,
                            "requested" => Estimates::Requested,
                            _ => return Err(unknown()),
                        }
                    }
                    _ => return Err(unknown()),
                }
                continue;
            }
            if by_name(word).is_some() {
                p.devices = word.to_string();
            } else if let Some(r) = registry_policy(word) {
                p.registry = r;
                p.vgpgpu = true;
            } else if word == "physical" {
                p.vgpgpu = false;
            } else if word == "vgpgpu" {
                p.vgpgpu = true;
            } else if let Some(q) = queue(word) {
                p.queue = q;
            } else if let Some(n) = node_choice(word).filter(|n| *n != NodeChoice::Locality) {
                p.node = n;
            } else {
                return Err(unknown());
            }
        }
        if let NodeChoice::Rank(expr) = &p.node {
            parse_expr(expr).map_err(|e| format!("policy {item:?}: rank:{expr}: {e}"))?;
        }
        Ok(p)
    }
}

/// cder's policy objects for one replay, made from a [`Policy`].
pub struct Answerers {
    /// cderd's device selection.
    pub devices: Box<dyn SelectionPolicy>,
    /// The registry's backend choice.
    pub backends: Box<dyn BackendPolicy>,
    /// The Rank expression of `rank:EXPR`, parsed once.
    pub rank: Option<Expr>,
}

impl Answerers {
    /// Makes them; `seed` seeds the registry's random policy.
    pub fn new(p: &Policy, seed: u64) -> Answerers {
        Answerers {
            devices: by_name(&p.devices).unwrap_or_else(|| Box::new(cder_ledger::LocalityPolicy)),
            backends: seeded(p.registry, seed),
            rank: match &p.node {
                NodeChoice::Rank(e) => parse_expr(e).ok(),
                _ => None,
            },
        }
    }
}

/// What a node offers, as attributes of a ClassAd for `rank:EXPR`
/// (GLUE's and cder's published names where there is one).
#[derive(Debug, Clone, Default)]
pub struct NodeOffer<'a> {
    /// Host name.
    pub name: &'a str,
    /// Group.
    pub group: u32,
    /// Cores and free cores.
    pub cores: u32,
    /// Free cores.
    pub free_cores: u32,
    /// Jobs running on it.
    pub running_jobs: u32,
    /// GPUs, free whole GPUs, free thousandths of GPU.
    pub gpus: u32,
    /// Whole GPUs free.
    pub free_gpus: u32,
    /// Thousandths of GPU free, over all its GPUs.
    pub free_gpu_milli: u32,
    /// Memory and free memory (MiB).
    pub free_mem_mib: u64,
    /// The model of its first GPU.
    pub model: &'a str,
}

/// The job's side of `rank:EXPR`: its request ad with the Rank compiled.
pub fn rank_request(rank: &Expr, cores: u32, gpus: u32, gpu_milli: u32) -> CompiledRequest {
    let mut ad = ClassAd::new();
    ad.insert("CPUNumber", Expr::Lit(Value::Int(cores as i64)));
    ad.insert("GPGPUPerNode", Expr::Lit(Value::Int(gpus as i64)));
    ad.insert("GPGPUMilli", Expr::Lit(Value::Int(gpu_milli as i64)));
    ad.insert("Requirements", Expr::Lit(Value::Bool(true)));
    ad.insert("Rank", rank.clone());
    CompiledRequest::new(&ad)
}

/// A node's offer ad.
pub fn offer_ad(o: &NodeOffer<'_>) -> ClassAd {
    let mut ad = ClassAd::new();
    let int = |v: i64| Expr::Lit(Value::Int(v));
    ad.insert("Name", Expr::Lit(Value::str(o.name)));
    ad.insert("Group", int(o.group as i64));
    ad.insert("Cores", int(o.cores as i64));
    ad.insert("FreeCores", int(o.free_cores as i64));
    ad.insert("RunningJobs", int(o.running_jobs as i64));
    ad.insert("FreeMemoryMiB", int(o.free_mem_mib as i64));
    ad.insert("GPGPUTotalInstances", int(o.gpus as i64));
    ad.insert("GPGPUFreeInstances", int(o.free_gpus as i64));
    ad.insert("GPGPUUsedInstances", int(o.gpus as i64 - o.free_gpus as i64));
    ad.insert("GPGPUFreeMilli", int(o.free_gpu_milli as i64));
    ad.insert("GPGPUModel", Expr::Lit(Value::str(o.model)));
    ad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Policy {
        Policy::from_scheduler(&Scheduler::default(), "default").unwrap()
    }

    #[test]
    fn words_set_their_own_question() {
        let d = defaults();
        let p = Policy::parse("local-first", &d).unwrap();
        assert!(p.vgpgpu);
        assert_eq!(p.registry, RegistryPolicy::LocalFirst);
        let p = Policy::parse("first+conservative", &d).unwrap();
        assert_eq!((p.devices.as_str(), p.queue, p.vgpgpu), ("first", Queue::Conservative, false));
        let p = Policy::parse("best-fit+share=best+node=locality", &d).unwrap();
        assert_eq!((p.node.clone(), p.share), (NodeChoice::Locality, ShareChoice::Best));
        let p = Policy::parse("fcfs+rank:other.FreeCores + 1", &d).unwrap();
        assert_eq!((p.node.clone(), p.queue), (NodeChoice::Rank("other.FreeCores + 1".into()), Queue::Fcfs));
        assert!(Policy::parse("fastest", &d).unwrap_err().contains("\"fastest\" is no answer"));
        assert!(Policy::parse("rank:1 +", &d).is_err());
    }

    #[test]
    fn rank_evaluates_a_node_offer() {
        let rank = parse_expr("other.FreeCores - 2 * other.RunningJobs + GPGPUPerNode").unwrap();
        let req = rank_request(&rank, 2, 1, 0);
        let offer = offer_ad(&NodeOffer { free_cores: 6, running_jobs: 1, ..NodeOffer::default() });
        assert_eq!(req.rank(&offer), 5.0);
    }
}
