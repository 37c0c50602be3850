//! The one place cder-inventory calls foreign code itself: NVML's MIG
//! instance ids, which nvml-wrapper 0.13 loads but does not wrap, and the
//! loader, for whether a vendor library loads at all (`auto`).

use std::os::raw::c_uint;

use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::Device;

/// `(GPU instance id, compute instance id)` of a MIG device handle.
pub fn mig_instance_ids(device: &Device<'_>) -> Result<(u32, u32), NvmlError> {
    let lib = device.nvml().lib();
    let gpu_instance = nvml_sym(lib.nvmlDeviceGetGpuInstanceId.as_ref())?;
    let compute_instance = nvml_sym(lib.nvmlDeviceGetComputeInstanceId.as_ref())?;
    let (mut gi, mut ci): (c_uint, c_uint) = (0, 0);
    // SAFETY: the handle comes from nvml-wrapper for a live `Nvml` (the
    // borrow keeps the library loaded and initialised), the symbols were
    // resolved from that same library with nvml.h's signatures, and each
    // out-pointer is a valid, writable local.
    unsafe {
        let handle = device.handle();
        nvml_try(gpu_instance(handle, &mut gi))?;
        nvml_try(compute_instance(handle, &mut ci))?;
    }
    Ok((gi, ci))
}
