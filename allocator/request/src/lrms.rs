//! What a request becomes in each batch system's own words. Every writer of
//! a directive (job_submit, the CE's `lrms-attrs`, the BLAH and ARC drop-ins,
//! the TORQUE filter) and every reader of one (the SPANK plugin, the TORQUE
//! prologue) uses these names, so that what one side writes is what the
//! other side counts.
//!
//! | request | SLURM | TORQUE (native) | TORQUE + MAUI |
//! |---|---|---|---|
//! | N devices of type `gpgpu` | `--gres=gpu:N` | `nodes=…:gpus=N` | `-W x=GRES:gpus@N` |
//! | N shares of one GPGPU (`gpgpu-shares`) | `--gres=shard:N` | refused: TORQUE has no counted form ([`TORQUE_NO_SHARES`]) | same as native |
//! | N devices of type `fpga` | `--gres=fpga:N` | — | `-W x=GRES:fpga@N` |
//! | V vGPGPUs per node on H nodes | `--licenses=vgpgpu:V×H` | `-v VirtualGPGPUPerNode=V,VirtualGPGPUMethod=M` (held until the registry has them) | same as native |

use crate::{keys, VgpgpuRequest, GPGPU, GPGPU_SHARES};

/// SLURM's GRES name for GPUs, which cder calls `gpgpu`.
pub const GPU_GRES: &str = "gpu";

/// SLURM's GRES name for shares of a GPU (22.05's `gres/shard`), which cder
/// calls `gpgpu-shares`.
pub const SHARD_GRES: &str = "shard";

/// Why a share request cannot go to TORQUE: the text completes
/// "GPGPUSharesPerNode=N: …".
pub const TORQUE_NO_SHARES: &str = "TORQUE has no counted form for shares of a GPU (its gpus=N and MAUI's GRES count whole GPUs only); submit to a SLURM CE with gres/shard, or ask for whole GPUs with GPGPUPerNode";

/// The SLURM licence (and TORQUE/MAUI resource) that counts vGPGPU backends
/// of every method: the registry pools them, so one counter sizes them all.
pub const VGPGPU_LICENCE: &str = "vgpgpu";

/// The MAUI generic resource GPUs are counted as unless a site names another.
pub const MAUI_GPU_GRES: &str = "gpus";

/// The GRES a CDER type is counted as in SLURM: `gpgpu` is `gpu`, every
/// other type its own name.
pub fn gres_name(cder_type: &str) -> &str {
    match cder_type {
        GPGPU => GPU_GRES,
        GPGPU_SHARES => SHARD_GRES,
        other => other,
    }
}

/// The CDER type a SLURM GRES name stands for (the inverse of [`gres_name`]).
pub fn cder_type_of_gres(gres: &str) -> &str {
    match gres {
        GPU_GRES => GPGPU,
        SHARD_GRES => GPGPU_SHARES,
        other => other,
    }
}

/// `gpu:2`: one item of `--gres` / `tres_per_node` (without SLURM's `gres:` prefix).
pub fn slurm_gres(cder_type: &str, count: u32) -> String {
    format!("{}:{count}", gres_name(cder_type))
}

/// The longest GRES type name accepted (`Type=` in gres.conf, the middle
/// part of `gpu:1g.10gb:2`).
pub const MAX_GRES_TYPE_LEN: usize = 64;

/// Why a GRES type name is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresTypeError {
    /// The name, cut to 70 characters for the message.
    pub name: String,
}

impl std::fmt::Display for GresTypeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} is not a GRES type name (1 to {MAX_GRES_TYPE_LEN} of letters, digits, '.', '_', '-' and '+', starting with a letter or digit)",
            self.name
        )
    }
}

impl std::error::Error for GresTypeError {}

/// The rule for a GRES type name as a request may carry it: a model
/// (`tesla`, `a100`) or a MIG profile as NVIDIA names it (`1g.10gb`,
/// `1g.10gb+me`). Characters SLURM uses as separators in a GRES
/// specification (`:`, `,`, `(`, `=`, blanks) can never be part of it.
///
/// ```
/// use cder_request::lrms::check_gres_type;
/// assert!(check_gres_type("1g.10gb").is_ok());
/// assert!(check_gres_type("tesla_k20m").is_ok());
/// assert!(check_gres_type("1g.10gb:2").is_err());
/// assert!(check_gres_type("").is_err());
/// assert!(check_gres_type(".x").is_err());
/// ```
pub fn check_gres_type(name: &str) -> Result<(), GresTypeError> {
    let ok = name.len() <= MAX_GRES_TYPE_LEN
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'));
    if ok {
        Ok(())
    } else {
        Err(GresTypeError { name: name.chars().take(70).collect() })
    }
}

/// `gpu:1g.10gb:2`: one typed item of `--gres` / `tres_per_node`.
pub fn slurm_typed_gres(cder_type: &str, gres_type: &str, count: u32) -> String {
    format!("{}:{gres_type}:{count}", gres_name(cder_type))
}

/// `vgpgpu:6`: the `--licenses` item for `total` backends.
pub fn slurm_licences(total: u32) -> String {
    format!("{VGPGPU_LICENCE}:{total}")
}

/// The TORQUE resource that carries the mark a TORQUE+MAUI job's prologue
/// reads, because MAUI's `-W x=GRES:` never reaches pbs_mom.
pub const PBS_MARK_RESOURCE: &str = "other";

/// The mark's first field: `other=cder:<type>:<count>`.
pub const PBS_MARK_PREFIX: &str = "cder";

/// `cder:gpgpu:2`: the mark value for `count` devices of `cder_type`.
pub fn pbs_mark_value(cder_type: &str, count: u32) -> String {
    format!("{PBS_MARK_PREFIX}:{cder_type}:{count}")
}

/// The sbatch option a CE's drop-in writes when it cannot honour a job's
/// attribute: sbatch knows no such option and refuses the job, naming it
/// (`--cder-bad-attribute=GPGPUPerNode`).
pub const SLURM_REFUSAL_OPTION: &str = "--cder-bad-attribute";

/// The TORQUE resource prefix a CE's drop-in writes when it cannot honour a
/// job's attribute (`-l cder_bad_attribute_GPGPUPerNode=1`): qsub knows no
/// such resource, and cder's submit filter refuses it naming the attribute.
pub const PBS_REFUSAL_PREFIX: &str = "cder_bad_attribute_";

/// `gpus=2`: the element of a TORQUE `nodes=` spec for native GPUs.
pub fn pbs_gpus(count: u32) -> String {
    format!("gpus={count}")
}

/// `gpus@2`: one item of a MAUI `x=GRES:` list.
pub fn maui_gres(name: &str, count: u32) -> String {
    format!("{name}@{count}")
}

/// The `#PBS -v` list TORQUE's filter and hold monitor read for a vGPGPU
/// request: `VirtualGPGPUPerNode=2,VirtualGPGPUMethod=rCUDA`.
pub fn pbs_vgpgpu_variables(request: &VgpgpuRequest) -> String {
    format!("{}={},{}={}", keys::VIRTUAL_GPGPU_PER_NODE, request.per_node, keys::VIRTUAL_GPGPU_METHOD, request.method)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VgpgpuMethod;

    #[test]
    fn names_round_trip() {
        assert_eq!(gres_name("gpgpu"), "gpu");
        assert_eq!(gres_name("fpga"), "fpga");
        assert_eq!(cder_type_of_gres(gres_name("gpgpu")), "gpgpu");
        assert_eq!(cder_type_of_gres(gres_name("fpga")), "fpga");
        assert_eq!(gres_name(GPGPU_SHARES), "shard");
        assert_eq!(cder_type_of_gres(gres_name(GPGPU_SHARES)), GPGPU_SHARES);
        assert_eq!(slurm_gres(GPGPU_SHARES, 2), "shard:2");
    }

    #[test]
    fn directive_forms() {
        assert_eq!(slurm_gres("gpgpu", 2), "gpu:2");
        assert_eq!(slurm_licences(6), "vgpgpu:6");
        assert_eq!(pbs_gpus(2), "gpus=2");
        assert_eq!(pbs_mark_value("gpgpu", 2), "cder:gpgpu:2");
        assert_eq!(maui_gres(MAUI_GPU_GRES, 2), "gpus@2");
        let v = VgpgpuRequest { per_node: 2, method: VgpgpuMethod::Vcl };
        assert_eq!(pbs_vgpgpu_variables(&v), "VirtualGPGPUPerNode=2,VirtualGPGPUMethod=VCL");
        // What the filter writes, the request reader reads back.
        let list = pbs_vgpgpu_variables(&v);
        let get = |k: &str| list.split(',').find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='));
        let back = VgpgpuRequest::read(get(keys::VIRTUAL_GPGPU_PER_NODE), get(keys::VIRTUAL_GPGPU_METHOD)).unwrap();
        assert_eq!(back, Some(v));
    }
}
