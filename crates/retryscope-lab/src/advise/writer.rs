//! The writer: the advice as a file in the `retryscope-config` schema, each
//! key with its reason as a comment above it, checked by the same code
//! `retryscope check-config` runs before it is written.

use super::rules::{Advice, Value};
use retryscope_config::{Config, ConfigError, Format, KnownNames, MAX_NAME_LEN};
use std::fmt::Write as _;
use std::time::Duration;

/// How a dependency of the series is matched in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// The file in force's own match keys for that name, as `key = "value"` lines.
    InForce(Vec<(String, String)>),
    /// The name is a host or `host:port` (what HTTP clients name a dependency by).
    Host(String),
    /// The name cannot be matched (`_OTHER`, or not a host): not written.
    Unmatchable(&'static str),
}

/// How `name` (as the series carry it) is matched when the file in force does not name it.
pub fn match_of(name: &str) -> Match {
    if name == "_OTHER" {
        return Match::Unmatchable(
            "_OTHER folds the dependencies past the label bound: no one host to match",
        );
    }
    let (host, port) = match name.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (name, None),
    };
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    if host.is_empty() || !port_ok || name.contains(['/', ' ', '*', '"', '\\']) || name.len() > 253 {
        return Match::Unmatchable(
            "not a host or host:port, and the file in force (--config) does not name it",
        );
    }
    Match::Host(name.to_owned())
}

/// The name a dependency gets in the file: the series' name where the file
/// allows it, else with each other character as `_` (`127.0.0.1:8080` →
/// `127.0.0.1_8080`), at most `MAX_NAME_LEN` characters.
pub fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '_' })
        .take(MAX_NAME_LEN)
        .collect()
}

/// A duration as the file writes it: a whole number and one unit.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) && ms >= 60_000 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) && ms > 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn value(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format!("{f:?}"),
        Value::Bool(b) => b.to_string(),
        Value::Duration(d) => format!("\"{}\"", duration(*d)),
        Value::Name(n) => format!("\"{n}\""),
        Value::Statuses(s) => {
            format!("[{}]", s.iter().map(u16::to_string).collect::<Vec<_>>().join(", "))
        }
        Value::Table(t) => {
            let inner: Vec<String> = t.iter().map(|(k, v)| format!("{k} = {}", value(v))).collect();
            format!("{{ {} }}", inner.join(", "))
        }
    }
}

/// A TOML basic string: the characters TOML escapes, escaped.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Comment lines: each reason line as `# …`, no line break inside a comment.
fn comment(out: &mut String, text: &str) {
    for line in text.lines() {
        let _ = writeln!(out, "# {}", line.replace('\r', " "));
    }
}

/// The file: `header` lines, then one block per dependency.
pub fn render(header: &[String], advice: &[(Advice, Match)]) -> String {
    let mut out = String::new();
    for line in header {
        comment(&mut out, line);
    }
    out.push_str(
        "\n[defaults]\n# nothing: the engine's defaults (Policy::interactive()) and the client's builder\n",
    );
    for (a, m) in advice {
        out.push('\n');
        let name = file_name(&a.name);
        let lines: Vec<(String, String)> = match m {
            Match::Unmatchable(why) => {
                comment(&mut out, &format!("dependency {:?}: not written: {why}", a.name));
                for line in &a.observed {
                    comment(&mut out, &format!("  observed: {line}"));
                }
                continue;
            }
            Match::InForce(keys) => keys.clone(),
            Match::Host(host) => vec![("host".to_owned(), host.clone())],
        };
        let _ = writeln!(out, "[dependencies.{}]", quoted(&name));
        if name != a.name {
            comment(&mut out, &format!("the series name it {:?}", a.name));
        }
        for line in &a.observed {
            comment(&mut out, &format!("observed: {line}"));
        }
        for note in &a.notes {
            comment(&mut out, note);
        }
        for (k, v) in lines {
            let _ = writeln!(out, "{k} = {}", quoted(&v));
        }
        for key in &a.keys {
            comment(&mut out, &format!("{}: {}", key.key, key.reason));
            let _ = writeln!(out, "{} = {}", key.key, value(&key.value));
        }
    }
    out
}

/// The text checked as `retryscope check-config` checks a file (the same
/// `Config::parse`), with no body rule or fallback registered: advise writes none.
pub fn check(text: &str, origin: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Format::Toml, origin, &KnownNames::new())
}
