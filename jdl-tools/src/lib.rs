//! gLite JDL and two-phase grid submission on top of the ClassAd engine
//! ([`cder_classad`]): JDL checks, the BDII query and offer builder, phase 1
//! (`list-match`), phase 2 (`submit`) and the CE-side translation (`lrms-attrs`).
//!
//! ```
//! use cder_classad::{ClassAd, CompiledRequest};
//! let request = ClassAd::parse(r#"[ Requirements = GPGPUVendor == "Nvidia" ]"#).unwrap();
//! let offer = ClassAd::parse(r#"[ GPGPUVendor = "NVIDIA" ]"#).unwrap();
//! assert!(CompiledRequest::new(&request).matches(&offer));
//! ```

#![deny(missing_docs)]

pub mod arc;
pub mod bdii;
pub mod cmd;
pub mod index;
pub mod jdl;
pub mod listmatch;
pub mod parts;
pub mod resources;
pub mod submit;
