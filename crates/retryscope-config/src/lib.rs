//! Retry policies as configuration: one TOML or JSON file per service, with
//! `defaults` and named `dependencies`, each matched by host, `host:port`,
//! path prefix or gRPC service/method (or, for a job worker, by the job's
//! NATS `subject`), checked loudly when loaded (unknown
//! keys, values out of range, ambiguous matches, names code never
//! registered — each refused with the file, line and column), reloaded
//! live through a [`ConfigHandle`], with `enabled = false` as a kill switch
//! per dependency.
//!
//! Every setting maps onto the engine's own types ([`retryscope::Policy`],
//! [`retryscope::classify::HttpClassifier`], [`retryscope::hedge::HedgePolicy`]),
//! so the file accepts exactly what code accepts. A key no client applies
//! where it is written (an HTTP-only key on a gRPC dependency) is refused
//! ([`ConfigErrorKind::NotApplied`]), never accepted and ignored. The guide is
//! [docs/guide/configuration.md](https://github.com/retryscope/retryscope/blob/main/docs/guide/configuration.md);
//! the telemetry it adds (`retryscope.config.reloads`, `retryscope.config.active`,
//! `retryscope.config.hash`) is in
//! [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md),
//! and what to do when a reload is refused in
//! [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
//!
//! ```
//! use retryscope_config::{Config, Format, KnownNames, Target};
//!
//! let text = r#"
//! [defaults]
//! attempts = 3
//! deadline = "5s"
//!
//! [dependencies.payments]
//! host = "payments.internal"
//! attempts = 2
//!
//! [dependencies.search]
//! host = "search.internal"
//! enabled = false          # the kill switch: first attempts only
//! "#;
//! let config = Config::parse(text, Format::Toml, "service.toml", &KnownNames::new())?;
//! let payments = config.resolve(&Target::http("payments.internal", None, "/charge"));
//! assert_eq!(payments.policy().max_attempts(), 2);
//! let search = config.resolve(&Target::http("search.internal", None, "/q"));
//! assert_eq!(search.policy().max_attempts(), 1);
//! assert_eq!(config.resolve(&Target::http("other", None, "/")).policy().max_attempts(), 3);
//! # Ok::<(), retryscope_config::ConfigError>(())
//! ```

mod config;
mod duration;
mod error;
mod handle;
mod in_flight;
mod matcher;
mod names;
mod schema;
mod settings;
mod subject;

pub use config::{Config, ConfigHash, Format, MAX_DEPENDENCIES, MAX_FILE_BYTES, MAX_NAME_LEN};
pub use error::{ConfigError, ConfigErrorKind, Location};
pub use handle::{
    ACTIVE, CONFIG_ENV, ConfigHandle, ConfigHandleBuilder, HASH, MIN_POLL, RELOADS, RESULT, Reload, SETTLE,
    Watch,
};
pub use in_flight::InFlightSettings;
pub use matcher::Target;
pub use names::KnownNames;
pub use settings::{
    BreakerSettings, BudgetSettings, DependencySettings, GuardKeys, HedgeSettings, MAX_ATTEMPTS,
    PacerSettings,
};
