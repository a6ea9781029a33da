//! The pacer under load, as the rate-limited storm found it: once its
//! schedule is full up to the callers' deadlines, a slot that leaves a call no
//! time to send must be refused at once, not given out — a call held to
//! within the timer's resolution of its deadline wakes past it, is stopped
//! without being sent, and the slot it took is lost to every other caller.
//! (In the first `retryscope storm --rate-limited`, about a fifth of the
//! pacer's slots went that way.) Paused clock: tokio's timers wake on whole
//! milliseconds, as they do in real time.

use retryscope::dependency::Dependency;
use retryscope::pace::{PaceSignal, Quota};
use retryscope::{Pacer, Policy, Retryable, StopReason};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn a_call_whose_pacer_slot_leaves_no_time_before_its_deadline_is_refused_at_once_not_held_and_dropped()
{
    let deadline = Duration::from_secs(1);
    let policy = Policy::builder().max_attempts(1).deadline(deadline).build().expect("a valid policy");
    let pacer = Pacer::new();
    let dependency = Dependency::new("test").with_pacer(pacer.clone());
    // A quota whose spacing puts the next slot 0.4 ms before the deadline of a
    // call that asks now: it fits, by less than the timer's resolution.
    pacer.learn(&PaceSignal {
        quota: Some(Quota { remaining: 1, reset: Duration::from_micros(999_600), policy: None }),
        ..PaceSignal::none()
    });
    let sent = AtomicU32::new(0);
    let call = || async {
        sent.fetch_add(1, Ordering::Relaxed);
        Ok::<_, std::io::Error>(())
    };
    // The first call takes the current slot.
    call.retry(policy).dependency(&dependency).await.expect("the first call is sent at once");
    assert_eq!(sent.load(Ordering::Relaxed), 1);

    let start = tokio::time::Instant::now();
    let second = call.retry(policy).dependency(&dependency).await;
    let (took, sends) = (start.elapsed(), sent.load(Ordering::Relaxed));
    // Either it is sent in its slot, or it is refused at once as rate limited:
    // never held for its whole deadline and then dropped unsent.
    match second {
        Ok(()) => assert_eq!(sends, 2, "a success is a send"),
        Err(error) => {
            assert!(
                matches!(error.reason(), StopReason::RateLimited { .. }) && took < Duration::from_millis(10),
                "held {took:?}, sent {} more time(s), then stopped with {:?}: the slot was taken and not used",
                sends - 1,
                error.reason()
            );
        }
    }
}

/// The bound itself, at its edge (`Pacer`'s limits; the guide's "Pacer ×
/// attempt timeout"): a call is held only if the hold leaves it
/// `min(half of what remains, 1 s)` to send, else refused at once with
/// `RateLimited`, unsent. A quota of one request per `hold` makes the second
/// call's wait exactly `hold`; each case takes a fresh pacer. With a 10 s
/// deadline the 1 s applies (a 9 s hold leaves exactly it), with a 1 s
/// deadline the half (a 500 ms hold leaves exactly it); a nanosecond more
/// is refused.
#[tokio::test(start_paused = true)]
async fn a_hold_that_leaves_exactly_the_send_time_is_held_and_a_nanosecond_longer_is_refused_at_once() {
    const NS: Duration = Duration::from_nanos(1);
    let cases = [
        (Duration::from_secs(10), Duration::from_secs(9)),
        (Duration::from_secs(1), Duration::from_millis(500)),
    ];
    for (deadline, hold) in cases {
        for (wait, held) in [(hold, true), (hold + NS, false)] {
            let policy =
                Policy::builder().max_attempts(1).deadline(deadline).build().expect("a valid policy");
            let pacer = Pacer::new();
            let dependency = Dependency::new("test").with_pacer(pacer.clone());
            pacer.learn(&PaceSignal {
                quota: Some(Quota { remaining: 1, reset: wait, policy: None }),
                ..PaceSignal::none()
            });
            let sent = AtomicU32::new(0);
            let call = || async {
                sent.fetch_add(1, Ordering::Relaxed);
                Ok::<_, std::io::Error>(())
            };
            call.retry(policy).dependency(&dependency).await.expect("the first call takes the free slot");

            let start = tokio::time::Instant::now();
            let second = call.retry(policy).dependency(&dependency).await;
            let (took, sends) = (start.elapsed(), sent.load(Ordering::Relaxed));
            let case = format!("deadline {deadline:?}, hold {wait:?}");
            if held {
                assert_eq!(second.map_err(|e| e.reason()), Ok(()), "{case}: held, then sent");
                assert_eq!((took, sends), (wait, 2), "{case}: sent when its slot came");
            } else {
                let reason = second.expect_err("refused").reason();
                assert!(
                    matches!(reason, StopReason::RateLimited { wait: w, limit, .. } if w == wait && limit == deadline),
                    "{case}: {reason:?}"
                );
                assert_eq!((took, sends), (Duration::ZERO, 1), "{case}: refused at once, unsent");
            }
        }
    }
}

/// A share that records the gates a pacer publishes.
#[derive(Debug, Default)]
struct Published(std::sync::Mutex<Vec<Duration>>);

impl retryscope::pace::PaceShare for Published {
    fn publish_gate(&self, _: &str, wait: Duration, _: retryscope::pace::HoldSource) {
        self.0.lock().expect("not poisoned").push(wait);
    }
    fn replicas(&self, _: &str) -> u32 {
        1
    }
    fn attach(&self, _: &str, _: retryscope::pace::SharedPacer) {}
}

/// A gate the pacer would not keep — a wait of nothing, or past a day (a
/// broken header) — is not told to the fleet: the fleet's store keeps the
/// latest gate, and one absurd `Retry-After` would stand over every real
/// gate until it ended. A real one is told.
#[test]
fn a_gate_the_pacer_would_not_keep_is_not_published_to_the_fleet() {
    let pacer = Pacer::new();
    let published = std::sync::Arc::new(Published::default());
    assert!(pacer.share_with(published.clone(), "pay"));
    let day = Duration::from_secs(24 * 60 * 60);
    for wait in [Duration::ZERO, day + Duration::from_secs(1), Duration::from_secs(1_000_000_000_000)] {
        pacer.learn(&PaceSignal {
            not_before: Some(retryscope::Hint::retry_after(wait)),
            ..PaceSignal::none()
        });
        pacer.learn(&PaceSignal {
            quota: Some(Quota { remaining: 0, reset: wait, policy: None }),
            ..PaceSignal::none()
        });
    }
    assert_eq!(*published.0.lock().expect("not poisoned"), [], "nothing published");
    pacer.learn(&PaceSignal {
        not_before: Some(retryscope::Hint::retry_after(Duration::from_secs(2))),
        ..PaceSignal::none()
    });
    assert_eq!(*published.0.lock().expect("not poisoned"), [Duration::from_secs(2)]);
}
