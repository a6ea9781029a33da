//! The lost-responses storm as a picture: operations by how many times the
//! server ran them, a group of bars per count, a bar per policy.

use crate::storm::lost_responses::report::LostRun;
use plotters::prelude::*;
use std::path::Path;

/// Bars for operations run 0, 1, 2, 3 and 4 or more times.
const BUCKETS: usize = 5;

/// Writes an SVG: per policy, how many operations ran 0, 1, 2, 3 and 4+ times.
pub(crate) fn write_svg(path: &Path, runs: &[LostRun]) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let histograms: Vec<Vec<u64>> = runs.iter().map(|r| r.histogram(BUCKETS)).collect();
    let top = histograms.iter().flatten().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption("Operations by times the server ran them, per client policy", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..BUCKETS as f64, 0.0..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(BUCKETS * 2 + 1)
        .x_label_formatter(&|x| {
            // A label under the middle of each group only.
            let bucket = (x - 0.5).round();
            match ((x - 0.5 - bucket).abs() < 1e-6, bucket as usize) {
                (true, n) if n + 1 == BUCKETS => format!("{n}+ times"),
                (true, n) => format!("{n} times"),
                (false, _) => String::new(),
            }
        })
        .y_desc("operations")
        .draw()
        .map_err(|e| e.to_string())?;
    let width = 0.8 / runs.len().max(1) as f64;
    for (i, (run, counts)) in runs.iter().zip(&histograms).enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let bars = counts.iter().enumerate().map(|(bucket, &n)| {
            let left = bucket as f64 + 0.1 + width * i as f64;
            Rectangle::new([(left, 0.0), (left + width * 0.9, n as f64)], color.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|e| e.to_string())?
            .label(run.policy)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
