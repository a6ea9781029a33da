//! How the async front end waits: a runtime's timer behind a small trait.

use crate::clock::{Clock, SystemClock};
use std::future::Future;
use std::time::{Duration, Instant};

/// A runtime's timer: what an awaited retry waits with, between attempts and
/// for an attempt's time limit.
///
/// With the `tokio` feature (on by default), awaiting a retry uses
/// [`TokioSleeper`]. Other runtimes plug in with
/// [`Retry::with_sleeper`](crate::Retry::with_sleeper): implement this trait, or
/// pass a function from a [`Duration`] to a future, as most runtimes' `sleep`
/// already is.
///
/// A runtime whose timer is a type implements the trait:
///
/// ```
/// use retryscope::Sleeper;
/// use std::time::Duration;
///
/// /// A stand-in for a runtime's timer future.
/// struct Timer(Duration);
/// impl std::future::Future for Timer {
///     type Output = ();
///     fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<()> {
///         std::task::Poll::Ready(()) // a real timer registers the waker and fires later
///     }
/// }
///
/// struct MyRuntime;
/// impl Sleeper for MyRuntime {
///     type Sleep = Timer;
///     fn sleep(&self, delay: Duration) -> Timer {
///         Timer(delay)
///     }
/// }
/// ```
pub trait Sleeper {
    /// The future of one wait.
    type Sleep: Future<Output = ()>;

    /// A future that completes once `delay` has passed.
    fn sleep(&self, delay: Duration) -> Self::Sleep;

    /// A future that completes at `deadline` on [`clock`](Self::clock). The
    /// default sleeps for what is left of it.
    fn sleep_until(&self, deadline: Instant) -> Self::Sleep {
        self.sleep(deadline.saturating_duration_since(self.clock().now()))
    }

    /// The clock deadlines and attempt durations are measured on; the
    /// operating system's monotonic clock by default. It must be the clock the
    /// timer runs on (tokio's paused clock, say).
    fn clock(&self) -> &'static dyn Clock {
        &SystemClock
    }
}

impl<F, Fut> Sleeper for F
where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = ()>,
{
    type Sleep = Fut;

    fn sleep(&self, delay: Duration) -> Fut {
        self(delay)
    }
}

/// tokio's timer and clock, so `tokio::time::pause()` drives every wait. What
/// `.await` on a retry uses.
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

#[cfg(feature = "tokio")]
impl Sleeper for TokioSleeper {
    type Sleep = tokio::time::Sleep;

    fn sleep(&self, delay: Duration) -> Self::Sleep {
        tokio::time::sleep(delay)
    }

    fn sleep_until(&self, deadline: Instant) -> Self::Sleep {
        tokio::time::sleep_until(tokio::time::Instant::from_std(deadline))
    }

    fn clock(&self) -> &'static dyn Clock {
        &crate::clock::TokioClock
    }
}
