//! The builder settings every integration offers (their setters, written
//! once, are in `setters.rs`).

use crate::body_rule::SharedBodyRule;
use crate::configured::NamedBodyRules;
use crate::fallback::FallbackSettings;
use crate::idempotency::IdempotencyKeys;
use crate::rule::SharedRule;
use http::HeaderName;
use retryscope::classify::HttpClassifier;
use retryscope::dependency::{Dependencies, DependenciesBuilder};
use retryscope::overload::AdaptiveThrottle;
use retryscope::{CircuitBreaker, Pacer, RetryBudget};
use retryscope_otel::{ATTEMPT_HEADER, MeterChoice, REQUEST_ID_HEADER};
use std::fmt;

/// The settings every retryscope HTTP builder shares: statuses and rules,
/// the guards each dependency gets and their fleet shares, telemetry,
/// headers, hedging, idempotency keys, fallbacks and a configuration file.
///
/// Why public: it is what a builder hands to the shared setter traits
/// ([`WithClientSettings`](crate::WithClientSettings),
/// [`WithTelemetry`](crate::WithTelemetry),
/// [`WithHttpSettings`](crate::WithHttpSettings)) through
/// [`HasClientSettings`](crate::HasClientSettings), as opentelemetry-otlp's
/// `ExportConfig` is to its `HasExportConfig`/`WithExportConfig`. A
/// third-party builder keeps one (start from [`Default`]) and gets every
/// setter, with the same names, defaults and meaning as
/// `retryscope-reqwest`'s and `retryscope-tower`'s builders. Its fields are
/// private: the setters are the one way to change it, so a setting can be
/// added in a minor release; reading it back to run calls is the
/// integrations' machinery, not part of the public API.
///
/// The default: a [`RetryBudget`], a [`CircuitBreaker`] and a [`Pacer`] per
/// dependency, the global meter provider, the retry log on, the
/// [`retry-attempt`](ATTEMPT_HEADER) header, and nothing else.
///
/// ```
/// use retryscope_http::{ClientSettings, HasClientSettings, WithClientSettings};
///
/// /// A third-party client's builder, with retryscope's shared setters.
/// #[derive(Debug, Default)]
/// struct MyBuilder {
///     settings: ClientSettings,
/// }
///
/// impl HasClientSettings for MyBuilder {
///     fn client_settings(&self) -> &ClientSettings {
///         &self.settings
///     }
///     fn client_settings_mut(&mut self) -> &mut ClientSettings {
///         &mut self.settings
///     }
/// }
///
/// let builder = MyBuilder::default().no_breaker().no_retry_log();
/// # let _ = builder;
/// ```
#[derive(Clone)]
pub struct ClientSettings {
    /// Which statuses are retried.
    pub(crate) classifier: HttpClassifier,
    /// The user's own rule for responses, asked before `classifier`.
    pub(crate) rule: Option<SharedRule>,
    /// The user's rule that reads selected bodies, asked before `rule`.
    pub(crate) body_rule: Option<SharedBodyRule>,
    /// Body rules registered by name, that a configuration file selects per
    /// dependency (`body_rule = "name"`).
    pub(crate) body_rules: NamedBodyRules,
    /// Where the metrics go.
    pub(crate) telemetry: MeterChoice,
    /// Whether the retry log is written: on unless turned off itself, whatever
    /// `telemetry` says.
    pub(crate) retry_log: bool,
    /// Whether each call gets an INTERNAL operation span over its attempts
    /// ([`OtelObserver::with_operation_spans`](retryscope_otel::OtelObserver::with_operation_spans)); off: attempts hang under the
    /// caller's span.
    pub(crate) operation_spans: bool,
    /// What each dependency gets — its budget, breaker, pacer, concurrency
    /// limit, further guards, fleet shares and hedging template — as the
    /// engine's registry builder: the template of the client's own registry
    /// and of each one a configuration file's dependency gets (one list of
    /// guards, the engine's).
    pub(crate) dependencies: DependenciesBuilder,
    /// Makes each dependency's client-side adaptive throttle; `None` (the
    /// default) rejects nothing locally. Kept apart from `dependencies`'s
    /// guards, which it joins (after them) when the client is built, so
    /// that `no_adaptive_throttle` can take it back out.
    pub(crate) adaptive_throttle: Option<std::sync::Arc<dyn Fn() -> AdaptiveThrottle + Send + Sync>>,
    /// Tells the next hop which attempt a retry is; `None` sends nothing.
    pub(crate) attempt_header: Option<HeaderName>,
    /// The request header the retry log's `request_id` is read from.
    pub(crate) request_id_header: HeaderName,
    /// Retry only where no other layer of the call chain retries.
    pub(crate) one_layer: bool,
    /// Which header carries idempotency keys, and whether requests without
    /// one get one.
    pub(crate) idempotency: IdempotencyKeys,
    /// The fallbacks registered, and which dependency uses which; none by
    /// default.
    pub(crate) fallbacks: FallbackSettings,
    // retryscope-config (issue 35): its block.
    /// Per-dependency settings from a file, resolved per call
    /// (`CallConfig`); `None`: the builder's settings only.
    pub(crate) config: Option<retryscope_config::ConfigHandle>,
    /// Whether the builder was given a hedging template (`hedge`): with a
    /// file, hedging is the file's alone, and the build says so.
    pub(crate) hedge_template: bool,
}

/// What the integrations' builders read and set beyond the shared setters:
/// hidden, not covered by semver.
impl ClientSettings {
    /// Retries at one layer only (`retry_at_one_layer`, an integration's own
    /// setter).
    #[doc(hidden)]
    pub fn set_one_layer(&mut self) {
        self.one_layer = true;
    }

    /// Changes what each dependency gets (its guards, their shares, its
    /// hedging template): `change` is given the registry builder and
    /// returns it changed.
    #[doc(hidden)]
    pub fn dependencies(&mut self, change: impl FnOnce(DependenciesBuilder) -> DependenciesBuilder) {
        let template = std::mem::replace(&mut self.dependencies, Dependencies::builder());
        self.dependencies = change(template);
    }
}

impl Default for ClientSettings {
    /// A default budget, breaker and pacer per dependency, global telemetry, the
    /// [`retry-attempt`](ATTEMPT_HEADER) header.
    fn default() -> Self {
        Self {
            classifier: HttpClassifier::new(),
            rule: None,
            body_rule: None,
            body_rules: NamedBodyRules::default(),
            telemetry: MeterChoice::Global,
            retry_log: true,
            operation_spans: false,
            dependencies: Dependencies::builder()
                .budget(RetryBudget::default)
                .breaker(CircuitBreaker::default)
                .pacer(Pacer::new),
            adaptive_throttle: None,
            attempt_header: Some(ATTEMPT_HEADER),
            request_id_header: REQUEST_ID_HEADER,
            one_layer: false,
            idempotency: IdempotencyKeys::default(),
            fallbacks: FallbackSettings::default(),
            config: None,
            hedge_template: false,
        }
    }
}

impl fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSettings")
            .field("classifier", &self.classifier)
            .field("rule", &self.rule)
            .field("body_rule", &self.body_rule)
            .field("body_rules", &self.body_rules)
            .field("telemetry", &self.telemetry)
            .field("retry_log", &self.retry_log)
            .field("operation_spans", &self.operation_spans)
            .field("dependencies", &self.dependencies)
            .field("adaptive_throttle", &self.adaptive_throttle.is_some())
            .field("attempt_header", &self.attempt_header)
            .field("request_id_header", &self.request_id_header)
            .field("one_layer", &self.one_layer)
            .field("idempotency", &self.idempotency)
            .field("fallbacks", &self.fallbacks)
            .field("config", &self.config)
            .finish()
    }
}
