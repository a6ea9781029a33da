//! The replay as JSON and SVG, beside the file: the same figures the table
//! prints, with the model's assumptions, and each dependency's calls answered
//! step by step under the configuration in force and the recommended one —
//! drawn by the simulator's chart writer ([`crate::sim::output::write_svg`]),
//! as the storms' and experiments' charts are.

use super::AdviseError;
use super::replay::{ASSUMPTIONS, Compared};
use crate::sim::output::{Panel, Series, write_svg};
use std::path::{Path, PathBuf};

/// The names `--out DIR` writes in the directory.
pub const CONFIG_NAME: &str = "advised.toml";
/// The replay's figures.
pub const JSON_NAME: &str = "replay.json";
/// The replay's chart.
pub const SVG_NAME: &str = "replay.svg";

/// Where a run writes: the file, and the replay's JSON and SVG where asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Paths {
    /// The configuration file.
    pub config: PathBuf,
    /// The replay as JSON.
    pub json: Option<PathBuf>,
    /// The replay as SVG.
    pub svg: Option<PathBuf>,
}

impl Paths {
    /// `--out` naming a directory (one that exists, or written with a trailing
    /// `/`): all three in it, under [`CONFIG_NAME`], [`JSON_NAME`] and
    /// [`SVG_NAME`], unless `--replay-json`/`--replay-svg` say otherwise;
    /// naming a file: the file, and the others only where asked.
    pub fn of(out: &Path, json: Option<&Path>, svg: Option<&Path>) -> Result<Self, AdviseError> {
        let dir = out.is_dir() || out.as_os_str().to_string_lossy().ends_with('/');
        if !dir {
            return Ok(Self {
                config: out.to_owned(),
                json: json.map(Path::to_owned),
                svg: svg.map(Path::to_owned),
            });
        }
        std::fs::create_dir_all(out)
            .map_err(|source| AdviseError::Io { what: format!("creating {}", out.display()), source })?;
        Ok(Self {
            config: out.join(CONFIG_NAME),
            json: Some(json.map_or_else(|| out.join(JSON_NAME), Path::to_owned)),
            svg: Some(svg.map_or_else(|| out.join(SVG_NAME), Path::to_owned)),
        })
    }
}

/// The JSON document: the assumptions, and one object per replayed dependency.
#[derive(serde::Serialize)]
struct Document<'a> {
    assumptions: &'a [&'a str],
    dependencies: &'a [Compared],
}

/// Writes the replays as JSON to `path`.
pub fn json(path: &Path, replays: &[Compared]) -> Result<(), AdviseError> {
    let io = |source| AdviseError::Io { what: format!("writing {}", path.display()), source };
    let text = serde_json::to_string_pretty(&Document { assumptions: ASSUMPTIONS, dependencies: replays })
        .map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(path, text + "\n").map_err(io)
}

/// The chart's panels: one per replayed dependency, the share of calls
/// answered step by step on each side; the title carries the load and the
/// time to recover.
pub fn panels(replays: &[Compared]) -> Vec<Panel> {
    let percent = |r: &super::replay::Replayed| {
        r.timeline.iter().map(|p| (p.t, p.answered * 100.0)).collect::<Vec<_>>()
    };
    replays
        .iter()
        .map(|c| Panel {
            title: format!(
                "{}: load {:.2} → {:.2}, recovered {} → {}{}",
                c.dependency,
                c.in_force.amplification,
                c.recommended.amplification,
                super::replay::recovered(&c.in_force),
                super::replay::recovered(&c.recommended),
                if c.withheld { " (withheld)" } else { "" }
            ),
            x_label: "seconds into the range".to_owned(),
            y_label: "calls answered (%)".to_owned(),
            series: vec![
                Series { name: "in force".to_owned(), points: percent(&c.in_force) },
                Series { name: "recommended".to_owned(), points: percent(&c.recommended) },
            ],
        })
        .collect()
}

/// Writes the replays' chart to `path`; nothing replayed draws one empty panel
/// that says so.
pub fn svg(path: &Path, replays: &[Compared]) -> Result<(), AdviseError> {
    let mut panels = panels(replays);
    if panels.is_empty() {
        panels.push(Panel {
            title: "no dependency was replayed (none got keys)".to_owned(),
            x_label: "seconds into the range".to_owned(),
            y_label: "calls answered (%)".to_owned(),
            series: Vec::new(),
        });
    }
    write_svg(path, &panels).map_err(|e| AdviseError::Io {
        what: format!("writing {}", path.display()),
        source: std::io::Error::other(e.to_string()),
    })
}
