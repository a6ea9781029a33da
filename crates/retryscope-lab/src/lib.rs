//! The retryscope storm lab.
//!
//! - [`sim`]: deterministic simulations in virtual time (`retryscope simulate`),
//!   driving the engine's own backoff, jitter, budget and breaker code.
//! - [`storm`]: a live retry storm on loopback (`retryscope storm`), measured
//!   through the instrumentation.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod advise;
pub mod check_config;
pub mod jobs;
pub mod sim;
pub mod storm;
