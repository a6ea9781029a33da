//! The slow-tail storm as a picture: each policy's latency by percentile, up
//! to p99.9, and the load each put on the server over time.

use crate::storm::chart::{Series, panel, y_max};
use crate::storm::slow_tail::report::{TailRun, TailSummary};
use plotters::prelude::*;
use std::path::Path;

/// The highest percentile drawn: p99.9.
const NINES: f64 = 3.0;

/// Writes an SVG with two panels: latency against percentile (log scales, so
/// that the median and the tail both show), and the requests the server
/// received per second under each policy.
pub(crate) fn write_svg(path: &Path, runs: &[TailRun], rows: &[TailSummary]) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(420);
    latency_panel(&top, runs, rows)?;
    let load: Vec<Series<'_>> = runs
        .iter()
        .map(|r| Series {
            label: r.policy.into(),
            per_slice: r.server_received.iter().map(|&n| f64::from(n)).collect(),
            mark: None,
        })
        .collect();
    panel(&bottom, "Requests reaching the server (per second)", &load, y_max(&load), None)?;
    root.present().map_err(|e| e.to_string())
}

/// "Nines" of a quantile: 0.9 → 1, 0.99 → 2, 0.999 → 3.
fn nines(q: f64) -> f64 {
    -(1.0 - q).log10()
}

fn latency_panel(
    area: &crate::storm::chart::Area<'_>,
    runs: &[TailRun],
    rows: &[TailSummary],
) -> Result<(), String> {
    let top_ms = runs.iter().flat_map(|r| r.latencies_s.last()).fold(1.0_f64, |m, &s| m.max(s * 1_000.0));
    let mut chart = ChartBuilder::on(area)
        .caption("Call latency by percentile (ms, log scale)", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..NINES, (0.5_f64..top_ms * 2.0).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .x_labels(4)
        .x_label_formatter(&|x| format!("p{}", trim(100.0 * (1.0 - 10f64.powf(-x)))))
        .y_desc("ms")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, run) in runs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let n = run.latencies_s.len() as f64;
        let points = run.latencies_s.iter().enumerate().filter_map(|(k, &s)| {
            let q = (k as f64 + 1.0) / n;
            (nines(q) <= NINES).then(|| (nines(q), (s * 1_000.0).max(0.5)))
        });
        let row = rows.iter().find(|r| r.policy == run.policy);
        let label = row.map_or_else(
            || run.policy.to_owned(),
            |r| format!("{}: p99 {:.0} ms, extra load {:.1} %", r.policy, r.p99_ms, r.extra_load * 100.0),
        );
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// A percentile without trailing zeros: 50, 99, 99.9.
fn trim(p: f64) -> String {
    let s = format!("{p:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}
