//! Async retries without tokio: `futures`' `block_on` as the executor and a
//! timer that is one thread per wait, plugged in with `Retry::with_sleeper`.
//! CI also runs this file with `--no-default-features` (no tokio, no http).

use retryscope::ErrorType;
use retryscope::{Jitter, Policy, Retryable, Sleeper, StopReason};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A timer that sleeps on its own thread and wakes the task when done.
#[derive(Default, Clone)]
struct ThreadTimer {
    started: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Alarm {
    rung: bool,
    waker: Option<Waker>,
}

struct ThreadSleep(Arc<Mutex<Alarm>>);

impl Sleeper for ThreadTimer {
    type Sleep = ThreadSleep;

    fn sleep(&self, delay: Duration) -> ThreadSleep {
        self.started.fetch_add(1, Ordering::Relaxed);
        let alarm = Arc::new(Mutex::new(Alarm::default()));
        let ring = Arc::clone(&alarm);
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            let waker = {
                let mut alarm = ring.lock().unwrap_or_else(PoisonError::into_inner);
                alarm.rung = true;
                alarm.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        });
        ThreadSleep(alarm)
    }
}

impl Future for ThreadSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut alarm = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if alarm.rung {
            Poll::Ready(())
        } else {
            alarm.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

fn policy() -> retryscope::PolicyBuilder {
    Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_millis(20))
        .max_delay(Duration::from_secs(1))
        .jitter(Jitter::None)
}

#[test]
fn block_on_retries_with_a_thread_timer() {
    let timer = ThreadTimer::default();
    let mut calls = 0;
    let started = Instant::now();
    let retry = (|| {
        calls += 1;
        // Nothing here runs on tokio.
        assert!(tokio::runtime::Handle::try_current().is_err());
        let result = if calls < 3 { Err("busy") } else { Ok(calls) };
        async move { result }
    })
    .retry(policy().build().unwrap())
    .when(|e: &&str| *e == "busy")
    .with_sleeper(timer.clone());

    assert_eq!(futures_executor::block_on(retry), Ok(3));
    // Two waits, 20 ms and 40 ms, on the thread timer.
    assert_eq!(timer.started.load(Ordering::Relaxed), 2);
    assert!(started.elapsed() >= Duration::from_millis(60), "{:?}", started.elapsed());
}

#[test]
fn a_hanging_attempt_is_cut_off_by_the_thread_timer() {
    let timer = ThreadTimer::default();
    let started = Instant::now();
    let retry = (|| std::future::pending::<Result<(), &str>>())
        .retry(policy().max_attempts(2).attempt_timeout(Duration::from_millis(30)).build().unwrap())
        .retry_any_error()
        .with_sleeper(timer.clone());

    let error = futures_executor::block_on(retry).unwrap_err();
    assert_eq!(
        (error.reason(), error.attempts(), error.error_type()),
        (StopReason::AttemptsExhausted, 2, Some(ErrorType::TIMEOUT))
    );
    // Two attempt limits and one wait.
    assert_eq!(timer.started.load(Ordering::Relaxed), 3);
    assert!(started.elapsed() >= Duration::from_millis(80), "{:?}", started.elapsed());
}

#[test]
fn a_function_is_a_sleeper() {
    let waits = AtomicUsize::new(0);
    let retry = (|| async { Err::<(), _>("down") })
        .retry(policy().max_attempts(3).build().unwrap())
        .retry_any_error()
        .with_sleeper(|_delay: Duration| {
            waits.fetch_add(1, Ordering::Relaxed);
            std::future::ready(())
        });
    let error = futures_executor::block_on(retry).unwrap_err();
    assert_eq!((error.reason(), error.attempts()), (StopReason::AttemptsExhausted, 3));
    assert_eq!(waits.load(Ordering::Relaxed), 2);
}

/// The futures a retry and a hedged call become: their sizes are part of
/// what a call costs (each is moved into the caller's future), so a change
/// to the builders must not grow them. Measured on x86-64; `SIZES=1` prints
/// them.
#[test]
#[cfg(target_pointer_width = "64")]
fn the_futures_keep_their_size() {
    use retryscope::hedge::{HedgeDelay, HedgePolicy};
    use std::mem::size_of_val;

    let op = || async { Ok::<u32, std::io::Error>(7) };
    let retry = op.retry(policy().build().unwrap()).with_sleeper(ThreadTimer::default());
    let retry_when = op
        .retry(policy().build().unwrap())
        .when(|_: &std::io::Error| true)
        .with_sleeper(ThreadTimer::default());
    let hedge_policy =
        HedgePolicy::builder().delay(HedgeDelay::Fixed(Duration::from_millis(5))).build().unwrap();
    let hedge = op.hedge(hedge_policy.clone()).with_sleeper(ThreadTimer::default());
    let hedge_when =
        op.hedge(hedge_policy).when(|_: &std::io::Error| true).with_sleeper(ThreadTimer::default());
    let sizes =
        [size_of_val(&retry), size_of_val(&retry_when), size_of_val(&hedge), size_of_val(&hedge_when)];
    if std::env::var_os("SIZES").is_some() {
        println!(
            "RetryFuture {} / {} (when), HedgeFuture {} / {} (when)",
            sizes[0], sizes[1], sizes[2], sizes[3]
        );
    }
    assert_eq!(sizes, [536, 536, 1_048, 1_048]);
}
