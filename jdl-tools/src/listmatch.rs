//! Phase 1 matchmaking: a job's Requirements and Rank against the offers,
//! as `glite-wms-job-list-match` does, plus cder's own clauses:
//!
//! * the per-node test `GPGPUPerNode <= other.GPGPUPerNode` (a node must
//!   hold all the devices a job asks for on it);
//! * for shares of a GPU, `GPGPUSharesPerNode <= other.GPGPUFreeShares`
//!   (only sites that share their GPUs publish it, with the shares free now);
//! * the thesis's vGPGPU rule
//!   `VirtualGPGPUPerNode × CPUNumber <= TotalVGPGPU_<method>` (when a job
//!   asks for virtual GPGPUs, the per-node test does not apply);
//! * named rank presets: `gpgpu-free-ratio` (Free/Total) and
//!   `gpgpu-max-free` (Free/Total × Free/max(Total)), the thesis's formulas.
//!
//! The request is compiled once ([`CompiledRequest`]) and matched against
//! every offer.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::bdii::offers::Offer;
use crate::bdii::query::Wanted;
use crate::jdl::VIRTUAL_GPGPU_METHODS;
use crate::parts::in_parts;
use cder_classad::ast::{BinOp, ClassAd, Expr, Scope};
use cder_classad::eval::{truth, Truth};
use cder_classad::matchmaking::CompiledRequest;
use cder_classad::value::Value;
use cder_request::{glue, keys};

/// A named Rank.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RankPreset {
    /// Free / Total devices (vGPGPUs of the job's method, else GPGPUs).
    GpgpuFreeRatio,
    /// Free/Total × Free / max(Total over the matching CEs).
    GpgpuMaxFree,
}

impl RankPreset {
    /// From its CLI name.
    pub fn parse(s: &str) -> Option<RankPreset> {
        match s {
            "gpgpu-free-ratio" => Some(RankPreset::GpgpuFreeRatio),
            "gpgpu-max-free" => Some(RankPreset::GpgpuMaxFree),
            _ => None,
        }
    }
}

/// A job that cannot be matched as written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct JobError {
    /// The attribute at fault.
    pub key: String,
    /// Why.
    pub message: String,
}

/// What a job asks of a CE, read from its JDL.
#[derive(Clone, Debug)]
pub struct Request {
    /// The job as written.
    pub job: ClassAd,
    /// Requirements with cder's clauses conjoined.
    pub requirements: Expr,
    /// The top-level conjuncts of `requirements`, for `--explain`.
    pub clauses: Vec<Expr>,
    /// The Rank (the job's, a preset's, or gLite's default).
    pub rank: Expr,
    /// The preset, when one was asked for.
    pub preset: Option<RankPreset>,
    /// The vGPGPU method the job asks for (canonical spelling).
    pub method: Option<String>,
}

fn parse(src: &str) -> Expr {
    cder_classad::parser::parse_expr(src).unwrap_or_else(|e| panic!("built-in expression {src:?}: {e}"))
}

fn and(a: Expr, b: Expr) -> Expr {
    Expr::Binary(BinOp::And, Box::new((a, b)))
}

/// Splits `a && (b && c)` into `[a, b, c]`.
pub fn conjuncts(e: &Expr) -> Vec<Expr> {
    match e {
        Expr::Binary(BinOp::And, b) => {
            let mut v = conjuncts(&b.0);
            v.extend(conjuncts(&b.1));
            v
        }
        e => vec![e.clone()],
    }
}

fn positive_int(job: &ClassAd, key: &str) -> Result<Option<i64>, JobError> {
    if job.lookup(key).is_none() {
        return Ok(None);
    }
    match job.eval_attr(key) {
        Value::Int(n) if n > 0 => Ok(Some(n)),
        v => Err(JobError { key: key.into(), message: format!("must be a positive integer, not {v}") }),
    }
}

impl Request {
    /// Reads a job: its Requirements (absent: true), cder's clauses, the Rank.
    pub fn new(job: &ClassAd, preset: Option<RankPreset>) -> Result<Request, JobError> {
        let mut requirements = job.lookup(keys::REQUIREMENTS).cloned().unwrap_or(Expr::Lit(Value::Bool(true)));
        positive_int(job, keys::CPU_NUMBER)?;
        let vcount = positive_int(job, keys::VIRTUAL_GPGPU_PER_NODE)?;
        let method_key = if job.lookup(keys::VIRTUAL_GPGPU_METHOD).is_some() {
            keys::VIRTUAL_GPGPU_METHOD
        } else {
            keys::VIRTUAL_GPGPU_TYPE
        };
        let method = match job.lookup(method_key) {
            None => None,
            Some(_) => match job.eval_attr(method_key) {
                Value::Str(s) => Some(
                    VIRTUAL_GPGPU_METHODS
                        .iter()
                        .find(|m| m.eq_ignore_ascii_case(&s))
                        .map(|m| m.to_string())
                        .ok_or_else(|| JobError {
                            key: method_key.into(),
                            message: format!("{s:?} is not one of {VIRTUAL_GPGPU_METHODS:?}"),
                        })?,
                ),
                v => return Err(JobError { key: method_key.into(), message: format!("must be a string, not {v}") }),
            },
        };
        if vcount.is_some() != method.is_some() {
            return Err(JobError {
                key: if vcount.is_some() {
                    keys::VIRTUAL_GPGPU_METHOD.into()
                } else {
                    keys::VIRTUAL_GPGPU_PER_NODE.into()
                },
                message: "VirtualGPGPUPerNode and VirtualGPGPUMethod go together".into(),
            });
        }
        if let Some(m) = &method {
            // Thesis ch. 4: the per-node GPGPU test does not apply to virtual GPGPUs.
            requirements = and(
                requirements,
                parse(&format!(
                    "MY.VirtualGPGPUPerNode * (isUndefined(MY.CPUNumber) ? 1 : MY.CPUNumber) <= TARGET.TotalVGPGPU_{m}"
                )),
            );
        } else if positive_int(job, keys::GPGPU_PER_NODE)?.is_some() {
            requirements = and(requirements, parse("MY.GPGPUPerNode <= TARGET.GPGPUPerNode"));
        } else if positive_int(job, keys::GPGPU_SHARES_PER_NODE)?.is_some() {
            // Only a site that shares its GPUs publishes GPGPUFreeShares
            // (undefined elsewhere: no match), and it must have that many free.
            requirements = and(requirements, parse("MY.GPGPUSharesPerNode <= TARGET.GPGPUFreeShares"));
        }
        let rank = match preset {
            Some(_) => Self::preset_rank(method.as_deref(), None),
            None => {
                job.lookup(keys::RANK).cloned().unwrap_or_else(|| parse("-TARGET.GlueCEStateEstimatedResponseTime"))
            }
        };
        let clauses = conjuncts(&requirements);
        Ok(Request { job: job.clone(), requirements, clauses, rank, preset, method })
    }

    fn counts(method: Option<&str>) -> (String, String) {
        match method {
            Some(m) => (format!("TARGET.FreeVGPGPU_{m}"), format!("TARGET.TotalVGPGPU_{m}")),
            None => ("TARGET.GPGPUFreeInstances".into(), "TARGET.GPGPUTotalInstances".into()),
        }
    }

    /// The preset's Rank; `max_total` for `gpgpu-max-free` (None: the ratio alone).
    fn preset_rank(method: Option<&str>, max_total: Option<f64>) -> Expr {
        let (free, total) = Self::counts(method);
        let ratio = format!("real({free}) / {total}");
        match max_total {
            Some(max) if max > 0.0 => parse(&format!("({ratio}) * real({free}) / {max:?}")),
            _ => parse(&ratio),
        }
    }

    /// The request ad: the job with the augmented Requirements and the Rank.
    pub fn ad(&self) -> ClassAd {
        let mut ad = self.job.clone();
        ad.insert(keys::REQUIREMENTS, self.requirements.clone());
        ad.insert(keys::RANK, self.rank.clone());
        ad
    }

    /// What the BDII query must fetch: the offer attributes the request uses
    /// whose names start with a CDER prefix, and the VO.
    pub fn wanted(&self, prefixes: &[String], vo: Option<&str>) -> Wanted {
        let mut names = BTreeSet::new();
        let mut visiting = BTreeSet::new();
        target_names(&self.requirements, &self.job, &mut names, &mut visiting);
        target_names(&self.rank, &self.job, &mut names, &mut visiting);
        if self.preset.is_some() && self.method.is_none() {
            names.insert(glue::key(glue::GPGPU_PREFIX, glue::FREE_INSTANCES));
            names.insert(glue::key(glue::GPGPU_PREFIX, glue::TOTAL_INSTANCES));
        }
        let all = names.clone();
        let mut keys: BTreeSet<String> = names
            .into_iter()
            .filter(|n| {
                prefixes
                    .iter()
                    .any(|p| n.len() > p.len() && n.to_ascii_lowercase().starts_with(&p.to_ascii_lowercase()))
            })
            .collect();
        // An offer's `<Vendor><PREFIX>` RTE tag is its `<PREFIX>Vendor` key: a job
        // that reads the tags reads that key (else a carrier publishing its keys
        // as Extensions would lose the tag whenever the vendor is not fetched).
        if !keys.is_empty()
            && all.iter().any(|n| n.eq_ignore_ascii_case("GlueHostApplicationSoftwareRunTimeEnvironment"))
        {
            keys.extend(prefixes.iter().map(|p| format!("{p}Vendor")));
        }
        let vo = vo.map(str::to_string).or_else(|| match self.job.eval_attr(keys::VIRTUAL_ORGANISATION) {
            Value::Str(s) => Some(s.to_string()),
            _ => None,
        });
        Wanted {
            keys,
            prefixes: prefixes.iter().cloned().collect(),
            vo,
            vgpgpu: self.method.is_some(),
            names: Some(all),
        }
    }
}

/// Names an expression may look up in the offer: `other.X`, and unqualified
/// names the job does not define (followed through the job's own attributes).
fn target_names(e: &Expr, job: &ClassAd, out: &mut BTreeSet<String>, visiting: &mut BTreeSet<String>) {
    match e {
        Expr::Lit(_) | Expr::Ad(_) => {}
        Expr::Attr { scope, name, .. } => match scope {
            Scope::Target => {
                out.insert(name.to_string());
            }
            Scope::Plain | Scope::My => match job.lookup(name) {
                Some(def) if visiting.insert(name.to_ascii_lowercase()) => target_names(def, job, out, visiting),
                Some(_) => {}
                None if *scope == Scope::Plain => {
                    out.insert(name.to_string());
                }
                None => {}
            },
            Scope::Parent => {}
        },
        Expr::Select(b, _, _) => target_names(b, job, out, visiting),
        Expr::Index(b) => {
            // `other["GPGPUVendor"]` looks the name up as `other.GPGPUVendor` does.
            if let Expr::Lit(Value::Str(name)) = &b.1 {
                out.insert(name.to_string());
            }
            target_names(&b.0, job, out, visiting);
            target_names(&b.1, job, out, visiting);
        }
        Expr::Unary(_, x) => target_names(x, job, out, visiting),
        Expr::Binary(_, b) => {
            target_names(&b.0, job, out, visiting);
            target_names(&b.1, job, out, visiting);
        }
        Expr::Cond(b) => {
            target_names(&b.0, job, out, visiting);
            target_names(&b.1, job, out, visiting);
            target_names(&b.2, job, out, visiting);
        }
        Expr::Call(c) => c.args.iter().for_each(|a| target_names(a, job, out, visiting)),
        Expr::List(items) => items.iter().for_each(|a| target_names(a, job, out, visiting)),
    }
}

/// A matching CE.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// `GlueCEUniqueID`.
    pub ce_id: String,
    /// The Rank of its best offer.
    pub rank: f64,
    /// Index of that offer in the slice given to [`list_match`].
    pub offer: usize,
}

/// A CE left out, with each clause that was not true (per offer of the CE).
#[derive(Clone, Debug, PartialEq)]
pub struct Excluded {
    /// `GlueCEUniqueID`.
    pub ce_id: String,
    /// `clause is false` / `clause is undefined` lines.
    pub reasons: Vec<String>,
}

/// The outcome of phase 1.
#[derive(Clone, Debug, Default)]
pub struct MatchResult {
    /// Matching CEs, best rank first (ties by CE id).
    pub matches: Vec<Match>,
    /// CEs without a matching offer (filled only when asked to explain).
    pub excluded: Vec<Excluded>,
}

impl MatchResult {
    /// The matching CE ids, best first.
    pub fn ce_ids(&self) -> Vec<&str> {
        self.matches.iter().map(|m| m.ce_id.as_str()).collect()
    }
}

fn describe(v: &Value) -> &'static str {
    match truth(v) {
        Truth::True => "true",
        Truth::False => "false",
        Truth::Undefined => "undefined",
        Truth::Error => "error",
    }
}

/// [`list_match`] without explanations over offers made one at a time,
/// keeping only each CE's best matching offer: memory for one offer per CE,
/// not per offer. The answer is the one [`list_match`] gives over them all;
/// `matches[k].offer` indexes the offers returned.
pub fn list_match_best<E>(
    request: &Request,
    offers: impl Iterator<Item = Result<Offer, E>>,
) -> Result<(MatchResult, Vec<Offer>), E> {
    if matches!(request.preset, Some(RankPreset::GpgpuMaxFree)) {
        // Its Rank needs the largest pool among all matches: keep every match.
        let compiled = CompiledRequest::new(&request.ad());
        let mut kept: Vec<Offer> = Vec::new();
        for o in offers {
            let o = o?;
            if compiled.matches(&o.ad) {
                kept.push(o);
            }
        }
        return Ok((list_match(request, &kept, false), kept));
    }
    let best = best_per_ce(request, offers.map(|o| o.map(|o| (o.ce_id.clone(), o))), |o| &o.ad)?;
    ranked(best.into_iter().map(Ok))
}

/// The matching offers' best per CE, as [`list_match`] picks them, over
/// offers made one at a time and known by a key of their CE (equal keys for
/// equal CE IDs: the CE ID itself, or its id in a string table), so that an
/// offer's other fields need be made only for the CEs' best: (rank, offer)
/// per CE, in no particular order. A CE's first match holds its slot unless
/// a later one ranks strictly higher. Not for the `gpgpu-max-free` preset,
/// whose Rank needs every match first.
pub fn best_per_ce<K: std::hash::Hash + Eq, T, E>(
    request: &Request,
    offers: impl Iterator<Item = Result<(K, T), E>>,
    ad: impl Fn(&T) -> &ClassAd,
) -> Result<Vec<(f64, T)>, E> {
    let compiled = CompiledRequest::new(&request.ad());
    let mut slots: HashMap<K, usize> = HashMap::new();
    let mut kept: Vec<(f64, T)> = Vec::new();
    for o in offers {
        let (key, o) = o?;
        if !compiled.matches(ad(&o)) {
            continue;
        }
        let r = compiled.rank(ad(&o));
        match slots.get(&key) {
            Some(&slot) => {
                if r > kept[slot].0 {
                    kept[slot] = (r, o);
                }
            }
            None => {
                slots.insert(key, kept.len());
                kept.push((f64::NEG_INFINITY.max(r), o));
            }
        }
    }
    Ok(kept)
}

/// Each CE's best offer and its rank, in any order, as [`list_match`]
/// reports them: best rank first, ties by CE ID.
pub fn ranked<E>(best: impl ExactSizeIterator<Item = Result<(f64, Offer), E>>) -> Result<(MatchResult, Vec<Offer>), E> {
    let mut offers: Vec<Offer> = Vec::with_capacity(best.len());
    let mut matches: Vec<Match> = Vec::with_capacity(best.len());
    for o in best {
        let (rank, o) = o?;
        matches.push(Match { ce_id: o.ce_id.clone(), rank, offer: offers.len() });
        offers.push(o);
    }
    matches.sort_by(|a, b| b.rank.total_cmp(&a.rank).then_with(|| a.ce_id.cmp(&b.ce_id)));
    Ok((MatchResult { matches, excluded: Vec::new() }, offers))
}

/// The indices of the offers `compiled` matches, in order: a grid's 10^4–10^5
/// offers are split across a few threads (each match reads only its offer).
fn matching(compiled: &CompiledRequest, offers: &[Offer]) -> Vec<usize> {
    let parts = in_parts(offers, |start, part| {
        part.iter().enumerate().filter(|(_, o)| compiled.matches(&o.ad)).map(|(i, _)| start + i).collect::<Vec<_>>()
    });
    parts.into_iter().flatten().collect()
}

/// Matches and ranks. `explain`: also say why each other CE was left out.
pub fn list_match(request: &Request, offers: &[Offer], explain: bool) -> MatchResult {
    let compiled = CompiledRequest::new(&request.ad());
    let matched = matching(&compiled, offers);
    let ranker = match request.preset {
        Some(RankPreset::GpgpuMaxFree) => {
            // The thesis's supplemental formula needs the largest pool among the matches first.
            let total_key = Request::counts(request.method.as_deref()).1;
            let total_key = total_key.trim_start_matches("TARGET.");
            let max =
                matched.iter().filter_map(|&i| offers[i].ad.eval_attr(total_key).as_number()).fold(0.0_f64, f64::max);
            let mut ad = request.ad();
            ad.insert(keys::RANK, Request::preset_rank(request.method.as_deref(), Some(max)));
            CompiledRequest::new(&ad)
        }
        _ => compiled,
    };
    let mut best: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for &i in &matched {
        let r = ranker.rank(&offers[i].ad);
        let slot = best.entry(offers[i].ce_id.as_str()).or_insert((f64::NEG_INFINITY, i));
        if r > slot.0 {
            *slot = (r, i);
        }
    }
    let mut matches: Vec<Match> =
        best.into_iter().map(|(ce, (rank, offer))| Match { ce_id: ce.to_string(), rank, offer }).collect();
    matches.sort_by(|a, b| b.rank.total_cmp(&a.rank).then_with(|| a.ce_id.cmp(&b.ce_id)));
    let mut excluded = Vec::new();
    if explain {
        let matched_ces: BTreeSet<&str> = matches.iter().map(|m| m.ce_id.as_str()).collect();
        let clauses: Vec<(String, CompiledRequest)> = request
            .clauses
            .iter()
            .map(|c| {
                let mut ad = request.job.clone();
                ad.insert(keys::REQUIREMENTS, c.clone());
                (c.to_string(), CompiledRequest::new(&ad))
            })
            .collect();
        // Offers per CE, counted once (a grid has 10^4 offers: not once per offer).
        let mut per_ce: HashMap<&str, usize> = HashMap::new();
        for o in offers {
            *per_ce.entry(o.ce_id.as_str()).or_default() += 1;
        }
        let mut by_ce: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for o in offers.iter().filter(|o| !matched_ces.contains(o.ce_id.as_str())) {
            let reasons = by_ce.entry(o.ce_id.as_str()).or_default();
            for (text, c) in &clauses {
                let v = c.requirements_value(&o.ad);
                if truth(&v) != Truth::True {
                    let line = match &o.ee_id {
                        Some(ee) if per_ce[o.ce_id.as_str()] > 1 => format!("{text} is {} (on {ee})", describe(&v)),
                        _ => format!("{text} is {}", describe(&v)),
                    };
                    if !reasons.contains(&line) {
                        reasons.push(line);
                    }
                }
            }
        }
        excluded = by_ce.into_iter().map(|(ce, reasons)| Excluded { ce_id: ce.to_string(), reasons }).collect();
    }
    MatchResult { matches, excluded }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(ce: &str, src: &str) -> Offer {
        Offer {
            ce_id: ce.into(),
            queue: None,
            share_id: None,
            ee_id: None,
            schema: "GLUE2",
            ad: ClassAd::parse(src).unwrap(),
            traits: None,
        }
    }

    fn job(src: &str) -> ClassAd {
        ClassAd::parse(src).unwrap()
    }

    #[test]
    fn a_share_job_matches_sites_with_that_many_free_shares_only() {
        let offers = vec![
            // Whole GPUs only: no share keys, never a match for shares.
            offer("whole", "[ GPGPUPerNode = 4; GPGPUFreeInstances = 4; GlueCEStateEstimatedResponseTime = 1 ]"),
            offer("full", "[ GPGPUPerNode = 4; GPGPUTotalShares = 16; GPGPUFreeShares = 1; GPGPUUsedShares = 15 ]"),
            offer("room", "[ GPGPUPerNode = 4; GPGPUTotalShares = 16; GPGPUFreeShares = 13; GPGPUUsedShares = 3 ]"),
        ];
        let r = Request::new(&job("[ GPGPUSharesPerNode = 2 ]"), None).unwrap();
        let res = list_match(&r, &offers, true);
        assert_eq!(res.ce_ids(), ["room"]);
        let mut reasons: Vec<(String, Vec<String>)> =
            res.excluded.iter().map(|e| (e.ce_id.clone(), e.reasons.clone())).collect();
        reasons.sort();
        assert_eq!(
            reasons,
            [
                ("full".to_string(), vec!["MY.GPGPUSharesPerNode <= TARGET.GPGPUFreeShares is false".to_string()]),
                ("whole".to_string(), vec!["MY.GPGPUSharesPerNode <= TARGET.GPGPUFreeShares is undefined".to_string()])
            ]
        );
        let w = r.wanted(&["GPGPU".to_string()], None);
        assert!(w.keys.contains("GPGPUFreeShares"), "{:?}", w.keys);
        assert_eq!(Request::new(&job("[ GPGPUSharesPerNode = 0 ]"), None).unwrap_err().key, "GPGPUSharesPerNode");
    }

    #[test]
    fn per_node_test_and_rank_order() {
        let offers = vec![
            offer("a", "[ GPGPUPerNode = 1; GPGPUVendor = \"Nvidia\"; GlueCEStateEstimatedResponseTime = 10 ]"),
            offer("b", "[ GPGPUPerNode = 2; GPGPUVendor = \"Nvidia\"; GlueCEStateEstimatedResponseTime = 50 ]"),
            offer("c", "[ GPGPUPerNode = 4; GPGPUVendor = \"NVIDIA\"; GlueCEStateEstimatedResponseTime = 5 ]"),
        ];
        let r = Request::new(&job("[ GPGPUPerNode = 2; Requirements = GPGPUVendor == \"Nvidia\" ]"), None).unwrap();
        let res = list_match(&r, &offers, true);
        assert_eq!(res.ce_ids(), ["c", "b"], "default rank: shortest estimated response first");
        assert_eq!(res.excluded.len(), 1);
        assert_eq!(res.excluded[0].reasons, ["MY.GPGPUPerNode <= TARGET.GPGPUPerNode is false"]);
    }

    #[test]
    fn vgpgpu_rule_and_presets() {
        let offers = vec![
            offer("a", "[ TotalVGPGPU_rCUDA = 2; FreeVGPGPU_rCUDA = 1 ]"),
            offer("b", "[ TotalVGPGPU_rCUDA = 20; FreeVGPGPU_rCUDA = 10 ]"),
            offer("c", "[ TotalVGPGPU_rCUDA = 100; FreeVGPGPU_rCUDA = 50 ]"),
            offer("d", "[ TotalVGPGPU_VCL = 100; FreeVGPGPU_VCL = 100 ]"),
        ];
        let j = job("[ VirtualGPGPUPerNode = 1; VirtualGPGPUMethod = \"rcuda\"; CPUNumber = 2; GPGPUPerNode = 8 ]");
        let ratio = list_match(&Request::new(&j, Some(RankPreset::GpgpuFreeRatio)).unwrap(), &offers, true);
        // 1 vGPGPU × 2 CPUs fits a's pool of 2; the ratios tie at 0.5, so CE ids order them.
        assert_eq!(ratio.ce_ids(), ["a", "b", "c"]);
        let maxfree = list_match(&Request::new(&j, Some(RankPreset::GpgpuMaxFree)).unwrap(), &offers, false);
        assert_eq!(maxfree.ce_ids(), ["c", "b", "a"]);
        assert!((maxfree.matches[0].rank - 0.25).abs() < 1e-9, "{:?}", maxfree.matches);
        let why = &ratio.excluded.iter().find(|e| e.ce_id == "d").unwrap().reasons;
        assert!(why[0].contains("TotalVGPGPU_rCUDA") && why[0].ends_with("is undefined"), "{why:?}");
    }

    #[test]
    fn wanted_keys_follow_the_jobs_own_attributes() {
        let r = Request::new(&job("[ MinMem = 512; Requirements = GPGPUMainMemorySize >= MinMem && other.GPGPUVendor == \"Nvidia\" && other.GlueCEStateFreeCPUs > 0 ]"), None).unwrap();
        let w = r.wanted(&["GPGPU".to_string()], Some("gputestvo"));
        assert_eq!(w.keys.iter().map(String::as_str).collect::<Vec<_>>(), ["GPGPUMainMemorySize", "GPGPUVendor"]);
        assert_eq!(w.vo.as_deref(), Some("gputestvo"));
    }

    #[test]
    fn a_job_reading_the_rte_tags_reads_the_vendor_key() {
        let r = Request::new(
            &job("[ Requirements = Member(\"NvidiaGPGPU\", other.GlueHostApplicationSoftwareRunTimeEnvironment) && other.GPGPUPerNode >= 2 ]"),
            None,
        )
        .unwrap();
        let w = r.wanted(&["GPGPU".to_string()], None);
        assert_eq!(w.keys.iter().map(String::as_str).collect::<Vec<_>>(), ["GPGPUPerNode", "GPGPUVendor"]);
        // With no key named, every carrier of the prefix is fetched already.
        let r = Request::new(
            &job("[ Requirements = Member(\"NvidiaGPGPU\", other.GlueHostApplicationSoftwareRunTimeEnvironment) ]"),
            None,
        )
        .unwrap();
        assert!(r.wanted(&["GPGPU".to_string()], None).keys.is_empty());
    }

    #[test]
    fn subscripted_names_are_wanted_too() {
        let r = Request::new(
            &job("[ Requirements = other[\"GPGPUVendor\"] == \"Nvidia\"; Rank = other.GPGPUMainMemorySize ]"),
            None,
        )
        .unwrap();
        let w = r.wanted(&["GPGPU".to_string()], None);
        assert_eq!(w.keys.iter().map(String::as_str).collect::<Vec<_>>(), ["GPGPUMainMemorySize", "GPGPUVendor"]);
        assert!(w.names.unwrap().contains("GPGPUVendor"));
    }

    #[test]
    fn bad_vgpgpu_requests_are_rejected() {
        assert_eq!(
            Request::new(&job("[ VirtualGPGPUPerNode = 1; VirtualGPGPUMethod = \"OpenCL\" ]"), None).unwrap_err().key,
            "VirtualGPGPUMethod"
        );
        assert_eq!(Request::new(&job("[ VirtualGPGPUPerNode = 1 ]"), None).unwrap_err().key, "VirtualGPGPUMethod");
        assert_eq!(Request::new(&job("[ GPGPUPerNode = 0 ]"), None).unwrap_err().key, "GPGPUPerNode");
    }
}
