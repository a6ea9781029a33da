//! The collapse experiment's report: the per-second table, the mean of each
//! phase (before, during and after the spike), and the goodput chart.

use super::{CollapseArgs, CollapseConfig, CollapseModel, CollapseRow, CollapseStrategy, simulate};
use crate::sim::SimError;
use crate::sim::output::{Panel, Report, Series, Table, write_svg};

/// Mean goodput, offered load and retries per second over whole seconds
/// `from..to` of one strategy's rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// Offered requests per second.
    pub offered: f64,
    /// Goodput per second.
    pub goodput: f64,
    /// Retries per second.
    pub retries: f64,
}

/// The mean of `rows` (one strategy) over seconds `from..to`.
pub fn phase(rows: &[CollapseRow], from: u32, to: u32) -> Phase {
    let selected: Vec<&CollapseRow> = rows.iter().filter(|r| (from..to).contains(&r.t)).collect();
    let n = selected.len().max(1) as f64;
    let mean = |f: fn(&CollapseRow) -> u64| selected.iter().map(|r| f(r) as f64).sum::<f64>() / n;
    Phase { offered: mean(|r| r.offered), goodput: mean(|r| r.goodput), retries: mean(|r| r.retries) }
}

/// Runs the experiments `args` asks for and renders them.
///
/// # Errors
///
/// [`SimError`] for settings out of range or an unwritable chart.
pub fn report(args: &CollapseArgs) -> Result<Report, SimError> {
    let strategies =
        if args.strategies.is_empty() { CollapseStrategy::ALL.to_vec() } else { args.strategies.clone() };
    let mut runs = Vec::new();
    for &strategy in &strategies {
        let config = CollapseConfig {
            strategy,
            rate: args.rate,
            spike_rate: args.spike_rate,
            spike_start: args.spike_start,
            spike_secs: args.spike_secs,
            duration: args.duration,
            model: CollapseModel::default(),
            seed: args.common.seed,
        };
        runs.push(simulate(&config)?);
    }
    if let Some(path) = &args.common.svg {
        write_svg(path, &chart(&runs))?;
    }
    let rows: Vec<CollapseRow> = runs.concat();
    Report::new(args.common.format, table(args, &runs), &rows)
}

/// The per-second table followed by a summary of each phase.
fn table(args: &CollapseArgs, runs: &[Vec<CollapseRow>]) -> String {
    let mut header = vec!["t".to_owned(), "offered".to_owned()];
    for run in runs {
        let name = run.first().map_or("", |r| r.strategy);
        header.push(format!("{name} goodput"));
        header.push(format!("{name} retries"));
    }
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut seconds = Table::new(&header_refs);
    for t in 0..args.duration as usize {
        let mut cells = vec![t.to_string(), runs.first().map_or(0, |r| r[t].offered).to_string()];
        for run in runs {
            cells.push(run[t].goodput.to_string());
            cells.push(run[t].retries.to_string());
        }
        seconds.row(cells);
    }
    format!("{}\n\n{}", seconds.render(), summary(args, runs))
}

/// Mean goodput before, during and after the spike (the last 20 s).
fn summary(args: &CollapseArgs, runs: &[Vec<CollapseRow>]) -> String {
    let spike_end = args.spike_start.saturating_add(args.spike_secs);
    let last = args.duration.saturating_sub(20).max(spike_end);
    let windows = [
        (
            format!("before {}-{} s", args.spike_start.min(5), args.spike_start),
            args.spike_start.min(5),
            args.spike_start,
        ),
        (format!("spike {}-{} s", args.spike_start, spike_end), args.spike_start, spike_end),
        (format!("after {}-{} s", last, args.duration), last, args.duration),
    ];
    let mut table = Table::new(&["strategy", "phase", "offered/s", "goodput/s", "retries/s"]);
    for run in runs {
        for (label, from, to) in &windows {
            let p = phase(run, *from, *to);
            table.row(vec![
                run.first().map_or("", |r| r.strategy).to_owned(),
                label.clone(),
                format!("{:.1}", p.offered),
                format!("{:.1}", p.goodput),
                format!("{:.1}", p.retries),
            ]);
        }
    }
    table.render()
}

/// Goodput per second for each strategy, with the offered load.
fn chart(runs: &[Vec<CollapseRow>]) -> Vec<Panel> {
    let line = |name: String, run: &[CollapseRow], value: fn(&CollapseRow) -> u64| Series {
        name,
        points: run.iter().map(|r| (f64::from(r.t), value(r) as f64)).collect(),
    };
    let mut series: Vec<Series> =
        runs.first().map(|run| line("offered".into(), run, |r| r.offered)).into_iter().collect();
    series.extend(
        runs.iter().map(|run| line(run.first().map_or("", |r| r.strategy).into(), run, |r| r.goodput)),
    );
    vec![Panel {
        title: "Goodput per second".into(),
        x_label: "seconds".into(),
        y_label: "requests answered in time / s".into(),
        series,
    }]
}
