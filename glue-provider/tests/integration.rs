//! cder-glue-provider's integration tests in one binary, one module per
//! area (a binary per file made linking most of a test build): `cargo test
//! -p cder-glue-provider --test integration cli::` runs one area.

mod cli;
mod fuzz_regressions;
mod json_schema;
mod mig_profiles;
