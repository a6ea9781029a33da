//! An observer that is absent at run time costs no clock reads
//! (`Observer::is_timed`), one that is there still hears real durations, and
//! a concurrency limit still learns real round trips without one.

use retryscope::clock::{Clock, ManualClock};
use retryscope::dependency::Dependency;
use retryscope::guard::{Admission, Attempt, End, Guard};
use retryscope::observe::{
    AttemptEnd, AttemptStart, Finish, Observer, OperationInfo, OperationObserver, Wait,
};
use retryscope::overload::{Aimd, ConcurrencyLimiter};
use retryscope::{Policy, Retryable};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A manual clock that counts how often it is read.
#[derive(Default)]
struct Counted {
    clock: ManualClock,
    reads: AtomicU32,
}

impl Clock for Counted {
    fn now(&self) -> Instant {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.clock.now()
    }
}

/// Records the durations it is told: each attempt's, then the operation's.
#[derive(Clone, Default)]
struct Durations(Arc<Mutex<Vec<Duration>>>);

impl Durations {
    fn heard(&self) -> Vec<Duration> {
        self.0.lock().expect("not poisoned").clone()
    }
}

impl Observer for Durations {
    type Operation = Durations;

    fn start(&self, _: &OperationInfo<'_>) -> Durations {
        self.clone()
    }
}

impl OperationObserver for Durations {
    type Attempt = ();

    fn attempt_started(&mut self, _: &AttemptStart) {}

    fn attempt_finished(&mut self, (): (), attempt: &AttemptEnd) {
        self.0.lock().expect("not poisoned").push(attempt.duration);
    }

    fn waiting(&mut self, _: &Wait) {}

    fn finished(self, finish: &Finish) {
        self.0.lock().expect("not poisoned").push(finish.duration);
    }
}

/// A call under the interactive preset (it has a deadline, so the clock is
/// read for it) whose one attempt takes 30 ms and succeeds, observed by
/// `observer`: how often the clock was read.
fn reads_with<O: Observer>(observer: O) -> u32 {
    let clock = Counted::default();
    let result = (|| {
        clock.clock.advance(Duration::from_millis(30));
        Ok::<_, &str>(())
    })
    .retry(Policy::interactive())
    .retry_any_error()
    .observe(observer)
    .call_with(&clock, |_| {});
    assert_eq!(result, Ok(()));
    clock.reads.load(Ordering::Relaxed)
}

#[test]
fn an_observer_that_is_there_hears_real_durations() {
    let durations = Durations::default();
    reads_with(Some(durations.clone()));
    assert_eq!(durations.heard(), [Duration::from_millis(30); 2]);
}

#[test]
fn an_absent_observer_costs_no_clock_read_of_its_own() {
    let there = reads_with(Some(Durations::default()));
    let absent = reads_with(None::<Durations>);
    // The attempt's end: read for an observer's durations, not otherwise
    // (the deadline needs only the start).
    assert_eq!(absent, there - 1, "{there} reads with the observer, {absent} without");
}

#[test]
fn a_pair_is_timed_when_either_of_its_observers_is_there() {
    let durations = Durations::default();
    let pair = (None::<Durations>, Some(durations.clone()));
    assert_eq!(reads_with(pair), reads_with(Some(Durations::default())));
    assert_eq!(durations.heard(), [Duration::from_millis(30); 2]);
    assert_eq!(reads_with((None::<Durations>, None::<Durations>)), reads_with(None::<Durations>));
}

/// Hears each attempt's latency at its settlement (`Attempt::latency`).
#[derive(Clone, Default)]
struct Latencies(Arc<Mutex<Vec<Duration>>>);

impl Guard for Latencies {
    type Permit = ();

    fn admit(&self, _: Attempt) -> Admission<()> {
        Admission::Go(())
    }

    fn settle(&self, attempt: Attempt, (): (), _: End) {
        self.0.lock().expect("not poisoned").push(attempt.latency());
    }
}

/// The latencies a dependency's guards hear of one call (its one attempt
/// takes 30 ms and succeeds) that no observer hears, with a concurrency
/// limit on the dependency or without.
fn latencies_heard(limited: bool) -> Vec<Duration> {
    let heard = Latencies::default();
    let mut dependency = Dependency::new("test").with_guard(heard.clone());
    if limited {
        dependency = dependency.with_concurrency_limit(ConcurrencyLimiter::new(Aimd::default()));
    }
    let clock = ManualClock::new();
    let result = (|| {
        clock.advance(Duration::from_millis(30));
        Ok::<_, &str>(())
    })
    .retry(Policy::interactive())
    .retry_any_error()
    .observe(None::<Durations>)
    .dependency(&dependency)
    .call_with(&clock, |_| {});
    assert_eq!(result, Ok(()));
    heard.0.lock().expect("not poisoned").clone()
}

#[test]
fn a_concurrency_limit_learns_real_round_trips_with_no_observer_there() {
    assert_eq!(latencies_heard(true), [Duration::from_millis(30)]);
    // Without a limit nothing reads the success's end: its latency is zero,
    // as `Attempt::latency` says.
    assert_eq!(latencies_heard(false), [Duration::ZERO]);
}
