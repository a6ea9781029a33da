//! The rate-limited storm as a picture: what the gateway answered over time,
//! one line per policy, the quota marked.

use crate::storm::chart::{Series, panel, y_max};
use crate::storm::rate_limited::report::{RateRun, RateSummary};
use crate::storm::server::SLICE;
use plotters::prelude::*;
use std::path::Path;

/// Writes an SVG with two panels: the 200s the gateway gave per second against
/// the quota, and the 429s, per policy (their figures from `rows` in the legend).
pub(crate) fn write_svg(
    path: &Path,
    runs: &[RateRun],
    rows: &[RateSummary],
    quota_per_s: f64,
) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(360);
    let row = |policy: &str| rows.iter().find(|r| r.policy == policy);
    let slices = runs.iter().map(|r| r.server_served.len()).max().unwrap_or(0);
    let mut served: Vec<Series<'_>> = runs
        .iter()
        .map(|r| Series {
            label: match row(r.policy) {
                Some(s) => format!("{} ({:.0} % of the quota)", r.policy, s.goodput_share * 100.0).into(),
                None => r.policy.into(),
            },
            per_slice: r.server_served.iter().map(|&n| f64::from(n)).collect(),
            mark: None,
        })
        .collect();
    served.push(Series {
        label: format!("quota ({quota_per_s:.0}/s)").into(),
        per_slice: vec![quota_per_s * SLICE.as_secs_f64(); slices],
        mark: None,
    });
    let refused: Vec<Series<'_>> = runs
        .iter()
        .map(|r| Series {
            label: match row(r.policy) {
                Some(s) => format!("{} ({:.1} per 1,000 attempts)", r.policy, s.per_1000_429).into(),
                None => r.policy.into(),
            },
            per_slice: r
                .server_received
                .iter()
                .zip(&r.server_served)
                .map(|(&got, &ok)| f64::from(got.saturating_sub(ok)))
                .collect(),
            mark: None,
        })
        .collect();
    panel(&top, "Answered 200 by the gateway (per second)", &served, y_max(&served), None)?;
    panel(&bottom, "Answered 429 by the gateway (per second)", &refused, y_max(&refused), None)?;
    root.present().map_err(|e| e.to_string())
}
