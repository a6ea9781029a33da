//! The layered storm as a picture: the load on every service over time, one
//! panel per policy, on one scale so the panels compare at a glance.

use crate::storm::chart::{Series, panel, y_max};
use crate::storm::layers::report::LayeredRun;
use crate::storm::report::Timeline;
use plotters::prelude::*;
use std::path::Path;

const PANEL_HEIGHT: u32 = 300;

/// Writes an SVG with one panel per policy: requests each service received per
/// second, with the outage of the bottom shaded.
pub(crate) fn write_svg(path: &Path, runs: &[LayeredRun], timeline: Timeline) -> Result<(), String> {
    let panels = u32::try_from(runs.len()).unwrap_or(1).max(1);
    let root = SVGBackend::new(path, (960, PANEL_HEIGHT * panels)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let series: Vec<Vec<Series<'_>>> = runs
        .iter()
        .map(|run| {
            run.services
                .iter()
                .map(|s| Series {
                    label: s.service.as_str().into(),
                    per_slice: s.received.iter().map(|&n| f64::from(n)).collect(),
                    mark: None,
                })
                .collect()
        })
        .collect();
    let top = series.iter().map(|s| y_max(s)).fold(1.0, f64::max);
    let areas = root.split_evenly((runs.len().max(1), 1));
    for ((run, lines), area) in runs.iter().zip(&series).zip(&areas) {
        let title = format!("{}: requests each service received (per second)", run.policy);
        panel(area, &title, lines, top, Some(timeline))?;
    }
    root.present().map_err(|e| e.to_string())
}
