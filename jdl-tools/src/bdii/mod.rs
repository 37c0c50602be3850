//! The BDII side of phase 1: LDAP retrieval ([`query`], over the sessions of
//! [`session`] whose replies [`wire`] reads) and ClassAd
//! Resource Offers ([`offers`]) over the entries of [`entry`], the GLUE 1.3 names both share
//! ([`glue13`]), and the GLUE 2.1 accelerator entities ([`glue21`]). A carrier's CDER
//! pairs are read in [`carrier`], by the fetch as they stream in or by the build;
//! [`spelling`] gives GLUE's spelling of the folded attribute names.

pub mod carrier;
pub mod entry;
pub mod glue13;
pub mod glue21;
pub mod offers;
pub mod query;
pub mod search;
pub mod session;
pub mod spelling;
pub mod wire;

pub use offers::{build_offers, ClosedShare, Offer, Offers};
pub use query::{Bdii, BdiiError, Fetched, QueryOptions, Strategies, Wanted};
