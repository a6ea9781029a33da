//! Why the engine stopped, and how an operation ended.

use crate::pace::HoldSource;
// The verdict vocabulary's one public path is the crate root (`retryscope::Verdict`).
use crate::verdict::Hint;
#[cfg(doc)]
use crate::verdict::Verdict;
use std::fmt;
use std::time::Duration;

/// Why the engine stopped retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The last failure was classified as permanent.
    Permanent,
    /// The last failure was transient, but running the operation again is not
    /// safe (see [`Verdict::Unrepeatable`]).
    Unrepeatable,
    /// Every attempt the policy allows has run.
    AttemptsExhausted,
    /// The policy's deadline has passed, or the next wait would cross it.
    DeadlineExceeded,
    /// The server asked for a wait longer than the engine may wait.
    HintTooLong {
        /// The server's hint.
        hint: Hint,
        /// The longest wait allowed at that point: the policy's
        /// `max_server_delay` or what was left of the deadline.
        limit: Duration,
    },
    /// The retry budget or token bucket refused the retry.
    BudgetExhausted,
    /// The circuit breaker is open. A retry planned while the breaker stays
    /// open past the retry's wait is refused at once, at the failure: the
    /// caller does not wait for a refusal, and the budget is not asked (when
    /// both would refuse, the breaker's is the reason given).
    CircuitOpen,
    /// The dependency asked the client to slow down (see
    /// [`pace`](crate::pace)), and the call's next send would come after its
    /// deadline: it was not sent.
    RateLimited {
        /// What held it.
        source: HoldSource,
        /// How long it would have had to wait.
        wait: Duration,
        /// What was left of the deadline.
        limit: Duration,
    },
    /// Retries happen at another layer of the call chain: the request being
    /// served is itself a retry, or the layer below already retried (see
    /// [`Verdict::RetriedElsewhere`]).
    UpstreamRetry,
    /// The client's adaptive throttle rejected the attempt locally, without
    /// sending it: the dependency has been accepting too few of the client's
    /// requests (see [`overload`](crate::overload)).
    RejectedLocally,
    /// The dependency's adaptive concurrency limit stayed full for the
    /// attempt as long as it could wait for a slot (see
    /// [`ConcurrencyLimiter`](crate::overload::ConcurrencyLimiter)): it was
    /// not sent.
    ConcurrencyLimited {
        /// The limit when the attempt gave up waiting.
        limit: u32,
        /// How long it waited for a slot.
        waited: Duration,
    },
}

impl StopReason {
    /// The `retryscope.outcome` this stop reports.
    pub(crate) const fn outcome(self) -> Outcome {
        match self {
            StopReason::Permanent | StopReason::Unrepeatable => Outcome::Failure,
            StopReason::AttemptsExhausted | StopReason::DeadlineExceeded | StopReason::HintTooLong { .. } => {
                Outcome::Exhausted
            }
            StopReason::BudgetExhausted
            | StopReason::CircuitOpen
            | StopReason::RateLimited { .. }
            | StopReason::UpstreamRetry
            | StopReason::RejectedLocally
            | StopReason::ConcurrencyLimited { .. } => Outcome::Throttled,
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Permanent => f.write_str("the failure is not retryable"),
            StopReason::Unrepeatable => {
                f.write_str("the failure is transient, but the operation is not safe to run again")
            }
            StopReason::AttemptsExhausted => f.write_str("all attempts failed"),
            StopReason::DeadlineExceeded => f.write_str("the deadline was reached"),
            StopReason::HintTooLong { hint, limit } => write!(
                f,
                "the server asked to wait {:?} ({}), longer than the {limit:?} allowed",
                hint.delay, hint.source
            ),
            StopReason::BudgetExhausted => f.write_str("the retry budget is exhausted"),
            StopReason::CircuitOpen => f.write_str("the circuit breaker is open"),
            StopReason::RateLimited { source, wait, limit } => write!(
                f,
                "the dependency is rate-limited ({source}): the next send is {wait:?} away, past the {limit:?} left"
            ),
            StopReason::UpstreamRetry => f.write_str("retries happen at another layer of the call chain"),
            StopReason::RejectedLocally => {
                f.write_str("rejected locally: the dependency accepts too few of this client's requests")
            }
            StopReason::ConcurrencyLimited { limit, waited } => write!(
                f,
                "the dependency's concurrency limit ({limit} in flight) stayed full for {waited:?}: not sent"
            ),
        }
    }
}

/// How a logical operation ended (`retryscope.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// An attempt succeeded.
    Success,
    /// A permanent error ended it.
    Failure,
    /// Attempts, deadline or an over-long server hint ended it.
    Exhausted,
    /// The budget, the circuit breaker or the pacer refused an attempt.
    Throttled,
    /// The caller dropped the operation before it ended.
    Cancelled,
}

impl Outcome {
    /// Every outcome, in the order above: what dashboards and alerts may see.
    pub const ALL: [Outcome; 5] =
        [Outcome::Success, Outcome::Failure, Outcome::Exhausted, Outcome::Throttled, Outcome::Cancelled];

    /// The attribute value used in telemetry.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Exhausted => "exhausted",
            Outcome::Throttled => "throttled",
            Outcome::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
