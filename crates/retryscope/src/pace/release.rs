//! How the calls held behind a gate come back when it opens: at no more than
//! the rate they were offered at, ramping up to it, never as a spike.
//!
//! The rate is the one measured before the hold when the dependency had
//! traffic ([`Release::measured`]). A client with no traffic before the hold —
//! its first call was told to wait, a service started during an incident, a
//! client made per request — has no such rate; its held calls are the offered
//! load, and come back at the rate they arrived during the hold
//! ([`Release::during_hold`]).

use super::schedule::MAX_PACE;
use std::time::{Duration, Instant};

/// The share of the offered rate the release starts at.
const RAMP_START: f64 = 0.25;

/// The share of the offered rate the release ramps up to: under all of it,
/// so that the estimate's error and the jitter of the new calls arriving
/// beside the released ones (a busy runtime wakes timers in bunches) keep the
/// two within twice the offered rate in every 100 ms. The backlog then drains
/// in a quarter more than the hold's length.
const RELEASE_SHARE: f64 = 0.8;

/// The shortest span arrivals during a hold are counted over to tell their
/// rate, as [`OfferedRate`](super::offered::OfferedRate) does: a herd of calls
/// held in the same few milliseconds is a burst, not a rate of thousands a
/// second.
const MIN_SPAN: Duration = Duration::from_millis(100);

/// How held calls come back after a gate: one after another, starting at a
/// quarter of the release rate and ramping up to it over `ramp` (TCP's slow
/// start, linear), the release rate being [`RELEASE_SHARE`] of the offered
/// one: a server that asked for less gets no spike when the gate opens, only
/// the calls it would have had, late. New calls after the gate go at once, as
/// they would have: the two together stay within twice the offered rate.
#[derive(Debug, Clone, Copy)]
pub(super) struct Release {
    ramp: Duration,
    rate: Rate,
}

#[derive(Debug, Clone, Copy)]
enum Rate {
    /// The rate offered before the hold, known when the gate closed (calls
    /// per second, already [`RELEASE_SHARE`] of it); `next` is the next free
    /// slot, each slot's successor one gap of the ramped rate at it later.
    Measured { rate: f64, next: Instant },
    /// No rate before the hold: the held calls' own. `arrived` calls asked for
    /// a slot since the gate closed at `since`, `released` of them took one
    /// (a refused call arrived, but comes back never), the last at `last`;
    /// none before `floor`. `gap`: one call's worth of the rate they arrived
    /// at, as last measured.
    DuringHold {
        since: Instant,
        floor: Instant,
        arrived: u32,
        released: u32,
        last: Option<Instant>,
        gap: Duration,
    },
}

impl Release {
    /// Held calls come back at `offered` calls per second (the rate measured
    /// before the hold), the first at `floor`.
    pub(super) fn measured(offered: f64, ramp: Duration, floor: Instant) -> Self {
        Self { ramp, rate: Rate::Measured { rate: offered * RELEASE_SHARE, next: floor } }
    }

    /// Held calls come back at the rate they arrive from `since` (when the
    /// gate closed) on, the first at `floor`.
    pub(super) fn during_hold(since: Instant, ramp: Duration, floor: Instant) -> Self {
        Self {
            ramp,
            rate: Rate::DuringHold { since, floor, arrived: 0, released: 0, last: None, gap: Duration::ZERO },
        }
    }

    /// The slot of a call held at `now` behind the gate that opens at `gate`.
    /// Counts the call as arrived; the slot is taken only by
    /// [`take`](Self::take), once the call is not refused.
    pub(super) fn offer(&mut self, gate: Instant, now: Instant) -> Instant {
        match &mut self.rate {
            Rate::Measured { next, .. } => *next,
            Rate::DuringHold { since, floor, arrived, released, last, gap } => {
                *arrived = arrived.saturating_add(1);
                let span = now.saturating_duration_since(*since).max(MIN_SPAN).as_secs_f64();
                let offered = f64::from(*arrived) / span;
                // Where the ramped release at its share of `offered` has let
                // `released` calls go: a slot per call, whatever the arrivals'
                // spacing (a sparse client's held calls are not pushed back by
                // the ramp's first, slowest gap).
                let full = f64::from(*released) / (offered * RELEASE_SHARE);
                let due = gate + secs(ramped(full, self.ramp.as_secs_f64()));
                // Never closer than the calls arrived on average: a burst in
                // mid-hold raises the rate, and would otherwise be due at
                // once, beside the slots already given out.
                *gap = secs(1.0 / offered);
                let after_last = last.map_or(*floor, |last| last + *gap);
                due.max(after_last).max(*floor)
            }
        }
    }

    /// The call given `slot` (by [`offer`](Self::offer), or later, when
    /// spacing put it later) took it: the next slot follows it.
    pub(super) fn take(&mut self, gate: Instant, slot: Instant) {
        let ramp = self.ramp;
        match &mut self.rate {
            Rate::Measured { rate, next } => {
                let into = slot.saturating_duration_since(gate).as_secs_f64();
                let share = ramp_share(into, ramp.as_secs_f64());
                *next = slot + secs(1.0 / (*rate * share).max(f64::MIN_POSITIVE));
            }
            Rate::DuringHold { released, last, .. } => {
                *released = released.saturating_add(1);
                *last = Some(slot);
            }
        }
    }

    /// The earliest slot this release has not given out: where the release
    /// of a later gate replacing this one starts, never beside these slots.
    pub(super) fn free_from(&self) -> Instant {
        match self.rate {
            Rate::Measured { next, .. } => next,
            Rate::DuringHold { floor, last, gap, .. } => last.map_or(floor, |last| (last + gap).max(floor)),
        }
    }
}

/// The share of the release rate in force `into` seconds after the gate
/// opened, for a ramp of `ramp` seconds.
fn ramp_share(into: f64, ramp: f64) -> f64 {
    if ramp > 0.0 { (RAMP_START + (1.0 - RAMP_START) * into / ramp).min(1.0) } else { 1.0 }
}

/// How many seconds after the gate opens the ramped release has let go
/// `full` seconds' worth of calls at its full rate: the inverse of the ramp's
/// integral `W(t) = RAMP_START·t + (1 − RAMP_START)·t²/(2·ramp)` (up to
/// `ramp`, then `t − (1 − RAMP_START)·ramp/2`).
fn ramped(full: f64, ramp: f64) -> f64 {
    let lost = (1.0 - RAMP_START) * ramp / 2.0;
    if ramp <= 0.0 || full >= ramp - lost {
        return full + lost;
    }
    let a = (1.0 - RAMP_START) / (2.0 * ramp);
    (-RAMP_START + (RAMP_START * RAMP_START + 4.0 * a * full).sqrt()) / (2.0 * a)
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(MAX_PACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per 100 ms after `open`, how many of `slots` fall in each window.
    fn per_window(slots: &[Instant], open: Instant) -> Vec<usize> {
        let mut windows = Vec::new();
        for slot in slots {
            let window = (slot.duration_since(open).as_secs_f64() / 0.1) as usize;
            if windows.len() <= window {
                windows.resize(window + 1, 0);
            }
            windows[window] += 1;
        }
        windows
    }

    #[test]
    fn the_ramp_integral_is_inverted() {
        let ramp = 1.0;
        for t in [0.0, 0.1, 0.5, 0.99, 1.0, 2.5] {
            let full = if t <= ramp {
                RAMP_START * t + (1.0 - RAMP_START) * t * t / (2.0 * ramp)
            } else {
                t - (1.0 - RAMP_START) * ramp / 2.0
            };
            assert!((ramped(full, ramp) - t).abs() < 1e-9, "{t}: {}", ramped(full, ramp));
        }
        assert_eq!(ramped(0.3, 0.0), 0.3);
    }

    #[test]
    fn calls_held_at_a_steady_rate_come_back_at_four_fifths_of_it_ramping_up() {
        // A 5 s gate, 80 calls a second held throughout it.
        let since = Instant::now();
        let open = since + secs(5.0);
        let mut release = Release::during_hold(since, secs(1.0), open);
        let slots: Vec<Instant> = (1..=400)
            .map(|n| {
                let slot = release.offer(open, since + secs(0.0125 * f64::from(n)));
                release.take(open, slot);
                slot
            })
            .collect();
        assert_eq!(slots[0], open);
        assert!(slots.windows(2).all(|pair| pair[1] > pair[0]), "out of order");
        let windows = per_window(&slots, open);
        // A quarter of the rate at first, never above the 8 offered, and the
        // 6.4 of four fifths once ramped up.
        assert!(windows[0] <= 3, "{windows:?}");
        assert!(windows.iter().all(|n| *n <= 8), "{windows:?}");
        let (first, later) = (windows[..3].iter().sum::<usize>(), windows[10..13].iter().sum::<usize>());
        assert!(first * 2 <= later, "not a ramp: {windows:?}");
        assert!(windows[12..60].iter().all(|n| *n >= 6), "{windows:?}");
        // None waits much beyond the hold and a quarter of it.
        let longest = (1..=400).map(|n| slots[n - 1] - (since + secs(0.0125 * n as f64))).max();
        assert!(longest.is_some_and(|wait| wait < secs(5.0 * 1.25 + 0.5)), "{longest:?}");
    }

    #[test]
    fn a_sparse_clients_held_calls_are_not_pushed_back_by_the_ramp() {
        // One call every 2 s through a 10 s gate, with a 2 s ramp: each comes
        // back about when the rate it arrived at allows, not the ramp's first
        // gap (a quarter of the rate: 10 s) later.
        let since = Instant::now();
        let open = since + secs(10.0);
        let mut release = Release::during_hold(since, secs(2.0), open);
        for n in 0..5 {
            let now = since + secs(2.0 * f64::from(n));
            let slot = release.offer(open, now);
            release.take(open, slot);
            let wait = slot - now;
            assert!(wait >= secs(10.0) && wait < secs(11.0), "call {n}: {wait:?}");
        }
    }

    #[test]
    fn a_herd_held_at_once_is_spread_not_sent_together() {
        let since = Instant::now();
        let open = since + secs(2.0);
        let mut release = Release::during_hold(since, secs(0.4), open);
        let slots: Vec<Instant> = (0..20)
            .map(|_| {
                let slot = release.offer(open, since);
                release.take(open, slot);
                slot
            })
            .collect();
        assert!(slots.windows(2).all(|pair| pair[1] > pair[0]), "sent together: {slots:?}");
        let last = slots[19] - open;
        assert!(last > secs(0.2) && last <= secs(0.4), "{last:?}");
    }

    #[test]
    fn a_refused_call_counts_as_arrived_but_takes_no_slot() {
        let since = Instant::now();
        let open = since + secs(1.0);
        let mut release = Release::during_hold(since, Duration::ZERO, open);
        // Refused: offered, never taken; the next call gets the same slot.
        assert_eq!(release.offer(open, since + secs(0.5)), open);
        assert_eq!(release.offer(open, since + secs(0.5)), open);
        release.take(open, open);
        // A later gate's release starts one gap of their rate (4/s) on.
        assert_eq!(release.free_from(), open + secs(0.25));
        // Three arrived over 0.5 s (6/s, 4.8/s released), one slot taken:
        // the next is one call's worth of 4.8/s on (no ramp here).
        let gap = release.offer(open, since + secs(0.5)) - open;
        assert!(gap.abs_diff(secs(1.0 / 4.8)) < Duration::from_micros(1), "{gap:?}");
    }
}
