//! The JSON values a service config is made of, read as gRPC reads them:
//! status codes, whole numbers, protobuf `Duration`s, and objects, arrays and
//! required fields that name the path of what is wrong.

use super::error::{Result, ServiceConfigError};
use crate::grpc::code::{by_name, code_number};
use retryscope::MAX_DURATION;
use serde_json::{Map, Value};
use std::time::Duration;

/// Method configs and names are bounded: a config is operator input, but an
/// absurd one should be refused, not held.
const MAX_ENTRIES: usize = 10_000;

/// A status code by name in any case (`"UNAVAILABLE"`, `"unavailable"`) or by
/// number (`14`, or `14.0` as grpc-java reads JSON numbers). `OK` is accepted,
/// as grpc-go accepts it, and never retried: an OK answer is a success.
pub(super) fn status_code(value: &Value, at: &str) -> Result<u8> {
    let code = match value {
        Value::String(name) => by_name(name),
        Value::Number(_) => whole_number(value).filter(|n| *n <= 16).map(|n| code_number(n as i64)),
        _ => None,
    };
    code.ok_or_else(|| ServiceConfigError::new(at, format!("not a gRPC status code: {value}")))
}

/// A JSON number that is a whole number at or above 0: `3`, or `3.0` (gRPC's
/// Java and C++ read every JSON number as a double and accept integral ones).
pub(super) fn whole_number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            // 2^53: above it a double no longer holds every whole number.
            .filter(|f| f.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(f))
            .map(|f| f as u64)
    })
}

/// A protobuf JSON `Duration`: decimal seconds with an `s` suffix (`"0.1s"`,
/// `".01s"`, `"120s"`), at most nine fractional digits.
pub(super) fn duration(value: &Value, at: &str) -> Result<Duration> {
    let bad = || ServiceConfigError::new(at, format!("must be a duration such as \"0.1s\", got {value}"));
    let text = value.as_str().ok_or_else(bad)?;
    let number = text.strip_suffix('s').ok_or_else(bad)?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty())
        || fraction.len() > 9
        || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let secs: u64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad())? };
    let nanos: u32 =
        if fraction.is_empty() { 0 } else { format!("{fraction:0<9}").parse().map_err(|_| bad())? };
    let d = Duration::new(secs, 0).checked_add(Duration::from_nanos(u64::from(nanos))).ok_or_else(bad)?;
    if d > MAX_DURATION {
        return Err(ServiceConfigError::new(at, format!("must be at most {MAX_DURATION:?}, got {text}")));
    }
    Ok(d)
}

pub(super) fn positive(d: Duration, at: &str) -> Result<Duration> {
    if d.is_zero() { Err(ServiceConfigError::new(at, "must be above 0")) } else { Ok(d) }
}

pub(super) fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>> {
    value.as_object().ok_or_else(|| ServiceConfigError::new(at, "must be a JSON object"))
}

pub(super) fn array<'a>(value: &'a Value, at: &str) -> Result<&'a Vec<Value>> {
    let items = value.as_array().ok_or_else(|| ServiceConfigError::new(at, "must be a JSON array"))?;
    if items.len() > MAX_ENTRIES {
        return Err(ServiceConfigError::new(at, format!("more than {MAX_ENTRIES} entries")));
    }
    Ok(items)
}

pub(super) fn required<'a>(map: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a Value> {
    let path = if at.is_empty() { key.to_owned() } else { format!("{at}.{key}") };
    map.get(key).ok_or_else(|| ServiceConfigError::new(path, "is required"))
}
