//! A refused setting: the value a builder refused ([`SettingValue`], also in
//! the policy's own error) and the one error of the guards' and hedging's
//! builders ([`SettingError`]), in a module of their own so that the settings'
//! modules (the policy, the budget, the breaker) need nothing of the engine's
//! errors.

use std::fmt;
use std::time::Duration;

/// The value a builder refused, as it was given: what a [`SettingError`] and
/// a [`PolicyError`](crate::PolicyError) carry beside the setting's name.
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

/// A setting a builder refused as out of range: the breaker's, the budgets'
/// (retry budget, token bucket, retry quota, in-flight budget), the overload
/// guards' (adaptive throttle, concurrency limits) and hedging's. What each
/// setting accepts is in its builder's docs, and in the message. (The policy
/// builder has its own [`PolicyError`](crate::PolicyError), whose refusals
/// also relate settings to one another; `retryscope-config`'s `ConfigError`
/// reports a configuration's errors and keeps this one as its source.)
///
/// ```
/// use retryscope::{RetryBudget, SettingValue};
///
/// let refused = RetryBudget::builder().ratio(1.5).build().unwrap_err();
/// assert_eq!((refused.setting(), refused.value()), ("ratio", SettingValue::Number(1.5)));
/// assert_eq!(refused.to_string(), "retry budget ratio must be within 0..=1, got 1.5");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SettingError {
    setting: &'static str,
    value: SettingValue,
    of: Of,
}

/// Whose setting a [`SettingError`] refused: each builder words its own message.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Of {
    Breaker,
    Budget,
    Overload,
    /// Hedging's settings say the range they were refused by.
    Hedge {
        min: SettingValue,
        max: SettingValue,
    },
}

impl SettingError {
    /// The breaker builder's refusal of `setting`, given `value`.
    pub(crate) const fn breaker(setting: &'static str, value: SettingValue) -> Self {
        Self { setting, value, of: Of::Breaker }
    }

    /// A budget builder's refusal of `setting`, given `value`.
    pub(crate) const fn budget(setting: &'static str, value: SettingValue) -> Self {
        Self { setting, value, of: Of::Budget }
    }

    /// An overload guard's builder's refusal of `setting`, given `value`.
    pub(crate) const fn overload(setting: &'static str, value: SettingValue) -> Self {
        Self { setting, value, of: Of::Overload }
    }

    /// The hedging builder's refusal of `setting`, given `value`, outside
    /// `min..=max` (for `quantile`, strictly between).
    pub(crate) const fn hedge(
        setting: &'static str,
        value: SettingValue,
        min: SettingValue,
        max: SettingValue,
    ) -> Self {
        Self { setting, value, of: Of::Hedge { min, max } }
    }

    /// The setting's name, as its builder method spells it.
    pub const fn setting(&self) -> &'static str {
        self.setting
    }

    /// The value given.
    pub const fn value(&self) -> SettingValue {
        self.value
    }
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (setting, value) = (self.setting, self.value);
        match self.of {
            Of::Breaker => crate::circuit::describe(setting, value, f),
            Of::Budget => crate::budget::describe(setting, value, f),
            Of::Overload => crate::overload::describe(setting, value, f),
            Of::Hedge { min, max } => crate::hedge::describe(setting, value, min, max, f),
        }
    }
}

impl std::error::Error for SettingError {}
