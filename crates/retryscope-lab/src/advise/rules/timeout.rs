//! The `attempt_timeout` rule, and the attempts it lets fit in the deadline
//! (their rows in the table of [`super`]).

use super::*;

/// The attempt timeout, and the attempts it lets fit in the deadline.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fit {
    pub(super) timeout: Duration,
    pub(super) attempts: u32,
    /// p99.9 of successful first attempts (p99 where unknown), whole ms: never cut.
    pub(super) floor: Duration,
    /// `TIMEOUT_HEADROOM` × the floor.
    wanted: Duration,
    /// The deadline divided by the attempts wanted.
    share: Duration,
    /// Which quantile the floor is.
    quantile: &'static str,
}

impl Fit {
    pub(super) fn reason(&self, deadline_from: &str) -> String {
        let cut = if self.floor > self.share {
            format!(
                " (the {} is over the deadline itself: calls that slow are cut by the deadline, whatever this says)",
                self.quantile
            )
        } else {
            String::new()
        };
        format!(
            "{TIMEOUT_HEADROOM} × {} {} = {}, never below the {} itself, never above {deadline_from} / {} attempts = \
             {}: no healthy attempt is cut, and every attempt fits in the deadline. Derived from the caller's \
             deadline, not from the slowest observed case (the source articles); the trade: an attempt that never \
             answers is waited on up to {} instead of 2 × p99, which a retry budget and the deadline bound{cut}",
            self.quantile,
            ms(self.floor),
            ms(self.wanted),
            self.quantile,
            self.attempts,
            ms(self.share),
            ms(self.timeout)
        )
    }
}

/// The attempt timeout rule: `TIMEOUT_HEADROOM` × p99.9 of successful first
/// attempts (p99 where p99.9 is unknown), never below p99.9, never above
/// `deadline / attempts`; where p99.9 does not fit `attempts` times in the
/// deadline, fewer attempts (at least one), so that no healthy call is cut.
pub(super) fn attempt_timeout(lat: &Quantiles, deadline: Duration, attempts: u32) -> Fit {
    let (floor_s, quantile) =
        if lat.p999 > 0.0 && lat.p999 >= lat.p99 { (lat.p999, "p99.9") } else { (lat.p99, "p99 (no p99.9)") };
    let floor = whole_ms(floor_s);
    let wanted = whole_ms(TIMEOUT_HEADROOM * floor_s);
    let deadline_ms = deadline.as_millis().max(1);
    let share_of = |n: u32| Duration::from_millis((deadline_ms / u128::from(n.max(1))) as u64);
    // As many attempts as fit, each at least the floor: at most those wanted, at least one.
    let fits = (deadline_ms / floor.as_millis().max(1)).min(u128::from(attempts)) as u32;
    let attempts = fits.max(1);
    let share = share_of(attempts);
    // Never below the floor unless the floor is over the whole deadline,
    // where the deadline cuts those calls whatever the timeout says.
    let timeout = wanted.min(share);
    Fit { timeout, attempts, floor, wanted, share, quantile }
}
