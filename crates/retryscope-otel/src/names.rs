//! The telemetry contract: instrument names, units and attribute keys.
//!
//! These names are what dashboards, alert rules and users' queries depend on
//! (the [telemetry contract]). They are public so that integrations and tests use
//! the same constants instead of repeating string literals. Attribute *values*
//! come from the engine's own types: `retryscope.outcome` from
//! [`Outcome::as_str`](retryscope::Outcome::as_str), `retryscope.delay.source`
//! from [`DelaySource::as_str`](retryscope::DelaySource::as_str), `error.type` and
//! `retryscope.retry.reason` from [`error_type_str`](crate::error_type_str).
//!
//! [telemetry contract]: https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md

/// Counter `{request}`: one per logical operation, at its start.
pub const REQUESTS: &str = "retryscope.requests";
/// Counter `{retry}`: one per retry, when it starts.
pub const RETRIES: &str = "retryscope.retries";
/// Counter `{retry}`: retries (or calls) refused by a guard — the budget, the
/// breaker, the pacer, the adaptive throttle or the concurrency limit — by
/// [`THROTTLE_REASON`] and [`PRIORITY`].
pub const THROTTLED: &str = "retryscope.throttled";
/// Histogram `s`: the duration of every attempt.
pub const ATTEMPT_DURATION: &str = "retryscope.attempt.duration";
/// Histogram `s`: the duration of every logical operation that sent at least
/// one attempt, waits included.
pub const REQUEST_DURATION: &str = "retryscope.request.duration";
/// Counter `{request}`: logical operations that ended before any attempt was
/// sent (a breaker, budget, pacer, adaptive throttle or concurrency limit
/// refused the first, or the caller gave up while it was held), by
/// [`OUTCOME`] and, when a guard refused it, [`THROTTLE_REASON`] and
/// [`PRIORITY`]. They are kept out of [`REQUEST_DURATION`], whose
/// [`ATTEMPTS`] figures describe operations that made attempts.
pub const REFUSED: &str = "retryscope.refused";
/// Histogram `s`: every wait between attempts.
pub const BACKOFF_DELAY: &str = "retryscope.backoff.delay";
/// Counter `{request}`: incoming requests, by the attempt their caller says
/// they are ([`ATTEMPT`] bucketed `1`, `2`, `3`, `4+`, `unknown`).
pub const SERVER_REQUESTS: &str = "retryscope.server.requests";
/// Observable gauge `{state}`: 0 closed, 1 half-open, 2 open.
pub const BREAKER_STATE: &str = "retryscope.breaker.state";
/// Histogram `s`: how long the pacer held a call back before an attempt was
/// sent, by [`PACE_SOURCE`].
pub const PACE_HELD: &str = "retryscope.pace.held";
/// Observable gauge `{request}/s`: the send rate a dependency's pacer allows
/// while a pace is in force (0 behind a `Retry-After` gate); absent otherwise.
pub const PACE_RATE: &str = "retryscope.pace.rate";

// --- fleet pacing (issue 38) ---
/// Whether a dependency's pace is shared with the fleet (1) or kept by this
/// process alone because the shared store does not answer (0): a gauge
/// (`retryscope-redis`).
pub const PACE_SHARED: &str = "retryscope.pace.shared";
/// How many times this process fell back from the fleet's shared pace to its
/// own: a counter (`retryscope-redis`).
pub const PACE_SHARED_FALLBACKS: &str = "retryscope.pace.shared.fallbacks";
/// Whether a dependency's retry budget floor is divided among the fleet's live
/// replicas (1) or kept whole by this process because the shared store does
/// not answer (0): a gauge (`retryscope-redis`).
pub const BUDGET_SHARED: &str = "retryscope.budget.shared";
/// Observable gauge `1`: the share of the client's requests a dependency
/// accepted over its adaptive throttle's window (the SRE book's
/// `accepts / requests`); absent while the window holds none.
pub const OVERLOAD_ACCEPT_RATIO: &str = "retryscope.overload.accepted";
/// Observable gauge `{request}`: a dependency's adaptive concurrency limit
/// (how many attempts may be in flight at once); absent without one.
pub const LIMIT: &str = "retryscope.limit.limit";
/// Observable gauge `{request}`: how many attempts hold a slot of a
/// dependency's adaptive concurrency limit now; absent without one.
pub const LIMIT_IN_FLIGHT: &str = "retryscope.limit.in_flight";
/// Counter `{hedge}`: one per copy of a hedged call sent beyond the first.
pub const HEDGES: &str = "retryscope.hedges";
/// Counter `{hedge}`: one per hedged call won by a copy other than the first.
pub const HEDGE_WINS: &str = "retryscope.hedge.wins";
/// Observable gauge `{retry}`: how many retries the budget would allow now.
pub const BUDGET_AVAILABLE: &str = "retryscope.budget.available";

/// Counter `{fault}`: faults injected below the retry layer (fault injection,
/// `retryscope_http::fault`), by [`DEPENDENCY`] and [`FAULT_KIND`].
pub const FAULTS_INJECTED: &str = "retryscope.faults.injected";

/// The hash of the configuration a configured call started with
/// (`retryscope-config`'s `ConfigHash`, 16 hex digits), on each of its
/// attempt spans and its operation span: which file was in force for it.
/// The same key as the configuration crate's `retryscope.config.active` gauge attribute.
pub const CONFIG_HASH: &str = "retryscope.config.hash";

/// Counter `{fallback}`: one per call whose fallback ran (served or failed),
/// by [`DEPENDENCY`] and [`FALLBACK_REASON`] (`retryscope-http`'s fallbacks).
pub const FALLBACKS: &str = "retryscope.fallbacks";
/// Unit of [`FALLBACKS`].
pub const UNIT_FALLBACK: &str = "{fallback}";
/// Why a fallback ran: the engine's stop reason ([`STOP_ATTEMPTS_EXHAUSTED`],
/// [`STOP_CIRCUIT_OPEN`]…, never [`STOP_PERMANENT`], [`STOP_UNREPEATABLE`] or
/// [`STOP_UPSTREAM_RETRY`]) or [`FALLBACK_KILL_SWITCH`].
pub const FALLBACK_REASON: &str = "retryscope.fallback.reason";
/// [`FALLBACK_REASON`] when a dependency's kill switch is on (set by the
/// configuration crate).
pub const FALLBACK_KILL_SWITCH: &str = "kill_switch";
/// The name the fallback was registered under (span event only: user-chosen,
/// so never a metric label).
pub const FALLBACK_NAME: &str = "retryscope.fallback.name";
/// How the fallback ended, on its span event: [`FALLBACK_SERVED`] or [`FALLBACK_FAILED`].
pub const FALLBACK_RESULT: &str = "retryscope.fallback.result";
/// [`FALLBACK_RESULT`]: the fallback's answer went to the caller.
pub const FALLBACK_SERVED: &str = "served";
/// [`FALLBACK_RESULT`]: the fallback failed (or ran out of the call's time);
/// the caller got both errors.
pub const FALLBACK_FAILED: &str = "failed";
/// The span event (and log message) when a call's fallback ran, on the
/// call's span (the caller's, or the operation span when it is still open).
pub const FALLBACK_EVENT: &str = "retryscope.fallback";

/// Counter `{span}`: spans dropped because their export to the collector
/// failed (the `otlp` feature's exporter counts them, and logs once when
/// exports start failing and once when they recover).
pub const SPANS_LOST: &str = "retryscope.telemetry.spans.lost";

/// Unit of [`SPANS_LOST`].
pub const UNIT_SPAN: &str = "{span}";
/// Unit of [`FAULTS_INJECTED`].
pub const UNIT_FAULT: &str = "{fault}";
/// Unit of [`REQUESTS`], [`REFUSED`], [`LIMIT`] and [`LIMIT_IN_FLIGHT`].
pub const UNIT_REQUEST: &str = "{request}";
/// Unit of [`RETRIES`], [`THROTTLED`] and [`BUDGET_AVAILABLE`].
pub const UNIT_RETRY: &str = "{retry}";
/// Unit of [`HEDGES`] and [`HEDGE_WINS`].
pub const UNIT_HEDGE: &str = "{hedge}";
/// Unit of [`PACE_RATE`].
pub const UNIT_RATE: &str = "{request}/s";
/// Unit of [`OVERLOAD_ACCEPT_RATIO`].
pub const UNIT_RATIO: &str = "1";
/// Unit of [`BREAKER_STATE`].
pub const UNIT_STATE: &str = "{state}";
/// Unit of the duration histograms.
pub const UNIT_SECONDS: &str = "s";

/// The dependency called (common attribute).
pub const DEPENDENCY: &str = "retryscope.dependency";
/// The logical operation's name (common attribute, only when set).
pub const OPERATION: &str = "retryscope.operation";
/// The attempt number, from 1, clamped to the policy's attempt limit.
pub const ATTEMPT: &str = "retryscope.attempt";
/// On the span of every copy of a hedged call: `true`.
pub const HEDGE: &str = "retryscope.hedge";
/// On the span of every copy of a hedged call, at its end: [`HEDGE_WON`],
/// [`HEDGE_CANCELLED`] or [`HEDGE_FAILED`] (every value:
/// `retryscope::observe::HedgeOutcome::ALL`).
pub const HEDGE_OUTCOME: &str = "retryscope.hedge.outcome";
/// [`HEDGE_OUTCOME`] of the copy whose answer was the call's.
pub const HEDGE_WON: &str = "won";
/// [`HEDGE_OUTCOME`] of a copy dropped before it answered (not an error).
pub const HEDGE_CANCELLED: &str = "cancelled";
/// [`HEDGE_OUTCOME`] of a copy that failed.
pub const HEDGE_FAILED: &str = "failed";
/// On the span of an attempt a fault was injected into: the fault's kind
/// (every value: `retryscope_http::fault::FaultKind::ALL`).
pub const FAULT_INJECTED: &str = "retryscope.fault.injected";
/// The kind of an injected fault on [`FAULTS_INJECTED`] (the values of [`FAULT_INJECTED`]).
pub const FAULT_KIND: &str = "retryscope.fault.kind";
/// How many attempts an operation started.
pub const ATTEMPTS: &str = "retryscope.attempts";
/// How an operation ended: `success`, `failure`, `exhausted`, `throttled`,
/// `cancelled` (the engine's `Outcome`), or [`OUTCOME_FALLBACK`].
pub const OUTCOME: &str = "retryscope.outcome";
/// [`OUTCOME`] of a call the engine gave up on and whose fallback answered
/// (`retryscope-http`'s fallbacks): the caller got the fallback's answer. A
/// fallback that failed leaves the engine's outcome; why it ran is
/// `retryscope.fallbacks`' [`FALLBACK_REASON`] and the give-up event's.
pub const OUTCOME_FALLBACK: &str = "fallback";
/// The `error.type` of the failure that caused a retry.
pub const RETRY_REASON: &str = "retryscope.retry.reason";
/// Where a wait came from: `policy`, `retry_after`, `rate_limit` or
/// `grpc_pushback` (every value: `retryscope::DelaySource::ALL`).
pub const DELAY_SOURCE: &str = "retryscope.delay.source";
/// Why the pacer held a call: `retry_after`, `rate_limit`, `grpc_pushback`
/// or `adaptive` (every value: `retryscope::pace::HoldSource::ALL`).
pub const PACE_SOURCE: &str = "retryscope.pace.source";
/// Why a retry was refused: [`THROTTLED_BY_BUDGET`], [`THROTTLED_BY_BREAKER`],
/// [`THROTTLED_BY_PACER`], [`THROTTLED_BY_UPSTREAM`], [`THROTTLED_LOCALLY`]
/// or [`THROTTLED_BY_LIMIT`].
pub const THROTTLE_REASON: &str = "retryscope.throttle.reason";
/// [`THROTTLE_REASON`] when the retry budget (or token bucket) refused.
pub const THROTTLED_BY_BUDGET: &str = "budget";
/// [`THROTTLE_REASON`] when the circuit breaker refused.
pub const THROTTLED_BY_BREAKER: &str = "circuit_open";
/// [`THROTTLE_REASON`] when the pacer refused to send a call (or a retry)
/// whose next slot came after its deadline: the dependency is rate-limited.
pub const THROTTLED_BY_PACER: &str = "rate_limited";
/// [`THROTTLE_REASON`] when a retry was not made because retries happen at
/// another layer: the request being served is itself a retry, or the layer
/// below already retried.
pub const THROTTLED_BY_UPSTREAM: &str = "upstream_retry";
/// [`THROTTLE_REASON`] when the client's adaptive throttle rejected the
/// attempt locally (the SRE book's client-side throttling).
pub const THROTTLED_LOCALLY: &str = "rejected_locally";
/// [`THROTTLE_REASON`] when the dependency's adaptive concurrency limit
/// stayed full for the attempt as long as it could wait.
pub const THROTTLED_BY_LIMIT: &str = "concurrency_limited";
/// The call's priority on a guard's refusal (`retryscope.refused`,
/// `retryscope.throttled`) and on the operation span: `critical` or
/// `sheddable` (every value: `retryscope::overload::Priority::ALL`).
pub const PRIORITY: &str = "retryscope.priority";
/// The route template of an incoming request (OpenTelemetry's `http.route`).
pub const HTTP_ROUTE: &str = "http.route";
/// The OpenTelemetry semantic-convention attribute for a failure's type.
pub const ERROR_TYPE: &str = "error.type";

/// The name of the failed attempt span's event for each wait (also the message of
/// the per-retry log event).
pub const BACKOFF_EVENT: &str = "retryscope.backoff";
/// The name of the span event (and log event) when the pacer holds a call.
pub const HELD_EVENT: &str = "retryscope.held";
/// The message of the WARN log event (and event of the last attempt's span) of
/// an operation that gave up: its retries ran out or were refused.
pub const GAVE_UP_EVENT: &str = "retryscope.gave_up";

/// `retryscope.stop_reason` on the give-up event: the last failure was permanent.
pub const STOP_PERMANENT: &str = "permanent";
/// `retryscope.stop_reason`: transient, but not safe to run again.
pub const STOP_UNREPEATABLE: &str = "unrepeatable";
/// `retryscope.stop_reason`: every attempt the policy allows has run.
pub const STOP_ATTEMPTS_EXHAUSTED: &str = "attempts_exhausted";
/// `retryscope.stop_reason`: the deadline passed, or the next wait would cross it.
pub const STOP_DEADLINE_EXCEEDED: &str = "deadline_exceeded";
/// `retryscope.stop_reason`: the server asked for a longer wait than allowed.
pub const STOP_HINT_TOO_LONG: &str = "hint_too_long";
/// `retryscope.stop_reason`: the retry budget or token bucket refused.
pub const STOP_BUDGET_EXHAUSTED: &str = "budget_exhausted";
/// `retryscope.stop_reason`: the circuit breaker is open.
pub const STOP_CIRCUIT_OPEN: &str = "circuit_open";
/// `retryscope.stop_reason`: retries happen at another layer of the call chain.
pub const STOP_UPSTREAM_RETRY: &str = "upstream_retry";
/// `retryscope.stop_reason`: the pacer's next slot came after the deadline.
pub const STOP_RATE_LIMITED: &str = "rate_limited";
/// `retryscope.stop_reason`: the adaptive throttle rejected the attempt locally.
pub const STOP_REJECTED_LOCALLY: &str = "rejected_locally";
/// `retryscope.stop_reason`: the concurrency limit stayed full.
pub const STOP_CONCURRENCY_LIMITED: &str = "concurrency_limited";
/// Every `retryscope.stop_reason` value, in the order of `StopReason`.
pub const STOP_REASONS: [&str; 11] = [
    STOP_PERMANENT,
    STOP_UNREPEATABLE,
    STOP_ATTEMPTS_EXHAUSTED,
    STOP_DEADLINE_EXCEEDED,
    STOP_HINT_TOO_LONG,
    STOP_BUDGET_EXHAUSTED,
    STOP_CIRCUIT_OPEN,
    STOP_RATE_LIMITED,
    STOP_UPSTREAM_RETRY,
    STOP_REJECTED_LOCALLY,
    STOP_CONCURRENCY_LIMITED,
];

/// The `tracing` target of every span and event this crate emits.
pub const TARGET: &str = "retryscope";

/// Histogram bucket boundaries in seconds, shared by all duration histograms.
pub const DURATION_BUCKETS: [f64; 17] =
    [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0];

/// The longest request id the retry log records (`request_id`), in bytes: a
/// UUID is 36, a W3C trace id 32; anything longer is not an id to log.
pub const MAX_REQUEST_ID_LEN: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;
    use retryscope::dependency::Dependency;
    use retryscope::overload::{AdaptiveThrottle, Aimd, ConcurrencyLimiter};
    use retryscope::{CircuitBreaker, Pacer, RetryBudget};

    /// The engine's guards name their gauges themselves (`Guard::gauges`):
    /// the names here, which dashboards, alerts and docs/telemetry.md use,
    /// must be those, with the same units.
    #[test]
    fn the_gauge_names_are_those_the_built_in_guards_publish() {
        let limit = Aimd::builder().build().expect("the default limit");
        let everything = Dependency::new("everything")
            .with_budget(RetryBudget::default())
            .with_breaker(CircuitBreaker::default())
            .with_pacer(Pacer::new())
            .with_concurrency_limit(ConcurrencyLimiter::new(limit))
            .with_guard(AdaptiveThrottle::default());
        let published: Vec<_> = everything.published().iter().map(|gauge| (gauge.name, gauge.unit)).collect();
        assert_eq!(
            published,
            [
                (PACE_RATE, UNIT_RATE),
                (LIMIT, UNIT_REQUEST),
                (LIMIT_IN_FLIGHT, UNIT_REQUEST),
                (BREAKER_STATE, UNIT_STATE),
                (OVERLOAD_ACCEPT_RATIO, UNIT_RATIO),
                (BUDGET_AVAILABLE, UNIT_RETRY),
            ]
        );
    }
}
