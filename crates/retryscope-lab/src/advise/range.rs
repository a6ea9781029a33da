//! The range `advise` reads: `--range` (a duration ending now or at `--end`,
//! or `START,END` in unix seconds), or `--start` and `--end` as RFC 3339
//! timestamps or unix seconds.

use super::{AdviseError, MAX_RANGE};
use std::time::Duration;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// `30m`, `6h`, `90s`, `2d`, `500ms`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().ok()?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit_ms).map(Duration::from_millis).filter(|d| !d.is_zero())
}

/// `(end, length)` of `--range`, relative to `now` (unix seconds).
pub fn parse_range(text: &str, now: f64) -> Result<(f64, Duration), AdviseError> {
    let bad = |why: String| AdviseError::Argument { flag: "--range", why };
    let (end, window) = match text.split_once(',') {
        Some((start, end)) => {
            let start: f64 =
                start.trim().parse().map_err(|_| bad(format!("{start:?} is not unix seconds")))?;
            let end: f64 = end.trim().parse().map_err(|_| bad(format!("{end:?} is not unix seconds")))?;
            if !(start.is_finite() && end.is_finite() && end > start) {
                return Err(bad(format!("{text:?}: the end must come after the start")));
            }
            (end, Duration::from_secs_f64(end - start))
        }
        None => {
            let d = parse_duration(text)
                .ok_or_else(|| bad(format!("{text:?} is neither a duration (30m) nor START,END")))?;
            (now, d)
        }
    };
    if window < Duration::from_secs(60) || window > MAX_RANGE {
        return Err(bad(format!("{} s: a range is 1 minute to 31 days", window.as_secs())));
    }
    // Whole seconds: PromQL's range selector is written in them.
    Ok((end, Duration::from_secs(window.as_secs())))
}

/// An RFC 3339 timestamp (`2026-12-05T03:00:00Z`, `…+01:00`, fractions
/// allowed) or unix seconds, as unix seconds.
pub fn timestamp(text: &str, flag: &'static str) -> Result<f64, AdviseError> {
    let text = text.trim();
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(t.unix_timestamp_nanos() as f64 / 1e9);
    }
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(AdviseError::Argument {
            flag,
            why: format!(
                "{text:?} is neither an RFC 3339 timestamp (2026-12-05T03:00:00Z, or with an offset like +01:00) \
                 nor unix seconds"
            ),
        }),
    }
}

/// `(end, length)` of the range the flags give, relative to `now` (unix seconds):
/// `--range` alone, `--range DURATION --end TIME`, or `--start TIME [--end TIME]`.
pub fn window(
    range: Option<&str>,
    start: Option<&str>,
    end: Option<&str>,
    now: f64,
) -> Result<(f64, Duration), AdviseError> {
    let end_at = end.map(|e| timestamp(e, "--end")).transpose()?;
    match (range, start) {
        (Some(_), Some(_)) => Err(AdviseError::Argument {
            flag: "--start",
            why: "give --range or --start (with --end or not), not both".to_owned(),
        }),
        (None, None) => Err(AdviseError::Argument {
            flag: "--range",
            why: "no range: give --range (30m, or START,END) or --start (and --end)".to_owned(),
        }),
        (Some(r), None) => {
            if r.contains(',') && end_at.is_some() {
                return Err(AdviseError::Argument {
                    flag: "--end",
                    why: format!("--range {r:?} already gives its end"),
                });
            }
            parse_range(r, end_at.unwrap_or(now))
        }
        (None, Some(s)) => {
            let from = timestamp(s, "--start")?;
            let to = end_at.unwrap_or(now);
            if to <= from {
                return Err(AdviseError::Argument {
                    flag: "--start",
                    why: format!("{s:?} is not before the end ({})", end.unwrap_or("now")),
                });
            }
            parse_range(&format!("{from},{to}"), now)
        }
    }
}
