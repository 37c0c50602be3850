//! This node's CPUs, memory and OS, for the `cderd` source: the provider
//! then runs on the one node it describes, so `/proc/cpuinfo`,
//! `/proc/meminfo` and `/etc/os-release` are the node's own.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::error::ProviderError;
use crate::sources::command::run_command;
use crate::sources::counts::{HostFacts, NodeFacts};

/// Sockets (distinct `physical id`s; `None` when the kernel prints none,
/// as on most ARM machines) and logical CPUs (`processor` lines).
pub fn parse_cpuinfo(text: &str) -> (Option<u32>, Option<u32>) {
    let mut sockets = BTreeSet::new();
    let mut logical = 0u32;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        match key.trim() {
            "processor" => logical = logical.saturating_add(1),
            "physical id" => {
                sockets.insert(value.trim().to_string());
            }
            _ => {}
        }
    }
    let sockets = u32::try_from(sockets.len()).ok().filter(|n| *n > 0);
    (sockets, Some(logical).filter(|n| *n > 0))
}

/// Sockets from `lscpu -p=SOCKET` (one line per CPU, `#` comments).
pub fn parse_lscpu_sockets(text: &str) -> Option<u32> {
    let sockets: BTreeSet<&str> =
        text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    u32::try_from(sockets.len()).ok().filter(|n| *n > 0)
}

/// RAM plus swap in MB (`MemTotal` + `SwapTotal`, both in kB).
pub fn parse_meminfo(text: &str) -> Option<u64> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(name)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    };
    Some((field("MemTotal")? + field("SwapTotal").unwrap_or(0)) / 1024)
}

/// GLUE 2.0's OSName (its open enumeration's spelling where it has one) and
/// OSVersion from `/etc/os-release`'s `ID`, `NAME` and `VERSION_ID`.
pub fn parse_os_release(text: &str) -> (Option<String>, Option<String>) {
    let field = |key: &str| {
        text.lines().find_map(|l| {
            let v = l.strip_prefix(key)?.strip_prefix('=')?.trim();
            Some(v.trim_matches('"').trim_matches('\'').to_string()).filter(|v| !v.is_empty())
        })
    };
    let name = match field("ID").as_deref() {
        Some("debian") => Some("Debian".to_string()),
        Some("ubuntu") => Some("Ubuntu".to_string()),
        Some("centos") => Some("CentOS".to_string()),
        Some("rhel") => Some("RedhatEnterpriseAS".to_string()),
        Some("fedora") => Some("Fedoracore".to_string()),
        Some("scientific") => Some("ScientificSL".to_string()),
        Some("gentoo") => Some("Gentoo".to_string()),
        Some(id) if id == "sles" || id.starts_with("opensuse") => Some("SUSE LINUX".to_string()),
        _ => field("NAME"),
    };
    (name, field("VERSION_ID"))
}

/// This node's facts, read now. The OS and memory are optional to the
/// reader (the renderer names what it misses); an unreadable /proc is not.
pub fn local_facts(timeout: Duration) -> Result<HostFacts, ProviderError> {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|e| ProviderError::Runtime(format!("cannot read {path}: {e}")))
    };
    let (mut sockets, logical) = parse_cpuinfo(&read("/proc/cpuinfo")?);
    if sockets.is_none() {
        // No lscpu leaves the sockets unknown: refused only where EGI's profile needs them.
        sockets = run_command(Path::new("lscpu"), &["-p=SOCKET"], timeout)
            .ok()
            .and_then(|out| parse_lscpu_sockets(&String::from_utf8_lossy(&out)));
    }
    let node = NodeFacts {
        physical_cpus: sockets,
        logical_cpus: logical,
        slots: None,
        virtual_memory_mib: parse_meminfo(&read("/proc/meminfo")?),
        lrms_version: None,
    };
    let mut facts =
        HostFacts::from_nodes(&[node]).map_err(|what| ProviderError::Runtime(format!("{what}: too many")))?;
    if let Ok(text) = std::fs::read_to_string("/etc/os-release") {
        (facts.os_name, facts.os_version) = parse_os_release(&text);
    }
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let cpuinfo =
            "processor\t: 0\nvendor_id\t: GenuineIntel\nphysical id\t: 0\n\nprocessor\t: 1\nphysical id\t: 1\n\n\
                       processor\t: 2\nphysical id\t: 0\n\nprocessor\t: 3\nphysical id\t: 1\n";
        assert_eq!(parse_cpuinfo(cpuinfo), (Some(2), Some(4)));
        // aarch64: no physical id.
        assert_eq!(parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\n\nprocessor\t: 1\n"), (None, Some(2)));
        assert_eq!(parse_lscpu_sockets("# The following is the parsable format\n# Socket\n0\n0\n1\n1\n"), Some(2));
        assert_eq!(
            parse_meminfo("MemTotal:       24684084 kB\nMemFree: 1 kB\nSwapTotal:       1048576 kB\n"),
            Some(25129)
        );
        assert_eq!(parse_meminfo("SwapTotal: 1 kB\n"), None);
        let debian =
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n";
        assert_eq!(parse_os_release(debian), (Some("Debian".into()), Some("12".into())));
        let alma = "NAME=\"AlmaLinux\"\nVERSION_ID=\"9.3\"\nID=\"almalinux\"\n";
        assert_eq!(parse_os_release(alma), (Some("AlmaLinux".into()), Some("9.3".into())));
    }
}
