//! A6's retry throttling beside a retry budget given in code: the channel's
//! token bucket as a guard of its own, so that both are asked and neither
//! is dropped for the other.

use retryscope::StopReason;
use retryscope::TokenBucket;
use retryscope::budget::Budget;
use retryscope::guard::{Admission, Attempt, End, Guard};

/// A dependency's A6 token bucket where the layer also has a retry budget
/// (`budget_per_dependency`): the budget keeps the dependency's budget
/// slot, and the bucket is asked as a further guard. A retry goes only when
/// both allow it; each hears every attempt's end, as a budget does.
///
/// The bucket costs nothing to ask (a retry is allowed while more than half
/// of it is left; only failures take tokens), so asking it beside a budget
/// that charges each retry never spends a retry the other refuses.
pub(crate) struct Throttling(pub(crate) TokenBucket);

impl Guard for Throttling {
    type Permit = ();

    fn admit(&self, attempt: Attempt) -> Admission {
        match attempt.cause() {
            Some(cause) if !self.0.try_acquire_retry(cause) => Admission::Refuse(StopReason::BudgetExhausted),
            _ => Admission::Go(()),
        }
    }

    fn settle(&self, _attempt: Attempt, _permit: (), end: End) {
        // A6: a success gives back `tokenRatio`, a retryable failure takes a
        // token; a permanent answer, a cancelled or unsent attempt, nothing.
        match end {
            End::Succeeded => self.0.attempt_finished(true),
            End::Failed | End::Throttled => self.0.attempt_finished(false),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_refuses_retries_at_half_and_never_a_first_attempt() {
        let bucket =
            Throttling(TokenBucket::builder().max_tokens(4).token_ratio(1.0).build().expect("valid"));
        let retry = Attempt::retry(2);
        assert!(matches!(bucket.admit(retry), Admission::Go(())));
        // 4 tokens: two failures leave 2, which is not more than half.
        bucket.settle(retry, (), End::Failed);
        bucket.settle(retry, (), End::Failed);
        assert!(matches!(bucket.admit(retry), Admission::Refuse(StopReason::BudgetExhausted)));
        assert!(matches!(bucket.admit(Attempt::first()), Admission::Go(())));
        // A permanent answer says nothing; a success gives a token back.
        bucket.settle(retry, (), End::Answered);
        assert!(matches!(bucket.admit(retry), Admission::Refuse(_)));
        bucket.settle(retry, (), End::Succeeded);
        assert!(matches!(bucket.admit(retry), Admission::Go(())));
    }
}
