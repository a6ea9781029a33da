//! The layer's settings and their defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::{
    CONTENT_ENCODING, CONTENT_LANGUAGE, CONTENT_LOCATION, CONTENT_TYPE, ETAG, HeaderName, LOCATION,
};
use http::{Method, request::Parts};

use crate::IDEMPOTENCY_KEY;

/// Names a request's route for `http.route`.
pub(crate) type RouteOf = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// The shortest duration a setting takes (Redis counts expiry in milliseconds).
pub(crate) const MIN_DURATION: Duration = Duration::from_millis(1);

#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) header: HeaderName,
    pub(crate) methods: Vec<Method>,
    pub(crate) require_key: bool,
    pub(crate) keep_server_errors: bool,
    pub(crate) ttl: Duration,
    pub(crate) lease: Duration,
    pub(crate) max_body: usize,
    pub(crate) store_headers: Vec<HeaderName>,
    pub(crate) body_timeout: Duration,
    pub(crate) store_timeout: Duration,
    pub(crate) in_flight_retry_after: Duration,
    pub(crate) route: Option<RouteOf>,
}

impl Settings {
    pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
    pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(5 * 60);
    pub(crate) const DEFAULT_MAX_BODY: usize = 1024 * 1024;
    pub(crate) const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
    pub(crate) const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(2);
    pub(crate) const DEFAULT_IN_FLIGHT_RETRY_AFTER: Duration = Duration::from_secs(1);

    /// The claim's lease: never longer than the entry's life.
    pub(crate) fn lease(&self) -> Duration {
        self.lease.min(self.ttl)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            header: IDEMPOTENCY_KEY,
            methods: vec![Method::POST, Method::PATCH],
            require_key: false,
            keep_server_errors: false,
            ttl: Self::DEFAULT_TTL,
            lease: Self::DEFAULT_LEASE,
            max_body: Self::DEFAULT_MAX_BODY,
            store_headers: vec![
                CONTENT_TYPE,
                CONTENT_ENCODING,
                CONTENT_LANGUAGE,
                LOCATION,
                CONTENT_LOCATION,
                ETAG,
            ],
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
            store_timeout: Self::DEFAULT_STORE_TIMEOUT,
            in_flight_retry_after: Self::DEFAULT_IN_FLIGHT_RETRY_AFTER,
            route: None,
        }
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("header", &self.header)
            .field("methods", &self.methods)
            .field("require_key", &self.require_key)
            .field("keep_server_errors", &self.keep_server_errors)
            .field("ttl", &self.ttl)
            .field("lease", &self.lease)
            .field("max_body", &self.max_body)
            .field("store_headers", &self.store_headers)
            .field("body_timeout", &self.body_timeout)
            .field("store_timeout", &self.store_timeout)
            .field("in_flight_retry_after", &self.in_flight_retry_after)
            .field("route", &self.route.is_some())
            .finish()
    }
}
