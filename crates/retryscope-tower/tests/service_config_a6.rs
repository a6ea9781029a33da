//! gRFC A6's validation rules, to the letter: every config A6 (and grpc-go or
//! grpc-java) accepts loads into the policy it means; every config it refuses,
//! or that the layer cannot honour, is refused naming the JSON field.

use retryscope::budget::Budget;
use retryscope::{Jitter, Policy};
use retryscope_tower::grpc::GrpcRetry;
use std::time::Duration;
use tonic::Code;

/// A config of one method config for service `s` with this `retryPolicy` body.
fn with_policy(fields: &str) -> String {
    format!(r#"{{"methodConfig": [{{"name": [{{"service": "s"}}], "retryPolicy": {{{fields}}}}}]}}"#)
}

/// A valid retry policy body, to edit one field at a time.
const POLICY: &str = r#""maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]"#;

fn edited(from: &str, to: &str) -> String {
    assert!(POLICY.contains(from), "{from}");
    with_policy(&POLICY.replace(from, to))
}

fn throttled(fields: &str) -> String {
    format!(r#"{{"retryThrottling": {{{fields}}}}}"#)
}

fn load(json: &str) -> GrpcRetry {
    GrpcRetry::from_service_config(json).unwrap_or_else(|e| panic!("refused {json}: {e}"))
}

#[test]
fn status_codes_load_by_name_in_any_case_and_by_number() {
    let cases: [(&str, &[Code]); 7] = [
        (r#"["UNAVAILABLE"]"#, &[Code::Unavailable]),
        (r#"["unavailable"]"#, &[Code::Unavailable]),
        (r#"["Resource_Exhausted", "aborted"]"#, &[Code::ResourceExhausted, Code::Aborted]),
        ("[14]", &[Code::Unavailable]),
        ("[14.0]", &[Code::Unavailable]),
        (
            r#"[14, "DEADLINE_EXCEEDED", 16]"#,
            &[Code::Unavailable, Code::DeadlineExceeded, Code::Unauthenticated],
        ),
        // grpc-go accepts OK too; an OK answer is a success, never retried.
        (r#"["OK", "UNAVAILABLE"]"#, &[Code::Unavailable]),
    ];
    for (codes, expected) in cases {
        let retry = load(&edited(r#"["UNAVAILABLE"]"#, codes));
        let set = retry.codes_for("/s/m").expect("configured");
        for code in expected {
            assert!(set.contains(*code), "{codes}: {code:?} missing from {set:?}");
        }
        assert!(!set.contains(Code::Internal), "{codes}: {set:?}");
    }
}

#[test]
fn every_multiplier_above_zero_loads_with_a6s_jitter() {
    for (multiplier, value) in [("0.5", 0.5), ("0.001", 0.001), ("1", 1.0), ("1.6", 1.6), ("10", 10.0)] {
        let retry =
            load(&edited(r#""backoffMultiplier": 2"#, &format!(r#""backoffMultiplier": {multiplier}"#)));
        let policy = retry.policy_for("/s/m").expect("configured");
        let expected = Policy::builder()
            .max_attempts(3)
            .base_delay(Duration::from_millis(100))
            .max_delay(Duration::from_secs(1))
            .multiplier(value)
            .jitter(Jitter::Grpc)
            .no_deadline()
            // A6 has no time limit per attempt.
            .no_attempt_timeout()
            .build()
            .expect("valid");
        assert_eq!(policy, expected, "{multiplier}");
    }
}

#[test]
fn other_a6_valid_retry_policies_load() {
    let cases = [
        // Above 5 is treated as 5 "without being considered a validation error".
        (edited(r#""maxAttempts": 3"#, r#""maxAttempts": 100"#), 5),
        (edited(r#""maxAttempts": 3"#, r#""maxAttempts": 2"#), 2),
        (edited(r#""maxAttempts": 3"#, r#""maxAttempts": 4.0"#), 4),
        // initialBackoff above maxBackoff: every step is capped, the first too (grpc-go).
        (edited(r#""initialBackoff": "0.1s""#, r#""initialBackoff": "5s""#), 3),
        (edited(r#""initialBackoff": "0.1s""#, r#""initialBackoff": ".000000001s""#), 3),
    ];
    for (json, attempts) in cases {
        let policy = load(&json).policy_for("/s/m").expect("configured");
        assert_eq!(policy.max_attempts(), attempts, "{json}");
        assert!(policy.base_delay() <= policy.max_delay(), "{json}");
    }
}

#[test]
fn throttling_loads_every_ratio_above_zero_truncated_to_three_decimals() {
    // (tokenRatio, tokens after one failure and one success from a full 10)
    let cases = [("0.1", 9_100), ("0.5466", 9_546), ("0.001", 9_001), ("1", 10_000), ("2.5", 10_000)];
    for (ratio, milli_tokens) in cases {
        let retry = load(&throttled(&format!(r#""maxTokens": 10, "tokenRatio": {ratio}"#)));
        let bucket = retry.token_bucket().expect("throttled");
        bucket.attempt_finished(false);
        bucket.attempt_finished(true);
        // `available` is the tokens above half the bucket: (tokens - 5).
        let above_half = bucket.available();
        let expected = (f64::from(milli_tokens) / 1_000.0) - 5.0;
        assert!((above_half - expected).abs() < 1e-9, "{ratio}: {above_half} ≠ {expected}");
    }
    for tokens in ["1", "1000", "10.0"] {
        assert!(load(&throttled(&format!(r#""maxTokens": {tokens}, "tokenRatio": 0.1"#))).is_throttled());
    }
}

/// A ratio above 1 refills more than a failure drains: with 1.5, two failures
/// then one success leave 9.5 of 10.
#[test]
fn a_token_ratio_above_one_refills_more_than_one_failure() {
    let retry = load(&throttled(r#""maxTokens": 10, "tokenRatio": 1.5"#));
    let bucket = retry.token_bucket().expect("throttled");
    bucket.attempt_finished(false);
    bucket.attempt_finished(false);
    bucket.attempt_finished(true);
    assert!((bucket.available() - 4.5).abs() < 1e-9, "{}", bucket.available());
}

#[test]
fn method_configs_grpc_skips_or_accepts_load() {
    // No `name`: gRPC skips the entry, which names no method.
    let nameless = r#"{"methodConfig": [{"timeout": "1s"}, {"name": [{"service": "s"}], "timeout": "2s"}]}"#;
    let retry = load(nameless);
    assert_eq!(retry.policy_for("/s/m").and_then(|p| p.deadline()), Some(Duration::from_secs(2)));
    assert!(retry.policy_for("/t/m").is_none());
    // An empty `name` list names nothing either.
    assert!(load(r#"{"methodConfig": [{"name": [], "timeout": "1s"}]}"#).policy_for("/s/m").is_none());
    // Fields the retry layer does not read are no reason to refuse the config.
    let other = r#"{"loadBalancingPolicy": "round_robin", "methodConfig": [{"name": [{"service": "s"}],
        "waitForReady": true, "maxRequestMessageBytes": 1024}]}"#;
    assert_eq!(load(other).policy_for("/s/m").map(|p| p.max_attempts()), Some(1));
}

#[test]
fn what_a6_refuses_or_the_layer_cannot_honour_is_refused_naming_the_field() {
    let hedging = r#""hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.5s", "nonFatalStatusCodes": ["UNAVAILABLE"]}"#;
    let p = "methodConfig[0].retryPolicy";
    let cases: Vec<(String, String, &str)> = vec![
        // A hedging policy is loaded (tests/grpc_hedging.rs), but never beside a retry policy.
        (
            r#"{"methodConfig": [{"name": [{"service": "s"}], "hedgingPolicy": {"maxAttempts": 1}}]}"#.to_owned(),
            "methodConfig[0].hedgingPolicy.maxAttempts".into(),
            "2 or more",
        ),
        (
            format!(r#"{{"methodConfig": [{{"name": [{{"service": "s"}}], "retryPolicy": {{{POLICY}}}, {hedging}}}]}}"#),
            "methodConfig[0].hedgingPolicy".into(),
            "only one of retryPolicy and hedgingPolicy",
        ),
        (edited(r#""maxAttempts": 3"#, r#""maxAttempts": 1"#), format!("{p}.maxAttempts"), "2 or more"),
        (edited(r#""maxAttempts": 3"#, r#""maxAttempts": 2.5"#), format!("{p}.maxAttempts"), "whole number"),
        (edited(r#""maxAttempts": 3"#, r#""maxAttempts": -3"#), format!("{p}.maxAttempts"), "whole number"),
        (edited(r#""maxAttempts": 3"#, r#""maxAttempts": "3""#), format!("{p}.maxAttempts"), "whole number"),
        (edited(r#""initialBackoff": "0.1s""#, r#""initialBackoff": "0s""#), format!("{p}.initialBackoff"), "above 0"),
        (edited(r#""maxBackoff": "1s""#, r#""maxBackoff": "1""#), format!("{p}.maxBackoff"), "duration"),
        (edited(r#""maxBackoff": "1s""#, r#""maxBackoff": "-1s""#), format!("{p}.maxBackoff"), "duration"),
        (edited(r#""backoffMultiplier": 2"#, r#""backoffMultiplier": 0"#), format!("{p}.backoffMultiplier"), "above 0"),
        (edited(r#""backoffMultiplier": 2"#, r#""backoffMultiplier": -1.5"#), format!("{p}.backoffMultiplier"), "above 0"),
        (edited(r#""backoffMultiplier": 2"#, r#""backoffMultiplier": "2""#), format!("{p}.backoffMultiplier"), "number"),
        (edited(r#"["UNAVAILABLE"]"#, "[]"), format!("{p}.retryableStatusCodes"), "at least one"),
        (edited(r#"["UNAVAILABLE"]"#, r#""UNAVAILABLE""#), format!("{p}.retryableStatusCodes"), "array"),
        (edited(r#"["UNAVAILABLE"]"#, "[17]"), format!("{p}.retryableStatusCodes[0]"), "not a gRPC status code"),
        (edited(r#"["UNAVAILABLE"]"#, "[14.5]"), format!("{p}.retryableStatusCodes[0]"), "not a gRPC status code"),
        (edited(r#"["UNAVAILABLE"]"#, r#"["14"]"#), format!("{p}.retryableStatusCodes[0]"), "not a gRPC status code"),
        (
            edited(r#"["UNAVAILABLE"]"#, r#"["UNAVAILABLE", "UN_AVAILABLE"]"#),
            format!("{p}.retryableStatusCodes[1]"),
            "not a gRPC status code",
        ),
        (
            with_policy(&format!(r#"{POLICY}, "perAttemptRecvTimeout": "1s""#)),
            format!("{p}.perAttemptRecvTimeout"),
            "not supported",
        ),
        (throttled(r#""maxTokens": 0, "tokenRatio": 0.1"#), "retryThrottling.maxTokens".into(), "1..=1000"),
        (throttled(r#""maxTokens": 1001, "tokenRatio": 0.1"#), "retryThrottling.maxTokens".into(), "1..=1000"),
        (throttled(r#""maxTokens": 10.5, "tokenRatio": 0.1"#), "retryThrottling.maxTokens".into(), "JSON integer"),
        (throttled(r#""tokenRatio": 0.1"#), "retryThrottling.maxTokens".into(), "is required"),
        (throttled(r#""maxTokens": 10"#), "retryThrottling.tokenRatio".into(), "is required"),
        (throttled(r#""maxTokens": 10, "tokenRatio": 0"#), "retryThrottling.tokenRatio".into(), "above 0"),
        (throttled(r#""maxTokens": 10, "tokenRatio": -0.1"#), "retryThrottling.tokenRatio".into(), "above 0"),
        (throttled(r#""maxTokens": 10, "tokenRatio": 0.0009"#), "retryThrottling.tokenRatio".into(), "0.001"),
        // gRPC refuses a method named twice.
        (
            r#"{"methodConfig": [{"name": [{"service": "s"}]}, {"name": [{"service": "t"}, {"service": "s"}]}]}"#
                .into(),
            "methodConfig[1].name[1]".into(),
            "already names",
        ),
        (
            r#"{"methodConfig": [{"name": [{}, {"service": ""}]}]}"#.into(),
            "methodConfig[0].name[1]".into(),
            "already names",
        ),
        (r#"{"methodConfig": [{"name": [{"method": "m"}]}]}"#.into(), "methodConfig[0].name[0].method".into(), "service"),
        (r#"{"methodConfig": [{"name": {}}]}"#.into(), "methodConfig[0].name".into(), "array"),
    ];
    for (json, field, problem) in cases {
        let error = match GrpcRetry::from_service_config(&json) {
            Ok(retry) => panic!("loaded {json}: {retry:?}"),
            Err(error) => error,
        };
        assert_eq!(error.field(), field, "{json}: {error}");
        let shown = error.to_string();
        assert!(shown.starts_with(&format!("invalid gRPC service config: {field}: ")), "{shown}");
        assert!(shown.contains(problem), "{json}: {shown}");
    }
}
