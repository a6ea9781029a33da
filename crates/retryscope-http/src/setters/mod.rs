//! The builders' shared setters, written once as default methods of public
//! extension traits, in the shape of opentelemetry-otlp's
//! `HasExportConfig`/`WithExportConfig`: each builder hands out its
//! [`ClientSettings`] through one public accessor trait
//! ([`HasClientSettings`]), and every builder that implements it has the
//! setters of the groups it belongs to. Users import the traits (each
//! integration re-exports them in its `prelude`).
//!
//! Three groups, by meaning:
//!
//! - [`WithClientSettings`]: what every builder has (HTTP and gRPC, telemetry
//!   on or off) — the retry log, the guards per dependency and their fleet
//!   shares, fallbacks, the configuration file;
//! - [`WithTelemetry`]: what only telemetry reads, for a builder whose
//!   telemetry is on ([`HasTelemetry`]): `no_telemetry` returns the builder in
//!   its `Off` state, where none of them exists, so that none can be set and
//!   then ignored;
//! - [`WithHttpSettings`]: what only HTTP semantics use ([`HasHttpSettings`]),
//!   which the gRPC builder does not implement.

mod client;
mod http;

pub use client::{WithClientSettings, WithTelemetry};
pub use http::WithHttpSettings;

use crate::settings::ClientSettings;

/// A builder that keeps [`ClientSettings`]: what it implements to get the
/// setters of [`WithClientSettings`] (a blanket implementation), and, with
/// [`HasTelemetry`] and [`HasHttpSettings`], those of [`WithTelemetry`] and
/// [`WithHttpSettings`].
///
/// Why public: so that a third party's builder (an integration with another
/// HTTP client) offers the same setters, names, defaults and meaning, as
/// opentelemetry-otlp's `HasExportConfig` does for its exporters. Two
/// accessors only: a setter added to the `With*` traits reaches every
/// implementor unchanged. [`ClientSettings`] has an example.
pub trait HasClientSettings: Sized {
    /// The settings, to read.
    fn client_settings(&self) -> &ClientSettings;
    /// The settings, to change.
    fn client_settings_mut(&mut self) -> &mut ClientSettings;
}

/// A builder whose telemetry is on (its [`telemetry_state::On`](crate::telemetry_state::On)):
/// what it implements to get the setters of [`WithTelemetry`].
///
/// Why public: as [`HasClientSettings`] is, for a third party's builder.
/// Why a trait of its own: [`WithTelemetry::no_telemetry`] returns the
/// builder in its `Off` state ([`TelemetryOff`](Self::TelemetryOff)), a type
/// where no telemetry setter exists, so that none can be set and then
/// ignored; only the builder knows that type.
pub trait HasTelemetry: HasClientSettings {
    /// The same builder with telemetry off (`telemetry_state::Off`).
    type TelemetryOff;
    /// The same builder and settings, in the `Off` state.
    fn telemetry_off(self) -> Self::TelemetryOff;
}

/// A builder of HTTP calls: what it implements to get the setters of
/// [`WithHttpSettings`], which a gRPC builder does not have.
///
/// Why public: as [`HasClientSettings`] is, for a third party's builder.
/// A marker: the settings are [`HasClientSettings`]'s; implementing it says
/// that the builder's calls have HTTP semantics (statuses, rules, the
/// attempt and request-id headers, hedging, idempotency keys).
pub trait HasHttpSettings: HasClientSettings {}
