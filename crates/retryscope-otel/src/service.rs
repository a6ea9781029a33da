//! The retry log's `service` field: the name of the service that retries, as
//! its telemetry resource has it.
//!
//! One name per process, resolved once: the name a setup built its resource
//! with ([`OtlpConfig`](crate::OtlpConfig), recorded by `set`), else the
//! environment's (`OTEL_SERVICE_NAME`, else `service.name` in
//! `OTEL_RESOURCE_ATTRIBUTES`), read the first time an observer or a retry log
//! is built. Observers copy it when they are built, so no event reads the
//! environment or takes a lock.

use std::sync::{Mutex, OnceLock, PoisonError};

/// The name a setup recorded, if one did: it wins over the environment's.
static FROM_SETUP: Mutex<Option<&'static str>> = Mutex::new(None);

/// The environment's name, read once.
static FROM_ENV: OnceLock<Option<&'static str>> = OnceLock::new();

/// The names given out so far: each distinct name is leaked once, so that
/// observers hold a `&'static str` (a copy per operation, no reference count).
/// A process configures one name, or a few in tests.
static INTERNED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The service's name, if any is known.
pub(crate) fn name() -> Option<&'static str> {
    let set = *FROM_SETUP.lock().unwrap_or_else(PoisonError::into_inner);
    set.or_else(|| {
        *FROM_ENV.get_or_init(|| {
            from_env(std::env::var("OTEL_SERVICE_NAME").ok(), std::env::var("OTEL_RESOURCE_ATTRIBUTES").ok())
                .map(|name| intern(&name))
        })
    })
}

/// Records the name a setup built its resource with, for the observers built
/// after it.
#[cfg_attr(not(feature = "otlp"), allow(dead_code))]
pub(crate) fn set(name: &str) {
    let name = intern(name);
    *FROM_SETUP.lock().unwrap_or_else(PoisonError::into_inner) = Some(name);
}

fn intern(name: &str) -> &'static str {
    let mut interned = INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = interned.iter().find(|known| **known == name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.into());
    interned.push(leaked);
    leaked
}

/// `OTEL_SERVICE_NAME` when set and not empty, else the `service.name` of
/// `OTEL_RESOURCE_ATTRIBUTES` (`key=value` pairs separated by commas, values
/// percent-encoded), as the SDK's resource reads them.
fn from_env(service_name: Option<String>, attributes: Option<String>) -> Option<String> {
    let service_name = service_name.map(|name| name.trim().to_owned()).filter(|name| !name.is_empty());
    service_name.or_else(|| {
        attributes?.split(',').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            (key.trim() == "service.name")
                .then(|| percent_decode(value.trim()))
                .filter(|name| !name.is_empty())
        })
    })
}

/// Decodes `%XX` escapes; a malformed escape is kept as it is.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(high), Some(low)) => {
                // Two hex digits make at most 255.
                decoded.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                i += 3;
            }
            (byte, _, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(service_name: Option<&str>, attributes: Option<&str>) -> Option<String> {
        from_env(service_name.map(str::to_owned), attributes.map(str::to_owned))
    }

    #[test]
    fn otel_service_name_wins_over_the_resource_attributes() {
        assert_eq!(env(Some("checkout"), Some("service.name=other")).as_deref(), Some("checkout"));
        assert_eq!(env(Some(" "), Some("service.name=other")).as_deref(), Some("other"));
    }

    #[test]
    fn the_resource_attributes_are_read_pair_by_pair_and_decoded() {
        let attributes = "deployment.environment=prod, service.name = my%20shop ,team=a";
        assert_eq!(env(None, Some(attributes)).as_deref(), Some("my shop"));
        assert_eq!(env(None, Some("team=a")), None);
        assert_eq!(env(None, Some("service.name=")), None);
        assert_eq!(env(None, None), None);
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn a_name_is_interned_once() {
        assert!(std::ptr::eq(intern("interned-once"), intern("interned-once")));
    }
}
