//! Bounded attribute values, built without allocating on the hot path.

use crate::dependency::{bounded_dependency, bounded_operation};
use crate::names;
use opentelemetry::KeyValue;
use retryscope::ErrorType;
use std::sync::Arc;

/// The `error.type` value for a status code outside 100..=599.
pub(crate) const OTHER: &str = "_OTHER";

/// The first status code with a precomputed name.
const FIRST_STATUS: u16 = 100;
/// How many status codes have a precomputed name (100..=599).
const STATUS_COUNT: usize = 500;

/// "100" ..= "599" as ASCII digits, built at compile time so that reporting a
/// status costs a table lookup instead of a `String` per failure.
static STATUS_DIGITS: [[u8; 3]; STATUS_COUNT] = status_digits();

const fn status_digits() -> [[u8; 3]; STATUS_COUNT] {
    let mut table = [[0u8; 3]; STATUS_COUNT];
    let mut i = 0;
    while i < STATUS_COUNT {
        let code = FIRST_STATUS as usize + i;
        table[i] = [b'0' + (code / 100) as u8, b'0' + (code / 10 % 10) as u8, b'0' + (code % 10) as u8];
        i += 1;
    }
    table
}

/// The bounded `error.type` string for `error`.
///
/// A status in 100..=599 is its code (`"503"`); any other status is `_OTHER`, so a
/// misbehaving server cannot create new series. Kinds are `&'static str` chosen by
/// code, bounded by construction, and used as they are.
pub fn error_type_str(error: ErrorType) -> &'static str {
    match error {
        ErrorType::Kind(kind) => kind,
        ErrorType::Status(code) => code
            .checked_sub(FIRST_STATUS)
            .and_then(|i| STATUS_DIGITS.get(usize::from(i)))
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .unwrap_or(OTHER),
        // A kind of error type this crate does not know yet: bounded, never a new series.
        _ => OTHER,
    }
}

/// An attempt number as an attribute value, clamped to `1..=max_attempts` so the
/// attribute can never take more values than the policy allows attempts.
pub(crate) fn attempt_value(number: u32, max_attempts: u32) -> i64 {
    i64::from(number.clamp(1, max_attempts.max(1)))
}

/// A fixed-capacity attribute list on the stack: metric calls take `&[KeyValue]`,
/// and collecting into a `Vec` would allocate on every record.
pub(crate) struct Attrs<const N: usize> {
    items: [KeyValue; N],
    len: usize,
}

impl<const N: usize> Attrs<N> {
    /// An empty list. The placeholders are static strings: no allocation.
    pub(crate) fn new() -> Self {
        Self { items: std::array::from_fn(|_| KeyValue::new("", "")), len: 0 }
    }

    /// Appends `kv`. Capacities are chosen per call site so this never overflows;
    /// if it ever did, the attribute is dropped rather than panicking in a caller's
    /// request path.
    pub(crate) fn push(&mut self, kv: KeyValue) {
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = kv;
            self.len += 1;
        }
    }

    /// The attributes pushed so far.
    pub(crate) fn as_slice(&self) -> &[KeyValue] {
        &self.items[..self.len]
    }
}

/// The common attributes of one operation: `retryscope.dependency` and, when set,
/// `retryscope.operation`. Both go through the process-wide bounded tables, so a
/// name seen before costs a lookup and no allocation, and no more than
/// [`MAX_DEPENDENCIES`](crate::MAX_DEPENDENCIES) values (plus `_OTHER`) of each
/// are ever reported; each record then clones them, a reference-count increment.
#[derive(Debug, Clone)]
pub(crate) struct Common {
    dependency: Arc<str>,
    operation: Option<Arc<str>>,
}

impl Common {
    pub(crate) fn new(dependency: &str, operation: Option<&str>) -> Self {
        Self { dependency: bounded_dependency(dependency), operation: operation.map(bounded_operation) }
    }

    pub(crate) fn dependency(&self) -> &str {
        &self.dependency
    }

    pub(crate) fn operation(&self) -> Option<&str> {
        self.operation.as_deref()
    }

    /// A list holding the common attributes, with room for `N` in all.
    pub(crate) fn attrs<const N: usize>(&self) -> Attrs<N> {
        let mut attrs = Attrs::new();
        attrs.push(KeyValue::new(names::DEPENDENCY, self.dependency.clone()));
        if let Some(operation) = &self.operation {
            attrs.push(KeyValue::new(names::OPERATION, operation.clone()));
        }
        attrs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_in_range_are_their_code() {
        assert_eq!(error_type_str(ErrorType::Status(100)), "100");
        assert_eq!(error_type_str(ErrorType::Status(503)), "503");
        assert_eq!(error_type_str(ErrorType::Status(599)), "599");
        for code in 100..=599u16 {
            assert_eq!(error_type_str(ErrorType::Status(code)), code.to_string());
        }
    }

    #[test]
    fn statuses_out_of_range_are_other() {
        for code in [0, 1, 99, 600, 999, u16::MAX] {
            assert_eq!(error_type_str(ErrorType::Status(code)), "_OTHER");
        }
    }

    #[test]
    fn kinds_are_used_as_is() {
        assert_eq!(error_type_str(ErrorType::TIMEOUT), "timeout");
        assert_eq!(error_type_str(ErrorType::Kind("connect")), "connect");
    }

    #[test]
    fn attempts_are_clamped() {
        assert_eq!(attempt_value(1, 3), 1);
        assert_eq!(attempt_value(3, 3), 3);
        assert_eq!(attempt_value(9, 3), 3);
        assert_eq!(attempt_value(0, 3), 1);
        assert_eq!(attempt_value(2, 0), 1);
    }

    #[test]
    fn attrs_never_overflow() {
        let mut attrs = Attrs::<1>::new();
        attrs.push(KeyValue::new("a", 1));
        attrs.push(KeyValue::new("b", 2));
        assert_eq!(attrs.as_slice(), &[KeyValue::new("a", 1)]);
    }
}
