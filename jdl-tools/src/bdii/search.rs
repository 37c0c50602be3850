//! One search of phase 1's plan, how a failed one is reported, and where a
//! streamed one hands its entries: shared by the plan ([`crate::bdii::query`])
//! and the sessions that run it ([`crate::bdii::session`]).

use std::time::Duration;

use crate::bdii::entry::Entry;
use ldap3::Scope;

/// A failed query, naming the BDII.
#[derive(Debug, thiserror::Error)]
pub enum BdiiError {
    /// Could not connect.
    #[error("{url}: BDII unreachable: {message}")]
    Unreachable {
        /// The BDII.
        url: String,
        /// Why.
        message: String,
    },
    /// Connected, but no answer in time.
    #[error("{url}: BDII timed out after {after:?} ({what})")]
    Timeout {
        /// The BDII.
        url: String,
        /// The timeout that expired.
        after: Duration,
        /// What was being waited for.
        what: String,
    },
    /// The server refused a search.
    #[error("{url}: search {filter} under {base} failed: {message}")]
    Search {
        /// The BDII.
        url: String,
        /// Base DN.
        base: String,
        /// The filter.
        filter: String,
        /// The server's or library's message.
        message: String,
    },
    /// The URL is not an LDAP URL.
    #[error("{url}: not an LDAP URL (expected ldap://host:port)")]
    BadUrl {
        /// What was given.
        url: String,
    },
}

/// One search of a plan.
#[derive(Clone, Debug)]
pub struct Search {
    /// Base DN.
    pub base: String,
    /// Subtree or one-level (base searches are not needed by phase 1).
    pub scope: Scope,
    /// The filter, already escaped.
    pub filter: String,
    /// Attributes to return (empty: all user attributes).
    pub attrs: Vec<String>,
    /// RFC 2696 paging, for scans whose answer may be large.
    pub paged: bool,
}

impl Search {
    /// A paged subtree scan of a whole tree.
    pub fn scan(base: &str, filter: String, attrs: &[impl AsRef<str>]) -> Search {
        Search {
            base: base.into(),
            scope: Scope::Subtree,
            filter,
            attrs: attrs.iter().map(|a| a.as_ref().to_string()).collect(),
            paged: true,
        }
    }
    /// A search under a known entry, answered from slapd's DN index.
    pub fn under(base: &str, scope: Scope, filter: String, attrs: &[impl AsRef<str>]) -> Search {
        Search {
            base: base.into(),
            scope,
            filter,
            attrs: attrs.iter().map(|a| a.as_ref().to_string()).collect(),
            paged: false,
        }
    }
}

/// Where a tapped search hands its entries as they arrive, with the search's
/// position, instead of keeping them for its result.
pub(crate) type Tap = tokio::sync::mpsc::UnboundedSender<(usize, Vec<Entry>)>;

/// Entries a tapped search hands over at once: one wake-up of the joining
/// thread per entry cost more than its handling (a scan has 10^4–10^5).
pub(crate) const TAP_BATCH: usize = 64;
