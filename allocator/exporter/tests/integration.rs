//! cder-exporter integration tests, one binary: `cargo test -p cder-exporter --test integration`.

mod prometheus;
