//! cder-classad's integration tests in one binary, one module per area (a
//! binary per file made linking most of a test build). `no_alloc`'s
//! counting allocator counts per thread, so it serves the whole binary.

mod common;

mod differential;
mod no_alloc;
