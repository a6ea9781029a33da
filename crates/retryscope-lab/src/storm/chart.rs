//! The storm as a picture: server load and retries over time, one line per policy.

use crate::storm::report::{PolicyRun, Summary, Timeline, recovery_text};
use crate::storm::server::SLICE;
use plotters::prelude::*;
use std::path::Path;

/// The drawing area of one panel.
pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// One line of a panel: counts per slice.
pub(crate) struct Series<'a> {
    pub(crate) label: std::borrow::Cow<'a, str>,
    pub(crate) per_slice: Vec<f64>,
    /// A moment to mark with a dashed vertical line of the series' colour
    /// (the policy's recovery), in seconds from the start.
    pub(crate) mark: Option<f64>,
}

/// Writes an SVG with two panels: requests the server received per second, and
/// retries started per second, with the outage shaded and each policy's
/// recovery (from `rows`) marked and in the legend.
pub(crate) fn write_svg(
    path: &Path,
    runs: &[PolicyRun],
    rows: &[Summary],
    timeline: Timeline,
) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(360);
    let recovery = |policy: &str| rows.iter().find(|r| r.policy == policy).and_then(|r| r.recovery_s);
    let load: Vec<Series<'_>> = runs
        .iter()
        .map(|r| Series {
            label: format!("{} (recovery: {})", r.policy, recovery_text(recovery(r.policy))).into(),
            per_slice: r.server_received.iter().map(|&n| f64::from(n)).collect(),
            mark: recovery(r.policy).map(|s| timeline.outage_end.as_secs_f64() + s),
        })
        .collect();
    let retries: Vec<Series<'_>> = runs
        .iter()
        .map(|r| Series {
            label: r.policy.into(),
            per_slice: r.retries.iter().map(|&n| n as f64).collect(),
            mark: None,
        })
        .collect();
    panel(&top, "Requests reaching the server (per second)", &load, y_max(&load), Some(timeline))?;
    panel(&bottom, "Retries started by the clients (per second)", &retries, y_max(&retries), Some(timeline))?;
    root.present().map_err(|e| e.to_string())
}

fn per_second(per_slice: f64) -> f64 {
    per_slice / SLICE.as_secs_f64()
}

/// The top of a y axis showing every series, per second.
pub(crate) fn y_max(series: &[Series<'_>]) -> f64 {
    series.iter().flat_map(|s| &s.per_slice).map(|&v| per_second(v)).fold(1.0, f64::max) * 1.1
}

/// Draws `series` per second over time, up to `y_max`, with the outage (if
/// any) shaded; the n-th series of every panel has the same colour.
pub(crate) fn panel(
    area: &Area<'_>,
    title: &str,
    series: &[Series<'_>],
    y_max: f64,
    outage: Option<Timeline>,
) -> Result<(), String> {
    let slices = series.iter().map(|s| s.per_slice.len()).max().unwrap_or(0);
    let x_max = slices as f64 * SLICE.as_secs_f64();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| e.to_string())?;
    chart.configure_mesh().x_desc("seconds").draw().map_err(|e| e.to_string())?;
    if let Some(timeline) = outage {
        let outage = [(timeline.outage_start.as_secs_f64(), 0.0), (timeline.outage_end.as_secs_f64(), y_max)];
        chart
            .draw_series([Rectangle::new(outage, RGBColor(255, 228, 225).filled())])
            .map_err(|e| e.to_string())?;
    }
    for (i, line) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points =
            line.per_slice.iter().enumerate().map(|(s, &v)| (s as f64 * SLICE.as_secs_f64(), per_second(v)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(line.label.as_ref())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        if let Some(at) = line.mark {
            // Dashes, so that marks on top of each other stay visible.
            let dashes = (0..20).map(|k| {
                let (from, to) = (y_max * f64::from(k) / 20.0, y_max * (f64::from(k) + 0.5) / 20.0);
                PathElement::new([(at, from), (at, to)], color.stroke_width(2))
            });
            chart.draw_series(dashes).map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// The bars of a grouped bar chart: what each run counted in each group.
pub(crate) struct Bars<'a> {
    /// The chart's title and its y axis.
    pub(crate) caption: &'a str,
    pub(crate) y_desc: &'a str,
    /// A label under each group.
    pub(crate) groups: Vec<String>,
    /// Per run, its legend and its count in each group.
    pub(crate) runs: Vec<(&'a str, Vec<u64>)>,
}

/// Writes `bars` as an SVG: a group of bars per group, a bar (and a colour)
/// per run — what the jobs and lost-responses storms draw.
pub(crate) fn write_bars_svg(path: &Path, bars: &Bars<'_>) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let groups = bars.groups.len();
    let top = bars.runs.iter().flat_map(|(_, counts)| counts).copied().max().unwrap_or(1).max(1) as f64 * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(bars.caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..groups as f64, 0.0..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups * 2 + 1)
        .x_label_formatter(&|x| {
            // A label under the middle of each group only.
            let group = (x - 0.5).round();
            match ((x - 0.5 - group).abs() < 1e-6, bars.groups.get(group as usize)) {
                (true, Some(name)) => name.clone(),
                _ => String::new(),
            }
        })
        .y_desc(bars.y_desc)
        .draw()
        .map_err(|e| e.to_string())?;
    let width = 0.8 / bars.runs.len().max(1) as f64;
    for (i, (label, counts)) in bars.runs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let drawn = counts.iter().enumerate().map(|(group, &n)| {
            let left = group as f64 + 0.1 + width * i as f64;
            Rectangle::new([(left, 0.0), (left + width * 0.9, n as f64)], color.filled())
        });
        chart
            .draw_series(drawn)
            .map_err(|e| e.to_string())?
            .label(*label)
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
