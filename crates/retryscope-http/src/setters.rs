//! The builder setters of the shared settings ([`ClientSettings`](crate::settings::ClientSettings)),
//! written once as a macro every integration's builder expands
//! (`__private::shared_setters!`).

/// The setters of the shared settings, written once: expands, inside an
/// `impl` block of a builder with a `ClientSettings` field, to the setters of
/// the groups named.
///
/// - `telemetry`: `no_retry_log`, in every telemetry state;
/// - `telemetry_on => BuilderInOff`: `meter`, `no_telemetry`, `operation_spans`, in the
///   builder's `telemetry_state::On` impl only;
/// - `breaker`: `breaker_per_dependency`, `no_breaker`;
/// - `pacer`: `pacer_per_dependency`, `no_pacer`;
/// - `overload`: `adaptive_throttle_per_dependency`, `no_adaptive_throttle`,
///   `concurrency_limit_per_dependency`, `no_concurrency_limit`, `guard_per_dependency`;
/// - `fallback`: `fallback`, `fallback_for`, `default_fallback`, `fallback_names`;
/// - `config`: `config` (a retryscope-config handle);
/// - `http`: `classifier`, `retry_rule`, `retry_on_body`, `body_rule`, `body_rule_names`, `budget_per_dependency`, `no_budget`,
///   `attempt_header`, `no_attempt_header`, `request_id_header`, `hedge`,
///   `idempotency_keys`, `idempotency_key_header` — what only HTTP semantics use.
#[doc(hidden)]
#[macro_export]
macro_rules! __shared_setters {
    ($($field:ident).+ : telemetry) => {
        /// Writes no retry log: no `retryscope.backoff` event per retry and no
        /// `retryscope.gave_up` event per give-up, whether or not telemetry is on.
        pub fn no_retry_log(mut self) -> Self {
            self.$($field).+.retry_log = false;
            self
        }
    };
    // The settings that only mean something while telemetry is on, for the
    // builder's `telemetry_state::On` impl: `no_telemetry` returns the builder
    // in state `Off` ($off), where they do not exist, so that none of them can
    // be set and then ignored. The builder provides
    // `fn into_telemetry_state<U>(self) -> Builder<U>`.
    ($($field:ident).+ : telemetry_on => $off:ty) => {
        /// Records metrics, and each dependency's budget and breaker gauges,
        /// with `meter` instead of the global meter provider's.
        pub fn meter(mut self, meter: &$crate::__private::Meter) -> Self {
            self.$($field).+.telemetry = $crate::__private::MeterChoice::Meter(meter.clone());
            self
        }

        /// Records no metrics and no spans. The retry log stays on (see
        /// [`no_retry_log`](Self::no_retry_log)).
        ///
        /// The settings that only telemetry reads (`meter`, `operation_spans`
        /// and, on a gRPC layer, `grpc_metrics`) are not offered after it:
        /// they could only be ignored, so setting one does not compile. Set
        /// before it, they are overridden by it, as any setting is by a later one.
        pub fn no_telemetry(mut self) -> $off {
            self.$($field).+.telemetry = $crate::__private::MeterChoice::Off;
            self.$($field).+.operation_spans = false;
            self.into_telemetry_state()
        }

        /// Opens an INTERNAL operation span per call, with the call's attempts
        /// under it, instead of hanging the attempts under the caller's span
        /// (the default: a call that needs no retry costs one span). See
        /// `OtelObserver::with_operation_spans`.
        pub fn operation_spans(mut self) -> Self {
            self.$($field).+.operation_spans = true;
            self
        }

    };
    ($($field:ident).+ : breaker) => {
        /// Gives each dependency a circuit breaker made by `make` (default:
        /// [`CircuitBreaker::new`](retryscope::CircuitBreaker::new): open at
        /// 50 % failures over at least 20 calls in 10 s, 5 s cool-down).
        pub fn breaker_per_dependency(
            mut self,
            make: impl Fn() -> $crate::__private::CircuitBreaker + Send + Sync + 'static,
        ) -> Self {
            self.$($field).+.breaker = Some(::std::sync::Arc::new(make));
            self
        }

        /// Calls every dependency, however often it fails: no circuit breaker.
        pub fn no_breaker(mut self) -> Self {
            self.$($field).+.breaker = None;
            self
        }
    };
    ($($field:ident).+ : pacer) => {
        /// Gives each dependency a pacer made by `make` (default:
        /// [`Pacer::new`](retryscope::Pacer::new)): what one response says
        /// about pace — a `Retry-After` on a 429 or 503, a quota in
        /// `RateLimit` or `X-RateLimit-*` headers on any response — holds
        /// back every call to that dependency, not only the one that got it
        /// (see [`retryscope::pace`](retryscope::pace)).
        pub fn pacer_per_dependency(
            mut self,
            make: impl Fn() -> $crate::__private::Pacer + Send + Sync + 'static,
        ) -> Self {
            self.$($field).+.pacer = Some(::std::sync::Arc::new(make));
            self
        }

        /// Keeps no pace per dependency: each call honours only the hints of
        /// its own responses.
        pub fn no_pacer(mut self) -> Self {
            self.$($field).+.pacer = None;
            self
        }

        // --- fleet pacing (issue 38) ---
        /// Shares each dependency's pacer with the other replicas of a fleet
        /// through `share` (e.g. `retryscope-redis`'s `RedisPaceShare`): a gate
        /// one replica learns holds them all, and a quota is divided among
        /// the replicas that spend it (see
        /// [`retryscope::pace::PaceShare`](retryscope::pace::PaceShare)).
        /// Needs a pacer (the default); a dependency that never reported a
        /// limit costs the share nothing.
        pub fn pace_shared(
            mut self,
            share: ::std::sync::Arc<dyn $crate::__private::PaceShare>,
        ) -> Self {
            self.$($field).+.pace_share = Some(share);
            self
        }

        /// Divides each dependency's retry budget floor (`min_per_second`)
        /// among the live replicas of a fleet through `share` (e.g.
        /// `retryscope-redis`'s `RedisPaceShare`, the same object as
        /// `pace_shared`'s: one heartbeat), so that N replicas calling a
        /// dependency that is down retry at most `min_per_second` a second
        /// together, not N times that (see
        /// [`retryscope::budget::BudgetShare`](retryscope::budget::BudgetShare)).
        /// The ratio part of the budget needs no sharing: each replica's is
        /// already a share of its own requests. While the share cannot reach
        /// its store, `RedisPaceShare` keeps dividing by the fleet size it
        /// last read. With a configuration file (`config`), the budgets the
        /// file's guards make are shared too.
        ///
        /// # Errors
        ///
        /// [`NoBudgetToShare`](crate::NoBudgetToShare) when the builder keeps
        /// no budget (`no_budget()` was set): the share would be ignored. A
        /// later `no_budget()` drops the share with the budget.
        pub fn budget_shared(
            mut self,
            share: ::std::sync::Arc<dyn $crate::__private::BudgetShare>,
        ) -> ::std::result::Result<Self, $crate::NoBudgetToShare> {
            if self.$($field).+.budget.is_none() {
                return Err($crate::NoBudgetToShare);
            }
            self.$($field).+.budget_share = Some(share);
            Ok(self)
        }
    };
    ($($field:ident).+ : overload) => {
        /// Gives each dependency a client-side adaptive throttle made by
        /// `make` (the SRE book's, [`AdaptiveThrottle::new`](retryscope::overload::AdaptiveThrottle::new):
        /// `K` = 2 over two minutes): an attempt is rejected locally, never
        /// sent, with a probability that grows as the dependency accepts
        /// fewer of the client's requests (see
        /// [`retryscope::overload`](retryscope::overload)). Off by default.
        pub fn adaptive_throttle_per_dependency(
            mut self,
            make: impl Fn() -> $crate::__private::AdaptiveThrottle + Send + Sync + 'static,
        ) -> Self {
            self.$($field).+.adaptive_throttle = Some(::std::sync::Arc::new(make));
            self
        }

        /// Rejects nothing locally: no adaptive throttle (the default).
        pub fn no_adaptive_throttle(mut self) -> Self {
            self.$($field).+.adaptive_throttle = None;
            self
        }

        /// Gives each dependency an adaptive concurrency limit made by
        /// `make` (e.g. [`ConcurrencyLimiter::new`](retryscope::overload::ConcurrencyLimiter::new)
        /// of an [`Aimd`](retryscope::overload::Aimd) or a
        /// [`Gradient2`](retryscope::overload::Gradient2)): every attempt
        /// takes a slot and gives it back with its round trip; one that finds
        /// the limit full waits up to the limiter's `max_wait`, then is not
        /// sent (see [`retryscope::overload`](retryscope::overload)). Off by
        /// default. Mark a request sheddable with the
        /// [`Priority`](retryscope::overload::Priority) request extension.
        pub fn concurrency_limit_per_dependency(
            mut self,
            make: impl Fn() -> $crate::__private::ConcurrencyLimiter + Send + Sync + 'static,
        ) -> Self {
            self.$($field).+.concurrency_limit = Some(::std::sync::Arc::new(make));
            self
        }

        /// Limits nothing: no concurrency limit (the default).
        pub fn no_concurrency_limit(mut self) -> Self {
            self.$($field).+.concurrency_limit = None;
            self
        }

        /// Gives each dependency a [`Guard`](retryscope::guard::Guard) made
        /// by `make` — e.g. [`InFlightBudget::envoy`](retryscope::budget::InFlightBudget::envoy),
        /// Envoy's retry budget — put on each of its calls, retries and
        /// hedge copies alike, with its gauges published with the others.
        /// Called again, the guards compose: each dependency gets both.
        /// None by default.
        pub fn guard_per_dependency<G: retryscope::guard::Guard + 'static>(
            mut self,
            make: impl Fn() -> G + Send + Sync + 'static,
        ) -> Self {
            let first = self.$($field).+.guard.take();
            self.$($field).+.guard = Some(retryscope::dependency::and_guard(first, make));
            self
        }
    };
    ($($field:ident).+ : fallback) => {
        /// Registers `fallback` under `name` (replacing one of that name):
        /// an answer for the calls that give up — attempts exhausted, the
        /// deadline, the breaker open, the budget, a rate limit, the
        /// overload guards — never for a success or an answer the server
        /// meant (a 404; see [`retryscope_http::Fallback`] for exactly when).
        /// Registering runs nothing: a dependency uses it once named in
        /// [`fallback_for`](Self::fallback_for) or
        /// [`default_fallback`](Self::default_fallback).
        ///
        /// The fallback is told about the call ([`FallbackContext`](retryscope_http::FallbackContext)),
        /// returns a boxed future of an `http::Response<Bytes>` or an error,
        /// and is cut at the call's remaining deadline. Its answer reaches
        /// the caller with a [`Fallback`](retryscope_http::Fallback) extension.
        pub fn fallback(
            mut self,
            name: &str,
            fallback: impl Fn(&$crate::FallbackContext<'_>) -> $crate::FallbackFuture + Send + Sync + 'static,
        ) -> Self {
            self.$($field).+.fallbacks.register(name, $crate::__private::fallback::shared(fallback));
            self
        }

        /// Calls to `dependency` (a host, or `host:port` off the scheme's
        /// default port, as the telemetry names it) that give up are
        /// answered by the fallback registered as `name`. A name not
        /// registered (yet) is refused, as is a 257th dependency
        /// ([`MAX_FALLBACKS`](retryscope_http::MAX_FALLBACKS)).
        pub fn fallback_for(mut self, dependency: &str, name: &str) -> Result<Self, $crate::UnknownFallback> {
            self.$($field).+.fallbacks.use_for(dependency, name)?;
            Ok(self)
        }

        /// Calls to every dependency without a fallback of its own that
        /// give up are answered by the fallback registered as `name`; a
        /// name not registered (yet) is refused.
        pub fn default_fallback(mut self, name: &str) -> Result<Self, $crate::UnknownFallback> {
            self.$($field).+.fallbacks.use_by_default(name)?;
            Ok(self)
        }

        /// The names of the fallbacks registered so far, in registration
        /// order: what a configuration file's `fallback = "name"` is
        /// checked against.
        pub fn fallback_names(&self) -> impl Iterator<Item = &str> {
            self.$($field).+.fallback_names()
        }
    };
    // retryscope-config (issue 35): its block.
    ($($field:ident).+ : config) => {
        /// Takes each call's policy, retried statuses, hedging and priority
        /// from the configuration `handle` holds, resolved once per call from
        /// the snapshot in force when the call starts (the dependency its
        /// host, path or gRPC method matches, else the file's defaults): a
        /// reload reaches the next call. A request's own
        /// [`RetryOptions`](retryscope_http::RetryOptions) policy or priority
        /// still wins, except over the kill switch (`enabled = false`: one
        /// attempt, no hedge). See `retryscope-config`.
        ///
        /// A dependency's `fallback = "name"` selects the fallback registered
        /// in code under that name (see `fallback`); under the kill switch
        /// it runs with reason `kill_switch`. Its `body_rule = "name"`
        /// selects the body rule registered under that name (`body_rule`,
        /// HTTP only), and `idempotency_keys = true|false` turns key
        /// generation on or off for it (the header stays the builder's).
        ///
        /// Each dependency the file names has one set of guards, shared by
        /// every call of it and reported under its name in the file; calls
        /// no dependency matches keep guards per server. Its `budget`,
        /// `breaker` and `pacer` replace the builder's for its calls, key by
        /// key: a key the file writes (in the dependency or in `defaults`)
        /// is built from the file; a key it does not write is made by the
        /// builder (`budget_per_dependency`, …). A reload keeps a
        /// dependency's guards, and their state, while its guard settings
        /// are unchanged, and rebuilds them when they change.
        pub fn config(mut self, handle: $crate::__private::ConfigHandle) -> Self {
            self.$($field).+.config = Some(handle);
            self
        }
    };
    ($($field:ident).+ : http) => {
        /// Which HTTP statuses are retried.
        pub fn classifier(mut self, classifier: $crate::__private::HttpClassifier) -> Self {
            self.$($field).+.classifier = classifier;
            self
        }

        /// Asks `rule` about every response before the built-in status rules:
        /// its verdict, when it gives one, replaces theirs; `None` leaves the
        /// decision to them. The rule sees the status and headers only (see
        /// [`ResponseRule`](retryscope_http::ResponseRule)); for the body, see
        /// [`retry_on_body`](Self::retry_on_body).
        /// Request safety still applies to what it says: a POST without an
        /// `Idempotency-Key` is not run again because a rule asked for it.
        /// Setting a rule again replaces the previous one.
        ///
        /// A closure works too: `.retry_rule(rule_fn(|status, headers| ..))`
        /// (with [`rule_fn`](retryscope_http::rule_fn)), or a closure
        /// with typed arguments `|status: StatusCode, headers: &HeaderMap| ..`.
        pub fn retry_rule(mut self, rule: impl $crate::ResponseRule) -> Self {
            self.$($field).+.rule = Some($crate::__private::rule::SharedRule::new(rule));
            self
        }

        /// Reads the body of the responses `rule` selects by their head, up
        /// to `limit`, and asks `rule` about it before the head rule
        /// ([`retry_rule`](Self::retry_rule)) and the built-in statuses. Any
        /// response it does not select is untouched; a selected body over
        /// the limit is not judged; the caller always gets the whole body.
        /// The read is part of the attempt, bounded by the policy's attempt
        /// timeout and deadline. Request safety still applies to what the rule
        /// says. See [`BodyRule`](retryscope_http::BodyRule) for what it
        /// costs. Setting a body rule again replaces the previous one.
        pub fn retry_on_body(
            mut self,
            limit: $crate::BodyLimit,
            rule: impl $crate::BodyRule,
        ) -> Self {
            self.$($field).+.body_rule = Some($crate::__private::body_rule::SharedBodyRule::new(limit, rule));
            self
        }

        /// Registers a body rule under `name` (replacing one of that name),
        /// that reads the bodies `rule` selects, up to `limit`, as
        /// [`retry_on_body`](Self::retry_on_body) does — for the calls of the
        /// dependencies whose configuration file says `body_rule = "name"`
        /// (see `config`), instead of the builder's own rule. Registering
        /// runs nothing. List the name in the handle's `KnownNames` too, so
        /// that the file is checked against it.
        pub fn body_rule(
            mut self,
            name: &str,
            limit: $crate::BodyLimit,
            rule: impl $crate::BodyRule,
        ) -> Self {
            self.$($field).+.body_rules.register(name, $crate::__private::body_rule::SharedBodyRule::new(limit, rule));
            self
        }

        /// The names of the body rules registered so far
        /// ([`body_rule`](Self::body_rule)), in registration order.
        pub fn body_rule_names(&self) -> impl Iterator<Item = &str> {
            self.$($field).+.body_rules.names()
        }

        /// Gives each dependency a budget made by `make` (default:
        /// [`RetryBudget::new`](retryscope::RetryBudget::new)).
        pub fn budget_per_dependency(
            mut self,
            make: impl Fn() -> $crate::__private::RetryBudget + Send + Sync + 'static,
        ) -> Self {
            self.$($field).+.budget = Some(::std::sync::Arc::new(make));
            self
        }

        /// Retries without a budget: only the policy bounds them. Drops a
        /// budget share given before (`budget_shared`): no floor is left to
        /// divide.
        pub fn no_budget(mut self) -> Self {
            self.$($field).+.budget = None;
            self.$($field).+.budget_share = None;
            self
        }

        /// Names the header that tells an HTTP server which attempt a retry is
        /// (default [`retry-attempt`](retryscope_otel::ATTEMPT_HEADER), sent
        /// from the second attempt on), e.g. `x-envoy-attempt-count` where
        /// Envoy-style servers read it.
        pub fn attempt_header(mut self, name: $crate::__private::HeaderName) -> Self {
            self.$($field).+.attempt_header = Some(name);
            self
        }

        /// Sends no attempt header.
        pub fn no_attempt_header(mut self) -> Self {
            self.$($field).+.attempt_header = None;
            self
        }

        /// Names the request header whose value the retry log records as
        /// `request_id` (default
        /// [`x-request-id`](retryscope_otel::REQUEST_ID_HEADER)), e.g.
        /// `x-correlation-id`. A value longer than 128 bytes, or not visible
        /// ASCII, is not recorded.
        pub fn request_id_header(mut self, name: $crate::__private::HeaderName) -> Self {
            self.$($field).+.request_id_header = name;
            self
        }

        /// Hedges idempotent requests instead of retrying them: a request
        /// that may run twice at once (GET, HEAD, OPTIONS, PUT, DELETE,
        /// TRACE; a POST
        /// with an idempotency key is retried, not hedged, since a server
        /// honouring keys answers a concurrent copy with 409) and whose body can be sent
        /// again gets a second copy when the first has not answered after
        /// the policy's delay, up to its `max_copies`; the first acceptable
        /// answer wins and the other copies are cancelled (their connection
        /// or stream reset). A retryable failure (a 503, a reset) sends the
        /// next copy at once; a permanent one (a 404) ends the call. Every
        /// copy beyond the first is charged to the dependency's budget like a
        /// retry, and a refused one is not sent. `policy` is a template: each
        /// dependency (host) hedges with its own copy of it
        /// ([`HedgePolicy::fresh`](retryscope::hedge::HedgePolicy::fresh)),
        /// so a percentile delay is learned per host, not over every host the
        /// client calls.
        ///
        /// Hedging replaces retries for those requests (gRPC's A6: a call is
        /// hedged or retried, never both): the builder's retry policy still
        /// serves every other request — a POST without an idempotency key, a
        /// streamed body — and a request given its own policy through
        /// `RetryOptions`. Every copy asks the dependency's pacer as a retry
        /// does: a dependency that asked to be called less gets no extra copy
        /// while it holds calls back.
        pub fn hedge(mut self, policy: $crate::__private::HedgePolicy) -> Self {
            self.$($field).+.hedge = Some(policy);
            self
        }

        /// Gives every non-idempotent request (POST, PATCH, …) that carries no
        /// idempotency key a fresh one (a UUID v4, as an RFC 8941 String),
        /// once per call: every attempt sends the same key, and the request is
        /// thereby retried on transient failures as an idempotent one is. A
        /// key the request carries is kept unchanged; a streamed body gets
        /// none and is still sent once. Per request, an
        /// [`KeyChoice`](retryscope_http::KeyChoice)
        /// extension supplies a key or suppresses this. Requests marked
        /// `idempotent` get a key too. Retrying is then only as safe as the
        /// server's handling of keys: it must answer a repeated key with the
        /// stored response (see `retryscope-idempotency`).
        pub fn idempotency_keys(mut self) -> Self {
            self.$($field).+.idempotency = self.$($field).+.idempotency.clone().generate();
            self
        }

        /// Names the header that carries idempotency keys (default
        /// `Idempotency-Key`, the draft's): the one looked for on requests —
        /// a request carrying it may be retried — and the one supplied and
        /// generated keys are sent in.
        pub fn idempotency_key_header(mut self, name: $crate::__private::HeaderName) -> Self {
            self.$($field).+.idempotency = self.$($field).+.idempotency.clone().header(name);
            self
        }
    };
}
