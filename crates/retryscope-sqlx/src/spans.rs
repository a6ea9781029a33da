//! Database client attempt spans, as the OpenTelemetry database conventions
//! (stable since semconv 1.26) ask: never the query text, only what names the
//! server, the database and the operation.

use retryscope_otel::{AttemptInfo, MakeAttemptSpan};
use sqlx::PgPool;
use std::fmt;
use tracing::Span;
use tracing::field::Empty;

/// `db.system.name` for PostgreSQL.
pub const DB_SYSTEM: &str = "postgresql";

/// Where a pool connects: the span attributes and the default dependency label.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `server.address`: a host name, an IP address, or a Unix socket's directory.
    pub(crate) address: String,
    /// `server.port`.
    pub(crate) port: u16,
    /// `db.namespace`: the database name, when the options name one.
    pub(crate) namespace: Option<String>,
    /// `host:port/database` (`host:port` without a database name).
    pub(crate) dependency: String,
}

impl Target {
    pub(crate) fn of(pool: &PgPool) -> Self {
        let options = pool.connect_options();
        let address = options.get_host().to_owned();
        let port = options.get_port();
        let namespace = options.get_database().map(str::to_owned);
        let dependency = match &namespace {
            Some(database) => format!("{address}:{port}/{database}"),
            None => format!("{address}:{port}"),
        };
        Self { address, port, namespace, dependency }
    }
}

/// Makes each attempt's span a database client span.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DbAttemptSpan<'a> {
    pub(crate) target: &'a Target,
}

impl MakeAttemptSpan for DbAttemptSpan<'_> {
    /// Named `{db.operation.name} {db.namespace}` (or either alone, or
    /// `postgresql`), as the conventions ask; `db.response.status_code` (the
    /// SQLSTATE) is recorded from inside the attempt when the server answers
    /// with an error, `error.type` by the observer.
    fn make_span(&self, info: &AttemptInfo<'_>) -> Span {
        let target = self.target;
        tracing::info_span!(
            target: retryscope_otel::names::TARGET,
            parent: info.parent,
            "postgresql",
            otel.name = %SpanName { operation: info.operation, namespace: target.namespace.as_deref() },
            otel.kind = "client",
            otel.status_code = Empty,
            retryscope.attempt = info.attempt_value(),
            retryscope.dependency = info.dependency,
            retryscope.operation = info.operation,
            retryscope.config.hash = info.config_hash,
            "error.type" = Empty,
            "db.system.name" = DB_SYSTEM,
            "db.operation.name" = info.operation,
            "db.namespace" = target.namespace.as_deref(),
            "db.response.status_code" = Empty,
            "server.address" = target.address.as_str(),
            "server.port" = i64::from(target.port),
        )
    }
}

/// Records the SQLSTATE of a failed attempt on its span (the current span
/// while the attempt runs).
pub(crate) fn record_sqlstate(error: &sqlx::Error) {
    if let Some(code) = crate::classify::sqlstate(error) {
        Span::current().record("db.response.status_code", &*code);
    }
}

/// Written only when a subscriber takes the span.
struct SpanName<'a> {
    operation: Option<&'a str>,
    namespace: Option<&'a str>,
}

impl fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.operation, self.namespace) {
            (Some(operation), Some(namespace)) => write!(f, "{operation} {namespace}"),
            (Some(name), None) | (None, Some(name)) => f.write_str(name),
            (None, None) => f.write_str(DB_SYSTEM),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_span_name_follows_the_conventions() {
        let name = |operation, namespace| SpanName { operation, namespace }.to_string();
        assert_eq!(name(Some("transfer"), Some("shop")), "transfer shop");
        assert_eq!(name(None, Some("shop")), "shop");
        assert_eq!(name(Some("SELECT"), None), "SELECT");
        assert_eq!(name(None, None), "postgresql");
    }
}
