//! Loading a gRPC service config's retry settings (gRFC A6 "Integration with
//! Service Config").
//!
//! The JSON is walked by hand rather than derived so that every error can name
//! the exact field (`methodConfig[1].retryPolicy.maxBackoff`).

use super::code::{CodeSet, by_name, code_number};
use super::{GrpcRetry, MethodName, MethodRetry};
use retryscope::budget::{MAX_TOKENS, TokenBucket, TokenBucketBuilder};
use retryscope::{Jitter, MAX_DURATION, Policy};
use serde_json::{Map, Value};
use std::fmt;
use std::time::Duration;

/// gRPC clients treat a `maxAttempts` above 5 as 5 (A6).
const MAX_ATTEMPTS: u64 = 5;
/// Method configs and names are bounded: a config is operator input, but an
/// absurd one should be refused, not held.
const MAX_ENTRIES: usize = 10_000;

/// A service config the layer refused, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfigError {
    field: String,
    problem: String,
}

impl ServiceConfigError {
    fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self { field: field.into(), problem: problem.into() }
    }

    /// The JSON path of the bad field (`methodConfig[0].retryPolicy.maxAttempts`),
    /// or empty for a syntax error.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for ServiceConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "invalid gRPC service config: {}", self.problem)
        } else {
            write!(f, "invalid gRPC service config: {}: {}", self.field, self.problem)
        }
    }
}

impl std::error::Error for ServiceConfigError {}

type Result<T> = std::result::Result<T, ServiceConfigError>;

pub(super) fn parse(json: &str) -> Result<GrpcRetry> {
    let root: Value = serde_json::from_str(json).map_err(|e| ServiceConfigError::new("", e.to_string()))?;
    let root = object(&root, "")?;
    let mut methods = Vec::new();
    if let Some(configs) = root.get("methodConfig") {
        let configs = array(configs, "methodConfig")?;
        for (i, config) in configs.iter().enumerate() {
            methods.push(method_config(config, &format!("methodConfig[{i}]"))?);
        }
    }
    let throttling = match root.get("retryThrottling") {
        Some(value) => Some(throttling(value, "retryThrottling")?),
        None => None,
    };
    Ok(GrpcRetry { methods, throttling })
}

fn method_config(value: &Value, at: &str) -> Result<MethodRetry> {
    let config = object(value, at)?;
    let names_at = format!("{at}.name");
    let names = array(required(config, "name", at)?, &names_at)?
        .iter()
        .enumerate()
        .map(|(i, name)| method_name(name, &format!("{names_at}[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    if names.is_empty() {
        return Err(ServiceConfigError::new(names_at, "must name at least one method"));
    }
    if config.contains_key("hedgingPolicy") && config.contains_key("retryPolicy") {
        return Err(ServiceConfigError::new(
            format!("{at}.hedgingPolicy"),
            "only one of retryPolicy and hedgingPolicy may be set",
        ));
    }
    let timeout = match config.get("timeout") {
        Some(t) => Some(positive(duration(t, &format!("{at}.timeout"))?, &format!("{at}.timeout"))?),
        None => None,
    };
    let (builder, codes) = match config.get("retryPolicy") {
        Some(policy) => retry_policy(policy, &format!("{at}.retryPolicy"))?,
        // Named but not retried: sent once, within its timeout.
        None => (Policy::builder().max_attempts(1), CodeSet::EMPTY),
    };
    let builder = match timeout {
        Some(t) => builder.deadline(t),
        None => builder.no_deadline(),
    };
    let policy = builder.build().map_err(|e| ServiceConfigError::new(at, e.to_string()))?;
    Ok(MethodRetry { names, policy, codes })
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

    let attempts = required(policy, "maxAttempts", at)?
        .as_u64()
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
    if !(multiplier.is_finite() && multiplier > 0.0) {
        return Err(ServiceConfigError::new(
            field("backoffMultiplier"),
            format!("must be above 0, got {multiplier}"),
        ));
    }
    if multiplier < 1.0 {
        return Err(ServiceConfigError::new(
            field("backoffMultiplier"),
            format!("values below 1 (shrinking backoff) are not supported, got {multiplier}"),
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
        .base_delay(initial.min(max))
        .max_delay(max)
        .multiplier(multiplier)
        .jitter(Jitter::Full);
    Ok((builder, set))
}

/// A status code by name (`"UNAVAILABLE"`) or number (`14`).
fn status_code(value: &Value, at: &str) -> Result<u8> {
    let code = match value {
        Value::String(name) => by_name(name),
        Value::Number(n) => n.as_i64().filter(|n| (0..=16).contains(n)).map(code_number),
        _ => None,
    };
    match code {
        Some(0) => Err(ServiceConfigError::new(at, "OK is not a failure")),
        Some(code) => Ok(code),
        None => Err(ServiceConfigError::new(at, format!("not a gRPC status code: {value}"))),
    }
}

fn throttling(value: &Value, at: &str) -> Result<TokenBucketBuilder> {
    let throttling = object(value, at)?;
    let max_tokens = required(throttling, "maxTokens", at)?
        .as_u64()
        .filter(|n| (1..=u64::from(MAX_TOKENS)).contains(n))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            ServiceConfigError::new(
                format!("{at}.maxTokens"),
                format!("must be a whole number within 1..={MAX_TOKENS}"),
            )
        })?;
    let ratio = required(throttling, "tokenRatio", at)?
        .as_f64()
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or_else(|| ServiceConfigError::new(format!("{at}.tokenRatio"), "must be a number above 0"))?;
    // gRPC uses three decimals and caps nothing else; a ratio above 1 would
    // refill faster than failures drain, which the bucket refuses.
    let builder = TokenBucket::builder().max_tokens(max_tokens).token_ratio(ratio);
    builder.build().map_err(|e| ServiceConfigError::new(format!("{at}.tokenRatio"), e.to_string()))?;
    Ok(builder)
}

/// A protobuf JSON `Duration`: decimal seconds with an `s` suffix (`"0.1s"`,
/// `".01s"`, `"120s"`), at most nine fractional digits.
fn duration(value: &Value, at: &str) -> Result<Duration> {
    let bad = || ServiceConfigError::new(at, format!("must be a duration such as \"0.1s\", got {value}"));
    let text = value.as_str().ok_or_else(bad)?;
    let number = text.strip_suffix('s').ok_or_else(bad)?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty())
        || fraction.len() > 9
        || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let secs: u64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad())? };
    let nanos: u32 =
        if fraction.is_empty() { 0 } else { format!("{fraction:0<9}").parse().map_err(|_| bad())? };
    let d = Duration::new(secs, 0).checked_add(Duration::from_nanos(u64::from(nanos))).ok_or_else(bad)?;
    if d > MAX_DURATION {
        return Err(ServiceConfigError::new(at, format!("must be at most {MAX_DURATION:?}, got {text}")));
    }
    Ok(d)
}

fn positive(d: Duration, at: &str) -> Result<Duration> {
    if d.is_zero() { Err(ServiceConfigError::new(at, "must be above 0")) } else { Ok(d) }
}

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>> {
    value.as_object().ok_or_else(|| ServiceConfigError::new(at, "must be a JSON object"))
}

fn array<'a>(value: &'a Value, at: &str) -> Result<&'a Vec<Value>> {
    let items = value.as_array().ok_or_else(|| ServiceConfigError::new(at, "must be a JSON array"))?;
    if items.len() > MAX_ENTRIES {
        return Err(ServiceConfigError::new(at, format!("more than {MAX_ENTRIES} entries")));
    }
    Ok(items)
}

fn required<'a>(map: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a Value> {
    let path = if at.is_empty() { key.to_owned() } else { format!("{at}.{key}") };
    map.get(key).ok_or_else(|| ServiceConfigError::new(path, "is required"))
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
            (r#"{"methodConfig": [{}]}"#, "methodConfig[0].name"),
            (r#"{"methodConfig": [{"name": []}]}"#, "methodConfig[0].name"),
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
                &policy(&GOOD.replace("\"backoffMultiplier\": 2", "\"backoffMultiplier\": 0.5")),
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
            (
                &policy(&GOOD.replace("\"UNAVAILABLE\"", "0")),
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
