//! A dependency as a value ([`Dependency`]: its name and its guards), put on
//! a call with one setter ([`Retry::dependency`](crate::Retry::dependency),
//! which takes a [`DependencyRef`]); the registry a client keeps of them,
//! made on first use ([`Dependencies`]); and the bounded table of dependency
//! names ([`bounded_dependency`]).
//!
//! Nothing here knows of telemetry: retryscope-otel publishes the guards'
//! gauges by reading a registry ([`Dependencies::live`],
//! [`Dependencies::guard_gauges`]), so a worker, a database client or a
//! configuration has guards without OpenTelemetry.

mod bounded;
mod builder;
mod gauges;
mod guards;
mod overflow;
mod registry;
mod value;

pub use bounded::{MAX_DEPENDENCIES, NameTable, OVERFLOW, bounded_dependency, dependency_name};
pub use builder::DependenciesBuilder;
pub(crate) use guards::Permits;
pub use registry::Dependencies;
pub use value::{Dependency, DependencyRef};
