//! Why the engine stopped, for the integration to read once the call is over.

use retryscope::StopReason;
use retryscope::observe::{
    AttemptEnd, AttemptStart, Finish, Observer, OperationInfo, OperationObserver, Wait,
};
use std::sync::{Mutex, PoisonError};

/// Where the engine's stop reason lands: an observer borrowed for one call
/// (`&StopSlot`), read with [`stopped`](Self::stopped) after it.
///
/// What [`StopRecorder`](retryscope::observe::StopRecorder) does, on the
/// caller's stack instead of behind an `Arc`: an integration that owns the
/// call's future has no need to share the slot, and so no allocation to pay
/// on every call.
///
/// ```
/// use retryscope::{Policy, Retryable, StopReason};
/// use retryscope_http::stop::StopSlot;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let stop = StopSlot::default();
/// let policy = Policy::builder().max_attempts(2).build().expect("a valid policy");
/// let result = (|| async { Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset)) })
///     .retry(policy)
///     .retry_any_error()
///     .observe(&stop)
///     .await;
/// assert!(result.is_err());
/// assert_eq!(stop.stopped(), Some((StopReason::AttemptsExhausted, 2)));
/// # }
/// ```
#[derive(Debug, Default)]
pub struct StopSlot(Mutex<Option<(StopReason, u32)>>);

impl StopSlot {
    /// Why the engine stopped and after how many attempts; `None` before the
    /// operation ended, or when it succeeded.
    pub fn stopped(&self) -> Option<(StopReason, u32)> {
        // A poisoned lock only means a panic while writing a `Copy` value:
        // whatever is there is whole.
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<'a> Observer for &'a StopSlot {
    type Operation = &'a StopSlot;

    const TIMED: bool = false;

    fn start(&self, _: &OperationInfo<'_>) -> &'a StopSlot {
        self
    }
}

impl OperationObserver for &StopSlot {
    type Attempt = ();

    fn attempt_started(&mut self, _: &AttemptStart) {}

    fn attempt_finished(&mut self, _: (), _: &AttemptEnd) {}

    fn waiting(&mut self, _: &Wait) {}

    fn finished(self, finish: &Finish) {
        let stopped = finish.reason.map(|reason| (reason, finish.attempts));
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = stopped;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retryscope::{Policy, Retryable};

    #[tokio::test(start_paused = true)]
    async fn a_success_leaves_the_slot_empty_and_a_permanent_error_fills_it() {
        let stop = StopSlot::default();
        let ok = (|| async { Ok::<_, std::io::Error>(1) }).retry(Policy::interactive()).observe(&stop).await;
        assert_eq!(ok.ok(), Some(1));
        assert_eq!(stop.stopped(), None);
        let refused = (|| async { Err::<(), _>("no") })
            .retry(Policy::interactive())
            .when(|_: &&str| false)
            .observe(&stop)
            .await;
        assert!(refused.is_err());
        assert_eq!(stop.stopped(), Some((StopReason::Permanent, 1)));
    }
}
