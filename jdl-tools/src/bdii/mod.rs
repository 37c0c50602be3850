//! The BDII side of phase 1: LDAP retrieval ([`query`]) and ClassAd
//! Resource Offers ([`offers`]).

pub mod glue21;
pub mod offers;
pub mod query;

pub use offers::{build_offers, Offer, Offers};
pub use query::{Bdii, BdiiError, QueryOptions, Snapshot, Strategies, Wanted};
