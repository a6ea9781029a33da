//! `retryscope advise`: reads a service's recorded retryscope series from a
//! Prometheus, applies [`rules`] per dependency, and writes a configuration
//! file in the `retryscope-config` schema with every recommendation's
//! reason as a comment next to its key (issue 55). The guide:
//! `docs/guide/advise.md`.
//!
//! - [`prom`]: the reader (HTTP API, bounded in time and size);
//! - [`observe`]: the figures per dependency, refused when missing or absurd;
//! - [`rules`]: the rules, with their sources;
//! - [`replay`]: each tuned dependency's timeline replayed in virtual time
//!   under the configuration in force and the recommended one; a worse
//!   recommendation is withheld;
//! - [`writer`]: the file, checked as `check-config` checks it.

pub mod error;
pub mod observe;
pub mod output;
pub mod prom;
pub mod range;
pub mod recovery;
pub mod replay;
pub mod rules;
pub mod writer;

pub use error::AdviseError;
pub use range::{parse_duration, parse_range};

use clap::Args;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use writer::Match;

/// The most dependencies one run advises on: as many as one file may name.
pub const MAX_DEPENDENCIES: usize = retryscope_config::MAX_DEPENDENCIES;
/// The shortest caller's deadline: a quarter of it (the backoff base) is still 5 ms.
pub const MIN_DEADLINE: Duration = rules::TUNABLE_DEADLINE;
/// The longest caller's deadline: the file's bound on every duration.
pub const MAX_DEADLINE: Duration = Duration::from_secs(86_400);
/// The longest range read: the histograms of a longer one say little of today.
pub const MAX_RANGE: Duration = Duration::from_secs(31 * 86_400);

/// Arguments of `advise`.
#[derive(Debug, Clone, Args)]
pub struct AdviseArgs {
    /// The Prometheus to read (`http://127.0.0.1:9090`).
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// The range: a duration ending now, or at `--end` (`30m`, `6h`, `2d`), or
    /// `START,END` in unix seconds. Or give `--start` instead.
    #[arg(long, value_name = "RANGE")]
    pub range: Option<String>,
    /// The range's start: an RFC 3339 timestamp (`2026-12-05T03:00:00Z`) or unix seconds.
    #[arg(long, value_name = "TIME")]
    pub start: Option<String>,
    /// The range's end (default: now): an RFC 3339 timestamp or unix seconds.
    #[arg(long, value_name = "TIME")]
    pub end: Option<String>,
    /// The service's series: a selector's matchers (`job="checkout"`, braces optional).
    #[arg(long, value_name = "SELECTOR")]
    pub selector: String,
    /// The configuration in force (TOML): its match keys and deadlines are kept.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The caller's deadline for a dependency, `NAME=DURATION` (repeatable): no
    /// recommended deadline or timeout is above it.
    #[arg(long = "deadline", value_name = "NAME=DURATION")]
    pub deadlines: Vec<String>,
    /// A dependency whose calls are idempotent (repeatable): only those are hedged.
    #[arg(long = "idempotent", value_name = "NAME")]
    pub idempotent: Vec<String>,
    /// Where the file is written; a directory (existing, or ending in `/`):
    /// `advised.toml`, `replay.json` and `replay.svg` in it.
    #[arg(long, value_name = "FILE|DIR")]
    pub out: PathBuf,
    /// Where the replay's figures go as JSON: the model's assumptions, and one
    /// object per replayed dependency.
    #[arg(long, value_name = "FILE")]
    pub replay_json: Option<PathBuf>,
    /// Where the replay's chart goes as SVG: calls answered step by step, in
    /// force and recommended, one panel per replayed dependency.
    #[arg(long, value_name = "FILE")]
    pub replay_svg: Option<PathBuf>,
}

/// What a run found and wrote.
#[derive(Debug)]
pub struct Report {
    /// Each dependency's advice, and how the file matches it.
    pub advice: Vec<(rules::Advice, Match)>,
    /// The file's text, as written to `--out`.
    pub text: String,
    /// Each tuned dependency replayed in force and recommended.
    pub replays: Vec<replay::Compared>,
    /// Where the file, the JSON and the SVG were written.
    pub paths: output::Paths,
}

/// The selector's matchers, without braces.
fn matchers(selector: &str) -> Result<String, AdviseError> {
    let s = selector.trim();
    let s = s.strip_prefix('{').and_then(|s| s.strip_suffix('}')).unwrap_or(s).trim();
    if s.is_empty() || s.contains(['{', '}']) {
        return Err(AdviseError::Argument {
            flag: "--selector",
            why: format!("{selector:?}: give the service's label matchers, like job=\"checkout\""),
        });
    }
    Ok(s.to_owned())
}

/// `NAME=DURATION` pairs.
fn deadlines(pairs: &[String]) -> Result<BTreeMap<String, Duration>, AdviseError> {
    pairs
        .iter()
        .map(|p| {
            let bad = || AdviseError::Argument {
                flag: "--deadline",
                why: format!("{p:?} is not NAME=DURATION (payments=800ms), 20ms to 1d"),
            };
            let (name, d) = p.split_once('=').ok_or_else(bad)?;
            Ok((
                name.trim().to_owned(),
                parse_duration(d).filter(|d| (MIN_DEADLINE..=MAX_DEADLINE).contains(d)).ok_or_else(bad)?,
            ))
        })
        .collect()
}

/// What advise keeps of the file in force: the file, and each named
/// dependency's match keys.
#[derive(Debug, Default)]
struct InForce {
    config: Option<retryscope_config::Config>,
    matches: BTreeMap<String, Vec<(String, String)>>,
    /// The dependencies whose blocks write a `deadline`, and whether `[defaults]` does.
    deadlines: (BTreeSet<String>, bool),
}

impl InForce {
    /// The deadline the file in force writes for `name` (its block's, else
    /// `[defaults]`'s); `None` where it writes none, and the engine's default
    /// is all there is (which says nothing of the caller).
    fn deadline(&self, name: &str) -> Option<Duration> {
        let (named, defaults) = &self.deadlines;
        let own = self.config.as_ref().is_some_and(|c| c.dependency(name).is_some());
        let written = if own { named.contains(name) || *defaults } else { *defaults };
        written.then(|| self.settings(name).and_then(|s| s.policy().deadline())).flatten()
    }

    /// The settings in force for a dependency the series name `name`: its own
    /// where the file names it, else what a call to that host resolves to.
    fn settings(&self, name: &str) -> Option<&retryscope_config::DependencySettings> {
        let config = self.config.as_ref()?;
        if let Some(own) = config.dependency(name) {
            return Some(own);
        }
        let (host, port) = match name.rsplit_once(':') {
            Some((h, p)) => (h, p.parse::<u16>().ok()),
            None => (name, None),
        };
        Some(config.resolve(&retryscope_config::Target::http(host, port, "/")))
    }
}

/// The file in force: checked as a service would (with the names it registers
/// taken as registered), then read for its match keys, deadlines and hedging.
fn in_force(path: &std::path::Path) -> Result<InForce, AdviseError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| AdviseError::Io { what: format!("reading {}", path.display()), source })?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|source| AdviseError::InForce { path: path.display().to_string(), source })?;
    let deps = table.get("dependencies").and_then(toml::Value::as_table).cloned().unwrap_or_default();
    let mut known = retryscope_config::KnownNames::new();
    let defaults = table.get("defaults").and_then(toml::Value::as_table);
    for block in deps.values().filter_map(toml::Value::as_table).chain(defaults) {
        if let Some(n) = block.get("fallback").and_then(toml::Value::as_str) {
            known = known.fallback(n.to_owned());
        }
        if let Some(n) = block.get("body_rule").and_then(toml::Value::as_str) {
            known = known.body_rule(n.to_owned());
        }
    }
    let config = retryscope_config::Config::parse(
        &text,
        retryscope_config::Format::Toml,
        &path.display().to_string(),
        &known,
    )
    .map_err(AdviseError::Config)?;
    let mut matches = BTreeMap::new();
    for (name, block) in &deps {
        let Some(block) = block.as_table() else { continue };
        let keys = ["host", "path_prefix", "service", "method", "subject"]
            .into_iter()
            .filter_map(|k| block.get(k).and_then(toml::Value::as_str).map(|v| (k.to_owned(), v.to_owned())))
            .collect();
        matches.insert(name.clone(), keys);
    }
    let writes = |b: Option<&toml::Table>| b.is_some_and(|b| b.contains_key("deadline"));
    let named = deps.iter().filter(|(_, b)| writes(b.as_table())).map(|(n, _)| n.clone()).collect();
    Ok(InForce { config: Some(config), matches, deadlines: (named, writes(defaults)) })
}

/// The keys a rule of the file in force would refuse (gRPC, jobs), dropped with a note.
fn fit_to_rule(advice: &mut rules::Advice, keys: &[(String, String)]) {
    let has = |k: &str| keys.iter().any(|(key, _)| key == k);
    let refused: &[&str] = if has("subject") {
        &["retry_statuses", "hedging", "budget", "breaker", "pacer"]
    } else if has("service") {
        &["retry_statuses", "hedging"]
    } else {
        &[]
    };
    let dropped: Vec<&'static str> =
        advice.keys.iter().map(|k| k.key).filter(|k| refused.contains(k)).collect();
    if !dropped.is_empty() {
        advice.keys.retain(|k| !refused.contains(&k.key));
        advice.notes.push(format!(
            "{} not written: the file in force matches this dependency by {}, whose calls do not apply them",
            dropped.join(", "),
            if has("subject") { "subject (jobs)" } else { "gRPC service" }
        ));
    }
}

/// Reads, advises and writes `args.out`; the report of what was written.
pub fn run(args: &AdviseArgs) -> Result<Report, AdviseError> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let (end, window) =
        range::window(args.range.as_deref(), args.start.as_deref(), args.end.as_deref(), now)?;
    let matchers = matchers(&args.selector)?;
    let deadlines = deadlines(&args.deadlines)?;
    let in_force = match &args.config {
        Some(path) => in_force(path)?,
        None => InForce::default(),
    };
    let prometheus = prom::Prometheus::new(&args.prometheus)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| AdviseError::Io { what: "starting the runtime".to_owned(), source })?;
    let scope = observe::Scope { prometheus: &prometheus, matchers: &matchers, end, window };
    let observed = runtime.block_on(observe::read(&scope, MAX_DEPENDENCIES))?;
    for name in deadlines.keys() {
        if !observed.iter().any(|o| &o.name == name) {
            return Err(AdviseError::Argument {
                flag: "--deadline",
                why: format!("no dependency {name:?} in the series (they name {})", names(&observed)),
            });
        }
    }

    let mut taken = BTreeSet::new();
    let mut advice = Vec::with_capacity(observed.len());
    for o in &observed {
        let settings = in_force.settings(&o.name);
        let caller = rules::Caller {
            deadline: deadlines.get(&o.name).copied(),
            file_deadline: in_force.deadline(&o.name),
            // Hedging in force, or hedges seen: the calls are already sent twice.
            idempotent: args.idempotent.contains(&o.name)
                || settings.is_some_and(|s| s.hedge().is_some())
                || o.hedges > 0.0,
            attempts_in_force: settings.map(|s| s.policy().max_attempts()),
        };
        let mut a = rules::advise(o, &caller);
        let m = match in_force.matches.get(&o.name) {
            Some(keys) => {
                fit_to_rule(&mut a, keys);
                Match::InForce(keys.clone())
            }
            None => writer::match_of(&o.name),
        };
        // Two series names that read the same in the file: the second is not written.
        let m = if matches!(m, Match::Unmatchable(_)) || taken.insert(writer::file_name(&o.name)) {
            m
        } else {
            Match::Unmatchable("its name in the file is another dependency's")
        };
        advice.push((a, m));
    }
    let header = vec![
        format!("Written by `retryscope advise` from {} ({} dependencies).", prometheus.url(), advice.len()),
        format!("Series {{{matchers}}}, the {} s to unix time {end:.0}.", window.as_secs()),
        "Each key's comment says what was observed and which rule chose the value".to_owned(),
        "(crates/retryscope-lab/src/advise/rules.rs). Review it, check it with".to_owned(),
        "`retryscope check-config`, then reload it.".to_owned(),
    ];
    let paths = output::Paths::of(&args.out, args.replay_json.as_deref(), args.replay_svg.as_deref())?;
    let shown = paths.config.display().to_string();
    let first = writer::render(&header, &advice);
    let written = writer::check(&first, &shown).map_err(AdviseError::Config)?;
    let replays = prove(&mut advice, &observed, &in_force, &written, &deadlines);
    let text = writer::render(&header, &advice);
    writer::check(&text, &shown).map_err(AdviseError::Config)?;
    std::fs::write(&paths.config, &text)
        .map_err(|source| AdviseError::Io { what: format!("writing {shown}"), source })?;
    if let Some(path) = &paths.json {
        output::json(path, &replays)?;
    }
    if let Some(path) = &paths.svg {
        output::svg(path, &replays)?;
    }
    Ok(Report { advice, text, replays, paths })
}

/// Replays every dependency given keys under the configuration in force and
/// the recommended one (`written`); withholds a recommendation that is worse.
fn prove(
    advice: &mut [(rules::Advice, Match)],
    observed: &[observe::Observed],
    in_force: &InForce,
    written: &retryscope_config::Config,
    deadlines: &BTreeMap<String, Duration>,
) -> Vec<replay::Compared> {
    let mut out = Vec::new();
    // `advice` was made from `observed`, one for one, in order.
    for ((a, m), o) in advice.iter_mut().zip(observed) {
        if a.keys.is_empty() || matches!(m, Match::Unmatchable(_)) {
            continue;
        }
        let Some(recommended) = written.dependency(&writer::file_name(&a.name)) else { continue };
        let base = replay::Side::defaults();
        let now = in_force
            .settings(&a.name)
            .map_or_else(|| base.clone(), |s| replay::Side::from_settings(s, &base));
        let next = replay::Side::from_settings(recommended, &now);
        // One seed for both sides: the same arrivals, failures and latencies.
        let (seed, caller) = (crate::sim::DEFAULT_SEED, deadlines.get(&a.name).copied());
        let o = &observe::Observed { timeout_in_force: now.policy.attempt_timeout(), ..o.clone() };
        let (Ok(before), Ok(after)) =
            (replay::replay(o, &now, caller, seed), replay::replay(o, &next, caller, seed))
        else {
            a.notes.push("replay: could not be run for these settings; not proven".to_owned());
            continue;
        };
        // A hedge the recommendation adds costs its ≈ 5 % by design.
        let extra = if next.hedge.is_some() && now.hedge.is_none() { replay::HEDGE_LOAD } else { 0.0 };
        let withheld = replay::worse_allowing(&after, &before, extra);
        let compared =
            replay::Compared { dependency: a.name.clone(), in_force: before, recommended: after, withheld };
        if withheld {
            a.keys.clear();
        }
        a.notes.push(compared.line());
        out.push(compared);
    }
    out
}

fn names(observed: &[observe::Observed]) -> String {
    observed.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ")
}
