//! A built client: what a builder's shared settings ([`ClientSettings`])
//! become once, kept alike by the reqwest middleware and the tower layer, and
//! what each call reads from it before its first attempt — its settings and
//! guards from a configuration file, its body rule, its telemetry.

use crate::body_rule::SharedBodyRule;
use crate::call::Ending;
use crate::configured::{CallConfig, NamedBodyRules};
use crate::fallback::Fallbacks;
use crate::file_guards::{FileGuards, build_registry};
use crate::idempotency::{IdempotencyKeys, KeySource};
use crate::judge::Judge;
use crate::options::RetryOptions;
use crate::rule::SharedRule;
use crate::settings::ClientSettings;
use http::{HeaderMap, HeaderName, Method};
use opentelemetry::metrics::Meter;
use retryscope::classify::HttpClassifier;
use retryscope::dependency::{Dependencies, Dependency};
use retryscope_config::Target;
use retryscope_otel::{MakeAttemptSpan, OtelObserver, RetryLog};
use std::fmt;
use std::sync::Arc;

/// What a client built from [`ClientSettings`] keeps.
pub struct Client {
    /// Which statuses are retried.
    classifier: HttpClassifier,
    /// The user's rule for responses, asked before `classifier`.
    rule: Option<SharedRule>,
    /// The user's rule that reads selected bodies, asked before `rule`.
    body_rule: Option<SharedBodyRule>,
    /// The body rules a file selects by name.
    body_rules: NamedBodyRules,
    /// The call's telemetry, `None` when it is off.
    pub telemetry: Option<OtelObserver>,
    /// The retry log on its own, when telemetry is off but the log is not.
    pub retry_log: Option<RetryLog>,
    /// The guards of each dependency, made by the builder's factories.
    pub guards: Dependencies,
    /// Tells the next hop which attempt an HTTP retry is; `None` sends nothing.
    pub attempt_header: Option<HeaderName>,
    /// The request header the retry log's `request_id` is read from.
    pub request_id_header: HeaderName,
    /// Retry only where no other layer of the call chain retries.
    pub one_layer: bool,
    /// Which header carries idempotency keys, and whether they are generated.
    pub idempotency: IdempotencyKeys,
    /// The fallbacks of the dependencies that have one; `None` when none
    /// does, so that a call pays nothing for them.
    pub fallbacks: Option<Arc<Fallbacks>>,
    /// A configured client's file: each call's settings from it, and the
    /// guards it writes, per file dependency (`None` without a file).
    file_guards: Option<FileGuards>,
}

impl ClientSettings {
    /// The client these settings make, once, at build time, and the meter
    /// its telemetry records with (`None` when it is off), for an
    /// integration's own metrics. An integration whose protocol brings its
    /// own budget (a gRPC channel's token bucket) sets it on the settings'
    /// [`dependencies`](Self::dependencies) first.
    #[doc(hidden)]
    pub fn build(self) -> (Client, Option<Meter>) {
        if self.config.is_some() && self.hedge_template {
            tracing::warn!(
                target: retryscope_otel::names::TARGET,
                "the builder's hedging template is not applied to a client with a configuration file: \
                 hedging is the file's (`hedging` on a dependency or in `defaults`)"
            );
        }
        // The adaptive throttle is asked after the builder's own guards.
        let dependencies = match self.adaptive_throttle {
            Some(throttle) => self.dependencies.guard(move || throttle()),
            None => self.dependencies,
        };
        let (meter, telemetry, retry_log) = self.telemetry.observers(self.retry_log, self.operation_spans);
        // A configured client's guards from its file: made by the builder's
        // factories for the keys the file leaves to code.
        let file_guards =
            self.config.clone().map(|handle| FileGuards::new(handle, dependencies.clone(), meter.as_ref()));
        let client = Client {
            classifier: self.classifier,
            rule: self.rule,
            body_rule: self.body_rule,
            body_rules: self.body_rules,
            telemetry,
            retry_log,
            guards: build_registry(&dependencies, meter.as_ref()),
            attempt_header: self.attempt_header,
            request_id_header: self.request_id_header,
            one_layer: self.one_layer,
            idempotency: self.idempotency,
            fallbacks: self.fallbacks.build(meter.as_ref()),
            file_guards,
        };
        (client, meter)
    }
}

impl Client {
    /// What a call to `host` (`port`: its URI's, `None` for the scheme's
    /// `default_port`) at `path` resolves to, from the snapshot in force
    /// now: its settings from the client's file (`None` without one; a gRPC
    /// call's path names its service and method) and its dependency's
    /// guards — the file's, else `code`'s (the client's per-server guards).
    pub fn resolve(
        &self,
        (host, port, default_port): (&str, Option<u16>, Option<u16>),
        path: &str,
        grpc: bool,
        code: impl FnOnce() -> Arc<Dependency>,
    ) -> (Option<CallConfig>, Arc<Dependency>) {
        let Some(file) = &self.file_guards else { return (None, code()) };
        let matched = port.or(default_port);
        let target = match grpc {
            true => Target::grpc(host, matched, path),
            false => Target::http(host, matched, path),
        };
        let (call, guards) = file.call(&target, port, default_port);
        (Some(call), guards.unwrap_or_else(code))
    }

    /// The [generation](retryscope_config::ConfigHandle::generation) of a
    /// configured client's file in force, `None` without a file: what a
    /// client that keeps something per configuration (a gRPC layer, per
    /// method) tags it with.
    pub fn file_generation(&self) -> Option<u64> {
        self.file_guards.as_ref().map(FileGuards::generation)
    }
}

impl Client {
    /// The judge of an HTTP call's attempts ([`Judge::for_request`]): its
    /// statuses by its file's classifier (`configured`) else the client's,
    /// after the client's own rule; whether it may run again once sent by
    /// its `head` (method and headers), its idempotency `key`, `options`,
    /// and whether its body can be sent again (`replayable`).
    pub fn judge(
        &self,
        configured: Option<&CallConfig>,
        head: (&Method, &HeaderMap),
        options: &RetryOptions,
        replayable: bool,
        key: Option<KeySource>,
    ) -> Judge {
        let classifier = configured.map_or(self.classifier, CallConfig::classifier);
        Judge::for_request(classifier, self.rule.clone(), head, options, replayable, key)
    }

    /// Retries `judge`'s call at one layer only, when the client says so
    /// (`retry_at_one_layer`): not again when the request it runs inside
    /// (`ending`'s upstream) is itself a retry, nor on an answer saying the
    /// layer below retried.
    pub fn at_one_layer(&self, judge: &mut Judge, ending: &Ending) {
        if self.one_layer {
            judge.one_layer(ending.upstream().is_some_and(|upstream| upstream.attempt().is_retry()));
        }
    }

    /// The body rule a call reads bodies with: the one its file names, else
    /// the builder's own.
    pub fn body_rule(&self, configured: Option<&CallConfig>) -> Option<&SharedBodyRule> {
        let own = self.body_rule.as_ref();
        configured.map_or(own, |c| c.body_rule(&self.body_rules, own))
    }

    /// The call's telemetry, with its attempt `spans` and the configuration
    /// it runs under (`configured`), and the retry log, which reads the
    /// request's id from its `headers`.
    pub fn observers<S: MakeAttemptSpan + Clone>(
        &self,
        spans: S,
        configured: Option<&CallConfig>,
        ending: &Ending,
        headers: &HeaderMap,
    ) -> (Option<OtelObserver<S>>, Option<RetryLog>) {
        // Skipped for the call when nothing it does could be seen (no meter
        // provider, no subscriber): it would only cost the call.
        let telemetry = self.telemetry.as_ref().filter(|o| o.is_heard()).map(|o| {
            o.clone()
                .with_attempt_spans(spans)
                // Which configuration this call runs under, on each of its spans.
                .with_config_hash(configured.map(|c| Arc::clone(c.hash())))
                .with_outcome_slot(ending.outcome_slot())
        });
        // The log alone (telemetry off) has no attempt span to read the
        // request's id: it is handed the header's value.
        let retry_log =
            self.retry_log.clone().map(|log| log.with_request_id(headers.get(&self.request_id_header)));
        (telemetry, retry_log)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("classifier", &self.classifier)
            .field("rule", &self.rule)
            .field("body_rule", &self.body_rule)
            .field("dependencies", &self.guards)
            .finish_non_exhaustive()
    }
}
