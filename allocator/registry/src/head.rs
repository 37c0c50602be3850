//! A parsed HTTP request head: what the HTTP loop ([`crate::http`]) reads
//! and the service ([`crate::service`]) screens and authenticates, kept
//! apart so that the service needs nothing of the loop.

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// `GET`, `POST`, …
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// The `Authorization` header (the MUNGE credential).
    pub authorization: Option<String>,
    /// `Content-Length` (0 when absent).
    pub content_length: usize,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
    /// Bytes of the head (request line, headers, blank line).
    pub len: usize,
}
