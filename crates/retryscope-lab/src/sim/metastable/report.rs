//! The metastable case's report: the per-second table, when each strategy
//! recovered after the crash, and the goodput chart.

use super::{MetastableArgs, MetastableConfig, MetastableModel, MetastableRow, MetastableStrategy, simulate};
use crate::sim::SimError;
use crate::sim::output::{Panel, Report, Series, Table, write_svg};

/// Share of the offered requests a second must answer in time to count as recovered.
pub const RECOVERED_SHARE: f64 = 0.9;
/// Seconds in a row that must each be recovered.
pub const RECOVERED_RUN: usize = 3;

/// The first second at or after `from` that starts [`RECOVERED_RUN`] seconds in a
/// row each answering at least [`RECOVERED_SHARE`] of what was offered; `None`
/// if the run never recovers.
pub fn recovered_at(rows: &[MetastableRow], from: u32) -> Option<u32> {
    let good: Vec<(u32, bool)> = rows
        .iter()
        .filter(|r| r.t >= from)
        .map(|r| (r.t, r.offered > 0 && r.goodput as f64 >= RECOVERED_SHARE * r.offered as f64))
        .collect();
    good.windows(RECOVERED_RUN).find(|w| w.iter().all(|(_, ok)| *ok)).map(|w| w[0].0)
}

/// Runs the experiments `args` asks for and renders them.
///
/// # Errors
///
/// [`SimError`] for settings out of range or an unwritable chart.
pub fn report(args: &MetastableArgs) -> Result<Report, SimError> {
    let strategies =
        if args.strategies.is_empty() { MetastableStrategy::ALL.to_vec() } else { args.strategies.clone() };
    // A window that no strategy would use is refused, not ignored.
    if args.throttle_window.is_some() && !strategies.contains(&MetastableStrategy::Throttled) {
        return Err(SimError::new(
            "--throttle-window applies only to the throttled strategy, which --strategies leaves out",
        ));
    }
    let mut runs = Vec::new();
    let mut config = MetastableConfig {
        strategy: MetastableStrategy::Naive,
        rate: args.rate,
        crash_start: args.crash_start,
        crash_secs: args.crash_secs,
        duration: args.duration,
        model: MetastableModel::default(),
        throttle_window: args
            .throttle_window
            .map_or(super::config::THROTTLE_WINDOW, std::time::Duration::from_secs),
        seed: args.common.seed,
    };
    for &strategy in &strategies {
        config.strategy = strategy;
        runs.push(simulate(&config)?);
    }
    if let Some(path) = &args.common.svg {
        write_svg(path, &chart(&runs))?;
    }
    let rows: Vec<MetastableRow> = runs.concat();
    Report::new(args.common.format, table(&config, &runs), &rows)
}

fn name(run: &[MetastableRow]) -> &'static str {
    run.first().map_or("", |r| r.strategy)
}

/// The per-second table followed by a summary per strategy.
fn table(config: &MetastableConfig, runs: &[Vec<MetastableRow>]) -> String {
    let mut header = vec!["t".to_owned(), "offered".to_owned()];
    for run in runs {
        header.push(format!("{} goodput", name(run)));
        header.push(format!("{} sent", name(run)));
        header.push(format!("{} queued", name(run)));
    }
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut seconds = Table::new(&header_refs);
    for t in 0..config.duration as usize {
        let mut cells = vec![t.to_string(), runs.first().map_or(0, |r| r[t].offered).to_string()];
        for run in runs {
            cells.push(run[t].goodput.to_string());
            cells.push(run[t].sent.to_string());
            cells.push(run[t].queued.to_string());
        }
        seconds.row(cells);
    }
    format!("{}\n\n{}", seconds.render(), summary(config, runs))
}

/// Per strategy: goodput before the crash and over the last 20 s, and when it recovered.
fn summary(config: &MetastableConfig, runs: &[Vec<MetastableRow>]) -> String {
    let end = config.crash_end();
    let last = config.duration.saturating_sub(20).max(end);
    let mean = |run: &[MetastableRow], from: u32, to: u32, f: fn(&MetastableRow) -> u64| {
        let picked: Vec<u64> = run.iter().filter(|r| (from..to).contains(&r.t)).map(f).collect();
        picked.iter().sum::<u64>() as f64 / picked.len().max(1) as f64
    };
    let mut table = Table::new(&[
        "strategy",
        "goodput/s before",
        &format!("goodput/s {last}-{} s", config.duration),
        &format!("sent/s {last}-{} s", config.duration),
        "rejected locally",
        "recovered",
    ]);
    for run in runs {
        let recovered = match recovered_at(run, end) {
            Some(t) => format!("{} s after the crash", t - end),
            None => "never".to_owned(),
        };
        table.row(vec![
            name(run).to_owned(),
            format!("{:.1}", mean(run, 1, config.crash_start, |r| r.goodput)),
            format!("{:.1}", mean(run, last, config.duration, |r| r.goodput)),
            format!("{:.1}", mean(run, last, config.duration, |r| r.sent)),
            run.iter().map(|r| r.rejected).sum::<u64>().to_string(),
            recovered,
        ]);
    }
    table.render()
}

/// Goodput per second for each strategy, with the offered load.
fn chart(runs: &[Vec<MetastableRow>]) -> Vec<Panel> {
    let line = |name: String, run: &[MetastableRow], value: fn(&MetastableRow) -> u64| Series {
        name,
        points: run.iter().map(|r| (f64::from(r.t), value(r) as f64)).collect(),
    };
    let mut series: Vec<Series> =
        runs.first().map(|run| line("offered".into(), run, |r| r.offered)).into_iter().collect();
    series.extend(runs.iter().map(|run| line(name(run).into(), run, |r| r.goodput)));
    vec![Panel {
        title: "Goodput per second: server 1 of 2 down from 5 s to 10 s".into(),
        x_label: "seconds".into(),
        y_label: "requests answered in time / s".into(),
        series,
    }]
}
