//! The ClassAd / gLite JDL language: parse, evaluate, match, rank.
