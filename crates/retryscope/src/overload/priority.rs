//! A call's priority: which calls an overloaded client refuses first.

use std::fmt;

/// How much a call matters when the client must refuse some (the SRE book's
/// *criticality*, ch. 21, in two classes). Under adaptive throttling or a
/// nearly full concurrency limit, sheddable calls are refused first:
///
/// - the [`AdaptiveThrottle`](super::AdaptiveThrottle) rejects a sheddable
///   call whenever its rejection probability is above zero (a critical one
///   only with that probability);
/// - a [`ConcurrencyLimiter`](super::ConcurrencyLimiter) lets a sheddable
///   call take a slot only while fewer than `limit · (1 − reserve)` calls are
///   in flight: the top `reserve` of the limit (20 % unless set) is kept for
///   critical calls.
///
/// Set per call ([`Retry::priority`](crate::Retry::priority)); critical
/// unless said otherwise. Its [`as_str`](Self::as_str) is the
/// `retryscope.priority` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Priority {
    /// Work a user waits for: refused only when it must be.
    #[default]
    Critical,
    /// Work that may be dropped under load (prefetches, batch work, retries
    /// a caller can do without): refused first.
    Sheddable,
}

impl Priority {
    /// Every priority: what a metric label may hold.
    pub const ALL: [Priority; 2] = [Priority::Critical, Priority::Sheddable];

    /// The attribute value used in telemetry.
    pub const fn as_str(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Sheddable => "sheddable",
        }
    }

    /// Whether this call is refused first.
    pub(crate) const fn is_sheddable(self) -> bool {
        matches!(self, Priority::Sheddable)
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
