//! The local index of the BDII's GPU offers.

pub mod cache;
pub mod refresh;
