//! `cder-ledger`, what cder's two durable services share: cderd (one node's
//! CDERs) and the cluster vGPGPU registry. It sits below both so that
//! neither depends on the other.
//!
//! * [`durable`] — opening SQLite the durable way (WAL, `synchronous=FULL`,
//!   versioned schema, private state directory).
//! * [`policy`] — which free devices a job gets ([`policy::SelectionPolicy`],
//!   default [`policy::LocalityPolicy`], Mendonca's best-effort locality;
//!   [`policy::FirstPolicy`], his basic allocation; [`policy::by_name`]).
//! * [`sys`] — the one libc call it needs (user lookup through NSS).
//! * [`resolve_operators`], [`now`] — the operator uids of a config and the
//!   clock both ledgers stamp rows with.
//!
//! ```
//! use cder_ledger::policy::{Candidate, LocalityPolicy, SelectionPolicy};
//!
//! let free = [
//!     Candidate { index: 0, domain: 0 },
//!     Candidate { index: 1, domain: 1 },
//!     Candidate { index: 2, domain: 1 },
//! ];
//! // Two devices fit in domain 1: the locality policy keeps them together.
//! assert_eq!(LocalityPolicy.select(&free, 2), Some(vec![1, 2]));
//! ```

#![deny(missing_docs)]

pub mod durable;
pub mod policy;
pub mod sys;

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

pub use policy::{Candidate, FirstPolicy, LocalityPolicy, SelectionPolicy};

/// Unix seconds now.
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Resolves `[node] operators`: numeric uids as they are, names through NSS.
pub fn resolve_operators(names: &[String]) -> Result<BTreeSet<u32>, String> {
    let mut out = BTreeSet::new();
    for name in names {
        if let Ok(uid) = name.parse::<u32>() {
            out.insert(uid);
            continue;
        }
        match sys::uid_of_user(name) {
            Ok(Some(uid)) => {
                out.insert(uid);
            }
            Ok(None) => return Err(format!("no user {name:?} on this node")),
            Err(e) => return Err(format!("looking up user {name:?}: {e}")),
        }
    }
    Ok(out)
}
