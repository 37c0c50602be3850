//! The TORQUE crate's integration tests in one binary, one module per area
//! (a binary per file made linking most of a test build): `cargo test -p
//! cder-torque --test integration trust::` runs one area.

mod common;

mod submit_filter;
mod torque_hooks;
mod trust;
