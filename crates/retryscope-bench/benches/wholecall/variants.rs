//! Every variant by name, built as a user would build it.
//!
//! The names are what scripts/wholecall.sh, its baseline and BENCHMARKS.md
//! call them. Three families, each with its plain call (what "added" is over):
//! `http_*` (`GET /ok`, plain: `http_plain`), `grpc_*` (plain: `grpc_plain`),
//! and the failing `fail_*` / `fail_after_*` (503, then 200 on the retry;
//! `fail_after_*` with `Retry-After: 0`), whose plain call is the same two
//! requests made by hand with plain reqwest.

use crate::http::{self, Script, Url};
use crate::servers::Servers;
use crate::telemetry::{HandRolled, install_sdk};
use crate::{CallError, Job, grpc};
use reqwest_middleware::ClientBuilder;
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use retryscope::{Jitter, Policy};
use retryscope_config::{ConfigHandle, KnownNames};
use retryscope_reqwest::prelude::*;
use retryscope_test_support::echo::EchoClient;
use retryscope_tower::RetryLayer;
use retryscope_tower::grpc::GrpcRetry;
use std::time::Duration;
use tokio::runtime::Runtime;
use tower::Layer as _;

/// Every variant, in the table's order.
pub(crate) const NAMES: &[&str] = &[
    "http_plain",
    "http_middleware",
    "http_reqwest_retry",
    "http_reqwest_own_retry",
    "http_retryscope",
    "http_retryscope_sdk",
    "http_retryscope_configured",
    "http_hand_rolled",
    "grpc_plain",
    "grpc_retryscope",
    "grpc_retryscope_sdk",
    "grpc_retryscope_configured",
    "grpc_hand_rolled",
    "fail_by_hand",
    "fail_reqwest_retry",
    "fail_retryscope",
    "fail_retryscope_sdk",
    "fail_after_by_hand",
    "fail_after_reqwest_retry",
    "fail_after_retryscope",
    "fail_after_retryscope_sdk",
];

/// The plain call of `variant`'s family.
pub(crate) fn plain_of(variant: &str) -> &'static str {
    match variant.split_once('_') {
        Some(("grpc", _)) => "grpc_plain",
        Some(("fail", rest)) if rest.starts_with("after_") => "fail_after_by_hand",
        Some(("fail", _)) => "fail_by_hand",
        _ => "http_plain",
    }
}

/// retryscope's smallest wait: a policy's delays must be above zero, so 1 ns
/// without jitter, which the timer turns into "at once" after a yield. With
/// `Retry-After: 0` the server's hint is no longer than that.
fn zero_wait() -> Result<Policy, CallError> {
    Ok(Policy::interactive()
        .to_builder()
        .base_delay(Duration::from_nanos(1))
        .max_delay(Duration::from_nanos(1))
        .jitter(Jitter::None)
        .build()?)
}

/// The code-built variants' `Policy::interactive()`, as a configuration
/// file says it: one dependency, matched by `matcher`, with the same
/// attempts, backoff, jitter, attempt timeout and deadline, so a configured
/// call makes the same attempts as the code-built one and differs only in
/// where its policy comes from (the file's snapshot, resolved per call).
const CONFIGURED: &str = r#"
[dependencies.bench]
MATCHER
attempts = 4
backoff = { initial = "200ms", max = "5s", multiplier = 2.0 }
jitter = "full"
attempt_timeout = "5s"
deadline = "15s"
"#;

/// A handle on a file written for this process, as a service loads its own
/// (not watched: a poll would run on the measured thread, and the call's
/// cost is what is counted, not the watcher's).
fn config_handle(matcher: &str) -> Result<ConfigHandle, CallError> {
    let path = std::env::temp_dir().join(format!("retryscope-wholecall-{}.toml", std::process::id()));
    std::fs::write(&path, CONFIGURED.replace("MATCHER", matcher))?;
    let handle = ConfigHandle::builder(KnownNames::new()).file(&path).build();
    let _ = std::fs::remove_file(&path);
    Ok(handle?)
}

/// reqwest-retry's documented setup, waits of zero for the failing scripts.
fn reqwest_retry(script: Script) -> RetryTransientMiddleware<ExponentialBackoff> {
    let backoff = match script {
        Script::Ok => ExponentialBackoff::builder(),
        Script::FailOnce | Script::FailOnceRetryAfter => ExponentialBackoff::builder()
            .retry_bounds(Duration::ZERO, Duration::ZERO)
            .jitter(reqwest_retry::Jitter::None),
    };
    RetryTransientMiddleware::new_with_policy(backoff.build_with_max_retries(3))
}

/// The retryscope middleware with `policy`. Its guards are the defaults, but
/// for the failing scripts, where every call retries once: a budget that
/// allows one retry per request and a breaker that half the attempts failing
/// does not open, so each call is what it is in a service whose guards allow it.
fn retryscope_middleware(script: Script) -> Result<retryscope_reqwest::RetryMiddleware, CallError> {
    Ok(match script {
        Script::Ok => retryscope_reqwest::RetryMiddleware::new(Policy::interactive()),
        Script::FailOnce | Script::FailOnceRetryAfter => {
            retryscope_reqwest::RetryMiddleware::builder(zero_wait()?)
                .budget_per_dependency(|| {
                    retryscope::RetryBudget::builder().ratio(1.0).build().unwrap_or_default()
                })
                .breaker_per_dependency(|| {
                    retryscope::CircuitBreaker::builder().failure_ratio(0.9).build().unwrap_or_default()
                })
                .build()
        }
    })
}

/// Builds `name` against `servers` and runs `job` with it. The SDK, when the
/// variant uses it, is installed first (the integrations read the global
/// providers when built) and left running until the process exits.
pub(crate) fn with_variant(
    name: &str,
    servers: &Servers,
    runtime: &Runtime,
    job: impl Job,
) -> Result<(), CallError> {
    let (family, rest) = name.split_once('_').ok_or_else(|| format!("unknown variant {name:?}"))?;
    let script = match (family, rest.starts_with("after_")) {
        ("fail", true) => Script::FailOnceRetryAfter,
        ("fail", false) => Script::FailOnce,
        _ => Script::Ok,
    };
    let telemetry =
        if name.ends_with("_sdk") || name.ends_with("_hand_rolled") { Some(install_sdk()?) } else { None };
    // tonic's channel spawns its worker on the current runtime: this one.
    let _entered = runtime.enter();
    let url = || Url::new(servers.http, script);
    let reqwest = http::reqwest_client()?;
    let middleware = |builder: ClientBuilder| http::Call { client: builder.build(), url: url() };
    let outcome = match name {
        "http_plain" => job.run(runtime, http::Call { client: reqwest, url: url() }),
        "fail_by_hand" | "fail_after_by_hand" => {
            job.run(runtime, http::TwiceByHand { client: reqwest, url: url() })
        }
        "http_middleware" => job.run(runtime, middleware(ClientBuilder::new(reqwest))),
        "http_reqwest_retry" | "fail_reqwest_retry" | "fail_after_reqwest_retry" => {
            job.run(runtime, middleware(ClientBuilder::new(reqwest).with(reqwest_retry(script))))
        }
        "http_reqwest_own_retry" => {
            // reqwest's own retries (0.13): scoped to the host, 503 retryable.
            let retries =
                reqwest::retry::for_host(servers.http.ip().to_string()).classify_fn(|attempt| match attempt
                    .status()
                {
                    Some(reqwest::StatusCode::SERVICE_UNAVAILABLE) => attempt.retryable(),
                    _ => attempt.success(),
                });
            let client = reqwest::Client::builder().no_proxy().retry(retries).build()?;
            job.run(runtime, http::Call { client, url: url() })
        }
        "http_retryscope"
        | "http_retryscope_sdk"
        | "fail_retryscope"
        | "fail_retryscope_sdk"
        | "fail_after_retryscope"
        | "fail_after_retryscope_sdk" => {
            job.run(runtime, middleware(ClientBuilder::new(reqwest).with(retryscope_middleware(script)?)))
        }
        "http_retryscope_configured" => {
            // The builder's policy is the same as the file's: the file's wins.
            let configured = retryscope_reqwest::RetryMiddleware::builder(Policy::interactive())
                .config(config_handle(r#"host = "127.0.0.1""#)?)
                .build();
            job.run(runtime, middleware(ClientBuilder::new(reqwest).with(configured)))
        }
        "http_hand_rolled" => job.run(
            runtime,
            http::HandRolledCall {
                client: reqwest,
                url: url(),
                server: servers.http,
                metrics: HandRolled::new("http"),
            },
        ),
        "grpc_plain" => {
            job.run(runtime, grpc::Call { client: EchoClient::new(grpc::channel(servers.grpc)?.0) })
        }
        "grpc_retryscope" | "grpc_retryscope_sdk" => {
            let (channel, origin) = grpc::channel(servers.grpc)?;
            let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).origin(origin).build();
            job.run(runtime, grpc::Call { client: EchoClient::new(layer.layer(channel)) })
        }
        "grpc_retryscope_configured" => {
            let (channel, origin) = grpc::channel(servers.grpc)?;
            let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive()))
                .origin(origin)
                .config(config_handle(r#"service = "test.Echo""#)?)
                .build();
            job.run(runtime, grpc::Call { client: EchoClient::new(layer.layer(channel)) })
        }
        "grpc_hand_rolled" => job.run(
            runtime,
            grpc::HandRolledCall {
                client: EchoClient::new(grpc::channel(servers.grpc)?.0),
                server: servers.grpc,
                metrics: HandRolled::new("rpc"),
            },
        ),
        _ => Err(format!("unknown variant {name:?}").into()),
    };
    if let Some(telemetry) = telemetry {
        // Not shut down: flushing to a port nobody listens on would wait out its
        // 5 s timeout under valgrind for every SDK variant; the process ends next.
        std::mem::forget(telemetry);
    }
    outcome
}
