//! cder-exporter integration tests.
