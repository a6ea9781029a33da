//! The gRPC layer's builder: only the settings gRPC mode reads.

use crate::builder::{TowerSettings, tower_setters};
use crate::grpc::GrpcRetry;
use crate::layer::RetryLayer;
use retryscope::Policy;
use std::fmt;

/// Builds a [`RetryLayer`] with gRPC semantics (A6): made by
/// [`RetryLayer::grpc`].
///
/// It offers only what gRPC mode reads. Statuses come from `grpc-status`
/// rather than an `HttpClassifier`, every retry sends
/// `grpc-previous-rpc-attempts` rather than an HTTP attempt header, and the
/// guard is the config's token bucket when it enables throttling (otherwise a
/// default `RetryBudget`): so there is no `classifier`, `attempt_header` or
/// `budget_per_dependency` here. Nor is there a `retry_rule`: a rule judges an
/// HTTP status and headers, and a gRPC answer's HTTP status is 200 whatever
/// happened, its outcome a gRPC status that often arrives only in the trailers;
/// which codes are retried is the service config's `retryableStatusCodes`.
///
/// ```
/// use retryscope::Policy;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
///
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive()))
///     .origin(http::Uri::from_static("http://127.0.0.1:50051"))
///     .no_telemetry()
///     .build();
/// # let _ = layer;
/// ```
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope::classify::HttpClassifier;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
///
/// // gRPC statuses are not HTTP's: the setting does not exist in gRPC mode.
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).classifier(HttpClassifier::new());
/// ```
///
/// ```compile_fail
/// use retryscope::{Policy, RetryBudget};
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
///
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).budget_per_dependency(RetryBudget::new);
/// ```
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
///
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).no_attempt_header();
/// ```
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry, rule_fn};
///
/// let rule = rule_fn(|_, _| None);
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).retry_rule(rule);
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct GrpcRetryLayerBuilder {
    retry: GrpcRetry,
    tower: TowerSettings,
}

impl fmt::Debug for GrpcRetryLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcRetryLayerBuilder")
            .field("retry", &self.retry)
            .field("replay_limit", &self.tower.replay_limit)
            .finish_non_exhaustive()
    }
}

impl GrpcRetryLayerBuilder {
    pub(crate) fn new(retry: GrpcRetry) -> Self {
        Self { retry, tower: TowerSettings::default() }
    }

    retryscope_http::shared_setters!(tower.shared: telemetry);
    retryscope_http::shared_setters!(tower.shared: breaker);
    retryscope_http::shared_setters!(tower.shared: pacer);
    tower_setters!();

    /// The layer.
    pub fn build(self) -> RetryLayer {
        // Every call takes the policy of its method (or its `RetryOptions`),
        // never this one: it only fills the field.
        self.tower.build(Policy::interactive(), Some(self.retry))
    }
}
