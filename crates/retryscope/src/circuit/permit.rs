//! Permits: permission to make one call, and the report of how it went.

use std::fmt;
use std::sync::Arc;

use super::Lane;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Issued while closed: its outcome feeds the window.
    Closed,
    /// Issued while half-open: holds one of the probe slots.
    Probe,
}

/// Permission to make one call, from [`CircuitBreaker::try_acquire`](super::CircuitBreaker::try_acquire).
///
/// Report how the call went with [`success`](Self::success) or
/// [`failure`](Self::failure). Dropping the permit without either means the
/// call was cancelled: a probe slot it held is freed and nothing is recorded.
/// The permit owns a handle to the breaker, so it can be kept across `.await`s
/// and moved between threads.
#[must_use = "report the call's outcome with `success()` or `failure()`"]
pub struct BreakerPermit {
    pub(super) lane: Arc<Lane>,
    pub(super) generation: u32,
    pub(super) role: Role,
    pub(super) settled: bool,
}

impl BreakerPermit {
    /// The call succeeded.
    pub fn success(mut self) {
        self.settle(Some(true));
    }

    /// The call failed in a way that says something about the dependency's
    /// health.
    pub fn failure(mut self) {
        self.settle(Some(false));
    }

    fn settle(&mut self, outcome: Option<bool>) {
        self.settled = true;
        let inner = &self.lane.inner;
        match (self.role, outcome) {
            (Role::Closed, Some(success)) => inner.record(self.lane.index, self.generation, success),
            (Role::Closed, None) => {}
            (Role::Probe, outcome) => inner.settle_probe(self.generation, outcome),
        }
    }
}

impl Drop for BreakerPermit {
    fn drop(&mut self) {
        if !self.settled {
            self.settle(None);
        }
    }
}

impl fmt::Debug for BreakerPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerPermit")
            .field("probe", &(self.role == Role::Probe))
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}
