//! How long until the next attempt, or why there is none.
//!
//! One function, [`next_wait`], decides; the engine's driver and the job-queue
//! scheduler both ask it. It takes the policy's computed delay
//! ([`backoff`]: the exponential curve, then [`jitter`]), puts a server's
//! [`Hint`] under it as a floor with a random spread on top ([`hint`]), and
//! refuses a wait that the attempt limit, the deadline or `max_server_delay`
//! does not allow. Where a call stands on the curve is a [`Curve`], which a
//! gRPC pushback restarts.
//!
//! Every rule about the length of a wait belongs in this folder, so that a
//! change to one lands once for every caller: the dependency's pace, which
//! can only add to a wait or refuse a send, is decided here too ([`pace`]).

mod backoff;
mod hint;
mod jitter;
pub(crate) mod pace;

pub use backoff::Backoff;

use crate::budget::RetryCause;
use crate::outcome::StopReason;
use crate::policy::Policy;
use crate::random::JitterRng;
use crate::verdict::{DelaySource, Hint};
use std::time::Duration;

/// Where a call stands on its backoff curve: how many retries the curve has
/// counted since it started, and the delay waited before the last of them.
///
/// A server's gRPC pushback restarts the curve: gRFC A6 waits exactly the
/// pushback, then "for subsequent retries, the delay period will be reset to
/// the `initialBackoff` setting and scale according to the Exponential Backoff
/// section". A pushback is a gRPC answer, so this changes nothing for HTTP,
/// whose `Retry-After` and `RateLimit` hints leave the curve where it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Curve {
    /// Retries counted on the curve: the next delay is `base · multiplier^step`.
    step: u32,
    /// The delay before the last retry; `None` before the first, when it stands
    /// for the base delay.
    previous: Option<Duration>,
}

impl Curve {
    /// Before the first retry.
    pub(crate) const START: Curve = Curve { step: 0, previous: None };

    /// `retries` retries in, the last of which waited `previous`: for callers
    /// that store only those two numbers (job queues), which do not know whether
    /// a pushback came in between.
    pub(crate) fn resumed(retries: u32, previous: Option<Duration>) -> Self {
        Self { step: retries, previous }
    }

    /// The curve after a retry that waited `delay`, decided by `source`.
    pub(crate) fn after(self, delay: Duration, source: DelaySource) -> Self {
        let step = match source {
            DelaySource::GrpcPushback => 0,
            _ => self.step.saturating_add(1),
        };
        Self { step, previous: Some(delay) }
    }
}

/// The wait before the attempt after `failed_attempt`, which failed for
/// `cause`, or why there is none; `curve` is where the call's backoff stands.
/// Shared by the engine and the stateless job-queue API.
pub(crate) fn next_wait(
    policy: &Policy,
    failed_attempt: u32,
    cause: RetryCause,
    curve: Curve,
    elapsed: Duration,
    hint: Option<Hint>,
    rng: &mut JitterRng,
) -> Result<(Duration, DelaySource), StopReason> {
    if failed_attempt >= policy.max_attempts() {
        return Err(StopReason::AttemptsExhausted);
    }
    // The curve's step is shared; its base and cap are the cause's.
    let previous = curve.previous.unwrap_or(policy.curve_of(cause).0);
    let computed = policy.delay_after(cause, curve.step, previous, rng);
    let remaining = policy.deadline().map(|d| d.saturating_sub(elapsed));
    let (delay, source) = match hint {
        None => (computed, DelaySource::Policy),
        Some(mut hint) => {
            // A policy with headroom cuts a long hint to the backoff plus it
            // (AWS's clamp), spread included, instead of honouring it whole.
            let ceiling = policy.hint_headroom().map(|headroom| computed.saturating_add(headroom));
            if let Some(ceiling) = ceiling {
                hint.delay = hint.delay.min(ceiling);
            }
            // An absurd hint means "not any time soon": sleeping on it would only
            // hide the failure from the caller, so give up and say why.
            let limit = remaining.map_or(policy.max_server_delay(), |r| r.min(policy.max_server_delay()));
            if hint.delay > limit {
                return Err(StopReason::HintTooLong { hint, limit });
            }
            let (wait, source) = hint.wait(computed, limit, rng);
            (ceiling.map_or(wait, |ceiling| wait.min(ceiling)), source)
        }
    };
    if remaining.is_some_and(|r| delay >= r) {
        return Err(StopReason::DeadlineExceeded);
    }
    Ok((delay, source))
}
