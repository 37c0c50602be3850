//! cder's one request vocabulary.
//!
//! A device request reaches cder through many doors: a SPANK option
//! (`--gpgpu-per-node=2`), a JDL key a CE passes on (`GPGPUPerNode = 2`), a
//! TORQUE directive (`#PBS -l nodes=1:gpus=2`), a BLAH attribute, the node
//! protocol. Each door used to parse the request its own way, and the copies
//! disagreed (limits of 4096, 2^20 and none; a vGPGPU method that was
//! optional here and mandatory there; licences named `vgpgpu` by the
//! controller and `rcuda` by the CE). This crate decides each question once:
//!
//! * [`parse_count`] / [`check_count`]: a device count is a whole number from
//!   1 to [`MAX_COUNT`]; 0 is refused (leave the key out to ask for none).
//! * [`check_type_name`]: a CDER type name is 1 to [`MAX_TYPE_NAME_LEN`] bytes
//!   of `a-z`, `0-9`, `_`, `-`, starting with a letter.
//! * [`VgpgpuRequest::read`]: a vGPGPU request is a count (the same rule)
//!   and a method, rCUDA when none is named (the seed thesis's default); a
//!   method without a count is refused.
//! * [`lrms`]: what each request becomes in each batch system's own words.
//! * [`glue`]: the GLUE keys a site publishes and the offer builder reads.
//! * [`hostlist`]: SLURM-style host and file lists (`wn[01-16]`), bounded.
//! * [`gres`]: SLURM's GRES text (items, counts with SLURM's suffixes, TRES
//!   entries, `IDX:` details, index lists, `scontrol -o` lines), one grammar
//!   for the plugins, the provider and cderd.
//! * [`gres_conf`]: gres.conf split into records of `Key=Value` fields, as slurmd reads it.
//!
//! ```
//! use cder_request::{lrms, parse_count, VgpgpuMethod, VgpgpuRequest};
//! assert_eq!(parse_count("2"), Ok(2));
//! assert!(parse_count("0").is_err());
//! let v = VgpgpuRequest::read(Some("2"), None).unwrap().unwrap();
//! assert_eq!(v.method, VgpgpuMethod::Rcuda);
//! assert_eq!(lrms::slurm_gres("gpgpu", 2), "gpu:2");
//! assert_eq!(lrms::slurm_licences(6), "vgpgpu:6");
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt;

pub mod glue;
pub mod gres;
pub mod gres_conf;
pub mod hostlist;
pub mod lrms;

/// The CDER type of a GPGPU: what `GPGPUPerNode` and `--gpgpu-per-node` ask for.
pub const GPGPU: &str = "gpgpu";

/// Shares of a GPGPU offered as N shards (SLURM's `gres/shard`): what
/// `GPGPUSharesPerNode`, `--gpgpu-shares-per-node` and `--cder=gpgpu-shares:N`
/// ask for. Not a device type of cderd's: a share job holds part of one
/// `gpgpu` device, beside the other sharers.
pub const GPGPU_SHARES: &str = "gpgpu-shares";

/// The job keys of the JDL (seed thesis, Table 4.1), as a CE passes them on
/// in a job's environment and as BLAH hands them to its drop-ins.
pub mod keys {
    /// Exclusive GPGPUs per node.
    pub const GPGPU_PER_NODE: &str = "GPGPUPerNode";
    /// Shares of one GPGPU per node, where the site offers GPUs as shards
    /// (SLURM `--gres=shard:N`); never together with [`GPGPU_PER_NODE`].
    pub const GPGPU_SHARES_PER_NODE: &str = "GPGPUSharesPerNode";
    /// Virtual GPGPU backends per node.
    pub const VIRTUAL_GPGPU_PER_NODE: &str = "VirtualGPGPUPerNode";
    /// The API-interception method of the vGPGPUs (`rCUDA`, `VCL`).
    pub const VIRTUAL_GPGPU_METHOD: &str = "VirtualGPGPUMethod";
    /// The thesis's other spelling of [`VIRTUAL_GPGPU_METHOD`]; the method key wins when both are set.
    pub const VIRTUAL_GPGPU_TYPE: &str = "VirtualGPGPUType";

    /// CPUs (slots) for the whole job; a vGPGPU count is per CPU (thesis ch. 4).
    pub const CPU_NUMBER: &str = "CPUNumber";
    /// Cores per node.
    pub const SMP_GRANULARITY: &str = "SMPGranularity";
    /// Nodes for the job.
    pub const HOST_NUMBER: &str = "HostNumber";
    /// Whether the job takes its nodes whole.
    pub const WHOLE_NODES: &str = "WholeNodes";

    /// The program a job runs.
    pub const EXECUTABLE: &str = "Executable";
    /// Its arguments, one string of blank-separated words.
    pub const ARGUMENTS: &str = "Arguments";
    /// The file its standard output goes to.
    pub const STD_OUTPUT: &str = "StdOutput";
    /// The file its standard error goes to.
    pub const STD_ERROR: &str = "StdError";
    /// Files staged in before it runs.
    pub const INPUT_SANDBOX: &str = "InputSandbox";
    /// Files staged out after it ran.
    pub const OUTPUT_SANDBOX: &str = "OutputSandbox";
    /// `NAME=VALUE` strings set in its environment.
    pub const ENVIRONMENT: &str = "Environment";
    /// The VO it runs for.
    pub const VIRTUAL_ORGANISATION: &str = "VirtualOrganisation";
    /// The ClassAd expression a resource must satisfy (a job's and an offer's).
    pub const REQUIREMENTS: &str = "Requirements";
    /// The ClassAd expression that orders matching resources.
    pub const RANK: &str = "Rank";

    /// HTCondor's GPU vocabulary, as HTCondor-CE's job router hands a routed
    /// job's attributes to blahp (and blahp to BLAH's drop-ins).
    pub mod htcondor {
        /// GPUs for the job: what SLURM counts as `--gres=gpu:N` and TORQUE
        /// as `gpus=N`, the same count as [`super::GPGPU_PER_NODE`].
        pub const REQUEST_GPUS: &str = "RequestGPUs";
        /// A ClassAd expression over a GPU's properties (`Capability >= 7.0`).
        pub const REQUIRE_GPUS: &str = "require_gpus";
        /// The lowest CUDA compute capability a GPU may have (`7.5`).
        pub const GPUS_MINIMUM_CAPABILITY: &str = "gpus_minimum_capability";
        /// The least device memory a GPU may have, in MiB.
        pub const GPUS_MINIMUM_MEMORY: &str = "gpus_minimum_memory";
    }
}

/// The most vGPGPU backends one job may ask for in all (per node times
/// nodes or CPUs): a directive never carries more.
pub const MAX_JOB_TOTAL: u32 = 1 << 16;

/// The job-wide total of `per_node` over `factor` nodes or CPUs, or `None`
/// when it exceeds [`MAX_JOB_TOTAL`]: the one rule for the `vgpgpu`
/// licences, the PBS resource and the JDL tools' check.
pub fn job_total(per_node: u32, factor: u64) -> Option<u32> {
    let t = u64::from(per_node).checked_mul(factor.max(1))?;
    if t <= u64::from(MAX_JOB_TOTAL) {
        Some(t as u32)
    } else {
        None
    }
}

/// The least GPU memory, in MiB, a job may ask every GPU to have; above it
/// no GPU exists (16 TiB).
pub const MAX_GPU_MEMORY_MIB: u32 = 1 << 24;

/// Why a GPU property a job asks for is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPropertyError(pub String);

impl fmt::Display for GpuPropertyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GpuPropertyError {}

/// A CUDA compute capability, `major.minor` (`7.5`, `8.0`; a bare `8`
/// is `8.0`), as HTCondor's `gpus_minimum_capability` writes it.
pub fn parse_capability(text: &str) -> Result<(u32, u32), GpuPropertyError> {
    let t = text.trim();
    let t = t.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(t).trim();
    let (major, minor) = t.split_once('.').unwrap_or((t, "0"));
    let digits = |d: &str| !d.is_empty() && d.len() <= 3 && d.bytes().all(|b| b.is_ascii_digit());
    if digits(major) && digits(minor) {
        Ok((major.parse().unwrap_or(0), minor.parse().unwrap_or(0)))
    } else {
        Err(GpuPropertyError(format!(
            "{:?} is not a compute capability (major.minor, e.g. 7.5)",
            t.chars().take(40).collect::<String>()
        )))
    }
}

/// Why a memory size is refused. The text completes "KEY=VALUE: …".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryError {
    /// Not a whole number (`lots`, `1.5`, empty).
    NotANumber,
    /// Zero or negative.
    NotPositive,
    /// Above [`MAX_GPU_MEMORY_MIB`].
    TooLarge,
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryError::NotANumber => f.write_str("not a whole number of megabytes"),
            MemoryError::NotPositive => f.write_str("the memory must be at least 1 MB"),
            MemoryError::TooLarge => write!(f, "at most {MAX_GPU_MEMORY_MIB} MB may be asked for"),
        }
    }
}

impl std::error::Error for MemoryError {}

/// The least memory, in MiB, every GPU of a job must have, 1 to
/// [`MAX_GPU_MEMORY_MIB`]: `--gpgpu-min-memory`, HTCondor's
/// `gpus_minimum_memory` (blanks and one pair of double quotes allowed).
///
/// ```
/// use cder_request::{parse_memory_mib, MemoryError, MAX_GPU_MEMORY_MIB};
/// assert_eq!(parse_memory_mib(" 4096 "), Ok(4096));
/// assert_eq!(parse_memory_mib("0"), Err(MemoryError::NotPositive));
/// assert_eq!(parse_memory_mib(&(MAX_GPU_MEMORY_MIB + 1).to_string()), Err(MemoryError::TooLarge));
/// ```
pub fn parse_memory_mib(text: &str) -> Result<u32, MemoryError> {
    positive_whole(text, MAX_GPU_MEMORY_MIB).map_err(|e| match e {
        CountError::NotANumber => MemoryError::NotANumber,
        CountError::NotPositive => MemoryError::NotPositive,
        CountError::TooLarge => MemoryError::TooLarge,
    })
}

/// GPU memory in MiB by [`parse_memory_mib`]'s rule, with the message the
/// grid tools print for HTCondor's `gpus_minimum_memory`.
pub fn parse_gpu_memory(text: &str) -> Result<u32, GpuPropertyError> {
    parse_memory_mib(text).map_err(|_| {
        let t = text.trim();
        let t = t.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(t).trim();
        GpuPropertyError(format!(
            "{:?} is not a memory size in MiB (1 to {MAX_GPU_MEMORY_MIB})",
            t.chars().take(40).collect::<String>()
        ))
    })
}

/// The most devices (or vGPGPU backends) one request may ask for per node,
/// wherever it comes from; the node protocol uses the same bound.
pub const MAX_COUNT: u32 = 4096;

/// The longest CDER type name.
pub const MAX_TYPE_NAME_LEN: usize = 32;

/// Why a count is refused. The text completes "KEY=VALUE: …".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountError {
    /// Not a whole number (`abc`, `2.5`, empty).
    NotANumber,
    /// Zero or negative.
    NotPositive,
    /// Above [`MAX_COUNT`].
    TooLarge,
}

impl fmt::Display for CountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CountError::NotANumber => f.write_str("not a whole number of devices"),
            CountError::NotPositive => f.write_str("the count must be at least 1"),
            CountError::TooLarge => write!(f, "at most {MAX_COUNT} devices may be asked for"),
        }
    }
}

impl std::error::Error for CountError {}

/// Parses a device count as a user or a CE wrote it (surrounding blanks and
/// one pair of double quotes are allowed, as BLAH and shells write values).
///
/// ```
/// use cder_request::{parse_count, CountError, MAX_COUNT};
/// assert_eq!(parse_count(" \"2\" "), Ok(2));
/// assert_eq!(parse_count("2.5"), Err(CountError::NotANumber));
/// // 0 is not "no request": leave the key out to ask for none.
/// assert_eq!(parse_count("0"), Err(CountError::NotPositive));
/// assert_eq!(parse_count(&MAX_COUNT.to_string()), Ok(MAX_COUNT));
/// assert_eq!(parse_count("99999999999999999999"), Err(CountError::TooLarge));
/// ```
pub fn parse_count(text: &str) -> Result<u32, CountError> {
    positive_whole(text, MAX_COUNT)
}

/// A whole number from 1 to `max` as users and CEs write one: the rule of
/// [`parse_count`] and [`parse_memory_mib`].
fn positive_whole(text: &str, max: u32) -> Result<u32, CountError> {
    let t = text.trim();
    let t = t.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(t).trim();
    let (negative, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CountError::NotANumber);
    }
    if negative || digits.bytes().all(|b| b == b'0') {
        return Err(CountError::NotPositive);
    }
    // Leading zeros must not turn a huge number into a parse failure's "not a number".
    let significant = digits.trim_start_matches('0');
    if significant.len() > 10 {
        return Err(CountError::TooLarge);
    }
    match significant.parse::<u64>() {
        Ok(n) if n <= u64::from(max) => Ok(n as u32),
        _ => Err(CountError::TooLarge),
    }
}

/// Checks a count that is already an integer (a ClassAd value).
pub fn check_count(n: i64) -> Result<u32, CountError> {
    if n < 1 {
        Err(CountError::NotPositive)
    } else if n > i64::from(MAX_COUNT) {
        Err(CountError::TooLarge)
    } else {
        Ok(n as u32)
    }
}

/// Why a CDER type name is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeNameError {
    /// The name, cut to 40 characters for the message.
    pub name: String,
}

impl fmt::Display for TypeNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a CDER type name (1 to {MAX_TYPE_NAME_LEN} of a-z, 0-9, _ and -, starting with a letter)",
            self.name
        )
    }
}

impl std::error::Error for TypeNameError {}

/// The one rule for CDER type names, shared by the config, the node
/// protocol and every request parser, so no door accepts a name another refuses.
///
/// ```
/// use cder_request::{check_type_name, MAX_TYPE_NAME_LEN};
/// assert!(check_type_name("gpgpu").is_ok());
/// assert!(check_type_name("fpga_u250").is_ok());
/// assert!(check_type_name("GPU").is_err());
/// assert!(check_type_name("2gpu").is_err());
/// assert!(check_type_name(&"a".repeat(MAX_TYPE_NAME_LEN + 1)).is_err());
/// ```
pub fn check_type_name(name: &str) -> Result<(), TypeNameError> {
    let ok = name.len() <= MAX_TYPE_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(TypeNameError { name: name.chars().take(40).collect() })
    }
}

/// An API-interception method that gives a job remote GPUs (seed thesis §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum VgpgpuMethod {
    /// rCUDA: CUDA calls forwarded to a remote rCUDA server.
    #[cfg_attr(feature = "serde", serde(rename = "rCUDA", alias = "rcuda", alias = "RCUDA"))]
    Rcuda,
    /// VCL (MOSIX Virtual OpenCL): OpenCL calls forwarded to remote nodes.
    #[cfg_attr(feature = "serde", serde(rename = "VCL", alias = "vcl"))]
    Vcl,
}

impl VgpgpuMethod {
    /// Every method, in the order they are published.
    pub const ALL: [VgpgpuMethod; 2] = [VgpgpuMethod::Rcuda, VgpgpuMethod::Vcl];

    /// The name as the thesis and the GLUE ApplicationEnvironment write it.
    pub fn name(self) -> &'static str {
        match self {
            VgpgpuMethod::Rcuda => "rCUDA",
            VgpgpuMethod::Vcl => "VCL",
        }
    }

    /// The methods a backend of this vendor serves by default: VCL for
    /// every GPU, rCUDA for NVIDIA only (rCUDA speaks CUDA).
    pub fn defaults_for_vendor(vendor: &str) -> Vec<VgpgpuMethod> {
        if vendor.eq_ignore_ascii_case("nvidia") {
            vec![VgpgpuMethod::Rcuda, VgpgpuMethod::Vcl]
        } else {
            vec![VgpgpuMethod::Vcl]
        }
    }
}

impl fmt::Display for VgpgpuMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A method name that is neither rCUDA nor VCL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownMethod(pub String);

impl fmt::Display for UnknownMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown vGPGPU method {:?} (expected rCUDA or VCL)", self.0.chars().take(40).collect::<String>())
    }
}

impl std::error::Error for UnknownMethod {}

impl From<UnknownMethod> for String {
    fn from(e: UnknownMethod) -> String {
        e.to_string()
    }
}

impl std::str::FromStr for VgpgpuMethod {
    type Err = UnknownMethod;
    /// Case-insensitive; one pair of double quotes is allowed.
    fn from_str(s: &str) -> Result<Self, UnknownMethod> {
        let t = s.trim();
        let t = t.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(t);
        VgpgpuMethod::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| UnknownMethod(s.to_string()))
    }
}

/// Why a vGPGPU request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VgpgpuError {
    /// The count is malformed.
    Count(CountError),
    /// The method is unknown.
    Method(UnknownMethod),
    /// A method was named without a count.
    MethodWithoutCount,
}

impl fmt::Display for VgpgpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VgpgpuError::Count(e) => e.fmt(f),
            VgpgpuError::Method(e) => e.fmt(f),
            VgpgpuError::MethodWithoutCount => {
                write!(f, "a vGPGPU method was given without {}", keys::VIRTUAL_GPGPU_PER_NODE)
            }
        }
    }
}

impl std::error::Error for VgpgpuError {}

/// A valid vGPGPU request: backends per node, of one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VgpgpuRequest {
    /// Backends per node, 1 to [`MAX_COUNT`].
    pub per_node: u32,
    /// The method; rCUDA when the job named none.
    pub method: VgpgpuMethod,
}

impl VgpgpuRequest {
    /// Reads the two values wherever they came from (options, JDL keys,
    /// `#PBS -v`): `Ok(None)` when neither is set.
    ///
    /// ```
    /// use cder_request::{VgpgpuError, VgpgpuMethod, VgpgpuRequest};
    /// let vcl = VgpgpuRequest::read(Some("2"), Some("vcl")).unwrap().unwrap();
    /// assert_eq!((vcl.per_node, vcl.method), (2, VgpgpuMethod::Vcl));
    /// assert_eq!(cder_request::job_total(vcl.per_node, 3), Some(6));
    /// // No method named: rCUDA, the thesis's default.
    /// assert_eq!(VgpgpuRequest::read(Some("1"), None).unwrap().unwrap().method, VgpgpuMethod::Rcuda);
    /// assert_eq!(VgpgpuRequest::read(None, None), Ok(None));
    /// assert_eq!(VgpgpuRequest::read(None, Some("rCUDA")), Err(VgpgpuError::MethodWithoutCount));
    /// assert!(matches!(VgpgpuRequest::read(Some("1"), Some("OpenGL")), Err(VgpgpuError::Method(_))));
    /// ```
    pub fn read(per_node: Option<&str>, method: Option<&str>) -> Result<Option<VgpgpuRequest>, VgpgpuError> {
        let method = method.map(str::trim).filter(|m| !m.is_empty());
        let Some(n) = per_node else {
            return match method {
                Some(_) => Err(VgpgpuError::MethodWithoutCount),
                None => Ok(None),
            };
        };
        let per_node = parse_count(n).map_err(VgpgpuError::Count)?;
        let method = match method {
            Some(m) => m.parse().map_err(VgpgpuError::Method)?,
            None => VgpgpuMethod::Rcuda,
        };
        Ok(Some(VgpgpuRequest { per_node, method }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_one_rule() {
        assert_eq!(parse_count("2"), Ok(2));
        assert_eq!(parse_count(" 3 "), Ok(3));
        assert_eq!(parse_count("\"4\""), Ok(4));
        assert_eq!(parse_count("+5"), Ok(5));
        assert_eq!(parse_count("4096"), Ok(MAX_COUNT));
        assert_eq!(parse_count("0004096"), Ok(MAX_COUNT));
        assert_eq!(parse_count("4097"), Err(CountError::TooLarge));
        assert_eq!(parse_count("000000000000000000000000000000000000000009999999999999"), Err(CountError::TooLarge));
        assert_eq!(parse_count("0"), Err(CountError::NotPositive));
        assert_eq!(parse_count("-1"), Err(CountError::NotPositive));
        for bad in ["", "abc", "2.5", "2x", "--1", "- 1", "1e3", "\"\""] {
            assert_eq!(parse_count(bad), Err(CountError::NotANumber), "{bad:?}");
        }
        assert_eq!(check_count(1), Ok(1));
        assert_eq!(check_count(0), Err(CountError::NotPositive));
        assert_eq!(check_count(i64::MIN), Err(CountError::NotPositive));
        assert_eq!(check_count(i64::from(MAX_COUNT) + 1), Err(CountError::TooLarge));
    }

    #[test]
    fn job_totals_and_gpu_properties() {
        assert_eq!(job_total(2, 3), Some(6));
        assert_eq!(job_total(4, 0), Some(4));
        assert_eq!(job_total(MAX_COUNT, 16), Some(MAX_JOB_TOTAL));
        assert_eq!(job_total(MAX_COUNT, 17), None);
        assert_eq!(job_total(1 << 20, 1 << 20), None);
        assert_eq!(parse_capability("7.5"), Ok((7, 5)));
        assert_eq!(parse_capability("\"8\""), Ok((8, 0)));
        for bad in ["", "7.", ".5", "a", "7.5.1", "1e3", "-7"] {
            assert!(parse_capability(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_gpu_memory("16000"), Ok(16000));
        for bad in ["0", "-1", "1.5", "x", "99999999999"] {
            assert!(parse_gpu_memory(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_memory_mib("\"8192\""), Ok(8192));
        assert_eq!(parse_memory_mib("+1"), Ok(1));
        assert_eq!(parse_memory_mib(&MAX_GPU_MEMORY_MIB.to_string()), Ok(MAX_GPU_MEMORY_MIB));
        for (bad, why) in [
            ("", MemoryError::NotANumber),
            ("x", MemoryError::NotANumber),
            ("1.5", MemoryError::NotANumber),
            ("-", MemoryError::NotANumber),
            ("0", MemoryError::NotPositive),
            ("000", MemoryError::NotPositive),
            ("-1", MemoryError::NotPositive),
            ("16777217", MemoryError::TooLarge),
            ("99999999999999999999999", MemoryError::TooLarge),
        ] {
            assert_eq!(parse_memory_mib(bad), Err(why), "{bad:?}");
        }
    }

    #[test]
    fn type_names_follow_one_rule() {
        for ok in ["gpgpu", "fpga", "xeon-phi", "a_1", &"a".repeat(MAX_TYPE_NAME_LEN)] {
            assert!(check_type_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "GPU", "a b", "a:1", "é", "1gpu", "-x", &"a".repeat(MAX_TYPE_NAME_LEN + 1)] {
            let e = check_type_name(bad).unwrap_err();
            assert!(e.to_string().contains("is not a CDER type name"), "{e}");
        }
    }

    #[test]
    fn vgpgpu_requests_are_decided_once() {
        assert_eq!(VgpgpuRequest::read(None, None), Ok(None));
        assert_eq!(VgpgpuRequest::read(None, Some("  ")), Ok(None));
        let r = VgpgpuRequest::read(Some("2"), None).unwrap().unwrap();
        assert_eq!((r.per_node, r.method), (2, VgpgpuMethod::Rcuda), "no method means rCUDA");
        assert_eq!(VgpgpuRequest::read(Some("1"), Some("\"vcl\"")).unwrap().unwrap().method, VgpgpuMethod::Vcl);
        assert_eq!(VgpgpuRequest::read(Some("0"), None), Err(VgpgpuError::Count(CountError::NotPositive)));
        assert_eq!(VgpgpuRequest::read(None, Some("VCL")), Err(VgpgpuError::MethodWithoutCount));
        assert!(matches!(VgpgpuRequest::read(Some("1"), Some("CUDA")), Err(VgpgpuError::Method(_))));
        assert_eq!(job_total(r.per_node, 3), Some(6));
        assert_eq!(job_total(r.per_node, 0), Some(2));
    }
}
