//! Durations as the file writes them: a whole number and a unit, `"250ms"`,
//! `"2s"`, `"1m"`.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::time::Duration;

/// A duration read from a string such as `"250ms"`, `"2s"`, `"1m"` or `"1h"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileDuration(pub(crate) Duration);

/// What a duration string may look like, said in every refusal.
pub(crate) const FORMAT: &str = "a whole number and a unit (ms, s, m, h), e.g. \"250ms\" or \"2s\"";

/// Parses `"250ms"`, `"2s"`, `"1m"`, `"1h"`; `None` for anything else.
pub(crate) fn parse(text: &str) -> Option<Duration> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 12 {
        return None;
    }
    let (number, unit) = text.split_at(digits);
    let n: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

/// Writes `d` back the way the file would: the largest unit that is exact.
pub(crate) fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0ms".to_owned()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl<'de> serde::Deserialize<'de> for FileDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = FileDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(FORMAT)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FileDuration, E> {
                parse(v)
                    .map(FileDuration)
                    .ok_or_else(|| E::custom(format_args!("invalid duration {v:?}: expected {FORMAT}")))
            }
        }
        deserializer.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_refusals() {
        assert_eq!(parse("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse("3m"), Some(Duration::from_secs(180)));
        assert_eq!(parse("1h"), Some(Duration::from_secs(3600)));
        for bad in ["", "s", "2", "2 s", "1.5s", "-1s", "2S", "9999999999999s"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(show(Duration::from_millis(1500)), "1500ms");
        assert_eq!(show(Duration::from_secs(120)), "2m");
    }
}
