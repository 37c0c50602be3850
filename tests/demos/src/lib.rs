//! What the benchmark programs (`src/bin/cder-*-bench`) share: summary
//! statistics and their one argument; and what the campaign programs
//! (`cder-faults`, `cder-adversary`) share: their arguments and `main`.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The arithmetic mean (0 for no samples).
pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The median (the mean of the middle two for an even count; 0 for none).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The program's first argument as a positive count, `default` when it is
/// absent. Anything else prints a usage line naming `what` and gives the
/// exit status 2 (bad input) to return.
pub fn count_arg(program: &str, what: &str, default: usize) -> Result<usize, ExitCode> {
    match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => Ok(default),
        Some(Ok(n)) if n > 0 => Ok(n),
        Some(_) => {
            eprintln!("{program}: usage: {program} [{what}] (a positive number; default {default})");
            Err(ExitCode::from(2))
        }
    }
}

/// A campaign program's arguments: `--seed N`, `--duration SECS`, a list
/// of names (`--faults`, `--actions`), `--quiet`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CampaignArgs {
    /// The seed (default: from the clock).
    pub seed: u64,
    /// How long to run.
    pub duration: Duration,
    /// The list's text, as given (default `all`).
    pub list: String,
    /// Print only the seed and the table.
    pub quiet: bool,
}

/// Parses a campaign program's arguments; `list_flag` is its list's option
/// (`--faults`). `Err("")` asks for the usage text (`-h`, `--help`).
pub fn campaign_args(args: &[String], list_flag: &str, default_duration: u64) -> Result<CampaignArgs, String> {
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1) % 1_000_000_007;
    let mut out =
        CampaignArgs { seed, duration: Duration::from_secs(default_duration), list: "all".into(), quiet: false };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value =
            |name: &str| inline.clone().or_else(|| it.next().cloned()).ok_or(format!("{name} needs a value"));
        match key {
            "--seed" => {
                let v = value("--seed")?;
                out.seed = v.parse().map_err(|_| format!("--seed {v:?}: not a whole number"))?;
            }
            "--duration" => {
                let v = value("--duration")?;
                let s: u64 = v.parse().map_err(|_| format!("--duration {v:?}: not a whole number of seconds"))?;
                if s == 0 {
                    return Err("--duration must be at least 1 second".into());
                }
                out.duration = Duration::from_secs(s);
            }
            k if k == list_flag => out.list = value(list_flag)?,
            "--quiet" => out.quiet = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(out)
}

/// A campaign program's `main`: parses its arguments, prints the seed and
/// how to replay it, checks for root and SLURM, runs `run` (which returns
/// the table and the number of violations) and prints the table. Exits 0
/// without violations, 1 with any (or when the cluster cannot start), 2 on
/// bad arguments.
pub fn campaign_main(
    program: &str,
    usage: &str,
    list_flag: &str,
    parse_list: impl Fn(&str) -> Result<Vec<&'static str>, String>,
    run: impl FnOnce(&CampaignArgs) -> Result<(String, usize), String>,
) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = campaign_args(&args, list_flag, 120).and_then(|a| {
        let names = parse_list(&a.list).map_err(|e| format!("{list_flag}: {e}"))?;
        Ok(CampaignArgs { list: names.join(","), ..a })
    });
    let args = match parsed {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{program}: {e}\n{usage}");
            return ExitCode::from(2);
        }
    };
    println!(
        "{program}: seed {} (replay: {program} --seed {} --duration {} {list_flag} {})",
        args.seed,
        args.seed,
        args.duration.as_secs(),
        args.list
    );
    if !cder_testkit::is_root() {
        eprintln!("{program}: needs root (device cgroups, device files, jobs as other users)");
        return ExitCode::from(1);
    }
    if !cder_tests::slurm::require_slurm() {
        return ExitCode::from(1);
    }
    match run(&args) {
        Ok((table, violations)) => {
            print!("{table}");
            if violations > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mean_and_median() {
        assert_eq!(super::mean(&[1.0, 2.0, 6.0]), 3.0);
        assert_eq!(super::median(&[6.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!((super::mean(&[]), super::median(&[])), (0.0, 0.0));
    }

    #[test]
    fn campaign_arguments_parse_in_both_spellings_and_refuse_the_rest() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = super::campaign_args(
            &args(&["--seed", "7", "--duration=60", "--actions", "snoop", "--quiet"]),
            "--actions",
            120,
        )
        .unwrap();
        assert_eq!((a.seed, a.duration.as_secs(), a.list.as_str(), a.quiet), (7, 60, "snoop", true));
        assert_eq!(super::campaign_args(&args(&[]), "--faults", 120).unwrap().list, "all");
        assert!(super::campaign_args(&args(&["--duration", "0"]), "--faults", 120).is_err());
        assert!(super::campaign_args(&args(&["--actions", "x"]), "--faults", 120).unwrap_err().contains("--actions"));
        assert_eq!(super::campaign_args(&args(&["-h"]), "--faults", 120).unwrap_err(), "");
    }
}
