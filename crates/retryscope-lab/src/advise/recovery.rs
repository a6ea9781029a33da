//! Time to recover, and the step-by-step timeline, of one replay.
//!
//! **Time to recover**, as every report states it: the recorded outage is the
//! longest run of timeline points whose attempt failure ratio is at or above
//! [`OUTAGE_RATIO`]; a point ends the step it measures, so a run of points
//! `a..b` is the replay's `[(a − 1) · step, (b − 1) · step)`. The pre-outage level is the share of calls answered among those
//! started in the [`PRE_WINDOW`] before the outage (fewer seconds where the
//! range starts later). The dependency has recovered at the first whole second
//! `s` at or after the outage's end from which the calls started in
//! `[s, s + one step)` are answered at no less than the pre-outage level less
//! [`TOLERANCE`] (1 point); the time to recover is `s − end`. Calls, not
//! attempts: a breaker still open after the outage, or a retry backlog, shows
//! as calls not answered.

use super::observe::{OUTAGE_RATIO, Observed};

/// How far before the outage the pre-outage level is measured.
pub const PRE_WINDOW: f64 = 300.0;
/// How close to the pre-outage level counts as recovered: 1 point.
pub const TOLERANCE: f64 = 0.01;

/// One side's recovery from the recorded outage.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Recovery {
    /// The outage's start, seconds from the range's start.
    pub outage_start: f64,
    /// Its end.
    pub outage_end: f64,
    /// The share of calls answered before it.
    pub pre_outage: f64,
    /// Seconds from its end until the share answered is back within 1 point of
    /// `pre_outage`; `None`: not back by the range's end.
    pub seconds: Option<f64>,
}

/// The longest run of outage steps, as `[start, end)` seconds.
pub fn outage(o: &Observed) -> Option<(f64, f64)> {
    let step = o.timeline_step.max(1.0);
    let (mut best, mut run_start) = (None::<(usize, usize)>, None::<usize>);
    for (i, &ratio) in o.timeline.iter().chain([0.0].iter()).enumerate() {
        match (ratio >= OUTAGE_RATIO, run_start) {
            (true, None) => run_start = Some(i),
            (false, Some(s)) => {
                if best.is_none_or(|(a, b)| b - a < i - s) {
                    best = Some((s, i));
                }
                run_start = None;
            }
            _ => {}
        }
    }
    best.map(|(a, b)| (a.saturating_sub(1) as f64 * step, (b - 1) as f64 * step))
}

/// The recovery of calls `(start s, answered, attempts sent)`, in start order;
/// `None` where no outage was recorded, no call came before it, or less than
/// a step of calls came after it (nothing to measure).
pub fn recovery(o: &Observed, calls: &[(f64, bool, u32)]) -> Option<Recovery> {
    let (start, end) = outage(o)?;
    let step = o.timeline_step.max(1.0);
    // Prefix sums of answered calls: any window's share in two lookups.
    let mut answered = Vec::with_capacity(calls.len() + 1);
    answered.push(0usize);
    for c in calls {
        answered.push(answered.last().copied().unwrap_or(0) + usize::from(c.1));
    }
    let at = |t: f64| calls.partition_point(|c| c.0 < t);
    let share = |from: f64, to: f64| {
        let (a, b) = (at(from), at(to));
        (b > a).then(|| (answered[b] - answered[a]) as f64 / (b - a) as f64)
    };
    let pre_outage = share((start - PRE_WINDOW).max(0.0), start)?;
    let last = calls.last().map_or(end, |c| c.0);
    if last + 1.0 < end + step {
        return None;
    }
    let mut s = end;
    let mut seconds = None;
    while s + step <= last + 1.0 {
        if share(s, s + step).is_some_and(|r| r >= pre_outage - TOLERANCE) {
            seconds = Some(s - end);
            break;
        }
        s += 1.0;
    }
    Some(Recovery { outage_start: start, outage_end: end, pre_outage, seconds })
}

/// The calls step by step: the share answered and the attempts per call.
pub fn timeline(calls: &[(f64, bool, u32)], step: f64) -> Vec<super::replay::Point> {
    let mut out: Vec<(usize, usize, u64)> = Vec::new();
    for &(t, ok, sent) in calls {
        let i = (t / step) as usize;
        if out.len() <= i {
            out.resize(i + 1, (0, 0, 0));
        }
        out[i].0 += 1;
        out[i].1 += usize::from(ok);
        out[i].2 += u64::from(sent);
    }
    out.iter()
        .enumerate()
        .filter(|(_, (n, _, _))| *n > 0)
        .map(|(i, &(n, ok, sent))| super::replay::Point {
            t: i as f64 * step,
            answered: ok as f64 / n as f64,
            amplification: sent as f64 / n as f64,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(timeline: Vec<f64>) -> Observed {
        Observed { timeline, timeline_step: 10.0, ..Observed::default() }
    }

    #[test]
    fn the_longest_outage_run_is_found_and_recovery_is_measured_from_its_end() {
        let o = observed(vec![0.0, 0.6, 0.0, 0.9, 1.0, 0.0, 0.0, 0.0]);
        // Points 3 and 4 measure the steps before them: [20 s, 40 s).
        assert_eq!(outage(&o), Some((20.0, 40.0)));
        // One call a second: answered before, failing in the outage and for 7 s after it.
        let calls: Vec<(f64, bool, u32)> =
            (0..80).map(|t| (f64::from(t), !(20..47).contains(&t) && t != 12, 1)).collect();
        let r = recovery(&o, &calls).expect("an outage");
        assert!((r.pre_outage - 19.0 / 20.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.seconds, Some(7.0), "{r:?}");
        // Never back: None.
        let never: Vec<(f64, bool, u32)> = (0..80).map(|t| (f64::from(t), t < 20, 1)).collect();
        let r = recovery(&o, &never).expect("an outage");
        assert_eq!(r.seconds, None);
        // No step of calls after the outage: nothing measured.
        assert!(recovery(&o, &calls[..45]).is_none());
        // No outage recorded: no recovery to measure.
        assert!(recovery(&observed(vec![0.1; 8]), &calls).is_none());
    }
}
