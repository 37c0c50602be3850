//! cderctl's integration tests in one binary, one module per area (a binary
//! per file made linking most of a test build): `cargo test -p cderctl
//! --test integration node_cli::` runs one area.

mod apel;
mod inventory_cli;
mod node_cli;
