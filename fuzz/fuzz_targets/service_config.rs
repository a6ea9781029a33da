//! The gRPC service config (JSON) from untrusted text.
//!
//! Properties: loading is total (a config or an error, never a panic); text
//! that is not JSON is refused, with an empty field path; an error's message
//! names the field and says what is wrong; a loaded config gives every
//! method it names a policy of at most 5 attempts (gRPC's cap) and a bucket
//! exactly when it configures throttling.
#![no_main]

use libfuzzer_sys::fuzz_target;
use retryscope_tower::grpc::GrpcRetry;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let json = serde_json::from_str::<Value>(text);
    let retry = match GrpcRetry::from_service_config(text) {
        Ok(retry) => retry,
        Err(e) => {
            let message = e.to_string();
            assert!(message.contains(e.problem()) && message.contains(e.field()), "{message}");
            // A syntax error has no field to name. (The root itself is named
            // by the empty path too, e.g. for `[]`.)
            assert!(json.is_ok() || e.field().is_empty(), "{message} for {text}");
            return;
        }
    };
    let Ok(json) = json else { panic!("not JSON, yet loaded: {text}") };
    assert_eq!(retry.token_bucket().is_some(), retry.is_throttled());
    assert_eq!(retry.is_throttled(), json.get("retryThrottling").is_some());
    for path in named_paths(&json) {
        let policy = retry.policy_for(&path).unwrap_or_else(|| panic!("{path} is named but has no policy"));
        assert!((1..=5).contains(&policy.max_attempts()), "{path}: {} attempts", policy.max_attempts());
    }
    // Any other path is answered too, without a panic.
    let _ = retry.policy_for("/unnamed.Service/Method");
    let _ = retry.codes_for("not a path");
});

/// `/service/method` for every name in `methodConfig[].name[]` that has a
/// service and no slash (a slash would make another path).
fn named_paths(json: &Value) -> Vec<String> {
    let configs = json.get("methodConfig").and_then(Value::as_array).into_iter().flatten();
    let names = configs.filter_map(|c| c.get("name")?.as_array()).flatten();
    names
        .filter_map(|name| {
            let service = name.get("service")?.as_str().filter(|s| !s.is_empty() && !s.contains('/'))?;
            let method = match name.get("method") {
                None => "AnyMethod",
                Some(m) => m.as_str().filter(|m| !m.is_empty() && !m.contains('/'))?,
            };
            Some(format!("/{service}/{method}"))
        })
        .collect()
}
