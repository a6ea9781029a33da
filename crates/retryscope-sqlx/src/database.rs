//! A pool with its retry guards and telemetry: what every transaction and
//! statement run through it shares.

use crate::spans::Target;
use crate::statement::StatementBuilder;
use crate::telemetry_state::{Off, On};
use crate::transaction::TransactionBuilder;
use opentelemetry::metrics::Meter;
use retryscope::dependency::{Dependencies, DependenciesBuilder, Dependency};
use retryscope::{CircuitBreaker, Policy, RetryBudget};
use retryscope_config::ConfigHandle;
use retryscope_otel::{MeterChoice, OtelObserver, RetryLog};
use sqlx::PgPool;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// A PostgreSQL pool whose transactions and statements are retried when, and
/// only when, PostgreSQL says a retry can succeed (see
/// [`classify`](crate::classify) for the SQLSTATE table), with one
/// [`RetryBudget`] and one [`CircuitBreaker`] for the database, and the
/// OpenTelemetry database conventions on every attempt's span.
///
/// Create it once, after installing the OpenTelemetry providers (its
/// instruments bind to the providers global at that time), and clone it: the
/// clones share the pool, the guards and the instruments.
///
/// The database is one dependency, `retryscope.dependency` =
/// `host:port/database` (e.g. `127.0.0.1:5432/shop`), unless
/// [`dependency`](DatabaseBuilder::dependency) names it otherwise.
///
/// ```no_run
/// use retryscope::Policy;
/// use retryscope_sqlx::Database;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = sqlx::PgPool::connect("postgres://app:secret@127.0.0.1:5432/shop").await?;
/// let db = Database::new(pool);
/// let orders: i64 = db
///     .statement(Policy::interactive())
///     .operation("SELECT")
///     .idempotent()
///     .run(|conn| Box::pin(async move { sqlx::query_scalar("SELECT count(*) FROM orders").fetch_one(conn).await }))
///     .await?;
/// # let _ = orders;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Database {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    pub(crate) target: Target,
    pub(crate) guards: Arc<Dependency>,
    /// Keeps the budget and breaker gauges alive (they hold it weakly).
    _registry: Dependencies,
    pub(crate) observer: Option<OtelObserver>,
    /// The retry log on its own, when telemetry is off but the log is not.
    pub(crate) retry_log: Option<RetryLog>,
    /// The configuration each call's policy is resolved from (issue 35).
    pub(crate) config: Option<ConfigHandle>,
    /// The version of the file whose guard keys the database last said it
    /// does not apply (`u64::MAX`: none yet).
    pub(crate) warned_generation: AtomicU64,
}

impl Database {
    /// `pool`, with a default budget and breaker, instrumented through the
    /// global OpenTelemetry providers.
    pub fn new(pool: PgPool) -> Self {
        Self::builder(pool).build()
    }

    /// Configures a database.
    pub fn builder(pool: PgPool) -> DatabaseBuilder {
        DatabaseBuilder {
            pool,
            dependency: None,
            meter: MeterChoice::Global,
            retry_log: true,
            guards: Dependencies::builder().budget(RetryBudget::default).breaker(CircuitBreaker::default),
            config: None,
            telemetry: PhantomData,
        }
    }

    /// A transaction run under `policy`, replayed from the start on a
    /// conflict or a lost connection: see [`TransactionBuilder`].
    pub fn transaction(&self, policy: Policy) -> TransactionBuilder<'_> {
        TransactionBuilder::new(self, policy)
    }

    /// Work on one pooled connection outside a transaction (a statement, say)
    /// under `policy`: see [`StatementBuilder`].
    pub fn statement(&self, policy: Policy) -> StatementBuilder<'_> {
        StatementBuilder::new(self, policy)
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The dependency label the database is reported under.
    pub fn dependency(&self) -> &str {
        self.inner.guards.name()
    }
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Database")
            .field("dependency", &self.dependency())
            .field("budget", &self.inner.guards.budget().is_some())
            .field("breaker", &self.inner.guards.breaker().is_some())
            .field("telemetry", &self.inner.observer.is_some())
            .finish_non_exhaustive()
    }
}

/// Configures a [`Database`]. Its [telemetry state](crate::telemetry_state)
/// is `On` until [`no_telemetry`](Self::no_telemetry), after which the
/// setting that only telemetry reads is not offered, as on the HTTP builders:
///
/// ```compile_fail
/// use retryscope_sqlx::Database;
///
/// # fn demo(pool: sqlx::PgPool, meter: &opentelemetry::metrics::Meter) {
/// // No metrics are recorded at all: a meter could only be ignored.
/// let db = Database::builder(pool).no_telemetry().meter(meter);
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct DatabaseBuilder<T = On> {
    pool: PgPool,
    dependency: Option<String>,
    meter: MeterChoice,
    retry_log: bool,
    /// The database's guards: a budget and a breaker unless told otherwise.
    guards: DependenciesBuilder,
    config: Option<ConfigHandle>,
    telemetry: PhantomData<T>,
}

impl DatabaseBuilder<On> {
    /// Records metrics, and the budget and breaker gauges, with `meter`
    /// instead of the global meter provider's.
    pub fn meter(mut self, meter: &Meter) -> Self {
        self.meter = MeterChoice::Meter(meter.clone());
        self
    }

    /// Records no metrics and no spans. The retry log stays on (see
    /// [`no_retry_log`](Self::no_retry_log)).
    ///
    /// The setting that only telemetry reads (`meter`) is not offered after
    /// it: it could only be ignored, so setting it does not compile. Set
    /// before it, it is overridden by it, as any setting is by a later one.
    pub fn no_telemetry(self) -> DatabaseBuilder<Off> {
        DatabaseBuilder {
            pool: self.pool,
            dependency: self.dependency,
            meter: MeterChoice::Off,
            retry_log: self.retry_log,
            guards: self.guards,
            config: self.config,
            telemetry: PhantomData,
        }
    }
}

impl<T> DatabaseBuilder<T> {
    /// Reports the database as `name` (`retryscope.dependency`) instead of
    /// `host:port/database`. Keep it low-cardinality.
    pub fn dependency(mut self, name: impl Into<String>) -> Self {
        self.dependency = Some(name.into());
        self
    }

    /// Writes no retry log (`retryscope.backoff`, `retryscope.gave_up` events).
    pub fn no_retry_log(mut self) -> Self {
        self.retry_log = false;
        self
    }

    /// Gives the dependency — the database, one for the pool — a retry budget
    /// made by `make` (default: [`RetryBudget::default`]; any
    /// [`Budget`](retryscope::budget::Budget)); the same setting as the HTTP
    /// integrations' `budget_per_dependency`.
    pub fn budget_per_dependency<B: retryscope::budget::Budget + 'static>(
        mut self,
        make: impl Fn() -> B + Send + Sync + 'static,
    ) -> Self {
        self.guards = self.guards.budget(make);
        self
    }

    /// Retries without a budget: only the policy bounds them.
    pub fn no_budget(mut self) -> Self {
        self.guards = self.guards.no_budget();
        self
    }

    /// Gives the dependency — the database — a circuit breaker made by `make`
    /// (default: [`CircuitBreaker::default`]). Conflicts (`40001`, `40P01`) are not
    /// counted as failures: a busy database that answers is not down.
    pub fn breaker_per_dependency(
        mut self,
        make: impl Fn() -> CircuitBreaker + Send + Sync + 'static,
    ) -> Self {
        self.guards = self.guards.breaker(make);
        self
    }

    /// Calls the database however often it fails: no circuit breaker.
    pub fn no_breaker(mut self) -> Self {
        self.guards = self.guards.no_breaker();
        self
    }

    /// Takes each call's policy — attempts, backoff, jitter, attempt timeout,
    /// deadline — and kill switch from the configuration `handle` holds
    /// (`retryscope-config`, the same handle and file as the HTTP clients'
    /// `config`), resolved once per call from the snapshot in force when the
    /// call starts: a reload reaches the next call, never one in flight.
    ///
    /// The database is matched as an HTTP call to its host and port with no
    /// path: a dependency written `host = "db.internal"` (or
    /// `"db.internal:5432"`) is the database's; a rule with `path_prefix` or
    /// `service` never matches it; unmatched, the file's `defaults` apply.
    /// The file's policy replaces the one a call is made with
    /// ([`Database::transaction`], [`Database::statement`]); a call's
    /// `override_policy` wins over the file; the kill switch (`enabled =
    /// false`: one attempt) wins over both. Each attempt's span carries
    /// `retryscope.config.hash`.
    ///
    /// Applied to database calls: `attempts`, `backoff`, `jitter`,
    /// `attempt_timeout`, `deadline` and `enabled`. Not applied to them
    /// (they are HTTP settings, for the HTTP clients the same file serves,
    /// or — `budget`, `breaker` — the database keeps the builder's guards):
    /// `retry_statuses`, `body_rule`, `hedging`, `idempotency_keys`,
    /// `priority`, `fallback`, `budget`, `breaker`, `pacer`,
    /// `in_flight_budget`. Do not write them on a dependency only the
    /// database matches: the file cannot tell which clients match a rule, so
    /// it cannot refuse them there. The guard keys (`budget`, `breaker`,
    /// `pacer`, `in_flight_budget`) the database can tell: written on the
    /// dependency it matches, the first call under each version of the file
    /// logs a warning naming them.
    pub fn config(mut self, handle: ConfigHandle) -> Self {
        self.config = Some(handle);
        self
    }

    /// The database.
    pub fn build(self) -> Database {
        let target = Target::of(&self.pool);
        let (meter, observer, retry_log) = self.meter.observers(self.retry_log, false);
        let registry = self.guards.build();
        if let Some(meter) = &meter {
            retryscope_otel::publish_dependency_gauges(meter, &registry);
        }
        let guards = registry.get(self.dependency.as_deref().unwrap_or(&target.dependency));
        let inner = Inner {
            pool: self.pool,
            target,
            guards,
            _registry: registry,
            observer,
            retry_log,
            config: self.config,
            warned_generation: AtomicU64::new(u64::MAX),
        };
        Database { inner: Arc::new(inner) }
    }
}

impl<T> fmt::Debug for DatabaseBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseBuilder")
            .field("dependency", &self.dependency)
            .field("meter", &self.meter)
            .field("retry_log", &self.retry_log)
            .field("guards", &self.guards)
            .field("config", &self.config.is_some())
            .finish_non_exhaustive()
    }
}
