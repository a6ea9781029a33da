//! An observer that is absent at run time costs no clock reads
//! (`Observer::is_timed`), one that is there still hears real durations, and
//! a concurrency limit still learns real round trips without one.

mod common;

use common::Recorder;
use retryscope::clock::{Clock, ManualClock};
use retryscope::dependency::Dependency;
use retryscope::guard::{Admission, Attempt, End, Guard};
use retryscope::observe::Observer;
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

/// The durations `recorder` heard: each attempt's, then the operation's.
fn durations(recorder: &Recorder) -> Vec<Duration> {
    let attempts = recorder.attempts().into_iter().map(|attempt| attempt.duration);
    attempts.chain([recorder.finish().duration]).collect()
}

#[test]
fn an_observer_that_is_there_hears_real_durations() {
    let recorder = Recorder::default();
    reads_with(Some(recorder.clone()));
    assert_eq!(durations(&recorder), [Duration::from_millis(30); 2]);
}

#[test]
fn an_absent_observer_costs_no_clock_read_of_its_own() {
    let there = reads_with(Some(Recorder::default()));
    let absent = reads_with(None::<Recorder>);
    // The attempt's end: read for an observer's durations, not otherwise
    // (the deadline needs only the start).
    assert_eq!(absent, there - 1, "{there} reads with the observer, {absent} without");
}

#[test]
fn a_pair_is_timed_when_either_of_its_observers_is_there() {
    let recorder = Recorder::default();
    let pair = (None::<Recorder>, Some(recorder.clone()));
    assert_eq!(reads_with(pair), reads_with(Some(Recorder::default())));
    assert_eq!(durations(&recorder), [Duration::from_millis(30); 2]);
    assert_eq!(reads_with((None::<Recorder>, None::<Recorder>)), reads_with(None::<Recorder>));
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
    .observe(None::<Recorder>)
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
