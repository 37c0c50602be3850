//! Mutations: a test build's way to put back a regression the adversary
//! campaign must catch, so that a test can see the campaign catch it
//! (docs/testing.md, "What each check must catch").
//!
//! `CDER_MUTATION=<name>[,<name>…]` in a process's environment turns the
//! named ones on, in debug builds only: under `cfg(debug_assertions)`
//! the variable is read; in a release build [`on`] is `false` and reads
//! nothing, so no package carries a switch a user could set.

/// The variable naming the mutations on.
pub const VARIABLE: &str = "CDER_MUTATION";

/// Every mutation some product code knows, with the regression it puts back.
pub const ALL: [(&str, &str); 5] = [
    ("fuse-stat", "cderd's held-open scan stats through /proc/PID/fd/N, into the user's file system"),
    ("ignore-holders", "cderd's release ignores processes still holding a released device"),
    ("fdinfo-scan", "cderd's held-open scan reads /proc/PID/fdinfo/N for every descriptor"),
    ("forged-stamp", "job_submit_cder.so keeps a submitter's CDER_NODE_GRES stamp"),
    ("provider-job-name", "cder-glue-provider reads jobs from `scontrol -o show job`, the job name first"),
];

/// Is mutation `name` on in this process? Always `false` in a release build.
#[cfg(debug_assertions)]
pub fn on(name: &str) -> bool {
    std::env::var(VARIABLE).is_ok_and(|v| v.split(',').any(|m| m.trim() == name))
}

/// Is mutation `name` on in this process? Always `false` in a release build.
#[cfg(not(debug_assertions))]
pub fn on(_name: &str) -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_mutation_has_a_name_and_a_regression() {
        for (name, what) in super::ALL {
            assert!(!name.is_empty() && !name.contains(',') && !what.is_empty());
        }
    }
}
