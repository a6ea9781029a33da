//! The contenders of the peer benchmarks, shared by the time-based bench
//! (`peers`) and the instruction-count bench (`icount`): one operation, and each
//! crate configured to retry it the same way.
#![allow(dead_code, unreachable_pub)]

use backon::ConstantBuilder;
use retryscope::{Jitter, Policy};
use std::cell::Cell;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::time::Duration;

/// How often the failure-path operation fails before it succeeds.
pub const FAILURES: u32 = 3;

/// The error every contender retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// Transient, as the engine's default classifier asks of an error type.
impl retryscope::Transient for Busy {
    #[inline]
    fn verdict(&self) -> retryscope::Verdict {
        retryscope::Verdict::retryable(retryscope::ErrorType::OTHER)
    }
}

/// An async operation that fails `failures` times, then succeeds. Its future is
/// ready on the first poll, so what is measured is the retry machinery.
pub struct Flaky {
    failures: u32,
    pub calls: Cell<u32>,
}

impl Flaky {
    pub fn new(failures: u32) -> Self {
        // `black_box` keeps the compiler from deciding the outcome at build time.
        Self { failures: black_box(failures), calls: Cell::new(0) }
    }

    pub fn call(&self) -> Ready<Result<u64, Busy>> {
        let n = self.calls.get();
        self.calls.set(n + 1);
        ready(if n < self.failures { Err(Busy) } else { Ok(black_box(42)) })
    }
}

/// retryscope: 4 attempts (3 retries), 1 ns base delay capped at 1 ns (the
/// smallest the policy accepts: base and cap must be > 0, the multiplier > 1),
/// no jitter, no deadline and no attempt timeout (so no per-attempt time limit
/// is armed), default classifier (`Busy` is `Transient` and retryable), no
/// observer. Each wait is a
/// `tokio::time::sleep(1 ns)`.
pub fn retryscope_policy() -> Policy {
    Policy::builder()
        .max_attempts(FAILURES + 1)
        .base_delay(Duration::from_nanos(1))
        .max_delay(Duration::from_nanos(1))
        .multiplier(2.0)
        .jitter(Jitter::None)
        .no_deadline()
        .no_attempt_timeout()
        .build()
        .expect("a valid policy")
}

/// retryscope with the engine's default 15 s deadline (the `interactive`
/// preset's), everything else as [`retryscope_policy`]: each attempt then runs
/// under a time limit, a `tokio::time::Sleep` created per attempt.
pub fn retryscope_deadline_policy() -> Policy {
    retryscope_policy().to_builder().deadline(Duration::from_secs(15)).build().expect("a valid policy")
}

/// backon: a constant backoff of `Duration::ZERO` (allowed), 3 retries, no
/// jitter (the default), default sleeper (`tokio::time::sleep`), every `Err`
/// retryable (the default).
pub fn backon_builder() -> ConstantBuilder {
    ConstantBuilder::new().with_delay(Duration::ZERO).with_max_times(FAILURES as usize)
}

/// tower: a [`tower::retry::Policy`] allowing 3 retries whose "backoff" future
/// is `std::future::Ready<()>`: tower leaves waiting to the policy, so zero
/// delay means no timer at all.
#[derive(Debug, Clone, Copy)]
pub struct TowerRetries(pub u32);

impl tower::retry::Policy<(), u64, Busy> for TowerRetries {
    type Future = Ready<()>;

    fn retry(&mut self, _: &mut (), result: &mut Result<u64, Busy>) -> Option<Self::Future> {
        match result {
            Err(_) if self.0 > 0 => {
                self.0 -= 1;
                Some(ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, _: &()) -> Option<()> {
        Some(())
    }
}

/// tower as [`TowerRetries`], but waiting `tokio::time::sleep(Duration::ZERO)`
/// between attempts, as the timer-based contenders do (an *extra* row).
#[derive(Debug, Clone, Copy)]
pub struct TowerRetriesSleep0(pub u32);

impl tower::retry::Policy<(), u64, Busy> for TowerRetriesSleep0 {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, _: &mut (), result: &mut Result<u64, Busy>) -> Option<Self::Future> {
        match result {
            Err(_) if self.0 > 0 => {
                self.0 -= 1;
                Some(tokio::time::sleep(Duration::ZERO))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, _: &()) -> Option<()> {
        Some(())
    }
}

/// tokio-retry2: `FixedInterval(Duration::ZERO)` taken 3 times; the operation's
/// error is mapped to `RetryError::Transient` (the crate's API requires the
/// action to say so). Each wait is a `tokio::time::sleep_until(now)`.
pub fn tokio_retry2_strategy() -> std::iter::Take<tokio_retry2::strategy::FixedInterval> {
    tokio_retry2::strategy::FixedInterval::new(Duration::ZERO).take(FAILURES as usize)
}

pub async fn tokio_retry2_call(flaky: &Flaky) -> Result<u64, Busy> {
    tokio_retry2::Retry::spawn(tokio_retry2_strategy(), || async {
        flaky.call().await.map_err(tokio_retry2::RetryError::transient)
    })
    .await
}
