//! An operation's outcome held back until its integration knows whether a
//! fallback answered for it.
//!
//! The engine reports an operation's end (`exhausted`, `throttled`…) when it
//! stops; a fallback runs after that, in the integration. A call a fallback
//! answered must count as `fallback`, not as the give-up its caller never
//! saw — so an integration with fallbacks hands the observer an
//! [`OutcomeSlot`]: the observer parks the outcome there instead of recording
//! it, and the integration then says [`fallback_served`](OutcomeSlot::fallback_served)
//! or lets it go as the engine said ([`release`](OutcomeSlot::release), or by
//! dropping the slot: a call dropped while its fallback runs still counts).
//!
//! Only the operation's outcome waits: `retryscope.request.duration` (or
//! `retryscope.refused` for an operation that sent nothing) and the operation
//! span's `retryscope.outcome`. The retry log's give-up event and
//! `retryscope.throttled` are written when the engine stops, as without a slot:
//! the engine did give up, and that is what they say.

use crate::labels::Common;
use crate::metrics::RetryMetrics;
use crate::names;
use retryscope::overload::Priority;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tracing::Span;

/// Where one call's outcome waits for its fallback's result: give a clone to
/// [`OtelObserver::with_outcome_slot`](crate::OtelObserver::with_outcome_slot)
/// for the call, keep the other. One per call: an allocation a client
/// without fallbacks never makes.
#[derive(Clone, Default)]
pub struct OutcomeSlot(Arc<Mutex<Option<Pending>>>);

impl fmt::Debug for OutcomeSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutcomeSlot").field("pending", &self.lock().is_some()).finish()
    }
}

impl OutcomeSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        // A panic elsewhere while holding the lock leaves a plain value behind.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn hold(&self, pending: Pending) {
        // Replacing a held outcome records it: each operation counts once.
        let _previous = self.lock().replace(pending);
    }

    /// The call's fallback answered it: its outcome is `fallback`
    /// ([`names::OUTCOME_FALLBACK`]), not an error on its operation span.
    pub fn fallback_served(&self) {
        let pending = self.lock().take();
        if let Some(mut pending) = pending {
            pending.fallback = true;
        }
    }

    /// No fallback answered (none ran, or it failed): the outcome is the engine's.
    pub fn release(&self) {
        drop(self.lock().take());
    }

    /// [`fallback_served`](Self::fallback_served) if `served`, else [`release`](Self::release).
    pub fn settle(&self, served: bool) {
        match served {
            true => self.fallback_served(),
            false => self.release(),
        }
    }
}

/// What the observer would have recorded at the operation's end. Recorded
/// when dropped: taken out of the slot, or with the slot's last clone.
pub(crate) struct Pending {
    pub(crate) metrics: RetryMetrics,
    pub(crate) common: Common,
    pub(crate) outcome: &'static str,
    /// Attempts started, clamped; 0: refused before any attempt.
    pub(crate) attempts: i64,
    pub(crate) duration: Duration,
    pub(crate) throttle_reason: Option<&'static str>,
    pub(crate) priority: Priority,
    /// The operation span (with operation spans on), ended with this.
    pub(crate) span: Option<Span>,
    /// Whether the engine's outcome sets status Error on the operation span.
    pub(crate) error: bool,
    /// A fallback answered the call.
    pub(crate) fallback: bool,
}

impl Pending {
    /// Records the outcome: what `OtelOperation::finished` does at once
    /// without a slot.
    pub(crate) fn record(&self) {
        let outcome = if self.fallback { names::OUTCOME_FALLBACK } else { self.outcome };
        if self.attempts == 0 {
            self.metrics.refused(&self.common, outcome, self.throttle_reason, self.priority);
        } else {
            self.metrics.finished(&self.common, outcome, self.attempts, self.duration);
        }
        if let Some(span) = &self.span {
            span.record(names::ATTEMPTS, self.attempts);
            span.record(names::OUTCOME, outcome);
            // The caller got an answer: a fallback's is not an error.
            if self.error && !self.fallback {
                span.record("otel.status_code", "ERROR");
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.record();
    }
}
