//! The AWS retry quota and the hint headroom on real calls through the
//! engine, on tokio's paused clock: each retry priced by what caused it, a
//! successful retry (or winning hedge copy) refunded, a long `x-amz-retry-after`
//! cut to the backoff plus the headroom.

mod common;

use common::{ms, plain, status_verdict};
use retryscope::budget::RetryQuota;
use retryscope::dependency::Dependency;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::{ErrorType, Hint, Retryable, StopReason, Verdict};
use std::cell::Cell;
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// Answers each attempt with the next status of `script` (200 ends it).
fn scripted(script: &'static [u16]) -> impl FnMut() -> std::future::Ready<Result<(), u16>> {
    let calls = Cell::new(0);
    move || {
        let status = script[calls.get()];
        calls.set(calls.get() + 1);
        std::future::ready(if status == 200 { Ok(()) } else { Err(status) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_throttled_retry_costs_five_and_a_failed_ones_fourteen_refunded_on_success() {
    let quota = RetryQuota::aws_2026();
    let dependency = Dependency::new("test").with_budget(quota.clone());
    let op = scripted(&[429, 503, 200]);
    assert!(op.retry(plain()).classify(status_verdict).dependency(&dependency).await.is_ok());
    // The retry after the 429 paid 5 and failed: spent. The retry after the
    // 503 paid 14 and succeeded: given back.
    assert_eq!(quota.tokens(), 495);
}

#[tokio::test(start_paused = true)]
async fn a_nearly_spent_quota_still_pays_for_throttled_retries_only() {
    let quota = RetryQuota::builder().capacity(20).build().expect("in range");
    let dependency = Dependency::new("test").with_budget(quota.clone());
    let op = scripted(&[503, 503, 200]);
    // 20 - 14 = 6 left after the first retry: the second (14) is refused.
    let refused = op.retry(plain()).classify(status_verdict).dependency(&dependency).await;
    assert_eq!(refused.map_err(|e| e.reason()), Err(StopReason::BudgetExhausted));
    assert_eq!(quota.tokens(), 6);
    let op = scripted(&[429, 200]);
    assert!(op.retry(plain()).classify(status_verdict).dependency(&dependency).await.is_ok());
    assert_eq!(quota.tokens(), 6, "the throttled retry paid 5 and got it back");
}

#[tokio::test(start_paused = true)]
async fn a_hedge_copy_is_priced_as_a_retry_and_refunded_when_it_wins() {
    let quota = RetryQuota::aws_2026();
    let dependency = Dependency::new("test").with_budget(quota.clone());
    let policy = HedgePolicy::builder()
        .max_copies(2)
        .delay(HedgeDelay::Fixed(ms(50)))
        .no_deadline()
        .no_attempt_timeout()
        .build()
        .expect("valid policy");
    let copy = Cell::new(0);
    let op = || {
        copy.set(copy.get() + 1);
        let n = copy.get();
        async move {
            // The first copy stalls; the second answers at once.
            sleep(if n == 1 { Duration::from_secs(3_600) } else { ms(10) }).await;
            Ok::<u32, &'static str>(n)
        }
    };
    let answer = op.hedge(policy).dependency(&dependency).when(|_: &&str| true).await;
    assert_eq!(answer.ok(), Some(2));
    // The first copy, dropped, says nothing; the second paid 14 and won.
    assert_eq!(quota.tokens(), 500);
}

/// `x-amz-retry-after: 30000` (30 s) after a first failure whose backoff is
/// 100 ms: the 2026 behaviour waits at most the backoff plus 5 s.
#[tokio::test(start_paused = true)]
async fn a_long_hint_is_cut_to_the_backoff_plus_the_headroom() {
    let headroom = plain().to_builder().hint_headroom(Duration::from_secs(5)).build().expect("valid policy");
    for (policy, at_least, at_most) in [
        (headroom, ms(5_100), ms(5_100)),
        // Without headroom the hint is honoured whole (up to a fifth of spread).
        (plain(), Duration::from_secs(30), Duration::from_secs(36)),
    ] {
        let calls = Cell::new(0);
        let op = || {
            calls.set(calls.get() + 1);
            std::future::ready(if calls.get() == 1 { Err(503) } else { Ok(()) })
        };
        let classify = |r: &Result<(), u16>| match r {
            Ok(()) => Verdict::Success,
            Err(_) => Verdict::Retryable {
                error: ErrorType::Status(503),
                hint: Some(Hint::retry_after(Duration::from_secs(30))),
            },
        };
        let started = Instant::now();
        assert!(op.retry(policy).classify(classify).await.is_ok());
        let waited = started.elapsed();
        assert!(waited >= at_least && waited <= at_most, "{policy:?}: waited {waited:?}");
    }
}

/// A hint shorter than the backoff still waits the backoff: the headroom is
/// a ceiling above it, never a shortcut.
#[tokio::test(start_paused = true)]
async fn a_short_hint_still_waits_the_backoff() {
    let policy = plain().to_builder().hint_headroom(Duration::from_secs(5)).build().expect("valid policy");
    let calls = Cell::new(0);
    let op = || {
        calls.set(calls.get() + 1);
        std::future::ready(if calls.get() == 1 { Err(503) } else { Ok(()) })
    };
    let classify = |r: &Result<(), u16>| match r {
        Ok(()) => Verdict::Success,
        Err(_) => Verdict::Retryable { error: ErrorType::Status(503), hint: Some(Hint::retry_after(ms(10))) },
    };
    let started = Instant::now();
    assert!(op.retry(policy).classify(classify).await.is_ok());
    assert_eq!(started.elapsed(), ms(100));
}

#[test]
fn a_zero_headroom_is_refused() {
    let refused = plain().to_builder().hint_headroom(Duration::ZERO).build().expect_err("zero");
    assert!(refused.to_string().contains("hint_headroom"), "{refused}");
}
