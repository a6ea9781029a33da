//! The pacer's state on explicit time: a dependency-wide "not before" gate
//! and the spacing that makes a reported quota last until its reset.

use super::release::Release;
use super::signal::{HoldSource, PaceSignal, Quota, QuotaPolicy};
use crate::verdict::HINT_SPREAD_MAX;
use std::time::{Duration, Instant};

/// The longest wait, or quota window, a hint may set: a value beyond it is
/// taken for a broken header and ignored.
pub(crate) const MAX_PACE: Duration = Duration::from_secs(24 * 60 * 60);

/// Whether a pacer takes `wait` as a gate at all: a wait of nothing holds
/// nothing, and one past [`MAX_PACE`] is a broken header, not a plan. A
/// gate the pacer would not keep is not told to the fleet either.
pub(crate) fn is_gate(wait: Duration) -> bool {
    !wait.is_zero() && wait <= MAX_PACE
}

/// What the pacer answers a call that wants to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Send now.
    Now,
    /// Wait this long, then send: the slot is taken.
    Hold { wait: Duration, source: HoldSource },
    /// The wait would not fit in what the caller has left: nothing is taken.
    Refused { wait: Duration, source: HoldSource },
}

/// No call before `at`; the held calls come back in a [`Release`], ramping
/// up over a fifth of the wait (at most [`HINT_SPREAD_MAX`]), so that the
/// callers one server told "later" do not all return in the same millisecond.
#[derive(Debug, Clone, Copy)]
struct Gate {
    at: Instant,
    source: HoldSource,
    release: Release,
}

/// Sends at least `interval` apart: the quota a server reported, spread over
/// what is left of its window, which ends at `until`. Slots after `until` are
/// `beyond` apart: the quota policy's own rate (`RateLimit-Policy`'s `q` per
/// `w`) when the server gave one, else the rate of the report that opened the
/// window — never the rate of a window's last moments, when a few requests
/// left over a few milliseconds look like a licence to burst.
#[derive(Debug, Clone, Copy)]
struct Spacing {
    interval: Duration,
    until: Instant,
    /// What the last report said was left, to tell a report of the same
    /// window (never more left) from one of the next.
    remaining: u64,
    beyond: Duration,
}

/// How much later than the window's known end a report of the same window may
/// say it ends: the draft's `t` is whole seconds, which a server rounds up.
const RESET_ROUNDING: Duration = Duration::from_secs(1);

/// The longest a held call's slot may leave it for the attempt itself: it
/// keeps at least half of what is left of its deadline, up to this much, or
/// is refused at once. A slot that leaves a call no time to send would be
/// given out and lost (the call wakes past its deadline), and every caller
/// behind it would wait for nothing.
pub(crate) const MIN_SEND_TIME: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(crate) struct Schedule {
    gate: Option<Gate>,
    spacing: Option<Spacing>,
    /// The latest send slot given out while spacing applied.
    last_slot: Option<Instant>,
}

impl Schedule {
    /// Takes in what one response said at `now`. `offered`: the rate the
    /// dependency is offered calls at, in calls per second, when known: what
    /// held calls come back at when a gate opens.
    pub(crate) fn learn(&mut self, now: Instant, signal: &PaceSignal, offered: Option<f64>) {
        if let Some(hint) = signal.not_before {
            self.close_until(now, hint.delay, HoldSource::of(hint), offered);
        }
        if let Some(quota) = signal.quota {
            self.spread_quota(now, quota, offered);
        }
    }

    fn spread_quota(&mut self, now: Instant, quota: Quota, offered: Option<f64>) {
        let Quota { remaining, reset, policy } = quota;
        if !is_gate(reset) {
            return;
        }
        if remaining == 0 {
            self.close_until(now, reset, HoldSource::RateLimit, offered);
            return;
        }
        // More than 2^32 requests left is no limit worth pacing.
        let Ok(count) = u32::try_from(remaining) else { return };
        let mut until = now + reset;
        // A later report of the same window (no more left, ending within the
        // rounding of the end already known) keeps the earlier end: whole
        // seconds only ever round it up, and a window's end does not move.
        let same_window = self.spacing.filter(|current| {
            remaining <= current.remaining && until < current.until + RESET_ROUNDING && current.until > now
        });
        if let Some(current) = same_window {
            until = until.min(current.until);
        }
        let interval = until.saturating_duration_since(now) / count;
        let beyond = policy
            .and_then(QuotaPolicy::interval)
            .or(same_window.map(|current| current.beyond))
            .unwrap_or(reset / count);
        // The newest report is the server's current view: it replaces the last.
        self.spacing = Some(Spacing { interval, until, remaining, beyond });
    }

    /// A gate another replica of the fleet learned: no call before `wait`
    /// from `now`, its holds reported as [`HoldSource::Fleet`].
    pub(crate) fn close_shared(&mut self, now: Instant, wait: Duration, offered: Option<f64>) {
        self.close_until(now, wait, HoldSource::Fleet, offered);
    }

    fn close_until(&mut self, now: Instant, wait: Duration, source: HoldSource, offered: Option<f64>) {
        if !is_gate(wait) {
            return;
        }
        let at = now + wait;
        // Two reports: the later gate stands, whichever arrived last.
        if self.gate.is_some_and(|gate| gate.at >= at) {
            return;
        }
        let ramp = (wait / 5).min(HINT_SPREAD_MAX);
        // The slots an earlier gate gave out stay taken: the new release
        // starts after them, never beside them.
        let taken = self.gate.map_or(at, |gate| gate.release.free_from().max(at));
        // With no rate offered before the hold (a cold client), the calls
        // held during it are the offered load: they come back at their rate.
        let release = match offered.filter(|rate| rate.is_finite() && *rate > 0.0) {
            Some(rate) => Release::measured(rate, ramp, taken),
            None => Release::during_hold(now, ramp, taken),
        };
        self.gate = Some(Gate { at, source, release });
    }

    /// When a call that wants to send at `at` (now, or after its backoff
    /// from now), with `limit` left before its deadline at that point, may
    /// send: how long after `at`.
    ///
    /// Only `now` expires what is in force: a retry that asks for a slot
    /// after its backoff must not lift, for everyone, a gate that still
    /// stands now.
    pub(crate) fn admit(&mut self, now: Instant, at: Instant, limit: Option<Duration>) -> Admission {
        self.expire(now);
        let (mut earliest, mut source) = (at, HoldSource::RateLimit);
        let mut released = false;
        if let Some(gate) = self.gate.as_mut().filter(|gate| at < gate.at) {
            earliest = gate.release.offer(gate.at, now);
            source = gate.source;
            released = true;
        }
        if let (Some(spacing), Some(last)) = (self.spacing, self.last_slot) {
            let gap = if last < spacing.until { spacing.interval } else { spacing.beyond };
            let next = last + gap;
            if next > earliest {
                (earliest, source) = (next, HoldSource::RateLimit);
            }
        }
        let wait = earliest.saturating_duration_since(at);
        if !wait.is_zero()
            && let Some(limit) = limit
            && wait + (limit / 2).min(MIN_SEND_TIME) > limit
        {
            return Admission::Refused { wait, source };
        }
        if self.spacing.is_some() {
            self.last_slot = Some(earliest);
        }
        // The release slot is taken only now that the call is not refused;
        // the next one follows the slot the call really took (spacing may
        // have put it later).
        if released && let Some(gate) = self.gate.as_mut() {
            gate.release.take(gate.at, earliest);
        }
        if wait.is_zero() { Admission::Now } else { Admission::Hold { wait, source } }
    }

    fn expire(&mut self, now: Instant) {
        if self.gate.is_some_and(|gate| now >= gate.at) {
            self.gate = None;
        }
        if let Some(spacing) = self.spacing {
            let last = self.last_slot.map_or(spacing.until, |slot| slot.max(spacing.until));
            if now >= last {
                (self.spacing, self.last_slot) = (None, None);
            }
        }
    }

    /// Whether nothing is in force: every call may send at once.
    pub(crate) fn is_idle(&self) -> bool {
        self.gate.is_none() && self.spacing.is_none()
    }

    /// The rate in force at `now`, in requests per second: zero behind a gate,
    /// the quota's rate while spacing applies, `None` when nothing applies.
    pub(crate) fn allowed_rate(&mut self, now: Instant) -> Option<f64> {
        self.expire(now);
        if self.gate.is_some() {
            return Some(0.0);
        }
        self.spacing.map(|spacing| 1.0 / spacing.interval.as_secs_f64().max(f64::MIN_POSITIVE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::Hint;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn wait_of(admission: Admission) -> Duration {
        match admission {
            Admission::Now => Duration::ZERO,
            Admission::Hold { wait, .. } | Admission::Refused { wait, .. } => wait,
        }
    }

    #[test]
    fn a_retry_after_gate_holds_every_call_and_spreads_their_return() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        schedule.learn(
            start,
            &PaceSignal { not_before: Some(Hint::retry_after(secs(2.0))), ..PaceSignal::none() },
            None,
        );
        let waits: Vec<_> = (0..20).map(|_| wait_of(schedule.admit(start, start, None))).collect();
        assert!(waits.iter().all(|w| *w >= secs(2.0) && *w <= secs(2.4)), "{waits:?}");
        let (min, max) = (waits.iter().min().copied(), waits.iter().max().copied());
        assert!(max.zip(min).is_some_and(|(max, min)| max - min > secs(0.2)), "not spread: {waits:?}");
        assert_eq!(schedule.admit(start + secs(2.0), start + secs(2.0), None), Admission::Now);
        assert!(schedule.is_idle());
    }

    /// The slots of 400 calls arriving 12.5 ms apart from `start` (80 a
    /// second) behind a gate that opens at 5 s: the first at the gate, in
    /// order, never two in the same instant.
    fn held_every_12_5_ms(schedule: &mut Schedule, start: Instant) -> Vec<Instant> {
        let slots: Vec<Instant> = (0..400)
            .map(|n| {
                let now = start + secs(0.0125 * f64::from(n));
                now + wait_of(schedule.admit(now, now, None))
            })
            .collect();
        assert_eq!(slots[0], start + secs(5.0));
        assert!(slots.windows(2).all(|pair| pair[1] > pair[0]));
        slots
    }

    /// How many of `slots` fall in each 100 ms from `open`.
    fn per_100_ms(slots: &[Instant], open: Instant) -> [usize; 80] {
        let mut windows = [0_usize; 80];
        for slot in slots {
            windows[(slot.duration_since(open).as_secs_f64() / 0.1) as usize] += 1;
        }
        windows
    }

    #[test]
    fn held_calls_come_back_at_the_offered_rate_ramping_up_to_it() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        // 80 calls a second were offered; a 5 s gate; the calls go on
        // arriving 12.5 ms apart throughout it, each held.
        let signal = PaceSignal { not_before: Some(Hint::retry_after(secs(5.0))), ..PaceSignal::none() };
        schedule.learn(start, &signal, Some(80.0));
        let slots = held_every_12_5_ms(&mut schedule, start);
        let open = start + secs(5.0);
        // Per 100 ms after the gate: a quarter of the rate at first, ramping
        // over the first second (a fifth of the wait) to at most the 8
        // offered (6.4: four fifths of it).
        let windows = per_100_ms(&slots, open);
        assert!(windows[0] <= 3, "{windows:?}");
        assert!(windows.iter().all(|n| *n <= 8), "{windows:?}");
        let (first, later) = (windows[..3].iter().sum::<usize>(), windows[10..13].iter().sum::<usize>());
        assert!(first * 2 <= later, "not a ramp: {windows:?}");
        assert!(windows[12..60].iter().all(|n| *n >= 6), "{windows:?}");
        // The first call was held the 5 s; the last, 5 s later, waits for the
        // backlog released at four fifths of its rate: a quarter more, and
        // the ramp's shortfall (0.4 s). None waits anywhere near twice.
        let longest = (0..400).map(|n| slots[n] - (start + secs(0.0125 * n as f64))).max();
        assert!(longest.is_some_and(|wait| wait < secs(5.0 * 1.25 + 0.5)), "{longest:?}");
    }

    #[test]
    fn a_cold_clients_held_calls_come_back_at_the_rate_they_arrived_during_the_hold() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        // No rate before the hold: the first call was told to wait 5 s, and
        // 80 calls a second go on arriving through it, each held.
        schedule.learn(
            start,
            &PaceSignal { not_before: Some(Hint::retry_after(secs(5.0))), ..PaceSignal::none() },
            None,
        );
        let slots = held_every_12_5_ms(&mut schedule, start);
        let open = start + secs(5.0);
        let windows = per_100_ms(&slots, open);
        // As the warm client's: a quarter of the rate at first, never above
        // the 8 offered, drained in about a quarter more than the hold.
        assert!(windows[0] <= 3, "{windows:?}");
        assert!(windows.iter().all(|n| *n <= 8), "{windows:?}");
        assert!(windows[12..60].iter().all(|n| *n >= 6), "{windows:?}");
        assert!(slots[399] < open + secs(5.0 * 1.25 + 0.5), "{:?}", slots[399] - open);
    }

    #[test]
    fn a_held_call_whose_release_slot_is_past_its_deadline_is_refused_and_takes_no_slot() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        schedule.learn(
            start,
            &PaceSignal { not_before: Some(Hint::retry_after(secs(1.0))), ..PaceSignal::none() },
            Some(10.0),
        );
        // The first slot at 1 s; the next 500 ms on (a quarter of four
        // fifths of 10/s).
        assert_eq!(wait_of(schedule.admit(start, start, Some(secs(3.0)))), secs(1.0));
        let refused = schedule.admit(start, start, Some(secs(1.5)));
        assert!(matches!(refused, Admission::Refused { source: HoldSource::RetryAfter, .. }), "{refused:?}");
        let held = wait_of(schedule.admit(start, start, Some(secs(10.0))));
        assert_eq!(held, secs(1.5));
    }

    #[test]
    fn a_quota_is_spread_until_its_reset_and_its_rate_goes_on() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        schedule.learn(
            start,
            &PaceSignal { quota: Some(Quota::new(2, secs(3.0))), ..PaceSignal::none() },
            None,
        );
        let waits: Vec<_> = (0..4).map(|_| wait_of(schedule.admit(start, start, None))).collect();
        assert_eq!(waits, [secs(0.0), secs(1.5), secs(3.0), secs(4.5)]);
        assert_eq!(schedule.allowed_rate(start), Some(1.0 / 1.5));
    }

    #[test]
    fn a_wait_past_the_deadline_is_refused_and_takes_no_slot() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        schedule.learn(
            start,
            &PaceSignal { quota: Some(Quota::new(0, secs(2.0))), ..PaceSignal::none() },
            None,
        );
        let refused = schedule.admit(start, start, Some(secs(1.0)));
        assert!(
            matches!(refused, Admission::Refused { wait, source: HoldSource::RateLimit }
                if wait >= secs(2.0) && wait <= secs(2.4)),
            "{refused:?}"
        );
        assert_eq!(schedule.allowed_rate(start), Some(0.0));
        assert_eq!(schedule.admit(start + secs(2.0), start + secs(2.0), Some(secs(1.0))), Admission::Now);
    }

    #[test]
    fn a_later_report_of_the_same_window_keeps_its_end_and_spreads_what_is_left() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        // The window opens: 200 left in its 1 s.
        schedule.learn(
            start,
            &PaceSignal { quota: Some(Quota::new(200, secs(1.0))), ..PaceSignal::none() },
            None,
        );
        // Half a second on: 100 left, and `t` is still 1, rounded up.
        let mid = start + secs(0.5);
        schedule.learn(
            mid,
            &PaceSignal { quota: Some(Quota::new(100, secs(1.0))), ..PaceSignal::none() },
            None,
        );
        assert_eq!(schedule.admit(mid, mid, None), Admission::Now);
        // 100 over the 0.5 s really left: 5 ms apart, not 10.
        assert_eq!(wait_of(schedule.admit(mid, mid, None)), secs(0.005));
        // The next window: more left than before, a later end.
        let next = start + secs(1.0);
        schedule.learn(
            next,
            &PaceSignal { quota: Some(Quota::new(199, secs(1.0))), ..PaceSignal::none() },
            None,
        );
        let rate = schedule.allowed_rate(next).expect("a pace in force");
        assert!((rate - 199.0).abs() < 0.01, "{rate}");
    }

    #[test]
    fn slots_beyond_the_window_keep_to_the_policy_rate() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        let policy = QuotaPolicy::new(10, secs(1.0));
        // The window's last moment: 2 left in 10 ms, as a vendor's precise
        // reset says it: 5 ms apart inside the window, 100 ms beyond it.
        let quota = Quota::new(2, secs(0.01)).with_policy(policy);
        schedule.learn(start, &PaceSignal { quota: Some(quota), ..PaceSignal::none() }, None);
        let waits: Vec<_> = (0..4).map(|_| wait_of(schedule.admit(start, start, None))).collect();
        assert_eq!(waits, [secs(0.0), secs(0.005), secs(0.01), secs(0.11)]);
    }

    #[test]
    fn a_slot_must_leave_the_attempt_half_its_time_up_to_a_second() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        schedule.learn(
            start,
            &PaceSignal { quota: Some(Quota::new(1, secs(0.6))), ..PaceSignal::none() },
            None,
        );
        assert_eq!(schedule.admit(start, start, Some(secs(1.0))), Admission::Now);
        // The next slot, 0.6 s on, would leave 0.4 s of a 1 s deadline.
        assert!(matches!(schedule.admit(start, start, Some(secs(1.0))), Admission::Refused { .. }));
        // With 1.6 s it leaves 1 s: held.
        assert_eq!(
            schedule.admit(start, start, Some(secs(1.6))),
            Admission::Hold { wait: secs(0.6), source: HoldSource::RateLimit }
        );
        // A long deadline keeps 1 s, not half: 10 s of wait (and up to 2 s of
        // spread) fit in 13.5 s.
        schedule.learn(
            start,
            &PaceSignal { not_before: Some(Hint::rate_limit(secs(10.0))), ..PaceSignal::none() },
            None,
        );
        assert!(matches!(schedule.admit(start, start, Some(secs(13.5))), Admission::Hold { .. }));
    }

    #[test]
    fn implausible_and_empty_hints_change_nothing() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        for signal in [
            PaceSignal::none(),
            PaceSignal { throttled: true, ..PaceSignal::none() },
            PaceSignal { not_before: Some(Hint::retry_after(Duration::ZERO)), ..PaceSignal::none() },
            PaceSignal { not_before: Some(Hint::retry_after(MAX_PACE + secs(1.0))), ..PaceSignal::none() },
            PaceSignal { quota: Some(Quota::new(5, Duration::ZERO)), ..PaceSignal::none() },
            PaceSignal { quota: Some(Quota::new(0, MAX_PACE * 2)), ..PaceSignal::none() },
            PaceSignal { quota: Some(Quota::new(u64::MAX, secs(1.0))), ..PaceSignal::none() },
        ] {
            schedule.learn(start, &signal, Some(80.0));
            assert!(schedule.is_idle(), "{signal:?}");
            assert_eq!(schedule.admit(start, start, None), Admission::Now);
        }
    }

    #[test]
    fn a_slot_asked_for_later_does_not_lift_the_gate_now() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        schedule.learn(
            start,
            &PaceSignal { not_before: Some(Hint::grpc_pushback(secs(2.0))), ..PaceSignal::none() },
            None,
        );
        // The call that was pushed back asks for its retry's slot, 2 s on: free.
        assert_eq!(schedule.admit(start, start + secs(2.0), None), Admission::Now);
        // Everyone else is still held now.
        assert!(wait_of(schedule.admit(start, start, None)) >= secs(2.0));
        assert!(!schedule.is_idle());
    }

    #[test]
    fn the_later_gate_stands() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        schedule.learn(
            start,
            &PaceSignal { not_before: Some(Hint::retry_after(secs(10.0))), ..PaceSignal::none() },
            None,
        );
        schedule.learn(
            start,
            &PaceSignal { not_before: Some(Hint::retry_after(secs(1.0))), ..PaceSignal::none() },
            None,
        );
        assert!(wait_of(schedule.admit(start, start, None)) >= secs(10.0));
    }

    #[test]
    fn the_stricter_quota_is_the_one_with_fewer_requests_per_second() {
        let (two_in_three, ten_in_sixty) = (Quota::new(2, secs(3.0)), Quota::new(10, secs(60.0)));
        assert!(ten_in_sixty.is_stricter_than(&two_in_three));
        assert!(!two_in_three.is_stricter_than(&ten_in_sixty));
        assert!(Quota::new(0, secs(1.0)).is_stricter_than(&ten_in_sixty));
        assert!(Quota::new(0, secs(5.0)).is_stricter_than(&Quota::new(0, secs(1.0))));
        // Found by the fuzzer: absurd numbers compare without overflowing.
        let absurd = Quota::new(u64::MAX, Duration::MAX);
        assert!(!absurd.is_stricter_than(&Quota::new(u64::MAX - 1, Duration::MAX)));
        assert!(ten_in_sixty.is_stricter_than(&Quota::new(u64::MAX, secs(1.0))));
    }
}
