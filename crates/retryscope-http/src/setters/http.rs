//! The setters only HTTP semantics use ([`WithHttpSettings`]).

use super::HasHttpSettings;
use crate::{BodyLimit, BodyRule, ResponseRule};
use http::HeaderName;
use retryscope::classify::HttpClassifier;
use retryscope::hedge::HedgePolicy;

/// The setters only HTTP semantics use: statuses and rules, the retry
/// budget, the attempt and request-id headers, hedging, idempotency keys.
/// Implemented by `retryscope_reqwest::RetryMiddlewareBuilder` and
/// `retryscope_tower::RetryLayerBuilder`; not by the gRPC builder, whose
/// statuses come from `grpc-status` and whose retries send
/// `grpc-previous-rpc-attempts`.
pub trait WithHttpSettings: HasHttpSettings {
    /// Which HTTP statuses are retried.
    fn classifier(mut self, classifier: HttpClassifier) -> Self {
        self.client_settings_mut().classifier = classifier;
        self
    }

    /// Asks `rule` about every response before the built-in status rules:
    /// its verdict, when it gives one, replaces theirs; `None` leaves the
    /// decision to them. The rule sees the status and headers only (see
    /// [`ResponseRule`](crate::ResponseRule)); for the body, see
    /// [`retry_on_body`](Self::retry_on_body).
    /// Request safety still applies to what it says: a POST without an
    /// `Idempotency-Key` is not run again because a rule asked for it.
    /// Setting a rule again replaces the previous one.
    ///
    /// A closure works too: `.retry_rule(rule_fn(|status, headers| ..))`
    /// (with [`rule_fn`](crate::rule_fn)), or a closure
    /// with typed arguments `|status: StatusCode, headers: &HeaderMap| ..`.
    fn retry_rule(mut self, rule: impl ResponseRule) -> Self {
        self.client_settings_mut().rule = Some(crate::rule::SharedRule::new(rule));
        self
    }

    /// Reads the body of the responses `rule` selects by their head, up
    /// to `limit`, and asks `rule` about it before the head rule
    /// ([`retry_rule`](Self::retry_rule)) and the built-in statuses. Any
    /// response it does not select is untouched; a selected body over
    /// the limit is not judged; the caller always gets the whole body.
    /// The read is part of the attempt, bounded by the policy's attempt
    /// timeout and deadline. Request safety still applies to what the rule
    /// says. See [`BodyRule`](crate::BodyRule) for what it
    /// costs. Setting a body rule again replaces the previous one.
    fn retry_on_body(mut self, limit: BodyLimit, rule: impl BodyRule) -> Self {
        self.client_settings_mut().body_rule = Some(crate::body_rule::SharedBodyRule::new(limit, rule));
        self
    }

    /// Registers a body rule under `name` (replacing one of that name),
    /// that reads the bodies `rule` selects, up to `limit`, as
    /// [`retry_on_body`](Self::retry_on_body) does — for the calls of the
    /// dependencies whose configuration file says `body_rule = "name"`
    /// (see `config`), instead of the builder's own rule. Registering
    /// runs nothing. List the name in the handle's `KnownNames` too, so
    /// that the file is checked against it.
    fn body_rule(mut self, name: &str, limit: BodyLimit, rule: impl BodyRule) -> Self {
        self.client_settings_mut()
            .body_rules
            .register(name, crate::body_rule::SharedBodyRule::new(limit, rule));
        self
    }

    /// The names of the body rules registered so far
    /// ([`body_rule`](Self::body_rule)), in registration order.
    fn body_rule_names(&self) -> impl Iterator<Item = &str> {
        self.client_settings().body_rules.names()
    }

    /// Gives each dependency a budget made by `make` (default:
    /// [`RetryBudget::default`](retryscope::RetryBudget::default)): a
    /// [`RetryBudget`](retryscope::RetryBudget) of your own, a [`TokenBucket`](retryscope::TokenBucket),
    /// a [`RetryQuota`](retryscope::budget::RetryQuota), any
    /// [`Budget`](retryscope::budget::Budget).
    fn budget_per_dependency<B: retryscope::budget::Budget + 'static>(
        mut self,
        make: impl Fn() -> B + Send + Sync + 'static,
    ) -> Self {
        self.client_settings_mut().dependencies(|d| d.budget(make));
        self
    }

    /// Retries without a budget: only the policy bounds them. Drops a
    /// budget share given before (`budget_shared`): no floor is left to
    /// divide.
    fn no_budget(mut self) -> Self {
        self.client_settings_mut().dependencies(|d| d.no_budget());
        self
    }

    /// Names the header that tells an HTTP server which attempt a retry is
    /// (default [`retry-attempt`](retryscope_otel::ATTEMPT_HEADER), sent
    /// from the second attempt on), e.g. `x-envoy-attempt-count` where
    /// Envoy-style servers read it.
    fn attempt_header(mut self, name: HeaderName) -> Self {
        self.client_settings_mut().attempt_header = Some(name);
        self
    }

    /// Sends no attempt header.
    fn no_attempt_header(mut self) -> Self {
        self.client_settings_mut().attempt_header = None;
        self
    }

    /// Names the request header whose value the retry log records as
    /// `request_id` (default
    /// [`x-request-id`](retryscope_otel::REQUEST_ID_HEADER)), e.g.
    /// `x-correlation-id`. A value longer than 128 bytes, or not visible
    /// ASCII, is not recorded.
    fn request_id_header(mut self, name: HeaderName) -> Self {
        self.client_settings_mut().request_id_header = name;
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
    ///
    /// With a configuration file (`config`), hedging is the file's alone:
    /// a configured call hedges where the file writes `hedging`, and this
    /// template is not applied (the build logs a `WARN` saying so).
    fn hedge(mut self, policy: HedgePolicy) -> Self {
        let settings = self.client_settings_mut();
        settings.dependencies(|d| d.hedge(policy));
        settings.hedge_template = true;
        self
    }

    /// Gives every POST and PATCH request that carries no
    /// idempotency key a fresh one (a UUID v4, as an RFC 8941 String),
    /// once per call: every attempt sends the same key, and the request is
    /// thereby retried on transient failures as an idempotent one is. A
    /// key the request carries is kept unchanged; a streamed body gets
    /// none and is still sent once. Per request, an
    /// [`KeyChoice`](crate::KeyChoice)
    /// extension supplies a key or suppresses this. Requests marked
    /// `idempotent` get a key too. Retrying is then only as safe as the
    /// server's handling of keys: it must answer a repeated key with the
    /// stored response (see `retryscope-idempotency`).
    fn idempotency_keys(mut self) -> Self {
        self.client_settings_mut().idempotency = self.client_settings_mut().idempotency.clone().generate();
        self
    }

    /// Names the header that carries idempotency keys (default
    /// `Idempotency-Key`, the draft's): the one looked for on requests —
    /// a request carrying it may be retried — and the one supplied and
    /// generated keys are sent in.
    fn idempotency_key_header(mut self, name: HeaderName) -> Self {
        self.client_settings_mut().idempotency = self.client_settings_mut().idempotency.clone().header(name);
        self
    }
}

impl<B: HasHttpSettings> WithHttpSettings for B {}
