//! The jobs storm as a picture: per worker, jobs completed, jobs
//! dead-lettered and calls the dependency refused while down.

use crate::storm::jobs::report::JobsRun;
use plotters::prelude::*;
use std::path::Path;

const GROUPS: [&str; 3] = ["completed", "dead-lettered", "failed calls at the dependency"];

/// Writes the SVG.
pub(crate) fn write_svg(path: &Path, runs: &[JobsRun]) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let values: Vec<[u64; 3]> = runs.iter().map(|r| [r.succeeded, r.dead_lettered, r.failed_calls]).collect();
    let top = values.iter().flatten().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption("Jobs through a dependency outage, per worker", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..GROUPS.len() as f64, 0.0..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(GROUPS.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let group = (x - 0.5).round();
            match ((x - 0.5 - group).abs() < 1e-6, GROUPS.get(group as usize)) {
                (true, Some(name)) => (*name).to_owned(),
                _ => String::new(),
            }
        })
        .y_desc("jobs / calls")
        .draw()
        .map_err(|e| e.to_string())?;
    let width = 0.8 / runs.len().max(1) as f64;
    for (i, (run, counts)) in runs.iter().zip(&values).enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let bars = counts.iter().enumerate().map(|(group, &n)| {
            let left = group as f64 + 0.1 + width * i as f64;
            Rectangle::new([(left, 0.0), (left + width * 0.9, n as f64)], color.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|e| e.to_string())?
            .label(run.worker)
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
