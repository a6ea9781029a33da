//! How long until the next attempt, or why there is none.
//!
//! One function, [`next_wait`], decides; the engine's driver and the job-queue
//! scheduler both ask it. It takes the policy's computed delay
//! ([`backoff`]: the exponential curve, then [`jitter`]), puts a server's
//! [`Hint`] under it as a floor with a random spread on top ([`hint`]), and
//! refuses a wait that the attempt limit, the deadline or `max_server_delay`
//! does not allow.
//!
//! Every rule about the length of a wait belongs in this folder, so that a
//! change to one lands once for both callers: a pacer's answer would be one
//! more bound here, applied before the deadline check.

mod backoff;
mod hint;
mod jitter;

pub use backoff::Backoff;
pub use hint::HINT_SPREAD_MAX;
pub(crate) use jitter::uniform;

use crate::outcome::StopReason;
use crate::policy::Policy;
use crate::random::JitterRng;
use crate::verdict::{DelaySource, Hint};
use std::time::Duration;

/// The wait before the attempt after `failed_attempt`, or why there is none;
/// `previous` is the delay waited before `failed_attempt` (the base delay before
/// the first retry). Shared by the engine and the stateless job-queue API.
pub(crate) fn next_wait(
    policy: &Policy,
    failed_attempt: u32,
    previous: Duration,
    elapsed: Duration,
    hint: Option<Hint>,
    rng: &mut JitterRng,
) -> Result<(Duration, DelaySource), StopReason> {
    if failed_attempt >= policy.max_attempts() {
        return Err(StopReason::AttemptsExhausted);
    }
    let computed = policy.delay(failed_attempt.saturating_sub(1), previous, rng);
    let remaining = policy.deadline().map(|d| d.saturating_sub(elapsed));
    let (delay, source) = match hint {
        None => (computed, DelaySource::Policy),
        Some(hint) => {
            // An absurd hint means "not any time soon": sleeping on it would only
            // hide the failure from the caller, so give up and say why.
            let limit = remaining.map_or(policy.max_server_delay(), |r| r.min(policy.max_server_delay()));
            if hint.delay > limit {
                return Err(StopReason::HintTooLong { hint, limit });
            }
            hint.wait(computed, limit, rng)
        }
    };
    if remaining.is_some_and(|r| delay >= r) {
        return Err(StopReason::DeadlineExceeded);
    }
    Ok((delay, source))
}
