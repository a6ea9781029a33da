//! A pace shared by a fleet: see [`PaceShare`].

use super::signal::HoldSource;
use std::fmt;
use std::sync::Weak;
use std::time::Duration;

/// A pace shared by a fleet: what one replica's pacer learns reaches the
/// pacers of the others, through whatever store the fleet shares (Redis in
/// `retryscope-redis`; the engine knows only this trait).
///
/// A quota belongs to an API key, and every replica of a service spends the
/// same key: a `Retry-After` that one replica honours, the others would walk
/// into, and at each reset N replicas would each spend the whole quota. With
/// a [`PaceShare`] given to a pacer ([`Pacer::share_with`](crate::Pacer::share_with)):
///
/// - **gates are published**: a gate the pacer learns from a response (a
///   `Retry-After`, gRPC pushback, an exhausted quota) is handed to
///   [`publish_gate`](PaceShare::publish_gate), and a gate another replica
///   learned enters this pacer through [`SharedPacer::learn_gate`], held
///   calls reporting [`HoldSource::Fleet`];
/// - **a quota is spent by the fleet, not by each replica**: a reported quota
///   is divided by the number of replicas that share it
///   ([`replicas`](PaceShare::replicas), read from memory), so that each
///   spreads its part until the reset and together they spend the whole.
///
/// Nothing here is on the idle path: a pacer whose dependency said nothing
/// makes no call into the share (a response without pace hints returns before
/// the share is looked at, and a call to an idle pacer is one atomic load).
/// No method may block or wait on the network: a share does its I/O in the
/// background and answers from what it holds.
///
/// Every method is called on a call's path (when a response carried a pace
/// hint): it must return at once, doing its I/O in the background.
pub trait PaceShare: Send + Sync + fmt::Debug {
    /// This replica learned that no call to `dependency` may be sent before
    /// `wait` from now, for `source`'s reason: tell the others.
    fn publish_gate(&self, dependency: &str, wait: Duration, source: HoldSource);

    /// How many replicas spend `dependency`'s quota now, at least 1 (1 while
    /// the share never could tell; a share whose store became unreachable
    /// may answer the count it last read, as `retryscope-redis` does, since
    /// the replicas outlive an outage of the store).
    fn replicas(&self, dependency: &str) -> u32;

    /// A pacer for `dependency` joins: gates the other replicas publish (and
    /// one in force now, if the share keeps them) are to be given to it
    /// through `pacer`.
    fn attach(&self, dependency: &str, pacer: SharedPacer);
}

/// A pacer as a [`PaceShare`] holds it: weakly, so that the share never keeps
/// a dependency's pacer alive, and only able to take in what other replicas
/// learned.
#[derive(Clone)]
pub struct SharedPacer {
    pub(super) inner: Weak<super::pacer::Inner>,
}

impl SharedPacer {
    /// Another replica learned that no call may be sent before `wait` from
    /// now: the gate closes here too (the later gate stands, as for local
    /// ones), its holds reported as [`HoldSource::Fleet`]. Never published
    /// again. Returns `false` when the pacer is gone (the share may forget it).
    pub fn learn_gate(&self, wait: Duration) -> bool {
        let Some(inner) = self.inner.upgrade() else { return false };
        super::Pacer { inner }.learn_shared(wait);
        true
    }

    /// Whether the pacer is still in use.
    pub fn is_alive(&self) -> bool {
        self.inner.strong_count() > 0
    }
}

impl fmt::Debug for SharedPacer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedPacer").field("alive", &self.is_alive()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock, SystemClock};
    use crate::pace::{Admission, PaceSignal, Pacer, Quota};
    use crate::verdict::Hint;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// A fleet in memory: every published gate reaches every other attached
    /// pacer of the dependency, and every call into the share is counted.
    #[derive(Debug, Default)]
    struct Fleet {
        pacers: Mutex<Vec<(String, SharedPacer)>>,
        replicas: u32,
        calls: AtomicUsize,
    }

    impl PaceShare for Fleet {
        fn publish_gate(&self, dependency: &str, wait: Duration, _source: HoldSource) {
            self.calls.fetch_add(1, Ordering::Relaxed);
            for (name, pacer) in self.pacers.lock().expect("not poisoned").iter() {
                if name == dependency {
                    pacer.learn_gate(wait);
                }
            }
        }

        fn replicas(&self, _dependency: &str) -> u32 {
            self.calls.fetch_add(1, Ordering::Relaxed);
            self.replicas
        }

        fn attach(&self, dependency: &str, pacer: SharedPacer) {
            self.pacers.lock().expect("not poisoned").push((dependency.to_owned(), pacer));
        }
    }

    fn wait_of(admission: Admission) -> Duration {
        match admission {
            Admission::Now => Duration::ZERO,
            Admission::Hold { wait, .. } | Admission::Refused { wait, .. } => wait,
        }
    }

    #[test]
    fn a_gate_learned_by_one_replica_holds_the_others_as_the_fleets() {
        let fleet = Arc::new(Fleet { replicas: 2, ..Fleet::default() });
        let (a, b, other) =
            (Pacer::with_clock(SystemClock), Pacer::with_clock(SystemClock), Pacer::with_clock(SystemClock));
        assert!(a.share_with(fleet.clone(), "api:443"));
        assert!(b.share_with(fleet.clone(), "api:443"));
        assert!(other.share_with(fleet.clone(), "other:443"));
        assert!(!b.share_with(fleet.clone(), "api:443"), "shared once");
        a.learn(&PaceSignal {
            not_before: Some(Hint::retry_after(Duration::from_secs(10))),
            ..PaceSignal::none()
        });
        match b.admit(Duration::ZERO, None) {
            Admission::Hold { wait, source: HoldSource::Fleet } => {
                assert!(wait > Duration::from_secs(9) && wait <= Duration::from_secs(12), "{wait:?}")
            }
            held => panic!("{held:?}"),
        }
        // The replica that learned it holds as a `Retry-After`; another
        // dependency is not held.
        assert!(matches!(
            a.admit(Duration::ZERO, None),
            Admission::Hold { source: HoldSource::RetryAfter, .. }
        ));
        assert_eq!(other.admit(Duration::ZERO, None), Admission::Now);
    }

    #[test]
    fn a_cold_replica_releases_a_fleet_gates_held_calls_at_the_rate_they_arrived() {
        let fleet = Arc::new(Fleet { replicas: 2, ..Fleet::default() });
        let clock = ManualClock::new();
        let (a, b) = (Pacer::with_clock(clock.clone()), Pacer::with_clock(clock.clone()));
        a.share_with(fleet.clone(), "api");
        b.share_with(fleet.clone(), "api");
        // B never called before: A learns a 5 s gate, and B's callers go on
        // offering 80 calls a second through it.
        a.learn(&PaceSignal {
            not_before: Some(Hint::retry_after(Duration::from_secs(5))),
            ..PaceSignal::none()
        });
        let start = clock.now();
        let open = start + Duration::from_secs(5);
        let mut slots = Vec::new();
        for _ in 0..400 {
            match b.admit(Duration::ZERO, None) {
                Admission::Hold { wait, source: HoldSource::Fleet } => slots.push(clock.now() + wait),
                other => panic!("{other:?}"),
            }
            clock.advance(Duration::from_micros(12_500));
        }
        // Per 100 ms after the gate: ramping up, never above the 8 offered.
        let mut windows = vec![0_usize; 80];
        for slot in &slots {
            windows[(slot.duration_since(open).as_secs_f64() / 0.1) as usize] += 1;
        }
        assert!(windows[0] <= 3, "{windows:?}");
        assert!(windows.iter().all(|n| *n <= 8), "{windows:?}");
    }

    #[test]
    fn an_exhausted_quota_is_published_as_a_gate() {
        let fleet = Arc::new(Fleet { replicas: 1, ..Fleet::default() });
        let (a, b) = (Pacer::with_clock(SystemClock), Pacer::with_clock(SystemClock));
        a.share_with(fleet.clone(), "api");
        b.share_with(fleet.clone(), "api");
        a.learn(&PaceSignal { quota: Some(Quota::new(0, Duration::from_secs(5))), ..PaceSignal::none() });
        let wait = wait_of(b.admit(Duration::ZERO, None));
        assert!(wait > Duration::from_secs(4), "{wait:?}");
    }

    #[test]
    fn a_quota_is_divided_among_the_replicas() {
        let fleet = Arc::new(Fleet { replicas: 4, ..Fleet::default() });
        let a = Pacer::with_clock(SystemClock);
        a.share_with(fleet, "api");
        // 40 left in 10 s, among 4: 10 for this replica, 1 s apart.
        a.learn(&PaceSignal { quota: Some(Quota::new(40, Duration::from_secs(10))), ..PaceSignal::none() });
        let rate = a.allowed_rate().expect("a pace in force");
        assert!((rate - 1.0).abs() < 0.01, "{rate}");
        // 3 left among 4: none for this replica until the reset.
        a.learn(&PaceSignal { quota: Some(Quota::new(3, Duration::from_secs(2))), ..PaceSignal::none() });
        assert_eq!(a.allowed_rate(), Some(0.0));
    }

    #[test]
    fn a_dependency_that_says_nothing_makes_no_call_into_the_share() {
        let fleet = Arc::new(Fleet { replicas: 3, ..Fleet::default() });
        let a = Pacer::with_clock(SystemClock);
        a.share_with(fleet.clone(), "api");
        for _ in 0..100 {
            a.learn(&PaceSignal::none());
            a.learn(&PaceSignal { throttled: false, ..PaceSignal::none() });
            assert_eq!(a.admit(Duration::ZERO, None), Admission::Now);
        }
        assert_eq!(fleet.calls.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_gate_from_a_pacer_that_is_gone_is_refused_without_harm() {
        let fleet = Arc::new(Fleet { replicas: 1, ..Fleet::default() });
        let a = Pacer::with_clock(SystemClock);
        a.share_with(fleet.clone(), "api");
        let held = fleet.pacers.lock().expect("not poisoned")[0].1.clone();
        drop(a);
        assert!(!held.is_alive());
        assert!(!held.learn_gate(Duration::from_secs(1)));
    }
}
