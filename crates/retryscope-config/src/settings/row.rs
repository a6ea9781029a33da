//! The effective table's rows: what `check-config` prints per dependency.

use super::*;

impl DependencySettings {
    /// One row of the effective table.
    pub(crate) fn row(&self) -> Vec<String> {
        let p = &self.configured;
        let opt = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), show);
        if self.job {
            return self.job_row();
        }
        vec![
            self.name.as_deref().unwrap_or("(defaults)").to_owned(),
            if self.matcher.is_empty() { "*".to_owned() } else { self.matcher.clone() },
            if self.enabled { "on".to_owned() } else { "OFF".to_owned() },
            p.max_attempts().to_string(),
            backoff_cell(p),
            jitter_name(p.jitter()).to_owned(),
            opt(p.attempt_timeout()),
            opt(p.deadline()),
            self.retry_statuses.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
            self.hedge().map_or_else(|| "-".to_owned(), |h| format!("{}@{}", h.max_copies, show(h.delay))),
            self.priority.as_str().to_owned(),
            self.fallback.as_deref().unwrap_or("-").to_owned(),
            // `code`: not written, the client's builder decides.
            {
                let budget = match (self.sets.budget, self.budget) {
                    (false, _) => "code".to_owned(),
                    (true, None) => "off".to_owned(),
                    (true, Some(b)) => fields(&[
                        ("ratio", b.ratio.map(|v| v.to_string())),
                        ("min", b.min_per_second.map(|v| format!("{v}/s"))),
                        ("window", b.window.map(show)),
                    ]),
                };
                // The in-flight budget, where the file gives one, in the same cell.
                match self.in_flight_budget {
                    Some(in_flight) => format!("{budget}+{}", in_flight.cell()),
                    None => budget,
                }
            },
            match (self.sets.breaker, self.breaker) {
                (false, _) => "code".to_owned(),
                (true, None) => "off".to_owned(),
                (true, Some(b)) => fields(&[
                    ("ratio", b.failure_ratio.map(|v| v.to_string())),
                    ("min_calls", b.min_calls.map(|v| v.to_string())),
                    ("window", b.window.map(show)),
                    ("cool_down", b.cool_down.map(show)),
                    ("probes", b.half_open_probes.map(|v| v.to_string())),
                ]),
            },
            match (self.sets.pacer, self.pacer) {
                (false, _) => "code".to_owned(),
                (true, None) => "off".to_owned(),
                (true, Some(p)) => (if p.adaptive { "adaptive" } else { "on" }).to_owned(),
            },
            self.body_rule.as_deref().unwrap_or("code").to_owned(),
            match self.idempotency_keys {
                None => "code".to_owned(),
                Some(true) => "on".to_owned(),
                Some(false) => "off".to_owned(),
            },
        ]
    }
}

impl DependencySettings {
    /// A `subject` rule's row: `-` in every column a job worker does not
    /// apply, `code` where the worker's builder decides (the guards; the
    /// attempt timeout where the file does not write one).
    fn job_row(&self) -> Vec<String> {
        let p = &self.configured;
        let dash = || "-".to_owned();
        vec![
            self.name.as_deref().unwrap_or("(defaults)").to_owned(),
            self.matcher.clone(),
            if self.enabled { "on".to_owned() } else { "OFF".to_owned() },
            p.max_attempts().to_string(),
            backoff_cell(p),
            jitter_name(p.jitter()).to_owned(),
            self.written_attempt_timeout().map_or_else(|| "code".to_owned(), show),
            p.deadline().map_or_else(dash, show),
            dash(),
            dash(),
            dash(),
            dash(),
            "code".to_owned(),
            "code".to_owned(),
            dash(),
            dash(),
            dash(),
        ]
    }
}

/// `key=value` for each value written, `,`-separated (short names: `min` is
/// `min_per_second`, a breaker's `ratio` its `failure_ratio`, `probes` its
/// `half_open_probes`); `default` for none.
fn fields(all: &[(&str, Option<String>)]) -> String {
    let set: Vec<String> = all.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}"))).collect();
    if set.is_empty() { "default".to_owned() } else { set.join(",") }
}

fn jitter_name(j: Jitter) -> &'static str {
    match j {
        Jitter::None => "none",
        Jitter::Full => "full",
        Jitter::Equal => "equal",
        Jitter::Decorrelated => "decorrelated",
        _ => "other",
    }
}

/// The effective table's backoff: base..cap and multiplier, and the
/// throttled curve when the file sets it apart.
fn backoff_cell(p: &Policy) -> String {
    let cell = format!("{}..{} x{}", show(p.base_delay()), show(p.max_delay()), p.multiplier());
    if (p.throttled_base_delay(), p.throttled_max_delay()) == (p.base_delay(), p.max_delay()) {
        return cell;
    }
    format!("{cell} throttled {}..{}", show(p.throttled_base_delay()), show(p.throttled_max_delay()))
}
