//! The check at start (and `cderd --check`) that SLURM counts each type's
//! devices as cderd found them: where gres.conf (`[node.sharing]
//! slurm_gres_conf`, the file slurmd reads) has records of a type's GRES
//! for this node, their count must be the number of devices discovery
//! found. Otherwise the scheduler would promise a job a device cderd does
//! not have, or leave one unused; cderd does not start on it.
//!
//! A type's GRES is [`cder_request::lrms::gres_name`] of its name (`gpgpu`
//! is `gpu`); a record counts its `File=` files, one for `MultipleFiles=`,
//! else its `Count=`, else 1, as slurmd counts. A type gres.conf does not
//! mention is not SLURM's to count and is skipped with an info log;
//! `gres/shard` is [`crate::sharing`]'s.

use cder_model::config::Sharing;
use cder_model::{CderType, Device};
use cder_request::hostlist::Hostlist;
use cder_request::lrms::{gres_name, SHARD_GRES};

use crate::sharing::SharingError;

const FILE_LIST: Hostlist = Hostlist::names(cder_request::MAX_COUNT as usize);

/// Reads `[node.sharing] slurm_gres_conf`, if set, and checks every type's
/// count against `devices` (what discovery found at start).
pub fn check(sharing: &Sharing, cders: &[CderType], devices: &[Device]) -> Result<(), SharingError> {
    let Some(gres) = crate::sharing::GresConf::read(sharing)? else {
        tracing::info!("[node.sharing] slurm_gres_conf is not set: device counts are not checked against SLURM's");
        return Ok(());
    };
    check_counts(&gres.text, &gres.file, gres.node.as_deref(), cders, devices)
}

/// Checks gres.conf `text` (at `file`, records of `node`; every record when
/// `None`) against the devices discovery found of each type.
pub fn check_counts(
    text: &str,
    file: &str,
    node: Option<&str>,
    cders: &[CderType],
    devices: &[Device],
) -> Result<(), SharingError> {
    let records = cder_request::gres_conf::parse(text).map_err(|e| SharingError {
        file: file.to_string(),
        line: e.line,
        message: format!("{:?}: expected Key=Value", e.word),
    })?;
    for cder in cders {
        let gres = gres_name(cder.name());
        if gres == SHARD_GRES {
            continue;
        }
        let mut counted = 0u64;
        let mut first_line = None;
        let mut types: Vec<&str> = Vec::new();
        for record in records.iter().filter(|r| r.names(gres)) {
            let bad = |message: String| SharingError { file: file.to_string(), line: record.line, message };
            if let (Some(expr), Some(me)) = (record.get("nodename"), node) {
                let names = FILE_LIST.expand(expr).map_err(|e| bad(format!("NodeName={expr}: {e}")))?;
                if !names.iter().any(|n| n == me) {
                    continue;
                }
            }
            let count = if record.get("multiplefiles").is_some() {
                1
            } else if let Some((key, expr)) = record.get_any(&["file", "files"]) {
                FILE_LIST.expand(expr).map_err(|e| bad(format!("{key}={expr}: {e}")))?.len() as u64
            } else if let Some(c) = record.get("count") {
                cder_request::gres::parse_count(c).map_err(|e| bad(format!("Count={c}: {}", e.why)))?
            } else {
                1
            };
            counted = counted.saturating_add(count);
            first_line.get_or_insert(record.line);
            if let Some(t) = record.get("type").filter(|t| !types.contains(t)) {
                types.push(t);
            }
        }
        let Some(line) = first_line else {
            tracing::info!(
                cder_type = cder.name(),
                "{file} has no Name={gres} record for this node: SLURM does not count type {:?}; its count is not checked",
                cder.name()
            );
            continue;
        };
        let found = devices.iter().filter(|d| d.cder_type == cder.name()).count() as u64;
        if counted != found {
            let typed = if types.is_empty() { String::new() } else { format!(" Type={}", types.join(",")) };
            return Err(SharingError {
                file: file.to_string(),
                line,
                message: format!(
                    "Name={gres}{typed}: SLURM counts {counted} on this node, but discovery ({}) found {found} device(s) of type {:?}; make gres.conf and the node agree",
                    cder_inventory::source_name(cder.discovery),
                    cder.name()
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn node(text: &str) -> (Vec<CderType>, Vec<Device>) {
        let config = cder_model::Config::parse(text, Path::new("cder.toml")).unwrap();
        let devices = config.cders.iter().flat_map(|c| c.static_devices()).collect();
        (config.cders, devices)
    }

    fn two_types() -> (Vec<CderType>, Vec<Device>) {
        let device = |i: u32, path: &str| {
            format!("[[cder.device]]\nindex = {i}\nmodel = \"m\"\nmemory_mib = 1\npath = \"{path}{i}\"\n")
        };
        let mut text = String::from("[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n");
        text += &device(0, "/dev/nvidia");
        text += &device(1, "/dev/nvidia");
        text += "[[cder]]\nname = \"amdgpu\"\nvendor = \"amd\"\ndiscovery = \"static\"\n";
        for i in 0..3 {
            text += &device(i, "/dev/dri/renderD12");
        }
        node(&text)
    }

    fn check_text(text: &str) -> Result<(), SharingError> {
        let (cders, devices) = two_types();
        check_counts(text, "/etc/slurm/gres.conf", Some("wn1"), &cders, &devices)
    }

    #[test]
    fn counts_that_agree_pass() {
        check_text(
            "NodeName=wn1 Name=gpu Type=a100 File=/dev/nvidia[0-1]\n\
             NodeName=wn1 Name=amdgpu Type=mi210 File=/dev/dri/renderD[128-129]\n\
             NodeName=wn1 Name=amdgpu Type=mi210 Count=1\n\
             NodeName=wn2 Name=gpu File=/dev/nvidia[0-7]\n\
             Name=shard Count=4 File=/dev/nvidia0\n",
        )
        .unwrap();
        // A type SLURM does not count is not checked.
        check_text("NodeName=wn1 Name=gpu File=/dev/nvidia[0-1]\n").unwrap();
        check_text("").unwrap();
    }

    #[test]
    fn a_count_that_differs_names_the_file_line_gres_and_both_counts() {
        let e = check_text(
            "# gres.conf\nNodeName=wn1 Name=gpu File=/dev/nvidia[0-1]\n\
             NodeName=wn1 Name=amdgpu Type=mi210 File=/dev/dri/renderD[128-131]\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/slurm/gres.conf:3: Name=amdgpu Type=mi210: SLURM counts 4 on this node, but discovery (static) found 3 device(s) of type \"amdgpu\"; make gres.conf and the node agree"
        );
        let e = check_text("NodeName=wn[1-2] Name=GPU Count=1\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.starts_with("Name=gpu: SLURM counts 1 on this node, but discovery (static) found 2"), "{e}");
        let e = check_text("Name=gpu Count=lots\n").unwrap_err();
        assert!(e.message.starts_with("Count=lots"), "{e}");
        let e = check_text("Name=gpu nonsense\n").unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (1, "\"nonsense\": expected Key=Value"));
    }

    #[test]
    fn without_a_gres_conf_nothing_is_checked_and_an_unreadable_one_is_named() {
        let (cders, devices) = two_types();
        check(&Sharing::default(), &cders, &devices).unwrap();
        let sharing = Sharing { slurm_gres_conf: Some("/nonexistent/gres.conf".into()), ..Sharing::default() };
        let e = check(&sharing, &cders, &devices).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/gres.conf:0: cannot read it"), "{e}");
    }
}
