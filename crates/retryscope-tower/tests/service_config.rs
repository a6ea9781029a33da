//! gRPC service configs, as gRPC's own documentation writes them, load into the
//! equivalent policy and bucket; malformed ones are refused, naming the field.

use retryscope::budget::{Budget, RetryCause};
use retryscope::{Jitter, Policy};
use retryscope_tower::grpc::GrpcRetry;
use std::time::Duration;
use tonic::Code;

/// The retry example of gRPC's C++ documentation (examples/cpp/retry), with the
/// `retryThrottling` block of gRFC A6.
const GRPC_EXAMPLE: &str = r#"{
  "methodConfig" : [{
    "name" : [{"service": "helloworld.Greeter"}],
    "waitForReady": true,
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "1s",
      "maxBackoff": "120s",
      "backoffMultiplier": 1.0,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }],
  "retryThrottling": {
    "maxTokens": 10,
    "tokenRatio": 0.1
  }
}"#;

#[test]
fn grpcs_documented_config_loads_into_the_equivalent_policy() {
    let retry = GrpcRetry::from_service_config(GRPC_EXAMPLE).expect("gRPC's own example is valid");
    let expected = Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_secs(1))
        .max_delay(Duration::from_secs(120))
        .multiplier(1.0)
        .jitter(Jitter::Grpc)
        .no_deadline()
        // A6 has no time limit per attempt.
        .no_attempt_timeout()
        .build()
        .expect("valid policy");
    assert_eq!(retry.policy_for("/helloworld.Greeter/SayHello"), Some(expected));
    let codes = retry.codes_for("/helloworld.Greeter/SayHello").expect("configured");
    assert!(codes.contains(Code::Unavailable));
    assert!(!codes.contains(Code::ResourceExhausted));
    assert_eq!(retry.policy_for("/helloworld.Other/SayHello"), None);

    // maxTokens 10, tokenRatio 0.1: retries stop once 5 failures leave half.
    let bucket = retry.token_bucket().expect("throttled");
    for _ in 0..4 {
        bucket.attempt_finished(false);
    }
    assert!(bucket.try_acquire_retry(RetryCause::Transient), "6 tokens, more than half");
    bucket.attempt_finished(false);
    assert!(!bucket.try_acquire_retry(RetryCause::Transient), "5 tokens, half: no retry");
    bucket.attempt_finished(true);
    assert!(bucket.try_acquire_retry(RetryCause::Transient), "5.1 tokens");
}

#[test]
fn malformed_configs_are_refused_with_the_field_named() {
    let cases = [
        ("not json", "", "not valid JSON"),
        (
            r#"{"methodConfig": [{"name": [{"service": "s"}], "retryPolicy": {"maxAttempts": 4}}]}"#,
            "methodConfig[0].retryPolicy.initialBackoff",
            "is required",
        ),
        (
            &GRPC_EXAMPLE.replace("\"120s\"", "\"2 minutes\""),
            "methodConfig[0].retryPolicy.maxBackoff",
            "duration",
        ),
        (
            &GRPC_EXAMPLE.replace("\"UNAVAILABLE\"", "\"UNAVAILABLE\", \"SOMETIMES\""),
            "methodConfig[0].retryPolicy.retryableStatusCodes[1]",
            "not a gRPC status code",
        ),
        (
            &GRPC_EXAMPLE.replace("\"maxTokens\": 10", "\"maxTokens\": -3"),
            "retryThrottling.maxTokens",
            "1..=1000",
        ),
    ];
    for (json, field, problem) in cases {
        let error = GrpcRetry::from_service_config(json).expect_err("refused");
        assert_eq!(error.field(), field, "{error}");
        assert!(error.to_string().contains(problem), "{error}");
    }
}

#[test]
fn a_syntax_error_keeps_serde_json_s_error_as_its_source_printed_once() {
    let error = GrpcRetry::from_service_config("{\"methodConfig\": [}").expect_err("refused");
    assert_eq!(error.to_string(), "invalid gRPC service config: not valid JSON");
    let source = std::error::Error::source(&error).expect("serde_json's error");
    let said = source.to_string();
    assert!(said.contains("line 1 column"), "{said}");
    let chain: Vec<String> = std::iter::successors(Some(&error as &dyn std::error::Error), |&e| e.source())
        .map(|e| e.to_string())
        .collect();
    assert_eq!(chain.join(": ").matches(&said).count(), 1, "{chain:?}");
}
