//! Why a [`PolicyBuilder`](super::PolicyBuilder) refused its settings.

use super::Jitter;
use crate::setting::SettingValue;
use std::fmt;
use std::time::Duration;

/// Why a [`PolicyBuilder`](super::PolicyBuilder) refused its settings.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PolicyError {
    /// `max_attempts` was 0: not even the first attempt could run.
    ZeroAttempts,
    /// A setting was outside what it accepts, in the shape every builder's
    /// refusal has ([`SettingError`](crate::SettingError) of the guards),
    /// with the bound it was checked against: a duration must be above zero
    /// and at most `limit` ([`MAX_DURATION`](super::MAX_DURATION), or [`MAX_JOB_DURATION`](super::MAX_JOB_DURATION) for a job
    /// policy); `multiplier` must be finite and above `limit` (0).
    OutOfRange {
        /// The setting's name, as its builder method spells it.
        setting: &'static str,
        /// The value given.
        value: SettingValue,
        /// The bound it was checked against.
        limit: SettingValue,
    },
    /// The base delay was longer than the cap.
    BaseAboveCap {
        /// The base delay given.
        base: Duration,
        /// The cap given.
        cap: Duration,
    },
    /// A jitter parameter was negative, infinite or NaN.
    Jitter(Jitter),
}

impl PolicyError {
    /// The refusal of a duration `setting`, given `value`, checked against `limit`.
    pub(super) const fn out_of_range(setting: &'static str, value: Duration, limit: Duration) -> Self {
        Self::OutOfRange {
            setting,
            value: SettingValue::Duration(value),
            limit: SettingValue::Duration(limit),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::ZeroAttempts => f.write_str("max_attempts must be at least 1"),
            PolicyError::OutOfRange { setting: "multiplier", value, limit } => {
                write!(f, "multiplier must be a finite number above {limit}, got {value}")
            }
            PolicyError::OutOfRange { setting, value, limit } => {
                write!(f, "{setting} must be above zero and at most {limit}, got {value}")
            }
            PolicyError::BaseAboveCap { base, cap } => {
                write!(f, "base_delay ({base:?}) must not exceed max_delay ({cap:?})")
            }
            PolicyError::Jitter(j) => {
                write!(f, "jitter parameter must be finite and non-negative, got {j:?}")
            }
        }
    }
}

impl std::error::Error for PolicyError {}
