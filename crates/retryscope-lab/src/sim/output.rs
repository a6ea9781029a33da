//! Printing results: aligned tables, JSON arrays and SVG line charts.

use super::{Format, SimError};
use plotters::prelude::*;
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// What an experiment prints: its table, the same rows as JSON, and notes for
/// stderr (e.g. a safety bound that was hit).
#[derive(Debug, Clone)]
pub struct Report {
    /// Which of the two renderings goes to stdout.
    pub format: Format,
    /// The human-readable rendering.
    pub table: String,
    /// The JSON array of row objects.
    pub json: String,
    /// Warnings, printed to stderr whatever the format.
    pub notes: Vec<String>,
}

impl Report {
    /// A report of `rows` rendered both ways.
    ///
    /// # Errors
    ///
    /// [`SimError`] if the rows cannot be serialised (they always can: plain
    /// numbers and names).
    pub fn new<T: Serialize>(format: Format, table: String, rows: &[T]) -> Result<Self, SimError> {
        Ok(Self { format, table, json: to_json(rows)?, notes: Vec::new() })
    }
}

/// `rows` as a compact JSON array.
///
/// # Errors
///
/// [`SimError`] if serialisation fails.
pub fn to_json<T: Serialize>(rows: &[T]) -> Result<String, SimError> {
    serde_json::to_string(rows).map_err(|e| SimError::caused("cannot serialise results", e))
}

/// Prints the report: the table or the JSON to stdout, notes to stderr.
///
/// # Errors
///
/// [`SimError`] if stdout cannot be written (e.g. a closed pipe).
pub fn print(report: &Report) -> Result<(), SimError> {
    for note in &report.notes {
        eprintln!("note: {note}");
    }
    let body = match report.format {
        Format::Table => &report.table,
        Format::Json => &report.json,
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{body}").map_err(|e| SimError::caused("cannot write results", e))
}

/// A plain text table: a header row and right-aligned cells.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Self { header: header.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new() }
    }

    /// Appends a row of already formatted cells.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, columns separated by two spaces, no trailing newline.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> =
                cells.iter().take(columns).zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
            padded.join("  ")
        };
        let mut lines = vec![line(&self.header)];
        lines.push(widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        lines.extend(self.rows.iter().map(|r| line(r)));
        lines.join("\n")
    }
}

/// One line on a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// The points, in x order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// One line per strategy name: the points `(x(row), y(row))` of the rows
    /// whose `strategy` is that name, in row order.
    pub fn per_strategy<'a, R>(
        names: impl IntoIterator<Item = &'a str>,
        rows: &[R],
        strategy: impl Fn(&R) -> &str,
        point: impl Fn(&R) -> (f64, f64),
    ) -> Vec<Series> {
        names
            .into_iter()
            .map(|name| Series {
                name: name.to_owned(),
                points: rows.iter().filter(|r| strategy(r) == name).map(&point).collect(),
            })
            .collect()
    }
}

/// One chart panel: axes, labels and lines.
#[derive(Debug, Clone)]
pub struct Panel {
    /// The caption above the panel.
    pub title: String,
    /// The x axis label.
    pub x_label: String,
    /// The y axis label.
    pub y_label: String,
    /// The lines drawn.
    pub series: Vec<Series>,
}

/// Colours for successive series, distinguishable in print.
const PALETTE: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

/// Writes `panels` side by side into one SVG file.
///
/// # Errors
///
/// [`SimError`] if the file cannot be written.
pub fn write_svg(path: &Path, panels: &[Panel]) -> Result<(), SimError> {
    let width = 640 * u32::try_from(panels.len().max(1)).unwrap_or(1);
    let root = SVGBackend::new(path, (width, 480)).into_drawing_area();
    let fail = |e| SimError::caused(format!("cannot write {}", path.display()), e);
    root.fill(&WHITE).map_err(fail)?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (panel, area) in panels.iter().zip(&areas) {
        draw_panel(area, panel).map_err(fail)?;
    }
    root.present().map_err(fail)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult = Result<(), DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>>;

fn draw_panel(area: &Area<'_>, panel: &Panel) -> DrawResult {
    let (x_range, y_range) = bounds(panel);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range, y_range)?;
    chart.configure_mesh().x_desc(&panel.x_label).y_desc(&panel.y_label).draw()?;
    for (i, series) in panel.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(series.points.iter().copied(), color.stroke_width(2)))?
            .label(&series.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()
}

/// The smallest ranges holding every point, starting the y axis at zero.
fn bounds(panel: &Panel) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let points = panel.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0_f64);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 >= x1 || !x0.is_finite() {
        // No points, or a single x: give the axis some width.
        (x0, x1) = if x0.is_finite() { (x0 - 1.0, x0 + 1.0) } else { (0.0, 1.0) };
    }
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    (x0..x1, 0.0..y1)
}
