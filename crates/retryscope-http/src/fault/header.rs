//! Faults a request asks for by header, as Envoy's `x-envoy-fault-*`
//! headers do: for integration tests, and only in a process whose
//! [`Faults`](super::Faults) was built with
//! [`header_control`](super::FaultsBuilder::header_control).

use super::kind::FaultKind;
use super::rule::FaultRate;
use http::HeaderMap;
use http::header::HeaderName;

/// The fault a request asks for, in [`FaultKind`]'s spec syntax (`503`,
/// `429+retry-after=20`, `reset`, `latency=200ms`, …).
pub const FAULT_KIND_HEADER: HeaderName = HeaderName::from_static("x-retryscope-fault-kind");
/// How often the asked-for fault is injected, 0 to 100 (100 without it).
pub const FAULT_PERCENTAGE_HEADER: HeaderName = HeaderName::from_static("x-retryscope-fault-percentage");

/// The fault and rate `headers` ask for; `None` when they ask for none, or
/// for one that does not parse (a malformed header injects nothing).
pub(crate) fn asked(headers: &HeaderMap) -> Option<(FaultKind, FaultRate)> {
    let kind = headers.get(FAULT_KIND_HEADER)?.to_str().ok()?.trim().parse().ok()?;
    let rate = match headers.get(FAULT_PERCENTAGE_HEADER) {
        None => FaultRate::ALWAYS,
        Some(value) => {
            let percent = value.to_str().ok()?.trim().trim_end_matches('%').parse().ok()?;
            FaultRate::percent(percent).ok()?
        }
    };
    Some((kind, rate))
}
