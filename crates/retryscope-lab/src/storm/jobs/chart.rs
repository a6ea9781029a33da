//! The jobs storm as a picture: per worker, jobs completed, jobs
//! dead-lettered and calls the dependency refused while down.

use crate::storm::chart::{Bars, write_bars_svg};
use crate::storm::jobs::report::JobsRun;
use std::path::Path;

const GROUPS: [&str; 3] = ["completed", "dead-lettered", "failed calls at the dependency"];

/// Writes the SVG.
pub(crate) fn write_svg(path: &Path, runs: &[JobsRun]) -> Result<(), String> {
    let bars = Bars {
        caption: "Jobs through a dependency outage, per worker",
        y_desc: "jobs / calls",
        groups: GROUPS.map(str::to_owned).to_vec(),
        runs: runs.iter().map(|r| (r.worker, vec![r.succeeded, r.dead_lettered, r.failed_calls])).collect(),
    };
    write_bars_svg(path, &bars)
}
