//! A parsed HTTP request head: what the HTTP loop ([`crate::http`]) reads
//! and the service ([`crate::service`]) screens and authenticates, kept
//! apart so that the service needs nothing of the loop.

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub authorization: Option<String>,
    pub content_length: usize,
    pub expect_continue: bool,
    /// Bytes of the head (request line, headers, blank line).
    pub len: usize,
}
