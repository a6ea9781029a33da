//! Safe, observable retries.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod clock;
pub mod outcome;
pub mod throttle;
