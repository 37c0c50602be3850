//! The submit filter's vGPGPU hold: a job that asks for vGPGPU backends is
//! put on user hold with its need in its variable list, for
//! `cder-torque-monitor` ([`crate::vgpgpu`]) to release.

use cder_request::keys::{VIRTUAL_GPGPU_METHOD, VIRTUAL_GPGPU_PER_NODE, VIRTUAL_GPGPU_TYPE};
use cder_request::{VgpgpuError, VgpgpuRequest};

use crate::filter::Rejection;

/// The submit filter's part: a job whose variables (the header's `-v`
/// directives and `#CDER` lines, then `qsub -v`, as the filter read them
/// with qsub's rules: [`crate::filter::Filtered::variables`]) carry
/// `VirtualGPGPUPerNode=N > 0` gets, after the script's first line if that
/// is a `#!`, `#PBS -h` and `#PBS -v` with the request; other scripts are
/// returned unchanged (`None`). A malformed count or an unknown method
/// refuses the job. The lines use the job's directive `prefix`, which qsub
/// reads; with directives turned off (`-C ""`) the hold cannot be written,
/// and the job is refused.
pub fn hold_script(script: &[u8], vars: &[(String, String)], prefix: &str) -> Result<Option<Vec<u8>>, Rejection> {
    let get = |k: &str| vars.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let refuse = |m: String| Rejection(m);
    let count = get(VIRTUAL_GPGPU_PER_NODE);
    let method_text = get(VIRTUAL_GPGPU_METHOD).or_else(|| get(VIRTUAL_GPGPU_TYPE));
    // One reading for every door (cder_request): a count of 1 to MAX_COUNT,
    // rCUDA when no method is named, a method without a count refused.
    let request = VgpgpuRequest::read(count.as_deref(), method_text.as_deref()).map_err(|e| match e {
        VgpgpuError::Count(c) => refuse(format!("{VIRTUAL_GPGPU_PER_NODE}={:?}: {c}", count.unwrap_or_default())),
        VgpgpuError::Method(m) => refuse(format!("{VIRTUAL_GPGPU_METHOD}: {m}")),
        VgpgpuError::MethodWithoutCount => refuse(e.to_string()),
    })?;
    let Some(VgpgpuRequest { per_node, method }) = request else { return Ok(None) };
    if prefix.is_empty() {
        return Err(refuse(format!("qsub command line: -C \"\" turns directives off, so the {VIRTUAL_GPGPU_PER_NODE} job cannot be held for its backends")));
    }
    let variables = cder_request::lrms::pbs_vgpgpu_variables(&VgpgpuRequest { per_node, method });
    let directives = format!("{prefix} -h\n{prefix} -v {variables}\n");
    let mut out = Vec::with_capacity(script.len() + directives.len());
    if script.starts_with(b"#!") {
        let eol = script.iter().position(|&b| b == b'\n').map_or(script.len(), |p| p + 1);
        out.extend_from_slice(&script[..eol]);
        if eol == script.len() && !script.ends_with(b"\n") {
            out.push(b'\n');
        }
        out.extend_from_slice(directives.as_bytes());
        out.extend_from_slice(&script[eol..]);
    } else {
        out.extend_from_slice(directives.as_bytes());
        out.extend_from_slice(script);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_holds_vgpgpu_jobs_only() {
        let hold = |script: &[u8], argv: &[&str]| {
            let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
            let f = crate::filter::filter(script, &argv, &|_| None, &Default::default()).unwrap();
            hold_script(script, &f.variables, &f.prefix)
        };
        let s = b"#!/bin/bash\n#PBS -l nodes=1\n#CDER VirtualGPGPUPerNode=2\necho hi\n";
        let out = String::from_utf8(hold(s, &[]).unwrap().unwrap()).unwrap();
        assert_eq!(out, "#!/bin/bash\n#PBS -h\n#PBS -v VirtualGPGPUPerNode=2,VirtualGPGPUMethod=rCUDA\n#PBS -l nodes=1\n#CDER VirtualGPGPUPerNode=2\necho hi\n");
        let argv = ["-v", "VirtualGPGPUPerNode=1,VirtualGPGPUType=VCL"];
        assert!(String::from_utf8(hold(b"echo\n", &argv).unwrap().unwrap())
            .unwrap()
            .contains("VirtualGPGPUMethod=VCL"));
        assert_eq!(
            hold(b"#!/bin/sh\necho\n#CDER VirtualGPGPUPerNode=2\n", &[]).unwrap(),
            None,
            "after the first command"
        );
        // A Latin-1 comment does not end the header (qsub reads bytes).
        assert!(hold(b"#!/bin/sh\n# \xe9t\xe9\n#PBS -v VirtualGPGPUPerNode=1\n", &[]).unwrap().is_some());
        // 0 is refused, as on every door (cder_request): leave the key out to ask for none.
        assert!(hold(b"#PBS -v VirtualGPGPUPerNode=0\n", &[]).unwrap_err().0.contains("at least 1"));
        assert!(hold(b"#PBS -v VirtualGPGPUMethod=VCL\n", &[]).unwrap_err().0.contains("without VirtualGPGPUPerNode"));
        // qsub -C: the hold is written in the prefix qsub reads.
        let out = hold(b"#MY -v VirtualGPGPUPerNode=1\n./a\n", &["-C", "#MY"]).unwrap().unwrap();
        assert!(out.starts_with(b"#MY -h\n#MY -v VirtualGPGPUPerNode=1,"), "{}", String::from_utf8_lossy(&out));
        assert!(hold(b"./a\n", &["-C", "", "-v", "VirtualGPGPUPerNode=1"]).is_err());
        assert!(hold(b"#CDER VirtualGPGPUPerNode=two\n", &[]).unwrap_err().0.contains("two"));
        assert!(hold(b"#CDER VirtualGPGPUPerNode=1 VirtualGPGPUMethod=OpenGL\n", &[])
            .unwrap_err()
            .0
            .contains("OpenGL"));
    }
}
