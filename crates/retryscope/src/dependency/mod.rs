//! A dependency and its guards, kept per client: the bounded table of
//! dependency names ([`bounded_dependency`]), one set of [`Guards`] per
//! dependency ([`DependencyGuards`]), and how a set is put on a call
//! ([`Guards::guard`]).
//!
//! Nothing here knows of telemetry: retryscope-otel publishes the guards'
//! gauges by reading a registry ([`DependencyGuards::live`],
//! [`DependencyGuards::guard_gauges`]), so a worker, a database client or a
//! configuration has guards without OpenTelemetry.

mod bounded;
mod builder;
mod guards;
mod overflow;
mod registry;

pub use bounded::{
    MAX_DEPENDENCIES, MAX_DESTINATIONS, NameTable, OVERFLOW, bounded_dependency, bounded_destination,
    bounded_operation, dependency_name,
};
pub use builder::DependencyGuardsBuilder;
pub use guards::{Guardable, Guards};
pub use registry::{DependencyGuards, Factory, MAX_PORTS_PER_HOST, and_guard};
