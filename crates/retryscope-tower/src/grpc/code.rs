//! gRPC status codes: their names (the `error.type` and retry-reason values)
//! and sets of them.

use std::fmt;
use tonic::Code;

/// The canonical names, indexed by code number, as gRPC and the OpenTelemetry
/// conventions spell them: the engine's one list.
use retryscope::classify::GRPC_CODE_NAMES as NAMES;

/// The status a response carries, as a bounded number: a code outside
/// `0..=16` is `UNKNOWN`, as gRPC clients treat it.
pub(crate) fn code_number(code: i64) -> u8 {
    u8::try_from(code).ok().filter(|c| usize::from(*c) < NAMES.len()).unwrap_or(Code::Unknown as u8)
}

/// The name of a code number from [`code_number`].
pub(crate) fn name(code: u8) -> &'static str {
    NAMES.get(usize::from(code)).copied().unwrap_or("UNKNOWN")
}

/// The code named `name`, in any case (`"UNAVAILABLE"`, `"unavailable"`:
/// A6's "case-insensitive string form"), if it is one.
pub(crate) fn by_name(name: &str) -> Option<u8> {
    NAMES.iter().position(|n| n.eq_ignore_ascii_case(name)).and_then(|i| u8::try_from(i).ok())
}

/// A set of status codes: the retryable ones.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct CodeSet(u32);

impl CodeSet {
    /// No code.
    pub const EMPTY: CodeSet = CodeSet(0);

    /// `UNAVAILABLE` only: gRPC's usual retryable set.
    pub const UNAVAILABLE: CodeSet = CodeSet(1 << Code::Unavailable as u32);

    /// The set of `codes`.
    pub fn of(codes: impl IntoIterator<Item = Code>) -> Self {
        codes.into_iter().fold(Self::EMPTY, |set, code| set.with(code as u8))
    }

    pub(crate) fn with(self, code: u8) -> Self {
        Self(self.0 | 1u32.checked_shl(u32::from(code)).unwrap_or(0))
    }

    /// Whether `code` is in the set.
    pub fn contains(self, code: Code) -> bool {
        self.contains_number(code as u8)
    }

    pub(crate) fn contains_number(self, code: u8) -> bool {
        self.0 & 1u32.checked_shl(u32::from(code)).unwrap_or(0) != 0
    }

    /// Whether the set has no code.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for CodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = (0u8..17).filter(|c| self.contains_number(*c)).map(name);
        f.debug_set().entries(names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_tonic_codes() {
        for n in 0..17i32 {
            let code = Code::from(n);
            assert_eq!(code as i32, n);
            assert_eq!(by_name(name(code as u8)), Some(code as u8));
        }
        assert_eq!(name(Code::Unavailable as u8), "UNAVAILABLE");
        assert_eq!(name(Code::ResourceExhausted as u8), "RESOURCE_EXHAUSTED");
        assert_eq!(by_name("unavailable"), Some(14));
        assert_eq!(by_name("Resource_Exhausted"), Some(8));
        assert_eq!(by_name("UNAVAILABLE "), None);
    }

    #[test]
    fn unknown_numbers_are_unknown() {
        for n in [-1, 17, 99, i64::MAX] {
            assert_eq!(name(code_number(n)), "UNKNOWN");
        }
    }

    #[test]
    fn sets_hold_what_was_put_in() {
        let set = CodeSet::of([Code::Unavailable, Code::Aborted]);
        assert!(set.contains(Code::Unavailable) && set.contains(Code::Aborted));
        assert!(!set.contains(Code::Ok) && !set.contains(Code::ResourceExhausted));
        assert_eq!(format!("{set:?}"), r#"{"ABORTED", "UNAVAILABLE"}"#);
    }
}
