//! `cderctl inventory`: what discovery finds on this node.

use std::path::Path;

use cder_model::{Config, Device};

use super::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Print a JSON array of device objects instead of a table
    #[arg(long)]
    json: bool,
}

pub fn run(config_path: Option<&Path>, args: &Args) -> Result<(), Failure> {
    let config = Config::load(config_path).map_err(Failure::usage)?;
    // `auto` decided as cderd decides it, so SOURCE says what was used.
    let config = cder_inventory::resolved(&config).map_err(Failure::runtime)?;
    let devices = cder_inventory::discover(&config).map_err(Failure::runtime)?;
    if args.json {
        let text = serde_json::to_string_pretty(&devices).map_err(Failure::runtime)?;
        super::print(&(text + "\n"))
    } else {
        super::print(&table(&config, &devices))
    }
}

/// A fixed-width table, one device per line, the way `nvidia-smi -L` users read.
fn table(config: &Config, devices: &[Device]) -> String {
    let header = [
        "TYPE", "VENDOR", "SOURCE", "IDX", "MODEL", "MEM(MiB)", "CC", "ARCH", "CORES", "MHZ", "ECC", "NUMA", "HEALTH",
        "PATH", "UUID",
    ];
    let rows: Vec<[String; 15]> = devices
        .iter()
        .map(|d| {
            let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
            let source = config.cder(&d.cder_type).map_or("-", |c| cder_inventory::source_name(c.discovery));
            [
                d.cder_type.clone(),
                d.vendor.clone(),
                source.to_string(),
                d.index.to_string(),
                d.attributes.model.clone(),
                d.attributes.memory_mib.to_string(),
                d.attributes.compute_capability.map_or("-".into(), |c| c.to_string()),
                d.attributes.architecture.clone().unwrap_or_else(|| "-".into()),
                opt(d.attributes.cores),
                opt(d.attributes.clock_mhz),
                if d.attributes.ecc { "on" } else { "off" }.to_string(),
                d.numa_node.to_string(),
                d.health.to_string(),
                d.path.display().to_string(),
                d.uuid.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ");
        out.truncate(out.trim_end().len());
        out + "\n"
    };
    let mut out = line(header.to_vec());
    for row in &rows {
        out += &line(row.iter().map(String::as_str).collect());
    }
    if devices.is_empty() {
        out += "(no devices configured or discovered)\n";
    }
    out
}
