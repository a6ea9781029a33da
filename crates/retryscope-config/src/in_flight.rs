//! `in_flight_budget`: a dependency's cap on retries in flight, Envoy's retry
//! budget ([`InFlightBudget`]), from the file.
//!
//! ```toml
//! [dependencies.payments]
//! host = "payments.internal"
//! in_flight_budget = { share = 0.2, min = 3 }   # Envoy's defaults; `{}` says the same
//! ```
//!
//! Written, it gives the dependency an in-flight budget *beside* any guard
//! code gives it (`guard_per_dependency`); `enabled = false` gives it none
//! from the file (a guard code gives stays: the file cannot see inside it).

use crate::error::{ConfigError, ConfigErrorKind};
use crate::schema::InFlight;
use crate::settings::Refusal;
use retryscope::SettingError;
use retryscope::budget::InFlightBudget;

/// An in-flight budget's settings, checked when the file loaded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InFlightSettings {
    /// The share of the calls in progress that may have a retry out.
    pub share: f64,
    /// Retries always allowed out.
    pub min: u32,
}

impl Default for InFlightSettings {
    /// Envoy's: 20 %, at least 3.
    fn default() -> Self {
        Self { share: 0.2, min: 3 }
    }
}

impl InFlightSettings {
    /// A fresh budget with these settings.
    pub fn build(&self) -> Result<InFlightBudget, SettingError> {
        InFlightBudget::new(self.share, self.min)
    }

    /// The settings a block writes: `None` where it writes none or turns
    /// the budget off; refused where a value is out of range, whether or not
    /// the budget is on.
    pub(crate) fn of(written: Option<InFlight>) -> Result<Option<Self>, Refusal> {
        let Some(written) = written else { return Ok(None) };
        let default = Self::default();
        let settings =
            Self { share: written.share.unwrap_or(default.share), min: written.min.unwrap_or(default.min) };
        match settings.build() {
            Ok(_) => Ok((written.enabled != Some(false)).then_some(settings)),
            Err(e) => {
                let key = match e.setting() {
                    "min" => "in_flight_budget.min",
                    _ => "in_flight_budget.share",
                };
                let message = e.to_string();
                let error = ConfigError::new(ConfigErrorKind::OutOfRange, "", message).with_source(e);
                Err(Refusal { key, error: Box::new(error) })
            }
        }
    }

    /// Its part of the effective table's `budget` cell.
    pub(crate) fn cell(&self) -> String {
        format!("in_flight={}%/min={}", self.share * 100.0, self.min)
    }
}
