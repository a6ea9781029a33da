//! Bounded attribute values, built without allocating on the hot path.

use crate::names;
use opentelemetry::KeyValue;
use retryscope::ErrorType;
use retryscope::dependency::{MAX_DEPENDENCIES, NameTable, bounded_dependency};
use std::cell::Cell;
use std::sync::LazyLock;
use std::thread::LocalKey;

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

/// Calls `$record` with the common attributes of `$common` followed by
/// `$extra` (`key => value` pairs, made with [`attr`]), as one array on the
/// stack: metric calls take `&[KeyValue]`, and a `Vec` would allocate on every
/// record. The `$extra` expressions are evaluated once, in whichever arm runs.
///
/// The array is not dropped: each of its keys and values is borrowed for the
/// life of the process or a number ([`Common`]'s labels, [`attr`]'s), so it
/// owns nothing, and its drop glue only walked every value's variants to find
/// that out (some 350 instructions a call, over a call's three records).
macro_rules! with_attrs {
    ($common:expr, [$($key:expr => $value:expr),* $(,)?], $record:expr) => {{
        let common: &$crate::labels::Common = $common;
        match common.operation_kv() {
            Some(operation) => ($record)(
                &(*::std::mem::ManuallyDrop::new([
                    common.dependency_kv(),
                    operation,
                    $($crate::labels::attr($key, $value)),*
                ]))[..],
            ),
            None => ($record)(
                &(*::std::mem::ManuallyDrop::new([
                    common.dependency_kv(),
                    $($crate::labels::attr($key, $value)),*
                ]))[..],
            ),
        }
    }};
}
pub(crate) use with_attrs;

/// A metric attribute's value that owns nothing: a string borrowed for the
/// life of the process, or a number ([`with_attrs`] does not drop its
/// attributes).
pub(crate) enum Borrowed {
    Str(&'static str),
    Int(i64),
}

impl From<&'static str> for Borrowed {
    fn from(value: &'static str) -> Self {
        Self::Str(value)
    }
}

impl From<i64> for Borrowed {
    fn from(value: i64) -> Self {
        Self::Int(value)
    }
}

/// `key = value`, an attribute that owns nothing (see [`with_attrs`]).
#[inline]
pub(crate) fn attr(key: &'static str, value: impl Into<Borrowed>) -> KeyValue {
    match value.into() {
        Borrowed::Str(value) => KeyValue::new(key, value),
        Borrowed::Int(value) => KeyValue::new(key, value),
    }
}

/// `name` as a `retryscope.operation` label, bounded like dependency names
/// ([`bounded_dependency`]) by a table of its own: the first
/// [`MAX_DEPENDENCIES`] names of the process are kept, the rest are `_OTHER`.
/// A telemetry label only (the engine keeps no state per operation), so the
/// table is this crate's; the integrations bound the names they set with it.
///
/// ```
/// let label = retryscope_otel::bounded_operation("GetOrder");
/// assert_eq!(label, "GetOrder");
/// ```
pub fn bounded_operation(name: &str) -> &'static str {
    static OPERATIONS: LazyLock<NameTable> = LazyLock::new(|| NameTable::new(MAX_DEPENDENCIES));
    OPERATIONS.intern(name)
}

/// The common attributes of one operation: `retryscope.dependency` and, when set,
/// `retryscope.operation`. Both go through the process-wide bounded tables, so a
/// name seen before costs a lookup and no allocation, and no more than
/// [`MAX_DEPENDENCIES`](retryscope::dependency::MAX_DEPENDENCIES) values (plus `_OTHER`) of each
/// are ever reported; each record then borrows them (the tables keep them
/// for the life of the process: [`NameTable`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Common {
    dependency: &'static str,
    operation: Option<&'static str>,
}

impl Common {
    pub(crate) fn new(dependency: &str, operation: Option<&str>) -> Self {
        Self {
            dependency: recently_interned(&LAST_DEPENDENCY, dependency, bounded_dependency),
            operation: operation.map(|name| recently_interned(&LAST_OPERATION, name, bounded_operation)),
        }
    }

    pub(crate) fn dependency(&self) -> &str {
        self.dependency
    }

    pub(crate) fn operation(&self) -> Option<&str> {
        self.operation
    }

    /// `retryscope.dependency`: a borrowed value, nothing to count or drop
    /// (and not dropped: [`with_attrs`]).
    pub(crate) fn dependency_kv(&self) -> KeyValue {
        KeyValue::new(names::DEPENDENCY, self.dependency)
    }

    /// `retryscope.operation`, when the operation is named.
    pub(crate) fn operation_kv(&self) -> Option<KeyValue> {
        self.operation.map(|operation| KeyValue::new(names::OPERATION, operation))
    }
}

thread_local! {
    /// The last dependency label this thread interned: a client calls the
    /// same dependency call after call, and comparing with the last name is
    /// cheaper than the shared table's lock and hash (without these two, a
    /// call with the SDK cost some 370 instructions more over HTTP and 760
    /// over gRPC, which also names its operation: scripts/wholecall.sh).
    /// Names are never evicted from the table, so a name it admitted once
    /// stays admitted.
    static LAST_DEPENDENCY: Cell<Option<&'static str>> = const { Cell::new(None) };
    /// The same for operation names.
    static LAST_OPERATION: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// `name`'s label through `intern`, or the label this thread saw last if the
/// name is the same. Only names admitted as themselves are remembered
/// (`_OTHER` for a name beyond the cap is looked up each time, as the table
/// answers it).
fn recently_interned(
    last: &'static LocalKey<Cell<Option<&'static str>>>,
    name: &str,
    intern: fn(&str) -> &'static str,
) -> &'static str {
    last.with(|cell| {
        // The engine hands out the table's own name call after call (a
        // registry's dependency), and a label is never freed: the same
        // address and length are the same name, with nothing to compare.
        if let Some(label) = cell.get()
            && (std::ptr::eq(label.as_ptr(), name.as_ptr()) && label.len() == name.len() || label == name)
        {
            return label;
        }
        let label = intern(name);
        if label == name {
            cell.set(Some(label));
        }
        label
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_seen_last_is_the_same_interned_name_and_others_are_looked_up() {
        let first = Common::new("labels-test-a", Some("op-a"));
        let again = Common::new("labels-test-a", Some("op-a"));
        assert!(std::ptr::eq(first.dependency, again.dependency));
        let other = Common::new("labels-test-b", None);
        assert_eq!((other.dependency(), other.operation()), ("labels-test-b", None));
        let back = Common::new("labels-test-a", Some("op-a"));
        assert!(std::ptr::eq(first.dependency, back.dependency), "the table's own name");
        assert_eq!(back.operation(), Some("op-a"));
    }

    #[test]
    fn the_common_attributes_come_first_and_the_operation_only_when_named() {
        let named = Common::new("db", Some("load"));
        let seen = with_attrs!(&named, ["x" => 1_i64], |attrs: &[KeyValue]| attrs.to_vec());
        assert_eq!(
            seen,
            [
                KeyValue::new(names::DEPENDENCY, "db"),
                KeyValue::new(names::OPERATION, "load"),
                KeyValue::new("x", 1)
            ]
        );
        let unnamed = Common::new("db", None);
        let seen = with_attrs!(&unnamed, [], |attrs: &[KeyValue]| attrs.to_vec());
        assert_eq!(seen, [KeyValue::new(names::DEPENDENCY, "db")]);
    }

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
}
