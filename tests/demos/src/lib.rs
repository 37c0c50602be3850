//! What the benchmark programs (`src/bin/cder-*-bench`) share: summary
//! statistics and their one argument.

use std::process::ExitCode;

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

#[cfg(test)]
mod tests {
    #[test]
    fn mean_and_median() {
        assert_eq!(super::mean(&[1.0, 2.0, 6.0]), 3.0);
        assert_eq!(super::median(&[6.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!((super::mean(&[]), super::median(&[])), (0.0, 0.0));
    }
}
