//! The value a builder refused: one type for every builder's `OutOfRange`
//! error, in a module of its own so that the settings' modules (the policy,
//! the budget, the breaker) need nothing of the engine's errors.

use std::fmt;
use std::time::Duration;

/// The value a builder refused, as it was given: what an `OutOfRange` error
/// ([`BreakerError`](crate::breaker::BreakerError),
/// [`BudgetError`](crate::budget::BudgetError)) carries beside the setting's
/// name.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum SettingValue {
    /// A duration (a window, a cool-down).
    Duration(Duration),
    /// A number (a ratio).
    Number(f64),
    /// A count (calls, probes, tokens).
    Count(u32),
}

impl fmt::Display for SettingValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingValue::Duration(d) => write!(f, "{d:?}"),
            SettingValue::Number(n) => write!(f, "{n}"),
            SettingValue::Count(c) => write!(f, "{c}"),
        }
    }
}
