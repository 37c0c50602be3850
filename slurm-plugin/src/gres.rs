//! GRES as SLURM's scheduler counts it: editing `tres_per_node`, and the
//! per-node GRES counts declared in `slurm.conf` (`NodeName=… Gres=gpu:4`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::request::{Request, RequestError, Source, GPGPU, GPGPU_SHARES, OPT_CDER};

/// The GRES name SLURM uses for a CDER type: GPGPUs are SLURM's `gpu`;
/// any other type is declared under its own name (`GresTypes=gpu,fpga`).
pub use cder_request::lrms::gres_name;

/// The CDER type behind a GRES name (the inverse of [`gres_name`]).
pub use cder_request::lrms::cder_type_of_gres as cder_type;

/// How `tres_per_node` spells a GRES in this SLURM release: `gres:gpu:2`
/// up to 22.05, `gres/gpu:2` from 23.02 on.
pub const TRES_PREFIX: &str = if crate::SLURM_VERSION_NUMBER < (23 << 16) + (2 << 8) { "gres:" } else { "gres/" };

/// The largest count of each GRES that any one node has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGres {
    /// GRES name → the largest count one node has of it.
    pub max_per_node: BTreeMap<String, u64>,
    /// GRES name → GRES type (`1g.10gb`, `tesla`) → the largest count of
    /// that type one node has (typed GRES only).
    pub max_per_type: BTreeMap<String, BTreeMap<String, u64>>,
    /// The nodes (slurm.conf `NodeName=` expressions) whose GPUs are
    /// offered as shares (`shard` in their `Gres=`).
    pub shard_nodes: Vec<String>,
    /// The most shares one GPU of any node is offered as: a node's shards
    /// over its GPUs (SLURM 22.05 spreads them evenly, and takes a job's
    /// shards on a node from one GPU).
    pub max_shares_per_gpu: u64,
}

impl NodeGres {
    /// Reads `slurm.conf` (and the files it `Include`s).
    pub fn load(path: &Path) -> std::io::Result<NodeGres> {
        let mut out = NodeGres::default();
        let mut default_gres: Option<String> = None;
        out.read_file(path, &mut default_gres, 0)?;
        Ok(out)
    }

    /// Parses slurm.conf text; `base` resolves relative `Include` paths.
    pub fn parse(text: &str, base: &Path) -> std::io::Result<NodeGres> {
        let mut out = NodeGres::default();
        let mut default_gres = None;
        out.read_text(text, base, &mut default_gres, 0)?;
        Ok(out)
    }

    fn read_file(&mut self, path: &Path, default_gres: &mut Option<String>, depth: u32) -> std::io::Result<()> {
        let text = std::fs::read_to_string(path)?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
        self.read_text(&text, &base, default_gres, depth)
    }

    fn read_text(
        &mut self,
        text: &str,
        base: &Path,
        default_gres: &mut Option<String>,
        depth: u32,
    ) -> std::io::Result<()> {
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if first.eq_ignore_ascii_case("include") {
                if let (Some(file), true) = (words.next(), depth < 8) {
                    let p = Path::new(file);
                    let p = if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
                    self.read_file(&p, default_gres, depth + 1)?;
                }
                continue;
            }
            let Some((key, node)) = first.split_once('=') else { continue };
            if !key.eq_ignore_ascii_case("nodename") {
                continue;
            }
            let gres = line
                .split_whitespace()
                .filter_map(|w| w.split_once('='))
                .find(|(k, _)| k.eq_ignore_ascii_case("gres"))
                .map(|(_, v)| v.to_string());
            if node.eq_ignore_ascii_case("default") {
                *default_gres = gres;
                continue;
            }
            if let Some(spec) = gres.or_else(|| default_gres.clone()) {
                let (totals, typed) = node_gres_counts(&spec);
                for (name, count) in totals {
                    let max = self.max_per_node.entry(name).or_insert(0);
                    *max = (*max).max(count);
                }
                for ((name, gres_type), count) in typed {
                    let max = self.max_per_type.entry(name).or_default().entry(gres_type).or_insert(0);
                    *max = (*max).max(count);
                }
                let shard = cder_request::lrms::SHARD_GRES;
                if let Some(&shards) = totals_of(&spec).get(shard).filter(|&&n| n > 0) {
                    let gpus = totals_of(&spec).get(gres_name(GPGPU)).copied().unwrap_or(0).max(1);
                    self.max_shares_per_gpu = self.max_shares_per_gpu.max(shards / gpus);
                    self.shard_nodes.push(node.to_string());
                }
            }
        }
        Ok(())
    }

    /// Checks a request against what the nodes have: an unknown type or a
    /// count no node can hold is refused at submit time.
    pub fn validate(&self, req: &Request) -> Result<(), RequestError> {
        if let Some(&n) = req.counts.get(GPGPU_SHARES).filter(|&&n| u64::from(n) > self.max_shares_per_gpu) {
            if self.max_shares_per_gpu > 0 {
                let source = req.sources.get(GPGPU_SHARES).cloned().expect("every count has a source");
                let given = match source {
                    Source::Option(o) if o == OPT_CDER => format!("--{o}={GPGPU_SHARES}:{n}"),
                    other => format!("{other}={n}"),
                };
                return Err(RequestError::TooManyShares { given, max: self.max_shares_per_gpu });
            }
        }
        for (ty, &count) in &req.counts {
            let source = req.sources.get(ty).cloned().expect("every count has a source");
            match self.max_per_node.get(gres_name(ty)) {
                None | Some(0) => {
                    let mut known: Vec<&str> =
                        self.max_per_node.iter().filter(|(_, &n)| n > 0).map(|(g, _)| cder_type(g)).collect();
                    known.sort_unstable();
                    let known = if known.is_empty() { "no CDER devices".to_string() } else { known.join(", ") };
                    return Err(RequestError::UnknownType { origin: source, cder_type: ty.clone(), known });
                }
                Some(&max) if u64::from(count) > max => {
                    let given = match source {
                        Source::Option(o) if o == OPT_CDER => format!("--{o}={ty}:{count}"),
                        other => format!("{other}={count}"),
                    };
                    return Err(RequestError::TooMany { given, cder_type: ty.clone(), count, max });
                }
                Some(_) => {}
            }
            for (gres_type, &n) in req.gres_types.get(ty).into_iter().flatten() {
                let given = format!("--{OPT_CDER}={ty}:{gres_type}:{n}");
                let types = self.max_per_type.get(gres_name(ty));
                match types.and_then(|t| t.get(gres_type)) {
                    None | Some(0) => {
                        let known: Vec<&str> =
                            types.into_iter().flatten().filter(|(_, &m)| m > 0).map(|(t, _)| t.as_str()).collect();
                        let known = if known.is_empty() { "no GRES types".to_string() } else { known.join(", ") };
                        return Err(RequestError::UnknownGresType {
                            given,
                            cder_type: ty.clone(),
                            gres_type: gres_type.clone(),
                            known,
                        });
                    }
                    Some(&max) if u64::from(n) > max => {
                        return Err(RequestError::TooManyOfGresType {
                            given,
                            cder_type: ty.clone(),
                            gres_type: gres_type.clone(),
                            count: n,
                            max,
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}

fn totals_of(spec: &str) -> BTreeMap<String, u64> {
    node_gres_counts(spec).0
}

/// Per-name totals and per-(name, type) counts of one node line's GRES
/// (`gpu:4,gpu:tesla:2,fpga`).
type NodeCounts = (BTreeMap<String, u64>, BTreeMap<(String, String), u64>);

/// `gpu:4,gpu:tesla:2,fpga` → per-name totals and typed counts for one node
/// line, read by `cder_request::gres`. An item SLURM would refuse counts
/// nothing: slurmctld does not start with it, so no node has it.
fn node_gres_counts(spec: &str) -> NodeCounts {
    let mut totals = BTreeMap::new();
    let mut typed = BTreeMap::new();
    let items = cder_request::gres::split_top_level(spec, '(', ')', 1).unwrap_or_default();
    for item in items.into_iter().filter_map(|(_, i)| cder_request::gres::parse_item(i.trim()).ok()) {
        // Saturating: a per-node bound past u64 is "more than any request" (fuzz: slurm_submit).
        let total = totals.entry(item.name.clone()).or_insert(0u64);
        *total = total.saturating_add(item.count);
        if let Some(t) = item.gres_type {
            let n = typed.entry((item.name, t)).or_insert(0u64);
            *n = n.saturating_add(item.count);
        }
    }
    (totals, typed)
}

/// The GRES entries of a `tres_per_node` value with their counts:
/// `gres:gpu:tesla:2,gres/fpga` → `[("gpu", 2), ("fpga", 1)]`. Entries that
/// are not GRES (`cpu=2`) are left out.
pub fn tres_entries(tres: &str) -> Vec<(String, u64)> {
    typed_tres_entries(tres).into_iter().map(|(name, _, count)| (name, count)).collect()
}

/// Like [`tres_entries`], with each entry's GRES type (`gres:gpu:1g.10gb:2`
/// → `("gpu", Some("1g.10gb"), 2)`). An entry SLURM's grammar refuses still
/// names its GRES and counts as one of it, untyped: a typo must not make a
/// GPU job look like none to the checks that follow.
pub fn typed_tres_entries(tres: &str) -> Vec<(String, Option<String>, u64)> {
    cder_request::gres::tres_entries(tres)
        .into_iter()
        .filter(|e| !e.name.is_empty())
        .map(|e| match e.item {
            Ok(item) => (item.name, item.gres_type, item.count),
            Err(_) => (e.name.to_string(), None, 1),
        })
        .collect()
}

/// A user asked for the same GRES with another count (e.g. `--gres=gpu:1`
/// and `--gpgpu-per-node=2`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cder: the job asks for {existing} and for {count} {cder_type} devices per node; ask once")]
pub struct GresConflict {
    /// The job's own `tres_per_node` entries for that GRES (`gres/gpu:1`).
    pub existing: String,
    /// The count the cder request asks for.
    pub count: u32,
    /// The CDER type asked for.
    pub cder_type: String,
}

/// Adds the request's GRES to a `tres_per_node` value. An entry for the same
/// GRES with the same total count is kept as it is (it may name a model);
/// one with another count is a conflict.
pub fn merge_tres_per_node(existing: Option<&str>, req: &Request) -> Result<String, GresConflict> {
    let mut entries: Vec<String> =
        existing.unwrap_or("").split([',', ';']).map(str::trim).filter(|e| !e.is_empty()).map(str::to_string).collect();
    for (ty, &count) in &req.counts {
        let gres = gres_name(ty);
        let mine = |e: &str| typed_tres_entries(e).iter().any(|(name, _, _)| name == gres);
        let theirs: Vec<&String> = entries.iter().filter(|e| mine(e)).collect();
        let typed = req.gres_types.get(ty);
        if theirs.is_empty() {
            match typed {
                Some(by_type) => entries.extend(by_type.iter().map(|(t, n)| format!("{TRES_PREFIX}{gres}:{t}:{n}"))),
                None => entries.push(format!("{TRES_PREFIX}{gres}:{count}")),
            }
            continue;
        }
        if let Some(by_type) = typed {
            // A request that names GRES types agrees with the job's own
            // `--gres` only if that asks for exactly the same types and counts.
            let mut theirs_by_type: BTreeMap<String, u32> = BTreeMap::new();
            let mut untyped = false;
            for (_, gres_type, n) in theirs.iter().flat_map(|e| typed_tres_entries(e)) {
                match gres_type {
                    Some(t) => {
                        let sum = theirs_by_type.entry(t).or_insert(0u32);
                        *sum = sum.saturating_add(n.min(u64::from(u32::MAX)) as u32);
                    }
                    None => untyped = true,
                }
            }
            if untyped || &theirs_by_type != by_type {
                let existing = theirs.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",");
                return Err(GresConflict { existing, count, cder_type: ty.clone() });
            }
            continue;
        }
        let total: u64 = theirs.iter().flat_map(|e| tres_entries(e)).fold(0u64, |sum, (_, n)| sum.saturating_add(n));
        if total != u64::from(count) {
            let existing = theirs.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",");
            return Err(GresConflict { existing, count, cder_type: ty.clone() });
        }
    }
    Ok(entries.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{RawRequest, Sourced, OPT_GPGPU_PER_NODE};

    fn req(n: &str) -> Request {
        RawRequest {
            gpgpu_per_node: Some(Sourced { value: n.into(), source: Source::Option(OPT_GPGPU_PER_NODE) }),
            ..Default::default()
        }
        .parse()
        .unwrap()
    }

    const CONF: &str = "ClusterName=x\n\
        NodeName=DEFAULT Gres=gpu:2\n\
        NodeName=a[1-4] CPUs=8 # inherits gpu:2\n\
        nodename=big Gres=gpu:tesla:4,gpu:k80:2,fpga:1 CPUs=2\n\
        NodeName=cpu CPUs=2 Gres=\n";

    /// The lists both the plugin and the GLUE provider check
    /// (`allocator/request/testdata/gres_totals.txt`): the provider reads the
    /// same totals from scontrol that the plugin reads here from slurm.conf.
    #[test]
    fn the_shared_gres_lists_read_as_the_provider_reads_them() {
        let fixture = include_str!("../../allocator/request/testdata/gres_totals.txt");
        let mut checked = 0;
        for line in fixture.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let (list, totals) = line.split_once('\t').unwrap();
            let g = NodeGres::parse(&format!("NodeName=n Gres={list}\n"), Path::new("/")).unwrap();
            for total in totals.split(' ') {
                let (key, want) = total.split_once('=').unwrap();
                let want: u64 = want.parse().unwrap();
                let got = match key.split_once(':') {
                    None => g.max_per_node.get(key),
                    Some((name, t)) => g.max_per_type.get(name).and_then(|types| types.get(t)),
                };
                assert_eq!(got, Some(&want), "{list}: {key}");
                checked += 1;
            }
        }
        assert!(checked >= 10, "{checked}");
        // `gpu:4K` is SLURM's 4096; the provider now reads it so too.
        assert_eq!(NodeGres::parse("NodeName=n Gres=gpu:4K\n", Path::new("/")).unwrap().max_per_node["gpu"], 4096);
    }

    #[test]
    fn maxima_from_slurm_conf() {
        let g = NodeGres::parse(CONF, Path::new("/")).unwrap();
        assert_eq!(g.max_per_node["gpu"], 6);
        assert_eq!(g.max_per_node["fpga"], 1);
    }

    #[test]
    fn includes_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nodes.conf"), "NodeName=n1 Gres=gpu:3\n").unwrap();
        std::fs::write(dir.path().join("slurm.conf"), "ClusterName=x\nInclude nodes.conf\n").unwrap();
        let g = NodeGres::load(&dir.path().join("slurm.conf")).unwrap();
        assert_eq!(g.max_per_node["gpu"], 3);
        assert!(NodeGres::load(&dir.path().join("missing.conf")).is_err());
    }

    #[test]
    fn validation_names_limits_and_types() {
        let g = NodeGres::parse("NodeName=n Gres=gpu:4\n", Path::new("/")).unwrap();
        assert!(g.validate(&req("4")).is_ok());
        let e = g.validate(&req("5")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cder: --gpgpu-per-node=5: more than any node has (at most 4 gpgpu devices per node)"
        );
        let fpga = RawRequest {
            cder: Some(Sourced { value: "fpga:1".into(), source: Source::Option(OPT_CDER) }),
            ..Default::default()
        }
        .parse()
        .unwrap();
        let e = g.validate(&fpga).unwrap_err();
        assert!(e.to_string().contains("unknown CDER type \"fpga\" (this cluster has: gpgpu)"), "{e}");
    }

    #[test]
    fn tres_entries_and_counts() {
        assert_eq!(
            tres_entries("gres:gpu:tesla:2,gres/fpga,cpu=2"),
            vec![("gpu".to_string(), 2), ("fpga".to_string(), 1)]
        );
        assert_eq!(tres_entries("gres:gpu:0"), vec![("gpu".to_string(), 0)]);
        // tres_per_task as 24.05 and later write it.
        assert_eq!(tres_entries("cpu=2,gres/gpu=1"), vec![("gpu".to_string(), 1)]);
        assert_eq!(typed_tres_entries("gres/gpu:tesla=2"), vec![("gpu".to_string(), Some("tesla".to_string()), 2)]);
        assert!(tres_entries("").is_empty());
    }

    #[test]
    fn tres_per_node_merging() {
        assert_eq!(merge_tres_per_node(None, &req("2")).unwrap(), format!("{TRES_PREFIX}gpu:2"));
        assert_eq!(
            merge_tres_per_node(Some("gres:fpga:1"), &req("2")).unwrap(),
            format!("gres:fpga:1,{TRES_PREFIX}gpu:2")
        );
        // The same count, maybe with a model, is kept as the user wrote it.
        assert_eq!(merge_tres_per_node(Some("gres:gpu:tesla:2"), &req("2")).unwrap(), "gres:gpu:tesla:2");
        let e = merge_tres_per_node(Some("gres/gpu:1"), &req("2")).unwrap_err();
        assert!(e.to_string().contains("gres/gpu:1"), "{e}");
    }

    /// SLURM's own MIG support names each profile as a GRES type
    /// (`gpu:1g.10gb:N`); cder counts them as GPUs of their node like any
    /// typed GRES, and a request naming a profile keeps the profile.
    #[test]
    fn mig_profiles_are_typed_gpu_gres() {
        let g = NodeGres::parse("NodeName=a100 Gres=gpu:1g.10gb:4,gpu:3g.40gb:1\n", Path::new("/")).unwrap();
        assert_eq!(g.max_per_node["gpu"], 5);
        assert_eq!(g.max_per_type["gpu"]["1g.10gb"], 4);
        assert_eq!(g.max_per_type["gpu"]["3g.40gb"], 1);
        assert_eq!(
            tres_entries("gres:gpu:1g.10gb:2,gres/gpu:3g.40gb"),
            vec![("gpu".to_string(), 2), ("gpu".to_string(), 1)]
        );
        assert_eq!(merge_tres_per_node(Some("gres:gpu:1g.10gb:2"), &req("2")).unwrap(), "gres:gpu:1g.10gb:2");
        assert!(merge_tres_per_node(Some("gres:gpu:1g.10gb:1"), &req("2")).is_err());
    }

    fn cder(v: &str) -> Request {
        RawRequest { cder: Some(Sourced { value: v.into(), source: Source::Option(OPT_CDER) }), ..Default::default() }
            .parse()
            .unwrap()
    }

    /// `--cder=gpgpu:1g.10gb:N` becomes the typed GRES SLURM schedules
    /// MIG instances by, checked against the profiles the nodes declare.
    #[test]
    fn requests_naming_a_gres_type() {
        let g = NodeGres::parse(
            "NodeName=a Gres=gpu:1g.10gb:3,gpu:2g.20gb:1\nNodeName=b Gres=gpu:1g.10gb:2,gpu:tesla\n",
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(g.max_per_type["gpu"]["1g.10gb"], 3);
        assert_eq!(g.max_per_type["gpu"]["tesla"], 1);
        assert!(g.validate(&cder("gpgpu:1g.10gb:3")).is_ok());
        assert!(g.validate(&cder("gpgpu:1g.10gb:2,gpgpu:2g.20gb:1")).is_ok());
        let e = g.validate(&cder("gpgpu:1g.10gb:4")).unwrap_err();
        assert_eq!(e.to_string(), "cder: --cder=gpgpu:1g.10gb:4: more than any node has (at most 3 gpgpu devices of GRES type 1g.10gb per node)");
        let e = g.validate(&cder("gpgpu:3g.40gb:1")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cder: --cder=gpgpu:3g.40gb:1: no node has gpgpu devices of GRES type \"3g.40gb\" (this cluster has: 1g.10gb, 2g.20gb, tesla)"
        );
        // The total still bounds the sum.
        assert!(g.validate(&cder("gpgpu:1g.10gb:3,gpgpu:2g.20gb:1,gpgpu:tesla:1")).is_err());
        let untyped = NodeGres::parse("NodeName=a Gres=gpu:4\n", Path::new("/")).unwrap();
        assert!(untyped
            .validate(&cder("gpgpu:1g.10gb:1"))
            .unwrap_err()
            .to_string()
            .contains("(this cluster has: no GRES types)"));

        let two = cder("gpgpu:1g.10gb:2,gpgpu:2g.20gb:1");
        assert_eq!(
            merge_tres_per_node(None, &two).unwrap(),
            format!("{TRES_PREFIX}gpu:1g.10gb:2,{TRES_PREFIX}gpu:2g.20gb:1")
        );
        assert_eq!(
            merge_tres_per_node(Some("gres:gpu:2g.20gb:1,gres:gpu:1g.10gb:2"), &two).unwrap(),
            "gres:gpu:2g.20gb:1,gres:gpu:1g.10gb:2"
        );
        assert!(
            merge_tres_per_node(Some("gres:gpu:3"), &two).is_err(),
            "an untyped --gres does not say which profiles"
        );
        assert!(merge_tres_per_node(Some("gres:gpu:1g.10gb:3"), &two).is_err());
    }
}
