//! Loading a gRPC service config's retry settings (gRFC A6 "Integration with
//! Service Config").
//!
//! The JSON is walked by hand rather than derived so that every error can name
//! the exact field (`methodConfig[1].retryPolicy.maxBackoff`).

mod error;
mod json;

pub use error::ServiceConfigError;

use super::code::CodeSet;
use super::{GrpcRetry, Hedging, MethodName, MethodRetry};
use error::Result;
use json::{array, duration, object, positive, required, status_code, whole_number};
use retryscope::TokenBucket;
use retryscope::budget::{MAX_TOKENS, TokenBucketBuilder};
use retryscope::{Jitter, Policy};
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;

/// gRPC clients treat a `maxAttempts` above 5 as 5 (A6).
const MAX_ATTEMPTS: u64 = 5;

pub(super) fn parse(json: &str) -> Result<GrpcRetry> {
    let root: Value = serde_json::from_str(json).map_err(ServiceConfigError::syntax)?;
    let root = object(&root, "")?;
    let mut methods = Vec::new();
    if let Some(configs) = root.get("methodConfig") {
        let configs = array(configs, "methodConfig")?;
        let mut seen = HashSet::new();
        for (i, config) in configs.iter().enumerate() {
            if let Some(method) = method_config(config, &format!("methodConfig[{i}]"), &mut seen)? {
                methods.push(method);
            }
        }
    }
    let throttling = match root.get("retryThrottling") {
        Some(value) => Some(throttling(value, "retryThrottling")?),
        None => None,
    };
    Ok(GrpcRetry { methods, throttling })
}

/// One `methodConfig` entry, or `None` for one that names no method (gRPC
/// skips those). `seen` holds the names of the entries before it: gRPC refuses
/// a config that names a method twice.
fn method_config(value: &Value, at: &str, seen: &mut HashSet<MethodName>) -> Result<Option<MethodRetry>> {
    let config = object(value, at)?;
    let names_at = format!("{at}.name");
    let Some(names) = config.get("name") else {
        // grpc-go and grpc-java skip an entry without names: it applies to nothing.
        return Ok(None);
    };
    let names = array(names, &names_at)?
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let at = format!("{names_at}[{i}]");
            let name = method_name(name, &at)?;
            if !seen.insert(name.clone()) {
                return Err(ServiceConfigError::new(at, "names a method an earlier name already names"));
            }
            Ok(name)
        })
        .collect::<Result<Vec<_>>>()?;
    if config.contains_key("retryPolicy") && config.contains_key("hedgingPolicy") {
        return Err(ServiceConfigError::new(
            format!("{at}.hedgingPolicy"),
            "only one of retryPolicy and hedgingPolicy may be set (gRFC A6)",
        ));
    }
    let timeout = match config.get("timeout") {
        Some(t) => Some(positive(duration(t, &format!("{at}.timeout"))?, &format!("{at}.timeout"))?),
        None => None,
    };
    let (builder, codes, hedging) = match (config.get("retryPolicy"), config.get("hedgingPolicy")) {
        (Some(policy), _) => {
            let (builder, codes) = retry_policy(policy, &format!("{at}.retryPolicy"))?;
            (builder, codes, None)
        }
        // A hedged call is never retried after its copies: one attempt each,
        // within the method's timeout.
        (None, Some(policy)) => {
            let (hedging, codes) = hedging_policy(policy, &format!("{at}.hedgingPolicy"))?;
            (Policy::builder().max_attempts(1), codes, Some(hedging))
        }
        // Named but not retried: sent once, within its timeout.
        (None, None) => (Policy::builder().max_attempts(1), CodeSet::EMPTY, None),
    };
    let builder = match timeout {
        Some(t) => builder.deadline(t),
        None => builder.no_deadline(),
    };
    // A6 has no time limit per attempt: the call's deadline spans them all.
    // A limit of the engine's (a preset's 5 s) would cut a slow answer that
    // gRPC waits for and retry it whatever `retryableStatusCodes` say.
    let builder = builder.no_attempt_timeout();
    let policy = builder.build().map_err(|e| ServiceConfigError::new(at, e.to_string()))?;
    if let Some(hedging) = hedging {
        // Checked now so that every call can build it.
        hedging
            .policy(&policy)
            .map_err(|e| ServiceConfigError::new(format!("{at}.hedgingPolicy"), e.to_string()))?;
    }
    Ok(Some(MethodRetry { names, policy, codes, hedging }))
}

fn method_name(value: &Value, at: &str) -> Result<MethodName> {
    let name = object(value, at)?;
    let text = |key: &str| -> Result<Option<String>> {
        match name.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ServiceConfigError::new(format!("{at}.{key}"), "must be a string")),
        }
    };
    let (service, method) = (text("service")?, text("method")?);
    if service.is_none() && method.is_some() {
        return Err(ServiceConfigError::new(format!("{at}.method"), "a method needs its service"));
    }
    Ok(MethodName { service, method })
}

fn retry_policy(value: &Value, at: &str) -> Result<(retryscope::PolicyBuilder, CodeSet)> {
    let policy = object(value, at)?;
    let field = |key: &str| format!("{at}.{key}");

    let attempts = whole_number(required(policy, "maxAttempts", at)?)
        .ok_or_else(|| ServiceConfigError::new(field("maxAttempts"), "must be a whole number"))?;
    if attempts < 2 {
        return Err(ServiceConfigError::new(
            field("maxAttempts"),
            format!("must be 2 or more, got {attempts}"),
        ));
    }
    let initial = positive(
        duration(required(policy, "initialBackoff", at)?, &field("initialBackoff"))?,
        &field("initialBackoff"),
    )?;
    let max =
        positive(duration(required(policy, "maxBackoff", at)?, &field("maxBackoff"))?, &field("maxBackoff"))?;
    let multiplier = required(policy, "backoffMultiplier", at)?
        .as_f64()
        .ok_or_else(|| ServiceConfigError::new(field("backoffMultiplier"), "must be a number"))?;
    // A6: "MUST be a JSON number greater than 0"; below 1 the delay shrinks.
    if !(multiplier.is_finite() && multiplier > 0.0) {
        return Err(ServiceConfigError::new(
            field("backoffMultiplier"),
            format!("must be above 0, got {multiplier}"),
        ));
    }
    if policy.contains_key("perAttemptRecvTimeout") {
        return Err(ServiceConfigError::new(
            field("perAttemptRecvTimeout"),
            "is not supported (it is not part of gRFC A6): remove it",
        ));
    }
    let codes_at = field("retryableStatusCodes");
    let codes = array(required(policy, "retryableStatusCodes", at)?, &codes_at)?;
    if codes.is_empty() {
        return Err(ServiceConfigError::new(codes_at, "must name at least one status code"));
    }
    let mut set = CodeSet::EMPTY;
    for (i, code) in codes.iter().enumerate() {
        set = set.with(status_code(code, &format!("{codes_at}[{i}]"))?);
    }
    let builder = Policy::builder()
        .max_attempts(u32::try_from(attempts.min(MAX_ATTEMPTS)).unwrap_or(5))
        // gRPC caps every step, the first too: min(initialBackoff, maxBackoff).
        .base_delay(initial.min(max))
        .max_delay(max)
        .multiplier(multiplier)
        .jitter(Jitter::Grpc);
    Ok((builder, set))
}

/// A6 `hedgingPolicy`: `maxAttempts` (required, 2 or more, above 5 taken as
/// 5), `hedgingDelay` (0 s when absent: every copy at once) and
/// `nonFatalStatusCodes` (optional, as gRPC's documentation and grpc-java take
/// it: absent or empty, every status but OK is fatal).
fn hedging_policy(value: &Value, at: &str) -> Result<(Hedging, CodeSet)> {
    let policy = object(value, at)?;
    let field = |key: &str| format!("{at}.{key}");
    let copies = whole_number(required(policy, "maxAttempts", at)?)
        .ok_or_else(|| ServiceConfigError::new(field("maxAttempts"), "must be a whole number"))?;
    if copies < 2 {
        return Err(ServiceConfigError::new(
            field("maxAttempts"),
            format!("must be 2 or more, got {copies}"),
        ));
    }
    let delay = match policy.get("hedgingDelay") {
        Some(delay) => duration(delay, &field("hedgingDelay"))?,
        None => Duration::ZERO,
    };
    let mut codes = CodeSet::EMPTY;
    if let Some(listed) = policy.get("nonFatalStatusCodes") {
        let codes_at = field("nonFatalStatusCodes");
        for (i, code) in array(listed, &codes_at)?.iter().enumerate() {
            codes = codes.with(status_code(code, &format!("{codes_at}[{i}]"))?);
        }
    }
    let max_copies = u32::try_from(copies.min(MAX_ATTEMPTS)).unwrap_or(5);
    Ok((Hedging { max_copies, delay }, codes))
}

fn throttling(value: &Value, at: &str) -> Result<TokenBucketBuilder> {
    let throttling = object(value, at)?;
    let tokens_at = format!("{at}.maxTokens");
    let max_tokens = required(throttling, "maxTokens", at)?;
    let max_tokens = whole_number(max_tokens)
        .ok_or_else(|| {
            let problem = if max_tokens.as_f64().is_some_and(|f| f > 0.0 && f <= f64::from(MAX_TOKENS)) {
                // grpc-go and grpc-java would keep the fraction; A6 asks for a
                // JSON integer, and the bucket counts whole tokens.
                format!("must be a whole number (A6: a JSON integer), got {max_tokens}")
            } else {
                format!("must be a whole number within 1..={MAX_TOKENS}, got {max_tokens}")
            };
            ServiceConfigError::new(&tokens_at, problem)
        })?
        .try_into()
        .ok()
        .filter(|n| (1..=MAX_TOKENS).contains(n))
        .ok_or_else(|| {
            ServiceConfigError::new(&tokens_at, format!("must be a whole number within 1..={MAX_TOKENS}"))
        })?;
    let ratio_at = format!("{at}.tokenRatio");
    let ratio = required(throttling, "tokenRatio", at)?
        .as_f64()
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or_else(|| ServiceConfigError::new(&ratio_at, "must be a number above 0"))?;
    // A6 ignores the decimals beyond the third (the bucket truncates: 0.5466 is
    // 0.546), so a ratio below 0.001 would be 0: successes would never refill
    // the bucket, and once throttled the channel would never retry again.
    let builder = TokenBucket::builder().max_tokens(max_tokens).token_ratio(ratio);
    builder.build().map_err(|_| {
        ServiceConfigError::new(
            &ratio_at,
            format!(
                "must be at least 0.001: A6 keeps three decimals, and a smaller ratio, \
                 0, would never refill the bucket; got {ratio}"
            ),
        )
    })?;
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(json: &str) -> ServiceConfigError {
        match parse(json) {
            Ok(config) => panic!("accepted: {config:?}"),
            Err(e) => e,
        }
    }

    fn policy(fields: &str) -> String {
        format!(r#"{{"methodConfig": [{{"name": [{{"service": "s"}}], "retryPolicy": {{{fields}}}}}]}}"#)
    }

    const GOOD: &str = r#""maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]"#;

    #[test]
    fn durations() {
        let d = |s: &str| duration(&Value::String(s.into()), "x");
        assert_eq!(d("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(d(".01s"), Ok(Duration::from_millis(10)));
        assert_eq!(d("120s"), Ok(Duration::from_secs(120)));
        assert_eq!(d("1.000000001s"), Ok(Duration::new(1, 1)));
        for bad in ["1", "s", ".s", "-1s", "1.5ms", "0.1234567891s", "1e3s", "100000000s"] {
            assert!(d(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_bad_field_is_named() {
        let cases = [
            ("[]", ""),
            ("{", ""),
            (r#"{"methodConfig": {}}"#, "methodConfig"),
            (r#"{"methodConfig": [{"name": [{"method": "m"}]}]}"#, "methodConfig[0].name[0].method"),
            (r#"{"methodConfig": [{"name": [{"service": 3}]}]}"#, "methodConfig[0].name[0].service"),
            (r#"{"methodConfig": [{"name": [{}], "timeout": "0s"}]}"#, "methodConfig[0].timeout"),
            (
                &policy(&GOOD.replace("\"maxAttempts\": 3", "\"maxAttempts\": 1")),
                "methodConfig[0].retryPolicy.maxAttempts",
            ),
            (
                &policy(&GOOD.replace("\"maxAttempts\": 3", "\"maxAttempts\": 2.5")),
                "methodConfig[0].retryPolicy.maxAttempts",
            ),
            (&policy(&GOOD.replace("\"maxAttempts\": 3, ", "")), "methodConfig[0].retryPolicy.maxAttempts"),
            (&policy(&GOOD.replace("0.1s", "0s")), "methodConfig[0].retryPolicy.initialBackoff"),
            (&policy(&GOOD.replace("\"1s\"", "1")), "methodConfig[0].retryPolicy.maxBackoff"),
            (
                &policy(&GOOD.replace("\"backoffMultiplier\": 2", "\"backoffMultiplier\": 0")),
                "methodConfig[0].retryPolicy.backoffMultiplier",
            ),
            (
                &policy(&GOOD.replace("[\"UNAVAILABLE\"]", "[]")),
                "methodConfig[0].retryPolicy.retryableStatusCodes",
            ),
            (
                &policy(&GOOD.replace("UNAVAILABLE", "UNAVAILABEL")),
                "methodConfig[0].retryPolicy.retryableStatusCodes[0]",
            ),
            (r#"{"retryThrottling": {"maxTokens": 0, "tokenRatio": 0.1}}"#, "retryThrottling.maxTokens"),
            (r#"{"retryThrottling": {"maxTokens": 1001, "tokenRatio": 0.1}}"#, "retryThrottling.maxTokens"),
            (r#"{"retryThrottling": {"maxTokens": 10}}"#, "retryThrottling.tokenRatio"),
            (r#"{"retryThrottling": {"maxTokens": 10, "tokenRatio": -1}}"#, "retryThrottling.tokenRatio"),
        ];
        for (json, field) in cases {
            let e = err(json);
            assert_eq!(e.field(), field, "{json}: {e}");
            assert!(e.to_string().starts_with("invalid gRPC service config: "), "{e}");
        }
    }

    fn hedged(fields: &str) -> String {
        format!(r#"{{"methodConfig": [{{"name": [{{"service": "s"}}], "hedgingPolicy": {{{fields}}}}}]}}"#)
    }

    #[test]
    fn a_hedging_policy_is_loaded_with_its_defaults_and_its_cap() {
        let config = parse(&hedged(r#""maxAttempts": 9"#)).expect("valid");
        let call = config.for_path("/s/m").expect("configured");
        assert_eq!(call.hedging, Some(Hedging { max_copies: 5, delay: Duration::ZERO }));
        assert_eq!(call.codes, CodeSet::EMPTY);
        // One attempt per copy: a hedged call is never retried after them.
        assert_eq!(call.policy.max_attempts(), 1);

        let config = parse(&hedged(
            r#""maxAttempts": 4, "hedgingDelay": ".5s", "nonFatalStatusCodes": ["UNAVAILABLE", 13]"#,
        ))
        .expect("valid");
        let call = config.for_path("/s/m").expect("configured");
        assert_eq!(call.hedging, Some(Hedging { max_copies: 4, delay: Duration::from_millis(500) }));
        assert!(call.codes.contains(tonic::Code::Unavailable) && call.codes.contains(tonic::Code::Internal));
        assert!(!call.codes.contains(tonic::Code::Aborted));
    }

    #[test]
    fn every_bad_hedging_field_is_named() {
        let cases = [
            (hedged(r#""hedgingDelay": "1s""#), "methodConfig[0].hedgingPolicy.maxAttempts"),
            (hedged(r#""maxAttempts": 1"#), "methodConfig[0].hedgingPolicy.maxAttempts"),
            (hedged(r#""maxAttempts": "3""#), "methodConfig[0].hedgingPolicy.maxAttempts"),
            (
                hedged(r#""maxAttempts": 3, "hedgingDelay": "1""#),
                "methodConfig[0].hedgingPolicy.hedgingDelay",
            ),
            (
                hedged(r#""maxAttempts": 3, "hedgingDelay": "-1s""#),
                "methodConfig[0].hedgingPolicy.hedgingDelay",
            ),
            (
                hedged(r#""maxAttempts": 3, "nonFatalStatusCodes": "UNAVAILABLE""#),
                "methodConfig[0].hedgingPolicy.nonFatalStatusCodes",
            ),
            (
                hedged(r#""maxAttempts": 3, "nonFatalStatusCodes": ["UNAVAILABLE", "NOPE"]"#),
                "methodConfig[0].hedgingPolicy.nonFatalStatusCodes[1]",
            ),
            (
                r#"{"methodConfig": [{"name": [{}], "hedgingPolicy": 3}]}"#.to_owned(),
                "methodConfig[0].hedgingPolicy",
            ),
            (
                format!(
                    r#"{{"methodConfig": [{{"name": [{{}}], "hedgingPolicy": {{"maxAttempts": 2}}, "retryPolicy": {{{GOOD}}}}}]}}"#
                ),
                "methodConfig[0].hedgingPolicy",
            ),
        ];
        for (json, field) in cases {
            let e = err(&json);
            assert_eq!(e.field(), field, "{json}: {e}");
        }
    }

    #[test]
    fn codes_by_number_and_name() {
        let config = parse(&policy(&GOOD.replace("[\"UNAVAILABLE\"]", "[14, \"ABORTED\"]"))).expect("valid");
        let codes = config.codes_for("/s/m").expect("configured");
        assert!(codes.contains(tonic::Code::Unavailable) && codes.contains(tonic::Code::Aborted));
    }

    #[test]
    fn specific_names_win() {
        let json = r#"{"methodConfig": [
            {"name": [{}], "timeout": "5s"},
            {"name": [{"service": "s"}], "retryPolicy": {"maxAttempts": 3, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}},
            {"name": [{"service": "s", "method": "m"}], "retryPolicy": {"maxAttempts": 9, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["ABORTED"]}}
        ]}"#;
        let config = parse(json).expect("valid");
        assert_eq!(config.policy_for("/s/m").map(|p| p.max_attempts()), Some(5));
        assert_eq!(config.policy_for("/s/other").map(|p| p.max_attempts()), Some(3));
        let default = config.policy_for("/t/x").expect("default");
        assert_eq!((default.max_attempts(), default.deadline()), (1, Some(Duration::from_secs(5))));
    }
}
