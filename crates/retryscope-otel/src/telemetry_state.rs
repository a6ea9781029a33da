//! Whether an integration's builder still records telemetry: its type
//! parameter, `On` unless `no_telemetry()` was called. The settings that only
//! telemetry reads exist in `On` alone, so that a setting which could only be
//! ignored does not compile. One pair of types for every integration
//! (`retryscope-reqwest`, `retryscope-tower`, `retryscope-sqlx`), each of which
//! re-exports it.

/// Telemetry on (the default): every telemetry setting is offered.
#[derive(Debug, Clone, Copy, Default)]
pub struct On;

/// After `no_telemetry()`: no metrics and no spans, so no setting about them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Off;
