//! The pacer's part of a wait: how long the dependency's pace holds the next
//! send back, or why it is not sent at all.
//!
//! [`next_wait`](super::next_wait) decides a retry's own wait; what the
//! dependency said (a gate, quota spacing, the adaptive limiter's token) can
//! only add to it. Both the wait after a failure and the send of an attempt no
//! wait went before (a first attempt, a hedge's copy) ask here, so that one
//! rule decides for retries and hedges alike.

use crate::outcome::StopReason;
use crate::pace::{Admission, HoldSource, Pacer};
use std::time::Duration;

/// How long the pacer holds a send back, and why: `None` when it may go.
pub(crate) type Hold = Option<(Duration, HoldSource)>;

/// The hold before a send now, with `remaining` left of the deadline.
/// `scheduled`: the wait that led here already asked the schedule (a retry's
/// wait, or an earlier hold), so only the adaptive limiter's token is taken,
/// at the moment of sending.
pub(crate) fn before_send(
    pacer: &Pacer,
    scheduled: bool,
    remaining: Option<Duration>,
) -> Result<Hold, StopReason> {
    let admission = if scheduled {
        pacer.take_token(remaining)
    } else {
        match pacer.admit(Duration::ZERO, remaining) {
            Admission::Now => pacer.take_token(remaining),
            held => held,
        }
    };
    decide(admission, remaining)
}

/// The hold after a retry's own `wait`, with `limit` left of the deadline
/// when that wait is over: the pace in force then.
pub(crate) fn after_wait(pacer: &Pacer, wait: Duration, limit: Option<Duration>) -> Result<Hold, StopReason> {
    decide(pacer.admit(wait, limit), limit)
}

/// What the pacer's answer means: the hold, or a refusal that names it.
fn decide(admission: Admission, limit: Option<Duration>) -> Result<Hold, StopReason> {
    match admission {
        Admission::Now => Ok(None),
        Admission::Hold { wait, source } => Ok(Some((wait, source))),
        Admission::Refused { wait, source } => {
            Err(StopReason::RateLimited { source, wait, limit: limit.unwrap_or(Duration::MAX) })
        }
    }
}
