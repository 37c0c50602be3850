//! The CE side of Independence: a job's JDL attributes become batch-system
//! directives. BLAH's `slurm_local_submit_attributes.sh` /
//! `pbs_local_submit_attributes.sh` run `cder-jdl lrms-attrs`, and BLAH
//! inserts what it prints into the batch script.
//!
//! | JDL | SLURM | TORQUE (native) | TORQUE + MAUI (patched) |
//! |---|---|---|---|
//! | `GPGPUPerNode = N` | `#SBATCH --gres=gpu:N` | `#PBS -l nodes=…:gpus=N` | `#PBS -W x=GRES:gpus@N` |
//! | `GPGPUSharesPerNode = N` | `#SBATCH --gres=shard:N` | refused: no counted form for shares | refused |
//! | `VirtualGPGPUPerNode = V`, `VirtualGPGPUMethod = M` | `#SBATCH --licenses=vgpgpu:V×CPUNumber` | `#PBS -v VirtualGPGPUPerNode=V,VirtualGPGPUMethod=M` | same as native |
//! | `CPUNumber`, `SMPGranularity`, `HostNumber` | `--ntasks`, `--ntasks-per-node`, `--nodes` | `nodes=H:ppn=G` | same |
//! | `WholeNodes = true` | `--exclusive` | `#PBS -n` | same |
//!
//! HTCondor-CE's GPU vocabulary is understood beside the JDL keys (see
//! docs/htcondor-ce.md): `RequestGPUs` is the same count as `GPGPUPerNode`
//! (both given, they must agree); `gpus_minimum_capability` and
//! `gpus_minimum_memory` are checked and exported for the job, since
//! neither SLURM nor TORQUE counts them; `require_gpus` must parse as a
//! ClassAd expression. HTCondor-CE's blahp writes its own
//! `--gres=gpu[:model]:N` for `RequestGPUs`; with
//! [`Settings::blahp_writes_gpus`] cder then writes no second GPU directive.
//! In TORQUE+MAUI mode the mark the prologue reads (`-l other=cder:gpgpu:N`)
//! goes with the MAUI request.
//!
//! The vGPGPU keys are also exported (`export VirtualGPGPUPerNode=…`) for
//! the job's own wrappers. Counts, the vGPGPU method and every resource name
//! come from `cder_request`, the vocabulary job_submit, the SPANK plugin and
//! the TORQUE filter share: SLURM counts vGPGPUs as the `vgpgpu` licence, and
//! TORQUE's filter holds a job whose `#PBS -v` names `VirtualGPGPUPerNode`
//! until the registry has its backends.

use std::fmt;

use cder_request::keys::htcondor as htc;
use cder_request::{keys, lrms as names, VgpgpuError, VgpgpuMethod, VgpgpuRequest};

use cder_classad::ast::{ClassAd, Pos};
use cder_classad::value::Value;

/// The batch system.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DirectiveDialect {
    /// SLURM (`#SBATCH`).
    Slurm,
    /// TORQUE/PBS (`#PBS`).
    Pbs,
}

/// How TORQUE sites request GPUs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PbsGpus {
    /// TORQUE's own `nodes=…:gpus=N`.
    Native,
    /// MAUI patched for generic resources: `-W x=GRES:<maui_gres>@N`.
    Maui,
}

/// Translation settings (site configuration).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The LRMS.
    pub lrms: DirectiveDialect,
    /// TORQUE GPU request style.
    pub pbs_gpus: PbsGpus,
    /// SLURM GRES name of GPGPUs.
    pub gres: String,
    /// MAUI generic-resource name of GPGPUs.
    pub maui_gres: String,
    /// SLURM licence that counts vGPGPU backends (default `vgpgpu`, what
    /// job_submit_cder.so counts).
    pub licence: Option<String>,
    /// blahp (HTCondor-CE) writes its own GPU directive for `RequestGPUs`:
    /// cder then writes none for that count, so the job has exactly one.
    pub blahp_writes_gpus: bool,
}

impl Settings {
    /// Defaults for an LRMS: native TORQUE GPUs, GRES `gpu`.
    pub fn new(lrms: DirectiveDialect) -> Settings {
        Settings {
            lrms,
            pbs_gpus: PbsGpus::Native,
            gres: names::GPU_GRES.into(),
            maui_gres: names::MAUI_GPU_GRES.into(),
            licence: None,
            blahp_writes_gpus: false,
        }
    }
}

/// A value the CE cannot honour.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct AttrError {
    /// The JDL key.
    pub key: String,
    /// Where it was written (JDL input), if known.
    pub pos: Option<Pos>,
    /// Why.
    pub message: String,
}

impl fmt::Display for AttrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pos {
            Some(p) if p.line > 0 => write!(f, "{p}: {}: {}", self.key, self.message),
            _ => write!(f, "{}: {}", self.key, self.message),
        }
    }
}

/// The resource request of a job, validated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobResources {
    /// `CPUNumber`.
    pub cpus: Option<i64>,
    /// `SMPGranularity`: cores per node.
    pub smp_granularity: Option<i64>,
    /// `HostNumber`.
    pub hosts: Option<i64>,
    /// `WholeNodes`.
    pub whole_nodes: bool,
    /// `GPGPUPerNode`.
    pub gpgpus_per_node: Option<i64>,
    /// `GPGPUSharesPerNode`: shares of one GPU, never with whole ones.
    pub gpgpu_shares_per_node: Option<i64>,
    /// `VirtualGPGPUPerNode`.
    pub vgpgpus_per_node: Option<i64>,
    /// `VirtualGPGPUMethod` / `VirtualGPGPUType`, canonical spelling.
    pub vgpgpu_method: Option<String>,
    /// The GPU count came from HTCondor's `RequestGPUs` (blahp may have
    /// written its directive already).
    pub gpus_from_request_gpus: bool,
    /// `gpus_minimum_capability`, `major.minor`.
    pub gpus_minimum_capability: Option<(u32, u32)>,
    /// `gpus_minimum_memory`, MiB.
    pub gpus_minimum_memory: Option<u32>,
}

/// Where the attributes come from: a parsed JDL or BLAH's environment.
pub trait Source {
    /// The value of a key, if set.
    fn get(&self, key: &str) -> Option<Value>;
    /// Where the key was written.
    fn pos(&self, _key: &str) -> Option<Pos> {
        None
    }
}

impl Source for ClassAd {
    fn get(&self, key: &str) -> Option<Value> {
        self.lookup(key).map(|_| self.eval_attr(key))
    }
    fn pos(&self, key: &str) -> Option<Pos> {
        self.attribute(key).map(|a| a.pos)
    }
}

/// Environment variables as BLAH exports the JDL's CE requirements
/// (`GPGPUPerNode=2`, `WholeNodes=true`, `VirtualGPGPUMethod=rCUDA` or `"rCUDA"`).
pub struct EnvSource<F: Fn(&str) -> Option<String>>(pub F);

/// Reads one environment value as BLAH writes it: integer, boolean, or string (quotes optional).
pub fn env_value(raw: &str) -> Value {
    let t = raw.trim();
    if let Ok(i) = t.parse::<i64>() {
        return Value::Int(i);
    }
    if t.eq_ignore_ascii_case("true") {
        return Value::Bool(true);
    }
    if t.eq_ignore_ascii_case("false") {
        return Value::Bool(false);
    }
    let unq = t.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(t);
    Value::str(unq)
}

impl<F: Fn(&str) -> Option<String>> Source for EnvSource<F> {
    fn get(&self, key: &str) -> Option<Value> {
        (self.0)(key).filter(|v| !v.trim().is_empty()).map(|v| env_value(&v))
    }
}

/// The keys a BLAH drop-in hands over (`--attr KEY=VALUE`): the JDL keys and
/// HTCondor's GPU vocabulary. A drop-in passes exactly these, whatever else
/// the job set.
pub const BLAH_KEYS: [&str; 13] = [
    keys::GPGPU_PER_NODE,
    keys::GPGPU_SHARES_PER_NODE,
    keys::VIRTUAL_GPGPU_PER_NODE,
    keys::VIRTUAL_GPGPU_METHOD,
    keys::VIRTUAL_GPGPU_TYPE,
    keys::CPU_NUMBER,
    keys::SMP_GRANULARITY,
    keys::HOST_NUMBER,
    keys::WHOLE_NODES,
    htc::REQUEST_GPUS,
    htc::REQUIRE_GPUS,
    htc::GPUS_MINIMUM_CAPABILITY,
    htc::GPUS_MINIMUM_MEMORY,
];

/// The directive that makes the batch system refuse a job whose attribute
/// `key` cder could not honour, naming it: BLAH ignores a drop-in's exit
/// status and stderr, so only the batch script can stop the job. sbatch
/// refuses `unrecognized option '--cder-bad-attribute=KEY'`; TORQUE's qsub
/// `Unknown resource type Resource_List.cder_bad_attribute_KEY`. `key` must
/// be one of [`BLAH_KEYS`] or another fixed name, never job text.
pub fn refusal_directive(lrms: DirectiveDialect, key: &str) -> String {
    let key: String = key.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    match lrms {
        DirectiveDialect::Slurm => format!("#SBATCH {}={key}", names::SLURM_REFUSAL_OPTION),
        DirectiveDialect::Pbs => format!("#PBS -l {}{key}=1", names::PBS_REFUSAL_PREFIX),
    }
}

/// Most CPUs or hosts a job may name: far beyond any cluster, small enough
/// that products of two such numbers cannot overflow.
const MAX_CPU_COUNT: i64 = 1 << 20;

fn count(src: &dyn Source, key: &str) -> Result<Option<i64>, AttrError> {
    match src.get(key) {
        None | Some(Value::Undefined) => Ok(None),
        Some(Value::Int(n)) if (1..=MAX_CPU_COUNT).contains(&n) => Ok(Some(n)),
        Some(v) => Err(AttrError {
            key: key.into(),
            pos: src.pos(key),
            message: format!("must be a whole number from 1 to {MAX_CPU_COUNT}, not {v}"),
        }),
    }
}

/// A device count: the one rule of `cder_request`.
fn device_count(src: &dyn Source, key: &str) -> Result<Option<i64>, AttrError> {
    match src.get(key) {
        None | Some(Value::Undefined) => Ok(None),
        Some(Value::Int(n)) => cder_request::check_count(n).map(|n| Some(i64::from(n))).map_err(|e| AttrError {
            key: key.into(),
            pos: src.pos(key),
            message: format!("{e}, not {n}"),
        }),
        Some(v) => Err(AttrError {
            key: key.into(),
            pos: src.pos(key),
            message: format!("must be a whole number from 1 to {}, not {v}", cder_request::MAX_COUNT),
        }),
    }
}

impl JobResources {
    /// Reads and checks the keys the CE honours.
    pub fn read(src: &dyn Source) -> Result<JobResources, AttrError> {
        let err = |key: &str, message: String| AttrError { key: key.into(), pos: src.pos(key), message };
        let whole_nodes = match src.get(keys::WHOLE_NODES) {
            None | Some(Value::Undefined) => false,
            Some(Value::Bool(b)) => b,
            Some(v) => return Err(err(keys::WHOLE_NODES, format!("must be true or false, not {v}"))),
        };
        let method_key = if src.get(keys::VIRTUAL_GPGPU_METHOD).is_some() {
            keys::VIRTUAL_GPGPU_METHOD
        } else {
            keys::VIRTUAL_GPGPU_TYPE
        };
        let method = match src.get(method_key) {
            None | Some(Value::Undefined) => None,
            Some(Value::Str(s)) => Some(s.parse::<VgpgpuMethod>().map_err(|e| err(method_key, e.to_string()))?),
            Some(v) => return Err(err(method_key, format!("must be a string, not {v}"))),
        };
        let vgpgpus_per_node = device_count(src, keys::VIRTUAL_GPGPU_PER_NODE)?;
        // The decision every door shares (no method means rCUDA; a method without a
        // count is refused) is cder_request's; the count and method were checked above,
        // so that their own errors keep naming the key and value the JDL wrote.
        let per_node = vgpgpus_per_node.map(|n| n.to_string());
        let vgpgpu_method = match VgpgpuRequest::read(per_node.as_deref(), method.map(VgpgpuMethod::name)) {
            Ok(r) => r.map(|r| r.method.name().to_string()),
            Err(VgpgpuError::MethodWithoutCount) => {
                return Err(err(method_key, format!("needs {}", keys::VIRTUAL_GPGPU_PER_NODE)))
            }
            Err(e) => return Err(err(keys::VIRTUAL_GPGPU_PER_NODE, e.to_string())),
        };
        let gpgpus = device_count(src, keys::GPGPU_PER_NODE)?;
        let request_gpus = device_count(src, htc::REQUEST_GPUS)?;
        if let (Some(g), Some(r)) = (gpgpus, request_gpus) {
            if g != r {
                return Err(err(htc::REQUEST_GPUS, format!("{r} GPUs contradicts {} = {g}", keys::GPGPU_PER_NODE)));
            }
        }
        let shares = device_count(src, keys::GPGPU_SHARES_PER_NODE)?;
        if shares.is_some() && (gpgpus.is_some() || request_gpus.is_some()) {
            return Err(err(
                keys::GPGPU_SHARES_PER_NODE,
                format!("a job asks for whole GPGPUs ({}) or for shares of one, not both", keys::GPGPU_PER_NODE),
            ));
        }
        let text = |key: &str| -> Result<Option<String>, AttrError> {
            match src.get(key) {
                None | Some(Value::Undefined) => Ok(None),
                Some(Value::Str(s)) => Ok(Some(s.to_string())),
                Some(Value::Int(i)) => Ok(Some(i.to_string())),
                Some(Value::Real(r)) => Ok(Some(r.to_string())),
                Some(v) => Err(err(key, format!("must be a number, not {v}"))),
            }
        };
        let gpus_minimum_capability = match text(htc::GPUS_MINIMUM_CAPABILITY)? {
            Some(t) => {
                Some(cder_request::parse_capability(&t).map_err(|e| err(htc::GPUS_MINIMUM_CAPABILITY, e.to_string()))?)
            }
            None => None,
        };
        let gpus_minimum_memory = match text(htc::GPUS_MINIMUM_MEMORY)? {
            Some(t) => {
                Some(cder_request::parse_gpu_memory(&t).map_err(|e| err(htc::GPUS_MINIMUM_MEMORY, e.to_string()))?)
            }
            None => None,
        };
        match src.get(htc::REQUIRE_GPUS) {
            None | Some(Value::Undefined) | Some(Value::Bool(_)) => {}
            Some(Value::Str(expr)) => {
                cder_classad::parser::parse_expr(&expr)
                    .map_err(|e| err(htc::REQUIRE_GPUS, format!("not a ClassAd expression ({e})")))?;
            }
            Some(v) => return Err(err(htc::REQUIRE_GPUS, format!("must be a ClassAd expression, not {v}"))),
        }
        let r = JobResources {
            cpus: count(src, keys::CPU_NUMBER)?,
            smp_granularity: count(src, keys::SMP_GRANULARITY)?,
            hosts: count(src, keys::HOST_NUMBER)?,
            whole_nodes,
            gpgpus_per_node: gpgpus.or(request_gpus),
            gpgpu_shares_per_node: shares,
            vgpgpus_per_node,
            vgpgpu_method,
            gpus_from_request_gpus: request_gpus.is_some(),
            gpus_minimum_capability,
            gpus_minimum_memory,
        };
        if let (Some(v), Some(_)) = (r.vgpgpus_per_node, &r.vgpgpu_method) {
            if r.vgpgpus_total().is_none() {
                let factor = r.cpus.unwrap_or(1);
                return Err(err(
                    keys::VIRTUAL_GPGPU_PER_NODE,
                    format!(
                        "{v} per node for {factor} CPUs exceeds {} vGPGPUs for one job",
                        cder_request::MAX_JOB_TOTAL
                    ),
                ));
            }
        }
        if let (Some(h), Some(c)) = (r.hosts, r.cpus) {
            if h > c {
                return Err(err(keys::HOST_NUMBER, format!("{h} hosts for {c} CPUs (CPUNumber)")));
            }
        }
        if let (Some(g), Some(c)) = (r.smp_granularity, r.cpus) {
            if g > c && !r.whole_nodes {
                return Err(err(keys::SMP_GRANULARITY, format!("{g} cores per node exceeds CPUNumber {c}")));
            }
        }
        Ok(r)
    }

    /// Whether `lrms` can count what the job asks for: TORQUE has no
    /// counted form for shares of a GPU, so such a job is refused there.
    pub fn check_dialect(&self, lrms: DirectiveDialect) -> Result<(), AttrError> {
        match (lrms, self.gpgpu_shares_per_node) {
            (DirectiveDialect::Pbs, Some(n)) => Err(AttrError {
                key: keys::GPGPU_SHARES_PER_NODE.into(),
                pos: None,
                message: format!("{n}: {}", names::TORQUE_NO_SHARES),
            }),
            _ => Ok(()),
        }
    }

    /// Nodes the job spans: HostNumber, else CPUNumber / SMPGranularity (rounded up), else 1.
    pub fn nodes(&self) -> i64 {
        self.hosts.unwrap_or_else(|| match (self.cpus, self.smp_granularity) {
            (Some(c), Some(g)) => (c + g - 1) / g,
            _ => 1,
        })
    }

    /// vGPGPUs for the whole job: VirtualGPGPUPerNode × CPUNumber (thesis
    /// ch. 4), `None` without a request or above cder_request's job total.
    pub fn vgpgpus_total(&self) -> Option<u32> {
        let per_node = u32::try_from(self.vgpgpus_per_node?).ok()?;
        cder_request::job_total(per_node, u64::try_from(self.cpus.unwrap_or(1)).ok()?)
    }

    /// The vGPGPU request in the shared vocabulary, for the `#PBS -v` form.
    fn vgpgpu_request(&self) -> Option<VgpgpuRequest> {
        let per_node = u32::try_from(self.vgpgpus_per_node?).ok()?;
        let method = self.vgpgpu_method.as_deref()?.parse().ok()?;
        Some(VgpgpuRequest { per_node, method })
    }
}

/// The directives (and `export` lines) for a job, one per line.
pub fn directives(r: &JobResources, s: &Settings) -> Vec<String> {
    let mut out = Vec::new();
    let licence =
        r.vgpgpu_method.as_ref().map(|_| s.licence.clone().unwrap_or_else(|| names::VGPGPU_LICENCE.to_string()));
    match s.lrms {
        DirectiveDialect::Slurm => {
            if let Some(c) = r.cpus {
                out.push(format!("#SBATCH --ntasks={c}"));
            }
            if let Some(g) = r.smp_granularity {
                out.push(format!("#SBATCH --ntasks-per-node={g}"));
            }
            if r.hosts.is_some() || (r.whole_nodes && r.cpus.is_some() && r.smp_granularity.is_some()) {
                out.push(format!("#SBATCH --nodes={}", r.nodes()));
            }
            if r.whole_nodes {
                out.push("#SBATCH --exclusive".into());
            }
            if let Some(n) = r.gpgpus_per_node.filter(|_| !(r.gpus_from_request_gpus && s.blahp_writes_gpus)) {
                out.push(format!("#SBATCH --gres={}:{n}", s.gres));
            }
            if let Some(n) = r.gpgpu_shares_per_node {
                out.push(format!("#SBATCH --gres={}", names::slurm_gres(cder_request::GPGPU_SHARES, n as u32)));
            }
            if let (Some(l), Some(t)) = (&licence, r.vgpgpus_total()) {
                out.push(format!("#SBATCH --licenses={l}:{t}"));
            }
        }
        DirectiveDialect::Pbs => {
            let ppn = r.smp_granularity.or(if r.nodes() == 1 { r.cpus } else { None });
            let mut nodes = format!("nodes={}", r.nodes());
            if let Some(p) = ppn {
                nodes.push_str(&format!(":ppn={p}"));
            }
            let gpus = r.gpgpus_per_node.filter(|_| !(r.gpus_from_request_gpus && s.blahp_writes_gpus));
            if let (Some(n), PbsGpus::Native) = (gpus, s.pbs_gpus) {
                nodes.push_str(&format!(":{}", names::pbs_gpus(n as u32)));
            }
            if r.cpus.is_some() || r.smp_granularity.is_some() || r.hosts.is_some() || gpus.is_some() {
                out.push(format!("#PBS -l {nodes}"));
            }
            if r.whole_nodes {
                out.push("#PBS -n".into());
            }
            // No counted form (check_dialect says why): qsub must refuse the
            // job rather than run it without its share.
            if r.gpgpu_shares_per_node.is_some() {
                out.push(refusal_directive(DirectiveDialect::Pbs, keys::GPGPU_SHARES_PER_NODE));
            }
            if let (Some(n), PbsGpus::Maui) = (gpus, s.pbs_gpus) {
                out.push(format!("#PBS -W x=GRES:{}", names::maui_gres(&s.maui_gres, n as u32)));
                // MAUI's request never reaches pbs_mom: the prologue reads this mark.
                out.push(format!(
                    "#PBS -l {}={}",
                    names::PBS_MARK_RESOURCE,
                    names::pbs_mark_value(cder_request::GPGPU, n as u32)
                ));
            }
            // TORQUE counts vGPGPUs through the filter's hold and the
            // registry monitor, whichever scheduler runs.
            if let Some(v) = r.vgpgpu_request() {
                out.push(format!("#PBS -v {}", names::pbs_vgpgpu_variables(&v)));
            }
        }
    }
    if let Some(n) = r.gpgpus_per_node {
        out.push(format!("export GPGPUPerNode={n}"));
    }
    if let Some(n) = r.gpgpu_shares_per_node {
        out.push(format!("export {}={n}", keys::GPGPU_SHARES_PER_NODE));
    }
    if let (Some(v), Some(m)) = (r.vgpgpus_per_node, &r.vgpgpu_method) {
        out.push(format!("export VirtualGPGPUPerNode={v}"));
        out.push(format!("export VirtualGPGPUMethod={m}"));
    }
    // Neither SLURM nor TORQUE counts these: the job's wrappers may check them.
    if let Some((major, minor)) = r.gpus_minimum_capability {
        out.push(format!("export CDER_GPUS_MINIMUM_CAPABILITY={major}.{minor}"));
    }
    if let Some(m) = r.gpus_minimum_memory {
        out.push(format!("export CDER_GPUS_MINIMUM_MEMORY={m}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(jdl: &str, s: &Settings) -> Result<Vec<String>, AttrError> {
        let ad = ClassAd::parse(jdl).unwrap();
        JobResources::read(&ad).map(|r| directives(&r, s))
    }

    #[test]
    fn shares_go_to_slurm_and_are_refused_by_torque() {
        let slurm = Settings::new(DirectiveDialect::Slurm);
        assert_eq!(
            lines("[ GPGPUSharesPerNode = 2 ]", &slurm).unwrap(),
            ["#SBATCH --gres=shard:2", "export GPGPUSharesPerNode=2"]
        );
        let ad = ClassAd::parse("[ GPGPUSharesPerNode = 2 ]").unwrap();
        let r = JobResources::read(&ad).unwrap();
        assert!(r.check_dialect(DirectiveDialect::Slurm).is_ok());
        let e = r.check_dialect(DirectiveDialect::Pbs).unwrap_err();
        assert!(e.to_string().contains("GPGPUSharesPerNode: 2: TORQUE has no counted form"), "{e}");
        let pbs = directives(&r, &Settings::new(DirectiveDialect::Pbs));
        assert!(pbs.contains(&"#PBS -l cder_bad_attribute_GPGPUSharesPerNode=1".to_string()), "{pbs:?}");
        let e = lines("[ GPGPUSharesPerNode = 2; GPGPUPerNode = 1 ]", &slurm).unwrap_err();
        assert!(e.message.contains("not both"), "{e}");
        assert!(lines("[ GPGPUSharesPerNode = 0 ]", &slurm).is_err());
    }

    #[test]
    fn gpgpus_per_node_in_each_lrms() {
        assert_eq!(
            lines("[ GPGPUPerNode = 2 ]", &Settings::new(DirectiveDialect::Slurm)).unwrap(),
            ["#SBATCH --gres=gpu:2", "export GPGPUPerNode=2"]
        );
        assert_eq!(
            lines("[ GPGPUPerNode = 2 ]", &Settings::new(DirectiveDialect::Pbs)).unwrap(),
            ["#PBS -l nodes=1:gpus=2", "export GPGPUPerNode=2"]
        );
        let maui = Settings { pbs_gpus: PbsGpus::Maui, ..Settings::new(DirectiveDialect::Pbs) };
        assert_eq!(
            lines("[ GPGPUPerNode = 2 ]", &maui).unwrap(),
            ["#PBS -l nodes=1", "#PBS -W x=GRES:gpus@2", "#PBS -l other=cder:gpgpu:2", "export GPGPUPerNode=2"]
        );
    }

    #[test]
    fn htcondor_request_gpus_is_the_same_count() {
        let slurm = Settings::new(DirectiveDialect::Slurm);
        assert_eq!(lines("[ RequestGPUs = 2 ]", &slurm).unwrap(), ["#SBATCH --gres=gpu:2", "export GPGPUPerNode=2"]);
        assert_eq!(
            lines("[ RequestGPUs = 2; GPGPUPerNode = 2 ]", &slurm).unwrap(),
            ["#SBATCH --gres=gpu:2", "export GPGPUPerNode=2"]
        );
        assert_eq!(lines("[ RequestGPUs = 2; GPGPUPerNode = 3 ]", &slurm).unwrap_err().key, "RequestGPUs");
        let blahp = Settings { blahp_writes_gpus: true, ..Settings::new(DirectiveDialect::Slurm) };
        assert_eq!(lines("[ RequestGPUs = 2 ]", &blahp).unwrap(), ["export GPGPUPerNode=2"]);
        assert_eq!(lines("[ GPGPUPerNode = 2 ]", &blahp).unwrap(), ["#SBATCH --gres=gpu:2", "export GPGPUPerNode=2"]);
        assert_eq!(lines("[ gpus_minimum_memory = 0 ]", &slurm).unwrap_err().key, "gpus_minimum_memory");
        assert_eq!(lines("[ require_gpus = \"Capability >\" ]", &slurm).unwrap_err().key, "require_gpus");
        assert_eq!(
            lines("[ VirtualGPGPUPerNode = 1048576; CPUNumber = 1048576 ]", &slurm).unwrap_err().key,
            "VirtualGPGPUPerNode"
        );
    }

    #[test]
    fn cpus_granularity_and_whole_nodes() {
        let s = lines(
            "[ CPUNumber = 8; SMPGranularity = 4; WholeNodes = true; GPGPUPerNode = 1 ]",
            &Settings::new(DirectiveDialect::Slurm),
        )
        .unwrap();
        assert_eq!(
            s[..5],
            [
                "#SBATCH --ntasks=8",
                "#SBATCH --ntasks-per-node=4",
                "#SBATCH --nodes=2",
                "#SBATCH --exclusive",
                "#SBATCH --gres=gpu:1"
            ]
        );
        let p = lines(
            "[ CPUNumber = 8; SMPGranularity = 4; WholeNodes = true; GPGPUPerNode = 1 ]",
            &Settings::new(DirectiveDialect::Pbs),
        )
        .unwrap();
        assert_eq!(p[..2], ["#PBS -l nodes=2:ppn=4:gpus=1", "#PBS -n"]);
    }

    #[test]
    fn vgpgpus_become_licences_and_variables() {
        let s = lines(
            "[ VirtualGPGPUPerNode = 2; VirtualGPGPUMethod = \"rcuda\"; CPUNumber = 3 ]",
            &Settings::new(DirectiveDialect::Slurm),
        )
        .unwrap();
        assert_eq!(
            s,
            [
                "#SBATCH --ntasks=3",
                "#SBATCH --licenses=vgpgpu:6",
                "export VirtualGPGPUPerNode=2",
                "export VirtualGPGPUMethod=rCUDA"
            ]
        );
        let maui = Settings { pbs_gpus: PbsGpus::Maui, ..Settings::new(DirectiveDialect::Pbs) };
        let p = lines("[ VirtualGPGPUPerNode = 1; VirtualGPGPUType = \"VCL\"; GPGPUPerNode = 1 ]", &maui).unwrap();
        assert!(p.contains(&"#PBS -W x=GRES:gpus@1".to_string()), "{p:?}");
        assert!(p.contains(&"#PBS -v VirtualGPGPUPerNode=1,VirtualGPGPUMethod=VCL".to_string()), "{p:?}");
        // No method is rCUDA, as on every other door (cder_request).
        let d = lines("[ VirtualGPGPUPerNode = 1 ]", &Settings::new(DirectiveDialect::Pbs)).unwrap();
        assert!(d.contains(&"#PBS -v VirtualGPGPUPerNode=1,VirtualGPGPUMethod=rCUDA".to_string()), "{d:?}");
    }

    #[test]
    fn bad_values_are_rejected_naming_the_key() {
        for (jdl, key) in [
            ("[ GPGPUPerNode = 0 ]", "GPGPUPerNode"),
            ("[ GPGPUPerNode = \"two\" ]", "GPGPUPerNode"),
            ("[ GPGPUPerNode = 2.5 ]", "GPGPUPerNode"),
            ("[ CPUNumber = -1 ]", "CPUNumber"),
            ("[ WholeNodes = \"yes\" ]", "WholeNodes"),
            ("[ VirtualGPGPUPerNode = 1; VirtualGPGPUMethod = \"CUDA\" ]", "VirtualGPGPUMethod"),
            ("[ VirtualGPGPUMethod = \"VCL\" ]", "VirtualGPGPUMethod"),
            ("[ GPGPUPerNode = 4097 ]", "GPGPUPerNode"),
            ("[ CPUNumber = 2; HostNumber = 3 ]", "HostNumber"),
        ] {
            let e = lines(jdl, &Settings::new(DirectiveDialect::Slurm)).unwrap_err();
            assert_eq!(e.key, key, "{jdl}: {e}");
            assert!(e.to_string().starts_with("1:"), "{e}");
        }
    }

    #[test]
    fn environment_values_as_blah_exports_them() {
        let env = |k: &str| match k {
            "GPGPUPerNode" => Some("2".to_string()),
            "VirtualGPGPUMethod" => Some("\"VCL\"".to_string()),
            "VirtualGPGPUPerNode" => Some("1".to_string()),
            "WholeNodes" => Some("false".to_string()),
            _ => None,
        };
        let r = JobResources::read(&EnvSource(env)).unwrap();
        assert_eq!((r.gpgpus_per_node, r.vgpgpu_method.as_deref(), r.whole_nodes), (Some(2), Some("VCL"), false));
        assert!(JobResources::read(&EnvSource(|k: &str| (k == "GPGPUPerNode").then(|| "2x".to_string()))).is_err());
    }
}
