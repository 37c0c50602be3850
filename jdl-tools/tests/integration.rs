//! cder-jdl's integration tests in one binary, one module per area (a
//! binary per file made linking most of a test build): `cargo test -p
//! cder-jdl --test integration thesis::` runs one area.

// The expression generator and value comparison of cder-classad's
// differential tests.
#[path = "../classad/tests/common/mod.rs"]
mod common;

mod cli;
mod index_lock;
mod robustness;
mod thesis;
