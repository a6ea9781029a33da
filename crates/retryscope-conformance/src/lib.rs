//! The conformance tests live in `tests/`, one per behaviour the integrations
//! share, each run against both.
//!
//! The library itself holds what the doctests of the README and of the guide
//! (`docs`, doctested only) need besides the code they show: the services
//! their text names ([`services`]) and the checks of what reached them
//! ([`checks`]), called from their hidden lines.

pub mod checks;
#[cfg(doctest)]
mod docs;
pub mod services;
