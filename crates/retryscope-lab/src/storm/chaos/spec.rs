//! The `--chaos` SPEC: fault rules, each with an optional window of the run.
//!
//! ```text
//! SPEC   := ITEM ( ',' ITEM )*                 at most MAX_ITEMS items
//! ITEM   := RULE [ ':' WINDOW ]
//! RULE   := KIND '@' PERCENT ['%'] [ '@' DEPENDENCY ] [ '/' ROUTE ]   (FaultRule's grammar)
//! WINDOW := TIME '-' TIME                       from, to: seconds of each policy's run
//! TIME   := NUMBER ( 's' | 'ms' )
//! ```
//!
//! `503@30%:0s-4s,stall@5%` injects a 503 into 30 % of the attempts during the
//! first four seconds of each policy's run, and a stall into 5 % of them for the
//! whole run. The rule is the one `retryscope_http::fault::FaultRule` reads
//! (the same kinds, rates and selectors as every other fault spec); only the
//! window is the lab's.

use retryscope_reqwest::fault::{FaultRule, FaultSpecError};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The most items a SPEC may hold: each is a middleware on every attempt.
pub const MAX_ITEMS: usize = 16;

/// A parsed `--chaos` SPEC.
#[derive(Debug, Clone, PartialEq)]
pub struct ChaosSpec {
    /// The items, in the order given: the first that injects wins.
    pub items: Vec<ChaosItem>,
}

/// One fault rule and when it is armed.
#[derive(Debug, Clone, PartialEq)]
pub struct ChaosItem {
    /// What to inject, how often, into which calls.
    pub rule: FaultRule,
    /// From when to when, from the start of each policy's run; `None`: the whole run.
    pub window: Option<(Duration, Duration)>,
}

/// A SPEC that does not parse: where, and why.
#[derive(Debug)]
pub struct ChaosSpecError {
    /// The 1-based character position of the part that is wrong.
    pub position: usize,
    /// That part.
    pub part: String,
    reason: Reason,
}

#[derive(Debug)]
enum Reason {
    Empty,
    TooMany,
    Rule(FaultSpecError),
    Window(&'static str),
}

impl fmt::Display for ChaosSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at character {} ({:?}): ", self.position, self.part)?;
        match &self.reason {
            Reason::Empty => f.write_str("an empty item; expected KIND@PERCENT[:FROM-TO]"),
            Reason::TooMany => write!(f, "more than {MAX_ITEMS} items"),
            Reason::Rule(_) => f.write_str("not a fault rule KIND@PERCENT[@DEPENDENCY][/ROUTE]"),
            Reason::Window(why) => write!(f, "not a window FROM-TO (e.g. 0s-4s, 500ms-2s): {why}"),
        }
    }
}

impl std::error::Error for ChaosSpecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.reason {
            Reason::Rule(e) => Some(e),
            _ => None,
        }
    }
}

impl FromStr for ChaosSpec {
    type Err = ChaosSpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut items = Vec::new();
        let mut offset = 0;
        for raw in text.split(',') {
            let at = |part: &str, within: usize| ChaosSpecError {
                position: text[..offset + within].chars().count() + 1,
                part: part.to_owned(),
                reason: Reason::Empty,
            };
            let leading = raw.len() - raw.trim_start().len();
            let item = raw.trim();
            if item.is_empty() {
                return Err(at(raw, 0));
            }
            if items.len() == MAX_ITEMS {
                return Err(ChaosSpecError { reason: Reason::TooMany, ..at(item, leading) });
            }
            // A window is what follows the last `:` when it has a `-` and no
            // `/`: a dependency's `:port` and a route keep their colons.
            let (rule, window) = match item.rsplit_once(':') {
                Some((rule, window)) if window.contains('-') && !window.contains('/') => {
                    (rule, Some((window, leading + rule.len() + 1)))
                }
                _ => (item, None),
            };
            let parsed: FaultRule =
                rule.parse().map_err(|e| ChaosSpecError { reason: Reason::Rule(e), ..at(rule, leading) })?;
            let window =
                match window {
                    None => None,
                    Some((window, within)) => Some(parse_window(window).map_err(|why| ChaosSpecError {
                        reason: Reason::Window(why),
                        ..at(window, within)
                    })?),
                };
            items.push(ChaosItem { rule: parsed, window });
            offset += raw.len() + 1;
        }
        Ok(Self { items })
    }
}

fn parse_window(text: &str) -> Result<(Duration, Duration), &'static str> {
    let (from, to) = text.split_once('-').ok_or("no '-'")?;
    let (from, to) = (parse_time(from)?, parse_time(to)?);
    if to <= from {
        return Err("it ends before it starts");
    }
    Ok((from, to))
}

/// Seconds (`4s`, `2.5s`) or milliseconds (`500ms`), at most an hour.
fn parse_time(text: &str) -> Result<Duration, &'static str> {
    let text = text.trim();
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else {
        return Err("a time needs a unit, s or ms");
    };
    let value: f64 = number.parse().map_err(|_| "a time is a number followed by s or ms")?;
    let seconds = value * scale;
    if !(seconds.is_finite() && (0.0..=3_600.0).contains(&seconds)) {
        return Err("a time is between 0 s and an hour");
    }
    Ok(Duration::from_secs_f64(seconds))
}

impl fmt::Display for ChaosSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", item.rule)?;
            if let Some((from, to)) = item.window {
                write!(f, ":{}s-{}s", from.as_secs_f64(), to.as_secs_f64())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn rules_with_and_without_windows_read_back() {
        let spec: ChaosSpec =
            "503@30%:0s-4s, stall@5,reset@2@127.0.0.1:8080/work:500ms-1.5s".parse().unwrap();
        assert_eq!(spec.items.len(), 3);
        assert_eq!(spec.items[0].window, Some((Duration::ZERO, Duration::from_secs(4))));
        assert_eq!(spec.items[1].window, None);
        assert_eq!(spec.items[2].rule.to_string(), "reset@2@127.0.0.1:8080/work");
        assert_eq!(spec.items[2].window, Some((Duration::from_millis(500), Duration::from_millis(1_500))));
        assert_eq!(spec.to_string(), "503@30:0s-4s,stall@5,reset@2@127.0.0.1:8080/work:0.5s-1.5s");
        assert_eq!(spec.to_string().parse::<ChaosSpec>().unwrap(), spec);
    }

    #[test]
    fn a_bad_spec_is_refused_naming_the_position_of_the_bad_part() {
        let error = |text: &str| text.parse::<ChaosSpec>().unwrap_err();
        let e = error("503@30%:0s-4s,stall@5x");
        assert_eq!((e.position, e.part.as_str()), (15, "stall@5x"));
        assert!(e.to_string().starts_with("at character 15 (\"stall@5x\"): not a fault rule"), "{e}");
        assert!(e.source().is_some(), "the rule's own error is kept as the source");

        let e = error("503@30:4s-1s");
        assert_eq!((e.position, e.part.as_str()), (8, "4s-1s"));
        assert!(e.to_string().contains("ends before it starts"), "{e}");
        assert_eq!(error("503@30:0-4s").position, 8, "a time without a unit");
        assert_eq!(error("503@30,,reset@1").position, 8, "an empty item");
        assert_eq!(error("").position, 1);
        assert_eq!(error("teapot@30").position, 1);
        assert_eq!(error("503@130").position, 1, "a rate above 100 %");
        assert_eq!(error("503@30:0s-2h").position, 8);
        let many = vec!["503@1"; MAX_ITEMS + 1].join(",");
        assert!(error(&many).to_string().contains("more than 16 items"));
    }
}
