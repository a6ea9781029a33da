//! The lost-responses storm as a picture: operations by how many times the
//! server ran them, a group of bars per count, a bar per policy.

use crate::storm::chart::{Bars, write_bars_svg};
use crate::storm::lost_responses::report::LostRun;
use std::path::Path;

/// Bars for operations run 0, 1, 2, 3 and 4 or more times.
const BUCKETS: usize = 5;

/// Writes an SVG: per policy, how many operations ran 0, 1, 2, 3 and 4+ times.
pub(crate) fn write_svg(path: &Path, runs: &[LostRun]) -> Result<(), String> {
    let groups = (0..BUCKETS)
        .map(|n| if n + 1 == BUCKETS { format!("{n}+ times") } else { format!("{n} times") })
        .collect();
    let bars = Bars {
        caption: "Operations by times the server ran them, per client policy",
        y_desc: "operations",
        groups,
        runs: runs.iter().map(|r| (r.policy, r.histogram(BUCKETS))).collect(),
    };
    write_bars_svg(path, &bars)
}
