//! The storm as a picture: server load and retries over time, one line per policy.

use crate::storm::report::{PolicyRun, Timeline};
use crate::storm::server::SLICE;
use plotters::prelude::*;
use std::path::Path;

/// Writes an SVG with two panels: requests the server received per second, and
/// retries started per second, with the outage shaded.
pub(crate) fn write_svg(path: &Path, runs: &[PolicyRun], timeline: Timeline) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(360);
    let per_second = |v: f64| v / SLICE.as_secs_f64();
    let load: Vec<Vec<f64>> =
        runs.iter().map(|r| r.server_received.iter().map(|&n| per_second(f64::from(n))).collect()).collect();
    let retries: Vec<Vec<f64>> =
        runs.iter().map(|r| r.retries.iter().map(|&n| per_second(n as f64)).collect()).collect();
    panel(&top, "Requests reaching the server (per second)", runs, &load, timeline)?;
    panel(&bottom, "Retries started by the clients (per second)", runs, &retries, timeline)?;
    root.present().map_err(|e| e.to_string())
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    runs: &[PolicyRun],
    series: &[Vec<f64>],
    timeline: Timeline,
) -> Result<(), String> {
    let slices = series.iter().map(Vec::len).max().unwrap_or(0);
    let x_max = slices as f64 * SLICE.as_secs_f64();
    let y_max = series.iter().flatten().copied().fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| e.to_string())?;
    chart.configure_mesh().x_desc("seconds").draw().map_err(|e| e.to_string())?;
    let outage = [(timeline.outage_start.as_secs_f64(), 0.0), (timeline.outage_end.as_secs_f64(), y_max)];
    chart
        .draw_series([Rectangle::new(outage, RGBColor(255, 228, 225).filled())])
        .map_err(|e| e.to_string())?;
    for (i, (run, values)) in runs.iter().zip(series).enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points = values.iter().enumerate().map(|(s, &v)| (s as f64 * SLICE.as_secs_f64(), v));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(run.policy)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
